// SPDX-License-Identifier: MPL-2.0

//! The API in one process on the host transport: loans, bad input, and the
//! ends of a stream. Each test has its own channel.

use std::time::{Duration, Instant};

use cudaipc::{
    AppData, Error, Frames, Plane, Published, Publisher, PublisherOptions, Subscriber,
    SubscriberOptions, Transport, VideoFormat, VideoLayout, WhenFull,
};

const WAIT: Option<Duration> = Some(Duration::from_secs(5));

fn unique_channel(tag: &str) -> String {
    format!("t-api-{tag}-{:x}", cudaipc_channel::shm::random_u64())
}

fn layout() -> VideoLayout {
    VideoLayout::new(VideoFormat::Rgba, 16, 8).unwrap()
}

fn host(slots: usize, when_full: WhenFull) -> PublisherOptions {
    PublisherOptions {
        transport: Transport::Host,
        slots,
        when_full,
        ..Default::default()
    }
}

fn pair(tag: &str, options: PublisherOptions) -> (Publisher, Subscriber) {
    let channel = unique_channel(tag);
    let publisher = Publisher::create(&channel, layout(), options).unwrap();
    let subscriber = Subscriber::attach(&channel, SubscriberOptions::default()).unwrap();
    (publisher, subscriber)
}

#[test]
fn attaching_to_an_unknown_channel_gives_the_no_producer_error_after_the_timeout() {
    let channel = unique_channel("unknown");
    let timeout = Duration::from_millis(150);
    let start = Instant::now();
    let options = SubscriberOptions {
        timeout: Some(timeout),
        ..Default::default()
    };
    let err = Subscriber::attach(&channel, options).unwrap_err();
    assert!(start.elapsed() >= timeout, "it waited the timeout");
    assert!(
        matches!(&err, Error::NoProducer { channel: c, timeout: Some(t) } if *c == channel && *t == timeout),
        "{err:?}"
    );
    assert!(err.to_string().contains("no producer"), "{err}");
}

#[test]
fn a_frame_of_the_wrong_size_is_refused_and_nothing_is_published() {
    let (publisher, mut subscriber) = pair("size", host(2, WhenFull::Block));
    let size = layout().frame_size();
    for given in [0, size - 1, size + 1] {
        let err = publisher.publish(&vec![0; given], None).unwrap_err();
        assert!(
            matches!(err, Error::FrameSize { expected, given: g } if expected == size && g == given),
            "{err:?}"
        );
    }
    let err = subscriber
        .next_frame(Some(Duration::from_millis(100)))
        .unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err:?}");
}

#[test]
fn strides_too_small_and_planes_outside_the_frame_are_refused() {
    let err = VideoLayout::with_strides(VideoFormat::Rgba, 16, 8, &[63]).unwrap_err();
    assert!(matches!(err, Error::InvalidLayout(_)), "{err:?}");
    assert!(err.to_string().contains("stride 63"), "{err}");
    let planes = [
        Plane {
            offset: 0,
            stride: 16,
        },
        Plane {
            offset: 16 * 8,
            stride: 16,
        },
    ];
    // NV12's chroma plane ends at 16 * 8 + 16 * 4 = 192 bytes.
    assert!(VideoLayout::with_planes(VideoFormat::Nv12, 16, 8, &planes, 191).is_err());
    assert!(VideoLayout::with_planes(VideoFormat::Nv12, 16, 8, &planes, 192).is_ok());
    assert!(VideoLayout::with_planes(VideoFormat::Nv12, 16, 8, &planes[..1], 192).is_err());
    assert!(matches!(
        "YUY2".parse::<VideoFormat>(),
        Err(Error::UnsupportedFormat(name)) if name == "YUY2"
    ));
}

