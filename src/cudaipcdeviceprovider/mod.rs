// SPDX-License-Identifier: MPL-2.0

//! # cudaipcdeviceprovider
//!
//! Lists the live channels of this plugin as video sources, so that
//! `gst-device-monitor-1.0 Video/Source/CudaIpc` (or a `gst::DeviceMonitor`)
//! shows which channels exist, their caps, producer pid, transport,
//! consumers and slot size. A device's element is an `rscudaipcsrc` (this
//! plugin's `rscudaipcsrc`) with its `channel` set.

use gst::glib;
use gst::prelude::*;

mod imp;

pub(crate) use imp::CAT;

glib::wrapper! {
    pub struct CudaIpcDeviceProvider(ObjectSubclass<imp::CudaIpcDeviceProvider>) @extends gst::DeviceProvider, gst::Object;
}

glib::wrapper! {
    pub struct CudaIpcDevice(ObjectSubclass<imp::CudaIpcDevice>) @extends gst::Device, gst::Object;
}

/// Device class of the channels.
pub const DEVICE_CLASS: &str = "Video/Source/CudaIpc";

pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    // MARGINAL: the lowest rank a device monitor without filters looks at.
    gst::DeviceProvider::register(
        Some(plugin),
        "cudaipcdeviceprovider",
        gst::Rank::MARGINAL,
        CudaIpcDeviceProvider::static_type(),
    )
}
