// SPDX-License-Identifier: MPL-2.0

//! What must end in a clear error and a clean exit: corrupt and hostile
//! control blocks (with proptest), and faults of real processes (peers
//! killed, stopped, restarted; stale channels; permissions; namespaces) on
//! each transport. The cuda transport's cases print `SKIPPED: no CUDA
//! device` without a GPU (and fail with `CUDAIPC_REQUIRE_GPU=1`).

#[path = "../common/mod.rs"]
mod common;

mod faults;
mod hostile;

#[test]
#[ignore = "entry point of the child pipelines (common::PipelineChild)"]
fn child_pipeline() {
    common::child_pipeline_main();
}
