// SPDX-License-Identifier: MPL-2.0

//! Options and sizes outside what a channel can take, as a tester of the C
//! API gave them: each is refused with an error code whose message names
//! the field and its range, never `CUDAIPC_ERROR_INTERNAL` (a caught
//! panic), and a panic, where one happens, is not printed. Then the messages
//! that say what to change, in C's terms, and the end of a stream asked
//! for again.

use std::ptr::null_mut;
use std::time::{Duration, Instant};

use super::*;

fn publisher_options(
    change: impl FnOnce(&mut cudaipc_publisher_options),
) -> cudaipc_publisher_options {
    let mut options = std::mem::MaybeUninit::<cudaipc_publisher_options>::uninit();
    // SAFETY: writable options.
    let status = unsafe { cudaipc_publisher_options_init(options.as_mut_ptr()) };
    assert_eq!(status, CUDAIPC_OK);
    // SAFETY: initialised above.
    let mut options = unsafe { options.assume_init() };
    options.transport = cudaipc_transport::CUDAIPC_TRANSPORT_HOST as u32;
    change(&mut options);
    options
}

/// `cudaipc_publisher_create` of a GRAY8 8x8 channel with `options`: its
/// status and message, the publisher freed if one was made.
fn create(
    channel: &CStr,
    layout: &cudaipc_layout,
    options: &cudaipc_publisher_options,
) -> (cudaipc_status, String) {
    let mut publisher = null_mut();
    // SAFETY: valid pointers to live values.
    let status =
        unsafe { cudaipc_publisher_create(channel.as_ptr(), layout, options, &mut publisher) };
    let message = last_error();
    if status == CUDAIPC_OK {
        assert_eq!(cudaipc_publisher_free(publisher), CUDAIPC_OK);
    } else {
        assert!(publisher.is_null(), "nothing made on an error");
    }
    (status, message)
}

fn open(channel: &CStr, options: &cudaipc_subscriber_options) -> (cudaipc_status, String) {
    let mut subscriber = null_mut();
    // SAFETY: valid pointers to live values.
    let status = unsafe { cudaipc_subscriber_open(channel.as_ptr(), options, &mut subscriber) };
    let message = last_error();
    if status == CUDAIPC_OK {
        assert_eq!(cudaipc_subscriber_free(subscriber), CUDAIPC_OK);
    }
    (status, message)
}

#[test]
fn permissions_outside_0_to_0777_are_refused_naming_the_field_and_its_range() {
    let gray = layout(cudaipc_format::CUDAIPC_FORMAT_GRAY8, 8, 8);
    // Setuid and world-writable; every bit; a decimal 777 (0o1411, sticky).
    for (permissions, shown) in [
        (0o4777, "04777"),
        (0xFFFF_FFFF, "037777777777"),
        (777, "01411"),
    ] {
        let channel = channel();
        let (status, message) = create(
            &channel,
            &gray,
            &publisher_options(|o| o.permissions = permissions),
        );
        assert_eq!(
            status, CUDAIPC_ERROR_INVALID_ARGUMENT,
            "{permissions:#o}: {message}"
        );
        assert!(
            message.starts_with(&format!("options.permissions is {shown} (octal)"))
                && message.contains("0 to 0777"),
            "{message}"
        );
        let control = cudaipc_channel::shm::control_path(channel.to_str().unwrap());
        assert!(
            !control.exists(),
            "no file was made with mode {permissions:#o}"
        );
    }
    // The widest mode allowed works.
    let (status, message) = create(
        &channel(),
        &gray,
        &publisher_options(|o| o.permissions = 0o777),
    );
    assert_eq!(status, CUDAIPC_OK, "{message}");
}

#[test]
fn slots_and_wait_for_consumers_out_of_range_are_invalid_arguments_not_internal_errors() {
    let gray = layout(cudaipc_format::CUDAIPC_FORMAT_GRAY8, 8, 8);
    for slots in [65, 1000, u32::MAX] {
        let (status, message) = create(&channel(), &gray, &publisher_options(|o| o.slots = slots));
        assert_eq!(
            status, CUDAIPC_ERROR_INVALID_ARGUMENT,
            "slots {slots}: {message}"
        );
        assert!(
            message.starts_with(&format!("options.slots is {slots}:"))
                && message.contains("0 to 64"),
            "{message}"
        );
    }
    let (status, message) = create(&channel(), &gray, &publisher_options(|o| o.slots = 64));
    assert_eq!(status, CUDAIPC_OK, "{message}");
    let (status, message) = create(
        &channel(),
        &gray,
        &publisher_options(|o| o.wait_for_consumers = 33),
    );
    assert_eq!(status, CUDAIPC_ERROR_INVALID_ARGUMENT, "{message}");
    assert!(
        message.starts_with("options.wait_for_consumers is 33:") && message.contains("0 to 32"),
        "{message}"
    );
}

