// SPDX-License-Identifier: MPL-2.0

//! Closing from another thread than the one blocked in a call (host
//! transport): the blocked call returns `Error::Closed` promptly, later
//! calls too, and frames handed out before stay intact.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;

use cudaipc::{Error, Publisher, Subscriber, VideoFormat, VideoLayout};

/// How long a woken call may take to return.
const PROMPT: Duration = Duration::from_secs(2);
/// How long a call must stay blocked to count as blocked.
const BLOCKED: Duration = Duration::from_millis(300);

fn layout() -> VideoLayout {
    VideoLayout::new(VideoFormat::Gray8, 16, 8).unwrap()
}

/// A host publisher of two slots that waits when they are full, and an
/// every-frame subscriber that has not read anything: it holds the
/// producer back.
fn blocking_pair(tag: &str) -> (Arc<Publisher>, Subscriber) {
    let (publisher, subscriber) = common::blocking_host_pair(&format!("close-{tag}"), layout());
    (Arc::new(publisher), subscriber)
}

fn frame(value: u8) -> Vec<u8> {
    vec![value; layout().frame_size()]
}

/// Runs `call` on another thread; its result comes through the receiver.
fn spawn<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> mpsc::Receiver<T> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(call());
    });
    receiver
}

/// Checks that the call behind `receiver` is still blocked, runs `close`,
/// and returns the call's result and how long it took to come after it.
fn close_while_blocked<T>(receiver: &mpsc::Receiver<T>, close: impl FnOnce()) -> (T, Duration) {
    assert!(
        receiver.recv_timeout(BLOCKED).is_err(),
        "the call did not block"
    );
    let started = Instant::now();
    close();
    let result = receiver
        .recv_timeout(Duration::from_secs(10))
        .expect("the blocked call returned after the close");
    (result, started.elapsed())
}

#[test]
fn close_from_another_thread_wakes_a_publish_blocked_on_a_slow_consumer() {
    let (publisher, _subscriber) = blocking_pair("publish");
    for value in 0..2 {
        publisher.publish(&frame(value), None).unwrap();
    }
    let blocked = publisher.clone();
    let receiver = spawn(move || blocked.publish(&frame(2), None));
    let (result, took) = close_while_blocked(&receiver, || publisher.close());
    assert!(matches!(result, Err(Error::Closed)), "{result:?}");
    assert!(took < PROMPT, "publish returned {took:?} after the close");
    assert!(publisher.is_closed());
    let again = publisher.publish(&frame(3), None);
    assert!(matches!(again, Err(Error::Closed)), "{again:?}");
    let loan = publisher.loan();
    assert!(matches!(loan, Err(Error::Closed)), "{loan:?}");
}

#[test]
fn a_closer_wakes_a_loan_blocked_on_a_slow_consumer() {
    let (publisher, _subscriber) = blocking_pair("loan");
    for value in 0..2 {
        publisher.publish(&frame(value), None).unwrap();
    }
    let closer = publisher.closer();
    let blocked = publisher.clone();
    let receiver = spawn(move || blocked.loan().map(drop));
    let (result, took) = close_while_blocked(&receiver, || {
        // From a thread that holds no reference to the publisher.
        std::thread::spawn(move || closer.close()).join().unwrap()
    });
    assert!(matches!(result, Err(Error::Closed)), "{result:?}");
    assert!(took < PROMPT, "loan returned {took:?} after the close");
}

#[test]
fn close_ends_a_loan_waiting_with_its_own_interrupt_flag() {
    let (publisher, _subscriber) = blocking_pair("interruptible");
    for value in 0..2 {
        publisher.publish(&frame(value), None).unwrap();
    }
    let blocked = publisher.clone();
    let receiver = spawn(move || {
        let never = AtomicBool::new(false);
        blocked.loan_interruptible(&never).map(drop)
    });
    let (result, took) = close_while_blocked(&receiver, || publisher.close());
    assert!(matches!(result, Err(Error::Closed)), "{result:?}");
    assert!(took < PROMPT, "loan returned {took:?} after the close");
}

#[test]
fn a_closer_wakes_next_frame_and_frames_handed_out_stay_intact() {
    let (publisher, mut subscriber) = blocking_pair("next");
    publisher.publish(&frame(7), None).unwrap();
    let held = subscriber
        .next_frame(Some(Duration::from_secs(5)))
        .unwrap()
        .expect("a frame");
    let closer = subscriber.closer();
    let receiver = spawn(move || {
        let result = subscriber
            .next_frame(None)
            .map(|frame| frame.map(|f| f.seq()));
        (result, subscriber)
    });
    let ((result, mut subscriber), took) = close_while_blocked(&receiver, || closer.close());
    assert!(matches!(result, Err(Error::Closed)), "{result:?}");
    assert!(
        took < PROMPT,
        "next_frame returned {took:?} after the close"
    );
    assert!(subscriber.is_closed() && closer.is_closed());
    let again = subscriber.next_frame(Some(Duration::from_secs(1)));
    assert!(matches!(again, Err(Error::Closed)), "{again:?}");
    // The frame taken before the close still holds its slot and bytes.
    assert_eq!(held.host_bytes(), Some(&frame(7)[..]));
    drop(subscriber);
    assert_eq!(held.host_bytes(), Some(&frame(7)[..]));
}

#[test]
fn closing_twice_and_closers_outliving_their_publisher_are_harmless() {
    let (publisher, subscriber) = blocking_pair("twice");
    let (publisher_closer, subscriber_closer) = (publisher.closer(), subscriber.closer());
    publisher.close();
    publisher_closer.close();
    subscriber.close();
    drop(publisher);
    drop(subscriber);
    publisher_closer.close();
    subscriber_closer.close();
    assert!(publisher_closer.is_closed() && subscriber_closer.is_closed());
    fn shareable<T: Send + Sync + Clone>(_: &T) {}
    shareable(&publisher_closer);
}
