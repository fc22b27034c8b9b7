// SPDX-License-Identifier: MPL-2.0

//! The producer end: `cudaipc_publisher_*`.

use std::ffi::{c_char, c_void};

use api::{AppData, IpcMode, Published, Publisher, PublisherOptions, Transport, WhenFull};

use crate::handles::Registry;
use crate::loan::{LOANS, Loan, cudaipc_loan};
use crate::status::{CUDAIPC_DROPPED, CUDAIPC_OK, Failure, Result, cudaipc_status, guard};
use crate::types::{
    PUBLISHER_OPTIONS_V1_SIZE, app_bytes, app_json, channel_name, cudaipc_layout,
    cudaipc_publisher_options, enum_value, pts, read_versioned, write_out,
};

/// A publisher: the producer end of a channel (what `rscudaipcsink` is to a
/// pipeline). Opaque; made by `cudaipc_publisher_create`, freed by
/// `cudaipc_publisher_free`.
pub struct cudaipc_publisher {
    _opaque: (),
}

pub(crate) static PUBLISHERS: Registry<Publisher, cudaipc_publisher> =
    Registry::new("publisher", 1);

/// The C defaults: those of the Rust API (and `rscudaipcsink`).
fn default_options() -> cudaipc_publisher_options {
    let defaults = PublisherOptions::default();
    cudaipc_publisher_options {
        struct_size: size_of::<cudaipc_publisher_options>() as u32,
        transport: 0,
        slots: 0,
        permissions: defaults.permissions,
        when_full: 0,
        wait_for_consumers: 0,
        ipc_mode: 0,
        device: defaults.device,
        live: 0,
        frame_data_bound: defaults.frame_data_bound,
    }
}

/// Fills `options` with the defaults (those of `rscudaipcsink`), its
/// `struct_size` included.
///
/// # Safety
/// A non-NULL `options` points to a writable `cudaipc_publisher_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_publisher_options_init(
    options: *mut cudaipc_publisher_options,
) -> cudaipc_status {
    guard("cudaipc_publisher_options_init", || {
        // SAFETY: the caller's contract.
        unsafe { write_out(options, default_options(), "options") }?;
        Ok(CUDAIPC_OK)
    })
}

/// Fills `layout` with GStreamer's default layout of a `width` x `height`
/// frame of `format` (a `cudaipc_format`): its strides, offsets and
/// `frame_size`.
///
/// # Safety
/// A non-NULL `layout` points to a writable `cudaipc_layout`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_layout_init(
    format: u32,
    width: u32,
    height: u32,
    layout: *mut cudaipc_layout,
) -> cudaipc_status {
    guard("cudaipc_layout_init", || {
        let rust = api::VideoLayout::new(crate::types::format_from_c(format)?, width, height)?;
        // SAFETY: the caller's contract.
        unsafe { write_out(layout, cudaipc_layout::from_rust(&rust), "layout") }?;
        Ok(CUDAIPC_OK)
    })
}

fn rust_options(c: &cudaipc_publisher_options) -> Result<PublisherOptions> {
    Ok(PublisherOptions {
        transport: match enum_value(c.transport, 3, "options.transport")? {
            0 => Transport::Auto,
            1 => Transport::Cuda,
            _ => Transport::Host,
        },
        ipc_mode: match enum_value(c.ipc_mode, 3, "options.ipc_mode")? {
            2 => IpcMode::Fd,
            _ => IpcMode::Legacy,
        },
        slots: c.slots as usize,
        when_full: match enum_value(c.when_full, 2, "options.when_full")? {
            0 => WhenFull::Block,
            _ => WhenFull::Drop,
        },
        permissions: c.permissions,
        wait_for_consumers: c.wait_for_consumers,
        device: c.device,
        live: c.live != 0,
        frame_data_bound: c.frame_data_bound,
        ..PublisherOptions::default()
    })
}

/// Creates `channel` for frames of `layout` and announces their caps; the
/// publisher in `*out`. `options` NULL: the defaults. Fails if the name is
/// taken by a live producer or not usable, if an option is outside its
/// range (`CUDAIPC_ERROR_INVALID_ARGUMENT`, naming the field and the range),
/// if the cuda transport is asked for without a usable device, or if the
/// slots cannot be allocated.
///
/// # Safety
/// `channel` is NULL or a NUL-terminated string; `layout` NULL or a
/// readable `cudaipc_layout`; `options` NULL or a readable
/// `cudaipc_publisher_options` (its `struct_size` checked first: this
/// version's, or 36, the one before `frame_data_bound`); `out` NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_publisher_create(
    channel: *const c_char,
    layout: *const cudaipc_layout,
    options: *const cudaipc_publisher_options,
    out: *mut *mut cudaipc_publisher,
) -> cudaipc_status {
    guard("cudaipc_publisher_create", || {
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        // SAFETY: the caller's contract.
        let channel = unsafe { channel_name(channel) }?;
        if layout.is_null() {
            return Err(Failure::null("layout"));
        }
        // SAFETY: not NULL; the caller's contract.
        let layout = unsafe { layout.read_unaligned() }.to_rust()?;
        let options = if options.is_null() {
            PublisherOptions::default()
        } else {
            // SAFETY: the caller's contract.
            rust_options(&unsafe {
                read_versioned(
                    options,
                    PUBLISHER_OPTIONS_V1_SIZE,
                    default_options(),
                    "options",
                )
            }?)?
        };
        let publisher = Publisher::create(channel, layout, options)?;
        let handle = PUBLISHERS.insert(publisher);
        // SAFETY: checked not NULL above; the caller's contract.
        unsafe { out.write_unaligned(handle) };
        Ok(CUDAIPC_OK)
    })
}

