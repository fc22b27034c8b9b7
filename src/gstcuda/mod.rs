// SPDX-License-Identifier: MPL-2.0

//! Interoperation with GStreamer's CUDA library (`libgstcuda-1.0` from
//! gst-plugins-bad, the library of the `nvcodec` elements), loaded at run time
//! so that the plugin builds and works where it is absent.
//!
//! What the elements take from it:
//! - `GstCudaContext` sharing through `GstContext` (`gst.cuda.context`): an
//!   element adopts the context a neighbour or the application shares, or
//!   shares one wrapping this plugin's primary context ([`ContextShare`]);
//! - `GstCudaMemory`: `rscudaipcsrc` and `cudatestsrc` write into it when
//!   downstream is an element of that library (it proposes a
//!   `GstCudaBufferPool`), `rscudaipcsink` reads it with one device-to-device
//!   copy ([`MappedCudaMemory`]).
//!
//! GStreamer 1.22 cannot wrap foreign device memory as `GstCudaMemory` (that
//! is 1.24's `gst_cuda_allocator_alloc_wrapped`), so frames cross into it with
//! one device-to-device copy. Its `GstCudaMemory` has no stream either: its
//! elements take memory as ready when pushed, so writers here synchronise.
//! On 1.24 and later, `stream` orders work on the GPU instead and wraps
//! device memory without a copy; which library is there is found at run time
//! ([`api_level`]).
//!
//! `CUDAIPC_GSTCUDA=0` in the environment disables the interoperation.

mod ordering;
mod stream;
mod wrap;

pub use ordering::{Access, Ordered, OrderedAccess, StreamOrdering};
pub use stream::{CudaStream, needs_sync};
pub use wrap::{wrap_device_memory, wrappable_layout};

use std::ffi::{c_int, c_uint, c_void};
use std::sync::{Arc, LazyLock, Mutex};

use gst::glib;
use gst::glib::translate::{FromGlib, FromGlibPtrFull, FromGlibPtrNone, ToGlibPtr};
use gst::prelude::*;

use cudaipc_transport::cuda::Device;

/// `GstContext` type of a shared `GstCudaContext`.
pub const CONTEXT_TYPE: &str = "gst.cuda.context";

/// `GST_MAP_CUDA`: map a `GstCudaMemory` for device access (the map's data is
/// the `CUdeviceptr`).
const MAP_CUDA: c_uint = gst::ffi::GST_MAP_FLAG_LAST << 1;

pub(crate) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "cudaipc-gstcuda",
        gst::DebugColorFlags::empty(),
        Some("Interoperation with GStreamer's CUDA library"),
    )
});

type GetType = unsafe extern "C" fn() -> glib::ffi::GType;
type LoadLibrary = unsafe extern "C" fn() -> glib::ffi::gboolean;
type InitOnce = unsafe extern "C" fn();
type IsCudaMemory = unsafe extern "C" fn(*mut gst::ffi::GstMemory) -> glib::ffi::gboolean;
type ContextNewWrapped = unsafe extern "C" fn(*mut c_void, c_int) -> *mut gst::ffi::GstObject;
type ContextGetHandle = unsafe extern "C" fn(*mut gst::ffi::GstObject) -> *mut c_void;
type HandleSetContext = unsafe extern "C" fn(
    *mut gst::ffi::GstElement,
    *mut gst::ffi::GstContext,
    c_int,
    *mut *mut gst::ffi::GstObject,
) -> glib::ffi::gboolean;
type HandleContextQuery = unsafe extern "C" fn(
    *mut gst::ffi::GstElement,
    *mut gst::ffi::GstQuery,
    *mut gst::ffi::GstObject,
) -> glib::ffi::gboolean;
type NewCudaContext = unsafe extern "C" fn(*mut gst::ffi::GstObject) -> *mut gst::ffi::GstContext;
type BufferPoolNew = unsafe extern "C" fn(*mut gst::ffi::GstObject) -> *mut gst::ffi::GstBufferPool;

