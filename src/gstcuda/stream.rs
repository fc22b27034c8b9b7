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
//! [`StreamOrdering::wait_for_context_work`].
//!
//! On 1.22 none of these symbols exist: [`upstream_order`] answers
//! [`UpstreamOrder::Unordered`], [`CudaStream::new`] and
//! [`wrap_device_memory`] fail, and the elements keep their 1.22 behaviour.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;
use gst::glib;
use gst::glib::translate::ToGlibPtr;

use super::{CAT, CudaContext, LIBRARY, library};
use cudaipc_transport::WriterStream;
use cudaipc_transport::cuda::{CudaError, Device, Event, Stream, check};

/// `GST_CUDA_MEMORY_TRANSFER_NEED_SYNC` (`GST_MEMORY_FLAG_LAST << 2`, 1.24's
/// `gstcudamemory.h`): work on the memory's stream may still be pending.
pub const TRANSFER_NEED_SYNC: u32 = gst::ffi::GST_MEMORY_FLAG_LAST << 2;

/// `CU_STREAM_LEGACY`: the legacy default stream of the current context, which
/// waits for all work queued before it on the context's blocking streams.
fn legacy_stream() -> sys::CUstream {
    std::ptr::without_provenance_mut(1)
}

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
    alloc_wrapped: AllocWrapped,
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
fn api() -> Option<&'static Api1_24> {
    library()?.v1_24.as_ref()
}

/// The head of `GstCudaStream` (public fields, 1.24's `gstcudastream.h`).
#[repr(C)]
struct CudaStreamHead {
    parent: gst::ffi::GstMiniObject,
    context: *mut gst::ffi::GstObject,
}

/// A `GstCudaStream`, held by reference: a CUDA stream that GStreamer's CUDA
/// elements know (GStreamer 1.24+).
pub struct CudaStream {
    raw: NonNull<c_void>,
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
    /// own stream ([`StreamOrdering::order_after`]). `None` before 1.24.
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
    fn is_in_primary_context_of(&self, device: &Device) -> bool {
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
    /// after it ([`StreamOrdering::wait_for_upstream`]).
    Pending(CudaStream),
    /// It belongs to this stream and nothing is pending: read it at once. The
    /// writer's next use of the memory is queued on this stream, so order
    /// that after the reads ([`StreamOrdering::release_to_upstream`]).
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

/// How an ordering was achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ordered {
    /// An event on one stream that the other waits for: no host wait.
    OnGpu,
    /// The streams are in different CUDA contexts (upstream made its own):
    /// waited on the host instead.
    HostSynchronized,
    /// Nothing was pending.
    NothingPending,
    /// The memory has no stream: nothing done, the caller keeps its 1.22
    /// behaviour.
    Unordered,
}

/// Orders CUDA streams against each other with events from a small pool,
/// for one device: the plugin's stream against the `GstCudaStream`s of
/// GStreamer's elements. One per element (or device); cheap to call per
/// frame: no allocation once the pool has its events (as many as calls run
/// at once).
pub struct StreamOrdering {
    device: Arc<Device>,
    /// Idle events. An event can be recorded again as soon as
    /// `cuStreamWaitEvent` has returned: the wait keeps the record it saw.
    events: Mutex<Vec<Event>>,
}

impl StreamOrdering {
    pub fn new(device: Arc<Device>) -> StreamOrdering {
        StreamOrdering {
            device,
            events: Mutex::new(Vec::new()),
        }
    }

    /// Makes later work on `waiting` wait for work queued so far on
    /// `signalling`; both are streams of the device's primary context.
    fn enqueue_wait(
        &self,
        waiting: sys::CUstream,
        signalling: sys::CUstream,
    ) -> Result<(), CudaError> {
        self.device.bind()?;
        let event = match self.events.lock().unwrap().pop() {
            Some(event) => event,
            None => Event::new(&self.device, false)?,
        };
        // SAFETY: the primary context is bound; the event is ours and of
        // that context; callers pass streams of that context that they keep
        // alive across the call (or the legacy stream handle).
        let result = unsafe {
            check("cuEventRecord", sys::cuEventRecord(event.raw(), signalling)).and_then(|()| {
                check(
                    "cuStreamWaitEvent",
                    sys::cuStreamWaitEvent(waiting, event.raw(), 0),
                )
            })
        };
        self.events.lock().unwrap().push(event);
        result
    }

