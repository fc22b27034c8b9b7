// A bounded span of device memory that keeps its owner alive: what safe code
// copies into and out of, so that it cannot reach past an allocation or use
// one after it is freed.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use super::{Device, IPC_HANDLE_BYTES, Result, Stream};

/// `len` bytes of device memory at `ptr` on `device`, valid for as long as
/// the region (or a clone) exists: it holds a reference to the memory's
/// owner. Only the memory owners make one ([`super::DeviceBuffer`],
/// [`super::ImportedMemory`], this plugin's `CudaIpcMemory`, and, through the
/// unsafe [`DeviceRegion::from_raw_parts`], owners the compiler cannot see).
#[derive(Clone)]
pub struct DeviceRegion {
    device: Arc<Device>,
    ptr: u64,
    len: usize,
    _owner: Arc<dyn Any + Send + Sync>,
}

impl fmt::Debug for DeviceRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceRegion")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("device", &self.device.ordinal())
            .finish()
    }
}

impl DeviceRegion {
    /// A region over memory whose lifetime `owner` stands for.
    ///
    /// # Safety
    /// `ptr` must be a device address in `device`'s context, valid for
    /// reads and writes of `len` bytes for as long as `owner` (which the
    /// region keeps) is alive.
    pub unsafe fn from_raw_parts(
        device: &Arc<Device>,
        ptr: u64,
        len: usize,
        owner: Arc<dyn Any + Send + Sync>,
    ) -> Self {
        Self {
            device: device.clone(),
            ptr,
            len,
            _owner: owner,
        }
    }

    /// Device address of the first byte (for kernel arguments and metas).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// `len` bytes from `offset`, if they lie within this region.
    pub fn sub(&self, offset: usize, len: usize) -> Option<Self> {
        let end = offset.checked_add(len)?;
        (end <= self.len).then(|| Self {
            ptr: self.ptr + offset as u64,
            len,
            ..self.clone()
        })
    }

    fn stream(&self) -> Stream<'_> {
        self.device.stream()
    }

    fn check_fits(&self, bytes: usize, what: &str) -> Result<()> {
        if bytes > self.len {
            return Err(super::CudaError::Call {
                call: "DeviceRegion",
                name: "out of bounds".into(),
                description: format!("{what} of {bytes} bytes into a region of {}", self.len),
            });
        }
        Ok(())
    }

    /// Copies `src` to the start of the region and waits until `src` may be
    /// reused (ordered after the shared stream's earlier work).
    pub fn upload(&self, src: &[u8]) -> Result<()> {
        self.check_fits(src.len(), "upload")?;
        // SAFETY: the region is valid for `len` >= src.len() bytes while we
        // hold its owner.
        unsafe { self.stream().upload(self.ptr, src) }
    }

    /// Copies the start of the region into `dst` once the shared stream's
    /// earlier work is done.
    pub fn download(&self, dst: &mut [u8]) -> Result<()> {
        self.check_fits(dst.len(), "download")?;
        // SAFETY: as in `upload`.
        unsafe { self.stream().download(dst, self.ptr) }
    }

    /// Fills the region with `value`, ordered on the shared stream.
    pub fn memset(&self, value: u8) -> Result<()> {
        // SAFETY: the whole region is valid while we hold its owner.
        unsafe { self.stream().memset(self.ptr, value, self.len) }
    }

    /// Copies all of `src` to the start of the region, ordered on this
    /// region's device's shared stream.
    pub fn copy_from(&self, src: &DeviceRegion) -> Result<()> {
        self.check_fits(src.len, "copy")?;
        // SAFETY: both regions are valid for the bytes copied while we hold
        // their owners.
        unsafe {
            self.stream()
                .copy_device_to_device(self.ptr, src.ptr, src.len)
        }
    }

    /// The IPC handle of the allocation the region starts (the driver
    /// rejects an address that starts none it can export).
    pub fn ipc_handle(&self) -> Result<[u8; IPC_HANDLE_BYTES]> {
        // SAFETY: the region's memory is allocated while we hold its owner.
        unsafe { super::ipc_handle_of(&self.device, self.ptr) }
    }
}
