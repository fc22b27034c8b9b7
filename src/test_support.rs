// SPDX-License-Identifier: MPL-2.0

//! What the plugin's unit tests share (built only for `cfg(test)`; the
//! integration tests have their own in tests/common).

use std::sync::Arc;

use cudaipc_transport::cuda::Device;

/// The first CUDA device, or `None` after a loud SKIPPED line. With
/// `CUDAIPC_REQUIRE_GPU=1` a missing device fails the test instead.
pub fn gpu_or_skip(test: &str) -> Option<Arc<Device>> {
    match Device::get(0) {
        Ok(device) => Some(device),
        Err(e) => {
            if std::env::var("CUDAIPC_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("{test}: CUDAIPC_REQUIRE_GPU=1 but no CUDA device: {e}");
            }
            // Straight to stderr, past the test harness's output capture, so
            // that a skipped GPU test is visible in every log.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED: no CUDA device ({test}: {e})");
            None
        }
    }
}