#[test]
fn a_padded_layout_travels_with_its_frames() {
    let channel = unique_channel("padded");
    let layout = VideoLayout::with_strides(VideoFormat::I420, 10, 4, &[16, 8, 8]).unwrap();
    assert_eq!(layout.frame_size(), 16 * 4 + 8 * 2 * 2);
    let publisher = Publisher::create(&channel, layout.clone(), host(2, WhenFull::Block)).unwrap();
    let mut subscriber = Subscriber::attach(&channel, SubscriberOptions::default()).unwrap();
    let bytes: Vec<u8> = (0..layout.frame_size()).map(|i| i as u8).collect();
    publisher.publish(&bytes, None).unwrap();
    let frame = subscriber.next_frame(WAIT).unwrap().unwrap();
    assert_eq!(frame.layout(), &layout);
    assert_eq!(frame.host_bytes(), Some(&bytes[..]));
    let mut copy = vec![0; layout.frame_size()];
    frame.copy_to_host(&mut copy).unwrap();
    assert_eq!(copy, bytes);
    assert!(matches!(
        frame.copy_to_host(&mut [0; 3]),
        Err(Error::FrameSize { given: 3, .. })
    ));
}

#[test]
fn a_loan_is_published_in_place_and_a_dropped_loan_gives_its_slot_back() {
    let (publisher, mut subscriber) = pair("loan", host(1, WhenFull::Drop));
    let mut loan = publisher.loan().unwrap();
    assert_eq!(loan.device_ptr(), None, "host transport");
    loan.host_bytes_mut().unwrap().fill(1);
    // The only slot is lent out.
    assert!(matches!(publisher.loan(), Err(Error::NoFreeSlot)));
    assert_eq!(
        publisher
            .publish(&vec![9; layout().frame_size()], None)
            .unwrap(),
        Published::Dropped
    );
    drop(loan);
    // Given back unpublished: free again, and nothing reached the reader.
    let mut loan = publisher.loan().unwrap();
    assert!(matches!(
        subscriber.next_frame(Some(Duration::from_millis(50))),
        Err(Error::Timeout(_))
    ));
    let bytes = loan.host_bytes_mut().unwrap();
    assert_eq!(bytes.len(), layout().frame_size());
    bytes.fill(2);
    loan.publish(Some(Duration::from_millis(7))).unwrap();
    let frame = subscriber.next_frame(WAIT).unwrap().unwrap();
    assert!(frame.host_bytes().unwrap().iter().all(|&b| b == 2));
    assert_eq!(frame.pts(), Some(Duration::from_millis(7)));
    // The held frame holds the only slot.
    assert!(matches!(publisher.loan(), Err(Error::NoFreeSlot)));
    drop(frame);
    assert!(publisher.loan().is_ok(), "the released slot is free");
}

#[test]
fn a_loan_goes_to_another_thread() {
    let (publisher, mut subscriber) = pair("thread", host(2, WhenFull::Block));
    let mut loan = publisher.loan().unwrap();
    std::thread::spawn(move || {
        loan.host_bytes_mut().unwrap().fill(5);
        loan.publish(None)
    })
    .join()
    .unwrap()
    .unwrap();
    let frame = subscriber.next_frame(WAIT).unwrap().unwrap();
    assert!(frame.host_bytes().unwrap().iter().all(|&b| b == 5));
    assert_eq!(frame.pts(), None);
}

#[test]
fn a_loan_that_outlives_its_publisher_is_not_published() {
    let (publisher, _subscriber) = pair("outlive", host(2, WhenFull::Block));
    let loan = publisher.loan().unwrap();
    drop(publisher);
    assert!(matches!(loan.publish(None), Err(Error::Closed)));
}

#[test]
fn every_frame_arrives_in_order_then_the_end_of_the_stream() {
    let (publisher, mut subscriber) = pair("order", host(2, WhenFull::Block));
    let size = layout().frame_size();
    let writer = std::thread::spawn(move || {
        for n in 0..50u8 {
            publisher.publish(&vec![n; size], None).unwrap();
        }
        publisher.eos();
        publisher
    });
    let mut seqs = Vec::new();
    for n in 0..50u8 {
        let frame = subscriber.next_frame(WAIT).unwrap().unwrap();
        assert!(
            frame.host_bytes().unwrap().iter().all(|&b| b == n),
            "frame {n}"
        );
        seqs.push(frame.seq());
    }
    assert!(
        subscriber.next_frame(WAIT).unwrap().is_none(),
        "end of stream"
    );
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    drop(writer.join().unwrap());
}

