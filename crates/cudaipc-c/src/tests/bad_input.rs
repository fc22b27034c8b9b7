// SPDX-License-Identifier: MPL-2.0

//! Every entry point given NULL, a freed handle, a handle of another kind,
//! a wrong struct size, an unknown format or enum value: an error code and
//! a message, never a crash.

use std::ptr::{null, null_mut};

use super::*;

type Handles = (
    *mut cudaipc_publisher,
    *mut cudaipc_subscriber,
    *mut cudaipc_frame,
    *mut cudaipc_loan,
);

/// Calls every entry point that takes a handle with `handles` and valid
/// other arguments; each one's name and status.
fn calls_with((p, s, f, l): Handles) -> Vec<(&'static str, cudaipc_status)> {
    let mut layout = layout(cudaipc_format::CUDAIPC_FORMAT_GRAY8, 8, 8);
    let mut data = [0u8; 64];
    let (mut int, mut count, mut missed) = (0i32, 0u32, 0u64);
    let mut loan = null_mut();
    let mut frame = null_mut();
    let (mut app, mut app_len, mut kind) = (null(), 0usize, 0u32);
    // SAFETY: zeroes are valid infos.
    let mut frame_info: cudaipc_frame_info = unsafe { std::mem::zeroed() };
    frame_info.struct_size = size_of::<cudaipc_frame_info>() as u32;
    // SAFETY: as above.
    let mut loan_info: cudaipc_loan_info = unsafe { std::mem::zeroed() };
    loan_info.struct_size = size_of::<cudaipc_loan_info>() as u32;
    let stream = null_mut();
    // SAFETY: every pointer but the handles is a live local; the handles
    // are what is tested, and the library never dereferences them.
    unsafe {
        vec![
            (
                "cudaipc_publisher_publish",
                cudaipc_publisher_publish(p, data.as_ptr().cast(), 64, 0),
            ),
            (
                "cudaipc_publisher_publish_with_data",
                cudaipc_publisher_publish_with_data(
                    p,
                    data.as_ptr().cast(),
                    64,
                    0,
                    c"d".as_ptr().cast(),
                    1,
                ),
            ),
            (
                "cudaipc_publisher_publish_with_json",
                cudaipc_publisher_publish_with_json(p, data.as_ptr().cast(), 64, 0, c"{}".as_ptr()),
            ),
            (
                "cudaipc_publisher_loan",
                cudaipc_publisher_loan(p, &mut loan),
            ),
            (
                "cudaipc_publisher_get_layout",
                cudaipc_publisher_get_layout(p, &mut layout),
            ),
            (
                "cudaipc_publisher_is_cuda",
                cudaipc_publisher_is_cuda(p, &mut int),
            ),
            (
                "cudaipc_publisher_consumer_count",
                cudaipc_publisher_consumer_count(p, &mut count),
            ),
            ("cudaipc_publisher_eos", cudaipc_publisher_eos(p)),
            ("cudaipc_publisher_close", cudaipc_publisher_close(p)),
            ("cudaipc_publisher_free", cudaipc_publisher_free(p)),
            (
                "cudaipc_loan_get_info",
                cudaipc_loan_get_info(l, &mut loan_info),
            ),
            (
                "cudaipc_loan_stream_wait",
                cudaipc_loan_stream_wait(l, stream),
            ),
            (
                "cudaipc_loan_publish_after_stream",
                cudaipc_loan_publish_after_stream(l, stream),
            ),
            (
                "cudaipc_loan_set_data",
                cudaipc_loan_set_data(l, c"d".as_ptr().cast(), 1),
            ),
            (
                "cudaipc_loan_set_json",
                cudaipc_loan_set_json(l, c"{}".as_ptr()),
            ),
            ("cudaipc_loan_publish", cudaipc_loan_publish(l, 0)),
            ("cudaipc_loan_discard", cudaipc_loan_discard(l)),
            (
                "cudaipc_subscriber_next_frame",
                cudaipc_subscriber_next_frame(s, 0, &mut frame),
            ),
            (
                "cudaipc_subscriber_frames_missed",
                cudaipc_subscriber_frames_missed(s, &mut missed),
            ),
            (
                "cudaipc_subscriber_is_cuda",
                cudaipc_subscriber_is_cuda(s, &mut int),
            ),
            ("cudaipc_subscriber_close", cudaipc_subscriber_close(s)),
            ("cudaipc_subscriber_free", cudaipc_subscriber_free(s)),
            (
                "cudaipc_frame_get_info",
                cudaipc_frame_get_info(f, &mut frame_info),
            ),
            (
                "cudaipc_frame_get_data",
                cudaipc_frame_get_data(f, &mut app, &mut app_len, &mut kind),
            ),
            (
                "cudaipc_frame_copy_to_host",
                cudaipc_frame_copy_to_host(f, data.as_mut_ptr().cast(), 64),
            ),
            (
                "cudaipc_frame_stream_wait",
                cudaipc_frame_stream_wait(f, stream),
            ),
            (
                "cudaipc_frame_release_after_stream",
                cudaipc_frame_release_after_stream(f, stream),
            ),
            ("cudaipc_frame_release", cudaipc_frame_release(f)),
        ]
    }
}

