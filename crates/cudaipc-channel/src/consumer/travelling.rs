// What travels beside the frames, read as hostile bytes: a frame's data out
// of its slot's area (while the slot is held, so never torn), and events out
// of their records (seqlocked: the producer may overwrite one meanwhile).

use super::*;
use crate::control_block;

/// What a consumer lost or refused of what travels beside the frames.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Frames whose data length passed the bound: delivered without data.
    pub frame_data_refused: u64,
    /// Events overwritten before this consumer took them, or whose record
    /// was impossible.
    pub events_lost: u64,
}

impl Consumer {
    /// The data of the frame in `slot` (held by this consumer), `len` bytes
    /// as its record says; nothing when that passes the area.
    pub(super) fn read_frame_data(&mut self, slot: usize, len: u32) -> Vec<u8> {
        if len == 0 {
            return Vec::new();
        }
        let bound = self.info.frame_data_bound;
        let words = control_block::frame_data_words(&self.shared, slot, bound);
        match words.filter(|_| len <= bound) {
            Some(words) => load_bytes(words, len as usize),
            None => {
                self.travelling.frame_data_refused += 1;
                Vec::new()
            }
        }
    }

    /// The event of queue item `seq`, unless it was overwritten (or its
    /// record is impossible): then counted as lost.
    pub(super) fn read_event(&mut self, seq: u64) -> Option<Vec<u8>> {
        let record = &control_header(&self.shared).events[seq as usize % EVENT_RECORDS];
        let read = protocol::read_seqlocked(&record.seqlock, || {
            let len = record.len.load(Ordering::Relaxed) as usize;
            (record.seq.load(Ordering::Relaxed) == seq && len <= EVENT_CAPACITY)
                .then(|| load_bytes(&record.bytes, len))
        });
        let event = read.flatten();
        if event.is_none() {
            self.travelling.events_lost += 1;
        }
        event
    }

    /// What this consumer lost or refused beside the frames so far.
    pub fn travelling_counts(&self) -> Counts {
        self.travelling
    }
}
