//! Thin safe wrappers over the CUDA driver API (cudarc's `driver::sys`) for
//! what this plugin needs: the primary context, one shared stream per device,
//! plain device allocations, IPC memory and event handles, copies, pinned
//! host memory, and NVRTC-compiled modules.
//!
//! Every entry point checks that the driver library is present first: a
//! machine without CUDA gets a `CudaError`, never a panic. No GStreamer here.

mod module;
pub mod nvrtc;
mod region;
mod vmm;

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{CStr, c_void};
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex};

use cudarc::driver::sys;

pub use module::{KernelArgs, Module, load_module};
pub use region::DeviceRegion;
pub use vmm::{HostRegistration, SharedDeviceMemory};

/// Size of a CUDA IPC handle (memory or event).
pub const IPC_HANDLE_BYTES: usize = 64;

#[derive(Debug, Clone)]
pub enum CudaError {
    /// No driver library (libcuda.so.1, nvcuda.dll) could be loaded.
    NoDriver,
    /// The driver is there but reports no usable device.
    NoDevice(String),
    /// A driver call failed.
    Call {
        call: &'static str,
        name: String,
        description: String,
    },
    /// NVRTC is missing or compilation failed.
    Nvrtc(String),
}

/// The file name of the driver library that cudarc loads.
const DRIVER_LIBRARY: &str = if cfg!(windows) {
    "nvcuda.dll"
} else {
    "libcuda.so.1"
};

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::NoDriver => write!(
                f,
                "the CUDA driver library ({DRIVER_LIBRARY}) was not found: install the NVIDIA driver"
            ),
            CudaError::NoDevice(msg) => write!(f, "no usable CUDA device: {msg}"),
            CudaError::Call {
                call,
                name,
                description,
            } => write!(f, "{call} failed: {name} ({description})"),
            CudaError::Nvrtc(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for CudaError {}

pub type Result<T> = std::result::Result<T, CudaError>;

fn error_text(code: sys::CUresult) -> (String, String) {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    let mut text: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: only called after the driver library was found to be present;
    // both functions write a pointer to a static string or leave it null.
    unsafe {
        sys::cuGetErrorName(code, &mut name);
        sys::cuGetErrorString(code, &mut text);
    }
    let to_string = |p: *const std::ffi::c_char| {
        if p.is_null() {
            format!("{code:?}")
        } else {
            // SAFETY: the driver returns NUL-terminated static strings.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    (to_string(name), to_string(text))
}

/// A query's answer: done, not yet (`CUDA_ERROR_NOT_READY`), or an error.
fn query_done(call: &'static str, code: sys::CUresult) -> Result<bool> {
    if code == sys::CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check(call, code).map(|()| true)
}

/// `Ok` for `CUDA_SUCCESS`, else the error of driver call `call`.
pub fn check(call: &'static str, code: sys::CUresult) -> Result<()> {
    if code == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        let (name, description) = error_text(code);
        Err(CudaError::Call {
            call,
            name,
            description,
        })
    }
}

static DRIVER: LazyLock<Result<()>> = LazyLock::new(|| {
    // SAFETY: is_culib_present only tries to dlopen the library.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaError::NoDriver);
    }
    // SAFETY: the library is present; cuInit has no other precondition.
    let code = unsafe { sys::cuInit(0) };
    if code != sys::CUresult::CUDA_SUCCESS {
        let (name, description) = error_text(code);
        return Err(CudaError::NoDevice(format!(
            "cuInit failed: {name} ({description})"
        )));
    }
    Ok(())
});

/// Loads and initialises the driver once; every wrapper calls this first.
pub fn driver() -> Result<()> {
    DRIVER.clone()
}

/// Number of CUDA devices; 0 without a driver.
pub fn device_count() -> usize {
    if driver().is_err() {
        return 0;
    }
    let mut count = 0;
    // SAFETY: the driver is initialised; `count` is a valid out pointer.
    let code = unsafe { sys::cuDeviceGetCount(&mut count) };
    if code == sys::CUresult::CUDA_SUCCESS {
        count.max(0) as usize
    } else {
        0
    }
}

/// Whether a CUDA device can be used (what `transport=auto` asks).
pub fn is_available() -> bool {
    device_count() > 0
}

/// One CUDA device with its retained primary context and the stream all
/// elements of this plugin in this process share, so that their GPU work is
/// ordered without host synchronisation.
pub struct Device {
    ordinal: i32,
    device: sys::CUdevice,
    context: sys::CUcontext,
    stream: sys::CUstream,
    uuid: [u8; 16],
    name: String,
    compute_capability: (i32, i32),
    mps: bool,
    total_memory: usize,
    /// The event [`Device::order_streams`] re-records (null until first
    /// used); the lock spans its record and the wait on it.
    order_event: Mutex<sys::CUevent>,
}

// SAFETY: CUDA contexts and streams may be used from any thread once made
// current there, which `bind` does before every use.
unsafe impl Send for Device {}
// SAFETY: see above; the handles are immutable after creation.
unsafe impl Sync for Device {}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .finish()
    }
}

