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

/// Modules the crate's own tests, examples and benchmarks reach into: public
/// with the `test-support` feature (which only they turn on), private to the
/// crate in the shipped plugin.
// What only tests, examples and the benchmark use (the pattern's CPU
// reference, `Consumer::try_next`, ...) is built only with
// `#[cfg(any(test, feature = "test-support"))]`, so the shipped build has no
// dead code to allow.
macro_rules! internal_mod {
    ($($name:ident),* $(,)?) => {$(
        #[cfg(feature = "test-support")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "test-support"))]
        mod $name;
    )*};
}

internal_mod!(gstcuda, pattern);

// The application API: CUDA memory in buffers, the element names, and the
// channels that exist (what `cudaipc-channels` and the device provider show).
pub mod element_names;

/// The channels in the shm folder: listing them, and removing stale ones.
pub mod channels {
    pub use cudaipc_channel::directory::{
        ChannelEntry, ChannelState, list_channels, live_channel_names, remove_if_stale,
    };
    pub use cudaipc_channel::shm::shm_dir;
}
pub mod memory;

mod cudaipcdeviceprovider;
mod cudaipcsink;
mod cudaipcsrc;
mod cudaprocess;
mod cudatestsrc;
mod enums;
mod frame_copy;
mod output_pool;
mod periodic;
mod video;

#[cfg(any(test, feature = "test-support"))]
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
