// SPDX-License-Identifier: MPL-2.0

//! gst-cudaipc: GStreamer elements that share video frames between processes
//! on one host without the frames leaving GPU memory.
//!
//! Layers, lowest first, in crates of their own that know no GStreamer:
//! `cudaipc_channel` (the channel in shared memory; no CUDA either) and
//! `cudaipc_transport` (CUDA driver wrappers, and where slots live: CUDA
//! device memory or shared host memory). Here: [`memory`] (CUDA memory in
//! GStreamer buffers), [`gstcuda`] (GStreamer's own CUDA library, when it is
//! installed), [`pattern`] (the test patterns), then one module per element.

use gst::glib;

pub mod gstcuda;
pub mod pattern;

// The application API: CUDA memory in buffers, the element names, and the
// channels that exist (what `cudaipc-channels` and the device provider show).
pub mod element_names;

pub mod memory;

mod copy_error;
mod cudaipcdeviceprovider;
mod cudaipcsink;
mod cudaipcsrc;
mod cudaprocess;
mod cudatestsrc;
mod enums;
mod frame_copy;
mod frame_data;
mod hints;
mod output_pool;
mod periodic;
mod video;

/// The video formats every element of the plugin takes.
pub use video::FORMATS;

/// Registers every debug category of the plugin now, so that
/// `--gst-debug-help` and `GST_DEBUG` find them before any element runs.
fn register_debug_categories() {
    for category in [
        &cudaipcsink::CAT,
        &cudaipcsrc::CAT,
        &cudatestsrc::CAT,
        &cudaprocess::CAT,
        &memory::CAT,
        &output_pool::CAT,
        &gstcuda::CAT,
        &cudaipcdeviceprovider::CAT,
        &frame_data::CAT,
    ] {
        std::sync::LazyLock::force(category);
    }
}

fn plugin_init(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    register_debug_categories();
    memory::meta::register();
    // Before frames flow: applications may attach it to their buffers.
    frame_data::register();
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
