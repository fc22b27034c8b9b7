// Consumers attaching: before the producer, with a timeout or an
// interrupt, to a producer whose first frame waits for them, across PID
// namespaces and GPU orderings; what a consumer that waits is told.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::{consumer, meta, producer, unique_channel};
use crate::layout::*;
use crate::*;

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
