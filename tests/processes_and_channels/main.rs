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

/// The `cudaipc-channels` command: beside this test binary where the GPU
/// host's staging puts both, else in the cargo target folder it was built
/// in (`cargo test --workspace` builds it: crates/cudaipc-channels).
fn channels_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let here = exe.parent().unwrap();
    let staged = here.join("cudaipc-channels");
    if staged.is_file() {
        return staged;
    }
    let built = here.parent().unwrap().join("cudaipc-channels");
    assert!(
        built.is_file(),
        "{} is missing: cargo build -p cudaipc-channels",
        built.display()
    );
    built
}

#[test]
#[ignore = "entry point of the child pipelines (common::PipelineChild)"]
fn child_pipeline() {
    common::child_pipeline_main();
}
