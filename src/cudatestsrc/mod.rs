// SPDX-License-Identifier: MPL-2.0

//! `cudatestsrc`: generates video frames on the GPU, straight into
//! downstream's buffers.
//!
//! Default output: 3840x2160 RGB in CUDA memory at 30/1. Any of the
//! plugin's formats, in `video/x-raw(memory:CUDAMemory)` or (generated on the
//! GPU, then downloaded) `video/x-raw`. `framerate=0/1` produces as fast as
//! downstream takes frames, without timestamps. The default `counter`
//! pattern carries the frame number in every row, so that `cudaprocess
//! verify=true` (or, in the crate's tests, `pattern::verify_frame`) can check each frame.
//!
//! ```text
//! gst-launch-1.0 cudatestsrc num-buffers=1000 ! cudaprocess verify=true ! fakesink
//! gst-launch-1.0 cudatestsrc pattern=gradient ! videoconvert ! autovideosink
//! ```
//!
//! When downstream proposes a pool whose buffers are this plugin's CUDA
//! memory (`rscudaipcsink` does: its shared slots), frames are written into
//! it with no copy. All GPU work goes on the device's shared stream
//! ([`cudaipc_transport::cuda::Device::stream`]); there is no per-frame host
//! synchronisation in CUDA memory.

use gst::glib;
use gst::prelude::*;

mod allocation;
mod generate;
mod imp;
mod settings;
mod state;

pub(crate) use imp::CAT;

glib::wrapper! {
    pub struct CudaTestSrc(ObjectSubclass<imp::CudaTestSrc>)
        @extends gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "cudatestsrc",
        gst::Rank::NONE,
        CudaTestSrc::static_type(),
    )
}