    /// Sink side, before reading `memory` on `ours`: orders `ours` after the
    /// writes still pending on upstream's stream, without a host wait when
    /// both streams share the device's primary context.
    pub fn wait_for_upstream(
        &self,
        memory: &gst::MemoryRef,
        ours: &Stream,
    ) -> Result<Ordered, CudaError> {
        match upstream_order(memory) {
            UpstreamOrder::Unordered => Ok(Ordered::Unordered),
            UpstreamOrder::Ready(_) => Ok(Ordered::NothingPending),
            UpstreamOrder::Pending(theirs) if theirs.is_in_primary_context_of(&self.device) => {
                self.enqueue_wait(ours.raw(), theirs.handle())?;
                Ok(Ordered::OnGpu)
            }
            UpstreamOrder::Pending(_) => {
                sync_memory(memory);
                Ok(Ordered::HostSynchronized)
            }
        }
    }

    /// Sink side, after queueing the last read of `memory` on `ours` and
    /// before dropping the buffer: orders upstream's later work on its stream
    /// (the next write into this memory once its pool hands it out again)
    /// after those reads, so the buffer can go back without a host wait.
    /// Memory without a stream, or of a stream of another context: `ours` is
    /// synchronised on the host, as on 1.22.
    pub fn release_to_upstream(
        &self,
        memory: &gst::MemoryRef,
        ours: &Stream,
    ) -> Result<Ordered, CudaError> {
        match upstream_order(memory) {
            UpstreamOrder::Pending(theirs) | UpstreamOrder::Ready(theirs) => {
                self.order_after(&theirs, ours)
            }
            UpstreamOrder::Unordered => {
                ours.synchronize()?;
                Ok(Ordered::HostSynchronized)
            }
        }
    }

    /// Sink side, for a lent buffer going back upstream: the stream of the
    /// device's primary context that upstream writes `memory` on next (its
    /// own; GStreamer's writers use the memory's stream), which can then
    /// wait for the consumers' reads on the GPU. `None`: no stream, or one
    /// of another context; wait on the host instead.
    pub fn writer_stream(&self, memory: &gst::MemoryRef) -> Option<WriterStream> {
        match upstream_order(memory) {
            UpstreamOrder::Pending(theirs) | UpstreamOrder::Ready(theirs)
                if theirs.is_in_primary_context_of(&self.device) =>
            {
                // SAFETY: a stream of the primary context of this ordering's
                // device (the slots'); the memory keeps it alive while the
                // caller holds the buffer.
                Some(unsafe { WriterStream::new(theirs.handle()) })
            }
            _ => None,
        }
    }

    /// Source side, before pushing memory wrapped with `stream`: orders
    /// `stream` after what `ours` has queued (the wait for the producer's
    /// frame). Streams of another context are synchronised on the host.
    pub fn order_after(&self, stream: &CudaStream, ours: &Stream) -> Result<Ordered, CudaError> {
        if stream.is_in_primary_context_of(&self.device) {
            self.enqueue_wait(stream.handle(), ours.raw())?;
            Ok(Ordered::OnGpu)
        } else {
            ours.synchronize()?;
            Ok(Ordered::HostSynchronized)
        }
    }

