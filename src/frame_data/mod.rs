// SPDX-License-Identifier: MPL-2.0

//! What travels with a frame besides its pixels: the buffer's GstMetas and
//! an application's per-frame data (the frame's data, bounded, in the
//! channel's slot), and the downstream serialized events (the channel's
//! ordered event queue). Both are opaque bytes to the channel; here they are
//! made from and turned back into GStreamer objects:
//!
//! - [`frame_data_of`] (sink): the blob of `cudaipc_channel::frame_data`
//!   for a buffer: first the application's `CudaIpcFrameData` (see
//!   [`app_data`]), then every meta that can cross ([`metas`]), as far as
//!   the bound lets;
//! - [`apply_frame_data`] (source): those entries back onto the buffer;
//! - [`encode_event`] / [`decode_event`]: the events that cross ([`events`]).
//!
//! What crossed and what did not is counted in a [`MetaReport`], whose
//! [`FrameDataStats`] the elements put into their `stats`. docs/metas.md
//! says which metas cross on which GStreamer.

pub mod app_data;
pub mod events;
pub(crate) mod gst_api;
mod known_metas;
mod legacy;
pub mod meta_wire;
pub mod metas;
mod report;

use std::sync::LazyLock;

use cudaipc_channel::frame_data::{self as wire, Entry, FrameDataWriter};

pub use events::{decode_event, encode_event};
pub use metas::{decode_metas, encode_metas};
#[cfg(test)]
use report::FrameDataStats;
pub use report::MetaReport;

pub(crate) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "cudaipc-framedata",
        gst::DebugColorFlags::empty(),
        Some("Metas, events and application data that cross with the frames"),
    )
});

/// Registers the `CudaIpcFrameData` meta (once); the functions below do it
/// too, plugin init may do it first.
pub fn register() {
    app_data::register();
}

/// Whether this GStreamer serializes metas itself (1.24+); on 1.22 only
/// reference timestamp and custom metas cross, written by the plugin.
pub fn gstreamer_serializes_metas() -> bool {
    gst_api::serialization().is_some()
}

/// The frame data of `buffer`, within `bound` bytes: empty when nothing
/// crosses.
pub fn frame_data_of(buffer: &gst::BufferRef, bound: usize, report: &mut MetaReport) -> Vec<u8> {
    let mut writer = FrameDataWriter::new(bound);
    // The application's data first: the bound drops metas before it.
    app_data::encode(buffer, &mut writer, report);
    encode_metas(buffer, &mut writer, report);
    writer.finish()
}

/// Adds what a producer's frame data carries to `buffer`: its metas and
/// its application data. Malformed data is counted, never fatal: the
/// entries before the fault are kept.
pub fn apply_frame_data(bytes: &[u8], buffer: &mut gst::BufferRef, report: &mut MetaReport) {
    if bytes.is_empty() {
        return;
    }
    let mut reader = wire::entries(bytes);
    let entries: Vec<Entry<'_>> = reader.by_ref().collect();
    if let Some(error) = reader.error() {
        report.hostile(error);
    }
    report.unknown_entries(reader.unknown_skipped());
    decode_metas(&entries, buffer, report);
    app_data::decode(&entries, buffer, report);
}

#[cfg(test)]
mod tests;