/// Copies `size` bytes at `data` (exactly the layout's `frame_size`) into a
/// free slot and publishes them with `pts_ns` (nanoseconds; negative: no
/// PTS). `CUDAIPC_DROPPED` where `when_full` is DROP and every slot is
/// held; with BLOCK it waits for a slot. `CUDAIPC_ERROR_CLOSED` once the
/// publisher is closed, at once if that happens while it waits.
///
/// # Safety
/// `data` is NULL or readable for `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_publisher_publish(
    publisher: *mut cudaipc_publisher,
    data: *const c_void,
    size: usize,
    pts_ns: i64,
) -> cudaipc_status {
    guard("cudaipc_publisher_publish", || {
        // SAFETY: the caller's contract.
        unsafe { publish(publisher, data, size, pts_ns, || Ok(None)) }
    })
}

/// `cudaipc_publisher_publish`, with `len` bytes at `app_data` travelling
/// with the frame (copied; `CUDAIPC_FRAME_DATA_BYTES` to
/// `cudaipc_frame_get_data`, a `CudaIpcFrameData` meta's `bytes` after
/// `rscudaipcsrc`, `bytes` to Python's `frame.data`). `app_data` may be
/// NULL where `len` is 0. More than the channel's frames carry
/// (`options.frame_data_bound` less 16 bytes) is
/// `CUDAIPC_ERROR_INVALID_ARGUMENT`, its message naming the bound, and
/// nothing is published.
///
/// # Safety
/// `data` is NULL or readable for `size` bytes; `app_data` NULL or
/// readable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_publisher_publish_with_data(
    publisher: *mut cudaipc_publisher,
    data: *const c_void,
    size: usize,
    pts_ns: i64,
    app_data: *const c_void,
    len: usize,
) -> cudaipc_status {
    guard("cudaipc_publisher_publish_with_data", || {
        // SAFETY: the caller's contract.
        let app = || unsafe { app_bytes(app_data, len, "app_data") }.map(Some);
        // SAFETY: the caller's contract.
        unsafe { publish(publisher, data, size, pts_ns, app) }
    })
}

/// `cudaipc_publisher_publish`, with the NUL-terminated UTF-8 JSON text
/// `json` travelling with the frame (copied, not parsed;
/// `CUDAIPC_FRAME_DATA_JSON` to `cudaipc_frame_get_data`, a
/// `CudaIpcFrameData` meta's `json` after `rscudaipcsrc`, the dict
/// `json.loads` makes of it to Python's `frame.data`). Text that is not
/// UTF-8, or longer than the channel's frames carry
/// (`options.frame_data_bound` less 16 bytes), is
/// `CUDAIPC_ERROR_INVALID_ARGUMENT`, and nothing is published.
///
/// # Safety
/// `data` is NULL or readable for `size` bytes; `json` NULL or a
/// NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_publisher_publish_with_json(
    publisher: *mut cudaipc_publisher,
    data: *const c_void,
    size: usize,
    pts_ns: i64,
    json: *const c_char,
) -> cudaipc_status {
    guard("cudaipc_publisher_publish_with_json", || {
        // SAFETY: the caller's contract.
        let app = || unsafe { app_json(json) }.map(Some);
        // SAFETY: the caller's contract.
        unsafe { publish(publisher, data, size, pts_ns, app) }
    })
}

/// The publish calls' body: the frame's `size` bytes at `data` checked,
/// then the application's data `app` makes, then the copy.
///
/// # Safety
/// `data` is NULL or readable for `size` bytes.
unsafe fn publish(
    publisher: *mut cudaipc_publisher,
    data: *const c_void,
    size: usize,
    pts_ns: i64,
    app: impl FnOnce() -> Result<Option<AppData>>,
) -> Result<cudaipc_status> {
    let publisher = PUBLISHERS.get(publisher)?;
    if data.is_null() {
        return Err(Failure::null("data"));
    }
    // Before a slice is made of them: a size above `isize::MAX` may not
    // be one, and only a frame's is taken anyway.
    let expected = publisher.layout().frame_size();
    if size != expected {
        return Err(api::Error::FrameSize {
            expected,
            given: size,
        }
        .into());
    }
    // SAFETY: not NULL; the caller's contract says `size` bytes are
    // readable there, and `size` is a frame's (at most `isize::MAX`).
    let frame = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) };
    let published = match app()? {
        Some(app) => publisher.publish_with_data(frame, pts(pts_ns), &app)?,
        None => publisher.publish(frame, pts(pts_ns))?,
    };
    match published {
        Published::Sent => Ok(CUDAIPC_OK),
        Published::Dropped => Ok(CUDAIPC_DROPPED),
    }
}

