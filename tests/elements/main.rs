// SPDX-License-Identifier: MPL-2.0

//! The elements, mostly in one process: rscudaipcsink and rscudaipcsrc as
//! elements (properties, errors, the pair in a harness), the sink's and the
//! source's behaviour a user sees, the test elements cudatestsrc and
//! cudaprocess, GStreamer's CUDA library and nvcodec elements, the kernels'
//! compilation and the GStreamer runtime the suite runs on. GPU tests print
//! `SKIPPED: no CUDA device` without a GPU (and fail with
//! `CUDAIPC_REQUIRE_GPU=1`).

#[path = "../common/mod.rs"]
mod common;

mod gst_runtime;
mod gstcuda_interop;
mod ipc_elements;
mod kernels_compile;
mod sink;
mod source_timing;
mod test_elements;

#[test]
#[ignore = "entry point of the child pipelines (common::PipelineChild)"]
fn child_pipeline() {
    common::child_pipeline_main();
}