    /// Writer side (a source writing into a downstream `GstCudaBufferPool`'s
    /// memory), after queueing the writes into `memory` on `ours`: orders the
    /// memory's stream, which its readers order themselves after, after
    /// those writes and sets `NEED_SYNC`, so the buffer can be pushed without
    /// a host wait. [`Ordered::Unordered`] (no stream, 1.22): synchronise
    /// `ours` before pushing, as on 1.22.
    pub fn order_readers_after(
        &self,
        memory: &gst::MemoryRef,
        ours: &Stream,
    ) -> Result<Ordered, CudaError> {
        match upstream_order(memory) {
            UpstreamOrder::Unordered => Ok(Ordered::Unordered),
            UpstreamOrder::Pending(theirs) | UpstreamOrder::Ready(theirs) => {
                let ordered = self.order_after(&theirs, ours)?;
                if ordered == Ordered::OnGpu {
                    // SAFETY: a valid memory that the caller is writing (so
                    // no other writer touches its flags now); GStreamer's own
                    // writers set this flag the same way.
                    unsafe { (*memory.as_mut_ptr()).mini_object.flags |= TRANSFER_NEED_SYNC };
                }
                Ok(ordered)
            }
        }
    }

    /// Source side, when wrapped memory is freed, before releasing the slot:
    /// orders `ours` after everything queued so far on the blocking streams of
    /// the device's primary context (an event on its legacy default stream).
    ///
    /// Why: GStreamer's elements drop an input once their work on it is
    /// queued, often on a stream of their own (cudaconvert, encoders), so the
    /// free does not mean the reads are done. Every `GstCudaStream` is a
    /// blocking stream, so this covers them (in this context) without a host
    /// wait. The cost: work queued later on those streams also waits for the
    /// work queued before (one GPU-side barrier per released frame).
    pub fn wait_for_context_work(&self, ours: &Stream) -> Result<Ordered, CudaError> {
        self.enqueue_wait(ours.raw(), legacy_stream())?;
        Ok(Ordered::OnGpu)
    }
}

/// What our work does with a `GstCudaMemory` (see [`OrderedAccess`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads it: the sink copying upstream's frame out.
    Read,
    /// Writes it: a source filling memory of downstream's pool.
    Write,
}

/// The one ordering of our work on a `GstCudaMemory` against the memory's
/// own stream (GStreamer 1.24+): [`begin`](Self::begin) before the work is
/// queued on our stream, [`finish`](Self::finish) after it, so that the
/// buffer moves on with the work still queued. Without a
/// [`StreamOrdering`] (GStreamer 1.22), or where the GPU cannot order the
/// two streams, our stream is synchronised on the host instead.
pub struct OrderedAccess<'a> {
    ordering: Option<&'a StreamOrdering>,
    ours: &'a Stream<'a>,
    access: Access,
}

impl<'a> OrderedAccess<'a> {
    /// Orders `ours` after the work still pending on `memory`'s stream:
    /// upstream's writes before a read, downstream's reads of the memory's
    /// last frame before a write.
    pub fn begin(
        ordering: Option<&'a StreamOrdering>,
        memory: &gst::MemoryRef,
        ours: &'a Stream<'a>,
        access: Access,
    ) -> Result<Self, CudaError> {
        if let Some(ordering) = ordering {
            ordering.wait_for_upstream(memory, ours)?;
        }
        Ok(Self {
            ordering,
            ours,
            access,
        })
    }

    /// After the work on `memory` is queued on `ours`: orders the memory's
    /// stream after it (a read: the owner's next write into it waits for
    /// it; a write: its readers see the frame), or synchronises `ours` on
    /// the host where that cannot be (1.22; memory without a stream or of
    /// another context), as 1.22's CUDA elements expect.
    pub fn finish(self, memory: &gst::MemoryRef) -> Result<(), CudaError> {
        match (self.ordering, self.access) {
            (None, _) => self.ours.synchronize(),
            (Some(ordering), Access::Read) => {
                ordering.release_to_upstream(memory, self.ours).map(drop)
            }
            (Some(ordering), Access::Write) => {
                match ordering.order_readers_after(memory, self.ours)? {
                    Ordered::Unordered => self.ours.synchronize(),
                    _ => Ok(()),
                }
            }
        }
    }
}

