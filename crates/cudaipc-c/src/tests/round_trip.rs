// SPDX-License-Identifier: MPL-2.0

//! Frames through the C calls on the host transport: what a C program
//! sees, closing from another thread, and the Rust API's messages.

use std::ptr::null_mut;
use std::thread;
use std::time::Duration;

use super::*;

/// The bytes of the frame `info` describes (host transport).
fn bytes(info: &cudaipc_frame_info) -> &[u8] {
    assert!(!info.host_ptr.is_null());
    // SAFETY: the library says `frame_size` bytes are there while the frame
    // is held, which it is while `info` is borrowed here.
    unsafe { std::slice::from_raw_parts(info.host_ptr, info.layout.frame_size as usize) }
}

/// Byte `i` of frame `n`: the examples' pattern.
fn pattern(n: u64, size: usize) -> Vec<u8> {
    (0..size).map(|i| (i as u64 + 3 * n) as u8).collect()
}

#[test]
fn published_frames_arrive_with_their_layout_and_time() {
    let channel = channel();
    let rgb = layout(cudaipc_format::CUDAIPC_FORMAT_RGB, 10, 4);
    assert_eq!(
        (rgb.n_planes, rgb.strides[0], rgb.frame_size),
        (1, 32, 128),
        "rows padded to 4"
    );
    let publisher = host_publisher(&channel, &rgb);
    let subscriber = subscriber(&channel, cudaipc_frames::CUDAIPC_FRAMES_EVERY);
    let (mut is_cuda, mut consumers) = (-1, 0);
    // SAFETY: live handles and locals.
    unsafe {
        assert_eq!(
            cudaipc_publisher_is_cuda(publisher, &mut is_cuda),
            CUDAIPC_OK
        );
        assert_eq!(
            cudaipc_publisher_consumer_count(publisher, &mut consumers),
            CUDAIPC_OK
        );
        for n in 0..3u64 {
            let frame = pattern(n, 128);
            let pts = if n == 1 { -1 } else { n as i64 * 40_000_000 };
            let status = cudaipc_publisher_publish(publisher, frame.as_ptr().cast(), 128, pts);
            assert_eq!(status, CUDAIPC_OK, "{}", last_error());
        }
        assert_eq!(cudaipc_publisher_eos(publisher), CUDAIPC_OK);
    }
    assert_eq!((is_cuda, consumers), (0, 1));
    let mut sequences = Vec::new();
    for n in 0..3u64 {
        let mut frame = null_mut();
        // SAFETY: live handle, writable out.
        let status = unsafe { cudaipc_subscriber_next_frame(subscriber, 5000, &mut frame) };
        assert_eq!(status, CUDAIPC_OK, "{}", last_error());
        let info = frame_info(frame);
        assert_eq!(
            info.layout.format,
            cudaipc_format::CUDAIPC_FORMAT_RGB as u32
        );
        assert_eq!(
            (
                info.layout.width,
                info.layout.height,
                info.layout.strides[0]
            ),
            (10, 4, 32)
        );
        assert_eq!(
            (info.is_cuda, info.device_ptr, info.device_ordinal),
            (0, 0, -1)
        );
        assert!(info.cuda_stream.is_null());
        assert_eq!(info.pts_ns, if n == 1 { -1 } else { n as i64 * 40_000_000 });
        assert_eq!(bytes(&info), pattern(n, 128));
        let mut copy = vec![0u8; 128];
        // SAFETY: live handle, 128 writable bytes; a NULL stream is the
        // default one, and nothing is ordered on the host transport.
        unsafe {
            assert_eq!(
                cudaipc_frame_copy_to_host(frame, copy.as_mut_ptr().cast(), 128),
                CUDAIPC_OK
            );
            assert_eq!(cudaipc_frame_stream_wait(frame, null_mut()), CUDAIPC_OK);
            assert_eq!(
                cudaipc_frame_release_after_stream(frame, null_mut()),
                CUDAIPC_OK
            );
        }
        assert_eq!(copy, pattern(n, 128));
        sequences.push(info.sequence);
        assert_eq!(cudaipc_frame_release(frame), CUDAIPC_OK);
    }
    assert!(
        sequences.windows(2).all(|w| w[1] == w[0] + 1),
        "{sequences:?}"
    );
    let mut frame = null_mut();
    // SAFETY: live handle, writable out.
    let status = unsafe { cudaipc_subscriber_next_frame(subscriber, 5000, &mut frame) };
    assert_eq!(status, CUDAIPC_END_OF_STREAM);
    assert!(frame.is_null());
    let mut missed = 9;
    // SAFETY: live handle, writable out.
    let status = unsafe { cudaipc_subscriber_frames_missed(subscriber, &mut missed) };
    assert_eq!(status, CUDAIPC_OK);
    assert_eq!(missed, 0);
    assert_eq!(cudaipc_subscriber_free(subscriber), CUDAIPC_OK);
    assert_eq!(cudaipc_publisher_free(publisher), CUDAIPC_OK);
}