struct Library {
    load_cuda: LoadLibrary,
    memory_init_once: InitOnce,
    is_cuda_memory: IsCudaMemory,
    buffer_pool_type: glib::Type,
    context_new_wrapped: ContextNewWrapped,
    context_get_handle: ContextGetHandle,
    handle_set_context: HandleSetContext,
    handle_context_query: HandleContextQuery,
    new_cuda_context: NewCudaContext,
    buffer_pool_new: BufferPoolNew,
    /// What GStreamer 1.24 added; `None` on 1.22.
    v1_24: Option<stream::Api1_24>,
    _library: libloading::Library,
}

/// The file of GStreamer's CUDA library (gst-plugins-bad).
const GSTCUDA_LIBRARY: &str = if cfg!(windows) {
    "gstcuda-1.0-0.dll"
} else {
    "libgstcuda-1.0.so.0"
};

/// Which `libgstcuda-1.0` this process loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ApiLevel {
    /// None (not installed, or `CUDAIPC_GSTCUDA=0`).
    Absent,
    /// GStreamer 1.22's: contexts, memory and pools, no streams.
    V1_22,
    /// GStreamer 1.24 or later: also `GstCudaStream` on memory and wrapped
    /// device memory.
    V1_24,
}

/// The API level of the loaded library (whether or not a GPU is usable).
pub fn api_level() -> ApiLevel {
    match LIBRARY.as_ref() {
        None => ApiLevel::Absent,
        Some(lib) if lib.v1_24.is_some() => ApiLevel::V1_24,
        Some(_) => ApiLevel::V1_22,
    }
}

impl Library {
    fn load() -> Option<Library> {
        if std::env::var_os("CUDAIPC_GSTCUDA").is_some_and(|v| v == "0") {
            gst::info!(CAT, "disabled by CUDAIPC_GSTCUDA=0");
            return None;
        }
        // SAFETY: loading libgstcuda runs no code beyond its constructors,
        // which only register nothing (GTypes are registered on first use).
        let library = match unsafe { libloading::Library::new(GSTCUDA_LIBRARY) } {
            Ok(l) => l,
            Err(e) => {
                gst::info!(CAT, "GStreamer's CUDA library is not available: {e}");
                return None;
            }
        };
        macro_rules! symbol {
            ($name:literal) => {
                // SAFETY: the types above are the C prototypes of these
                // functions in gst/cuda (GStreamer 1.22 and later).
                match unsafe { library.get(concat!($name, "\0").as_bytes()) } {
                    Ok(f) => *f,
                    Err(e) => {
                        gst::warning!(CAT, "libgstcuda-1.0 lacks {}: {e}", $name);
                        return None;
                    }
                }
            };
        }
        let buffer_pool_get_type: GetType = symbol!("gst_cuda_buffer_pool_get_type");
        // SAFETY: a GType getter, callable at any time after gst_init.
        let buffer_pool_type = unsafe { glib::Type::from_glib(buffer_pool_get_type()) };
        let lib = Library {
            load_cuda: symbol!("gst_cuda_load_library"),
            memory_init_once: symbol!("gst_cuda_memory_init_once"),
            is_cuda_memory: symbol!("gst_is_cuda_memory"),
            buffer_pool_type,
            context_new_wrapped: symbol!("gst_cuda_context_new_wrapped"),
            context_get_handle: symbol!("gst_cuda_context_get_handle"),
            handle_set_context: symbol!("gst_cuda_handle_set_context"),
            handle_context_query: symbol!("gst_cuda_handle_context_query"),
            new_cuda_context: symbol!("gst_context_new_cuda_context"),
            buffer_pool_new: symbol!("gst_cuda_buffer_pool_new"),
            v1_24: stream::Api1_24::load(&library),
            _library: library,
        };
        gst::info!(
            CAT,
            "using GStreamer's CUDA library ({})",
            if lib.v1_24.is_some() {
                "1.24 or later: stream-ordered and wrapped memory"
            } else {
                "1.22: no streams on memory"
            }
        );
        Some(lib)
    }
}

static LIBRARY: LazyLock<Option<Library>> = LazyLock::new(Library::load);

