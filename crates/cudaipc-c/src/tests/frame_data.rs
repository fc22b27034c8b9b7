// SPDX-License-Identifier: MPL-2.0

//! Per-frame data through the C calls (host transport): bytes and JSON set
//! on a loan or given to a publish arrive with their frame, a frame without
//! any says so, too much is refused naming the bound, and an options
//! struct of the version before `frame_data_bound` gets its default.

use std::ffi::{CStr, c_void};
use std::ptr::{null, null_mut};

use super::*;

const GRAY: cudaipc_format = cudaipc_format::CUDAIPC_FORMAT_GRAY8;
const NONE: u32 = cudaipc_frame_data_kind::CUDAIPC_FRAME_DATA_NONE as u32;
const BYTES: u32 = cudaipc_frame_data_kind::CUDAIPC_FRAME_DATA_BYTES as u32;
const JSON: u32 = cudaipc_frame_data_kind::CUDAIPC_FRAME_DATA_JSON as u32;

/// A host publisher of 8x8 GRAY8 frames on `channel` with `change` made to
/// the default options.
fn publisher_with(
    channel: &CStr,
    change: impl FnOnce(&mut cudaipc_publisher_options),
) -> std::result::Result<*mut cudaipc_publisher, (cudaipc_status, String)> {
    let mut options = std::mem::MaybeUninit::<cudaipc_publisher_options>::uninit();
    // SAFETY: writable options.
    let status = unsafe { cudaipc_publisher_options_init(options.as_mut_ptr()) };
    assert_eq!(status, CUDAIPC_OK);
    // SAFETY: initialised above.
    let mut options = unsafe { options.assume_init() };
    options.transport = cudaipc_transport::CUDAIPC_TRANSPORT_HOST as u32;
    options.slots = 8;
    change(&mut options);
    let gray = layout(GRAY, 8, 8);
    let mut publisher = null_mut();
    // SAFETY: valid pointers to live values.
    match unsafe { cudaipc_publisher_create(channel.as_ptr(), &gray, &options, &mut publisher) } {
        CUDAIPC_OK => Ok(publisher),
        status => Err((status, last_error())),
    }
}

/// The next frame's data: its kind and bytes, read twice (the same pointer
/// both times) before the frame is released.
fn next_data(subscriber: *mut cudaipc_subscriber) -> (u32, Vec<u8>) {
    let mut frame = null_mut();
    // SAFETY: a live handle, a writable out.
    let status = unsafe { cudaipc_subscriber_next_frame(subscriber, 5000, &mut frame) };
    assert_eq!(status, CUDAIPC_OK, "{}", last_error());
    let read = || {
        let (mut data, mut len, mut kind): (*const c_void, usize, u32) = (null(), 99, 99);
        // SAFETY: a live frame, writable outs.
        let status = unsafe { cudaipc_frame_get_data(frame, &mut data, &mut len, &mut kind) };
        assert_eq!(status, CUDAIPC_OK, "{}", last_error());
        (data, len, kind)
    };
    let (data, len, kind) = read();
    assert_eq!(read(), (data, len, kind), "the same pointer at each call");
    let bytes = match kind {
        NONE => {
            assert!(data.is_null() && len == 0);
            Vec::new()
        }
        _ => {
            assert!(!data.is_null());
            // SAFETY: the library says `len` bytes are there until the
            // frame is released, and JSON text has a NUL after them.
            let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }.to_vec();
            if kind == JSON {
                // SAFETY: as above: `len + 1` bytes.
                let nul = unsafe { *data.cast::<u8>().add(len) };
                assert_eq!(nul, 0, "JSON text is NUL-terminated");
            }
            bytes
        }
    };
    assert_eq!(cudaipc_frame_release(frame), CUDAIPC_OK);
    (kind, bytes)
}

/// Publishes a loan of `publisher` after `set` gave it its data.
fn publish_loan(publisher: *mut cudaipc_publisher, set: impl FnOnce(*mut cudaipc_loan)) {
    let mut loan = null_mut();
    // SAFETY: a live handle, a writable out.
    let status = unsafe { cudaipc_publisher_loan(publisher, &mut loan) };
    assert_eq!(status, CUDAIPC_OK, "{}", last_error());
    set(loan);
    assert_eq!(
        cudaipc_loan_publish(loan, -1),
        CUDAIPC_OK,
        "{}",
        last_error()
    );
}

fn ok(status: cudaipc_status) {
    assert_eq!(status, CUDAIPC_OK, "{}", last_error());
}

