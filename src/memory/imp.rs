// The allocator subclass and the GstMemory layout behind `CudaIpcMemory`.

use std::any::Any;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use gst::ffi;
use gst::glib;
use gst::glib::translate::*;
use gst::prelude::*;
use gst::subclass::prelude::*;

use super::DeviceMemoryInfo;
use cudaipc_transport::cuda::{Device, DeviceBuffer, DeviceRegion};

pub(crate) static CAT: std::sync::LazyLock<gst::DebugCategory> = std::sync::LazyLock::new(|| {
    gst::DebugCategory::new(
        "cudaipcmemory",
        gst::DebugColorFlags::empty(),
        Some("CUDA IPC memory"),
    )
});

#[derive(Default)]
pub struct CudaAllocator {
    device: OnceLock<Arc<Device>>,
}

impl CudaAllocator {
    pub(super) fn set_device(&self, device: Arc<Device>) {
        let _ = self.device.set(device);
    }

    pub(super) fn device(&self) -> Arc<Device> {
        self.device
            .get()
            .expect("allocator created through for_device")
            .clone()
    }
}

#[glib::object_subclass]
impl ObjectSubclass for CudaAllocator {
    const NAME: &'static str = "GstRsCudaIpcAllocator";
    type Type = super::CudaAllocator;
    type ParentType = gst::Allocator;
}

impl ObjectImpl for CudaAllocator {
    fn constructed(&self) {
        self.parent_constructed();
        let allocator: *mut ffi::GstAllocator =
            self.obj().upcast_ref::<gst::Allocator>().to_glib_none().0;
        // SAFETY: we are the only user of the freshly constructed allocator;
        // the vfuncs below match GstAllocator's signatures, and mem_type
        // points to a static NUL-terminated string.
        unsafe {
            (*allocator).mem_type = c"CudaIpcMemory".as_ptr();
            (*allocator).mem_map_full = Some(mem_map_full);
            (*allocator).mem_unmap_full = Some(mem_unmap_full);
            (*allocator).mem_copy = Some(mem_copy);
            (*allocator).mem_share = Some(mem_share);
            (*allocator).mem_is_span = Some(mem_is_span);
        }
    }
}

impl GstObjectImpl for CudaAllocator {}

// SAFETY: alloc and free below create and destroy `CudaMemory` objects only.
unsafe impl AllocatorImpl for CudaAllocator {
    unsafe fn alloc(&self, size: usize, _params: &gst::AllocationParams) -> *mut ffi::GstMemory {
        match DeviceBuffer::new(&self.device(), size) {
            Ok(buffer) => wrap(&self.obj(), buffer.into_region(), None, false).into_glib_ptr(),
            Err(e) => {
                gst::error!(
                    CAT,
                    imp = self,
                    "cannot allocate {size} bytes of device memory: {e}"
                );
                std::ptr::null_mut()
            }
        }
    }

    unsafe fn free(&self, memory: *mut ffi::GstMemory) {
        // SAFETY: every memory of this allocator is a boxed CudaMemory made
        // by `new_memory`; GStreamer calls free exactly once.
        drop(unsafe { Box::from_raw(memory as *mut CudaMemory) });
    }
}

/// A host copy of the memory while it is mapped.
struct Staging {
    data: Vec<u8>,
    maps: u32,
    written: bool,
}

/// GstMemory followed by what we need; `#[repr(C)]` so that a pointer to it
/// is a pointer to its GstMemory.
#[repr(C)]
struct CudaMemory {
    memory: ffi::GstMemory,
    /// The (parent's) whole allocation, `maxsize` bytes from offset 0; it
    /// keeps the device memory alive, shares included.
    whole: DeviceRegion,
    /// Kept until the memory is freed: a held frame, say.
    _guard: Option<Box<dyn Any + Send + Sync>>,
    staging: Mutex<Option<Staging>>,
}

/// Which bytes of its allocation a memory covers: `size` bytes from
/// `offset`, of `maxsize`.
struct Extent {
    maxsize: usize,
    offset: usize,
    size: usize,
}

