// Channel tests with real threads; tests/channel_processes.rs covers
// processes.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::control_block::{control_header, recorded_producer_may_run};
use super::layout::*;
use super::*;

pub(crate) fn unique_channel(tag: &str) -> String {
    format!("t-{tag}-{:x}", shm::random_u64())
}

fn producer(channel: &str, when_full: WhenFull) -> Producer {
    let p = Producer::create(ProducerConfig {
        channel: channel.into(),
        when_full,
        ..Default::default()
    })
    .unwrap();
    let no = AtomicBool::new(false);
    p.configure_pool(64, &[[0u8; SLOT_DESCRIPTOR_BYTES]; 4], b"pool", &no)
        .unwrap();
    p.set_caps("video/x-raw, format=(string)RGB", &no).unwrap();
    p
}

fn consumer(channel: &str, mode: ConsumerMode) -> Consumer {
    consumer_waiting(channel, mode, WaitMode::Hybrid)
}

fn consumer_waiting(channel: &str, mode: ConsumerMode, wait_mode: WaitMode) -> Consumer {
    Consumer::attach(
        ConsumerConfig {
            channel: channel.into(),
            mode,
            wait_mode,
            connect_timeout: Some(Duration::from_secs(5)),
            ipc_mode: None,
            producers: Default::default(),
            hold: None,
            refuse_self_wait: false,
        },
        &AtomicBool::new(false),
    )
    .unwrap()
}

fn meta(size: u64, pts: u64) -> FrameMeta {
    FrameMeta {
        size,
        pts: Some(pts),
        planes: vec![(0, 8)],
        ..Default::default()
    }
}