/// The entry points without a handle, each tested on its own below.
const WITHOUT_HANDLE: [&str; 8] = [
    "cudaipc_version",
    "cudaipc_last_error_message",
    "cudaipc_status_name",
    "cudaipc_layout_init",
    "cudaipc_publisher_options_init",
    "cudaipc_subscriber_options_init",
    "cudaipc_publisher_create",
    "cudaipc_subscriber_open",
];

#[test]
fn every_entry_point_of_the_header_is_tested_here() {
    let mut tested: Vec<String> = calls_with((null_mut(), null_mut(), null_mut(), null_mut()))
        .into_iter()
        .map(|(name, _)| name.to_owned())
        .chain(WITHOUT_HANDLE.iter().map(|s| s.to_string()))
        .collect();
    tested.sort();
    assert_eq!(tested, super::header::functions());
}

#[test]
fn null_handles_are_invalid_arguments() {
    for (name, status) in calls_with((null_mut(), null_mut(), null_mut(), null_mut())) {
        assert_eq!(status, CUDAIPC_ERROR_INVALID_ARGUMENT, "{name}");
        assert!(
            last_error().contains("handle is NULL"),
            "{name}: {}",
            last_error()
        );
    }
}

/// A live handle of every kind: a host publisher, a loan of it, a
/// subscriber, a frame it read.
fn live_handles() -> Handles {
    let channel = channel();
    let layout = layout(cudaipc_format::CUDAIPC_FORMAT_GRAY8, 8, 8);
    let publisher = host_publisher(&channel, &layout);
    let subscriber = subscriber(&channel, cudaipc_frames::CUDAIPC_FRAMES_EVERY);
    let data = [5u8; 64];
    let mut frame = null_mut();
    let mut loan = null_mut();
    // SAFETY: live handles and locals.
    unsafe {
        assert_eq!(
            cudaipc_publisher_publish(publisher, data.as_ptr().cast(), 64, 0),
            CUDAIPC_OK
        );
        assert_eq!(
            cudaipc_subscriber_next_frame(subscriber, 5000, &mut frame),
            CUDAIPC_OK
        );
        assert_eq!(
            cudaipc_publisher_loan(publisher, &mut loan),
            CUDAIPC_OK,
            "{}",
            last_error()
        );
    }
    (publisher, subscriber, frame, loan)
}

fn free_all((p, s, f, l): Handles) {
    assert_eq!(cudaipc_frame_release(f), CUDAIPC_OK);
    assert_eq!(cudaipc_loan_discard(l), CUDAIPC_OK);
    assert_eq!(cudaipc_subscriber_free(s), CUDAIPC_OK);
    assert_eq!(cudaipc_publisher_free(p), CUDAIPC_OK);
}

#[test]
fn freed_handles_are_invalid_handles() {
    let handles = live_handles();
    free_all(handles);
    for (name, status) in calls_with(handles) {
        assert_eq!(
            status,
            CUDAIPC_ERROR_INVALID_HANDLE,
            "{name}: {}",
            last_error()
        );
        assert!(
            last_error().contains("is not a live"),
            "{name}: {}",
            last_error()
        );
    }
}