#[test]
fn a_loaned_slot_written_in_place_is_read_as_written() {
    let channel = channel();
    let nv12 = layout(cudaipc_format::CUDAIPC_FORMAT_NV12, 8, 6);
    assert_eq!(
        (nv12.n_planes, nv12.offsets[1], nv12.frame_size),
        (2, 48, 72)
    );
    let publisher = host_publisher(&channel, &nv12);
    let subscriber = subscriber(&channel, cudaipc_frames::CUDAIPC_FRAMES_EVERY);
    let mut loan = null_mut();
    // SAFETY: zeroes are a valid info.
    let mut info: cudaipc_loan_info = unsafe { std::mem::zeroed() };
    info.struct_size = size_of::<cudaipc_loan_info>() as u32;
    // SAFETY: live handles and locals; the loan's host pointer is valid for
    // `frame_size` bytes until it is published.
    unsafe {
        assert_eq!(
            cudaipc_publisher_loan(publisher, &mut loan),
            CUDAIPC_OK,
            "{}",
            last_error()
        );
        assert_eq!(cudaipc_loan_get_info(loan, &mut info), CUDAIPC_OK);
        assert_eq!((info.is_cuda, info.layout.frame_size), (0, 72));
        assert!(!info.host_ptr.is_null() && info.device_ptr == 0);
        std::slice::from_raw_parts_mut(info.host_ptr, 72).copy_from_slice(&pattern(7, 72));
        assert_eq!(cudaipc_loan_stream_wait(loan, null_mut()), CUDAIPC_OK);
        assert_eq!(
            cudaipc_loan_publish_after_stream(loan, null_mut()),
            CUDAIPC_OK
        );
        assert_eq!(
            cudaipc_loan_publish(loan, 5),
            CUDAIPC_OK,
            "{}",
            last_error()
        );
        // Published: the handle is gone.
        assert_eq!(cudaipc_loan_publish(loan, 5), CUDAIPC_ERROR_INVALID_HANDLE);
        // A discarded loan publishes nothing.
        assert_eq!(cudaipc_publisher_loan(publisher, &mut loan), CUDAIPC_OK);
        assert_eq!(cudaipc_loan_discard(loan), CUDAIPC_OK);
        assert_eq!(cudaipc_publisher_eos(publisher), CUDAIPC_OK);
    }
    let mut frame = null_mut();
    // SAFETY: live handle, writable out.
    let status = unsafe { cudaipc_subscriber_next_frame(subscriber, 5000, &mut frame) };
    assert_eq!(status, CUDAIPC_OK);
    let got = frame_info(frame);
    assert_eq!((got.pts_ns, got.layout.offsets[1]), (5, 48));
    assert_eq!(bytes(&got), pattern(7, 72));
    assert_eq!(cudaipc_frame_release(frame), CUDAIPC_OK);
    // SAFETY: as above.
    let status = unsafe { cudaipc_subscriber_next_frame(subscriber, 5000, &mut frame) };
    assert_eq!(
        status, CUDAIPC_END_OF_STREAM,
        "the discarded loan was not published"
    );
    cudaipc_subscriber_free(subscriber);
    cudaipc_publisher_free(publisher);
}

/// A thread blocked in `cudaipc_subscriber_next_frame` on `subscriber`
/// (for up to `timeout_ms`, -1: no limit); its status and error message.
fn blocked_in_next_frame(
    subscriber: *mut cudaipc_subscriber,
    timeout_ms: i64,
) -> thread::JoinHandle<(cudaipc_status, String)> {
    let handle = subscriber.addr();
    thread::spawn(move || {
        let mut frame = null_mut();
        let subscriber = std::ptr::without_provenance_mut(handle);
        // SAFETY: a handle (checked by the library), a writable out.
        let status = unsafe { cudaipc_subscriber_next_frame(subscriber, timeout_ms, &mut frame) };
        (status, last_error())
    })
}

#[test]
fn close_from_another_thread_wakes_a_blocked_next_frame() {
    let channel = channel();
    let gray = layout(cudaipc_format::CUDAIPC_FORMAT_GRAY8, 8, 8);
    let publisher = host_publisher(&channel, &gray);
    let subscriber = subscriber(&channel, cudaipc_frames::CUDAIPC_FRAMES_AUTO);
    let reader = blocked_in_next_frame(subscriber, -1);
    thread::sleep(Duration::from_millis(100));
    assert_eq!(cudaipc_subscriber_close(subscriber), CUDAIPC_OK);
    let (status, message) = reader.join().unwrap();
    assert_eq!(status, CUDAIPC_ERROR_CLOSED);
    assert_eq!(message, api::Error::Closed.to_string());
    // Closed, not freed: later calls say so, until it is freed.
    let mut frame = null_mut();
    // SAFETY: a live handle, a writable out.
    let status = unsafe { cudaipc_subscriber_next_frame(subscriber, 0, &mut frame) };
    assert_eq!(status, CUDAIPC_ERROR_CLOSED);
    assert_eq!(
        cudaipc_subscriber_close(subscriber),
        CUDAIPC_OK,
        "idempotent"
    );
    assert_eq!(cudaipc_subscriber_free(subscriber), CUDAIPC_OK);
    assert_eq!(
        cudaipc_subscriber_close(subscriber),
        CUDAIPC_ERROR_INVALID_HANDLE
    );
    assert_eq!(cudaipc_publisher_free(publisher), CUDAIPC_OK);
}

