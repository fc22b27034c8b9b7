// SPDX-License-Identifier: MPL-2.0

//! A second mapping of a channel's control block, to watch a channel from
//! outside (or, in tests, to tamper with it, playing a hostile peer).

use std::sync::atomic::Ordering;

use crate::layout::{self, CONSUMER_ACTIVE, ControlHeader, PRODUCER_LOCK_BYTE};
use crate::shm::{self, SharedFile};

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
        layout::control_header(&self.shared)
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
