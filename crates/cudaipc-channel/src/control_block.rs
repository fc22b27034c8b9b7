// SPDX-License-Identifier: MPL-2.0

//! A channel's control block as a mapped file: its header, whether the
//! producer it records may still run, taking a dead producer's lock; and a
//! second mapping of it, to watch a channel from outside (or, in tests, to
//! tamper with it, playing a hostile peer). Above `layout` (the bytes) and
//! `shm` (the files).

use std::sync::atomic::Ordering;

use crate::layout::{self, CONSUMER_ACTIVE, ControlHeader, PRODUCER_LOCK_BYTE, control_size};
use crate::shm::{self, SharedFile};

/// The header at the start of a mapped control file (its magic and version
/// are not checked: see `directory` and `Consumer::open` for that).
///
/// # Panics
/// When the mapping is smaller than [`control_size`]: every opener checks
/// the size first.
pub fn control_header(shared: &shm::SharedFile) -> &ControlHeader {
    assert!(
        shared.len() >= control_size(),
        "a control file smaller than its header"
    );
    // SAFETY: the mapping is page aligned and at least as large as the header
    // (asserted above), lives as long as `shared`, and ControlHeader consists
    // of atomics only: every bit pattern is a valid value, and shared access
    // from several processes is sound.
    unsafe { &*(shared.map.as_ptr() as *const ControlHeader) }
}

/// Slot `slot`'s frame data area of `bound` bytes, as words; `None` where
/// the mapping does not hold it (the caller's bound is the one it checked
/// against the file, never one read again from a header a peer may change).
pub fn frame_data_words(
    shared: &shm::SharedFile,
    slot: usize,
    bound: u32,
) -> Option<&[std::sync::atomic::AtomicU64]> {
    if slot >= layout::MAX_SLOTS || !layout::is_valid_frame_data_bound(bound) {
        return None;
    }
    let offset = layout::frame_data_offset(slot, bound);
    if offset.checked_add(bound as usize)? > shared.len() {
        return None;
    }
    // SAFETY: [offset, offset + bound) lies within the mapping (checked
    // above), which lives as long as `shared`; the offset is a multiple of 8
    // (the header's size and the bound are) from a page-aligned start; any
    // bits are valid atomics, shared between processes soundly.
    Some(unsafe {
        std::slice::from_raw_parts(
            shared.map.as_ptr().add(offset) as *const std::sync::atomic::AtomicU64,
            bound as usize / 8,
        )
    })
}

/// Whether the producer a control block records may still run: its process
/// runs, where its pid can be checked here (of our PID namespace, and of our
/// user: /proc may hide other users' processes, `hidepid`), or the block is
/// too small to record one.
///
/// The producer's lock says whether a producer lives, except for a moment
/// after one is killed: on the GPU host a consumer started right after the
/// producer was reaped saw the lock held, and gone 0.1 s later (the kernel
/// drops it with the last reference to the open file; a mapping that the
/// dead process's teardown still holds, likely through the GPU driver,
/// would be one). Consumers and producers take a block whose recorded
/// producer is gone for dead, or wait for its lock to go, instead of
/// believing the lock for that moment.
pub fn recorded_producer_may_run(shared: &shm::SharedFile) -> bool {
    use std::sync::atomic::Ordering;
    if shared.len() < control_size() {
        return true;
    }
    let h = control_header(shared);
    h.producer_pid_namespace.load(Ordering::Relaxed) != shm::pid_namespace()
        || shared.owner_uid().ok() != Some(shm::effective_uid())
        || shm::process_runs(
            h.producer_pid.load(Ordering::Relaxed),
            h.producer_start_time.load(Ordering::Relaxed),
        )
}

/// How long a new producer (or `remove-stale`) waits for the lock of a
/// block whose recorded producer is gone (see [`recorded_producer_may_run`])
/// to go: the kernel keeps a dead process's files, and their locks, while
/// it tears down its GPU context.
const LINGERING_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Takes the producer lock of `existing`; where a producer that is gone
/// still holds it (for a moment after it was killed), waits for it to go:
/// a producer restarted at once after a crash takes its channel back
/// instead of finding it in use. The lock stays the arbiter between
/// contenders.
pub fn take_lock_of_dead_producer(existing: &shm::SharedFile) -> std::io::Result<bool> {
    let deadline = std::time::Instant::now() + LINGERING_LOCK_WAIT;
    loop {
        if shm::try_lock_byte(&existing.file, PRODUCER_LOCK_BYTE)? {
            return Ok(true);
        }
        if recorded_producer_may_run(existing) || std::time::Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The control block of a channel in the shm folder, mapped read-write
/// beside the producer's and consumers' own mappings.
pub struct ControlBlock {
    pub shared: SharedFile,
}

impl ControlBlock {
    /// Maps the control block of `channel`; `None` if it is not there or is
    /// too small to hold a header.
    pub fn open(channel: &str) -> Option<Self> {
        let shared = SharedFile::open(&shm::control_path(channel)).ok()?;
        (shared.len() >= layout::control_size()).then_some(Self { shared })
    }

    pub fn header(&self) -> &ControlHeader {
        control_header(&self.shared)
    }

    /// Consumers attached now.
    pub fn active_consumers(&self) -> usize {
        self.header()
            .consumers
            .iter()
            .filter(|c| c.state.load(Ordering::SeqCst) == CONSUMER_ACTIVE)
            .count()
    }

    /// The fewest frames any attached consumer has taken.
    pub fn min_frames_received(&self) -> u64 {
        self.header()
            .consumers
            .iter()
            .filter(|c| c.state.load(Ordering::SeqCst) == CONSUMER_ACTIVE)
            .map(|c| c.frames_received.load(Ordering::SeqCst))
            .min()
            .unwrap_or(0)
    }

    /// Items (frames and EOS markers) published so far.
    pub fn published(&self) -> u64 {
        self.header().published.load(Ordering::SeqCst)
    }

    /// Whether a live producer holds this block's liveness lock.
    pub fn producer_alive(&self) -> bool {
        shm::byte_is_locked(&self.shared.file, PRODUCER_LOCK_BYTE).unwrap_or(false)
    }

    /// Index of the attached consumer of process `pid`.
    pub fn consumer_of(&self, pid: u32) -> Option<usize> {
        self.header().consumers.iter().position(|c| {
            c.state.load(Ordering::SeqCst) == CONSUMER_ACTIVE && c.pid.load(Ordering::SeqCst) == pid
        })
    }

    /// The next item consumer `index` wants.
    pub fn cursor(&self, index: usize) -> u64 {
        self.header().consumers[index].cursor.load(Ordering::SeqCst)
    }

    /// Whether consumer `index` holds some slot.
    pub fn holds_slots(&self, index: usize) -> bool {
        self.header()
            .slots
            .iter()
            .any(|s| s.holders.load(Ordering::SeqCst) & (1 << index) != 0)
    }

    /// Slots some consumer holds now.
    pub fn held_slots(&self) -> usize {
        self.header()
            .slots
            .iter()
            .filter(|s| s.holders.load(Ordering::SeqCst) != 0)
            .count()
    }
}