/// Whether `gst_cuda_allocator_alloc_wrapped` describes memory of layout
/// `info` faithfully. It keeps one pitch (`stride[0]`) and `size / pitch`
/// rows of plane 0's width, which its host copies (system-memory maps,
/// `gst_memory_copy`) use for the whole memory: right when every plane has
/// that pitch (as GStreamer's own CUDA memory does) or when plane 0 has no
/// padding (the copy is then contiguous), and when the size is whole rows.
pub fn wrappable_layout(info: &gst_video::VideoInfo) -> bool {
    let pitch = info.stride()[0];
    if pitch <= 0 || info.size() % pitch as usize != 0 {
        return false;
    }
    let row_bytes = info.comp_width(0) as i64 * info.comp_pstride(0) as i64;
    row_bytes == pitch as i64 || info.stride().iter().all(|&s| s == pitch)
}

/// Destroy notify of wrapped memory: drops the owner boxed for it.
///
/// # Safety
/// `data` is a `Box<T>` turned into a raw pointer, passed once.
unsafe extern "C" fn drop_owner<T>(data: glib::ffi::gpointer) {
    // SAFETY: per the contract above.
    let owner = unsafe { Box::from_raw(data as *mut T) };
    // A panic must not unwind into C.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(owner))).is_err() {
        gst::error!(CAT, "releasing wrapped CUDA memory panicked");
    }
}

