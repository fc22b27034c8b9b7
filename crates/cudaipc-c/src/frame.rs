// SPDX-License-Identifier: MPL-2.0

//! A frame read by a subscriber: `cudaipc_frame_*`.

use std::ffi::c_void;

use api::{AppData, Frame};

use crate::handles::Registry;
use crate::status::{CUDAIPC_OK, Failure, cudaipc_status, guard};
use crate::types::{
    check_out, cudaipc_frame_data_kind, cudaipc_frame_info, cudaipc_layout, write_out,
};

/// A frame handed out by `cudaipc_subscriber_next_frame`. It holds its
/// slot (the producer does not write it again) until
/// `cudaipc_frame_release`. Opaque.
pub struct cudaipc_frame {
    _opaque: (),
}

/// A frame; shared (`&`) by every call on it, none of which mutates it.
/// Its data is taken out of the slot when it is handed out: the pointer
/// `cudaipc_frame_get_data` gives stays valid until the release.
pub(crate) struct Entry(Frame, Option<Data>);

/// A frame's data as C reads it.
struct Data {
    kind: cudaipc_frame_data_kind,
    /// The bytes; JSON text with a NUL after it, which `len` leaves out.
    bytes: Box<[u8]>,
    len: usize,
}

impl Entry {
    pub(crate) fn new(frame: Frame) -> Self {
        let data = frame.data().map(|data| match data {
            AppData::Bytes(bytes) => Data {
                kind: cudaipc_frame_data_kind::CUDAIPC_FRAME_DATA_BYTES,
                len: bytes.len(),
                bytes: bytes.into_boxed_slice(),
            },
            AppData::Json(text) => {
                let len = text.len();
                let mut bytes = text.into_bytes();
                bytes.push(0);
                Data {
                    kind: cudaipc_frame_data_kind::CUDAIPC_FRAME_DATA_JSON,
                    bytes: bytes.into_boxed_slice(),
                    len,
                }
            }
        });
        Self(frame, data)
    }
}

pub(crate) static FRAMES: Registry<Entry, cudaipc_frame> = Registry::new("frame", 4);

/// What the frame is and where; see `cudaipc_frame_info`. Set
/// `info->struct_size` first.
///
/// # Safety
/// `info` is NULL or a writable `cudaipc_frame_info` whose `struct_size` is
/// readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_frame_get_info(
    frame: *mut cudaipc_frame,
    info: *mut cudaipc_frame_info,
) -> cudaipc_status {
    guard("cudaipc_frame_get_info", || {
        // SAFETY: the caller's contract.
        unsafe { check_out(info, "info") }?;
        let entry = FRAMES.get(frame)?;
        let frame = &entry.0;
        let value = cudaipc_frame_info {
            struct_size: size_of::<cudaipc_frame_info>() as u32,
            is_cuda: u32::from(frame.device_ptr().is_some()),
            layout: cudaipc_layout::from_rust(frame.layout()),
            sequence: frame.seq(),
            pts_ns: frame
                .pts()
                .map_or(-1, |t| i64::try_from(t.as_nanos()).unwrap_or(i64::MAX)),
            missed_before: frame.missed_before(),
            host_ptr: frame.host_bytes().map_or(std::ptr::null(), <[u8]>::as_ptr),
            device_ptr: frame.device_ptr().unwrap_or(0),
            cuda_stream: frame.cuda_stream().unwrap_or(std::ptr::null_mut()),
            device_ordinal: frame.device_ordinal().unwrap_or(-1),
            reserved: 0,
        };
        // SAFETY: checked above (not NULL, its size).
        unsafe { info.write_unaligned(value) };
        Ok(CUDAIPC_OK)
    })
}

