// SPDX-License-Identifier: MPL-2.0

//! What `cudatestsrc` holds while it runs: the device and its kernels, the
//! negotiated format, the frame counters that timestamps follow.

use std::sync::Arc;

use crate::gstcuda::StreamOrdering;
use crate::pattern::kernels::Geometry;
use cudaipc_transport::cuda::{Device, DeviceRegion, Module};

pub(super) struct Gpu {
    pub(super) device: Arc<Device>,
    pub(super) module: Arc<Module>,
    /// Orders GStreamer's streams against ours (GStreamer 1.24+).
    pub(super) ordering: Option<StreamOrdering>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) gpu: Option<Gpu>,
    pub(super) info: Option<gst_video::VideoInfo>,
    pub(super) geometry: Geometry,
    pub(super) cuda_memory: bool,
    /// Frames produced since start: the next frame's number.
    pub(super) frames: u64,
    /// Timestamps count from here (a frame rate change moves it) ...
    pub(super) rate_base: gst::ClockTime,
    /// ... in frames of the current rate.
    pub(super) rate_frames: u64,
    /// Live: running time of the first frame.
    pub(super) live_base: Option<gst::ClockTime>,
    /// System memory: frames are generated here, then downloaded.
    pub(super) scratch: Option<DeviceRegion>,
}
