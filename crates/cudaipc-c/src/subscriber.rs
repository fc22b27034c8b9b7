// SPDX-License-Identifier: MPL-2.0

//! The consumer end: `cudaipc_subscriber_*`.

use std::ffi::c_char;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use api::{Closer, Frames, IpcMode, Subscriber, SubscriberOptions};

use crate::frame::{FRAMES, cudaipc_frame};
use crate::handles::Registry;
use crate::status::{
    CUDAIPC_END_OF_STREAM, CUDAIPC_ERROR_INVALID_ARGUMENT, CUDAIPC_OK, Failure, Result,
    cudaipc_status, guard,
};
use crate::types::{
    channel_name, cudaipc_subscriber_options, enum_value, read_sized, timeout, write_out,
};

/// A subscriber: the consumer end of a channel (what `rscudaipcsrc` is to a
/// pipeline). Opaque; made by `cudaipc_subscriber_open`, freed by
/// `cudaipc_subscriber_free`.
pub struct cudaipc_subscriber {
    _opaque: (),
}

pub(crate) struct Entry {
    /// Locked while a call reads it (`next_frame` for as long as it waits).
    subscriber: Mutex<Subscriber>,
    /// Closes it without that lock, from any thread.
    closer: Closer,
    is_cuda: bool,
    /// `frames_missed` as of the last `next_frame`, read without the lock.
    missed: AtomicU64,
}

pub(crate) static SUBSCRIBERS: Registry<Entry, cudaipc_subscriber> = Registry::new("subscriber", 3);

/// Fills `options` with the defaults (those of `rscudaipcsrc`), its
/// `struct_size` included.
///
/// # Safety
/// A non-NULL `options` points to a writable `cudaipc_subscriber_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_subscriber_options_init(
    options: *mut cudaipc_subscriber_options,
) -> cudaipc_status {
    guard("cudaipc_subscriber_options_init", || {
        let value = cudaipc_subscriber_options {
            struct_size: size_of::<cudaipc_subscriber_options>() as u32,
            frames: 0,
            hold: -1,
            ipc_mode: 0,
            timeout_ms: SubscriberOptions::default()
                .timeout
                .map_or(-1, |t| t.as_millis() as i64),
            device: -1,
            reserved: 0,
        };
        // SAFETY: the caller's contract.
        unsafe { write_out(options, value, "options") }?;
        Ok(CUDAIPC_OK)
    })
}

fn rust_options(c: &cudaipc_subscriber_options) -> Result<SubscriberOptions> {
    Ok(SubscriberOptions {
        timeout: timeout(c.timeout_ms),
        frames: match enum_value(c.frames, 3, "options.frames")? {
            0 => Frames::Auto,
            1 => Frames::Every,
            _ => Frames::Latest,
        },
        hold: match c.hold {
            -1 => None,
            // Above the most a ring can hold: the Rust API refuses it.
            hold => Some(u32::try_from(hold).map_err(|_| {
                Failure::new(
                    CUDAIPC_ERROR_INVALID_ARGUMENT,
                    crate::messages::hold_out_of_range(&hold.to_string()),
                )
            })?),
        },
        ipc_mode: match enum_value(c.ipc_mode, 3, "options.ipc_mode")? {
            0 => None,
            1 => Some(IpcMode::Legacy),
            _ => Some(IpcMode::Fd),
        },
        device: (c.device >= 0).then_some(c.device),
        ..SubscriberOptions::default()
    })
}

/// Attaches to `channel`, waiting up to `options->timeout_ms` for its
/// producer; the subscriber in `*out`. `options` NULL: the defaults.
/// `CUDAIPC_ERROR_NO_PRODUCER` if none appeared in time (the message lists
/// the channels that have one); `CUDAIPC_ERROR_INVALID_ARGUMENT` for a
/// `hold` outside -1 and 0 to 62.
///
/// # Safety
/// `channel` is NULL or a NUL-terminated string; `options` NULL or a
/// readable `cudaipc_subscriber_options` (its `struct_size` checked first);
/// `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_subscriber_open(
    channel: *const c_char,
    options: *const cudaipc_subscriber_options,
    out: *mut *mut cudaipc_subscriber,
) -> cudaipc_status {
    guard("cudaipc_subscriber_open", || {
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        // SAFETY: the caller's contract.
        let channel = unsafe { channel_name(channel) }?;
        let options = if options.is_null() {
            SubscriberOptions::default()
        } else {
            // SAFETY: the caller's contract.
            rust_options(&unsafe { read_sized(options, "options") }?)?
        };
        let subscriber = Subscriber::attach(channel, options)?;
        let handle = SUBSCRIBERS.insert(Entry {
            closer: subscriber.closer(),
            is_cuda: subscriber.is_cuda(),
            missed: AtomicU64::new(0),
            subscriber: Mutex::new(subscriber),
        });
        // SAFETY: checked not NULL above; the caller's contract.
        unsafe { out.write_unaligned(handle) };
        Ok(CUDAIPC_OK)
    })
}

