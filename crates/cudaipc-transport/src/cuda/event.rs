// CUDA events: ordering work across streams and, through IPC handles,
// across processes.

use std::sync::Arc;

use cudarc::driver::sys;

use super::{Device, IPC_HANDLE_BYTES, Result, check, query_done};

/// A CUDA event without timing; interprocess when asked.
pub struct Event {
    device: Arc<Device>,
    pub(super) raw: sys::CUevent,
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
