// SPDX-License-Identifier: MPL-2.0

//! The extern functions called as C calls them.

mod bad_input;
mod frame_data;
mod header;
mod limits;
mod round_trip;

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::*;

/// A channel name no other test (or run) uses.
fn channel() -> CString {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    CString::new(format!("capi-test-{}-{n}", std::process::id())).unwrap()
}

/// This thread's last error message.
fn last_error() -> String {
    // SAFETY: the library returns a NUL-terminated string valid until the
    // next failing call on this thread; copied at once.
    unsafe { CStr::from_ptr(cudaipc_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

fn layout(format: cudaipc_format, width: u32, height: u32) -> cudaipc_layout {
    let mut layout = std::mem::MaybeUninit::<cudaipc_layout>::uninit();
    // SAFETY: a writable layout.
    let status = unsafe { cudaipc_layout_init(format as u32, width, height, layout.as_mut_ptr()) };
    assert_eq!(status, CUDAIPC_OK, "{}", last_error());
    // SAFETY: initialised by the call that returned OK.
    unsafe { layout.assume_init() }
}

/// A host-transport publisher of `layout` on `channel`.
fn host_publisher(channel: &CStr, layout: &cudaipc_layout) -> *mut cudaipc_publisher {
    let mut options = std::mem::MaybeUninit::<cudaipc_publisher_options>::uninit();
    // SAFETY: writable options.
    let status = unsafe { cudaipc_publisher_options_init(options.as_mut_ptr()) };
    assert_eq!(status, CUDAIPC_OK);
    // SAFETY: initialised above.
    let mut options = unsafe { options.assume_init() };
    options.transport = cudaipc_transport::CUDAIPC_TRANSPORT_HOST as u32;
    let mut publisher = std::ptr::null_mut();
    // SAFETY: valid pointers to live values.
    let status =
        unsafe { cudaipc_publisher_create(channel.as_ptr(), layout, &options, &mut publisher) };
    assert_eq!(status, CUDAIPC_OK, "{}", last_error());
    publisher
}

/// A subscriber of `channel` with default options but `frames`.
fn subscriber(channel: &CStr, frames: cudaipc_frames) -> *mut cudaipc_subscriber {
    let mut options = subscriber_options();
    options.frames = frames as u32;
    let mut subscriber = std::ptr::null_mut();
    // SAFETY: valid pointers to live values.
    let status = unsafe { cudaipc_subscriber_open(channel.as_ptr(), &options, &mut subscriber) };
    assert_eq!(status, CUDAIPC_OK, "{}", last_error());
    subscriber
}

fn subscriber_options() -> cudaipc_subscriber_options {
    let mut options = std::mem::MaybeUninit::<cudaipc_subscriber_options>::uninit();
    // SAFETY: writable options.
    let status = unsafe { cudaipc_subscriber_options_init(options.as_mut_ptr()) };
    assert_eq!(status, CUDAIPC_OK);
    // SAFETY: initialised above.
    unsafe { options.assume_init() }
}

fn frame_info(frame: *mut cudaipc_frame) -> cudaipc_frame_info {
    // SAFETY: zeroes are a valid info (NULL pointers, 0 numbers).
    let mut info: cudaipc_frame_info = unsafe { std::mem::zeroed() };
    info.struct_size = size_of::<cudaipc_frame_info>() as u32;
    // SAFETY: a writable info of the right size.
    let status = unsafe { cudaipc_frame_get_info(frame, &mut info) };
    assert_eq!(status, CUDAIPC_OK, "{}", last_error());
    info
}
