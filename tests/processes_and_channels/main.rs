// SPDX-License-Identifier: MPL-2.0

//! Frames between real processes, on each transport: producer and consumer
//! pipelines over legacy and descriptor channels, stream changes, the shm
//! folder as a hostile place, the UCX bridge between two network namespaces,
//! and the soak run of the GPU host. The cuda
//! transport's cases print `SKIPPED: no CUDA device` without a GPU (and fail
//! with `CUDAIPC_REQUIRE_GPU=1`).

#[path = "../common/mod.rs"]
mod common;

mod bridge;
mod cross_process;
mod descriptor_channels;
mod metrics;
mod shared_files;
mod slow_consumers;
mod soak;
mod streams;
mod travelling;
mod watch;

/// The `cudaipc-channels` command, where this test binary runs.
fn channels_binary() -> std::path::PathBuf {
    common::workspace_binary("cudaipc-channels")
}

#[test]
#[ignore = "entry point of the child pipelines (common::PipelineChild)"]
fn child_pipeline() {
    common::child_pipeline_main();
}
