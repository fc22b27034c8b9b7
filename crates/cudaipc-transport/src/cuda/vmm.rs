//! Memory shared by file descriptor rather than by legacy IPC handle: device
//! allocations of the virtual memory management API (`cuMemCreate`) exported
//! as POSIX file descriptors, which cross PID namespaces and go only to whom
//! the descriptor is given, and host memory registered for the GPU (the
//! timeline words that `cuStreamWriteValue64`/`cuStreamWaitValue64` use).
//!
//! On Windows the allocations are exported as NT handles
//! (`CU_MEM_HANDLE_TYPE_WIN32`, NVIDIA's recommendation for IPC there) with
//! an owner-only security descriptor; a handle reaches a consumer only
//! duplicated into it. Written to NVIDIA's documentation, never run on a
//! Windows GPU (docs/windows.md).

use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use cudaipc_channel::platform::Shareable;

use cudarc::driver::sys;

use super::{CudaError, Device, DeviceRegion, Result, check};

fn location(device: &Device) -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: device.ordinal(),
    }
}

fn allocation_properties(device: &Device) -> sys::CUmemAllocationProp {
    // SAFETY: an all-zero CUmemAllocationProp is valid (no flags, null
    // metadata pointer); the fields that matter are set below.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = HANDLE_TYPE;
    #[cfg(windows)]
    {
        prop.win32HandleMetaData = win32::object_attributes();
    }
    prop.location = location(device);
    prop
}

#[cfg(unix)]
const HANDLE_TYPE: sys::CUmemAllocationHandleType =
    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
#[cfg(windows)]
const HANDLE_TYPE: sys::CUmemAllocationHandleType =
    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_WIN32;

/// The "OS handle" the driver reads for `shareable`: a descriptor's number
/// on Linux, the NT handle itself on Windows.
/// The error of an exported handle that could not be kept from child
/// processes (close-on-exec, not inheritable).
fn unshared(e: std::io::Error) -> CudaError {
    CudaError::Call {
        call: "cuMemExportToShareableHandle",
        name: "its handle cannot be kept from child processes".into(),
        description: e.to_string(),
    }
}

fn os_handle(shareable: &Shareable) -> *mut c_void {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        shareable.as_raw_fd() as isize as *mut c_void
    }
    #[cfg(windows)]
    {
        use std::os::windows::io::AsRawHandle;
        shareable.as_raw_handle()
    }
}

#[cfg(windows)]
mod win32 {
    use std::ffi::c_void;
    use std::sync::OnceLock;

    /// OBJECT_ATTRIBUTES as the driver reads it for `win32HandleMetaData`.
    #[repr(C)]
    struct ObjectAttributes {
        length: u32,
        root_directory: *mut c_void,
        object_name: *mut c_void,
        attributes: u32,
        security_descriptor: *mut c_void,
        security_quality_of_service: *mut c_void,
    }

    struct Shared {
        attributes: ObjectAttributes,
        /// What `attributes` points to, kept alive with it.
        _descriptor: cudaipc_channel::platform::SecurityDescriptor,
    }
    // SAFETY: built once and only read afterwards (by the driver).
    unsafe impl Send for Shared {}
    // SAFETY: as above.
    unsafe impl Sync for Shared {}

    /// Attributes that let only this user open the exported handles (a
    /// consumer gets them duplicated by the producer); null, the driver's
    /// default security, if the descriptor cannot be built.
    pub fn object_attributes() -> *mut c_void {
        static ATTRIBUTES: OnceLock<Option<Shared>> = OnceLock::new();
        ATTRIBUTES
            .get_or_init(|| {
                let descriptor = cudaipc_channel::platform::owner_only_descriptor().ok()?;
                Some(Shared {
                    attributes: ObjectAttributes {
                        length: std::mem::size_of::<ObjectAttributes>() as u32,
                        root_directory: std::ptr::null_mut(),
                        object_name: std::ptr::null_mut(),
                        attributes: 0,
                        security_descriptor: descriptor.as_ptr(),
                        security_quality_of_service: std::ptr::null_mut(),
                    },
                    _descriptor: descriptor,
                })
            })
            .as_ref()
            .map_or(std::ptr::null_mut(), |shared| {
                &shared.attributes as *const ObjectAttributes as *mut c_void
            })
    }
}

