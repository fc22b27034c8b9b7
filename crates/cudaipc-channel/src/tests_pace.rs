// Consumers at their own pace: live channels, consumers that ask for every
// frame, declared holds (docs/protocol.md, "Live channels and holds").

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::tests::unique_channel;
use super::*;
use crate::layout::slots_for_hold;

/// A producer of a 4-slot pool, live or not.
fn producer(channel: &str, live: bool) -> Producer {
    let p = Producer::create(ProducerConfig {
        channel: channel.into(),
        ..Default::default()
    })
    .unwrap();
    let no = AtomicBool::new(false);
    p.configure_pool(64, &[[0u8; layout::SLOT_DESCRIPTOR_BYTES]; 4], b"pool", &no)
        .unwrap();
    p.set_caps("video/x-raw, format=(string)RGB", &no).unwrap();
    p.set_live(live);
    p
}

fn consumer(channel: &str, mode: ConsumerMode, hold: Option<u32>) -> Consumer {
    Consumer::attach(
        ConsumerConfig {
            channel: channel.into(),
            mode,
            connect_timeout: Some(Duration::from_secs(5)),
            hold,
            refuse_self_wait: true,
            ..Default::default()
        },
        &AtomicBool::new(false),
    )
    .unwrap()
}

fn publish(p: &Producer, n: u64) {
    let no = AtomicBool::new(false);
    for i in 0..n {
        let slot = p.reserve(&no).unwrap().expect("a slot");
        p.publish(
            slot,
            &FrameMeta {
                size: 1,
                pts: Some(i),
                ..Default::default()
            },
        )
        .unwrap();
    }
}

fn next_frame(c: &mut Consumer) -> Frame {
    let no = AtomicBool::new(false);
    match c.next(&no, Some(Duration::from_secs(5))).unwrap() {
        Item::Frame(f) => f,
        Item::Eos => panic!("end of stream"),
        Item::Event(_) => panic!("an event"),
    }
}

#[test]
fn a_live_producer_never_waits_for_a_consumer_that_falls_behind() {
    let channel = unique_channel("live-slow");
    let p = producer(&channel, true);
    let mut slow = consumer(&channel, ConsumerMode::Auto, None);
    // Ready before the first frame: it has nothing to catch up.
    assert!(slow.try_next().unwrap().is_none());
    publish(&p, 1);
    let started = next_frame(&mut slow);
    slow.release(started.slot);
    // Far more frames than slots, none taken: on a live channel nothing waits.
    publish(&p, 20);
    assert_eq!(p.stats().waits, 0, "{:?}", p.stats());
    // The slow consumer gets the frames still there, in order, and counts
    // those it missed.
    let first = next_frame(&mut slow);
    assert!(
        first.seq >= 17,
        "the oldest frame still in the ring: {first:?}"
    );
    assert_eq!(first.missed_before, first.seq - 1);
    slow.release(first.slot);
    let second = next_frame(&mut slow);
    assert_eq!(second.seq, first.seq + 1, "in order after a miss");
    assert_eq!(slow.frames_missed(), first.seq - 1);
}