#[test]
fn a_handle_of_another_kind_is_an_invalid_handle() {
    let handles @ (p, s, f, l) = live_handles();
    // Each handle where the next kind is expected.
    let shifted = (l.cast(), p.cast(), s.cast(), f.cast());
    for (name, status) in calls_with(shifted) {
        assert_eq!(
            status,
            CUDAIPC_ERROR_INVALID_HANDLE,
            "{name}: {}",
            last_error()
        );
    }
    // None of them was touched.
    free_all(handles);
}

#[test]
fn a_forged_handle_is_an_invalid_handle() {
    let forged = (
        std::ptr::without_provenance_mut(0x1234),
        std::ptr::without_provenance_mut(usize::MAX),
        std::ptr::without_provenance_mut(8),
        std::ptr::without_provenance_mut(1),
    );
    for (name, status) in calls_with(forged) {
        assert_eq!(status, CUDAIPC_ERROR_INVALID_HANDLE, "{name}");
    }
}

#[test]
fn null_out_and_data_pointers_with_live_handles_are_invalid_arguments() {
    let handles @ (p, s, f, l) = live_handles();
    // SAFETY: live handles; NULL is what is tested.
    let calls = unsafe {
        [
            ("publish data", cudaipc_publisher_publish(p, null(), 64, 0)),
            (
                "publish_with_data data",
                cudaipc_publisher_publish_with_data(p, null(), 64, 0, null(), 0),
            ),
            (
                "publish_with_data app_data",
                cudaipc_publisher_publish_with_data(p, [0u8; 64].as_ptr().cast(), 64, 0, null(), 1),
            ),
            (
                "publish_with_json json",
                cudaipc_publisher_publish_with_json(p, [0u8; 64].as_ptr().cast(), 64, 0, null()),
            ),
            ("loan set_data", cudaipc_loan_set_data(l, null(), 3)),
            ("loan set_json", cudaipc_loan_set_json(l, null())),
            (
                "frame get_data data",
                cudaipc_frame_get_data(f, null_mut(), &mut 0, &mut 0),
            ),
            (
                "frame get_data len",
                cudaipc_frame_get_data(f, &mut null(), null_mut(), &mut 0),
            ),
            (
                "frame get_data kind",
                cudaipc_frame_get_data(f, &mut null(), &mut 0, null_mut()),
            ),
            ("loan out", cudaipc_publisher_loan(p, null_mut())),
            ("get_layout", cudaipc_publisher_get_layout(p, null_mut())),
            (
                "publisher is_cuda",
                cudaipc_publisher_is_cuda(p, null_mut()),
            ),
            (
                "consumer_count",
                cudaipc_publisher_consumer_count(p, null_mut()),
            ),
            ("loan info", cudaipc_loan_get_info(l, null_mut())),
            (
                "next_frame out",
                cudaipc_subscriber_next_frame(s, 0, null_mut()),
            ),
            (
                "frames_missed",
                cudaipc_subscriber_frames_missed(s, null_mut()),
            ),
            (
                "subscriber is_cuda",
                cudaipc_subscriber_is_cuda(s, null_mut()),
            ),
            ("frame info", cudaipc_frame_get_info(f, null_mut())),
            (
                "copy_to_host dst",
                cudaipc_frame_copy_to_host(f, null_mut(), 64),
            ),
        ]
    };
    for (name, status) in calls {
        assert_eq!(status, CUDAIPC_ERROR_INVALID_ARGUMENT, "{name}");
        assert!(
            last_error().ends_with("is NULL"),
            "{name}: {}",
            last_error()
        );
    }
    free_all(handles);
}

