// SPDX-License-Identifier: MPL-2.0

//! Keeping a frame (host transport): an owned copy holds no slot, and stays
//! intact while the producer writes that slot again.

use std::sync::mpsc;
use std::time::Duration;

mod common;

use cudaipc::{Error, OwnedFrame, Published, VideoFormat, VideoLayout};

const WAIT: Option<Duration> = Some(Duration::from_secs(5));

fn layout() -> VideoLayout {
    VideoLayout::new(VideoFormat::Rgba, 16, 8).unwrap()
}

fn pixels(value: u8) -> Vec<u8> {
    vec![value; layout().frame_size()]
}

#[test]
fn an_owned_copy_holds_no_slot_and_outlives_the_slot_being_written_again() {
    let (publisher, mut subscriber) = common::blocking_host_pair("owned", layout());
    publisher
        .publish(&pixels(1), Some(Duration::from_millis(5)))
        .unwrap();
    let frame = subscriber.next_frame(WAIT).unwrap().expect("a frame");
    let slot = frame.host_bytes().unwrap().as_ptr();
    let mut owned = frame.to_owned_copy().unwrap();
    assert_eq!(
        (owned.seq(), owned.pts(), owned.layout()),
        (frame.seq(), frame.pts(), frame.layout())
    );
    drop(frame);

    // Both slots are free: two frames are published without a read, one
    // of them into the slot the copy came from.
    let (sender, receiver) = mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let sent = [2, 3].map(|value| publisher.publish(&pixels(value), None).unwrap());
            let _ = sender.send(sent);
        });
        let sent = receiver.recv_timeout(Duration::from_secs(5));
        if sent.is_err() {
            // Ends the publisher's wait, so that the failure is reported.
            publisher.close();
        }
        let sent = sent.expect("the publisher waited: the copy holds a slot");
        assert_eq!(sent, [Published::Sent; 2]);
    });
    let mut written = Vec::new();
    for value in [2, 3] {
        let frame = subscriber.next_frame(WAIT).unwrap().expect("a frame");
        assert_eq!(frame.host_bytes(), Some(&pixels(value)[..]));
        written.push(frame.host_bytes().unwrap().as_ptr());
    }
    assert!(written.contains(&slot), "the copy's slot was written again");

    let copy = owned.host_bytes().expect("a host copy");
    assert_eq!(copy, &pixels(1)[..]);
    assert_ne!(copy.as_ptr(), slot, "a copy, not the slot");
    assert_eq!((owned.device_ptr(), owned.device_ordinal()), (None, None));
    let mut downloaded = pixels(0);
    owned.copy_to_host(&mut downloaded).unwrap();
    assert_eq!(downloaded, pixels(1));
    // It is this process's own memory.
    owned.host_bytes_mut().unwrap().fill(9);
    assert_eq!(owned.host_bytes(), Some(&pixels(9)[..]));
}

#[test]
fn an_owned_frame_from_host_bytes_takes_exactly_a_frame() {
    let owned = OwnedFrame::from_host(layout(), &pixels(4)).unwrap();
    assert_eq!(owned.host_bytes(), Some(&pixels(4)[..]));
    let size = layout().frame_size();
    let err = OwnedFrame::from_host(layout(), &pixels(4)[1..]).unwrap_err();
    assert!(
        matches!(err, Error::FrameSize { expected, given } if expected == size && given == size - 1),
        "{err:?}"
    );
}
