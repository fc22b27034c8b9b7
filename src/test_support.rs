//! Helpers shared by the crate's unit and integration tests (not API):
//! built only for `cfg(test)` and the `test-support` feature, which the
//! crate's dev-dependency on itself enables for its integration tests.

use std::sync::Arc;

use cudaipc_transport::cuda::Device;

/// Every video format the elements take, for tests that cover them all.
pub use crate::video::FORMATS;

/// The type of cudaprocess's `operation` property.
pub use crate::cudaprocess::Operation;

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

/// A channel name no other test uses.
pub fn unique_channel(tag: &str) -> String {
    format!("t-{tag}-{:x}", cudaipc_channel::shm::random_u64())
}

pub use cudaipc_channel::ControlBlock;

/// Holds the producer liveness lock of a file, as a live producer does, so
/// that consumers take a hand-made control block for a live channel.
pub fn hold_producer_lock(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    if cudaipc_channel::shm::try_lock_byte(&file, cudaipc_channel::layout::PRODUCER_LOCK_BYTE)? {
        Ok(file)
    } else {
        Err(std::io::Error::other("the producer lock is already held"))
    }
}
