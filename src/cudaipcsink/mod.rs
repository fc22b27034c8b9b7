// SPDX-License-Identifier: MPL-2.0

//! # cudaipcsink
//!
//! Publishes video frames on a named channel that `rscudaipcsrc` elements in
//! other processes read. Frames live in a ring of `slots`: CUDA device
//! buffers exported with CUDA IPC (`transport=cuda`) or a shared host-memory
//! file (`transport=host`). Upstream elements that use the buffer pool this
//! sink proposes write straight into the slots (no copy); other buffers are
//! copied (device to device) or uploaded into a free slot.
//!
//! ```text
//! gst-launch-1.0 cudatestsrc ! "video/x-raw(memory:CUDAMemory),format=RGB,width=3840,height=2160" ! rscudaipcsink channel=cam0
//! ```
//!
//! Also registered as `rscudaipcsink`, a name GStreamer's own nvcodec
//! plugin (1.24+, which has a `cudaipcsink` of its own) never takes; where
//! nvcodec provides its own, the bare name is nvcodec's (see
//! `element_names`).

use gst::glib;
use gst::prelude::*;

mod held_back;
mod imp;
mod input;
mod lending;
mod pool;
mod publishing;
mod refused;
mod settings;
mod state;
mod travelling;

/// The debug category, for the plugin's own (`lib.rs`).
pub(crate) use state::CAT;

glib::wrapper! {
    pub struct CudaIpcSink(ObjectSubclass<imp::CudaIpcSink>) @extends gst_base::BaseSink, gst::Element, gst::Object;
}

pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    for name in crate::element_names::names("cudaipcsink", "rscudaipcsink") {
        gst::Element::register(
            Some(plugin),
            name,
            gst::Rank::NONE,
            CudaIpcSink::static_type(),
        )?;
    }
    Ok(())
}
