// SPDX-License-Identifier: MPL-2.0

//! GStreamer 1.24+'s stream-ordered `GstCudaMemory`, looked up at run time.
//!
//! Since 1.24 a `GstCudaMemory` may carry a `GstCudaStream`: the stream its
//! writer queued work on. `GST_CUDA_MEMORY_TRANSFER_NEED_SYNC` on the memory
//! says that work may still be running. What nvcodec's elements do with a
//! memory they read (`cudaconvertscale.c`, `gstcudautils.cpp`'s buffer copy,
//! `gstnvencoder.cpp`):
//! - same stream as their output: nothing, the stream orders it;
//! - their output has no stream: they run on the input's stream, then
//!   synchronise it on the host;
//! - another stream: `gst_cuda_memory_sync`, a host wait on the input's
//!   stream, only if `NEED_SYNC` is set (and it clears the flag);
//! - a system-memory map (`cudadownload` without CUDA downstream) copies on the
//!   memory's stream and synchronises.
//!
//! So memory without a stream must be complete when pushed, and memory with a
//! stream and `NEED_SYNC` may be pushed with its work still queued on that
//! stream. A reader drops its input as soon as its own work is *queued*: a
//! writer that reuses the memory must order its next write after the readers,
//! which nvcodec itself does not do across streams; see
//! [`StreamOrdering::wait_for_context_work`](super::StreamOrdering::wait_for_context_work).
//!
//! On 1.22 none of these symbols exist: [`upstream_order`] answers
//! [`UpstreamOrder::Unordered`], [`CudaStream::new`] and
//! [`wrap_device_memory`](super::wrap_device_memory) fail, and the elements
//! keep their 1.22 behaviour.
//!
//! Here: the 1.24 functions, `GstCudaStream`, and what a memory's stream
//! says; `ordering.rs` orders our streams against GStreamer's, `wrap.rs`
//! wraps device memory as `GstCudaMemory`.

use std::ffi::c_void;
use std::ptr::NonNull;

use cudarc::driver::sys;
use gst::glib;
use gst::glib::translate::ToGlibPtr;

use super::{CAT, CudaContext, LIBRARY, library};
use cudaipc_transport::cuda::Device;

/// `GST_CUDA_MEMORY_TRANSFER_NEED_SYNC` (`GST_MEMORY_FLAG_LAST << 2`, 1.24's
/// `gstcudamemory.h`): work on the memory's stream may still be pending.
pub const TRANSFER_NEED_SYNC: u32 = gst::ffi::GST_MEMORY_FLAG_LAST << 2;

type MemoryGetStream = unsafe extern "C" fn(*mut gst::ffi::GstMemory) -> *mut c_void;
type StreamGetHandle = unsafe extern "C" fn(*mut c_void) -> sys::CUstream;
type StreamNew = unsafe extern "C" fn(*mut gst::ffi::GstObject) -> *mut c_void;
type StreamRef = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type StreamUnref = unsafe extern "C" fn(*mut c_void);
type MemorySync = unsafe extern "C" fn(*mut gst::ffi::GstMemory);
type AllocWrapped = unsafe extern "C" fn(
    *mut gst::ffi::GstAllocator,
    *mut gst::ffi::GstObject,
    *mut c_void,
    *const gst_video::ffi::GstVideoInfo,
    sys::CUdeviceptr,
    glib::ffi::gpointer,
    glib::ffi::GDestroyNotify,
) -> *mut gst::ffi::GstMemory;

/// The functions GStreamer 1.24 added to `libgstcuda-1.0`.
pub(super) struct Api1_24 {
    memory_get_stream: MemoryGetStream,
    memory_sync: MemorySync,
    stream_new: StreamNew,
    stream_get_handle: StreamGetHandle,
    stream_ref: StreamRef,
    stream_unref: StreamUnref,
    pub(super) alloc_wrapped: AllocWrapped,
}

