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

use crate::layout::{SEQ_WRITING, queue_entry_kind, queue_entry_seq};
use crate::protocol::{
    Word, claim_slot, hold_slot, load_published, load_queue_entry, publish_frame, read_seqlocked,
    release_slot, write_seqlocked,
};

impl Word for AtomicU64 {
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }
    fn store(&self, value: u64, order: Ordering) {
        AtomicU64::store(self, value, order)
    }
    fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        AtomicU64::fetch_add(self, value, order)
    }
    fn fetch_or(&self, value: u64, order: Ordering) -> u64 {
        AtomicU64::fetch_or(self, value, order)
    }
    fn fetch_and(&self, value: u64, order: Ordering) -> u64 {
        AtomicU64::fetch_and(self, value, order)
    }
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

/// One slot of a channel: its record's words and its contents.
struct Slot<W> {
    seq: W,
    holders: W,
    size: W,
    queue_entry: W,
    published: W,
    contents: UnsafeCell<u64>,
}

impl<W: ModelWord> Slot<W> {
    /// A slot whose record holds item `seq`, `published` items so far.
    fn new(seq: u64, contents: u64, published: u64) -> Self {
        Slot {
            seq: W::new(seq),
            holders: W::new(0),
            size: W::new(contents),
            queue_entry: W::new(0),
            published: W::new(published),
            contents: UnsafeCell::new(contents),
        }
    }

    /// The producer's part of a frame: contents and metadata (`size` stands
    /// for every metadata word), then the publication of item `seq`.
    fn write_and_publish(&self, seq: u64, contents: u64) {
        // SAFETY: loom's cell; loom fails the model if a consumer's read
        // of it is not ordered with this write.
        self.contents.with_mut(|p| unsafe { *p = contents });
        self.size.store(contents, Relaxed);
        publish_frame(&self.seq, &self.queue_entry, &self.published, seq, 0);
    }

    /// A consumer's read of a held slot: metadata and contents agree.
    fn read_held(&self) -> u64 {
        // SAFETY: loom's cell; loom fails the model if the producer's write
        // of it is not ordered with this read.
        let contents = self.contents.with(|p| unsafe { *p });
        let size = self.size.load(Relaxed);
        assert_eq!(
            size, contents,
            "metadata of another frame than the contents"
        );
        contents
    }
}

/// The producer publishes a frame into an empty slot while a consumer looks
/// for it: a consumer that sees it published reads its contents and
/// metadata, all of them.
fn publish_model<W: ModelWord>() {
    let slot = Arc::new(Slot::<W>::new(SEQ_WRITING, 0, 0));
    let producer = {
        let slot = slot.clone();
        thread::spawn(move || slot.write_and_publish(0, 7))
    };
    if load_published(&slot.published) > 0 {
        let entry = load_queue_entry(&slot.queue_entry);
        assert_eq!(
            queue_entry_seq(entry),
            0,
            "a queue entry older than published"
        );
        assert_eq!(queue_entry_kind(entry), 0);
        assert!(
            hold_slot(&slot.holders, &slot.seq, 1, 0),
            "a published frame that is not in its slot"
        );
        assert_eq!(slot.read_held(), 7);
        release_slot(&slot.holders, 1);
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
            || message.contains("metadata of another frame")
            || message.contains("not in its slot"),
        "{message}"
    );
}

/// Frame 1 sits published in a slot. Consumers take it (hold, read,
/// release) while the producer claims the slot to write frame 2: the
/// producer never writes while a consumer reads, and reads released before
/// a claim are ordered before the write.
fn claim_model<W: ModelWord>(consumers: u64) {
    let slot = Arc::new(Slot::<W>::new(1, 1, 2));
    let readers: Vec<_> = (0..consumers)
        .map(|index| {
            let slot = slot.clone();
            thread::spawn(move || {
                let bit = 1 << index;
                if hold_slot(&slot.holders, &slot.seq, bit, 1) {
                    assert_eq!(slot.read_held(), 1, "read a frame being written");
                    release_slot(&slot.holders, bit);
                }
            })
        })
        .collect();
    let old_seq = slot.seq.load(SeqCst);
    if claim_slot(&slot.seq, &slot.holders, old_seq) {
        slot.write_and_publish(2, 2);
    }
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