/// Waits up to `timeout_ms` (negative: as long as it takes) for the next
/// frame; the frame in `*frame`, to give back with `cudaipc_frame_release`.
/// `CUDAIPC_END_OF_STREAM` (and `*frame` NULL) at the end of the stream,
/// and again at once, without waiting, at every later call until the
/// producer starts a new stream (publishes a frame again, as a pipeline
/// restarted by a flushing seek does): that call returns the new stream's
/// first frame. `CUDAIPC_ERROR_TIMEOUT` when none came in time;
/// `CUDAIPC_ERROR_PRODUCER_GONE` once the producer closed without an end
/// of stream or died (its close after an end of stream is
/// `CUDAIPC_END_OF_STREAM`); `CUDAIPC_ERROR_CLOSED` once the subscriber was
/// closed, at once if that happens while this waits. One thread at a time
/// reads a subscriber: a second call waits for the first.
///
/// # Safety
/// `frame` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_subscriber_next_frame(
    subscriber: *mut cudaipc_subscriber,
    timeout_ms: i64,
    frame: *mut *mut cudaipc_frame,
) -> cudaipc_status {
    guard("cudaipc_subscriber_next_frame", || {
        let entry = SUBSCRIBERS.get(subscriber)?;
        if frame.is_null() {
            return Err(Failure::null("frame"));
        }
        // SAFETY: not NULL; the caller's contract. Cleared first, so that
        // no error leaves a stale handle there.
        unsafe { frame.write_unaligned(std::ptr::null_mut()) };
        let mut subscriber = entry.subscriber.lock().unwrap_or_else(|e| e.into_inner());
        let next = subscriber.next_frame(timeout(timeout_ms));
        entry
            .missed
            .store(subscriber.frames_missed(), Ordering::Relaxed);
        drop(subscriber);
        match next? {
            Some(next) => {
                let handle = FRAMES.insert(crate::frame::Entry::new(next));
                // SAFETY: as above.
                unsafe { frame.write_unaligned(handle) };
                Ok(CUDAIPC_OK)
            }
            None => Ok(CUDAIPC_END_OF_STREAM),
        }
    })
}

/// `*missed`: frames this subscriber missed so far (fell behind a live
/// producer, or a dropping producer overwrote them), as of its last
/// `next_frame`.
///
/// # Safety
/// `missed` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_subscriber_frames_missed(
    subscriber: *mut cudaipc_subscriber,
    missed: *mut u64,
) -> cudaipc_status {
    guard("cudaipc_subscriber_frames_missed", || {
        let entry = SUBSCRIBERS.get(subscriber)?;
        let value = entry.missed.load(Ordering::Relaxed);
        // SAFETY: the caller's contract.
        unsafe { write_out(missed, value, "missed") }?;
        Ok(CUDAIPC_OK)
    })
}

/// `*is_cuda`: 1 if the channel's frames are in CUDA device memory, 0 if
/// in host memory.
///
/// # Safety
/// `is_cuda` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_subscriber_is_cuda(
    subscriber: *mut cudaipc_subscriber,
    is_cuda: *mut i32,
) -> cudaipc_status {
    guard("cudaipc_subscriber_is_cuda", || {
        let entry = SUBSCRIBERS.get(subscriber)?;
        // SAFETY: the caller's contract.
        unsafe { write_out(is_cuda, i32::from(entry.is_cuda), "is_cuda") }?;
        Ok(CUDAIPC_OK)
    })
}

/// Ends the waits of `next_frame`, from any thread: a call blocked in it
/// returns `CUDAIPC_ERROR_CLOSED` at once, as every later one does. Frames
/// handed out stay valid until released. The handle stays valid until
/// `cudaipc_subscriber_free`. Idempotent.
#[unsafe(no_mangle)]
pub extern "C" fn cudaipc_subscriber_close(subscriber: *mut cudaipc_subscriber) -> cudaipc_status {
    guard("cudaipc_subscriber_close", || {
        SUBSCRIBERS.get(subscriber)?.closer.close();
        Ok(CUDAIPC_OK)
    })
}

/// Closes the subscriber (as `cudaipc_subscriber_close`), detaches from the
/// channel once no call is in it, and frees the handle: any later use of it
/// is `CUDAIPC_ERROR_INVALID_HANDLE`. Frames handed out stay valid until
/// released.
#[unsafe(no_mangle)]
pub extern "C" fn cudaipc_subscriber_free(subscriber: *mut cudaipc_subscriber) -> cudaipc_status {
    guard("cudaipc_subscriber_free", || {
        SUBSCRIBERS.remove(subscriber)?.closer.close();
        Ok(CUDAIPC_OK)
    })
}
