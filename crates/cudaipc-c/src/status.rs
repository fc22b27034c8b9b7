// SPDX-License-Identifier: MPL-2.0

//! Status codes, the thread's last error message, and the guard every
//! entry point runs in: a panic is caught there and becomes a status, never
//! an unwind into C.

use std::cell::{Cell, RefCell};
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

use crate::messages;

/// What a call returns. `CUDAIPC_OK` and the two other values below 100 are
/// outcomes; every value from 100 on is an error, whose text
/// `cudaipc_last_error_message()` gives on the same thread.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum cudaipc_status {
    /// Done.
    CUDAIPC_OK = 0,
    /// `cudaipc_subscriber_next_frame`: the producer ended the stream; no
    /// frame was handed out.
    CUDAIPC_END_OF_STREAM = 1,
    /// `cudaipc_publisher_publish` with `when_full` DROP: every slot was
    /// held by consumers, so the frame was dropped.
    CUDAIPC_DROPPED = 2,
    /// A NULL pointer where one is required, an options struct whose
    /// `struct_size` is not this library's, an enum value out of range, an
    /// option outside the values it takes (`permissions` above 0777,
    /// `slots` above 64, `wait_for_consumers` above 32, `hold` above 62 or
    /// below -1, `frame_data_bound` above 1048576: the message names the
    /// field and its range), a channel name that is not UTF-8, per-frame
    /// data larger than the channel's frames carry (the message names the
    /// bound) or JSON text that is not UTF-8.
    CUDAIPC_ERROR_INVALID_ARGUMENT = 100,
    /// A handle that is not a live one of that kind: freed, released,
    /// already published, or never made by this library.
    CUDAIPC_ERROR_INVALID_HANDLE = 101,
    /// `close` was called on the publisher or subscriber, before or during
    /// the call.
    CUDAIPC_ERROR_CLOSED = 102,
    /// No frame came within the timeout.
    CUDAIPC_ERROR_TIMEOUT = 103,
    /// A byte count that is not the layout's frame size.
    CUDAIPC_ERROR_FRAME_SIZE = 104,
    /// A format this library does not know.
    CUDAIPC_ERROR_UNSUPPORTED_FORMAT = 105,
    /// A layout that cannot describe a frame (zero size, a stride below the
    /// row, a plane outside the frame, a `frame_size` larger than a ring of
    /// its slots can be), or caps that do not parse.
    CUDAIPC_ERROR_INVALID_LAYOUT = 106,
    /// A channel name that cannot be used (empty, too long, a `/`).
    CUDAIPC_ERROR_INVALID_CHANNEL_NAME = 107,
    /// Another live producer owns the channel.
    CUDAIPC_ERROR_CHANNEL_IN_USE = 108,
    /// No producer appeared within the attach timeout.
    CUDAIPC_ERROR_NO_PRODUCER = 109,
    /// The channel may not be used by this process (permissions, an
    /// untrusted owner).
    CUDAIPC_ERROR_PERMISSION_DENIED = 110,
    /// The producer closed the channel without an end of stream, or died.
    CUDAIPC_ERROR_PRODUCER_GONE = 111,
    /// `when_full` DROP and every slot is held: no loan now.
    CUDAIPC_ERROR_NO_FREE_SLOT = 112,
    /// CUDA: no usable device or driver, or a CUDA call failed.
    CUDAIPC_ERROR_DEVICE = 113,
    /// The subscriber holds frames in a way that cannot work (it asked for
    /// one while holding all it may, or declared a `hold` the ring cannot
    /// fit).
    CUDAIPC_ERROR_HOLDS = 114,
    /// Any other failure of the channel or the slots (shared memory,
    /// sockets, a corrupt control block): the message says what.
    CUDAIPC_ERROR_CHANNEL = 115,
    /// A bug in this library (a caught panic, never printed to stderr): the
    /// message says what and where. No input leads to it.
    CUDAIPC_ERROR_INTERNAL = 116,
}

pub use cudaipc_status::*;

