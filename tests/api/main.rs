// SPDX-License-Identifier: MPL-2.0

//! What a user runs and reads: the `cudaipc` Rust API against the elements,
//! the examples and the demo as a user runs them, the docs' names,
//! properties and defaults against the plugin, and docs/architecture.md's
//! file tables against the source tree. `cargo test` builds the
//! examples into target/<profile>/examples/ before running this.

#[path = "../common/mod.rs"]
mod common;

mod api;
mod architecture;
mod demo;
mod examples;
mod user_facing;

#[test]
#[ignore = "entry point of the child pipelines (common::PipelineChild)"]
fn child_pipeline() {
    common::child_pipeline_main();
}
