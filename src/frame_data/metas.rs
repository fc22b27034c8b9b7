// SPDX-License-Identifier: MPL-2.0

//! A buffer's GstMetas to frame data entries and back, in GStreamer's own
//! wire form (`gst_meta_serialize`).
//!
//! Which metas GStreamer can serialize (a `serialize_func` in their
//! `GstMetaInfo`; gstmeta.c, gstbuffer.c, gstvideometa.c, gstaudiometa.c):
//!
//! | meta                          | 1.22 | 1.24 | 1.26 | 1.28 |
//! |-------------------------------|------|------|------|------|
//! | GstReferenceTimestampMeta     | (a)  | yes  | yes  | yes, with its `info` |
//! | custom metas (GstCustomMeta)  | (a)  | yes  | yes  | yes  |
//! | GstVideoMeta, GstAudioMeta    | no   | yes (b) | yes (b) | yes (b) |
//! | GstAnalyticsRelationMeta, GstTensorMeta | no | no | no | no |
//! | GstVideoRegionOfInterestMeta, GstVideoCaptionMeta, GstVideoTimeCodeMeta | no | no | no | no |
//!
//! (a) GStreamer 1.22 has no meta serialization: the plugin writes and reads
//! these two itself, in 1.24's bytes ([`super::legacy`]).
//! (b) They describe the producer's buffer layout: they stay ("memory"
//! tagged metas, CudaIpcMeta included, stay too), and the consumer's buffer
//! has its own.
//!
//! A meta that does not cross is counted by name in the [`MetaReport`] and
//! said once by a debug line.

use cudaipc_channel::frame_data::{Entry, EntryKind, FrameDataWriter};

use gst::ffi;
use gst::glib::translate::FromGlib;

use super::app_data;
use super::gst_api::{self, Serialization};
use super::known_metas;
use super::legacy::{self, REFERENCE_TIMESTAMP};
use super::meta_wire::{self, MetaWire};
use super::report::{MetaReport, NotCrossed};

/// Metas that describe their buffer's memory layout without the "memory"
/// tag.
const LAYOUT_METAS: &[&str] = &["GstAudioMeta"];

/// Writes every meta of `buffer` that can cross as a `GstMeta` entry, in
/// the buffer's order, as far as the writer's bound lets; counts the rest.
/// The application's `CudaIpcFrameData` is not among them ([`app_data`]
/// writes it).
pub fn encode_metas(
    buffer: &gst::BufferRef,
    writer: &mut FrameDataWriter,
    report: &mut MetaReport,
) {
    let native = gst_api::serialization();
    for meta in buffer.iter_meta::<gst::Meta>() {
        let name = meta.type_().name();
        if name == app_data::META_NAME {
            continue;
        }
        if stays_local(meta.api(), name) {
            report.not_crossed(name, NotCrossed::Local);
            continue;
        }
        let wire = match native {
            Some(native) => serialize_native(native, &meta),
            None => serialize_legacy(&meta),
        };
        match wire.map(|wire| writer.push(EntryKind::GstMeta, &wire)) {
            Ok(Ok(())) => report.crossed(),
            Ok(Err(refused)) => {
                report.dropped(refused.needed);
                report.not_crossed(name, NotCrossed::Bound);
            }
            Err(why) => report.not_crossed(name, why),
        }
    }
}

