//! Thin safe wrappers over the CUDA driver API (cudarc's `driver::sys`) for
//! what this plugin needs: the primary context, one shared stream per device,
//! plain device allocations, IPC memory and event handles, copies, pinned
//! host memory, and NVRTC-compiled modules.
//!
//! Every entry point checks that the driver library is present first: a
//! machine without CUDA gets a `CudaError`, never a panic. No GStreamer here.

mod context_limits;
mod event;
mod host_buffer;
mod memory;
mod module;
pub mod nvrtc;
mod region;
mod shared_import;
mod stream;
mod vmm;

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex};

use cudarc::driver::sys;

pub use event::Event;
pub use host_buffer::MappedHostBuffer;
pub use memory::{
    AllocationKey, DeviceBuffer, ImportedMemory, exportable_allocation, ipc_handle_of,
};
pub use module::{KernelArgs, Module, load_module};
pub use region::DeviceRegion;
pub use shared_import::open_region as open_shared_region;
pub use stream::Stream;
pub use vmm::{HostRegistration, SharedDeviceMemory, shareable_size};

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
        let context;
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
            context = context_limits::retain_primary_context(device)?;
            check("cuCtxSetCurrent", sys::cuCtxSetCurrent(context))?;
            CURRENT.with(|c| c.set(context));
            context_limits::trim_current_context();
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

    #[test]
    fn an_opened_device_reserves_the_smallest_stack() {
        let Ok(device) = Device::get(0) else {
            eprintln!("SKIPPED: no CUDA device");
            return;
        };
        device.bind().unwrap();
        let mut stack = 0usize;
        // SAFETY: a context is current; valid out pointer.
        let got = unsafe { sys::cuCtxGetLimit(&mut stack, sys::CUlimit::CU_LIMIT_STACK_SIZE) };
        assert_eq!(got, sys::CUresult::CUDA_SUCCESS);
        // The driver's default is 1024 bytes a thread.
        assert!(stack < 1024, "stack limit {stack} bytes");
    }
}
