// What travels beside the frames: each frame's data and the events between
// frames, with threads; a peer that scribbles the block is played by a
// second mapping (the producer's own, here).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::control_block::control_header;
use super::layout::*;
use super::*;

fn producer(channel: &str, bound: u32, live: bool) -> Producer {
    let p = Producer::create(ProducerConfig {
        channel: channel.into(),
        frame_data_bound: bound,
        ..Default::default()
    })
    .unwrap();
    let no = AtomicBool::new(false);
    p.configure_pool(64, &[[0u8; SLOT_DESCRIPTOR_BYTES]; 4], b"pool", &no)
        .unwrap();
    p.set_caps("video/x-raw, format=(string)RGB", &no).unwrap();
    p.set_live(live);
    p
}

fn consumer(channel: &str, mode: ConsumerMode) -> Consumer {
    Consumer::attach(
        ConsumerConfig {
            channel: channel.into(),
            mode,
            connect_timeout: Some(Duration::from_secs(5)),
            ..Default::default()
        },
        &AtomicBool::new(false),
    )
    .unwrap()
}

fn publish(p: &Producer, data: &[u8]) -> usize {
    let no = AtomicBool::new(false);
    let slot = p.reserve(&no).unwrap().expect("a slot");
    let meta = FrameMeta {
        size: 1,
        planes: vec![(0, 8)],
        data: data.to_vec(),
        ..Default::default()
    };
    p.publish(slot, &meta).unwrap();
    slot
}

fn next(c: &mut Consumer) -> Item {
    c.next(&AtomicBool::new(false), Some(Duration::from_secs(5)))
        .unwrap()
}

/// A second mapping of the producer's block, as a peer that scribbles it
/// has.
fn block_of(p: &Producer) -> shm::SharedFile {
    shm::SharedFile::open(p.path()).unwrap()
}

fn unique(tag: &str) -> String {
    super::tests::unique_channel(tag)
}

#[test]
fn each_frame_carries_its_own_data_up_to_the_bound() {
    let channel = unique("data");
    let p = producer(&channel, 64, false);
    let mut c = consumer(&channel, ConsumerMode::EveryFrame);
    let sizes = [0usize, 1, 7, 8, 9, 63, 64];
    for (n, &size) in sizes.iter().enumerate() {
        let data: Vec<u8> = (0..size).map(|i| (n * 31 + i) as u8).collect();
        publish(&p, &data);
        match next(&mut c) {
            Item::Frame(frame) => {
                assert_eq!(frame.data, data, "frame {n} of {size} bytes");
                c.release(frame.slot);
            }
            other => panic!("{other:?}"),
        }
    }
    // Beyond the bound: the frame arrives, its data does not, and the
    // producer counts it.
    publish(&p, &[9u8; 65]);
    match next(&mut c) {
        Item::Frame(frame) => assert!(frame.data.is_empty(), "{:?}", frame.data),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        control_header(&block_of(&p))
            .frame_data_dropped
            .load(Ordering::Relaxed),
        1
    );
}

#[test]
fn a_bound_rounds_up_to_whole_words_and_one_past_the_limit_is_refused() {
    let channel = unique("bound");
    let p = producer(&channel, 13, false);
    assert_eq!(p.frame_data_bound(), 16);
    drop(p);
    let refused = Producer::create(ProducerConfig {
        channel: unique("bound-big"),
        frame_data_bound: MAX_FRAME_DATA_BOUND + 1,
        ..Default::default()
    });
    assert!(
        matches!(
            refused,
            Err(ChannelError::OutOfRange {
                setting: Setting::FrameDataBound,
                ..
            })
        ),
        "{refused:?}"
    );
}