#[test]
fn a_frame_size_a_ring_cannot_hold_is_an_invalid_layout_naming_the_limit() {
    let mut huge = layout(cudaipc_format::CUDAIPC_FORMAT_GRAY8, 8, 8);
    assert_eq!(huge.n_planes, 1);
    let limit = api::MAX_FRAME_SIZE.to_string();
    for frame_size in [1 << 62, u64::MAX] {
        huge.frame_size = frame_size;
        let (status, message) = create(&channel(), &huge, &publisher_options(|_| {}));
        assert_eq!(
            status, CUDAIPC_ERROR_INVALID_LAYOUT,
            "{frame_size}: {message}"
        );
        assert!(
            message.contains(&format!("frame_size is {frame_size} bytes"))
                && message.contains(&limit),
            "{message}"
        );
    }
    // The widest and highest default layout: 2^62 bytes.
    let mut out = huge;
    // SAFETY: a writable layout.
    let status = unsafe {
        cudaipc_layout_init(
            cudaipc_format::CUDAIPC_FORMAT_GRAY8 as u32,
            i32::MAX as u32,
            i32::MAX as u32,
            &mut out,
        )
    };
    assert_eq!(status, CUDAIPC_ERROR_INVALID_LAYOUT, "{}", last_error());
    assert!(
        last_error().contains("frame_size") && last_error().contains(&limit),
        "{}",
        last_error()
    );
}

#[test]
fn a_size_beyond_any_frame_is_a_frame_size_error_before_the_memory_is_touched() {
    let channel = channel();
    let gray = layout(cudaipc_format::CUDAIPC_FORMAT_GRAY8, 8, 8);
    let publisher = host_publisher(&channel, &gray);
    let subscriber = subscriber(&channel, cudaipc_frames::CUDAIPC_FRAMES_EVERY);
    let mut data = [1u8; 64];
    let mut frame = null_mut();
    // SAFETY: live handles; the sizes are wrong on purpose, and the library
    // must refuse them before it reads or writes `data` by them.
    unsafe {
        assert_eq!(
            cudaipc_publisher_publish(publisher, data.as_ptr().cast(), usize::MAX, 0),
            CUDAIPC_ERROR_FRAME_SIZE
        );
        assert!(last_error().contains("has 64 bytes"), "{}", last_error());
        assert_eq!(
            cudaipc_publisher_publish(publisher, data.as_ptr().cast(), 64, 0),
            CUDAIPC_OK
        );
        assert_eq!(
            cudaipc_subscriber_next_frame(subscriber, 5000, &mut frame),
            CUDAIPC_OK
        );
        assert_eq!(
            cudaipc_frame_copy_to_host(frame, data.as_mut_ptr().cast(), usize::MAX),
            CUDAIPC_ERROR_FRAME_SIZE
        );
    }
    assert_eq!(cudaipc_frame_release(frame), CUDAIPC_OK);
    assert_eq!(cudaipc_subscriber_free(subscriber), CUDAIPC_OK);
    assert_eq!(cudaipc_publisher_free(publisher), CUDAIPC_OK);
}

#[test]
fn a_hold_no_ring_can_fit_is_refused_at_the_open_naming_the_limit() {
    // No producer is needed: the open refuses it before it waits for one.
    let channel = channel();
    for hold in [63, 1000, i32::MAX, -2, i32::MIN] {
        let mut options = subscriber_options();
        options.hold = hold;
        options.timeout_ms = 0;
        let (status, message) = open(&channel, &options);
        assert_eq!(
            status, CUDAIPC_ERROR_INVALID_ARGUMENT,
            "hold {hold}: {message}"
        );
        assert!(
            message.starts_with(&format!("options.hold is {hold}:"))
                && message.contains("0 to 62, or -1 (not declared)"),
            "{message}"
        );
    }
    let mut options = subscriber_options();
    options.hold = 62;
    options.timeout_ms = 0;
    assert_eq!(open(&channel, &options).0, CUDAIPC_ERROR_NO_PRODUCER);
}