static DEVICES: LazyLock<Mutex<HashMap<i32, Arc<Device>>>> = LazyLock::new(Default::default);

thread_local! {
    static CURRENT: Cell<sys::CUcontext> = const { Cell::new(std::ptr::null_mut()) };
}

/// For GPU tests: the first CUDA device, or `None` after a loud
/// `SKIPPED: no CUDA device (TEST: why)` line on stderr (past a test
/// harness's output capture). With `CUDAIPC_REQUIRE_GPU=1` in the environment
/// a missing device panics instead, so that a GPU host cannot skip silently.
pub fn gpu_or_skip(test: &str) -> Option<Arc<Device>> {
    match Device::get(0) {
        Ok(device) => Some(device),
        Err(e) => {
            if std::env::var("CUDAIPC_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("{test}: CUDAIPC_REQUIRE_GPU=1 but no CUDA device: {e}");
            }
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED: no CUDA device ({test}: {e})");
            None
        }
    }
}

impl Device {
    /// The device with this ordinal, opened once per process.
    pub fn get(ordinal: i32) -> Result<Arc<Device>> {
        driver()?;
        let mut devices = DEVICES.lock().unwrap();
        if let Some(device) = devices.get(&ordinal) {
            return Ok(device.clone());
        }
        let count = device_count();
        if ordinal < 0 || ordinal as usize >= count {
            return Err(CudaError::NoDevice(format!(
                "device {ordinal} does not exist ({count} device(s) visible)"
            )));
        }
        let device = Arc::new(Self::open(ordinal)?);
        devices.insert(ordinal, device.clone());
        Ok(device)
    }

    /// The device whose UUID is `uuid`, if this process sees it.
    pub fn find_by_uuid(uuid: &[u8; 16]) -> Result<Option<i32>> {
        driver()?;
        for ordinal in 0..device_count() as i32 {
            let mut dev = 0;
            let mut id = sys::CUuuid { bytes: [0; 16] };
            // SAFETY: valid out pointers; ordinal is in range.
            unsafe {
                check("cuDeviceGet", sys::cuDeviceGet(&mut dev, ordinal))?;
                check("cuDeviceGetUuid", sys::cuDeviceGetUuid_v2(&mut id, dev))?;
            }
            if id.bytes.map(|b| b as u8) == *uuid {
                return Ok(Some(ordinal));
            }
        }
        Ok(None)
    }

