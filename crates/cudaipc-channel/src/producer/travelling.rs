// What travels with the frames besides their pixels: each frame's data
// (metas, an application's bytes), written into its slot's area while the
// producer owns the slot, and events, queued between the frames they came
// between. Both are opaque bytes here.

use super::*;
use crate::control_block;

/// How long an event waits for the every-frame consumers to take the event
/// it overwrites (EVENT_RECORDS before it) before it overwrites it anyway.
const EVENT_OVERWRITE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Producer {
    /// Bytes of data each frame may carry.
    pub fn frame_data_bound(&self) -> usize {
        self.config.frame_data_bound as usize
    }

    /// Writes `data` into the area of `slot`, which this producer owns
    /// (reserved, SEQ_WRITING): no consumer reads it until it is published.
    pub(super) fn write_frame_data(&self, slot: usize, data: &[u8]) {
        let h = self.header();
        let fits = data.len() <= self.frame_data_bound();
        let words =
            control_block::frame_data_words(&self.shared, slot, self.config.frame_data_bound);
        let len = match (fits, words) {
            (true, Some(words)) => {
                store_bytes(&words[..data.len().div_ceil(8)], data);
                data.len()
            }
            _ => {
                if !data.is_empty() {
                    h.frame_data_dropped.fetch_add(1, Ordering::Relaxed);
                }
                0
            }
        };
        h.slots[slot].data_len.store(len as u32, Ordering::Relaxed);
    }

    /// Publishes a serialized event after the frames so far: consumers get
    /// it between the same frames. At most `EVENT_CAPACITY` bytes.
    pub fn publish_event(&self, bytes: &[u8], interrupt: &AtomicBool) -> Result<u64, ChannelError> {
        self.check_intact()?;
        if bytes.len() > EVENT_CAPACITY {
            return Err(ChannelError::EventTooLarge {
                len: bytes.len(),
                capacity: EVENT_CAPACITY,
            });
        }
        let h = self.header();
        let mut next_seq = self.publish.lock().unwrap();
        let seq = *next_seq;
        let record = &h.events[seq as usize % EVENT_RECORDS];
        self.wait_for_event_taken(record, interrupt)?;
        write_seqlocked(&record.seqlock, || {
            record.seq.store(seq, Ordering::Relaxed);
            record.len.store(bytes.len() as u32, Ordering::Relaxed);
            store_bytes(&record.bytes[..bytes.len().div_ceil(8)], bytes);
        });
        protocol::publish_entry(
            &h.queue[seq as usize % QUEUE_LEN],
            &h.published,
            seq,
            QUEUE_EVENT,
        );
        *next_seq += 1;
        drop(next_seq);
        wait::notify(&h.publish_futex, &h.consumer_sleepers);
        Ok(seq)
    }

    /// Waits, bounded, until every consumer the producer waits for took the
    /// event `record` holds (if it holds one).
    fn wait_for_event_taken(
        &self,
        record: &EventRecord,
        interrupt: &AtomicBool,
    ) -> Result<(), ChannelError> {
        if record.len.load(Ordering::Relaxed) == 0 && record.seq.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let held = record.seq.load(Ordering::Relaxed);
        let deadline = std::time::Instant::now() + EVENT_OVERWRITE_WAIT;
        while self.every_frame_cursors().any(|cursor| cursor <= held)
            && std::time::Instant::now() < deadline
        {
            if interrupt.load(Ordering::Acquire) {
                return Err(ChannelError::Interrupted);
            }
            self.reclaim_dead_consumers();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Ok(())
    }
}