/// Adds the metas of the `GstMeta` entries to `buffer`; counts those that
/// cannot be (unknown here, not deserializable, malformed).
pub fn decode_metas(entries: &[Entry<'_>], buffer: &mut gst::BufferRef, report: &mut MetaReport) {
    for entry in entries.iter().filter(|e| e.kind == EntryKind::GstMeta) {
        decode_meta(entry.bytes, buffer, report);
    }
}

fn decode_meta(bytes: &[u8], buffer: &mut gst::BufferRef, report: &mut MetaReport) {
    let wire = match meta_wire::parse(bytes) {
        Ok(wire) => wire,
        Err(error) => return report.hostile(&error),
    };
    if wire.name == app_data::META_NAME {
        return report.hostile(&"CudaIpcFrameData as a serialized meta");
    }
    if wire.name == REFERENCE_TIMESTAMP && !legacy::reference_timestamp_is_sound(&wire) {
        return report.hostile(&"a malformed reference timestamp meta");
    }
    let info = known_metas::info_for(&wire);
    if info.is_null() {
        return report.not_crossed(wire.name, NotCrossed::UnknownHere);
    }
    // SAFETY: a registered GstMetaInfo, which GStreamer never frees.
    let api = unsafe { gst::glib::Type::from_glib((*info).api) };
    if stays_local(api, wire.name) {
        return report.not_crossed(wire.name, NotCrossed::Local);
    }
    let added = match gst_api::serialization() {
        Some(native) => deserialize_native(native, &wire, bytes, info, buffer),
        None => deserialize_legacy(&wire, info, buffer),
    };
    match added {
        Ok(()) => report.crossed(),
        Err(why) => report.not_crossed(wire.name, why),
    }
}

/// Whether a meta describes its own process's memory.
fn stays_local(api: gst::glib::Type, name: &str) -> bool {
    gst::meta::meta_api_type_has_tag::<gst::meta::tags::Memory>(api) || LAYOUT_METAS.contains(&name)
}

/// 1.24+: GStreamer's own serialization.
fn serialize_native(
    native: &Serialization,
    meta: &gst::MetaRef<'_, gst::Meta>,
) -> Result<Vec<u8>, NotCrossed> {
    let meta = meta.as_ptr();
    // SAFETY: a meta of a borrowed buffer has its (registered) info.
    let info = unsafe { (*meta).info };
    if !gst_api::info_serializes(info).0 {
        return Err(NotCrossed::NotSerializable);
    }
    native.serialize(meta).ok_or(NotCrossed::SerializeFailed)
}

/// 1.22: the plugin's own writer, for the two metas it knows.
fn serialize_legacy(meta: &gst::MetaRef<'_, gst::Meta>) -> Result<Vec<u8>, NotCrossed> {
    if let Some(timestamp) = meta.downcast_ref::<gst::ReferenceTimestampMeta>() {
        return legacy::serialize_reference_timestamp(timestamp).ok_or(NotCrossed::SerializeFailed);
    }
    let raw = meta.as_ptr();
    // SAFETY: a meta of a borrowed buffer and its registered info; a custom
    // meta is a GstCustomMeta whose structure lives as long as the buffer.
    unsafe {
        if gst_api::gst_meta_info_is_custom((*raw).info) == 0 {
            return Err(NotCrossed::NeedsGst124);
        }
        let custom = raw as *const gst_api::GstCustomMeta;
        let structure = gst::StructureRef::from_glib_borrow((*custom).structure);
        legacy::serialize_custom(meta.type_().name(), structure).ok_or(NotCrossed::SerializeFailed)
    }
}

/// 1.24+: GStreamer's own deserialization, of a header checked here.
fn deserialize_native(
    native: &Serialization,
    wire: &MetaWire<'_>,
    bytes: &[u8],
    info: *const ffi::GstMetaInfo,
    buffer: &mut gst::BufferRef,
) -> Result<(), NotCrossed> {
    if !gst_api::info_serializes(info).1 {
        return Err(NotCrossed::NoDeserializer);
    }
    match native.deserialize(buffer, bytes) {
        true => Ok(()),
        false => {
            gst::log!(super::CAT, "GStreamer refused a {} payload", wire.name);
            Err(NotCrossed::DeserializeFailed)
        }
    }
}

/// 1.22: the plugin's own reader, for the two metas it knows.
fn deserialize_legacy(
    wire: &MetaWire<'_>,
    info: *const ffi::GstMetaInfo,
    buffer: &mut gst::BufferRef,
) -> Result<(), NotCrossed> {
    let added = if wire.name == REFERENCE_TIMESTAMP {
        legacy::deserialize_reference_timestamp(wire, buffer)
    // SAFETY: a registered GstMetaInfo.
    } else if unsafe { gst_api::gst_meta_info_is_custom(info) } != 0 {
        legacy::deserialize_custom(wire, buffer)
    } else {
        return Err(NotCrossed::NoDeserializer);
    };
    added.then_some(()).ok_or(NotCrossed::DeserializeFailed)
}

#[cfg(test)]
#[path = "metas_tests.rs"]
mod tests;