/// `size` rounded up to the device's allocation granularity: the bytes a
/// shared allocation of `size` has, on both sides.
pub fn shareable_size(device: &Arc<Device>, size: usize) -> Result<usize> {
    device.bind()?;
    let prop = allocation_properties(device);
    let mut granularity = 0usize;
    // SAFETY: valid out pointer and properties.
    check("cuMemGetAllocationGranularity", unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut granularity,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    })?;
    Ok(size.max(1).next_multiple_of(granularity.max(1)))
}

/// A device allocation mapped into this process: created here (and
/// exportable) or imported from another process's descriptor. Unmapped and
/// released on drop.
pub struct SharedDeviceMemory {
    device: Arc<Device>,
    handle: sys::CUmemGenericAllocationHandle,
    /// Reserved addresses (0: none yet).
    ptr: u64,
    size: usize,
    mapped: bool,
    read_only: bool,
}

impl fmt::Debug for SharedDeviceMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedDeviceMemory")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("size", &self.size)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl SharedDeviceMemory {
    /// Allocates `shareable_size(size)` bytes on `device`, exportable as
    /// a file descriptor.
    pub fn new(device: &Arc<Device>, size: usize) -> Result<Self> {
        let size = shareable_size(device, size)?;
        let prop = allocation_properties(device);
        let mut handle = 0;
        // SAFETY: valid out pointer and properties; the context is bound
        // (by `shareable_size`).
        check("cuMemCreate", unsafe {
            sys::cuMemCreate(&mut handle, size, &prop, 0)
        })?;
        Self::map(device, handle, size, false)
    }

    /// Maps the allocation a producer exported as `fd`, `size` bytes
    /// (its `shareable_size`; the driver refuses a larger mapping than the
    /// allocation), for reading only where the driver allows it.
    pub fn import(device: &Arc<Device>, fd: &Shareable, size: usize) -> Result<Self> {
        device.bind()?;
        let mut handle = 0;
        // SAFETY: valid out pointer; the "OS handle" is the descriptor's
        // number (or the NT handle) itself, which the driver only reads (it
        // takes its own reference to the allocation).
        check("cuMemImportFromShareableHandle", unsafe {
            sys::cuMemImportFromShareableHandle(&mut handle, os_handle(fd), HANDLE_TYPE)
        })?;
        Self::map(device, handle, size, true)
    }

    /// Reserves addresses for `handle`'s allocation, maps it and grants the
    /// device access; releases the handle on failure.
    fn map(
        device: &Arc<Device>,
        handle: sys::CUmemGenericAllocationHandle,
        size: usize,
        read_only: bool,
    ) -> Result<Self> {
        // From here on, drop undoes what was done (a zero pointer: no
        // reservation yet).
        let mut memory = Self {
            device: device.clone(),
            handle,
            ptr: 0,
            size,
            mapped: false,
            read_only: false,
        };
        let mut ptr = 0;
        // SAFETY: valid out pointer; any address, default alignment.
        check("cuMemAddressReserve", unsafe {
            sys::cuMemAddressReserve(&mut ptr, size, 0, 0, 0)
        })?;
        memory.ptr = ptr;
        // SAFETY: the reservation just made, `size` bytes of the allocation
        // (the driver checks that it has them).
        check("cuMemMap", unsafe {
            sys::cuMemMap(ptr, size, 0, handle, 0)
        })?;
        memory.mapped = true;
        let grant = |flags| {
            let access = sys::CUmemAccessDesc {
                location: location(device),
                flags,
            };
            // SAFETY: the mapped range and one valid descriptor.
            check("cuMemSetAccess", unsafe {
                sys::cuMemSetAccess(ptr, size, &access, 1)
            })
        };
        memory.read_only =
            read_only && grant(sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ).is_ok();
        if !memory.read_only {
            grant(sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE)?;
        }
        Ok(memory)
    }

    /// A new descriptor of the allocation, for another process to import.
    pub fn export(&self) -> Result<Shareable> {
        self.device.bind()?;
        #[cfg(unix)]
        {
            use std::os::fd::FromRawFd;
            let mut fd: std::ffi::c_int = -1;
            // SAFETY: for POSIX descriptors the driver writes an int.
            check("cuMemExportToShareableHandle", unsafe {
                sys::cuMemExportToShareableHandle(
                    (&mut fd as *mut std::ffi::c_int).cast(),
                    self.handle,
                    HANDLE_TYPE,
                    0,
                )
            })?;
            // SAFETY: a descriptor the driver just opened for us.
            let fd = unsafe { Shareable::from_raw_fd(fd) };
            cudaipc_channel::platform::keep_from_children(&fd).map_err(unshared)?;
            Ok(fd)
        }
        #[cfg(windows)]
        {
            use std::os::windows::io::FromRawHandle;
            let mut handle: *mut c_void = std::ptr::null_mut();
            // SAFETY: for NT handles the driver writes a HANDLE.
            check("cuMemExportToShareableHandle", unsafe {
                sys::cuMemExportToShareableHandle(
                    (&mut handle as *mut *mut c_void).cast(),
                    self.handle,
                    HANDLE_TYPE,
                    0,
                )
            })?;
            // SAFETY: a handle the driver just opened for us.
            let handle = unsafe { Shareable::from_raw_handle(handle) };
            cudaipc_channel::platform::keep_from_children(&handle).map_err(unshared)?;
            Ok(handle)
        }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether this process can only read the memory (an imported
    /// allocation the driver mapped read-only).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The first `len` bytes (at most the mapping) as a region that keeps
    /// the memory mapped.
    pub fn region(self: &Arc<Self>, len: usize) -> DeviceRegion {
        let len = len.min(self.size);
        // SAFETY: the region holds the mapping of at least `len` bytes, so
        // they stay mapped as long as it lives (a read-only one faults on a
        // write instead of changing the producer's memory).
        unsafe { DeviceRegion::from_raw_parts(&self.device, self.ptr, len, self.clone()) }
    }
}

impl Drop for SharedDeviceMemory {
    fn drop(&mut self) {
        if self.device.bind().is_err() {
            return;
        }
        // SAFETY: undoes what `map` and the create/import did, each once:
        // the mapping, the reservation, the handle.
        unsafe {
            if self.mapped {
                sys::cuMemUnmap(self.ptr, self.size);
            }
            if self.ptr != 0 {
                sys::cuMemAddressFree(self.ptr, self.size);
            }
            sys::cuMemRelease(self.handle);
        }
    }
}

// SAFETY: the handle and addresses are plain numbers the driver accepts
// from any thread (with the context bound).
unsafe impl Send for SharedDeviceMemory {}
// SAFETY: see above; nothing is mutated through `&self`.
unsafe impl Sync for SharedDeviceMemory {}

/// Host memory of a shared mapping registered with the driver, so that the
/// device reads and writes it directly; unregistered on drop. The owner of
/// the mapping must keep it mapped as long as this lives.
pub struct HostRegistration {
    device: Arc<Device>,
    host: *mut c_void,
    device_ptr: u64,
    len: usize,
}

// SAFETY: the addresses are plain numbers; the driver calls made with them
// are thread-safe.
unsafe impl Send for HostRegistration {}
// SAFETY: see above.
unsafe impl Sync for HostRegistration {}

impl HostRegistration {
    /// # Safety
    /// `host` is a page-aligned, writable mapping of `len` bytes that stays
    /// mapped while the registration lives.
    pub unsafe fn new(device: &Arc<Device>, host: *mut u8, len: usize) -> Result<Self> {
        device.bind()?;
        let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
        // SAFETY: the caller's contract.
        check("cuMemHostRegister", unsafe {
            sys::cuMemHostRegister_v2(host.cast(), len, flags)
        })?;
        let mut registration = Self {
            device: device.clone(),
            host: host.cast(),
            device_ptr: 0,
            len,
        };
        let mut device_ptr = 0;
        // SAFETY: valid out pointer; the memory was just registered.
        check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut device_ptr, host.cast(), 0)
        })?;
        registration.device_ptr = device_ptr;
        Ok(registration)
    }

    /// The device address of the byte at `offset`.
    pub fn device_address(&self, offset: usize) -> Option<u64> {
        (offset < self.len).then(|| self.device_ptr + offset as u64)
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: registered in `new`, unregistered once.
            unsafe { sys::cuMemHostUnregister(self.host) };
        }
    }
}