fn new_memory(
    allocator: &super::CudaAllocator,
    parent: Option<*mut ffi::GstMemory>,
    whole: DeviceRegion,
    extent: Extent,
    guard: Option<Box<dyn Any + Send + Sync>>,
    readonly: bool,
) -> *mut ffi::GstMemory {
    let Extent {
        maxsize,
        offset,
        size,
    } = extent;
    let memory = Box::into_raw(Box::new(CudaMemory {
        // SAFETY: all-zero is the state gst_memory_init expects to fill.
        memory: unsafe { std::mem::zeroed() },
        whole,
        _guard: guard,
        staging: Mutex::new(None),
    }));
    let mut flags: ffi::GstMemoryFlags = 0;
    if readonly {
        flags |= ffi::GST_MINI_OBJECT_FLAG_LOCK_READONLY | ffi::GST_MEMORY_FLAG_READONLY;
    }
    // SAFETY: `memory` is a fresh, properly sized allocation starting with a
    // GstMemory; the allocator and parent are valid (gst_memory_init takes
    // its own references).
    unsafe {
        ffi::gst_memory_init(
            memory as *mut ffi::GstMemory,
            flags,
            allocator.upcast_ref::<gst::Allocator>().to_glib_none().0,
            parent.unwrap_or(std::ptr::null_mut()),
            maxsize,
            255,
            offset,
            size,
        );
    }
    memory as *mut ffi::GstMemory
}

pub(super) fn wrap(
    allocator: &super::CudaAllocator,
    region: DeviceRegion,
    guard: Option<Box<dyn Any + Send + Sync>>,
    readonly: bool,
) -> gst::Memory {
    let size = region.len();
    let extent = Extent {
        maxsize: size,
        offset: 0,
        size,
    };
    let raw = new_memory(allocator, None, region, extent, guard, readonly);
    // SAFETY: new_memory returns an owned, initialised GstMemory.
    unsafe { from_glib_full(raw) }
}

/// The CudaMemory behind `memory`, if it is one of ours.
fn as_cuda(memory: &gst::MemoryRef) -> Option<&CudaMemory> {
    let allocator = memory.allocator()?;
    if !allocator.is::<super::CudaAllocator>() {
        return None;
    }
    // SAFETY: every memory of CudaAllocator is a CudaMemory (repr(C), the
    // GstMemory first).
    Some(unsafe { &*(memory.as_ptr() as *const CudaMemory) })
}

pub(super) fn device_memory(memory: &gst::MemoryRef) -> Option<DeviceMemoryInfo> {
    let cuda = as_cuda(memory)?;
    Some(DeviceMemoryInfo {
        ptr: cuda.whole.ptr() + memory.offset() as u64,
        size: memory.size(),
        device: cuda.whole.device().clone(),
    })
}

pub(super) fn device_region(memory: &gst::MemoryRef) -> Option<DeviceRegion> {
    as_cuda(memory)?.whole.sub(memory.offset(), memory.size())
}

unsafe extern "C" fn mem_map_full(
    memory: *mut ffi::GstMemory,
    info: *mut ffi::GstMapInfo,
    maxsize: usize,
) -> *mut c_void {
    // SAFETY: GStreamer calls this on our own memories only.
    let cuda = unsafe { &*(memory as *const CudaMemory) };
    // SAFETY: `info` is valid for the duration of the call.
    let flags = unsafe { (*info).flags };
    let mut staging = cuda.staging.lock().unwrap();
    if staging.is_none() {
        let mut data = vec![0u8; maxsize];
        // Stream-ordered download: earlier kernels on the memory finish
        // first.
        if let Err(e) = cuda.whole.download(&mut data) {
            gst::error!(CAT, "cannot map CUDA memory for reading: {e}");
            return std::ptr::null_mut();
        }
        *staging = Some(Staging {
            data,
            maps: 0,
            written: false,
        });
    }
    let s = staging.as_mut().unwrap();
    s.maps += 1;
    if flags & ffi::GST_MAP_WRITE != 0 {
        s.written = true;
    }
    s.data.as_mut_ptr() as *mut c_void
}