    fn open(ordinal: i32) -> Result<Self> {
        let mut device = 0;
        let mut context = std::ptr::null_mut();
        let mut stream = std::ptr::null_mut();
        let mut uuid = sys::CUuuid { bytes: [0; 16] };
        let mut name = [0 as std::ffi::c_char; 256];
        let (mut major, mut minor) = (0, 0);
        let mut mps = 0;
        let mut total_memory = 0usize;
        // SAFETY: the driver is initialised and every pointer is a valid out
        // parameter of the right type.
        unsafe {
            check("cuDeviceGet", sys::cuDeviceGet(&mut device, ordinal))?;
            check(
                "cuDevicePrimaryCtxRetain",
                sys::cuDevicePrimaryCtxRetain(&mut context, device),
            )?;
            check("cuCtxSetCurrent", sys::cuCtxSetCurrent(context))?;
            CURRENT.with(|c| c.set(context));
            check(
                "cuStreamCreate",
                sys::cuStreamCreate(
                    &mut stream,
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                ),
            )?;
            check(
                "cuDeviceGetUuid",
                sys::cuDeviceGetUuid_v2(&mut uuid, device),
            )?;
            check(
                "cuDeviceGetName",
                sys::cuDeviceGetName(name.as_mut_ptr(), 255, device),
            )?;
            check(
                "cuDeviceTotalMem",
                sys::cuDeviceTotalMem_v2(&mut total_memory, device),
            )?;
            check(
                "cuDeviceGetAttribute",
                sys::cuDeviceGetAttribute(
                    &mut major,
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                    device,
                ),
            )?;
            check(
                "cuDeviceGetAttribute",
                sys::cuDeviceGetAttribute(
                    &mut minor,
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                    device,
                ),
            )?;
        }
        // SAFETY: valid out pointer and device; older drivers without the
        // attribute report an error, which means "no MPS".
        let mps_known = unsafe {
            sys::cuDeviceGetAttribute(
                &mut mps,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MPS_ENABLED,
                device,
            )
        } == sys::CUresult::CUDA_SUCCESS;
        // SAFETY: cuDeviceGetName wrote a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(Self {
            ordinal,
            device,
            context,
            stream,
            uuid: uuid.bytes.map(|b| b as u8),
            name,
            compute_capability: (major, minor),
            mps: mps_known && mps != 0,
            total_memory,
            order_event: Mutex::new(std::ptr::null_mut()),
        })
    }

    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    pub fn uuid(&self) -> [u8; 16] {
        self.uuid
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn compute_capability(&self) -> (i32, i32) {
        self.compute_capability
    }

    /// The device's memory in bytes.
    pub fn total_memory(&self) -> usize {
        self.total_memory
    }

    /// Whether this process's contexts on the device go through the NVIDIA
    /// Multi-Process Service.
    pub fn mps_enabled(&self) -> bool {
        self.mps
    }

    /// Whether streams on this device can write and wait for 64-bit values
    /// in memory (`cuStreamWriteValue64`, `cuStreamWaitValue64`).
    pub fn has_stream_value_ops(&self) -> bool {
        let mut supported = 0;
        // SAFETY: valid out pointer and device; an error means "no".
        let known = unsafe {
            sys::cuDeviceGetAttribute(
                &mut supported,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                self.device,
            )
        } == sys::CUresult::CUDA_SUCCESS;
        known && supported != 0
    }

    /// Whether the GPU shares the system's memory (`CU_DEVICE_ATTRIBUTE_INTEGRATED`:
    /// Jetson's Tegra), which has no legacy CUDA IPC (`cuIpc*`) handles.
    pub fn is_integrated(&self) -> bool {
        let mut integrated = 0;
        // SAFETY: valid out pointer and device; an error means "no".
        let known = unsafe {
            sys::cuDeviceGetAttribute(
                &mut integrated,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_INTEGRATED,
                self.device,
            )
        } == sys::CUresult::CUDA_SUCCESS;
        known && integrated != 0
    }

    /// Makes the primary context current on this thread (cheap if it is).
    pub fn bind(&self) -> Result<()> {
        if CURRENT.with(|c| c.get()) == self.context {
            // Another library may have changed it behind our back: ask.
            let mut current = std::ptr::null_mut();
            // SAFETY: valid out pointer.
            unsafe { sys::cuCtxGetCurrent(&mut current) };
            if current == self.context {
                return Ok(());
            }
        }
        // SAFETY: the context is retained for the life of the process.
        check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(self.context)
        })?;
        CURRENT.with(|c| c.set(self.context));
        Ok(())
    }

    /// Makes later work on `waiter` wait, on the GPU, for the work queued on
    /// `signaller` so far: one event of the device's own, recorded on the
    /// one and waited for by the other. A wait captures the record made
    /// before it, so re-recording the event for the next pair is safe; no
    /// event is created or destroyed per call.
    ///
    /// # Safety
    /// Both are live `CUstream`s of this device's primary context (or
    /// `CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD`).
    pub unsafe fn order_streams(
        &self,
        waiter: sys::CUstream,
        signaller: sys::CUstream,
    ) -> Result<()> {
        self.bind()?;
        let mut event = self.order_event.lock().unwrap_or_else(|e| e.into_inner());
        if event.is_null() {
            let mut raw = std::ptr::null_mut();
            // SAFETY: valid out pointer; the context is bound.
            check("cuEventCreate", unsafe {
                sys::cuEventCreate(&mut raw, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
            })?;
            *event = raw;
        }
        // SAFETY: the caller's streams; the event is this context's and
        // lives as long as the device (never destroyed).
        unsafe {
            check("cuEventRecord", sys::cuEventRecord(*event, signaller))?;
            check(
                "cuStreamWaitEvent",
                sys::cuStreamWaitEvent(waiter, *event, 0),
            )
        }
    }

    /// Waits on the host until the work queued so far on every stream of
    /// the device's primary context is done.
    pub fn synchronize_context(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: the primary context is current on this thread (bind).
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }

    /// The stream shared by this plugin's elements on this device.
    pub fn stream(&self) -> Stream<'_> {
        Stream {
            device: self,
            raw: self.stream,
        }
    }

    /// A stream of this device's primary context that someone else created
    /// (a `GstCudaStream` of GStreamer's elements).
    ///
    /// # Safety
    /// `raw` is a stream of this device's primary context that stays alive
    /// while the returned handle is used.
    pub unsafe fn foreign_stream(&self, raw: sys::CUstream) -> Stream<'_> {
        Stream { device: self, raw }
    }

    pub fn raw_context(&self) -> sys::CUcontext {
        self.context
    }

    pub fn raw_device(&self) -> sys::CUdevice {
        self.device
    }

    /// Lets this device's context use every allocation of `peer`'s context
    /// directly (peer access); Ok if it already can.
    pub fn enable_peer_access(&self, peer: &Device) -> Result<()> {
        self.bind()?;
        // SAFETY: both primary contexts are retained for the life of the
        // process.
        let code = unsafe { sys::cuCtxEnablePeerAccess(peer.context, 0) };
        if code == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            return Ok(());
        }
        check("cuCtxEnablePeerAccess", code)
    }

    /// Whether this device can map memory of `peer`.
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool> {
        let mut can = 0;
        // SAFETY: valid out pointer and device handles.
        check("cuDeviceCanAccessPeer", unsafe {
            sys::cuDeviceCanAccessPeer(&mut can, self.device, peer.device)
        })?;
        Ok(can != 0)
    }
}