/// Whether libgstcuda's own CUDA loader works (libcuda found), checked once.
static CUDA_READY: LazyLock<bool> = LazyLock::new(|| {
    let Some(lib) = LIBRARY.as_ref() else {
        return false;
    };
    if !cudaipc_transport::cuda::is_available() {
        return false;
    }
    // SAFETY: plain initialisers without arguments.
    let loaded = unsafe { (lib.load_cuda)() } != 0;
    if loaded {
        // SAFETY: as above; sets up the default CUDA allocator.
        unsafe { (lib.memory_init_once)() };
    } else {
        gst::warning!(CAT, "libgstcuda-1.0 could not load the CUDA driver");
    }
    loaded
});

/// Whether GStreamer's CUDA library is loaded (with or without a GPU).
#[cfg(test)]
pub fn library_loaded() -> bool {
    LIBRARY.is_some()
}

/// The library, when it is loaded and has a usable CUDA driver.
fn library() -> Option<&'static Library> {
    LIBRARY.as_ref().filter(|_| *CUDA_READY)
}

/// Whether `GstCudaMemory` and `GstCudaContext` can be used here.
pub fn available() -> bool {
    library().is_some()
}

/// Whether `memory` is a `GstCudaMemory`.
pub fn is_cuda_memory(memory: &gst::MemoryRef) -> bool {
    LIBRARY.as_ref().is_some_and(|lib| {
        // SAFETY: a valid memory; the function only reads its allocator.
        unsafe { (lib.is_cuda_memory)(memory.as_mut_ptr()) != 0 }
    })
}

/// Whether `pool` is a `GstCudaBufferPool` (what GStreamer's CUDA elements
/// propose for CUDA caps).
pub fn is_cuda_buffer_pool(pool: &gst::BufferPool) -> bool {
    LIBRARY
        .as_ref()
        .is_some_and(|lib| pool.type_().is_a(lib.buffer_pool_type))
}

/// A `GstCudaContext`.
#[derive(Debug, Clone, PartialEq)]
pub struct CudaContext(gst::Object);

impl CudaContext {
    /// A context wrapping `device`'s primary context, which this plugin uses.
    pub fn wrap(device: &Device) -> Option<CudaContext> {
        let lib = library()?;
        // SAFETY: the primary context is retained for the life of the
        // process; the call returns a new reference or NULL.
        let raw =
            unsafe { (lib.context_new_wrapped)(device.raw_context().cast(), device.raw_device()) };
        if raw.is_null() {
            gst::warning!(
                CAT,
                "cannot wrap the CUDA context of device {}",
                device.ordinal()
            );
            return None;
        }
        // SAFETY: a new (full) reference to a GstObject.
        Some(CudaContext(unsafe { gst::Object::from_glib_full(raw) }))
    }

    /// The context a `gst.cuda.context` `GstContext` carries.
    pub fn from_context(context: &gst::Context) -> Option<CudaContext> {
        if context.context_type() != CONTEXT_TYPE {
            return None;
        }
        let object = context.structure().get::<gst::Object>(CONTEXT_TYPE).ok()?;
        Some(CudaContext(object))
    }

    /// The `CUcontext` behind it.
    pub fn handle(&self) -> *mut c_void {
        let Some(lib) = LIBRARY.as_ref() else {
            return std::ptr::null_mut();
        };
        // SAFETY: a valid GstCudaContext.
        unsafe { (lib.context_get_handle)(self.0.to_glib_none().0) }
    }

    pub fn device_id(&self) -> i32 {
        self.0.property::<u32>("cuda-device-id") as i32
    }

    /// Whether this context is `device`'s primary context (the one this
    /// plugin's kernels run in).
    pub fn is_primary_of(&self, device: &Device) -> bool {
        self.handle() == device.raw_context().cast()
    }

    /// A `GstContext` carrying it, for `have-context` messages and queries.
    pub fn to_gst_context(&self) -> Option<gst::Context> {
        let lib = LIBRARY.as_ref()?;
        // SAFETY: returns a new GstContext holding a reference to the context.
        Some(unsafe {
            gst::Context::from_glib_full((lib.new_cuda_context)(self.0.to_glib_none().0))
        })
    }

