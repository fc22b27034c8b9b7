// SPDX-License-Identifier: MPL-2.0

//! A subscriber against a host producer in this process.

use super::*;
use crate::tests::unique_channel;
use crate::{GpuSync, ProducerSlots, SlotMemory, SlotRequest, create_producer_slots};
use cudaipc_channel::{FrameMeta, Producer, ProducerConfig};

const SIZE: usize = 64;

/// A host producer with one slot, and a subscriber attached to it.
fn pair() -> (Producer, Box<dyn ProducerSlots>, Subscriber) {
    let channel = unique_channel("subscriber");
    let no = AtomicBool::new(false);
    let producer = Producer::create(ProducerConfig {
        channel: channel.clone(),
        transport: TransportKind::Host.wire_value(),
        ..Default::default()
    })
    .unwrap();
    let slots = new_pool(&producer, &channel, 1);
    producer.set_caps("video/x-test", &no).unwrap();
    let config = SubscriberConfig {
        channel,
        mode: ConsumerMode::EveryFrame,
        wait_mode: WaitMode::Hybrid,
        connect_timeout: Some(Duration::from_secs(5)),
        device_id: None,
        on_finish_read_error: Arc::new(|_, e| panic!("finish_read: {e}")),
        ipc_mode: None,
        producers: Default::default(),
        hold: None,
        refuse_self_wait: false,
    };
    let subscriber = Subscriber::attach(config, &no, || {}).unwrap();
    (producer, slots, subscriber)
}

/// Host slots of pool `generation` (one slot), published as the pool.
fn new_pool(producer: &Producer, channel: &str, generation: u64) -> Box<dyn ProducerSlots> {
    let request = SlotRequest {
        channel: channel.to_owned(),
        session: producer.session(),
        generation,
        count: 1,
        size: SIZE,
        permissions: 0o600,
        gpu_sync: GpuSync::Event,
        ipc_mode: Default::default(),
    };
    let slots = create_producer_slots(TransportKind::Host, &request, None).unwrap();
    let descriptors = slots.slot_descriptors();
    producer
        .configure_pool(
            SIZE as u64,
            &descriptors,
            &slots.pool_descriptor(),
            &AtomicBool::new(false),
        )
        .unwrap();
    slots
}

fn publish(producer: &Producer, slots: &dyn ProducerSlots, byte: u8) {
    let slot = producer.reserve_now().expect("a free slot");
    write(producer, slots, slot, byte);
}

/// Fills reserved `slot` with `byte` and publishes it.
fn write(producer: &Producer, slots: &dyn ProducerSlots, slot: usize, byte: u8) {
    slots.before_write(slot, producer).unwrap();
    let SlotMemory::Host(region) = slots.slot_memory(slot) else {
        unreachable!("host transport")
    };
    // SAFETY: the producer owns the reserved slot; nothing else views it.
    let bytes = unsafe { region.as_mut_slice() }.expect("the producer's mapping is writable");
    let len = SIZE.min(bytes.len());
    bytes[..len].fill(byte);
    slots.after_write(slot).unwrap();
    let meta = FrameMeta {
        size: SIZE as u64,
        ..Default::default()
    };
    producer.publish(slot, &meta).unwrap();
}

/// Every frame comes from a new pool with new caps, each replaced as soon
/// as the consumer's cursor passed the frame before, racing its reading
/// of that frame: every frame must still arrive, with its own bytes and
/// caps (the producer keeps every pool alive here).
#[test]
fn every_frame_arrives_across_pool_and_caps_changes_right_after_it() {
    const FRAMES: u8 = 200;
    let (producer, slots, mut subscriber) = pair();
    let channel = subscriber.config.channel.clone();
    let producer = Arc::new(producer);
    let publishing = {
        let producer = producer.clone();
        std::thread::spawn(move || {
            let no = AtomicBool::new(false);
            let mut pools = vec![slots];
            for generation in 1..=FRAMES {
                if generation > 1 {
                    let slots = new_pool(&producer, &channel, u64::from(generation));
                    producer
                        .set_caps(&format!("video/x-test, n=(int){generation}"), &no)
                        .unwrap();
                    pools.push(slots);
                }
                let slots = pools.last().unwrap();
                let slot = producer.reserve(&no).unwrap().expect("block mode reserves");
                write(&producer, &**slots, slot, generation);
            }
            producer.publish_eos();
            pools
        })
    };
    let no = AtomicBool::new(false);
    let mut received = Vec::new();
    let mut caps = String::new();
    loop {
        match subscriber.next(&no).unwrap() {
            Event::Caps(c) => caps = c,
            Event::StreamEvent(_) => panic!("an event"),
            Event::Frame(frame) => {
                let byte = frame.host_bytes().unwrap()[0];
                let expected_caps = match byte {
                    1 => "video/x-test".to_owned(),
                    n => format!("video/x-test, n=(int){n}"),
                };
                assert_eq!(
                    caps, expected_caps,
                    "frame {} came with other caps",
                    frame.seq
                );
                assert_eq!(frame.host_bytes(), Some(&[byte; SIZE][..]));
                received.push(byte);
            }
            Event::Eos => break,
            Event::ProducerGone(gone) => panic!("the producer went: {gone:?}"),
        }
    }
    let _pools = publishing.join().unwrap();
    assert_eq!(
        received,
        (1..=FRAMES).collect::<Vec<_>>(),
        "frames lost at a pool change"
    );
    assert_eq!(subscriber.stale(), 0);
}