/// A borrowed stream handle with its device.
#[derive(Clone, Copy)]
pub struct Stream<'a> {
    device: &'a Device,
    raw: sys::CUstream,
}

impl Stream<'_> {
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    pub fn synchronize(&self) -> Result<()> {
        self.device.bind()?;
        // SAFETY: valid stream of the bound context.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.raw)
        })
    }

    /// Whether all work queued on the stream so far has completed.
    pub fn is_idle(&self) -> Result<bool> {
        self.device.bind()?;
        // SAFETY: valid stream of the bound context.
        query_done("cuStreamQuery", unsafe { sys::cuStreamQuery(self.raw) })
    }

    /// Makes later work on this stream wait for the last record of `event`.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.device.bind()?;
        // SAFETY: valid stream and event handles.
        check("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(self.raw, event.raw, 0)
        })
    }

    /// Writes `value` to the 8 bytes at device address `address` once the
    /// work queued before is done, and makes that work's memory writes
    /// visible before it.
    ///
    /// # Safety
    /// `address` is 8 aligned, writable device (or registered host) memory
    /// that stays mapped until the write has run.
    pub unsafe fn write_value(&self, address: u64, value: u64) -> Result<()> {
        self.device.bind()?;
        // SAFETY: the caller's contract; a valid stream.
        check("cuStreamWriteValue64", unsafe {
            sys::cuStreamWriteValue64_v2(
                self.raw,
                address,
                value,
                sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
            )
        })
    }

    /// Makes later work on this stream wait until the 8 bytes at `address`
    /// hold at least `value`.
    ///
    /// # Safety
    /// As for [`write_value`](Self::write_value), readable instead of
    /// writable; and someone will write a large enough value there (the
    /// stream waits for it forever).
    pub unsafe fn wait_value(&self, address: u64, value: u64) -> Result<()> {
        self.device.bind()?;
        // SAFETY: the caller's contract; a valid stream.
        check("cuStreamWaitValue64", unsafe {
            sys::cuStreamWaitValue64_v2(
                self.raw,
                address,
                value,
                sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
            )
        })
    }

    pub fn record(&self, event: &Event) -> Result<()> {
        self.device.bind()?;
        // SAFETY: valid stream and event handles.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(event.raw, self.raw)
        })
    }

    /// Device-to-device copy of `bytes`, ordered on this stream.
    ///
    /// # Safety
    /// `dst` and `src` must be device addresses valid for `bytes` bytes
    /// until the copy has run on the stream. [`DeviceRegion::copy_from`] is
    /// the safe form.
    pub unsafe fn copy_device_to_device(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.device.bind()?;
        // SAFETY: per this function's contract.
        check("cuMemcpyDtoDAsync", unsafe {
            sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, self.raw)
        })
    }

    /// Copies host memory to the device and waits until `src` may be reused.
    ///
    /// # Safety
    /// `dst` must be a device address valid for writes of `src.len()`
    /// bytes. [`DeviceRegion::upload`] is the safe form.
    pub unsafe fn upload(&self, dst: u64, src: &[u8]) -> Result<()> {
        self.device.bind()?;
        // SAFETY: `src` is valid for its length; `dst` for as many bytes
        // (this function's contract). The stream is synchronised before
        // `src` can be dropped.
        unsafe {
            check(
                "cuMemcpyHtoDAsync",
                sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr() as *const c_void, src.len(), self.raw),
            )?;
        }
        self.synchronize()
    }

    /// Copies device memory into `dst` once the stream's earlier work is done.
    ///
    /// # Safety
    /// `src` must be a device address valid for reads of `dst.len()` bytes.
    /// [`DeviceRegion::download`] is the safe form.
    pub unsafe fn download(&self, dst: &mut [u8], src: u64) -> Result<()> {
        self.device.bind()?;
        // SAFETY: `dst` is valid for its length; `src` for as many bytes
        // (this function's contract). We synchronise before returning, so
        // `dst` is written when the borrow ends.
        unsafe {
            check(
                "cuMemcpyDtoHAsync",
                sys::cuMemcpyDtoHAsync_v2(
                    dst.as_mut_ptr() as *mut c_void,
                    src,
                    dst.len(),
                    self.raw,
                ),
            )?;
        }
        self.synchronize()
    }

    /// 2D copy between device pitches (rows of `width` bytes).
    ///
    /// # Safety
    /// `dst` and `src` must be device addresses valid for `rows` rows of
    /// `width` bytes at their pitches (`pitch * (rows - 1) + width` bytes)
    /// until the copy has run on the stream.
    pub unsafe fn copy_2d_device(
        &self,
        dst: u64,
        dst_pitch: usize,
        src: u64,
        src_pitch: usize,
        width: usize,
        rows: usize,
    ) -> Result<()> {
        self.device.bind()?;
        let copy = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: src,
            srcArray: std::ptr::null_mut(),
            srcPitch: src_pitch,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst,
            dstArray: std::ptr::null_mut(),
            dstPitch: dst_pitch,
            WidthInBytes: width,
            Height: rows,
        };
        // SAFETY: per this function's contract.
        check("cuMemcpy2DAsync", unsafe {
            sys::cuMemcpy2DAsync_v2(&copy, self.raw)
        })
    }

    /// Fills `bytes` at `dst` with `value`, ordered on this stream.
    ///
    /// # Safety
    /// `dst` must be a device address valid for writes of `bytes` bytes
    /// until the fill has run. [`DeviceRegion::memset`] is the safe form.
    pub unsafe fn memset(&self, dst: u64, value: u8, bytes: usize) -> Result<()> {
        self.device.bind()?;
        // SAFETY: per this function's contract.
        check("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(dst, value, bytes, self.raw)
        })
    }
}

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
        let (device, ptr, size) = (self.device.clone(), self.ptr, self.size);
        // SAFETY: the region owns the buffer, so the `size` bytes at `ptr`
        // stay allocated as long as it lives.
        unsafe { DeviceRegion::from_raw_parts(&device, ptr, size, Arc::new(self)) }
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