/// An error of an entry point: its status and its message.
pub(crate) struct Failure {
    pub status: cudaipc_status,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(status: cudaipc_status, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn null(what: &str) -> Self {
        Self::new(CUDAIPC_ERROR_INVALID_ARGUMENT, format!("{what} is NULL"))
    }
}

impl From<api::Error> for Failure {
    fn from(e: api::Error) -> Self {
        use api::Error as E;
        let status = match &e {
            E::OutOfRange { .. } => CUDAIPC_ERROR_INVALID_ARGUMENT,
            E::InvalidLayout(_) | E::InvalidCaps { .. } | E::SlotsTooSmall { .. } => {
                CUDAIPC_ERROR_INVALID_LAYOUT
            }
            E::UnsupportedFormat(_) => CUDAIPC_ERROR_UNSUPPORTED_FORMAT,
            E::FrameSize { .. } => CUDAIPC_ERROR_FRAME_SIZE,
            E::FrameDataTooLarge { .. } => CUDAIPC_ERROR_INVALID_ARGUMENT,
            E::InvalidChannelName(_) => CUDAIPC_ERROR_INVALID_CHANNEL_NAME,
            E::ChannelInUse { .. } => CUDAIPC_ERROR_CHANNEL_IN_USE,
            E::NoProducer { .. } => CUDAIPC_ERROR_NO_PRODUCER,
            E::PermissionDenied { .. } => CUDAIPC_ERROR_PERMISSION_DENIED,
            E::ProducerGone { .. } => CUDAIPC_ERROR_PRODUCER_GONE,
            E::Timeout(_) => CUDAIPC_ERROR_TIMEOUT,
            E::NoFreeSlot => CUDAIPC_ERROR_NO_FREE_SLOT,
            E::Closed | E::Interrupted => CUDAIPC_ERROR_CLOSED,
            E::Device(_) => CUDAIPC_ERROR_DEVICE,
            E::Holds(_) => CUDAIPC_ERROR_HOLDS,
            _ => CUDAIPC_ERROR_CHANNEL,
        };
        // The Rust API names its own fields and Python's calls where it
        // says what to change; C's are told here.
        let message = match &e {
            E::OutOfRange { setting, value } => messages::out_of_range(*setting, *value),
            E::Holds(e) => messages::holds(e),
            E::NoProducer { .. } => messages::no_producer(&e),
            E::FrameDataTooLarge { len, bound } => messages::frame_data_too_large(*len, *bound),
            e => e.to_string(),
        };
        Self::new(status, message)
    }
}

pub(crate) type Result<T> = std::result::Result<T, Failure>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    /// Entry points running on this thread: a panic while one is caught by
    /// `guard`, which reports it.
    static GUARDED: Cell<u32> = const { Cell::new(0) };
    /// Where the last caught panic of this thread was raised, as the panic
    /// hook saw it (a caught payload says only what).
    static PANICKED_AT: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Installs, once per process, a panic hook that keeps quiet about the
/// panics `guard` catches (the host program's stderr gets no Rust panic and
/// backtrace; the status and the last error's text say it) and hands every
/// other panic to the hook that was there before: the host's own, or
/// Rust's default, which prints it.
fn quiet_caught_panics() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // During thread teardown: not ours to judge.
            let guarded = GUARDED.try_with(Cell::get).unwrap_or(0) > 0;
            if !guarded {
                return previous(info);
            }
            if let Some(at) = info.location() {
                let _ = PANICKED_AT.try_with(|p| *p.borrow_mut() = at.to_string());
            }
        }));
    });
}

fn set_last_error(message: &str) {
    // An interior NUL (from a channel name) would cut the text: shown as '?'.
    let text = CString::new(message.replace('\0', "?")).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = text);
}

/// Runs an entry point's body: its error or panic becomes a status, and its
/// message the thread's last error.
pub(crate) fn guard(name: &str, body: impl FnOnce() -> Result<cudaipc_status>) -> cudaipc_status {
    quiet_caught_panics();
    GUARDED.with(|g| g.set(g.get() + 1));
    let outcome = catch_unwind(AssertUnwindSafe(body));
    GUARDED.with(|g| g.set(g.get() - 1));
    match outcome {
        Ok(Ok(status)) => status,
        Ok(Err(failure)) => {
            set_last_error(&failure.message);
            failure.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let at = PANICKED_AT.with(|p| std::mem::take(&mut *p.borrow_mut()));
            let at = match at.is_empty() {
                true => String::new(),
                false => format!(" (at {at})"),
            };
            set_last_error(&format!("internal error in {name}: {what}{at}"));
            CUDAIPC_ERROR_INTERNAL
        }
    }
}

/// The message of the last call on this thread that returned an error
/// (a status of 100 or more): the same text the Rust API's error displays.
/// An empty string when no call failed yet. The pointer stays valid until
/// the next failing call on this thread; copy the text to keep it.
#[unsafe(no_mangle)]
pub extern "C" fn cudaipc_last_error_message() -> *const c_char {
    // A panic here is impossible (a thread-local read); `try_with` keeps a
    // call during thread teardown from aborting.
    LAST_ERROR
        .try_with(|last| last.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// The name of a status code ("CUDAIPC_ERROR_TIMEOUT"), or "unknown status"
/// for a value that is none. A static string.
#[unsafe(no_mangle)]
pub extern "C" fn cudaipc_status_name(status: i32) -> *const c_char {
    let name = match status {
        0 => c"CUDAIPC_OK",
        1 => c"CUDAIPC_END_OF_STREAM",
        2 => c"CUDAIPC_DROPPED",
        100 => c"CUDAIPC_ERROR_INVALID_ARGUMENT",
        101 => c"CUDAIPC_ERROR_INVALID_HANDLE",
        102 => c"CUDAIPC_ERROR_CLOSED",
        103 => c"CUDAIPC_ERROR_TIMEOUT",
        104 => c"CUDAIPC_ERROR_FRAME_SIZE",
        105 => c"CUDAIPC_ERROR_UNSUPPORTED_FORMAT",
        106 => c"CUDAIPC_ERROR_INVALID_LAYOUT",
        107 => c"CUDAIPC_ERROR_INVALID_CHANNEL_NAME",
        108 => c"CUDAIPC_ERROR_CHANNEL_IN_USE",
        109 => c"CUDAIPC_ERROR_NO_PRODUCER",
        110 => c"CUDAIPC_ERROR_PERMISSION_DENIED",
        111 => c"CUDAIPC_ERROR_PRODUCER_GONE",
        112 => c"CUDAIPC_ERROR_NO_FREE_SLOT",
        113 => c"CUDAIPC_ERROR_DEVICE",
        114 => c"CUDAIPC_ERROR_HOLDS",
        115 => c"CUDAIPC_ERROR_CHANNEL",
        116 => c"CUDAIPC_ERROR_INTERNAL",
        _ => c"unknown status",
    };
    name.as_ptr()
}
