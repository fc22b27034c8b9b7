// SPDX-License-Identifier: MPL-2.0

//! The loom model check of the protocol's steps (`protocol.rs`): the very
//! functions the producer and the consumers call, run on loom's atomics,
//! which explore the interleavings of the threads and the values a weakly
//! ordered CPU may let each load see. Slot contents (GPU or host memory in
//! the product) are a loom `UnsafeCell`: loom fails a model whose reads and
//! writes of it are not ordered by happens-before, whatever values they saw.
//!
//! Each model also runs with orderings weakened (`Weakened`), where it must
//! fail: so the check is known to be able to fail.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p cudaipc-channel --release --lib loom`
//! (scripts/test-loom.sh); `LOOM_MAX_PREEMPTIONS` bounds the search (3 when
//! unset).

use std::sync::atomic::Ordering::{self, AcqRel, Relaxed, SeqCst};

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::AtomicU64;
use loom::thread;

use crate::layout::{SEQ_WRITING, queue_entry, queue_entry_kind, queue_entry_seq};
use crate::protocol::{
    Word, claim_slot, hold_slot, load_published, load_queue_entry, publish_frame, read_seqlocked,
    release_slot, word_accesses, write_seqlocked,
};

impl Word for AtomicU64 {
    word_accesses!(AtomicU64);
    fn fence(order: Ordering) {
        loom::sync::atomic::fence(order)
    }
    fn back_off(_attempt: u32) {
        loom::thread::yield_now();
    }
}

/// A word the models can make.
trait ModelWord: Word + Send + Sync + 'static {
    fn new(value: u64) -> Self;
}

impl ModelWord for AtomicU64 {
    fn new(value: u64) -> Self {
        AtomicU64::new(value)
    }
}

/// How `Weakened` breaks the protocol's orderings.
const ALL_RELAXED: u8 = 0;
/// Accesses as written, fences left out.
const NO_FENCES: u8 = 1;
/// SeqCst fences made AcqRel ones (which do not order a store before a
/// later load).
const SEQCST_FENCES_AS_ACQREL: u8 = 2;

/// Loom's word with the protocol's orderings weakened as `HOW` says.
struct Weakened<const HOW: u8>(AtomicU64);

impl<const HOW: u8> Weakened<HOW> {
    fn order(order: Ordering) -> Ordering {
        if HOW == ALL_RELAXED { Relaxed } else { order }
    }
}

impl<const HOW: u8> Word for Weakened<HOW> {
    fn load(&self, order: Ordering) -> u64 {
        self.0.load(Self::order(order))
    }
    fn store(&self, value: u64, order: Ordering) {
        self.0.store(value, Self::order(order))
    }
    fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        self.0.fetch_add(value, Self::order(order))
    }
    fn fetch_or(&self, value: u64, order: Ordering) -> u64 {
        self.0.fetch_or(value, Self::order(order))
    }
    fn fetch_and(&self, value: u64, order: Ordering) -> u64 {
        self.0.fetch_and(value, Self::order(order))
    }
    fn fence(order: Ordering) {
        match HOW {
            SEQCST_FENCES_AS_ACQREL if order == SeqCst => loom::sync::atomic::fence(AcqRel),
            SEQCST_FENCES_AS_ACQREL => loom::sync::atomic::fence(order),
            _ => {}
        }
    }
    fn back_off(_attempt: u32) {
        loom::thread::yield_now();
    }
}

impl<const HOW: u8> ModelWord for Weakened<HOW> {
    fn new(value: u64) -> Self {
        Weakened(AtomicU64::new(value))
    }
}

/// Explores `model`, its preemptions bounded by `LOOM_MAX_PREEMPTIONS`
/// (3 when unset, which finds every failure below within seconds).
fn check(model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(model);
}