#[test]
fn a_live_producer_waits_for_a_starting_consumer_until_it_caught_up() {
    let channel = unique_channel("live-start");
    let p = Arc::new(producer(&channel, true));
    // Attached, not ready yet: it makes its context and opens the slots.
    let mut starting = consumer(&channel, ConsumerMode::Auto, None);
    publish(&p, 4);
    // The ring is full of frames it has not taken: the fifth waits for it,
    // longer than a second (a CUDA consumer's start on a busy host).
    let p2 = p.clone();
    let blocked = std::thread::spawn(move || publish(&p2, 1));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !blocked.is_finished(),
        "a consumer still starting gets the frames published since it attached"
    );
    let waiting = p.last_blockers();
    assert!(
        waiting.len() == 1 && waiting[0].starting && !waiting[0].every_frame,
        "{waiting:?}"
    );
    // Ready: every frame from the first published after it attached, in
    // order, none missed.
    for seq in 0..5 {
        let f = next_frame(&mut starting);
        assert_eq!((f.seq, f.missed_before), (seq, 0));
        starting.release(f.slot);
    }
    blocked.join().unwrap();
    // While it catches up (for twice its start) the producer waits for
    // it...
    publish(&p, 4);
    let p2 = p.clone();
    let blocked = std::thread::spawn(move || publish(&p2, 1));
    std::thread::sleep(Duration::from_millis(100));
    assert!(!blocked.is_finished(), "still catching up");
    let f = next_frame(&mut starting);
    assert_eq!((f.seq, f.missed_before), (5, 0));
    starting.release(f.slot);
    blocked.join().unwrap();
    // ...and after that it keeps its own pace: the producer waits no more.
    std::thread::sleep(Duration::from_millis(3200));
    let waits = p.stats().waits;
    publish(&p, 20);
    assert_eq!(p.stats().waits, waits, "{:?}", p.stats());
}

#[test]
fn a_consumer_not_ready_within_the_start_limit_is_not_waited_for() {
    let channel = unique_channel("live-idle");
    let p = producer(&channel, true);
    let mut idle = consumer(&channel, ConsumerMode::Auto, None);
    let started = std::time::Instant::now();
    publish(&p, 8);
    let waited = started.elapsed();
    assert!(
        waited >= START_LIMIT - Duration::from_millis(100)
            && waited < START_LIMIT + Duration::from_secs(2),
        "{waited:?}"
    );
    // Late, it takes what is still there and counts the frames it missed.
    let f = next_frame(&mut idle);
    assert!(f.seq >= 4 && f.missed_before == f.seq, "{f:?}");
}

#[test]
fn a_consumer_that_asks_for_every_frame_holds_a_live_producer_back_and_is_named() {
    let channel = unique_channel("live-every");
    let p = Arc::new(producer(&channel, true));
    let mut every = consumer(&channel, ConsumerMode::EveryFrame, None);
    let mut fast = consumer(&channel, ConsumerMode::Auto, None);
    publish(&p, 4);
    // It took every frame published since it attached: its start is over,
    // and the producer no longer waits for it.
    for _ in 0..4 {
        let taken = next_frame(&mut fast);
        fast.release(taken.slot);
    }
    let p2 = p.clone();
    let blocked = std::thread::spawn(move || publish(&p2, 1));
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !blocked.is_finished(),
        "the every-frame consumer has 4 frames to take"
    );
    let blockers = p.last_blockers();
    assert_eq!(blockers.len(), 1, "{blockers:?}");
    assert_eq!(blockers[0].pid, std::process::id());
    assert!(
        blockers[0].every_frame && blockers[0].behind == 4,
        "{blockers:?}"
    );
    let f = next_frame(&mut every);
    every.release(f.slot);
    blocked.join().unwrap();
    assert_eq!(every.frames_missed(), 0);
}

#[test]
fn a_channel_that_is_not_live_waits_for_every_consumer_as_before() {
    let channel = unique_channel("not-live");
    let p = Arc::new(producer(&channel, false));
    let mut c = consumer(&channel, ConsumerMode::Auto, None);
    publish(&p, 4);
    let p2 = p.clone();
    let blocked = std::thread::spawn(move || publish(&p2, 1));
    std::thread::sleep(Duration::from_millis(100));
    assert!(!blocked.is_finished(), "lossless by default when not live");
    // Going live lets the producer on at once.
    p.set_live(true);
    blocked.join().unwrap();
    let f = next_frame(&mut c);
    assert_eq!((f.seq, f.missed_before), (1, 1), "frame 0 was overwritten");
}

