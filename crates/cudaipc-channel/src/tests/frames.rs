// Frames from a producer to its consumers: order and metadata, what each
// when-full mode does, many threads at once, pools replaced under held
// frames, slots published again, corrupt queue entries.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::{consumer, consumer_waiting, meta, producer, unique_channel};
use crate::control_block::control_header;
use crate::layout::*;
use crate::*;

#[test]
fn frames_and_metadata_arrive_in_order() {
    let channel = unique_channel("order");
    let no = AtomicBool::new(false);
    let p = producer(&channel, WhenFull::Block);
    let mut c = consumer(&channel, ConsumerMode::EveryFrame);
    let pool = c.pool().unwrap();
    assert_eq!(pool.slot_descriptors.len(), 4);
    assert_eq!(&pool.pool_descriptor[..4], b"pool");
    assert_eq!(c.caps().unwrap().1, "video/x-raw, format=(string)RGB");
    for i in 0..10u64 {
        let slot = p.reserve(&no).unwrap().unwrap();
        p.publish(slot, &meta(10 + i, i * 1000)).unwrap();
        let Item::Frame(f) = c.next(&no, Some(Duration::from_secs(5))).unwrap() else {
            panic!("expected a frame");
        };
        assert_eq!(
            (f.seq, f.size, f.pts, f.slot),
            (i, 10 + i, Some(i * 1000), slot)
        );
        assert_eq!(f.planes, vec![(0, 8)]);
        c.release(f.slot);
    }
    p.publish_eos();
    assert_eq!(
        c.next(&no, Some(Duration::from_secs(5))).unwrap(),
        Item::Eos
    );
    assert_eq!(c.frames_missed(), 0);
}