    /// A new `GstCudaBufferPool` of this context (not configured).
    pub fn new_buffer_pool(&self) -> Option<gst::BufferPool> {
        let lib = library()?;
        // SAFETY: returns a new floating-sunk reference or NULL.
        let raw = unsafe { (lib.buffer_pool_new)(self.0.to_glib_none().0) };
        (!raw.is_null()).then(|| {
            // SAFETY: a new (full) reference.
            unsafe { gst::BufferPool::from_glib_full(raw) }
        })
    }
}

/// The `GstCudaContext` an element shares with GStreamer's CUDA elements.
///
/// Elements call [`set_context`](Self::set_context) from
/// `ElementImpl::set_context`, [`query`](Self::query) from their query
/// handlers, [`adopt`](Self::adopt) when they go to READY, and
/// [`ensure`](Self::ensure) once they know their device.
#[derive(Debug, Default)]
pub struct ContextShare {
    context: Mutex<Option<CudaContext>>,
}

impl ContextShare {
    pub fn get(&self) -> Option<CudaContext> {
        self.context.lock().unwrap().clone()
    }

    pub fn clear(&self) {
        *self.context.lock().unwrap() = None;
    }

    /// Takes the CUDA context in `context` if there is none yet and it is on
    /// `device_id` (-1: any device).
    pub fn set_context(&self, element: &gst::Element, context: &gst::Context, device_id: i32) {
        let Some(lib) = library() else {
            return;
        };
        let mut current = self.context.lock().unwrap();
        if current.is_some() {
            return;
        }
        let mut raw: *mut gst::ffi::GstObject = std::ptr::null_mut();
        // SAFETY: valid element and context; `raw` receives a new reference.
        let found = unsafe {
            (lib.handle_set_context)(
                element.to_glib_none().0,
                context.as_mut_ptr(),
                device_id,
                &mut raw,
            )
        } != 0;
        if found && !raw.is_null() {
            // SAFETY: a full reference returned through `raw`.
            let ctx = CudaContext(unsafe { gst::Object::from_glib_full(raw) });
            gst::debug!(
                CAT,
                obj = element,
                "adopted {:?} (device {})",
                ctx.0,
                ctx.device_id()
            );
            *current = Some(ctx);
        }
    }

    /// Answers a `gst.cuda.context` context query; false if not answered.
    pub fn query(&self, element: &gst::Element, query: &mut gst::QueryRef) -> bool {
        let gst::QueryViewMut::Context(q) = query.view_mut() else {
            return false;
        };
        if q.context_type() != CONTEXT_TYPE {
            return false;
        }
        let (Some(lib), Some(ctx)) = (library(), self.get()) else {
            return false;
        };
        // SAFETY: valid element, query and context; the function refs what it
        // keeps.
        unsafe {
            (lib.handle_context_query)(
                element.to_glib_none().0,
                query.as_mut_ptr(),
                ctx.0.to_glib_none().0,
            ) != 0
        }
    }

    /// Adopts a context that a neighbour (context query) or the pipeline or
    /// application (`need-context`) already shares.
    pub fn adopt(&self, element: &gst::Element, device_id: i32) -> Option<CudaContext> {
        library()?;
        if let Some(ctx) = self.get() {
            return Some(ctx);
        }
        for pad in element.pads() {
            let mut q = gst::query::Context::new(CONTEXT_TYPE);
            if pad.peer_query(&mut q)
                && let Some(context) = q.context_owned()
            {
                self.set_context(element, &context, device_id);
                if let Some(ctx) = self.get() {
                    return Some(ctx);
                }
            }
        }
        // Bins answer synchronously, through set_context.
        let _ = element.post_message(
            gst::message::NeedContext::builder(CONTEXT_TYPE)
                .src(element)
                .build(),
        );
        self.get()
    }