impl Api1_24 {
    /// All of them, or `None` (GStreamer 1.22).
    pub(super) fn load(library: &libloading::Library) -> Option<Api1_24> {
        macro_rules! symbol {
            ($name:literal) => {
                // SAFETY: the types above are the C prototypes of these
                // functions in gst/cuda 1.24 and later (gstcudamemory.h,
                // gstcudastream.h); `library` outlives the copied pointers
                // (both live in the same `Library`).
                match unsafe { library.get(concat!($name, "\0").as_bytes()) } {
                    Ok(f) => *f,
                    Err(_) => {
                        gst::info!(CAT, "libgstcuda-1.0 has no {} (GStreamer < 1.24)", $name);
                        return None;
                    }
                }
            };
        }
        Some(Api1_24 {
            memory_get_stream: symbol!("gst_cuda_memory_get_stream"),
            memory_sync: symbol!("gst_cuda_memory_sync"),
            stream_new: symbol!("gst_cuda_stream_new"),
            stream_get_handle: symbol!("gst_cuda_stream_get_handle"),
            stream_ref: symbol!("gst_cuda_stream_ref"),
            stream_unref: symbol!("gst_cuda_stream_unref"),
            alloc_wrapped: symbol!("gst_cuda_allocator_alloc_wrapped"),
        })
    }
}

/// The 1.24 functions, when the library has them and a driver is usable.
pub(super) fn api() -> Option<&'static Api1_24> {
    library()?.v1_24.as_ref()
}

/// The head of `GstCudaStream` (public fields, 1.24's `gstcudastream.h`).
#[repr(C)]
pub(super) struct CudaStreamHead {
    parent: gst::ffi::GstMiniObject,
    pub(super) context: *mut gst::ffi::GstObject,
}

/// A `GstCudaStream`, held by reference: a CUDA stream that GStreamer's CUDA
/// elements know (GStreamer 1.24+).
pub struct CudaStream {
    pub(super) raw: NonNull<c_void>,
    api: &'static Api1_24,
}

// SAFETY: a GstCudaStream is a refcounted mini object (atomic refcount) whose
// fields never change after creation; CUDA streams may be used from any
// thread with their context current.
unsafe impl Send for CudaStream {}
// SAFETY: see above; no method mutates it.
unsafe impl Sync for CudaStream {}

impl CudaStream {
    /// A new stream of `context` (`gst_cuda_stream_new`: a blocking stream,
    /// i.e. ordered with the context's legacy default stream). GStreamer has
    /// no call that wraps an existing `CUstream`, so an element that wants
    /// GStreamer to see its work creates one of these and orders it after its
    /// own stream ([`StreamOrdering::order_after`](super::StreamOrdering::order_after)). `None` before 1.24.
    pub fn new(context: &CudaContext) -> Option<CudaStream> {
        let api = api()?;
        // SAFETY: a valid GstCudaContext; returns a new reference or NULL.
        let raw = unsafe { (api.stream_new)(context.0.to_glib_none().0) };
        let Some(raw) = NonNull::new(raw) else {
            gst::warning!(CAT, "gst_cuda_stream_new failed");
            return None;
        };
        Some(CudaStream { raw, api })
    }

    /// Takes a new reference to a stream that someone else holds.
    ///
    /// # Safety
    /// `raw` is a valid `GstCudaStream` for the duration of the call.
    unsafe fn from_borrowed(api: &'static Api1_24, raw: NonNull<c_void>) -> CudaStream {
        // SAFETY: valid per the caller; returns the same pointer, reffed.
        unsafe { (api.stream_ref)(raw.as_ptr()) };
        CudaStream { raw, api }
    }

    /// The `CUstream` behind it.
    pub fn handle(&self) -> sys::CUstream {
        // SAFETY: a valid GstCudaStream; the handle lives as long as it does.
        unsafe { (self.api.stream_get_handle)(self.raw.as_ptr()) }
    }

    /// Whether the stream belongs to `device`'s primary context, where events
    /// of this plugin can be recorded on it.
    pub(super) fn is_in_primary_context_of(&self, device: &Device) -> bool {
        // SAFETY: GstCudaStream starts with CudaStreamHead; its context is set
        // at creation and held until the stream is freed.
        let context = unsafe { (*(self.raw.as_ptr() as *const CudaStreamHead)).context };
        LIBRARY.as_ref().is_some_and(|lib| {
            // SAFETY: a valid GstCudaContext (see above).
            unsafe { (lib.context_get_handle)(context) == device.raw_context().cast() }
        })
    }
}

impl Clone for CudaStream {
    fn clone(&self) -> Self {
        // SAFETY: we hold a reference, so it is valid.
        unsafe { CudaStream::from_borrowed(self.api, self.raw) }
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        // SAFETY: releases the reference this value owns.
        unsafe { (self.api.stream_unref)(self.raw.as_ptr()) };
    }
}

impl std::fmt::Debug for CudaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CudaStream").field(&self.raw).finish()
    }
}