/// Explores a model that must fail; returns loom's or the model's message.
fn check_fails(model: impl Fn() + Sync + Send + 'static) -> String {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(model)));
    let payload = outcome.expect_err("the model passed with broken orderings");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Two words under a seqlock, as the pool and caps fields are.
struct Seqlocked<W> {
    lock: W,
    a: W,
    b: W,
}

/// A writer writes (1, 1), then (2, 2) under the seqlock while a reader
/// reads both words: it must see a pair from one write, never a mix.
fn seqlock_model<W: ModelWord>() {
    let shared = Arc::new(Seqlocked {
        lock: W::new(0),
        a: W::new(0),
        b: W::new(0),
    });
    let writer = {
        let shared = shared.clone();
        thread::spawn(move || {
            for value in 1..=2 {
                write_seqlocked(&shared.lock, || {
                    shared.a.store(value, Relaxed);
                    shared.b.store(value, Relaxed);
                });
            }
        })
    };
    let read = read_seqlocked(&shared.lock, || {
        (shared.a.load(Relaxed), shared.b.load(Relaxed))
    });
    let (a, b) = read.expect("the seqlock never settled");
    assert_eq!(a, b, "a torn seqlock read");
    writer.join().unwrap();
}

#[test]
fn loom_seqlock_reads_whole_writes() {
    check(seqlock_model::<AtomicU64>);
}

#[test]
fn loom_seqlock_without_fences_tears() {
    let message = check_fails(seqlock_model::<Weakened<NO_FENCES>>);
    assert!(message.contains("torn"), "{message}");
}

/// A slot record (`size` stands for every metadata word) and the slot's
/// contents.
struct Record<W> {
    seq: W,
    holders: W,
    size: W,
    contents: UnsafeCell<u64>,
}

/// A channel reduced to what the steps touch: slot records, the queue and
/// `published`.
struct Channel<W> {
    records: Vec<Record<W>>,
    queue: Vec<W>,
    published: W,
}

/// Queue entries of the models: more than any model publishes, so an entry
/// is never overwritten.
const MODEL_QUEUE_LEN: u64 = 4;

impl<W: ModelWord> Channel<W> {
    /// `slots` empty slots; with `frame_one`, items 0 and 1 published, item
    /// 1 (contents 1) still in slot 0.
    fn new(slots: usize, frame_one: bool) -> Self {
        let records = (0..slots)
            .map(|i| {
                let (seq, contents) = match (i, frame_one) {
                    (0, true) => (1, 1),
                    _ => (SEQ_WRITING, 0),
                };
                Record {
                    seq: W::new(seq),
                    holders: W::new(0),
                    size: W::new(contents),
                    contents: UnsafeCell::new(contents),
                }
            })
            .collect();
        Channel {
            records,
            queue: (0..MODEL_QUEUE_LEN)
                .map(|seq| {
                    W::new(if frame_one && seq < 2 {
                        queue_entry(seq, 0)
                    } else {
                        0
                    })
                })
                .collect(),
            published: W::new(if frame_one { 2 } else { 0 }),
        }
    }

    /// The producer's side of item `seq`: claims a slot (from `first` on;
    /// none free: the frame is dropped), writes contents and metadata
    /// (both `seq`), publishes.
    fn produce(&self, seq: u64, first: usize) -> bool {
        let count = self.records.len();
        let Some(slot) = (0..count).map(|k| (first + k) % count).find(|&i| {
            let record = &self.records[i];
            claim_slot(&record.seq, &record.holders, record.seq.load(SeqCst))
        }) else {
            return false;
        };
        let record = &self.records[slot];
        // SAFETY: loom's cell; loom fails the model if a consumer's read
        // of it is not ordered with this write.
        record.contents.with_mut(|p| unsafe { *p = seq });
        record.size.store(seq, Relaxed);
        publish_frame(
            &record.seq,
            &self.queue[(seq % MODEL_QUEUE_LEN) as usize],
            &self.published,
            seq,
            slot as u64,
        );
        true
    }

    /// A consumer's take of item `target` (below `published`), as
    /// `Consumer::take` does it: the queue entry, hold, read, release.
    /// `Some(contents)`: taken; `None`: missed (claimed or overwritten).
    fn take(&self, target: u64, bit: u64) -> Option<u64> {
        let entry = load_queue_entry(&self.queue[(target % MODEL_QUEUE_LEN) as usize]);
        assert_eq!(
            queue_entry_seq(entry),
            target,
            "a queue entry of another item"
        );
        let record = &self.records[queue_entry_kind(entry) as usize];
        if !hold_slot(&record.holders, &record.seq, bit, target) {
            return None;
        }
        // SAFETY: loom's cell; loom fails the model if the producer's write
        // of it is not ordered with this read.
        let contents = record.contents.with(|p| unsafe { *p });
        assert_eq!(
            record.size.load(Relaxed),
            contents,
            "metadata of another frame than the contents"
        );
        release_slot(&record.holders, bit);
        Some(contents)
    }
}

/// The producer publishes a frame into an empty slot while a consumer looks
/// for it: a consumer that sees it published reads its contents and
/// metadata, all of them.
fn publish_model<W: ModelWord>() {
    let channel = Arc::new(Channel::<W>::new(1, false));
    let producer = {
        let channel = channel.clone();
        thread::spawn(move || assert!(channel.produce(0, 0)))
    };
    if load_published(&channel.published) > 0 {
        let taken = channel.take(0, 1);
        assert_eq!(taken, Some(0), "a published frame that is not in its slot");
    }
    producer.join().unwrap();
}

#[test]
fn loom_publish_makes_the_frame_visible() {
    check(publish_model::<AtomicU64>);
}

#[test]
fn loom_publish_with_relaxed_orderings_shows_stale_frames() {
    let message = check_fails(publish_model::<Weakened<ALL_RELAXED>>);
    assert!(
        message.contains("Causality violation")
            || message.contains("another item")
            || message.contains("another frame")
            || message.contains("not in its slot"),
        "{message}"
    );
}

/// Frame 1 sits published in a slot. Consumers take it (hold, read,
/// release) while the producer claims the slot to write frame 2: the
/// producer never writes while a consumer reads, and reads released before
/// a claim are ordered before the write.
fn claim_model<W: ModelWord>(consumers: u64) {
    let channel = Arc::new(Channel::<W>::new(1, true));
    let readers: Vec<_> = (0..consumers)
        .map(|index| {
            let channel = channel.clone();
            thread::spawn(move || {
                if let Some(contents) = channel.take(1, 1 << index) {
                    assert_eq!(contents, 1, "read a frame being written");
                }
            })
        })
        .collect();
    channel.produce(2, 0);
    for reader in readers {
        reader.join().unwrap();
    }
}

#[test]
fn loom_claim_excludes_a_holding_consumer() {
    check(|| claim_model::<AtomicU64>(1));
}

#[test]
fn loom_claim_excludes_two_holding_consumers() {
    check(|| claim_model::<AtomicU64>(2));
}

#[test]
fn loom_claim_without_seqcst_fences_writes_under_a_reader() {
    let message = check_fails(|| claim_model::<Weakened<SEQCST_FENCES_AS_ACQREL>>(1));
    assert!(
        message.contains("Causality violation") || message.contains("being written"),
        "{message}"
    );
}

#[test]
fn loom_claim_with_relaxed_orderings_writes_under_a_reader() {
    let message = check_fails(|| claim_model::<Weakened<ALL_RELAXED>>(1));
    assert!(
        message.contains("Causality violation") || message.contains("being written"),
        "{message}"
    );
}

/// A ring of two slots: the producer publishes items 0, 1, 2, taking any
/// slot nobody holds (as with `when-full=drop`), while a consumer of the
/// latest frame takes the newest item twice. Whatever it takes is whole:
/// the contents and metadata of the item it asked for, never a slot being
/// written, never an older frame left in a reused slot.
fn ring_model<W: ModelWord>() {
    let channel = Arc::new(Channel::<W>::new(2, false));
    let producer = {
        let channel = channel.clone();
        thread::spawn(move || {
            let mut seq = 0;
            for first in 0..3 {
                if channel.produce(seq, first % 2) {
                    seq += 1;
                }
            }
        })
    };
    for _ in 0..2 {
        let published = load_published(&channel.published);
        if published > 0 {
            let target = published - 1;
            if let Some(contents) = channel.take(target, 1) {
                assert_eq!(contents, target, "took another item than asked");
            }
        }
    }
    producer.join().unwrap();
}

#[test]
fn loom_ring_latest_consumer_takes_whole_frames() {
    check(ring_model::<AtomicU64>);
}

#[test]
fn loom_ring_with_relaxed_orderings_takes_broken_frames() {
    let message = check_fails(ring_model::<Weakened<ALL_RELAXED>>);
    assert!(
        message.contains("Causality violation")
            || message.contains("another item")
            || message.contains("another frame"),
        "{message}"
    );
}
