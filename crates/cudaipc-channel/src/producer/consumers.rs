// The consumers' records as the producer reads them: taking back what dead
// consumers held, and what it needs to order its writes after their reads.

use std::sync::atomic::Ordering;

use super::*;

impl Producer {
    /// Releases the slots held by consumers that died. Returns how many
    /// consumers were reclaimed.
    pub fn reclaim_dead_consumers(&self) -> usize {
        let h = self.header();
        let mut reclaimed = 0;
        for (i, record) in h.consumers.iter().enumerate() {
            let bit = 1u64 << i;
            let holds = h
                .slots
                .iter()
                .any(|s| s.holders.load(Ordering::Relaxed) & bit != 0);
            if record.state.load(Ordering::SeqCst) != CONSUMER_ACTIVE && !holds {
                continue;
            }
            let lock_byte = CONSUMER_LOCK_BASE + i as i64;
            if shm::byte_is_locked(&self.shared.file, lock_byte).unwrap_or(true) {
                continue;
            }
            // Take its lock while cleaning, so a new consumer cannot claim the
            // record half-way.
            if !shm::try_lock_byte(&self.shared.file, lock_byte).unwrap_or(false) {
                continue;
            }
            for slot in &h.slots {
                slot.holders.fetch_and(!bit, Ordering::SeqCst);
            }
            if record.state.swap(CONSUMER_FREE, Ordering::SeqCst) == CONSUMER_ACTIVE {
                reclaimed += 1;
            }
            shm::unlock_byte(&self.shared.file, lock_byte);
        }
        if reclaimed > 0 {
            self.reclaimed
                .fetch_add(reclaimed as u64, Ordering::Relaxed);
        }
        reclaimed
    }

    /// The release descriptors of every attached consumer that has any, and
    /// the records that could not be read (being rewritten: read them again
    /// later).
    pub fn consumer_release_info(&self) -> (Vec<ConsumerReleaseInfo>, Vec<usize>) {
        let h = self.header();
        let mut out = Vec::new();
        let mut unread = Vec::new();
        for (index, record) in h.consumers.iter().enumerate() {
            if record.state.load(Ordering::SeqCst) != CONSUMER_ACTIVE {
                continue;
            }
            let read = crate::read_seqlocked(&record.release_seqlock, || {
                let count = (record.release_count.load(Ordering::Relaxed) as usize).min(MAX_SLOTS);
                let session = record.session.load(Ordering::Relaxed);
                let descriptors: Vec<[u8; RELEASE_DESCRIPTOR_BYTES]> = record.release[..count]
                    .iter()
                    .map(|words| {
                        let mut d = [0u8; RELEASE_DESCRIPTOR_BYTES];
                        d.copy_from_slice(&load_bytes(words, RELEASE_DESCRIPTOR_BYTES));
                        d
                    })
                    .collect();
                (session, descriptors)
            });
            match read {
                Some((session, descriptors)) if !descriptors.is_empty() => {
                    out.push(ConsumerReleaseInfo {
                        index,
                        session,
                        descriptors,
                    })
                }
                Some(_) => {}
                None => unread.push(index),
            }
        }
        (out, unread)
    }

    /// The set of attached consumers and of the release descriptors they
    /// published: equal fingerprints mean nothing changed. Exact, one entry
    /// per consumer record: a change can never cancel out another (a hash of
    /// the records could, and the producer would then not order its writes
    /// after those consumers' reads).
    pub fn consumer_fingerprint(&self) -> ConsumerSetFingerprint {
        let h = self.header();
        let mut entries = [None; MAX_CONSUMERS];
        for (entry, record) in entries.iter_mut().zip(h.consumers.iter()) {
            if record.state.load(Ordering::SeqCst) == CONSUMER_ACTIVE {
                *entry = Some((
                    record.session.load(Ordering::SeqCst),
                    record.release_seqlock.load(Ordering::SeqCst),
                ));
            }
        }
        ConsumerSetFingerprint(entries)
    }
}