#[test]
fn wrong_sizes_are_refused_and_lose_nothing() {
    let handles @ (p, s, f, l) = live_handles();
    let data = [1u8; 65];
    let mut small = [0u8; 63];
    // SAFETY: zeroes are a valid info.
    let mut info: cudaipc_frame_info = unsafe { std::mem::zeroed() };
    info.struct_size = size_of::<cudaipc_frame_info>() as u32 - 8;
    // SAFETY: zeroes are a valid info.
    let mut loan_info: cudaipc_loan_info = unsafe { std::mem::zeroed() };
    loan_info.struct_size = 4;
    // SAFETY: live handles and buffers of the sizes given.
    unsafe {
        assert_eq!(
            cudaipc_publisher_publish(p, data.as_ptr().cast(), 65, 0),
            CUDAIPC_ERROR_FRAME_SIZE
        );
        assert_eq!(
            last_error(),
            "a frame of this layout has 64 bytes, 65 were given"
        );
        assert_eq!(
            cudaipc_frame_copy_to_host(f, small.as_mut_ptr().cast(), 63),
            CUDAIPC_ERROR_FRAME_SIZE
        );
        assert_eq!(
            cudaipc_frame_get_info(f, &mut info),
            CUDAIPC_ERROR_INVALID_ARGUMENT
        );
        assert!(last_error().contains("struct_size"), "{}", last_error());
        assert_eq!(
            cudaipc_loan_get_info(l, &mut loan_info),
            CUDAIPC_ERROR_INVALID_ARGUMENT
        );
    }
    // The handles still work.
    assert_eq!(frame_info(f).layout.frame_size, 64);
    free_all(handles);
    let _ = s;
}

#[test]
fn bad_create_and_open_arguments_are_error_codes() {
    let channel = channel();
    let gray = layout(cudaipc_format::CUDAIPC_FORMAT_GRAY8, 8, 8);
    let mut publisher = null_mut();
    let mut subscriber = null_mut();
    let mut options = std::mem::MaybeUninit::<cudaipc_publisher_options>::uninit();
    // SAFETY: writable.
    unsafe { cudaipc_publisher_options_init(options.as_mut_ptr()) };
    // SAFETY: initialised above.
    let options = unsafe { options.assume_init() };
    let with = |change: fn(&mut cudaipc_publisher_options)| {
        let mut o = options;
        change(&mut o);
        o
    };
    let mut unknown_format = gray;
    unknown_format.format = 99;
    let mut zero_width = gray;
    zero_width.width = 0;
    let mut narrow_stride = gray;
    narrow_stride.n_planes = 1;
    narrow_stride.strides[0] = 4;
    // SAFETY: valid pointers or NULL, which is what is tested.
    unsafe {
        let cases = [
            (
                "NULL channel",
                cudaipc_publisher_create(null(), &gray, null(), &mut publisher),
                CUDAIPC_ERROR_INVALID_ARGUMENT,
            ),
            (
                "NULL layout",
                cudaipc_publisher_create(channel.as_ptr(), null(), null(), &mut publisher),
                CUDAIPC_ERROR_INVALID_ARGUMENT,
            ),
            (
                "NULL out",
                cudaipc_publisher_create(channel.as_ptr(), &gray, null(), null_mut()),
                CUDAIPC_ERROR_INVALID_ARGUMENT,
            ),
            (
                "unknown format",
                cudaipc_publisher_create(channel.as_ptr(), &unknown_format, null(), &mut publisher),
                CUDAIPC_ERROR_UNSUPPORTED_FORMAT,
            ),
            (
                "zero width",
                cudaipc_publisher_create(channel.as_ptr(), &zero_width, null(), &mut publisher),
                CUDAIPC_ERROR_INVALID_LAYOUT,
            ),
            (
                "narrow stride",
                cudaipc_publisher_create(channel.as_ptr(), &narrow_stride, null(), &mut publisher),
                CUDAIPC_ERROR_INVALID_LAYOUT,
            ),
            (
                "struct_size",
                cudaipc_publisher_create(
                    channel.as_ptr(),
                    &gray,
                    &with(|o| o.struct_size = 12),
                    &mut publisher,
                ),
                CUDAIPC_ERROR_INVALID_ARGUMENT,
            ),
            (
                "transport 7",
                cudaipc_publisher_create(
                    channel.as_ptr(),
                    &gray,
                    &with(|o| o.transport = 7),
                    &mut publisher,
                ),
                CUDAIPC_ERROR_INVALID_ARGUMENT,
            ),
            (
                "when_full 2",
                cudaipc_publisher_create(
                    channel.as_ptr(),
                    &gray,
                    &with(|o| o.when_full = 2),
                    &mut publisher,
                ),
                CUDAIPC_ERROR_INVALID_ARGUMENT,
            ),
            (
                "bad name",
                cudaipc_publisher_create(
                    c"a/b".as_ptr(),
                    &gray,
                    &with(|o| o.transport = 2),
                    &mut publisher,
                ),
                CUDAIPC_ERROR_INVALID_CHANNEL_NAME,
            ),
            (
                "non-UTF-8 name",
                cudaipc_publisher_create(c"\xff".as_ptr(), &gray, null(), &mut publisher),
                CUDAIPC_ERROR_INVALID_ARGUMENT,
            ),
            (
                "layout_init format 0",
                cudaipc_layout_init(0, 8, 8, &mut zero_width),
                CUDAIPC_ERROR_UNSUPPORTED_FORMAT,
            ),
            (
                "layout_init NULL",
                cudaipc_layout_init(1, 8, 8, null_mut()),
                CUDAIPC_ERROR_INVALID_ARGUMENT,
            ),
            (
                "publisher options NULL",
                cudaipc_publisher_options_init(null_mut()),
                CUDAIPC_ERROR_INVALID_ARGUMENT,
            ),
            (
                "subscriber options NULL",
                cudaipc_subscriber_options_init(null_mut()),
                CUDAIPC_ERROR_INVALID_ARGUMENT,
            ),
            (
                "open NULL channel",
                cudaipc_subscriber_open(null(), null(), &mut subscriber),
                CUDAIPC_ERROR_INVALID_ARGUMENT,
            ),
            (
                "open NULL out",
                cudaipc_subscriber_open(channel.as_ptr(), null(), null_mut()),
                CUDAIPC_ERROR_INVALID_ARGUMENT,
            ),
        ];
        for (name, status, expected) in cases {
            assert_eq!(status, expected, "{name}: {}", last_error());
            assert!(!last_error().is_empty(), "{name}");
        }
        let mut sub_options = subscriber_options();
        sub_options.frames = 3;
        assert_eq!(
            cudaipc_subscriber_open(channel.as_ptr(), &sub_options, &mut subscriber),
            CUDAIPC_ERROR_INVALID_ARGUMENT
        );
        sub_options = subscriber_options();
        sub_options.struct_size += 1;
        assert_eq!(
            cudaipc_subscriber_open(channel.as_ptr(), &sub_options, &mut subscriber),
            CUDAIPC_ERROR_INVALID_ARGUMENT
        );
    }
    assert!(
        publisher.is_null() && subscriber.is_null(),
        "nothing made on an error"
    );
}