/// The data published with the frame: `*kind` a `cudaipc_frame_data_kind`,
/// `*data` and `*len` its bytes. `CUDAIPC_FRAME_DATA_NONE`: none (`*data`
/// NULL, `*len` 0). `CUDAIPC_FRAME_DATA_BYTES`: the bytes a producer set
/// (`cudaipc_loan_set_data`, Python's `data=b"..."`, a GStreamer
/// producer's `CudaIpcFrameData` field `bytes`). `CUDAIPC_FRAME_DATA_JSON`:
/// UTF-8 JSON text (`cudaipc_loan_set_json`, a Python dict, the meta's
/// field `json`), NUL-terminated after its `*len` bytes. The text comes
/// from another process and is not parsed here. `*data` is valid until
/// the frame is released; the pointer stays the same for each call on the
/// frame.
///
/// # Safety
/// `data`, `len` and `kind` are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_frame_get_data(
    frame: *mut cudaipc_frame,
    data: *mut *const c_void,
    len: *mut usize,
    kind: *mut u32,
) -> cudaipc_status {
    guard("cudaipc_frame_get_data", || {
        let entry = FRAMES.get(frame)?;
        for (null, what) in [
            (data.is_null(), "data"),
            (len.is_null(), "len"),
            (kind.is_null(), "kind"),
        ] {
            if null {
                return Err(Failure::null(what));
            }
        }
        let (pointer, bytes, which) = match &entry.1 {
            Some(found) => (found.bytes.as_ptr().cast::<c_void>(), found.len, found.kind),
            None => (
                std::ptr::null(),
                0,
                cudaipc_frame_data_kind::CUDAIPC_FRAME_DATA_NONE,
            ),
        };
        // SAFETY: checked not NULL above; the caller's contract. The bytes
        // live in the entry, which the registry keeps until the release.
        unsafe {
            write_out(data, pointer, "data")?;
            write_out(len, bytes, "len")?;
            write_out(kind, which as u32, "kind")?;
        }
        Ok(CUDAIPC_OK)
    })
}

/// Copies the frame's bytes into `dst` (`size` must be the layout's
/// `frame_size`): from the shared memory on the host transport, or
/// downloaded (and waited for) on the cuda transport.
///
/// # Safety
/// `dst` is NULL or writable for `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_frame_copy_to_host(
    frame: *mut cudaipc_frame,
    dst: *mut c_void,
    size: usize,
) -> cudaipc_status {
    guard("cudaipc_frame_copy_to_host", || {
        let entry = FRAMES.get(frame)?;
        if dst.is_null() {
            return Err(Failure::null("dst"));
        }
        // Before a slice is made of them: a size above `isize::MAX` may not
        // be one, and only a frame's is taken anyway.
        let expected = entry.0.layout().frame_size();
        if size != expected {
            return Err(api::Error::FrameSize {
                expected,
                given: size,
            }
            .into());
        }
        // SAFETY: not NULL; the caller's contract says `size` bytes are
        // writable there, and nothing else of ours aliases them; `size` is
        // a frame's (at most `isize::MAX`).
        let dst = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), size) };
        entry.0.copy_to_host(dst)?;
        Ok(CUDAIPC_OK)
    })
}

/// Makes `stream` wait, on the GPU, for the producer's writes of the frame:
/// work queued on `stream` afterwards may read it. No host
/// synchronisation. Nothing to do on the host transport (its frames are
/// written when handed out). DLPack's `__dlpack__(stream=)` does the same.
///
/// # Safety
/// `stream` is NULL (the legacy default stream) or a live `CUstream` of a
/// context of the frame's device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_frame_stream_wait(
    frame: *mut cudaipc_frame,
    stream: *mut c_void,
) -> cudaipc_status {
    guard("cudaipc_frame_stream_wait", || {
        let entry = FRAMES.get(frame)?;
        // SAFETY: the caller's contract.
        unsafe { entry.0.wait_on_stream(stream) }?;
        Ok(CUDAIPC_OK)
    })
}

/// Orders the frame's release after the work queued on `stream` so far:
/// the slot goes back to the producer (at `cudaipc_frame_release`) only
/// once that work has run, on the GPU, never waited for on the host. Call
/// it for each stream that read the frame, before releasing it. Nothing to
/// do on the host transport.
///
/// # Safety
/// As for `cudaipc_frame_stream_wait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_frame_release_after_stream(
    frame: *mut cudaipc_frame,
    stream: *mut c_void,
) -> cudaipc_status {
    guard("cudaipc_frame_release_after_stream", || {
        let entry = FRAMES.get(frame)?;
        // SAFETY: the caller's contract.
        unsafe { entry.0.release_after_stream(stream) }?;
        Ok(CUDAIPC_OK)
    })
}

/// Gives the frame's slot back to the producer (after the streams given to
/// `cudaipc_frame_release_after_stream`, on the GPU); the handle ends here
/// and pointers from its info are no longer valid.
#[unsafe(no_mangle)]
pub extern "C" fn cudaipc_frame_release(frame: *mut cudaipc_frame) -> cudaipc_status {
    guard("cudaipc_frame_release", || {
        drop(FRAMES.remove(frame)?);
        Ok(CUDAIPC_OK)
    })
}