#[test]
fn a_publisher_dropped_without_an_end_of_stream_is_producer_gone() {
    let (publisher, mut subscriber) = pair("gone", host(2, WhenFull::Block));
    drop(publisher);
    let err = subscriber.next_frame(WAIT).unwrap_err();
    assert!(
        matches!(err, Error::ProducerGone { died: false, .. }),
        "{err:?}"
    );
}

#[test]
fn a_latest_frame_subscriber_gets_the_newest_frame() {
    let channel = unique_channel("latest");
    let publisher = Publisher::create(&channel, layout(), host(4, WhenFull::Block)).unwrap();
    let options = SubscriberOptions {
        frames: Frames::Latest,
        ..Default::default()
    };
    let mut subscriber = Subscriber::attach(&channel, options).unwrap();
    for n in 0..3u8 {
        publisher
            .publish(&vec![n; layout().frame_size()], None)
            .unwrap();
    }
    let frame = subscriber.next_frame(WAIT).unwrap().unwrap();
    assert!(frame.host_bytes().unwrap().iter().all(|&b| b == 2));
}

#[test]
fn a_descriptor_channel_works_like_a_named_one() {
    let channel = unique_channel("fd");
    let options = PublisherOptions {
        ipc_mode: cudaipc::IpcMode::Fd,
        ..host(2, WhenFull::Block)
    };
    let publisher = Publisher::create(&channel, layout(), options).unwrap();
    let mut subscriber = Subscriber::attach(
        &channel,
        SubscriberOptions {
            ipc_mode: Some(cudaipc::IpcMode::Fd),
            ..Default::default()
        },
    )
    .unwrap();
    publisher
        .publish(&vec![3; layout().frame_size()], None)
        .unwrap();
    let frame = subscriber.next_frame(WAIT).unwrap().unwrap();
    assert!(frame.host_bytes().unwrap().iter().all(|&b| b == 3));
}

#[test]
fn a_taken_or_invalid_channel_name_is_refused() {
    let channel = unique_channel("taken");
    let _first = Publisher::create(&channel, layout(), host(1, WhenFull::Block)).unwrap();
    let err = Publisher::create(&channel, layout(), host(1, WhenFull::Block)).unwrap_err();
    assert!(
        matches!(&err, Error::ChannelInUse { pid, .. } if *pid == std::process::id()),
        "{err:?}"
    );
    for name in ["", "a/b"] {
        let err = Publisher::create(name, layout(), host(1, WhenFull::Block)).unwrap_err();
        assert!(
            matches!(err, Error::InvalidChannelName(_)),
            "{name:?}: {err:?}"
        );
    }
}

#[test]
fn the_cuda_transport_without_a_device_is_a_device_error() {
    if cudaipc_transport::cuda::is_available() {
        return;
    }
    let options = PublisherOptions {
        transport: Transport::Cuda,
        ..Default::default()
    };
    let err = Publisher::create(&unique_channel("nocuda"), layout(), options).unwrap_err();
    assert!(matches!(err, Error::Device(_)), "{err:?}");
}

#[test]
fn a_live_publisher_never_waits_for_an_auto_subscriber_that_falls_behind() {
    let options = PublisherOptions {
        live: true,
        ..host(4, WhenFull::Block)
    };
    let (publisher, mut subscriber) = pair("live", options);
    assert!(publisher.is_live());
    let size = layout().frame_size();
    // Asking for a frame makes it ready: until then it counts as starting,
    // and a live producer keeps its frames for it (up to START_LIMIT).
    assert!(matches!(
        subscriber.next_frame(Some(Duration::from_millis(1))),
        Err(Error::Timeout(_))
    ));
    // The subscriber reads nothing meanwhile: a lossless producer that
    // waited for it would block at the fifth frame.
    let started = Instant::now();
    for n in 0..20u8 {
        assert_eq!(
            publisher.publish(&vec![n; size], None).unwrap(),
            Published::Sent
        );
    }
    publisher.eos();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(subscriber.is_live());
    let mut values = Vec::new();
    let mut missed_before = 0;
    while let Some(frame) = subscriber.next_frame(WAIT).unwrap() {
        let first = frame.host_bytes().unwrap()[0];
        assert!(frame.host_bytes().unwrap().iter().all(|&b| b == first));
        values.push(first);
        missed_before += frame.missed_before();
    }
    assert!(values.is_sorted() && values.len() < 20, "{values:?}");
    assert_eq!(values.last(), Some(&19), "the newest frames are kept");
    assert_eq!(subscriber.frames_missed(), 20 - values.len() as u64);
    assert_eq!(missed_before, subscriber.frames_missed());
}

