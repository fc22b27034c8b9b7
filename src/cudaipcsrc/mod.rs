// SPDX-License-Identifier: MPL-2.0

//! # cudaipcsrc
//!
//! Reads the frames an `rscudaipcsink` in another process publishes on a named
//! channel. The caps come from the channel. With the cuda transport the
//! buffers wrap the producer's device memory (`memory:CUDAMemory`, zero
//! copy; each slot is opened once) or, when downstream needs system memory,
//! are downloaded. With the host transport they wrap the shared host memory.
//! A slot goes back to the producer when downstream drops the buffer (after
//! the GPU work queued on it so far).
//!
//! ```text
//! gst-launch-1.0 rscudaipcsrc channel=cam0 ! cudaprocess operation=invert ! fakesink
//! ```
//!
//! Also registered as `rscudaipcsrc`, a name GStreamer's own nvcodec plugin
//! (1.24+, which has a `cudaipcsrc` of its own) never takes; where nvcodec
//! provides its own, the bare name is nvcodec's (see `element_names`).

use std::sync::LazyLock;

use gst::glib;
use gst::prelude::*;

pub(crate) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "cudaipcsrc",
        gst::DebugColorFlags::empty(),
        Some("CUDA IPC source"),
    )
});

mod channel;
mod copy;
mod frame;
mod gstcuda_out;
mod imp;
mod settings;
mod stats;
mod streaming;
mod travelling;

/// Where the timestamps of the buffers come from.
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaIpcTimestampMode")]
pub enum TimestampMode {
    #[default]
    #[enum_value(
        name = "Pipeline: the running time of this pipeline when the frame arrives (a late viewer never waits on old timestamps)",
        nick = "pipeline"
    )]
    Pipeline,
    #[enum_value(
        name = "Producer: the producer's own PTS and DTS (running time of the producer's pipeline)",
        nick = "producer"
    )]
    Producer,
}

glib::wrapper! {
    pub struct CudaIpcSrc(ObjectSubclass<imp::CudaIpcSrc>) @extends gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    // Caps from the channel may carry a GstVideoMultiviewFlagsSet (decoders
    // and parsers add one); parsing them needs that type registered.
    // SAFETY: a GType getter, callable any time after gst_init.
    unsafe { gst_video::ffi::gst_video_multiview_flagset_get_type() };
    for name in crate::element_names::names("cudaipcsrc", "rscudaipcsrc") {
        gst::Element::register(
            Some(plugin),
            name,
            gst::Rank::NONE,
            CudaIpcSrc::static_type(),
        )?;
    }
    Ok(())
}