    /// An element's `change_state`: [`before_change_state`](Self::before_change_state),
    /// then its parent's (`chain_up`), then
    /// [`after_change_state`](Self::after_change_state).
    pub fn change_state(
        &self,
        element: &gst::Element,
        transition: gst::StateChange,
        device_id: i32,
        share: Option<&Arc<Device>>,
        chain_up: impl FnOnce() -> Result<gst::StateChangeSuccess, gst::StateChangeError>,
    ) -> Result<gst::StateChangeSuccess, gst::StateChangeError> {
        self.before_change_state(element, transition, device_id, share);
        let success = chain_up()?;
        self.after_change_state(transition);
        Ok(success)
    }

    /// For `change_state`, before chaining up. Going to READY: adopts a
    /// context already shared (downstream elements go to READY before their
    /// upstream), or, with `share`, shares one of that device if none is.
    fn before_change_state(
        &self,
        element: &gst::Element,
        transition: gst::StateChange,
        device_id: i32,
        share: Option<&Arc<Device>>,
    ) {
        if transition != gst::StateChange::NullToReady {
            return;
        }
        match share {
            Some(device) => {
                self.ensure(element, device);
            }
            None => {
                self.adopt(element, device_id);
            }
        }
    }

    /// For `change_state`, after chaining up: back in NULL, the context is
    /// forgotten.
    fn after_change_state(&self, transition: gst::StateChange) {
        if transition == gst::StateChange::ReadyToNull {
            self.clear();
        }
    }

    /// Adopts a shared context, or shares one wrapping `device`'s primary
    /// context with the pipeline (`have-context`).
    pub fn ensure(&self, element: &gst::Element, device: &Arc<Device>) -> Option<CudaContext> {
        if let Some(ctx) = self.adopt(element, device.ordinal()) {
            return Some(ctx);
        }
        let ctx = CudaContext::wrap(device)?;
        *self.context.lock().unwrap() = Some(ctx.clone());
        gst::debug!(
            CAT,
            obj = element,
            "sharing the primary context of device {}",
            device.ordinal()
        );
        if let Some(context) = ctx.to_gst_context() {
            let _ = element.post_message(
                gst::message::HaveContext::builder(context)
                    .src(element)
                    .build(),
            );
        }
        Some(ctx)
    }
}

/// The head of `GstCudaMemory`, public since GStreamer 1.22.
#[repr(C)]
struct CudaMemoryHead {
    mem: gst::ffi::GstMemory,
    context: *mut gst::ffi::GstObject,
    info: gst_video::ffi::GstVideoInfo,
}

/// A `GstCudaMemory` mapped for device access; unmapped when dropped.
pub struct MappedCudaMemory<'a> {
    memory: &'a gst::MemoryRef,
    map: gst::ffi::GstMapInfo,
    /// Device pointer of the memory's first byte.
    pub ptr: u64,
    pub size: usize,
    /// (offset, stride) of each plane, in the memory's own layout.
    pub planes: Vec<(u64, u32)>,
    pub context: CudaContext,
}

impl<'a> MappedCudaMemory<'a> {
    /// Maps `memory` for the device, for writing or reading; `None` if it is
    /// no `GstCudaMemory` or cannot be mapped.
    pub fn map(memory: &'a gst::MemoryRef, write: bool) -> Option<Self> {
        if !is_cuda_memory(memory) {
            return None;
        }
        let access = if write {
            gst::ffi::GST_MAP_WRITE
        } else {
            gst::ffi::GST_MAP_READ
        };
        // SAFETY: `memory` is a GstCudaMemory, whose layout starts with
        // CudaMemoryHead; its context and info are set at allocation.
        let (context, planes) = unsafe {
            let head = &*(memory.as_ptr() as *const CudaMemoryHead);
            let info = gst_video::VideoInfo::from_glib_none(&head.info as *const _);
            (
                CudaContext(gst::Object::from_glib_none(head.context)),
                crate::video::planes(&info),
            )
        };
        let mut map = std::mem::MaybeUninit::<gst::ffi::GstMapInfo>::zeroed();
        // SAFETY: valid memory and out pointer; a successful map is undone in
        // Drop.
        let mapped = unsafe {
            gst::ffi::gst_memory_map(memory.as_mut_ptr(), map.as_mut_ptr(), access | MAP_CUDA)
        } != 0;
        if !mapped {
            return None;
        }
        // SAFETY: initialised by the successful map.
        let map = unsafe { map.assume_init() };
        Some(Self {
            memory,
            ptr: map.data as u64,
            size: map.size,
            map,
            planes,
            context,
        })
    }