#[test]
fn a_mode_beyond_0o777_and_a_ring_beyond_max_slots_are_refused() {
    for permissions in [0o4777, u32::MAX, 777] {
        let channel = unique_channel("mode");
        let err = Producer::create(ProducerConfig {
            channel: channel.clone(),
            permissions,
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            matches!(err, ChannelError::OutOfRange { setting: Setting::Permissions, value }
                if value == u64::from(permissions)),
            "{err}"
        );
        assert!(err.to_string().contains("0 to 0o777"), "{err}");
        assert!(!shm::control_path(&channel).exists());
    }
    let p = producer(&unique_channel("ring"), WhenFull::Block);
    let no = AtomicBool::new(false);
    let deep = vec![[0u8; SLOT_DESCRIPTOR_BYTES]; MAX_SLOTS + 1];
    let err = p.configure_pool(64, &deep, b"pool", &no).unwrap_err();
    assert!(
        matches!(
            err,
            ChannelError::OutOfRange {
                setting: Setting::Slots,
                value: 65
            }
        ),
        "{err}"
    );
    assert_eq!(p.slot_count(), 4, "the ring in place stays");
}

#[test]
fn a_second_producer_is_refused_and_a_closed_channel_is_removed() {
    let channel = unique_channel("dup");
    let p = producer(&channel, WhenFull::Block);
    let err = Producer::create(ProducerConfig {
        channel: channel.clone(),
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        matches!(err, ChannelError::InUse { pid, .. } if pid == std::process::id()),
        "{err}"
    );
    assert!(err.to_string().contains("in use"), "{err}");
    let path = p.path().to_path_buf();
    assert!(path.exists());
    drop(p);
    assert!(!path.exists());
}

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

/// A consumer that attaches after the end of stream waits for the next
/// stream; when the producer closes instead, its stream ended: the consumer
/// gets that end, in either mode, not "closed without an end of stream".
#[test]
fn a_consumer_attached_after_the_end_of_stream_ends_when_the_producer_closes() {
    for mode in [ConsumerMode::EveryFrame, ConsumerMode::Latest] {
        let channel = unique_channel("ended");
        let no = AtomicBool::new(false);
        let p = producer(&channel, WhenFull::Block);
        for i in 0..3 {
            let slot = p.reserve(&no).unwrap().unwrap();
            p.publish(slot, &meta(1, i)).unwrap();
        }
        p.publish_eos();
        let mut c = consumer(&channel, mode);
        // Still open: the next stream may come.
        assert!(
            matches!(
                c.next(&no, Some(Duration::from_millis(100))),
                Err(ChannelError::Timeout)
            ),
            "{mode:?}"
        );
        drop(p);
        let item = c.next(&no, Some(Duration::from_secs(1))).unwrap();
        assert!(matches!(item, Item::Eos), "{mode:?}");
        assert_eq!(c.frames_missed(), 0, "{mode:?}");
    }
}

#[test]
fn a_consumer_started_first_waits_for_the_producer() {
    let channel = unique_channel("early");
    let ch = channel.clone();
    let waiter = std::thread::spawn(move || {
        let mut c = consumer(&ch, ConsumerMode::EveryFrame);
        let no = AtomicBool::new(false);
        c.next(&no, Some(Duration::from_secs(5))).unwrap()
    });
    std::thread::sleep(Duration::from_millis(150));
    let no = AtomicBool::new(false);
    let p = producer(&channel, WhenFull::Block);
    // Publish until the consumer, which attaches within ATTACH_POLL, has one;
    // it holds at most one slot, so block mode leaves three for this loop.
    let mut seq = 0;
    while !waiter.is_finished() && seq < 200 {
        let slot = p.reserve(&no).unwrap().unwrap();
        p.publish(slot, &meta(1, seq)).unwrap();
        seq += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    let item = waiter.join().unwrap();
    assert!(matches!(item, Item::Frame(_)), "{item:?}");
}

#[test]
fn connect_timeout_and_interrupt_end_attach() {
    let channel = unique_channel("none");
    let start = std::time::Instant::now();
    let err = Consumer::attach(
        ConsumerConfig {
            channel: channel.clone(),
            connect_timeout: Some(Duration::from_millis(100)),
            ..Default::default()
        },
        &AtomicBool::new(false),
    )
    .unwrap_err();
    assert!(matches!(err, ChannelError::NoProducer { .. }), "{err}");
    assert!(start.elapsed() >= Duration::from_millis(100));
    let err = Consumer::attach(
        ConsumerConfig {
            channel,
            connect_timeout: None,
            ..Default::default()
        },
        &AtomicBool::new(true),
    )
    .unwrap_err();
    assert!(matches!(err, ChannelError::Interrupted), "{err}");
}

#[test]
fn producer_close_is_reported_after_the_last_frame() {
    let channel = unique_channel("close");
    let no = AtomicBool::new(false);
    let p = producer(&channel, WhenFull::Block);
    let mut c = consumer(&channel, ConsumerMode::EveryFrame);
    let slot = p.reserve(&no).unwrap().unwrap();
    p.publish(slot, &meta(1, 0)).unwrap();
    drop(p);
    assert!(matches!(c.next(&no, None).unwrap(), Item::Frame(_)));
    let err = c.next(&no, Some(Duration::from_secs(2))).unwrap_err();
    assert!(
        matches!(err, ChannelError::ProducerGone(ProducerGone::Closed)),
        "{err}"
    );
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
fn the_first_frame_waits_for_consumers_still_waiting() {
    // One consumer attached already, another still waits (its marker is
    // there): the first reservation waits for the second, not just for any
    // one consumer.
    let channel = unique_channel("gate");
    let still_waiting = crate::directory::WaiterMarker::create(&channel).unwrap();
    let p = Arc::new(producer(&channel, WhenFull::Block));
    let _attached = consumer(&channel, ConsumerMode::EveryFrame);
    let p2 = p.clone();
    let first = std::thread::spawn(move || p2.reserve(&AtomicBool::new(false)).unwrap());
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !first.is_finished(),
        "the first frame went out before a waiting consumer attached"
    );
    drop(still_waiting);
    let start = std::time::Instant::now();
    assert!(first.join().unwrap().is_some());
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn a_consumer_in_another_pid_namespace_is_refused() {
    let channel = unique_channel("pidns");
    let _p = producer(&channel, WhenFull::Block);
    let block = crate::ControlBlock::open(&channel).unwrap();
    block.header().producer_pid_namespace.store(
        shm::pid_namespace() + 1,
        std::sync::atomic::Ordering::SeqCst,
    );
    let err = Consumer::attach(
        ConsumerConfig {
            channel,
            connect_timeout: Some(Duration::from_secs(1)),
            ..Default::default()
        },
        &AtomicBool::new(false),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ChannelError::OtherPidNamespace {
                descriptor_channel: false,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("another PID namespace"), "{err}");
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

/// Every ordering a producer can announce (events, host synchronisation,
/// the timeline) is one a consumer attaches to; an unknown one is refused.
#[test]
fn consumers_accept_every_gpu_sync_a_producer_announces() {
    for (gpu_sync, accepted) in [
        (GPU_SYNC_EVENT, true),
        (GPU_SYNC_HOST, true),
        (GPU_SYNC_TIMELINE, true),
        (7, false),
    ] {
        let channel = unique_channel("gpusync");
        let _p = Producer::create(ProducerConfig {
            channel: channel.clone(),
            gpu_sync,
            ..Default::default()
        })
        .unwrap();
        let attached = Consumer::attach(
            ConsumerConfig {
                channel: channel.clone(),
                connect_timeout: Some(Duration::from_secs(2)),
                ..Default::default()
            },
            &AtomicBool::new(false),
        );
        match (attached, accepted) {
            (Ok(c), true) => assert_eq!(c.info().gpu_sync, gpu_sync),
            (Err(e), false) => assert!(e.to_string().contains("unknown gpu-sync"), "{e}"),
            (Ok(_), false) => panic!("gpu-sync {gpu_sync} accepted"),
            (Err(e), true) => panic!("gpu-sync {gpu_sync} refused: {e}"),
        }
    }
}

/// The recorded producer process counts only where it can be checked: a
/// dead one of our namespace and user marks the block dead; another user's
/// block keeps to its lock (/proc may hide that user's processes).
#[cfg(unix)]
#[test]
fn a_recorded_producer_is_checked_only_where_proc_can_tell() {
    let channel = unique_channel("recorded");
    let live = producer(&channel, WhenFull::Block);
    let path = shm::control_path(&channel);
    let shared = shm::SharedFile::open(&path).unwrap();
    assert!(recorded_producer_may_run(&shared), "this process runs");
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let h = control_header(&shared);
    h.producer_pid
        .store(gone_pid, std::sync::atomic::Ordering::SeqCst);
    h.producer_start_time
        .store(0, std::sync::atomic::Ordering::SeqCst);
    assert!(!recorded_producer_may_run(&shared), "a reaped process");
    let namespace = h
        .producer_pid_namespace
        .load(std::sync::atomic::Ordering::SeqCst);
    h.producer_pid_namespace
        .store(namespace ^ 1, std::sync::atomic::Ordering::SeqCst);
    assert!(recorded_producer_may_run(&shared), "another PID namespace");
    h.producer_pid_namespace
        .store(namespace, std::sync::atomic::Ordering::SeqCst);
    // Another user's block: only root can make one here.
    if shm::effective_uid() == 0 {
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        assert!(recorded_producer_may_run(&shared), "another user's block");
        std::os::unix::fs::chown(&path, Some(0), None).unwrap();
    }
    drop(live);
}

/// A producer in another process is taken for the live one it is: the
/// start time it recorded for itself is the one this process reads for its
/// pid, and a consumer attaches. (Under qemu-user the two differed by a
/// tick: consumers took every live producer for a dead one.)
#[test]
fn a_producer_in_another_process_is_recognised_by_its_recorded_start_time() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    use std::sync::atomic::Ordering::SeqCst;
    const TEST: &str = "a_producer_in_another_process_is_recognised_by_its_recorded_start_time";
    const CHILD_CHANNEL: &str = "CUDAIPC_TEST_CHILD_PRODUCER";
    if let Ok(channel) = std::env::var(CHILD_CHANNEL) {
        let _live = producer(&channel, WhenFull::Block);
        println!("producer-ready");
        // Live until the parent closes our stdin.
        let _ = std::io::stdin().read_line(&mut String::new());
        return;
    }
    let channel = unique_channel("starttime");
    // This test again, in a child process, by its name in the harness.
    let name = format!("{}::{TEST}", module_path!().split_once("::").unwrap().1);
    let child = Command::new(std::env::current_exe().unwrap())
        .args([&name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_CHANNEL, &channel)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    /// Ends the child (ours, by its pid) if an assertion fails first.
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            if matches!(self.0.try_wait(), Ok(None)) {
                let _ = self.0.kill();
            }
            let _ = self.0.wait();
        }
    }
    let mut child = Reap(child);
    let stdout = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let (ready, started) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // The harness writes "test NAME ... " before the test's own output;
        // the rest is read too, so that the child's harness can write it.
        for line in stdout.lines().map_while(Result::ok) {
            if line.ends_with("producer-ready") {
                let _ = ready.send(true);
            }
        }
        let _ = ready.send(false);
    });
    assert_eq!(
        started.recv_timeout(Duration::from_secs(60)),
        Ok(true),
        "the child producer never started"
    );
    let pid = child.0.id();
    let shared = shm::SharedFile::open(&shm::control_path(&channel)).unwrap();
    let h = control_header(&shared);
    assert_eq!(h.producer_pid.load(SeqCst), pid);
    assert_eq!(
        Some(h.producer_start_time.load(SeqCst)),
        shm::process_start_time(pid),
        "the start time the producer recorded for itself is not the one others read"
    );
    assert!(
        recorded_producer_may_run(&shared),
        "a live producer taken for dead"
    );
    let consumer = consumer(&channel, ConsumerMode::EveryFrame);
    assert_eq!(consumer.info().producer_pid, pid);
    assert!(
        consumer.producer_gone().is_none(),
        "a live producer taken for gone"
    );
    drop(child.0.stdin.take());
    assert!(
        child.0.wait().unwrap().success(),
        "the child producer failed"
    );
    assert!(matches!(
        consumer.producer_gone(),
        Some(ProducerGone::Closed)
    ));
}

/// A look without a wait (connect timeout zero) leaves no waiter marker,
/// not even for a moment: only consumers that wait are counted as waiting.
#[test]
fn a_consumer_that_only_looks_is_never_counted_as_waiting() {
    let channel = unique_channel("look");
    let done = Arc::new(AtomicBool::new(false));
    let looker = {
        let (channel, done) = (channel.clone(), done.clone());
        std::thread::spawn(move || {
            for _ in 0..300 {
                let looked = Consumer::attach(
                    ConsumerConfig {
                        channel: channel.clone(),
                        connect_timeout: Some(Duration::ZERO),
                        ..Default::default()
                    },
                    &AtomicBool::new(false),
                );
                assert!(matches!(looked, Err(ChannelError::NoProducer { .. })));
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let mut seen = 0;
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        seen = seen.max(shm::count_live_waiters(&channel));
    }
    looker.join().unwrap();
    assert_eq!(
        seen, 0,
        "a consumer that only looked was counted as waiting"
    );
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

// O_TMPFILE and /proc: Linux only (Windows falls back to a private name).
#[cfg(unix)]
#[test]
fn a_control_block_has_no_name_until_it_is_linked() {
    use std::os::unix::fs::PermissionsExt;
    let dir = shm::shm_dir().join(unique_channel("unnamed"));
    std::fs::create_dir(&dir).unwrap();
    let name = dir.join("cudaipc-block");
    let block = shm::SharedFile::create_unnamed(&dir, &name, control_size(), 0o640)
        .unwrap()
        .expect("the shm folder's file system (tmpfs) has O_TMPFILE");
    // A producer killed now would leave nothing in the folder.
    let names = || std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(names(), 0, "a block under construction has a name");
    shm::link_unnamed(&block.file, &name).unwrap();
    assert!(block.is_linked_at_path(), "the name is not the block's");
    let mode = std::fs::metadata(&name).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o640);
    let again = shm::link_unnamed(&block.file, &name).unwrap_err();
    assert_eq!(again.kind(), std::io::ErrorKind::AlreadyExists);
    assert_eq!(names(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_consumer_waiting_on_a_channel_is_told_of_the_others_never_of_its_own() {
    let waited = unique_channel("waited-for");
    let other = unique_channel("other-live");
    // Starting or stopping, a producer of the channel waited for is listed
    // live for a moment while the consumer still waits.
    let _starting = producer(&waited, WhenFull::Block);
    let _other = producer(&other, WhenFull::Block);
    let note = directory::other_live_channels_note(&waited);
    assert!(
        note.starts_with("other channels with a producer: "),
        "{note}"
    );
    assert!(note.contains(&other), "{note}");
    assert!(!note.contains(&waited), "{note}");
    let all = directory::live_channels_note();
    assert!(all.contains(&waited) && all.contains(&other), "{all}");
}

#[test]
fn a_stopping_producer_takes_no_new_consumer_and_is_still_listed_live() {
    let channel = unique_channel("stopping");
    let p = producer(&channel, WhenFull::Block);
    p.begin_close();
    let listed = directory::list_channels();
    let entry = listed.iter().find(|c| c.name == channel).unwrap();
    assert_eq!(entry.state, directory::ChannelState::Live);
    let attach = Consumer::attach(
        ConsumerConfig {
            channel: channel.clone(),
            connect_timeout: Some(Duration::from_millis(200)),
            ..Default::default()
        },
        &AtomicBool::new(false),
    );
    assert!(
        matches!(attach, Err(ChannelError::NoProducer { .. })),
        "{attach:?}"
    );
}