#[test]
fn holding_mistakes_are_told_in_c_terms() {
    let channel = channel();
    let gray = layout(cudaipc_format::CUDAIPC_FORMAT_GRAY8, 8, 8);
    let fixed = publisher_options(|o| o.slots = 2);
    let mut publisher = null_mut();
    // SAFETY: valid pointers to live values.
    let status =
        unsafe { cudaipc_publisher_create(channel.as_ptr(), &gray, &fixed, &mut publisher) };
    assert_eq!(status, CUDAIPC_OK, "{}", last_error());
    let data = [3u8; 64];
    let c_terms = |message: &str| {
        !message.contains("copy=True") && !message.contains("hold=") && !message.contains("slots=")
    };

    // A hold the fixed ring of 2 cannot fit.
    let mut options = subscriber_options();
    options.hold = 3;
    let mut holder = null_mut();
    let mut frame = null_mut();
    // SAFETY: valid pointers to live values.
    unsafe {
        assert_eq!(
            cudaipc_subscriber_open(channel.as_ptr(), &options, &mut holder),
            CUDAIPC_OK
        );
        assert_eq!(
            cudaipc_publisher_publish(publisher, data.as_ptr().cast(), 64, 0),
            CUDAIPC_OK
        );
        assert_eq!(
            cudaipc_subscriber_next_frame(holder, 5000, &mut frame),
            CUDAIPC_ERROR_HOLDS
        );
    }
    let message = last_error();
    assert!(
        message.contains("cudaipc_subscriber_options.hold = 3 needs 5")
            && message.contains("cudaipc_publisher_options.slots = 5 or more")
            && c_terms(&message),
        "{message}"
    );
    assert_eq!(cudaipc_subscriber_free(holder), CUDAIPC_OK);

    // Every slot held, undeclared.
    let every = super::subscriber(&channel, cudaipc_frames::CUDAIPC_FRAMES_EVERY);
    let (mut first, mut second, mut third) = (null_mut(), null_mut(), null_mut());
    // SAFETY: valid pointers to live values.
    unsafe {
        assert_eq!(
            cudaipc_publisher_publish(publisher, data.as_ptr().cast(), 64, 0),
            CUDAIPC_OK
        );
        assert_eq!(
            cudaipc_publisher_publish(publisher, data.as_ptr().cast(), 64, 0),
            CUDAIPC_OK
        );
        assert_eq!(
            cudaipc_subscriber_next_frame(every, 5000, &mut first),
            CUDAIPC_OK
        );
        assert_eq!(
            cudaipc_subscriber_next_frame(every, 5000, &mut second),
            CUDAIPC_OK
        );
        assert_eq!(
            cudaipc_subscriber_next_frame(every, 5000, &mut third),
            CUDAIPC_ERROR_HOLDS
        );
    }
    let message = last_error();
    assert!(
        message.contains("holds 2 frames")
            && message.contains("cudaipc_frame_release")
            && message.contains("cudaipc_frame_copy_to_host")
            && message.contains("cudaipc_subscriber_options.hold = N")
            && c_terms(&message),
        "{message}"
    );
    assert_eq!(cudaipc_frame_release(first), CUDAIPC_OK);
    assert_eq!(cudaipc_frame_release(second), CUDAIPC_OK);
    assert_eq!(cudaipc_subscriber_free(every), CUDAIPC_OK);
    assert_eq!(cudaipc_publisher_free(publisher), CUDAIPC_OK);
}

#[test]
fn no_producer_lists_the_channels_that_have_one() {
    let live = channel();
    let gray = layout(cudaipc_format::CUDAIPC_FORMAT_GRAY8, 8, 8);
    let publisher = host_publisher(&live, &gray);
    let mut options = subscriber_options();
    options.timeout_ms = 0;
    let missing = channel();
    let (status, message) = open(&missing, &options);
    assert_eq!(status, CUDAIPC_ERROR_NO_PRODUCER);
    let rust = format!(
        "no producer on channel '{}' within 0 ms",
        missing.to_str().unwrap()
    );
    assert!(message.starts_with(&rust), "{message}");
    assert!(
        message.contains("channels with a producer: ") && message.contains(live.to_str().unwrap()),
        "{message}"
    );
    assert_eq!(cudaipc_publisher_free(publisher), CUDAIPC_OK);
}