#[test]
fn block_mode_waits_for_the_slowest_consumer() {
    let channel = unique_channel("block");
    let no = AtomicBool::new(false);
    let p = producer(&channel, WhenFull::Block);
    let mut c = consumer(&channel, ConsumerMode::EveryFrame);
    for i in 0..4 {
        let slot = p.reserve(&no).unwrap().unwrap();
        p.publish(slot, &meta(1, i)).unwrap();
    }
    // All four slots are pending for the consumer: the fifth reservation
    // waits until the consumer takes and releases one.
    let p = Arc::new(p);
    let p2 = p.clone();
    let blocked = std::thread::spawn(move || {
        let no = AtomicBool::new(false);
        p2.reserve(&no).unwrap()
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!blocked.is_finished());
    let Item::Frame(first) = c.next(&no, None).unwrap() else {
        panic!()
    };
    assert!(
        !blocked.is_finished(),
        "a taken but unreleased slot must stay busy"
    );
    c.release(first.slot);
    let slot = blocked.join().unwrap().unwrap();
    assert_eq!(slot, first.slot);
    assert!(p.stats().waits >= 1);
}

#[test]
fn drop_mode_never_waits_and_counts() {
    let channel = unique_channel("drop");
    let no = AtomicBool::new(false);
    let p = producer(&channel, WhenFull::Drop);
    let mut c = consumer(&channel, ConsumerMode::EveryFrame);
    // The consumer holds two frames; the producer keeps going in the others.
    let mut held = vec![];
    for i in 0..2 {
        let slot = p.reserve(&no).unwrap().unwrap();
        p.publish(slot, &meta(1, i)).unwrap();
        let Item::Frame(f) = c.next(&no, None).unwrap() else {
            panic!()
        };
        held.push(f);
    }
    for i in 2..40 {
        let slot = p.reserve(&no).unwrap().expect("two slots are free");
        assert!(
            held.iter().all(|f| f.slot != slot),
            "a held slot was reused"
        );
        p.publish(slot, &meta(1, i)).unwrap();
    }
    // Frames overwritten before the lagging consumer took them are drops.
    let stats = p.stats();
    assert!(stats.overwritten > 0, "{stats:?}");
    assert_eq!(stats.dropped, stats.overwritten);
    // The consumer lagged: it misses what was overwritten and gets the rest.
    let Item::Frame(f) = c.next(&no, None).unwrap() else {
        panic!()
    };
    assert!(f.seq > 2 && f.missed_before > 0, "{f:?}");
    // Hold everything: now frames are dropped, not waited for.
    let mut slots: Vec<usize> = held.iter().map(|f| f.slot).collect();
    slots.push(f.slot);
    while let Ok(Some(Item::Frame(f))) = c.try_next() {
        slots.push(f.slot);
    }
    // It missed exactly the frames that were overwritten.
    assert_eq!(c.frames_missed(), p.stats().overwritten);
    slots.sort();
    slots.dedup();
    if slots.len() == 4 {
        let before = p.stats();
        assert_eq!(p.reserve(&no).unwrap(), None);
        let after = p.stats();
        assert_eq!(after.dropped, before.dropped + 1);
        assert_eq!(after.overwritten, before.overwritten);
    }
}

#[test]
fn latest_mode_skips_to_the_newest_frame() {
    let channel = unique_channel("latest");
    let no = AtomicBool::new(false);
    let p = producer(&channel, WhenFull::Block);
    let mut c = consumer(&channel, ConsumerMode::Latest);
    for i in 0..3 {
        let slot = p.reserve(&no).unwrap().unwrap();
        p.publish(slot, &meta(1, i)).unwrap();
    }
    let Item::Frame(f) = c.next(&no, None).unwrap() else {
        panic!()
    };
    assert_eq!(f.seq, 2);
    c.release(f.slot);
    // A latest-mode consumer never holds the producer back.
    for i in 3..20 {
        let slot = p.reserve(&no).unwrap().unwrap();
        p.publish(slot, &meta(1, i)).unwrap();
    }
    let Item::Frame(f) = c.next(&no, None).unwrap() else {
        panic!()
    };
    assert_eq!(f.seq, 19);
    assert_eq!(c.frames_missed(), 0);
}

#[test]
fn many_threads_publish_and_release_without_loss() {
    let channel = unique_channel("threads");
    let p = Arc::new(producer(&channel, WhenFull::Block));
    const FRAMES: u64 = 20_000;
    let consumers: Vec<_> = (0..3)
        .map(|k| {
            let mode = [WaitMode::Spin, WaitMode::Hybrid, WaitMode::Sleep][k];
            let mut c = consumer_waiting(&channel, ConsumerMode::EveryFrame, mode);
            std::thread::spawn(move || {
                let no = AtomicBool::new(false);
                let mut expected = 0;
                // Release on another thread, as buffers die anywhere.
                let (tx, rx) = std::sync::mpsc::channel::<usize>();
                let handle = c.release_handle();
                let releaser = std::thread::spawn(move || {
                    for slot in rx {
                        handle.release(slot);
                    }
                });
                while let Item::Frame(f) = c.next(&no, Some(Duration::from_secs(20))).unwrap() {
                    assert_eq!(f.seq, expected);
                    assert_eq!(f.pts, Some(expected));
                    expected += 1;
                    tx.send(f.slot).unwrap();
                }
                drop(tx);
                releaser.join().unwrap();
                (expected, c.frames_missed())
            })
        })
        .collect();
    let no = AtomicBool::new(false);
    for i in 0..FRAMES {
        let slot = p.reserve(&no).unwrap().unwrap();
        p.publish(slot, &meta(8, i)).unwrap();
    }
    p.publish_eos();
    for c in consumers {
        assert_eq!(c.join().unwrap(), (FRAMES, 0));
    }
    assert_eq!(p.stats().frames, FRAMES);
}

#[test]
fn corrupt_fields_are_reported_not_trusted() {
    let channel = unique_channel("corrupt");
    let no = AtomicBool::new(false);
    let p = producer(&channel, WhenFull::Block);
    let mut c = consumer(&channel, ConsumerMode::EveryFrame);
    let slot = p.reserve(&no).unwrap().unwrap();
    p.publish(slot, &meta(1, 0)).unwrap();
    // Tamper with the queue entry: a slot index far out of range.
    let shared = shm::SharedFile::open(p.path()).unwrap();
    let h = control_header(&shared);
    h.queue[0].store(queue_entry(0, 200), std::sync::atomic::Ordering::SeqCst);
    let err = c.next(&no, Some(Duration::from_secs(1))).unwrap_err();
    assert!(
        matches!(
            err,
            ChannelError::Corrupt(Corruption::SlotIndex { found: 200, .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("out of range"), "{err}");
    // Sequence numbers going backwards.
    h.published.store(0, std::sync::atomic::Ordering::SeqCst);
    let err = c.next(&no, Some(Duration::from_secs(1))).unwrap_err();
    assert!(
        matches!(
            err,
            ChannelError::Corrupt(Corruption::SequenceBackwards { found: 0, .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("backwards"), "{err}");
}

#[test]
fn a_new_pool_does_not_wait_for_frames_consumers_hold() {
    // A consumer's sink keeps its last frame until the next one, which
    // cannot come before the new pool: replacing the pool must not wait for
    // that frame, and must not hand its slot record out while it is held.
    let channel = unique_channel("repool");
    let no = AtomicBool::new(false);
    let p = producer(&channel, WhenFull::Block);
    let mut c = consumer(&channel, ConsumerMode::EveryFrame);
    let slot = p.reserve(&no).unwrap().unwrap();
    p.publish(slot, &meta(8, 0)).unwrap();
    let Item::Frame(held) = c.next(&no, Some(Duration::from_secs(5))).unwrap() else {
        panic!()
    };
    let give_up = Arc::new(AtomicBool::new(false));
    let g = give_up.clone();
    let timer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(2));
        g.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    p.configure_pool(128, &[[1u8; SLOT_DESCRIPTOR_BYTES]; 4], b"pool2", &give_up)
        .expect("the new pool waited for a held frame");
    assert_eq!(p.held_slots()[held.slot], 1 << c.index());
    for i in 1..10 {
        let slot = p.reserve(&no).unwrap().unwrap();
        assert_ne!(slot, held.slot, "a held slot record was reused");
        p.publish(slot, &meta(100, i)).unwrap();
        let Item::Frame(f) = c.next(&no, Some(Duration::from_secs(5))).unwrap() else {
            panic!()
        };
        assert_eq!((f.seq, f.size, f.pool_generation), (i, 100, 2));
        c.release(f.slot);
    }
    c.release(held.slot);
    assert_eq!(p.held_slots()[held.slot], 0);
    timer.join().unwrap();
}

/// The producer orders its writes after the reads of every consumer whose
/// release descriptors it has seen: a change in the consumer set must always
/// show in the fingerprint, including two consumers publishing at once (a
/// hash of the records let such changes cancel out, about one run in three).
#[test]
fn consumers_publishing_release_descriptors_together_are_always_noticed() {
    for round in 0..64u8 {
        let channel = unique_channel("fingerprint");
        let p = producer(&channel, WhenFull::Block);
        let consumers = [
            consumer(&channel, ConsumerMode::EveryFrame),
            consumer(&channel, ConsumerMode::EveryFrame),
        ];
        let before = p.consumer_fingerprint();
        assert_eq!(p.consumer_release_info(), (vec![], vec![]));
        for (n, c) in consumers.iter().enumerate() {
            c.set_release_descriptors(&[[round ^ n as u8; RELEASE_DESCRIPTOR_BYTES]; 4]);
        }
        assert_ne!(p.consumer_fingerprint(), before, "round {round}");
        let (infos, unread) = p.consumer_release_info();
        assert!(unread.is_empty());
        assert_eq!(infos.len(), 2);
        for (info, n) in infos.iter().zip(0u8..) {
            assert_eq!(
                info.descriptors,
                vec![[round ^ n; RELEASE_DESCRIPTOR_BYTES]; 4]
            );
        }
        // New descriptors of the same length (a new pool) are a change too.
        let published = p.consumer_fingerprint();
        consumers[0].set_release_descriptors(&[[!round; RELEASE_DESCRIPTOR_BYTES]; 4]);
        assert_ne!(p.consumer_fingerprint(), published, "round {round}");
    }
}

/// Publishing a slot again: only a slot of the mask that every consumer took
/// and released, and that nobody reserved, is handed out; the consumer then
/// gets the frame again as a new one, with the new metadata.
#[test]
fn a_slot_is_published_again_only_once_every_consumer_is_done_with_it() {
    let channel = unique_channel("again");
    let no = AtomicBool::new(false);
    let p = producer(&channel, WhenFull::Block);
    let mut c = consumer(&channel, ConsumerMode::EveryFrame);
    let slot = p.reserve(&no).unwrap().unwrap();
    p.publish(slot, &meta(10, 1000)).unwrap();
    let mask = 1u64 << slot;
    // Not taken yet: the consumer would lose it.
    assert_eq!(p.reserve_one_of(mask), None);
    let Item::Frame(first) = c.next(&no, Some(Duration::from_secs(5))).unwrap() else {
        panic!("expected a frame");
    };
    // Held by the consumer.
    assert_eq!(p.reserve_one_of(mask), None);
    c.release(first.slot);
    // Slots outside the mask are never handed out.
    assert_eq!(p.reserve_one_of(!mask & 0xf), Some((slot + 1) % 4));
    p.cancel((slot + 1) % 4);
    assert_eq!(p.reserve_one_of(mask), Some(slot));
    // Reserved: not twice.
    assert_eq!(p.reserve_one_of(mask), None);
    p.publish(slot, &meta(10, 2000)).unwrap();
    let Item::Frame(again) = c.next(&no, Some(Duration::from_secs(5))).unwrap() else {
        panic!("expected a frame");
    };
    assert_eq!(
        (again.slot, again.seq, again.pts),
        (slot, first.seq + 1, Some(2000))
    );
    c.release(again.slot);
    assert_eq!(c.frames_missed(), 0);
}

/// The deterministic core of a pool change right after a publication: once
/// an every-frame consumer has taken frame 0, nothing holds the producer
/// back from replacing the pool and the caps, yet the frame must still be
/// read from its own pool with its own caps.
#[test]
fn a_taken_frame_keeps_its_pool_and_caps_when_both_are_replaced_at_once() {
    let channel = unique_channel("repool");
    let no = AtomicBool::new(false);
    let p = producer(&channel, WhenFull::Block);
    let mut c = consumer(&channel, ConsumerMode::EveryFrame);
    let slot = p.reserve(&no).unwrap().unwrap();
    p.publish(slot, &meta(10, 0)).unwrap();
    let Item::Frame(first) = c.next(&no, Some(Duration::from_secs(5))).unwrap() else {
        panic!("expected frame 0");
    };
    p.configure_pool(64, &[[1u8; SLOT_DESCRIPTOR_BYTES]; 2], b"pool2", &no)
        .unwrap();
    p.set_caps("video/x-raw, format=(string)GRAY8", &no)
        .unwrap();
    let pool = c.frame_pool(first.pool_generation).expect("frame 0's pool");
    assert_eq!(
        (&pool.pool_descriptor[..4], pool.slot_descriptors.len()),
        (&b"pool"[..], 4)
    );
    assert_eq!(
        c.frame_caps(first.caps_generation),
        Some("video/x-raw, format=(string)RGB")
    );
    c.release(first.slot);
    let slot = p.reserve(&no).unwrap().unwrap();
    p.publish(slot, &meta(10, 1)).unwrap();
    let Item::Frame(second) = c.next(&no, Some(Duration::from_secs(5))).unwrap() else {
        panic!("expected frame 1");
    };
    let pool = c
        .frame_pool(second.pool_generation)
        .expect("frame 1's pool");
    assert_eq!(&pool.pool_descriptor[..5], b"pool2");
    assert_eq!(
        c.frame_caps(second.caps_generation),
        Some("video/x-raw, format=(string)GRAY8")
    );
    assert_eq!(
        c.frame_pool(first.pool_generation),
        None,
        "frame 0's pool is gone"
    );
    assert_eq!(c.frames_missed(), 0);
}
