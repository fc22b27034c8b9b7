// Page-locked host memory mapped into the device's address space.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys;

use super::{Device, Result, check};

/// Page-locked host memory mapped into the device's address space: kernels
/// write results there and the host reads them without a copy or a sync.
pub struct MappedHostBuffer {
    device: Arc<Device>,
    host: *mut c_void,
    device_ptr: u64,
    size: usize,
}

// SAFETY: plain memory; concurrent access goes through atomics (see
// `words`).
unsafe impl Send for MappedHostBuffer {}
// SAFETY: see above.
unsafe impl Sync for MappedHostBuffer {}

impl MappedHostBuffer {
    pub fn new(device: &Arc<Device>, size: usize) -> Result<Self> {
        device.bind()?;
        let size = size.max(8).next_multiple_of(8);
        let mut host = std::ptr::null_mut();
        let mut device_ptr = 0;
        // SAFETY: valid out pointers; the context is bound.
        unsafe {
            check(
                "cuMemHostAlloc",
                sys::cuMemHostAlloc(
                    &mut host,
                    size,
                    sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
                ),
            )?;
            std::ptr::write_bytes(host as *mut u8, 0, size);
            if let Err(e) = check(
                "cuMemHostGetDevicePointer",
                sys::cuMemHostGetDevicePointer_v2(&mut device_ptr, host, 0),
            ) {
                sys::cuMemFreeHost(host);
                return Err(e);
            }
        }
        Ok(Self {
            device: device.clone(),
            host,
            device_ptr,
            size,
        })
    }

    pub fn device_ptr(&self) -> u64 {
        self.device_ptr
    }

    /// The buffer as 32-bit atomic words, as kernels update it.
    pub fn words(&self) -> &[std::sync::atomic::AtomicU32] {
        // SAFETY: the allocation is 8-byte aligned (page aligned, in fact),
        // lives as long as `self`, and is only accessed atomically here.
        unsafe {
            std::slice::from_raw_parts(
                self.host as *const std::sync::atomic::AtomicU32,
                self.size / 4,
            )
        }
    }
}

impl Drop for MappedHostBuffer {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: allocated by cuMemHostAlloc, freed once.
            unsafe { sys::cuMemFreeHost(self.host) };
        }
    }
}