#[test]
fn bytes_and_json_arrive_with_their_frame_and_a_frame_without_says_none() {
    let channel = channel();
    let publisher = publisher_with(&channel, |_| {}).unwrap();
    let subscriber = subscriber(&channel, cudaipc_frames::CUDAIPC_FRAMES_EVERY);
    let frame = [7u8; 64];
    let boxes = cr#"{"frame":1,"boxes":[[10,20,30,40,0.9]]}"#;
    // SAFETY: live handles; buffers of the sizes given; NUL-terminated text.
    unsafe {
        publish_loan(publisher, |loan| {
            ok(cudaipc_loan_set_json(loan, c"replaced".as_ptr()));
            ok(cudaipc_loan_set_data(
                loan,
                [0xCAu8, 0xFE].as_ptr().cast(),
                2,
            ));
        });
        publish_loan(publisher, |loan| {
            ok(cudaipc_loan_set_json(loan, boxes.as_ptr()))
        });
        ok(cudaipc_publisher_publish_with_data(
            publisher,
            frame.as_ptr().cast(),
            64,
            0,
            [0u8, b'r', b'a', b'w', 0].as_ptr().cast(),
            5,
        ));
        ok(cudaipc_publisher_publish_with_json(
            publisher,
            frame.as_ptr().cast(),
            64,
            0,
            c"[1,2]".as_ptr(),
        ));
        ok(cudaipc_publisher_publish(
            publisher,
            frame.as_ptr().cast(),
            64,
            0,
        ));
        publish_loan(publisher, |_| {});
        // Empty bytes are data too (NULL where the length is 0).
        publish_loan(publisher, |loan| ok(cudaipc_loan_set_data(loan, null(), 0)));
        ok(cudaipc_publisher_eos(publisher));
    }
    let got: Vec<(u32, Vec<u8>)> = (0..7).map(|_| next_data(subscriber)).collect();
    assert_eq!(
        got,
        [
            (BYTES, vec![0xCA, 0xFE]),
            (JSON, boxes.to_bytes().to_vec()),
            (BYTES, b"\x00raw\x00".to_vec()),
            (JSON, b"[1,2]".to_vec()),
            (NONE, Vec::new()),
            (NONE, Vec::new()),
            (BYTES, Vec::new()),
        ]
    );
    assert_eq!(cudaipc_subscriber_free(subscriber), CUDAIPC_OK);
    assert_eq!(cudaipc_publisher_free(publisher), CUDAIPC_OK);
}

#[test]
fn data_beyond_the_bound_is_refused_naming_it_and_the_loan_stays_usable() {
    let channel = channel();
    // 64 bytes a frame: 16 of framing, 48 of data.
    let publisher = publisher_with(&channel, |o| o.frame_data_bound = 64).unwrap();
    let subscriber = subscriber(&channel, cudaipc_frames::CUDAIPC_FRAMES_EVERY);
    let big = [1u8; 49];
    let frame = [0u8; 64];
    let json = CString::new(format!("\"{}\"", "j".repeat(47))).unwrap(); // 49 bytes
    // SAFETY: live handles; buffers of the sizes given.
    unsafe {
        publish_loan(publisher, |loan| {
            ok(cudaipc_loan_set_data(loan, big.as_ptr().cast(), 48));
            assert_eq!(
                cudaipc_loan_set_data(loan, big.as_ptr().cast(), 49),
                CUDAIPC_ERROR_INVALID_ARGUMENT
            );
            let message = last_error();
            assert!(
                message.contains("49 bytes")
                    && message.contains("at most 48")
                    && message.contains("cudaipc_publisher_options.frame_data_bound"),
                "{message}"
            );
            assert_eq!(
                cudaipc_loan_set_json(loan, json.as_ptr()),
                CUDAIPC_ERROR_INVALID_ARGUMENT
            );
            assert!(last_error().contains("at most 48"), "{}", last_error());
        });
        assert_eq!(
            cudaipc_publisher_publish_with_data(
                publisher,
                frame.as_ptr().cast(),
                64,
                0,
                big.as_ptr().cast(),
                49
            ),
            CUDAIPC_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            cudaipc_publisher_publish_with_json(
                publisher,
                frame.as_ptr().cast(),
                64,
                0,
                json.as_ptr()
            ),
            CUDAIPC_ERROR_INVALID_ARGUMENT
        );
        // No channel carries more than a mebibyte: refused before the
        // bytes are read.
        assert_eq!(
            cudaipc_publisher_publish_with_data(
                publisher,
                frame.as_ptr().cast(),
                64,
                0,
                big.as_ptr().cast(),
                usize::MAX
            ),
            CUDAIPC_ERROR_INVALID_ARGUMENT
        );
        assert!(
            last_error().contains("no channel's frames carry more"),
            "{}",
            last_error()
        );
        // Not UTF-8.
        publish_loan(publisher, |loan| {
            assert_eq!(
                cudaipc_loan_set_json(loan, c"\xff\xfe".as_ptr()),
                CUDAIPC_ERROR_INVALID_ARGUMENT
            );
            assert!(last_error().contains("not UTF-8"), "{}", last_error());
        });
        ok(cudaipc_publisher_eos(publisher));
    }
    // The refused loan kept what it had; nothing else was published but
    // the loan refused its text.
    assert_eq!(next_data(subscriber), (BYTES, vec![1; 48]));
    assert_eq!(next_data(subscriber), (NONE, Vec::new()));
    let mut frame = null_mut();
    // SAFETY: a live handle, a writable out.
    let status = unsafe { cudaipc_subscriber_next_frame(subscriber, 5000, &mut frame) };
    assert_eq!(status, CUDAIPC_END_OF_STREAM);
    assert_eq!(cudaipc_subscriber_free(subscriber), CUDAIPC_OK);
    assert_eq!(cudaipc_publisher_free(publisher), CUDAIPC_OK);
}