#[test]
fn a_held_frame_keeps_its_slot_until_dropped() {
    let no = AtomicBool::new(false);
    let (producer, slots, mut subscriber) = pair();
    publish(&producer, &*slots, 7);
    assert!(matches!(subscriber.next(&no), Ok(Event::Caps(c)) if c == "video/x-test"));
    let Ok(Event::Frame(frame)) = subscriber.next(&no) else {
        panic!("the frame after its caps")
    };
    assert_eq!(frame.host_bytes(), Some(&[7u8; SIZE][..]));
    assert_eq!((subscriber.held(), frame.frames_held()), (1, 1));
    assert_eq!(producer.reserve_now(), None, "the held slot is not free");
    drop(frame);
    assert_eq!(subscriber.held(), 0);
    publish(&producer, &*slots, 8);
    let Ok(Event::Frame(frame)) = subscriber.next(&no) else {
        panic!("a frame, its caps known")
    };
    assert_eq!(frame.host_bytes(), Some(&[8u8; SIZE][..]));
    drop(frame);
    producer.publish_eos();
    assert!(matches!(subscriber.next(&no), Ok(Event::Eos)));
}

#[test]
fn a_consumers_host_slot_is_read_only_and_outlives_the_channel() {
    let no = AtomicBool::new(false);
    let (producer, slots, mut subscriber) = pair();
    publish(&producer, &*slots, 5);
    assert!(matches!(subscriber.next(&no), Ok(Event::Caps(_))));
    let Ok(Event::Frame(frame)) = subscriber.next(&no) else {
        panic!("the frame after its caps")
    };
    let SlotMemory::Host(region) = frame.memory() else {
        panic!("host transport")
    };
    assert!(!region.is_writable());
    // SAFETY: nothing else views the region (and nothing is written).
    assert!(unsafe { region.as_mut_slice() }.is_none());
    drop((frame, subscriber, slots, producer));
    // The region keeps its mapping: still the frame's bytes.
    assert_eq!(&region.as_slice()[..SIZE], &[5u8; SIZE][..]);
}

#[test]
fn a_frame_not_handed_out_is_given_back_with_the_subscriber() {
    let no = AtomicBool::new(false);
    let (producer, slots, mut subscriber) = pair();
    publish(&producer, &*slots, 1);
    // The frame waits behind its caps inside the subscriber.
    assert!(matches!(subscriber.next(&no), Ok(Event::Caps(_))));
    assert_eq!(producer.reserve_now(), None);
    drop(subscriber);
    assert!(producer.reserve_now().is_some(), "the slot came back");
}

#[test]
fn a_wait_with_a_timeout_ends_without_an_event_and_a_later_frame_still_comes() {
    let no = AtomicBool::new(false);
    let (producer, slots, mut subscriber) = pair();
    let start = std::time::Instant::now();
    assert!(matches!(
        subscriber.next_within(&no, Some(Duration::from_millis(50))),
        Ok(None)
    ));
    assert!(start.elapsed() >= Duration::from_millis(50));
    publish(&producer, &*slots, 3);
    let timeout = Some(Duration::from_secs(5));
    assert!(matches!(
        subscriber.next_within(&no, timeout),
        Ok(Some(Event::Caps(_)))
    ));
    let Ok(Some(Event::Frame(frame))) = subscriber.next_within(&no, timeout) else {
        panic!("the frame after its caps")
    };
    assert_eq!(frame.host_bytes(), Some(&[3u8; SIZE][..]));
}

#[test]
fn a_closed_producer_is_an_event() {
    let no = AtomicBool::new(false);
    let (producer, _slots, mut subscriber) = pair();
    drop(producer);
    assert!(matches!(
        subscriber.next(&no),
        Ok(Event::ProducerGone(ProducerGone::Closed))
    ));
}