#[test]
fn a_publisher_is_not_live_unless_it_says_so() {
    let (publisher, subscriber) = pair("not-live", host(2, WhenFull::Block));
    assert!(!publisher.is_live());
    assert!(!subscriber.is_live());
}

#[test]
fn frames_published_before_a_close_are_delivered_before_producer_gone() {
    // As after a killed producer: what was published arrives, then the
    // loss. The subscriber takes nothing until the publisher is gone.
    let (publisher, mut subscriber) = pair("close-delivers", host(4, WhenFull::Block));
    let size = layout().frame_size();
    for n in 1..=2u8 {
        publisher.publish(&vec![n; size], None).unwrap();
    }
    drop(publisher);
    for n in 1..=2u8 {
        let frame = subscriber.next_frame(WAIT).unwrap();
        let frame = frame.unwrap_or_else(|| panic!("frame {n}: end of stream instead"));
        assert!(
            frame.host_bytes().unwrap().iter().all(|&b| b == n),
            "frame {n}"
        );
    }
    let err = subscriber.next_frame(WAIT).unwrap_err();
    assert!(
        matches!(err, Error::ProducerGone { died: false, .. }),
        "{err:?}"
    );
}

#[test]
fn each_frame_brings_the_data_published_with_it() {
    let (publisher, mut subscriber) = pair("frame-data", host(4, WhenFull::Block));
    let size = layout().frame_size();
    let boxes = AppData::Json(r#"{"boxes": [[10, 20, 30, 40, 0.9]]}"#.into());
    publisher
        .publish_with_data(&vec![1; size], None, &boxes)
        .unwrap();
    let mut loan = publisher.loan().unwrap();
    loan.set_data(&AppData::Bytes(vec![0xCA, 0xFE])).unwrap();
    loan.host_bytes_mut().unwrap().fill(2);
    loan.publish(None).unwrap();
    publisher.publish(&vec![3; size], None).unwrap();
    let data: Vec<Option<AppData>> = (0..3)
        .map(|_| subscriber.next_frame(WAIT).unwrap().unwrap().data())
        .collect();
    assert_eq!(
        data,
        [Some(boxes), Some(AppData::Bytes(vec![0xCA, 0xFE])), None]
    );
    // More than the channel's frames carry: refused, nothing published.
    let options = PublisherOptions {
        frame_data_bound: 64,
        ..host(2, WhenFull::Block)
    };
    let (small, mut reader) = pair("frame-data-small", options);
    let err = small
        .publish_with_data(&vec![4; size], None, &AppData::Bytes(vec![0; 64]))
        .unwrap_err();
    assert!(
        matches!(err, Error::FrameDataTooLarge { len: 64, bound: 48 }),
        "{err:?}"
    );
    assert!(err.to_string().contains("at most 48"), "{err}");
    small.eos();
    assert!(
        reader.next_frame(WAIT).unwrap().is_none(),
        "no frame before the end"
    );
}

#[test]
fn a_legacy_cuda_channel_read_where_it_is_published_says_to_read_it_from_another_process() {
    if cudaipc_transport::cuda::gpu_or_skip("a_legacy_cuda_channel_read_in_its_own_process")
        .is_none()
    {
        return;
    }
    let options = PublisherOptions {
        transport: Transport::Cuda,
        slots: 2,
        ..Default::default()
    };
    let (publisher, mut subscriber) = pair("own-process", options);
    publisher
        .publish(&vec![7u8; layout().frame_size()], None)
        .unwrap();
    let err = subscriber.next_frame(WAIT).unwrap_err().to_string();
    assert!(
        err.contains("cannot be read in the process that publishes it")
            && err.contains("another process"),
        "{err}"
    );
}
