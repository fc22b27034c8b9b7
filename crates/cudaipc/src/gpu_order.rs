// SPDX-License-Identifier: MPL-2.0

//! Orders one CUDA stream after the work queued on another, on the GPU: an
//! event recorded on the one and waited for by the other. No host
//! synchronisation.

use std::ffi::c_void;
use std::sync::Arc;

use cudaipc_transport::cuda::Device;
use cudaipc_transport::{SlotMemory, TransportError};

use crate::Error;

/// Makes later work on `waiter` wait for the work queued on `signaller` so
/// far. Nothing to do where they are the same stream.
///
/// # Safety
/// Both are live `CUstream`s of a context of `device` (or
/// `CU_STREAM_LEGACY`, 1, or `CU_STREAM_PER_THREAD`, 2).
pub(crate) unsafe fn stream_waits_for(
    device: &Device,
    waiter: *mut c_void,
    signaller: *mut c_void,
    what: &'static str,
) -> Result<(), Error> {
    if waiter == signaller {
        return Ok(());
    }
    // SAFETY: the caller's contract.
    unsafe { device.order_streams(waiter.cast(), signaller.cast()) }.map_err(|e| Error::Transport {
        what,
        source: TransportError::Cuda(e),
    })
}

/// Which of a slot's stream and a caller's stream waits for the other.
#[derive(Clone, Copy)]
pub(crate) enum Waiter {
    /// The slot's stream waits for the caller's.
    Slot,
    /// The caller's stream waits for the slot's.
    Caller,
}

/// Orders the stream of a slot in device memory and the caller's `stream`:
/// `waiter` waits on the GPU for the work queued on the other so far.
/// Nothing to do for a slot in host memory.
///
/// # Safety
/// `stream` is a live `CUstream` of a context of the slot's device (or
/// `CU_STREAM_LEGACY`, 1, or `CU_STREAM_PER_THREAD`, 2).
pub(crate) unsafe fn order_with_slot(
    memory: &SlotMemory,
    stream: *mut c_void,
    waiter: Waiter,
    what: &'static str,
) -> Result<(), Error> {
    let SlotMemory::Device(region) = memory else {
        return Ok(());
    };
    let slot_stream = region.device().stream().raw().cast();
    let (waiter, signaller) = match waiter {
        Waiter::Slot => (slot_stream, stream),
        Waiter::Caller => (stream, slot_stream),
    };
    // SAFETY: the caller's contract; the other is the device's stream.
    unsafe { stream_waits_for(region.device(), waiter, signaller, what) }
}

/// A CUDA device (its primary context) to order streams on: what
/// [`order_streams`] and [`synchronize_device`] look up by ordinal on every
/// call, opened once and kept by whoever orders streams often.
#[derive(Clone)]
pub struct CudaDevice(Arc<Device>);

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CudaDevice")
            .field(&self.0.ordinal())
            .finish()
    }
}

impl CudaDevice {
    /// CUDA device `ordinal`; [`Error::Device`] where there is no such
    /// device or no CUDA driver.
    pub fn open(ordinal: i32) -> Result<Self, Error> {
        Device::get(ordinal)
            .map(Self)
            .map_err(|e| Error::Device(format!("CUDA device {ordinal}: {e}")))
    }

    /// Its ordinal.
    pub fn ordinal(&self) -> i32 {
        self.0.ordinal()
    }

    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.0
    }

    /// Makes later work on the CUDA stream `waiter` wait, on the GPU, for
    /// the work queued on `signaller` so far: an event recorded on the one
    /// and waited for by the other, no host synchronisation. Nothing to do
    /// where they are the same stream.
    ///
    /// # Safety
    /// Both are live `CUstream`s of the device's primary context (or
    /// `CU_STREAM_LEGACY`, 1, or `CU_STREAM_PER_THREAD`, 2).
    pub unsafe fn order_streams(
        &self,
        waiter: *mut c_void,
        signaller: *mut c_void,
    ) -> Result<(), Error> {
        // SAFETY: the caller's contract.
        unsafe { stream_waits_for(&self.0, waiter, signaller, "order two CUDA streams") }
    }

    /// Waits on the host until the work queued so far on every stream of
    /// the device's primary context is done.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.0.synchronize_context().map_err(|e| Error::Transport {
            what: "wait for the device's work",
            source: TransportError::Cuda(e),
        })
    }
}

/// Makes later work on the CUDA stream `waiter` wait, on the GPU, for the
/// work queued on `signaller` so far: an event recorded on the one and
/// waited for by the other, no host synchronisation. For streams that
/// neither a [`Frame`](crate::Frame) nor a [`FrameLoan`](crate::FrameLoan)
/// knows: a consumer's and the `cuda-stream` of the `CudaIpcMeta` on a
/// buffer of the `rscudaipcsrc` element, which orders its reads and its
/// release of the frame's slot on it. [`CudaDevice::order_streams`] is the
/// same without looking the device up.
///
/// # Safety
/// Both are live `CUstream`s of the primary context of CUDA device
/// `device_ordinal` (or `CU_STREAM_LEGACY`, 1, or `CU_STREAM_PER_THREAD`,
/// 2).
pub unsafe fn order_streams(
    device_ordinal: i32,
    waiter: *mut c_void,
    signaller: *mut c_void,
) -> Result<(), Error> {
    if waiter == signaller {
        return Ok(());
    }
    // SAFETY: the caller's contract.
    unsafe { CudaDevice::open(device_ordinal)?.order_streams(waiter, signaller) }
}

/// Waits on the host until the work queued so far on every stream of the
/// primary context of CUDA device `device_ordinal` is done: where the
/// streams that read a frame are no longer known to be alive.
pub fn synchronize_device(device_ordinal: i32) -> Result<(), Error> {
    CudaDevice::open(device_ordinal)?.synchronize()
}