/// A CUDA event without timing; interprocess when asked.
pub struct Event {
    device: Arc<Device>,
    raw: sys::CUevent,
}

// SAFETY: event handles may be used from any thread with the context bound.
unsafe impl Send for Event {}
// SAFETY: see above.
unsafe impl Sync for Event {}

impl Event {
    pub fn new(device: &Arc<Device>, interprocess: bool) -> Result<Self> {
        device.bind()?;
        let mut flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        if interprocess {
            flags |= sys::CUevent_flags::CU_EVENT_INTERPROCESS as u32;
        }
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out pointer; the context is bound.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut raw, flags)
        })?;
        Ok(Self {
            device: device.clone(),
            raw,
        })
    }

    /// Opens an event of another process from its IPC handle.
    pub fn open_ipc(device: &Arc<Device>, handle: &[u8; IPC_HANDLE_BYTES]) -> Result<Self> {
        device.bind()?;
        let handle = sys::CUipcEventHandle {
            reserved: handle.map(|b| b as std::ffi::c_char),
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out pointer; the driver validates the handle.
        check("cuIpcOpenEventHandle", unsafe {
            sys::cuIpcOpenEventHandle(&mut raw, handle)
        })?;
        Ok(Self {
            device: device.clone(),
            raw,
        })
    }

    pub fn ipc_handle(&self) -> Result<[u8; IPC_HANDLE_BYTES]> {
        self.device.bind()?;
        let mut handle = sys::CUipcEventHandle {
            reserved: [0; IPC_HANDLE_BYTES],
        };
        // SAFETY: valid out pointer; the event is interprocess (else the
        // driver returns an error).
        check("cuIpcGetEventHandle", unsafe {
            sys::cuIpcGetEventHandle(&mut handle, self.raw)
        })?;
        Ok(handle.reserved.map(|b| b as u8))
    }

    pub fn raw(&self) -> sys::CUevent {
        self.raw
    }

    /// Whether all work captured by the last record has completed.
    pub fn is_complete(&self) -> Result<bool> {
        self.device.bind()?;
        // SAFETY: valid event handle.
        query_done("cuEventQuery", unsafe { sys::cuEventQuery(self.raw) })
    }

    pub fn synchronize(&self) -> Result<()> {
        self.device.bind()?;
        // SAFETY: valid event handle.
        check("cuEventSynchronize", unsafe {
            sys::cuEventSynchronize(self.raw)
        })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: the event is destroyed once.
            unsafe { sys::cuEventDestroy_v2(self.raw) };
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_cuda_is_an_error_not_a_panic() {
        // On a machine with a GPU this opens device 0; without one, every
        // entry point reports an error.
        match Device::get(0) {
            Ok(device) => {
                assert!(is_available());
                assert!(!device.name().is_empty());
                let buffer = DeviceBuffer::new(&device, 1024).unwrap();
                assert!(buffer.ptr() != 0);
            }
            Err(e) => {
                eprintln!("SKIPPED: no CUDA device ({e})");
                assert!(!is_available());
                assert!(!e.to_string().is_empty());
            }
        }
        assert!(Device::get(-1).is_err());
        assert!(Device::get(4096).is_err());
    }
}