#[test]
fn free_from_another_thread_wakes_a_blocked_next_frame() {
    let channel = channel();
    let gray = layout(cudaipc_format::CUDAIPC_FORMAT_GRAY8, 8, 8);
    let publisher = host_publisher(&channel, &gray);
    let subscriber = subscriber(&channel, cudaipc_frames::CUDAIPC_FRAMES_AUTO);
    let reader = blocked_in_next_frame(subscriber, 60_000);
    thread::sleep(Duration::from_millis(100));
    assert_eq!(cudaipc_subscriber_free(subscriber), CUDAIPC_OK);
    assert_eq!(reader.join().unwrap().0, CUDAIPC_ERROR_CLOSED);
    assert_eq!(cudaipc_publisher_free(publisher), CUDAIPC_OK);
}

#[test]
fn close_from_another_thread_wakes_a_blocked_loan() {
    let channel = channel();
    let gray = layout(cudaipc_format::CUDAIPC_FORMAT_GRAY8, 8, 8);
    let mut options = std::mem::MaybeUninit::<cudaipc_publisher_options>::uninit();
    // SAFETY: writable options.
    unsafe { cudaipc_publisher_options_init(options.as_mut_ptr()) };
    // SAFETY: initialised above.
    let mut options = unsafe { options.assume_init() };
    options.transport = cudaipc_transport::CUDAIPC_TRANSPORT_HOST as u32;
    // No consumer comes: the loan waits for one.
    options.wait_for_consumers = 1;
    let mut publisher = null_mut();
    // SAFETY: valid pointers.
    let status =
        unsafe { cudaipc_publisher_create(channel.as_ptr(), &gray, &options, &mut publisher) };
    assert_eq!(status, CUDAIPC_OK, "{}", last_error());
    let handle = publisher.addr();
    let writer = thread::spawn(move || {
        let mut loan = null_mut();
        let publisher = std::ptr::without_provenance_mut(handle);
        // SAFETY: a handle (checked by the library), a writable out.
        unsafe { cudaipc_publisher_loan(publisher, &mut loan) }
    });
    thread::sleep(Duration::from_millis(100));
    assert_eq!(cudaipc_publisher_close(publisher), CUDAIPC_OK);
    assert_eq!(writer.join().unwrap(), CUDAIPC_ERROR_CLOSED);
    let data = [0u8; 64];
    // SAFETY: a live handle, 64 readable bytes.
    let status = unsafe { cudaipc_publisher_publish(publisher, data.as_ptr().cast(), 64, 0) };
    assert_eq!(status, CUDAIPC_ERROR_CLOSED);
    assert_eq!(cudaipc_publisher_free(publisher), CUDAIPC_OK);
}

#[test]
fn messages_are_the_rust_apis() {
    let channel = channel();
    let mut options = subscriber_options();
    options.timeout_ms = 0;
    let mut subscriber = null_mut();
    // SAFETY: valid pointers.
    let status = unsafe { cudaipc_subscriber_open(channel.as_ptr(), &options, &mut subscriber) };
    assert_eq!(status, CUDAIPC_ERROR_NO_PRODUCER);
    let rust = api::Subscriber::attach(
        channel.to_str().unwrap(),
        api::SubscriberOptions {
            timeout: Some(Duration::ZERO),
            ..Default::default()
        },
    )
    .unwrap_err();
    // The Rust API's words, then the live channels (tests::limits).
    assert!(
        last_error().starts_with(&format!("{rust} (")),
        "{}",
        last_error()
    );

    // A timeout, in the same words.
    let gray = layout(cudaipc_format::CUDAIPC_FORMAT_GRAY8, 8, 8);
    let publisher = host_publisher(&channel, &gray);
    let subscriber = super::subscriber(&channel, cudaipc_frames::CUDAIPC_FRAMES_AUTO);
    let mut frame = null_mut();
    // SAFETY: a live handle, a writable out.
    let status = unsafe { cudaipc_subscriber_next_frame(subscriber, 20, &mut frame) };
    assert_eq!(status, CUDAIPC_ERROR_TIMEOUT);
    assert_eq!(last_error(), "no frame within 20 ms");
    // A second producer on the channel: in use.
    let mut second = null_mut();
    // SAFETY: valid pointers.
    let status =
        unsafe { cudaipc_publisher_create(channel.as_ptr(), &gray, null_mut(), &mut second) };
    assert_eq!(status, CUDAIPC_ERROR_CHANNEL_IN_USE, "{}", last_error());
    assert!(
        last_error().contains("is in use by a live producer"),
        "{}",
        last_error()
    );
    cudaipc_subscriber_free(subscriber);
    cudaipc_publisher_free(publisher);
}