#[test]
fn after_the_end_of_stream_every_call_says_so_at_once_until_a_new_stream() {
    let channel = channel();
    let gray = layout(cudaipc_format::CUDAIPC_FORMAT_GRAY8, 8, 8);
    let publisher = host_publisher(&channel, &gray);
    let subscriber = subscriber(&channel, cudaipc_frames::CUDAIPC_FRAMES_EVERY);
    let next = |timeout_ms| {
        let mut frame = null_mut();
        // SAFETY: a live handle, a writable out.
        let status = unsafe { cudaipc_subscriber_next_frame(subscriber, timeout_ms, &mut frame) };
        let byte = match status {
            // SAFETY: a frame of 64 host bytes, held until released.
            CUDAIPC_OK => Some(unsafe { *frame_info(frame).host_ptr }),
            _ => None,
        };
        if !frame.is_null() {
            assert_eq!(cudaipc_frame_release(frame), CUDAIPC_OK);
        }
        (status, byte)
    };
    let publish = |byte: u8| {
        let data = [byte; 64];
        // SAFETY: a live handle and 64 readable bytes.
        let status = unsafe { cudaipc_publisher_publish(publisher, data.as_ptr().cast(), 64, 0) };
        assert_eq!(status, CUDAIPC_OK, "{}", last_error());
    };
    publish(1);
    assert_eq!(cudaipc_publisher_eos(publisher), CUDAIPC_OK);
    assert_eq!(next(5000), (CUDAIPC_OK, Some(1)));
    assert_eq!(next(5000), (CUDAIPC_END_OF_STREAM, None));
    // Again, at once, whatever the timeout (not CUDAIPC_ERROR_TIMEOUT).
    for timeout_ms in [5000, -1, 0] {
        let start = Instant::now();
        assert_eq!(
            next(timeout_ms),
            (CUDAIPC_END_OF_STREAM, None),
            "timeout {timeout_ms}"
        );
        assert!(start.elapsed() < Duration::from_secs(1), "it did not wait");
    }
    // The producer streams again: the new stream's frames, then its end.
    publish(2);
    assert_eq!(next(5000), (CUDAIPC_OK, Some(2)));
    assert_eq!(cudaipc_publisher_eos(publisher), CUDAIPC_OK);
    assert_eq!(next(5000), (CUDAIPC_END_OF_STREAM, None));
    // Its close after the end is the end again.
    assert_eq!(cudaipc_publisher_free(publisher), CUDAIPC_OK);
    assert_eq!(next(5000), (CUDAIPC_END_OF_STREAM, None));
    assert_eq!(cudaipc_subscriber_free(subscriber), CUDAIPC_OK);
}

/// Set in the child processes of the test below: which panic they raise.
const PANIC_CHILD: &str = "CUDAIPC_TEST_PANIC_CHILD";

/// This test binary run again for this test alone, output not captured,
/// with `PANIC_CHILD` set to `case`: its stdout and stderr.
fn panic_child(case: &str) -> (String, String) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tests::limits::a_caught_panic_is_not_printed_but_one_of_the_host_is",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PANIC_CHILD, case)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{case}:\n{stdout}\n{stderr}");
    assert!(stdout.contains("child done"), "{case}:\n{stdout}\n{stderr}");
    (stdout, stderr)
}

#[test]
fn a_caught_panic_is_not_printed_but_one_of_the_host_is() {
    match std::env::var(PANIC_CHILD).as_deref() {
        Ok("library") => {
            let status = crate::status::guard("child", || panic!("a bug on purpose"));
            assert_eq!(status, CUDAIPC_ERROR_INTERNAL);
            let message = last_error();
            assert!(
                message.starts_with("internal error in child: a bug on purpose (at ")
                    && message.contains("limits.rs:"),
                "{message}"
            );
            println!("child done");
            return;
        }
        Ok(_) => {
            // The library's hook is in place (any call installs it), and a
            // panic of the host's own is the host's hook's to print.
            assert_eq!(
                crate::status::guard("install", || Ok(CUDAIPC_OK)),
                CUDAIPC_OK
            );
            assert!(std::panic::catch_unwind(|| panic!("the host's own")).is_err());
            println!("child done");
            return;
        }
        Err(_) => {}
    }
    let (_, stderr) = panic_child("library");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("a bug on purpose"),
        "printed:\n{stderr}"
    );
    let (_, stderr) = panic_child("host");
    assert!(
        stderr.contains("panicked") && stderr.contains("the host's own"),
        "not printed:\n{stderr}"
    );
}