/// How the content of a memory pushed into an element becomes readable.
#[derive(Debug)]
pub enum UpstreamOrder {
    /// Writes to it may still run on this stream (`NEED_SYNC`): order reads
    /// after it ([`StreamOrdering::wait_for_upstream`](super::StreamOrdering::wait_for_upstream)).
    Pending(CudaStream),
    /// It belongs to this stream and nothing is pending: read it at once. The
    /// writer's next use of the memory is queued on this stream, so order
    /// that after the reads ([`StreamOrdering::release_to_upstream`](super::StreamOrdering::release_to_upstream)).
    Ready(CudaStream),
    /// No stream: system memory, GStreamer 1.22, or memory on the default
    /// stream, whose writers synchronise before pushing. Read it as on 1.22.
    Unordered,
}

/// Raw mini-object flags of `memory` (gstreamer-rs' `MemoryFlags` drops the
/// bits it does not know, such as the CUDA transfer flags).
fn raw_flags(memory: &gst::MemoryRef) -> u32 {
    // SAFETY: a valid memory; reading its flags word.
    unsafe { (*memory.as_ptr()).mini_object.flags }
}

/// Whether `memory` carries `GST_CUDA_MEMORY_TRANSFER_NEED_SYNC`.
pub fn needs_sync(memory: &gst::MemoryRef) -> bool {
    raw_flags(memory) & TRANSFER_NEED_SYNC != 0
}

/// What a reader of `memory` must wait for.
pub fn upstream_order(memory: &gst::MemoryRef) -> UpstreamOrder {
    let Some(api) = api() else {
        return UpstreamOrder::Unordered;
    };
    if !super::is_cuda_memory(memory) {
        return UpstreamOrder::Unordered;
    }
    // SAFETY: a GstCudaMemory; returns its stream (transfer none) or NULL.
    let raw = unsafe { (api.memory_get_stream)(memory.as_mut_ptr()) };
    let Some(raw) = NonNull::new(raw) else {
        return UpstreamOrder::Unordered;
    };
    // SAFETY: the memory holds a reference to its stream while we borrow it.
    let stream = unsafe { CudaStream::from_borrowed(api, raw) };
    if needs_sync(memory) {
        UpstreamOrder::Pending(stream)
    } else {
        UpstreamOrder::Ready(stream)
    }
}

/// `gst_cuda_memory_sync`: waits on the host for `memory`'s pending work and
/// clears `NEED_SYNC`; nothing on 1.22 (where writers already synchronised)
/// or for other memory.
pub fn sync_memory(memory: &gst::MemoryRef) {
    if let Some(api) = api()
        && super::is_cuda_memory(memory)
    {
        // SAFETY: a GstCudaMemory; the call locks the memory itself.
        unsafe { (api.memory_sync)(memory.as_mut_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ApiLevel, api_level, library_loaded};
    use super::*;

    #[test]
    fn the_1_24_api_is_found_exactly_on_gstreamer_1_24_and_later() {
        gst::init().unwrap();
        let level = api_level();
        let (major, minor, ..) = gst::version();
        eprintln!("GStreamer {major}.{minor}: libgstcuda API level {level:?}");
        if !library_loaded() {
            assert_eq!(level, ApiLevel::Absent);
            return;
        }
        // libgstcuda comes with the same GStreamer as libgstreamer.
        let expected = if (major, minor) >= (1, 24) {
            ApiLevel::V1_24
        } else {
            ApiLevel::V1_22
        };
        assert_eq!(level, expected);
        if let Ok(expect) = std::env::var("CUDAIPC_EXPECT_GST") {
            assert_eq!(format!("{major}.{minor}"), expect);
        }
    }

    #[test]
    fn the_need_sync_flag_has_the_value_of_the_1_24_header() {
        // GST_MEMORY_FLAG_LAST << 2, after NEED_DOWNLOAD (<< 0) and
        // NEED_UPLOAD (<< 1).
        assert_eq!(TRANSFER_NEED_SYNC, 1 << 22);
        assert_eq!(gst::ffi::GST_MEMORY_FLAG_LAST, 1 << 20);
    }

    #[test]
    fn system_memory_is_unordered_whatever_its_flags() {
        gst::init().unwrap();
        let memory = gst::Memory::with_size(64);
        assert!(!needs_sync(&memory));
        // SAFETY: the only reference; sets a flag word bit.
        unsafe { (*memory.as_ptr().cast_mut()).mini_object.flags |= TRANSFER_NEED_SYNC };
        assert!(needs_sync(&memory));
        assert!(matches!(upstream_order(&memory), UpstreamOrder::Unordered));
        // Nothing to wait for, and no panic.
        sync_memory(&memory);
    }
}
