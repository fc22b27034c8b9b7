// SPDX-License-Identifier: MPL-2.0

//! Options and sizes outside what a channel can take are typed errors that
//! name the option and its range, refused before anything is made; a
//! timeout too long to be a deadline waits as long as it takes; and the end
//! of a stream, asked for again, is the end again at once until a new
//! stream starts.

use std::time::{Duration, Instant};

use cudaipc::{
    Error, MAX_FRAME_SIZE, Plane, Publisher, PublisherOptions, Setting, Subscriber,
    SubscriberOptions, Transport, VideoFormat, VideoLayout,
};

fn unique_channel(tag: &str) -> String {
    format!("t-limits-{tag}-{:x}", cudaipc_channel::shm::random_u64())
}

fn gray() -> VideoLayout {
    VideoLayout::new(VideoFormat::Gray8, 8, 8).unwrap()
}

fn host(change: impl FnOnce(&mut PublisherOptions)) -> PublisherOptions {
    let mut options = PublisherOptions {
        transport: Transport::Host,
        ..Default::default()
    };
    change(&mut options);
    options
}

#[test]
fn permissions_outside_0_to_0o777_are_refused_before_any_file_is_made() {
    for permissions in [0o4777, u32::MAX, 777] {
        let channel = unique_channel("mode");
        let err =
            Publisher::create(&channel, gray(), host(|o| o.permissions = permissions)).unwrap_err();
        assert!(
            matches!(err, Error::OutOfRange { setting: Setting::Permissions, value }
                if value == u64::from(permissions)),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.starts_with(&format!(
                "PublisherOptions::permissions is {permissions:#o}:"
            )) && message.contains("0 to 0o777"),
            "{message}"
        );
        assert!(!cudaipc_channel::shm::control_path(&channel).exists());
    }
    let publisher = Publisher::create(
        &unique_channel("mode"),
        gray(),
        host(|o| o.permissions = 0o777),
    );
    assert!(publisher.is_ok(), "{publisher:?}");
}

#[test]
fn slots_and_consumers_beyond_a_channels_are_refused_naming_the_range() {
    for slots in [65, 1000, usize::MAX] {
        let err = Publisher::create(&unique_channel("slots"), gray(), host(|o| o.slots = slots))
            .unwrap_err();
        assert!(
            matches!(err, Error::OutOfRange { setting: Setting::Slots, value } if value == slots as u64),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("PublisherOptions::slots")
                && err.to_string().contains("0 to 64"),
            "{err}"
        );
    }
    let err = Publisher::create(
        &unique_channel("wait"),
        gray(),
        host(|o| o.wait_for_consumers = 33),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                setting: Setting::WaitForConsumers,
                value: 33
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("0 to 32"), "{err}");
}

#[test]
fn a_frame_larger_than_a_ring_can_hold_is_an_invalid_layout_naming_the_limit() {
    let plane = [Plane {
        offset: 0,
        stride: 8,
    }];
    for frame_size in [1usize << 62, usize::MAX, MAX_FRAME_SIZE + 1] {
        let err =
            VideoLayout::with_planes(VideoFormat::Gray8, 8, 8, &plane, frame_size).unwrap_err();
        assert!(matches!(err, Error::InvalidLayout(_)), "{err:?}");
        assert!(
            err.to_string()
                .contains(&format!("frame_size is {frame_size} bytes"))
                && err.to_string().contains(&MAX_FRAME_SIZE.to_string()),
            "{err}"
        );
    }
    assert!(VideoLayout::with_planes(VideoFormat::Gray8, 8, 8, &plane, MAX_FRAME_SIZE).is_ok());
    // Width and height each within caps' limits, their frame 2^62 bytes.
    let err = VideoLayout::new(VideoFormat::Gray8, i32::MAX as u32, i32::MAX as u32).unwrap_err();
    assert!(
        matches!(err, Error::InvalidLayout(_)) && err.to_string().contains("frame_size"),
        "{err}"
    );
}

#[test]
fn a_hold_no_ring_can_fit_is_refused_at_the_attach() {
    // Refused before it waits for a producer: none is needed.
    for hold in [63, 1000, u32::MAX] {
        let options = SubscriberOptions {
            hold: Some(hold),
            timeout: Some(Duration::ZERO),
            ..Default::default()
        };
        let err = Subscriber::attach(&unique_channel("hold"), options).unwrap_err();
        assert!(
            matches!(err, Error::OutOfRange { setting: Setting::Hold, value } if value == u64::from(hold)),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("SubscriberOptions::hold is Some({hold}):"))
                && message.contains("0 to 62"),
            "{message}"
        );
    }
}

#[test]
fn a_timeout_too_long_for_a_deadline_waits_as_long_as_it_takes() {
    let channel = unique_channel("forever");
    let publisher = Publisher::create(&channel, gray(), host(|_| {})).unwrap();
    let options = SubscriberOptions {
        timeout: Some(Duration::MAX),
        ..Default::default()
    };
    let mut subscriber = Subscriber::attach(&channel, options).unwrap();
    publisher.publish(&[9; 64], None).unwrap();
    let frame = subscriber.next_frame(Some(Duration::MAX)).unwrap();
    assert_eq!(frame.unwrap().host_bytes(), Some(&[9u8; 64][..]));
}

#[test]
fn after_the_end_of_stream_every_call_is_the_end_at_once_until_a_new_stream() {
    let channel = unique_channel("eos");
    let publisher = Publisher::create(&channel, gray(), host(|_| {})).unwrap();
    let mut subscriber = Subscriber::attach(&channel, SubscriberOptions::default()).unwrap();
    let wait = Some(Duration::from_secs(5));
    let mut next = |timeout| {
        subscriber
            .next_frame(timeout)
            .map(|frame| frame.map(|f| f.host_bytes().unwrap()[0]))
    };
    publisher.publish(&[1; 64], None).unwrap();
    publisher.eos();
    assert_eq!(next(wait).unwrap(), Some(1));
    assert_eq!(next(wait).unwrap(), None);
    for timeout in [wait, None, Some(Duration::ZERO)] {
        let start = Instant::now();
        assert_eq!(next(timeout).unwrap(), None, "{timeout:?}: not a Timeout");
        assert!(start.elapsed() < Duration::from_secs(1), "it did not wait");
    }
    // A new stream: its frames, then its end.
    publisher.publish(&[2; 64], None).unwrap();
    assert_eq!(next(wait).unwrap(), Some(2));
    publisher.eos();
    assert_eq!(next(wait).unwrap(), None);
    // The producer's close after the end is the end again.
    drop(publisher);
    assert_eq!(next(wait).unwrap(), None);
}
