// SPDX-License-Identifier: MPL-2.0

//! gst-cudaipc: GStreamer elements that share video frames between processes
//! on one host without the frames leaving GPU memory.
//!
//! Layers, lowest first: [`ipc`] (the channel in shared memory; no GStreamer,
//! no CUDA), [`cuda`] (driver wrappers), [`transport`] (where slots live:
//! CUDA device memory or shared host memory), [`memory`] (CUDA memory in
//! GStreamer buffers) and [`gstcuda`] (GStreamer's own CUDA library, when it
//! is installed), then one module per element.

use gst::glib;

pub mod cuda;
pub mod cudaipcdeviceprovider;
pub mod cudaipcsink;
pub mod cudaipcsrc;
pub mod cudaprocess;
pub mod cudatestsrc;
mod enums;
pub mod gstcuda;
pub mod ipc;
pub mod memory;
mod periodic;
pub mod transport;
mod video;

#[doc(hidden)]
pub mod test_support;

fn plugin_init(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    memory::meta::register();
    cudaipcsink::register(plugin)?;
    cudaipcsrc::register(plugin)?;
    cudatestsrc::register(plugin)?;
    cudaprocess::register(plugin)?;
    cudaipcdeviceprovider::register(plugin)?;
    Ok(())
}

gst::plugin_define!(
    cudaipc,
    env!("CARGO_PKG_DESCRIPTION"),
    plugin_init,
    concat!(env!("CARGO_PKG_VERSION"), "-", env!("COMMIT_ID")),
    "MPL",
    env!("CARGO_PKG_NAME"),
    env!("CARGO_PKG_NAME"),
    env!("CARGO_PKG_REPOSITORY"),
    env!("BUILD_REL_DATE")
);