#[test]
fn a_bound_of_0_carries_none_and_one_above_a_mebibyte_is_refused_naming_it() {
    let channel = channel();
    let publisher = publisher_with(&channel, |o| o.frame_data_bound = 0).unwrap();
    let frame = [0u8; 64];
    // SAFETY: a live handle; buffers of the sizes given.
    unsafe {
        assert_eq!(
            cudaipc_publisher_publish_with_data(
                publisher,
                frame.as_ptr().cast(),
                64,
                0,
                c"x".as_ptr().cast(),
                1
            ),
            CUDAIPC_ERROR_INVALID_ARGUMENT
        );
    }
    assert!(last_error().contains("at most 0"), "{}", last_error());
    assert_eq!(cudaipc_publisher_free(publisher), CUDAIPC_OK);
    let (status, message) =
        publisher_with(&super::channel(), |o| o.frame_data_bound = (1 << 20) + 1).unwrap_err();
    assert_eq!(status, CUDAIPC_ERROR_INVALID_ARGUMENT);
    assert!(
        message.starts_with("options.frame_data_bound is 1048577:")
            && message.contains("0 to 1048576"),
        "{message}"
    );
}

#[test]
fn options_of_the_version_before_frame_data_bound_get_its_default() {
    let channel = channel();
    assert_eq!(crate::types::PUBLISHER_OPTIONS_V1_SIZE, 36);
    // What a program built against that header passes: 36 bytes, whatever
    // lies after them (here garbage, where the new field would be).
    let publisher = publisher_with(&channel, |o| {
        o.struct_size = 36;
        o.frame_data_bound = 7;
    })
    .unwrap();
    let subscriber = subscriber(&channel, cudaipc_frames::CUDAIPC_FRAMES_EVERY);
    let room = 16384 - 16;
    let data = vec![3u8; room + 1];
    // SAFETY: live handles; buffers of the sizes given.
    unsafe {
        publish_loan(publisher, |loan| {
            ok(cudaipc_loan_set_data(loan, data.as_ptr().cast(), room));
            assert_eq!(
                cudaipc_loan_set_data(loan, data.as_ptr().cast(), room + 1),
                CUDAIPC_ERROR_INVALID_ARGUMENT
            );
        });
    }
    assert_eq!(next_data(subscriber), (BYTES, vec![3; room]));
    assert_eq!(cudaipc_subscriber_free(subscriber), CUDAIPC_OK);
    assert_eq!(cudaipc_publisher_free(publisher), CUDAIPC_OK);
    // Any other size is still refused.
    let (status, message) = publisher_with(&super::channel(), |o| o.struct_size = 32).unwrap_err();
    assert_eq!(status, CUDAIPC_ERROR_INVALID_ARGUMENT);
    assert!(message.contains("struct_size is 32"), "{message}");
}

#[test]
fn the_rust_apis_data_reaches_c_and_cs_reaches_rust() {
    let channel = channel();
    let publisher = publisher_with(&channel, |_| {}).unwrap();
    let mut rust = api::Subscriber::attach(
        channel.to_str().unwrap(),
        api::SubscriberOptions {
            frames: api::Frames::Every,
            ..Default::default()
        },
    )
    .unwrap();
    // SAFETY: a live handle; NUL-terminated text.
    unsafe {
        publish_loan(publisher, |loan| {
            ok(cudaipc_loan_set_json(loan, c"{\"id\":7}".as_ptr()))
        });
    }
    let frame = rust
        .next_frame(Some(std::time::Duration::from_secs(5)))
        .unwrap()
        .unwrap();
    assert_eq!(frame.data(), Some(api::AppData::Json("{\"id\":7}".into())));
    drop(frame);
    assert_eq!(cudaipc_publisher_free(publisher), CUDAIPC_OK);
}