unsafe extern "C" fn mem_unmap_full(memory: *mut ffi::GstMemory, _info: *mut ffi::GstMapInfo) {
    // SAFETY: GStreamer calls this on our own memories only.
    let cuda = unsafe { &*(memory as *const CudaMemory) };
    let mut staging = cuda.staging.lock().unwrap();
    let Some(s) = staging.as_mut() else { return };
    s.maps = s.maps.saturating_sub(1);
    if s.maps > 0 {
        return;
    }
    if s.written
        && let Err(e) = cuda.whole.upload(&s.data)
    {
        gst::error!(CAT, "cannot write back mapped CUDA memory: {e}");
    }
    *staging = None;
}

unsafe extern "C" fn mem_copy(
    memory: *mut ffi::GstMemory,
    offset: isize,
    size: isize,
) -> *mut ffi::GstMemory {
    // SAFETY: GStreamer calls this on our own memories only.
    let cuda = unsafe { &*(memory as *const CudaMemory) };
    // SAFETY: as above, the GstMemory fields are initialised.
    let (mem_offset, mem_size, allocator) =
        unsafe { ((*memory).offset, (*memory).size, (*memory).allocator) };
    let start = (mem_offset as isize + offset) as usize;
    let size = if size < 0 {
        mem_size - offset as usize
    } else {
        size as usize
    };
    // SAFETY: the allocator of our memory is a CudaAllocator.
    let allocator: Borrowed<gst::Allocator> = unsafe { from_glib_borrow(allocator) };
    let Some(allocator) = allocator.downcast_ref::<super::CudaAllocator>() else {
        return std::ptr::null_mut();
    };
    let Some(source) = cuda.whole.sub(start, size) else {
        gst::error!(
            CAT,
            "cannot copy {size} bytes from {start}: out of the memory"
        );
        return std::ptr::null_mut();
    };
    let copy = match DeviceBuffer::new(cuda.whole.device(), size) {
        Ok(b) => b.into_region(),
        Err(e) => {
            gst::error!(CAT, "cannot copy CUDA memory: {e}");
            return std::ptr::null_mut();
        }
    };
    if let Err(e) = copy.copy_from(&source) {
        gst::error!(CAT, "cannot copy CUDA memory: {e}");
        return std::ptr::null_mut();
    }
    let extent = Extent {
        maxsize: size,
        offset: 0,
        size,
    };
    new_memory(allocator, None, copy, extent, None, false)
}

unsafe extern "C" fn mem_share(
    memory: *mut ffi::GstMemory,
    offset: isize,
    size: isize,
) -> *mut ffi::GstMemory {
    // SAFETY: GStreamer calls this on our own memories only.
    let cuda = unsafe { &*(memory as *const CudaMemory) };
    // SAFETY: the GstMemory fields are initialised.
    let (mem_offset, mem_size, maxsize, parent, allocator, flags) = unsafe {
        (
            (*memory).offset,
            (*memory).size,
            (*memory).maxsize,
            (*memory).parent,
            (*memory).allocator,
            (*memory).mini_object.flags,
        )
    };
    let size = if size < 0 {
        mem_size - offset as usize
    } else {
        size as usize
    };
    let parent = if parent.is_null() { memory } else { parent };
    // SAFETY: the allocator of our memory is a CudaAllocator.
    let allocator: Borrowed<gst::Allocator> = unsafe { from_glib_borrow(allocator) };
    let Some(allocator) = allocator.downcast_ref::<super::CudaAllocator>() else {
        return std::ptr::null_mut();
    };
    let readonly = flags & ffi::GST_MEMORY_FLAG_READONLY != 0;
    let extent = Extent {
        maxsize,
        offset: (mem_offset as isize + offset) as usize,
        size,
    };
    new_memory(
        allocator,
        Some(parent),
        cuda.whole.clone(),
        extent,
        None,
        readonly,
    )
}

unsafe extern "C" fn mem_is_span(
    _a: *mut ffi::GstMemory,
    _b: *mut ffi::GstMemory,
    _offset: *mut usize,
) -> glib::ffi::gboolean {
    glib::ffi::GFALSE
}
