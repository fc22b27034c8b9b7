//! Helpers shared by the crate's unit and integration tests (not API):
//! built only for `cfg(test)` and the `test-support` feature, which the
//! crate's dev-dependency on itself enables for its integration tests.

use std::sync::Arc;

use crate::cuda::Device;

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
    format!("t-{tag}-{:x}", crate::ipc::shm::random_u64())
}

/// A second mapping of a channel's control block, for tests that watch a
/// channel from outside (or tamper with it, playing a hostile peer).
pub struct ControlBlock {
    pub shared: crate::ipc::shm::SharedFile,
}

impl ControlBlock {
    /// Maps the control block of `channel`; `None` if it is not there or is
    /// too small to hold a header.
    pub fn open(channel: &str) -> Option<Self> {
        let shared =
            crate::ipc::shm::SharedFile::open(&crate::ipc::shm::control_path(channel)).ok()?;
        (shared.len() >= crate::ipc::layout::control_size()).then_some(Self { shared })
    }

    pub fn header(&self) -> &crate::ipc::layout::ControlHeader {
        crate::ipc::layout::control_header(&self.shared)
    }

    /// Consumers attached now.
    pub fn active_consumers(&self) -> usize {
        use std::sync::atomic::Ordering;
        self.header()
            .consumers
            .iter()
            .filter(|c| c.state.load(Ordering::SeqCst) == crate::ipc::layout::CONSUMER_ACTIVE)
            .count()
    }

    /// The fewest frames any attached consumer has taken.
    pub fn min_frames_received(&self) -> u64 {
        use std::sync::atomic::Ordering;
        self.header()
            .consumers
            .iter()
            .filter(|c| c.state.load(Ordering::SeqCst) == crate::ipc::layout::CONSUMER_ACTIVE)
            .map(|c| c.frames_received.load(Ordering::SeqCst))
            .min()
            .unwrap_or(0)
    }

    /// Items (frames and EOS markers) published so far.
    pub fn published(&self) -> u64 {
        self.header()
            .published
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether a live producer holds this block's liveness lock.
    pub fn producer_alive(&self) -> bool {
        crate::ipc::shm::byte_is_locked(&self.shared.file, crate::ipc::layout::PRODUCER_LOCK_BYTE)
            .unwrap_or(false)
    }

    /// Index of the attached consumer of process `pid`.
    pub fn consumer_of(&self, pid: u32) -> Option<usize> {
        use std::sync::atomic::Ordering;
        self.header().consumers.iter().position(|c| {
            c.state.load(Ordering::SeqCst) == crate::ipc::layout::CONSUMER_ACTIVE
                && c.pid.load(Ordering::SeqCst) == pid
        })
    }

    /// The next item consumer `index` wants.
    pub fn cursor(&self, index: usize) -> u64 {
        self.header().consumers[index]
            .cursor
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether consumer `index` holds some slot.
    pub fn holds_slots(&self, index: usize) -> bool {
        use std::sync::atomic::Ordering;
        self.header()
            .slots
            .iter()
            .any(|s| s.holders.load(Ordering::SeqCst) & (1 << index) != 0)
    }

    /// Slots some consumer holds now.
    pub fn held_slots(&self) -> usize {
        use std::sync::atomic::Ordering;
        self.header()
            .slots
            .iter()
            .filter(|s| s.holders.load(Ordering::SeqCst) != 0)
            .count()
    }
}

/// Holds the producer liveness lock of a file, as a live producer does, so
/// that consumers take a hand-made control block for a live channel.
pub fn hold_producer_lock(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    if crate::ipc::shm::try_lock_byte(&file, crate::ipc::layout::PRODUCER_LOCK_BYTE)? {
        Ok(file)
    } else {
        Err(std::io::Error::other("the producer lock is already held"))
    }
}