#[test]
fn a_consumer_holding_every_slot_is_told_at_once_instead_of_waiting_on_itself() {
    let channel = unique_channel("self-wait");
    let p = producer(&channel, false);
    let mut c = consumer(&channel, ConsumerMode::Auto, None);
    publish(&p, 4);
    let held: Vec<Frame> = (0..4).map(|_| next_frame(&mut c)).collect();
    let no = AtomicBool::new(false);
    let started = std::time::Instant::now();
    let err = c.next(&no, Some(Duration::from_secs(5))).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "not a timeout");
    assert!(
        matches!(
            err,
            ChannelError::HoldsEverySlot {
                held: 4,
                slots: 4,
                hold: None,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("holds 4 frames") && text.contains("hold="),
        "{text}"
    );
    // Releasing one lets it wait (and get) the next frame.
    c.release(held[0].slot);
    publish(&p, 1);
    assert_eq!(next_frame(&mut c).seq, 4);
}

#[test]
fn a_declared_hold_bounds_the_frames_held_and_must_fit_the_ring() {
    let channel = unique_channel("hold");
    let p = producer(&channel, true);
    // 4 slots fit hold=2 (2 kept, 1 read, 1 written).
    let mut c = consumer(&channel, ConsumerMode::Auto, Some(2));
    publish(&p, 3);
    let kept: Vec<Frame> = (0..3).map(|_| next_frame(&mut c)).collect();
    let no = AtomicBool::new(false);
    let err = c.next(&no, Some(Duration::from_secs(5))).unwrap_err();
    assert!(
        matches!(
            err,
            ChannelError::HoldsEverySlot {
                held: 3,
                hold: Some(2),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("hold=2"), "{err}");
    drop(kept);
    // hold=3 needs 5 slots: refused when the pool is read, naming both.
    let mut too_many = consumer(&channel, ConsumerMode::Auto, Some(3));
    publish(&p, 1);
    let err = too_many
        .next(&no, Some(Duration::from_secs(5)))
        .unwrap_err();
    assert!(
        matches!(
            err,
            ChannelError::HoldExceedsRing {
                hold: 3,
                slots: 4,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("4 slots") && text.contains("slots=5"),
        "{text}"
    );
}

/// A sizing policy for the mechanism's tests: the deepest declared hold's
/// slots (the transport's policy, `slots_consumers_need`, is tested there).
fn deepest_hold_needs(holds: &mut dyn Iterator<Item = Option<u32>>, _live: bool) -> Option<usize> {
    holds.flatten().max().map(slots_for_hold)
}

#[test]
fn a_ring_that_may_grow_asks_its_producer_to_and_a_ring_that_does_not_grow_in_time_is_named() {
    let channel = unique_channel("grow");
    let p = producer(&channel, false);
    let no = AtomicBool::new(false);
    // hold=6 needs 8 slots; the 4-slot ring may grow to 16.
    let mut c = consumer(&channel, ConsumerMode::Auto, Some(6));
    assert_eq!(p.declared_holds().flatten().max(), Some(6));
    publish(&p, 4);
    p.set_ring_grows_to(16, deepest_hold_needs);
    // The producer is told to grow before it reserves (nothing reserved).
    assert!(
        matches!(
            p.reserve(&no),
            Err(ChannelError::RingTooShallow { wanted: 8 })
        ),
        "the producer must be told its ring is too shallow"
    );
    // The consumer takes the ring's frames, and holds every slot within its
    // hold: it waits for the ring to grow, for a bounded time, and is told.
    let kept: Vec<Frame> = (0..4).map(|_| next_frame(&mut c)).collect();
    let started = std::time::Instant::now();
    let err = c.next(&no, Some(Duration::from_secs(10))).unwrap_err();
    let waited = started.elapsed();
    assert!(
        matches!(
            err,
            ChannelError::HoldsEverySlot {
                held: 4,
                slots: 4,
                hold: Some(6),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(waited < Duration::from_secs(8), "waited {waited:?}");
    let text = err.to_string();
    assert!(
        text.contains("did not grow its ring") && text.contains("slots=8"),
        "{text}"
    );
    // A ring that may not grow refuses the hold when the pool is read.
    drop(kept);
    drop(c);
    p.stop_ring_growth();
    let mut refused = consumer(&channel, ConsumerMode::Auto, Some(6));
    publish(&p, 1);
    assert!(
        matches!(
            refused.next(&no, Some(Duration::from_secs(5))),
            Err(ChannelError::HoldExceedsRing {
                hold: 6,
                slots: 4,
                ..
            })
        ),
        "a fixed ring must refuse the hold"
    );
}

fn next_item(c: &mut Consumer) -> Item {
    c.next(&AtomicBool::new(false), Some(Duration::from_secs(5)))
        .unwrap()
}

#[test]
fn at_the_end_of_a_live_stream_a_slow_consumer_skips_to_the_newest_frame_and_the_producer_waits_only_for_it()
 {
    let channel = unique_channel("live-end");
    let p = producer(&channel, true);
    let mut slow = consumer(&channel, ConsumerMode::Auto, None);
    let mut keeping_up = consumer(&channel, ConsumerMode::Auto, None);
    assert!(slow.try_next().unwrap().is_none());
    assert!(keeping_up.try_next().unwrap().is_none());
    publish(&p, 1);
    // The slow consumer reads frame 0 for a long time, holding its slot.
    let reading = next_frame(&mut slow);
    for _ in 0..3 {
        let f = next_frame(&mut keeping_up);
        keeping_up.release(f.slot);
        publish(&p, 1);
    }
    publish(&p, 1);
    p.publish_eos();
    p.begin_close();
    // Ends without waiting for the frames it fell behind on: they are missed.
    let no = AtomicBool::new(false);
    assert!(
        !p.wait_released(Duration::from_millis(50)),
        "frame 0 is held"
    );
    slow.release(reading.slot);
    let newest = next_frame(&mut slow);
    assert_eq!(
        (newest.seq, newest.missed_before),
        (4, 3),
        "frames 1 to 3 missed"
    );
    slow.release(newest.slot);
    assert!(matches!(
        slow.next(&no, Some(Duration::from_secs(5))).unwrap(),
        Item::Eos
    ));
    assert_eq!(slow.frames_missed(), 3);
    assert!(
        p.wait_released(Duration::ZERO),
        "nothing held, nobody waited for"
    );
    // One two frames behind takes every frame, then the end.
    for seq in 3..5 {
        let f = next_frame(&mut keeping_up);
        assert_eq!(f.seq, seq);
        keeping_up.release(f.slot);
    }
    assert!(matches!(next_item(&mut keeping_up), Item::Eos));
    assert_eq!(keeping_up.frames_missed(), 0);
}

#[test]
fn a_producer_that_stops_without_an_end_of_stream_gives_a_slow_consumer_its_newest_frame() {
    let channel = unique_channel("live-stop");
    let p = producer(&channel, true);
    let mut slow = consumer(&channel, ConsumerMode::Auto, None);
    assert!(slow.try_next().unwrap().is_none());
    publish(&p, 4);
    p.begin_close();
    // The newest frame, then word that the producer closed once it has.
    let newest = next_frame(&mut slow);
    assert_eq!((newest.seq, newest.missed_before), (3, 3));
    slow.release(newest.slot);
    assert!(slow.try_next().unwrap().is_none());
    p.close();
    let no = AtomicBool::new(false);
    assert!(matches!(
        slow.next(&no, Some(Duration::from_secs(5))),
        Err(ChannelError::ProducerGone(ProducerGone::Closed))
    ));
}

#[test]
fn a_consumer_that_asks_for_every_frame_still_gets_every_frame_at_the_end() {
    let channel = unique_channel("every-end");
    let p = producer(&channel, true);
    let mut every = consumer(&channel, ConsumerMode::EveryFrame, None);
    assert!(every.try_next().unwrap().is_none());
    publish(&p, 4);
    p.publish_eos();
    p.begin_close();
    for seq in 0..4 {
        let f = next_frame(&mut every);
        assert_eq!(f.seq, seq);
        every.release(f.slot);
    }
    assert!(matches!(next_item(&mut every), Item::Eos));
    assert!(p.wait_released(Duration::ZERO));
}
