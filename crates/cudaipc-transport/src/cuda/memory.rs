// Device allocations this process owns and those it imports from another
// process (legacy IPC handles), and what identifies an exportable one.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys;

use super::{Device, DeviceRegion, IPC_HANDLE_BYTES, Result, check};

/// Device memory from plain `cuMemAlloc` (never stream-ordered memory, which
/// `cuIpcGetMemHandle` rejects).
pub struct DeviceBuffer {
    device: Arc<Device>,
    ptr: u64,
    size: usize,
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("size", &self.size)
            .finish()
    }
}

impl DeviceBuffer {
    pub fn new(device: &Arc<Device>, size: usize) -> Result<Self> {
        device.bind()?;
        let mut ptr = 0;
        // SAFETY: valid out pointer; the context is bound.
        check("cuMemAlloc", unsafe {
            sys::cuMemAlloc_v2(&mut ptr, size.max(1))
        })?;
        Ok(Self {
            device: device.clone(),
            ptr,
            size,
        })
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The whole buffer as a region that keeps it allocated.
    pub fn into_region(self) -> DeviceRegion {
        let size = self.size;
        self.into_leading_region(size)
    }

    /// The first `len` bytes (at most the buffer's size) as a region that
    /// keeps the whole buffer allocated.
    pub fn into_leading_region(self, len: usize) -> DeviceRegion {
        let (device, ptr, len) = (self.device.clone(), self.ptr, len.min(self.size));
        // SAFETY: the region owns the buffer, so the `len` bytes (at most
        // its size) at `ptr` stay allocated as long as it lives.
        unsafe { DeviceRegion::from_raw_parts(&device, ptr, len, Arc::new(self)) }
    }
}

/// The IPC handle of the allocation starting at `ptr` (from `cuMemAlloc` or
/// `cuMemAllocPitch`, ours or another library's in this process).
///
/// # Safety
/// The allocation must stay allocated while other processes may open the
/// handle: they reach the memory through it. [`DeviceRegion::ipc_handle`]
/// is the safe form.
pub unsafe fn ipc_handle_of(device: &Arc<Device>, ptr: u64) -> Result<[u8; IPC_HANDLE_BYTES]> {
    device.bind()?;
    let mut handle = sys::CUipcMemHandle {
        reserved: [0; IPC_HANDLE_BYTES],
    };
    // SAFETY: valid out pointer; the driver rejects pointers it cannot
    // export.
    check("cuIpcGetMemHandle", unsafe {
        sys::cuIpcGetMemHandle(&mut handle, ptr)
    })?;
    Ok(handle.reserved.map(|b| b as u8))
}

/// Which allocation a device pointer is: the allocation's process-wide
/// unique id (a freed and reallocated buffer at the same address gets a new
/// one) and its extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AllocationKey {
    pub base: u64,
    pub buffer_id: u64,
}

/// The allocation `ptr` starts, if it starts one that CUDA IPC can export;
/// `Ok(None)` for a pointer into the middle of an allocation, one CUDA does
/// not know, or memory IPC cannot share (stream-ordered, virtual memory
/// management, host memory). One driver call: it runs for every lent frame.
/// Safe for any address: it only reads the driver's records, never the
/// memory.
pub fn exportable_allocation(
    device: &Arc<Device>,
    ptr: u64,
) -> Result<Option<(AllocationKey, usize)>> {
    device.bind()?;
    let (mut base, mut size, mut capable, mut buffer_id) =
        (0u64, 0usize, 0 as std::ffi::c_int, 0u64);
    let mut attributes = [
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID,
    ];
    let mut data: [*mut std::ffi::c_void; 4] = [
        (&mut base as *mut u64).cast(),
        (&mut size as *mut usize).cast(),
        (&mut capable as *mut std::ffi::c_int).cast(),
        (&mut buffer_id as *mut u64).cast(),
    ];
    // SAFETY: each data pointer is valid and of the type its attribute is
    // written as (CUdeviceptr, size_t, an int-sized boolean, unsigned long
    // long); a pointer CUDA does not know leaves them zero.
    check("cuPointerGetAttributes", unsafe {
        sys::cuPointerGetAttributes(
            attributes.len() as std::ffi::c_uint,
            attributes.as_mut_ptr(),
            data.as_mut_ptr(),
            ptr,
        )
    })?;
    if base != ptr || capable == 0 {
        return Ok(None);
    }
    Ok(Some((AllocationKey { base, buffer_id }, size)))
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: the pointer came from cuMemAlloc and is freed once.
            unsafe { sys::cuMemFree_v2(self.ptr) };
        }
    }
}

/// Device memory of another process, opened from its IPC handle; closed on
/// drop.
pub struct ImportedMemory {
    device: Arc<Device>,
    ptr: u64,
    /// Bytes mapped, as the driver reports them (not as the other process
    /// announces them).
    size: usize,
}

impl fmt::Debug for ImportedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImportedMemory")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("size", &self.size)
            .finish()
    }
}

impl ImportedMemory {
    /// Opens a memory handle in `device`'s context. The memory may live on
    /// another device reachable by peer access (the driver enables it
    /// lazily; it also rejects a zero flag).
    pub fn open(device: &Arc<Device>, handle: &[u8; IPC_HANDLE_BYTES]) -> Result<Self> {
        device.bind()?;
        let handle = sys::CUipcMemHandle {
            reserved: handle.map(|b| b as std::ffi::c_char),
        };
        let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        let mut ptr = 0;
        // SAFETY: valid out pointer; the handle bytes are passed by value and
        // validated by the driver.
        check("cuIpcOpenMemHandle", unsafe {
            sys::cuIpcOpenMemHandle_v2(&mut ptr, handle, flags)
        })?;
        // Closed on drop from here on, also if the size query fails.
        let mut memory = Self {
            device: device.clone(),
            ptr,
            size: 0,
        };
        let (mut base, mut size) = (0u64, 0usize);
        // SAFETY: valid out pointers; `ptr` is the mapping just opened.
        check("cuMemGetAddressRange", unsafe {
            sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr)
        })?;
        // The mapping starts at `ptr`; anything else would be a driver bug,
        // and then only the bytes from `ptr` count.
        memory.size = size.saturating_sub((ptr - base.min(ptr)) as usize);
        Ok(memory)
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Bytes mapped from `ptr`, as the driver reports them.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The first `len` bytes (at most the mapping's size) as a region that
    /// keeps the mapping open.
    pub fn into_region(self, len: usize) -> DeviceRegion {
        let (device, ptr, len) = (self.device.clone(), self.ptr, len.min(self.size));
        // SAFETY: the region owns the mapping, of at least `len` bytes, so
        // they stay mapped as long as it lives.
        unsafe { DeviceRegion::from_raw_parts(&device, ptr, len, Arc::new(self)) }
    }
}

impl Drop for ImportedMemory {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: the pointer came from cuIpcOpenMemHandle, closed once.
            unsafe { sys::cuIpcCloseMemHandle(self.ptr) };
        }
    }
}