#[test]
fn a_data_length_past_the_bound_is_refused_and_the_frame_still_arrives() {
    let channel = unique("data-hostile");
    let p = producer(&channel, 64, false);
    let mut c = consumer(&channel, ConsumerMode::EveryFrame);
    let slot = publish(&p, b"fine");
    // A peer scribbles the length of the published frame's data.
    control_header(&block_of(&p)).slots[slot]
        .data_len
        .store(u32::MAX, Ordering::Relaxed);
    match next(&mut c) {
        Item::Frame(frame) => {
            assert!(frame.data.is_empty());
            assert_eq!(frame.size, 1, "the frame itself arrives");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.travelling_counts().frame_data_refused, 1);
}

#[test]
fn a_header_whose_size_disagrees_with_its_bound_is_refused_at_attach() {
    let channel = unique("data-size");
    let p = producer(&channel, 64, false);
    // The bound says the file is larger than it is.
    control_header(&block_of(&p))
        .frame_data_bound
        .store(MAX_FRAME_DATA_BOUND, Ordering::Relaxed);
    let attached = Consumer::attach(
        ConsumerConfig {
            channel: channel.clone(),
            connect_timeout: Some(Duration::from_secs(1)),
            ..Default::default()
        },
        &AtomicBool::new(false),
    );
    assert!(
        matches!(
            attached,
            Err(ChannelError::Corrupt(Corruption::HeaderSizes))
        ),
        "{attached:?}"
    );
}

#[test]
fn events_arrive_between_the_frames_they_were_sent_between() {
    let channel = unique("events");
    let p = producer(&channel, 64, false);
    let mut c = consumer(&channel, ConsumerMode::EveryFrame);
    let no = AtomicBool::new(false);
    publish(&p, b"f0");
    p.publish_event(b"tags", &no).unwrap();
    p.publish_event(b"custom", &no).unwrap();
    publish(&p, b"f1");
    p.publish_event(&[7u8; EVENT_CAPACITY], &no).unwrap();
    p.publish_eos();
    let mut seen = Vec::new();
    loop {
        match next(&mut c) {
            Item::Frame(frame) => {
                // Events take no frame numbers: f1 is frame 1.
                let data = String::from_utf8(frame.data.clone()).unwrap();
                assert_eq!(format!("f{}", frame.seq), data, "the frame's number");
                seen.push(data);
                c.release(frame.slot);
            }
            Item::Event(bytes) if bytes.len() == EVENT_CAPACITY => seen.push("full".into()),
            Item::Event(bytes) => seen.push(format!("event {}", String::from_utf8(bytes).unwrap())),
            Item::Eos => break,
        }
    }
    assert_eq!(
        seen,
        ["f0", "event tags", "event custom", "f1", "full"],
        "in the order published"
    );
    assert!(matches!(
        p.publish_event(&[0u8; EVENT_CAPACITY + 1], &no),
        Err(ChannelError::EventTooLarge { .. })
    ));
}

#[test]
fn an_every_frame_consumer_gets_every_event_of_a_burst_longer_than_the_records() {
    let channel = unique("event-burst");
    let p = producer(&channel, 0, true);
    let mut c = consumer(&channel, ConsumerMode::EveryFrame);
    let events = 3 * EVENT_RECORDS as u32;
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let no = AtomicBool::new(false);
            for n in 0..events {
                p.publish_event(&n.to_le_bytes(), &no).unwrap();
            }
            p.publish_eos();
        });
        let mut got = Vec::new();
        loop {
            match next(&mut c) {
                Item::Event(bytes) => got.push(u32::from_le_bytes(bytes.try_into().unwrap())),
                Item::Eos => break,
                Item::Frame(f) => panic!("{f:?}"),
            }
            // Slower than the producer: it waits for this consumer.
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(got, (0..events).collect::<Vec<_>>());
    });
    assert_eq!(c.travelling_counts().events_lost, 0);
}

#[test]
fn an_event_read_while_it_is_overwritten_is_never_torn() {
    // A consumer at its own pace on a live channel, far behind: events are
    // overwritten under it. Every one it gets is whole (one value repeated);
    // the others are counted lost.
    let channel = unique("event-torn");
    let p = producer(&channel, 0, true);
    let mut c = consumer(&channel, ConsumerMode::Auto);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let no = AtomicBool::new(false);
            for n in 0..2000u32 {
                let byte = (n % 251) as u8;
                p.publish_event(&[byte; EVENT_CAPACITY], &no).unwrap();
            }
            stop.store(true, Ordering::SeqCst);
            p.publish_eos();
        });
        let mut whole = 0;
        loop {
            match next(&mut c) {
                Item::Event(bytes) => {
                    assert!(bytes.iter().all(|&b| b == bytes[0]), "a torn event");
                    whole += 1;
                }
                Item::Eos => break,
                Item::Frame(f) => panic!("{f:?}"),
            }
        }
        assert!(whole > 0);
    });
}