/// Wraps `size` bytes of device memory at `ptr`, laid out as `info`
/// describes (offsets and strides of the real layout), as a `GstCudaMemory`
/// of `context`, without a copy (GStreamer 1.24+).
///
/// `owner` is dropped when the memory is freed (on whichever thread drops
/// the last reference, with the memory's context current): hand it what
/// keeps `ptr` valid, e.g. a held frame whose drop releases the slot. The
/// memory is read-only (writers in the pipeline copy it first).
///
/// `stream`: the memory's stream, and whether writes are still pending on
/// it. Pending, `NEED_SYNC` is set, so that readers order themselves after
/// it (see the module's notes); the caller orders `stream` after its own
/// writes before pushing ([`StreamOrdering::order_after`]). Not pending, or
/// without a stream, the content must be complete when pushed.
///
/// Gives `owner` back when it cannot wrap: GStreamer 1.22, no usable driver,
/// a null pointer, a layout it cannot describe ([`wrappable_layout`]), or a
/// stream of another context.
pub fn wrap_device_memory<T: Send + 'static>(
    context: &CudaContext,
    stream: Option<(&CudaStream, bool)>,
    info: &gst_video::VideoInfo,
    ptr: u64,
    owner: T,
) -> Result<gst::Memory, T> {
    let pending = stream.is_some_and(|(_, pending)| pending);
    let stream = stream.map(|(stream, _)| stream);
    let Some(api) = api() else {
        return Err(owner);
    };
    if ptr == 0 || !wrappable_layout(info) {
        return Err(owner);
    }
    if let Some(stream) = stream {
        // SAFETY: GstCudaStream starts with CudaStreamHead.
        let stream_context = unsafe { (*(stream.raw.as_ptr() as *const CudaStreamHead)).context };
        if stream_context != context.0.to_glib_none().0 {
            gst::warning!(CAT, "not wrapping: the stream is of another context");
            return Err(owner);
        }
    }
    let data = Box::into_raw(Box::new(owner));
    // SAFETY: valid context, stream (or NULL) and info; NULL allocator picks
    // the default one. The call refs what it keeps; on success `drop_owner`
    // is called exactly once, when the memory is freed.
    let raw = unsafe {
        (api.alloc_wrapped)(
            std::ptr::null_mut(),
            context.0.to_glib_none().0,
            stream.map_or(std::ptr::null_mut(), |s| s.raw.as_ptr()),
            info.to_glib_none().0,
            ptr,
            data.cast(),
            Some(drop_owner::<T>),
        )
    };
    if raw.is_null() {
        // SAFETY: not taken by the failed call: reclaim it.
        return Err(*unsafe { Box::from_raw(data) });
    }
    let mut flags = gst::ffi::GST_MEMORY_FLAG_READONLY;
    if pending {
        flags |= TRANSFER_NEED_SYNC;
    }
    // SAFETY: a new memory that only we reference; setting flags before it is
    // shared, then taking the full reference.
    unsafe {
        (*raw).mini_object.flags |= flags;
        Ok(glib::translate::from_glib_full(raw))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

    use gst::prelude::*;

    use super::super::{ApiLevel, MappedCudaMemory, api_level, library_loaded};
    use super::*;

    /// Counts its drops: stands for the held frame whose drop releases a slot.
    struct Owner(Arc<AtomicUsize>);

    impl Drop for Owner {
        fn drop(&mut self) {
            self.0.fetch_add(1, AtomicOrdering::SeqCst);
        }
    }

    fn video_info(format: gst_video::VideoFormat, width: u32, height: u32) -> gst_video::VideoInfo {
        gst_video::VideoInfo::builder(format, width, height)
            .build()
            .unwrap()
    }

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

    #[test]
    fn layouts_gstreamer_can_describe_are_wrapped() {
        gst::init().unwrap();
        use gst_video::VideoFormat::*;
        // One plane, or planes without row padding: contiguous.
        assert!(wrappable_layout(&video_info(Rgba, 1920, 1080)));
        assert!(wrappable_layout(&video_info(I420, 1920, 1080)));
        assert!(wrappable_layout(&video_info(Nv12, 3840, 2160)));
        // A pitch shared by every plane, as GStreamer's own CUDA memory has:
        // 100 luma rows and 50 chroma rows of 1024 bytes.
        let pitch = 1024;
        let with_pitch = |size| {
            gst_video::VideoInfo::builder(Nv12, 1000, 100)
                .stride(&[pitch, pitch])
                .offset(&[0, pitch as usize * 100])
                .size(size)
                .build()
                .unwrap()
        };
        assert!(wrappable_layout(&with_pitch(150 * pitch as usize)));
        // Not whole rows: GStreamer's host copies would drop the last one.
        assert!(!wrappable_layout(&with_pitch(149 * pitch as usize + 1000)));
        // Padded rows with per-plane pitches: GStreamer's host copies would
        // skip data rows; the source copies instead.
        let padded = gst_video::VideoInfo::builder(I420, 1000, 100)
            .stride(&[1024, 512, 512])
            .offset(&[0, 102_400, 128_000])
            .build()
            .unwrap();
        assert!(!wrappable_layout(&padded));
    }

    #[test]
    fn the_release_notify_drops_the_owner_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let data = Box::into_raw(Box::new(Owner(drops.clone())));
        // SAFETY: a boxed owner, passed once, as the allocator does.
        unsafe { drop_owner::<Owner>(data.cast()) };
        assert_eq!(drops.load(AtomicOrdering::SeqCst), 1);
    }

    #[test]
    fn without_the_1_24_api_wrapping_gives_the_owner_back() {
        gst::init().unwrap();
        if api().is_some() {
            return; // covered by the GPU test below
        }
        let drops = Arc::new(AtomicUsize::new(0));
        // Never dereferenced: the call gives up before using the context.
        let context = CudaContext(gst::Pipeline::new().upcast());
        let info = video_info(gst_video::VideoFormat::Rgba, 64, 64);
        let owner = wrap_device_memory(&context, None, &info, 0x1000, Owner(drops.clone()))
            .expect_err("no 1.24 API here");
        assert_eq!(drops.load(AtomicOrdering::SeqCst), 0, "owner handed back");
        drop(owner);
        assert_eq!(drops.load(AtomicOrdering::SeqCst), 1);
        assert!(CudaStream::new(&context).is_none());
    }

    /// GPU and GStreamer 1.24+: a device buffer wrapped with a stream reads
    /// back in place, carries the stream and NEED_SYNC, orders on the GPU,
    /// and releases its owner when dropped.
    #[test]
    fn wrapped_device_memory_is_read_in_place_and_released() {
        gst::init().unwrap();
        let Some(device) = cudaipc_transport::cuda::gpu_or_skip(
            "wrapped_device_memory_is_read_in_place_and_released",
        ) else {
            return;
        };
        if api_level() < ApiLevel::V1_24 {
            eprintln!(
                "SKIPPED: GStreamer {:?} has no wrapped CUDA memory",
                gst::version()
            );
            return;
        }
        let context = CudaContext::wrap(&device).expect("wrap the primary context");
        let stream = CudaStream::new(&context).expect("a GstCudaStream");
        assert!(!stream.handle().is_null());

        let info = video_info(gst_video::VideoFormat::Rgba, 64, 16);
        let buffer = cudaipc_transport::cuda::DeviceBuffer::new(&device, info.size()).unwrap();
        let ordering = StreamOrdering::new(device.clone());
        let ours = device.stream();
        // Written on our stream, read through GStreamer's stream: the order
        // comes from `order_after` alone (no host sync in between).
        // SAFETY: the buffer holds `info.size()` bytes and outlives the
        // stream's work (it is freed after the host read below).
        unsafe { ours.memset(buffer.ptr(), 0x5a, info.size()) }.unwrap();
        assert_eq!(
            ordering.order_after(&stream, &ours).unwrap(),
            Ordered::OnGpu
        );

        let drops = Arc::new(AtomicUsize::new(0));
        let memory = wrap_device_memory(
            &context,
            Some((&stream, true)),
            &info,
            buffer.ptr(),
            Owner(drops.clone()),
        )
        .unwrap_or_else(|_| panic!("wrapping failed"));
        assert!(super::super::is_cuda_memory(&memory));
        assert!(needs_sync(&memory));
        assert!(memory.flags().contains(gst::MemoryFlags::READONLY));
        match upstream_order(&memory) {
            UpstreamOrder::Pending(s) => assert_eq!(s.handle(), stream.handle()),
            other => panic!("expected a pending stream, got {other:?}"),
        }
        {
            let mapped = MappedCudaMemory::map(&memory, false).unwrap();
            assert_eq!(mapped.ptr, buffer.ptr(), "no copy");
        }
        // A host read downloads on the memory's stream, after our memset.
        {
            let map = memory.map_readable().unwrap();
            assert!(map.iter().all(|&b| b == 0x5a));
        }
        // The sink's calls on such memory order on the GPU.
        let pending = wrap_device_memory(&context, Some((&stream, true)), &info, buffer.ptr(), ())
            .unwrap_or_else(|_| panic!("wrapping failed"));
        assert_eq!(
            ordering.wait_for_upstream(&pending, &ours).unwrap(),
            Ordered::OnGpu
        );
        assert_eq!(
            ordering.wait_for_context_work(&ours).unwrap(),
            Ordered::OnGpu
        );
        assert_eq!(
            ordering.order_readers_after(&pending, &ours).unwrap(),
            Ordered::OnGpu
        );
        assert!(needs_sync(&pending));
        ours.synchronize().unwrap();
        drop(pending);

        assert_eq!(drops.load(AtomicOrdering::SeqCst), 0);
        drop(memory);
        assert_eq!(drops.load(AtomicOrdering::SeqCst), 1, "released on free");
        // Without a stream the memory is unordered (the 1.22 rules).
        let plain = wrap_device_memory(&context, None, &info, buffer.ptr(), ())
            .unwrap_or_else(|_| panic!("wrapping failed"));
        assert!(!needs_sync(&plain));
        assert!(matches!(upstream_order(&plain), UpstreamOrder::Unordered));
        assert_eq!(
            ordering.wait_for_upstream(&plain, &ours).unwrap(),
            Ordered::Unordered
        );
        // Written already (the source waited on the host): the stream, and
        // nothing for readers to wait for, so cudaconvert does not
        // synchronise the host.
        let written = wrap_device_memory(&context, Some((&stream, false)), &info, buffer.ptr(), ())
            .unwrap_or_else(|_| panic!("wrapping failed"));
        assert!(!needs_sync(&written));
        match upstream_order(&written) {
            UpstreamOrder::Ready(s) => assert_eq!(s.handle(), stream.handle()),
            other => panic!("expected a stream with nothing pending, got {other:?}"),
        }
        assert_eq!(
            ordering.wait_for_upstream(&written, &ours).unwrap(),
            Ordered::NothingPending
        );
    }
}