/// Lends a free slot to write the next frame into in place (no copy); the
/// loan in `*loan`. With `when_full` BLOCK it waits for a slot; with DROP
/// that is `CUDAIPC_ERROR_NO_FREE_SLOT`.
///
/// # Safety
/// `loan` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_publisher_loan(
    publisher: *mut cudaipc_publisher,
    loan: *mut *mut cudaipc_loan,
) -> cudaipc_status {
    guard("cudaipc_publisher_loan", || {
        let publisher = PUBLISHERS.get(publisher)?;
        if loan.is_null() {
            return Err(Failure::null("loan"));
        }
        let lent = publisher.loan()?;
        let handle = LOANS.insert(Loan::new(lent));
        // SAFETY: checked not NULL above; the caller's contract.
        unsafe { loan.write_unaligned(handle) };
        Ok(CUDAIPC_OK)
    })
}

/// The layout every frame is published in.
///
/// # Safety
/// `layout` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_publisher_get_layout(
    publisher: *mut cudaipc_publisher,
    layout: *mut cudaipc_layout,
) -> cudaipc_status {
    guard("cudaipc_publisher_get_layout", || {
        let publisher = PUBLISHERS.get(publisher)?;
        let value = cudaipc_layout::from_rust(publisher.layout());
        // SAFETY: the caller's contract.
        unsafe { write_out(layout, value, "layout") }?;
        Ok(CUDAIPC_OK)
    })
}

/// `*is_cuda`: 1 if the slots are CUDA device memory, 0 if host memory.
///
/// # Safety
/// `is_cuda` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_publisher_is_cuda(
    publisher: *mut cudaipc_publisher,
    is_cuda: *mut i32,
) -> cudaipc_status {
    guard("cudaipc_publisher_is_cuda", || {
        let publisher = PUBLISHERS.get(publisher)?;
        // SAFETY: the caller's contract.
        unsafe { write_out(is_cuda, i32::from(publisher.is_cuda()), "is_cuda") }?;
        Ok(CUDAIPC_OK)
    })
}

/// `*count`: the consumers attached now.
///
/// # Safety
/// `count` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_publisher_consumer_count(
    publisher: *mut cudaipc_publisher,
    count: *mut u32,
) -> cudaipc_status {
    guard("cudaipc_publisher_consumer_count", || {
        let publisher = PUBLISHERS.get(publisher)?;
        // SAFETY: the caller's contract.
        unsafe { write_out(count, publisher.consumer_count(), "count") }?;
        Ok(CUDAIPC_OK)
    })
}

/// Ends the stream: consumers get an end of stream after the frames
/// published so far.
#[unsafe(no_mangle)]
pub extern "C" fn cudaipc_publisher_eos(publisher: *mut cudaipc_publisher) -> cudaipc_status {
    guard("cudaipc_publisher_eos", || {
        PUBLISHERS.get(publisher)?.eos();
        Ok(CUDAIPC_OK)
    })
}

/// Closes the channel, from any thread: calls blocked in `publish` or
/// `loan` return `CUDAIPC_ERROR_CLOSED` at once, as every later one does.
/// After an EOS it first gives consumers up to 5 s to take what was
/// published. The handle stays valid until `cudaipc_publisher_free`.
/// Idempotent.
#[unsafe(no_mangle)]
pub extern "C" fn cudaipc_publisher_close(publisher: *mut cudaipc_publisher) -> cudaipc_status {
    guard("cudaipc_publisher_close", || {
        PUBLISHERS.get(publisher)?.close();
        Ok(CUDAIPC_OK)
    })
}

/// Closes the publisher (as `cudaipc_publisher_close`) and frees the
/// handle: any later use of it is `CUDAIPC_ERROR_INVALID_HANDLE`. A call
/// still blocked in it on another thread returns `CUDAIPC_ERROR_CLOSED`;
/// loans still out stay valid until published or discarded.
#[unsafe(no_mangle)]
pub extern "C" fn cudaipc_publisher_free(publisher: *mut cudaipc_publisher) -> cudaipc_status {
    guard("cudaipc_publisher_free", || {
        PUBLISHERS.remove(publisher)?.close();
        Ok(CUDAIPC_OK)
    })
}
