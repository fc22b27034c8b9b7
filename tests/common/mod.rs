// SPDX-License-Identifier: MPL-2.0

// Helpers of the integration tests, by concern: child processes
// (children.rs), /proc and channel probes (proc.rs), the child pipelines'
// protocol (protocol.rs), in-process pipelines (pipelines.rs), a private
// shm folder and another user (users.rs), other namespaces
// (namespaces.rs), kill cycles (kill_cycles.rs), the transports a
// scenario runs on (transport.rs), two hosts as network namespaces for
// the UCX bridge (two_hosts.rs, on netns.rs), the workspace's commands
// (workspace_binaries.rs). Here: the
// one plugin registration and the one GPU check every test binary uses.
// Each binary uses a part of them.
#![allow(dead_code, unused_imports)]

mod children;
mod kill_cycles;
mod namespaces;
mod netns;
mod pipelines;
mod proc;
mod protocol;
mod transport;
mod two_hosts;
mod users;
mod workspace_binaries;

use std::sync::{Arc, Once};

pub use cudaipc_transport::cuda::gpu_or_skip;

pub use children::*;
pub use kill_cycles::*;
pub use namespaces::*;
pub use pipelines::*;
pub use proc::*;
pub use protocol::*;
pub use transport::*;
pub use two_hosts::*;
pub use users::*;
pub use workspace_binaries::*;

/// Initialises GStreamer and registers the plugin statically, once per
/// test binary.
pub fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        // As gst-check does: a GStreamer or GLib CRITICAL fails the test.
        gst::glib::log_set_always_fatal(gst::glib::LogLevels::LEVEL_CRITICAL);
        gst::init().unwrap();
        gstcudaipc::plugin_register_static().unwrap();
    });
}

/// Whether a CUDA device is there; prints the loud `SKIPPED: no CUDA
/// device` line when not, and fails instead with `CUDAIPC_REQUIRE_GPU=1`
/// (see `gpu_or_skip`).
pub fn gpu(test: &str) -> bool {
    gpu_or_skip(test).is_some()
}

/// A file of the source tree (`rel` to its root): in the working directory
/// (cargo runs tests at the root; staged binaries run there too), else under
/// `$CUDAIPC_REPO_DIR`, else where this binary was built from.
pub fn repo_file(rel: &str) -> std::path::PathBuf {
    let candidates: Vec<std::path::PathBuf> = [
        std::env::current_dir().ok(),
        std::env::var_os("CUDAIPC_REPO_DIR").map(Into::into),
        Some(env!("CARGO_MANIFEST_DIR").into()),
    ]
    .into_iter()
    .flatten()
    .map(|root| root.join(rel))
    .collect();
    candidates
        .iter()
        .find(|path| path.exists())
        .unwrap_or_else(|| {
            panic!(
                "{rel} not found in {candidates:?}: run from the repository's root or set CUDAIPC_REPO_DIR"
            )
        })
        .clone()
}

/// A channel name no other test uses.
pub fn unique_channel(tag: &str) -> String {
    format!("t-{tag}-{:x}", cudaipc_channel::shm::random_u64())
}