#[test]
fn status_names_and_version_are_static_strings() {
    // SAFETY: static NUL-terminated strings.
    unsafe {
        assert_eq!(
            CStr::from_ptr(cudaipc_status_name(103)).to_str(),
            Ok("CUDAIPC_ERROR_TIMEOUT")
        );
        assert_eq!(
            CStr::from_ptr(cudaipc_status_name(-5)).to_str(),
            Ok("unknown status")
        );
        assert_eq!(
            CStr::from_ptr(cudaipc_version()).to_str(),
            Ok(env!("CARGO_PKG_VERSION"))
        );
    }
    // Every status has its own name.
    for status in [
        CUDAIPC_OK,
        CUDAIPC_END_OF_STREAM,
        CUDAIPC_DROPPED,
        CUDAIPC_ERROR_CHANNEL,
        CUDAIPC_ERROR_INTERNAL,
    ] {
        // SAFETY: as above.
        let name = unsafe { CStr::from_ptr(cudaipc_status_name(status as i32)) };
        assert_eq!(name.to_str(), Ok(format!("{status:?}").as_str()));
    }
}

#[test]
fn a_caught_panic_is_an_internal_error() {
    let status = crate::status::guard("test", || panic!("on purpose"));
    assert_eq!(status, CUDAIPC_ERROR_INTERNAL);
    // What, and where (the panic itself is not printed: tests::limits).
    assert!(
        last_error().starts_with("internal error in test: on purpose (at ")
            && last_error().contains("bad_input.rs:"),
        "{}",
        last_error()
    );
}