    /// The first `GstCudaMemory` of a single-memory buffer, mapped.
    pub fn of_buffer(buffer: &'a gst::BufferRef, write: bool) -> Option<Self> {
        if buffer.n_memory() != 1 {
            return None;
        }
        Self::map(buffer.peek_memory(0), write)
    }

    /// The CUDA device it lives on.
    pub fn device(&self) -> Result<Arc<Device>, cudaipc_transport::cuda::CudaError> {
        Device::get(self.context.device_id())
    }

    /// The mapped memory as a region for `frame_copy`, which keeps the
    /// memory (not the map) alive: drop it before the map when writing.
    pub fn region(
        &self,
    ) -> Result<cudaipc_transport::cuda::DeviceRegion, cudaipc_transport::cuda::CudaError> {
        let device = self.device()?;
        // A reference, not `to_owned()`: that is `gst_memory_copy`, a copy
        // of the whole frame on the GPU, which fails (NULL) while the memory
        // is mapped for writing.
        // SAFETY: a valid memory; from_glib_none takes a new reference.
        let memory: gst::Memory = unsafe { gst::Memory::from_glib_none(self.memory.as_ptr()) };
        let owner: Arc<dyn std::any::Any + Send + Sync> = Arc::new(memory);
        // SAFETY: a GstCudaMemory's device allocation is `size` bytes at
        // `ptr` in its context's device, and stays allocated while the
        // memory (a reference of which the region owns) lives.
        Ok(unsafe {
            cudaipc_transport::cuda::DeviceRegion::from_raw_parts(
                &device, self.ptr, self.size, owner,
            )
        })
    }
}

impl Drop for MappedCudaMemory<'_> {
    fn drop(&mut self) {
        // SAFETY: mapped in `map` with this info.
        unsafe { gst::ffi::gst_memory_unmap(self.memory.as_mut_ptr(), &mut self.map) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_memory_and_pools_are_not_gstcuda_ones() {
        gst::init().unwrap();
        let memory = gst::Memory::with_size(64);
        assert!(!is_cuda_memory(&memory));
        assert!(MappedCudaMemory::map(&memory, false).is_none());
        assert!(!is_cuda_buffer_pool(&gst::BufferPool::new()));
        assert!(!is_cuda_buffer_pool(
            gst_video::VideoBufferPool::new().upcast_ref()
        ));
    }

    #[test]
    fn the_library_is_found_where_debian_installs_it() {
        gst::init().unwrap();
        // scripts/setup.sh installs libgstreamer-plugins-bad1.0, which holds
        // libgstcuda-1.0; CUDAIPC_GSTCUDA=0 turns it off.
        // SAFETY: loading it runs only its library constructors.
        let installed = unsafe { libloading::Library::new(GSTCUDA_LIBRARY) }.is_ok();
        let disabled = std::env::var_os("CUDAIPC_GSTCUDA").is_some_and(|v| v == "0");
        assert_eq!(library_loaded(), installed && !disabled);
        if library_loaded() {
            let pool_type = glib::Type::from_name("GstCudaBufferPool").expect("type registered");
            assert!(pool_type.is_a(gst::BufferPool::static_type()));
        }
        // Without a usable driver nothing of it is used.
        assert_eq!(
            available(),
            library_loaded() && cudaipc_transport::cuda::is_available()
        );
    }

    #[test]
    fn without_a_shared_context_queries_go_unanswered() {
        gst::init().unwrap();
        let share = ContextShare::default();
        let element = gst::ElementFactory::make("identity").build().unwrap();
        let mut q = gst::query::Context::new(CONTEXT_TYPE);
        assert!(!share.query(&element, q.get_mut().unwrap()));
        assert!(q.context().is_none());
        if !available() {
            assert!(share.adopt(&element, -1).is_none());
        }
    }
}
