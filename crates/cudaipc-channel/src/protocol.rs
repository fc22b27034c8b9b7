// SPDX-License-Identifier: MPL-2.0

//! The steps of the protocol that order memory between processes: the
//! seqlock, publishing and taking an item, and claiming, holding and
//! releasing a slot. The producer and the consumers take these steps only
//! through these functions, and the loom model check (`loom_tests.rs`) runs
//! the same functions on loom's atomics, exploring every interleaving and
//! the reorderings a weakly ordered CPU (ARM) may make. docs/protocol.md,
//! "Memory ordering", argues each ordering.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::layout::SEQ_WRITING;

/// A 64-bit word of the control block. `AtomicU64` (in shared memory) is
/// one; in the model check loom's `AtomicU64` is another, so what is checked
/// is the code below, not a copy of it.
pub(crate) trait Word {
    fn load(&self, order: Ordering) -> u64;
    fn store(&self, value: u64, order: Ordering);
    fn fetch_add(&self, value: u64, order: Ordering) -> u64;
    fn fetch_or(&self, value: u64, order: Ordering) -> u64;
    fn fetch_and(&self, value: u64, order: Ordering) -> u64;
    /// A fence of the memory model these words live in.
    fn fence(order: Ordering);
    /// Lets the writer run while a seqlock reader retries.
    fn back_off(attempt: u32);
}

/// [`Word`]'s accesses for an atomic type with `AtomicU64`'s methods: std's
/// and loom's differ only in their fence and back-off.
macro_rules! word_accesses {
    ($atomic:ty) => {
        fn load(&self, order: Ordering) -> u64 {
            <$atomic>::load(self, order)
        }
        fn store(&self, value: u64, order: Ordering) {
            <$atomic>::store(self, value, order)
        }
        fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
            <$atomic>::fetch_add(self, value, order)
        }
        fn fetch_or(&self, value: u64, order: Ordering) -> u64 {
            <$atomic>::fetch_or(self, value, order)
        }
        fn fetch_and(&self, value: u64, order: Ordering) -> u64 {
            <$atomic>::fetch_and(self, value, order)
        }
    };
}
#[cfg(all(test, loom))]
pub(crate) use word_accesses;

impl Word for AtomicU64 {
    word_accesses!(AtomicU64);
    fn fence(order: Ordering) {
        std::sync::atomic::fence(order)
    }
    fn back_off(attempt: u32) {
        if attempt > 100 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Reads of a seqlock that may find it odd or changed before giving up
/// (a writer that died mid-write leaves it odd for good).
const SEQLOCK_ATTEMPTS: u32 = 10_000;

/// Reads fields guarded by a seqlock; `read` must only do loads (Relaxed).
/// `None`: the lock never settled.
pub(crate) fn read_seqlocked<W: Word, T>(lock: &W, mut read: impl FnMut() -> T) -> Option<T> {
    for attempt in 0..SEQLOCK_ATTEMPTS {
        let before = lock.load(Ordering::Acquire);
        if before % 2 == 0 {
            let value = read();
            // Keeps the reads above from moving below the check.
            W::fence(Ordering::Acquire);
            if lock.load(Ordering::Relaxed) == before {
                return Some(value);
            }
        }
        W::back_off(attempt);
    }
    None
}

/// Runs `write` (Relaxed stores) with the seqlock held (odd). One writer per
/// lock.
pub(crate) fn write_seqlocked<W: Word>(lock: &W, write: impl FnOnce()) {
    lock.fetch_add(1, Ordering::Relaxed);
    // Keeps the stores of `write` from moving above the odd count.
    W::fence(Ordering::Release);
    write();
    lock.fetch_add(1, Ordering::Release);
}

/// Producer: publishes item `seq` of `slot`, whose frame and metadata are
/// written: the slot record's `seq`, then the queue entry, then `published`.
pub(crate) fn publish_frame<W: Word>(
    slot_seq: &W,
    queue_entry: &W,
    published: &W,
    seq: u64,
    slot: u64,
) {
    slot_seq.store(seq, Ordering::Release);
    publish_entry(queue_entry, published, seq, slot);
}

/// Producer: publishes item `seq`, a frame in slot `kind` or a marker (EOS),
/// at its queue entry.
pub(crate) fn publish_entry<W: Word>(queue_entry: &W, published: &W, seq: u64, kind: u64) {
    queue_entry.store(crate::layout::queue_entry(seq, kind), Ordering::Release);
    // SeqCst, not just Release: a consumer attaching stores its record's
    // state, then reads this; the producer stores this, then reads the
    // states (docs/protocol.md, `consumers[].state`).
    published.store(seq + 1, Ordering::SeqCst);
}

/// Consumer: how many items were published; what they refer to is visible.
pub(crate) fn load_published<W: Word>(published: &W) -> u64 {
    published.load(Ordering::Acquire)
}

/// Consumer: the queue entry of an item below [`load_published`].
pub(crate) fn load_queue_entry<W: Word>(queue_entry: &W) -> u64 {
    queue_entry.load(Ordering::Acquire)
}

/// Consumer: adds `bit` to the slot's holders, then checks that the slot
/// still holds item `target`; if it does not (the producer claimed it, or
/// wrote another item), takes the bit back. `true`: the slot is held, the
/// producer writes it again only after [`release_slot`].
pub(crate) fn hold_slot<W: Word>(holders: &W, slot_seq: &W, bit: u64, target: u64) -> bool {
    holders.fetch_or(bit, Ordering::Relaxed);
    // The mirror of `claim_slot`: with a SeqCst fence between each side's
    // write and read, one side sees the other's write.
    W::fence(Ordering::SeqCst);
    if slot_seq.load(Ordering::Acquire) != target {
        release_slot(holders, bit);
        return false;
    }
    true
}

/// Consumer: lets go of a slot it held; its reads of the slot are done.
pub(crate) fn release_slot<W: Word>(holders: &W, bit: u64) {
    holders.fetch_and(!bit, Ordering::Release);
}

/// Producer: takes a slot whose record holds `old_seq` and that no
/// consumer held when looked at: marks it written, then checks that no
/// consumer holds it; if one does, the mark is taken back. `true`: the
/// slot is the producer's to write until it publishes it.
pub(crate) fn claim_slot<W: Word>(slot_seq: &W, holders: &W, old_seq: u64) -> bool {
    slot_seq.store(SEQ_WRITING, Ordering::Relaxed);
    W::fence(Ordering::SeqCst);
    // Acquire: the reads of the consumers that released the slot are done
    // before it is written again.
    if holders.load(Ordering::Acquire) != 0 {
        // Release, as the publication was: a consumer that reads `old_seq`
        // here reads the frame's metadata after it.
        slot_seq.store(old_seq, Ordering::Release);
        return false;
    }
    true
}
