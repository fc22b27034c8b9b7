// SPDX-License-Identifier: MPL-2.0

//! Orders one CUDA stream after the work queued on another, on the GPU: an
//! event recorded on the one and waited for by the other. No host
//! synchronisation.

use std::ffi::c_void;
use std::sync::Arc;

use cudaipc_transport::cuda::{Device, Event};
use cudaipc_transport::{SlotMemory, TransportError};

use crate::Error;

/// Makes later work on `waiter` wait for the work queued on `signaller` so
/// far. Nothing to do where they are the same stream.
///
/// # Safety
/// Both are live `CUstream`s of a context of `device` (or
/// `CU_STREAM_LEGACY`, 1, or `CU_STREAM_PER_THREAD`, 2).
pub(crate) unsafe fn stream_waits_for(
    device: &Arc<Device>,
    waiter: *mut c_void,
    signaller: *mut c_void,
    what: &'static str,
) -> Result<(), Error> {
    if waiter == signaller {
        return Ok(());
    }
    let gpu_error = |e| Error::Transport {
        what,
        source: TransportError::Cuda(e),
    };
    let event = Event::new(device, false).map_err(gpu_error)?;
    // SAFETY: the caller's contract.
    let (waiter, signaller) = unsafe {
        (
            device.foreign_stream(waiter.cast()),
            device.foreign_stream(signaller.cast()),
        )
    };
    signaller.record(&event).map_err(gpu_error)?;
    waiter.wait_event(&event).map_err(gpu_error)?;
    // Dropping the event now is allowed: the wait holds what it needs, and
    // the driver frees the event once its record has run.
    Ok(())
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

/// Makes later work on the CUDA stream `waiter` wait, on the GPU, for the
/// work queued on `signaller` so far: an event recorded on the one and
/// waited for by the other, no host synchronisation. For streams that
/// neither a [`Frame`](crate::Frame) nor a [`FrameLoan`](crate::FrameLoan)
/// knows: a consumer's and the `cuda-stream` of the `CudaIpcMeta` on a
/// buffer of the `cudaipcsrc` element, which orders its reads and its
/// release of the frame's slot on it.
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
    let device = Device::get(device_ordinal)
        .map_err(|e| Error::Device(format!("CUDA device {device_ordinal}: {e}")))?;
    // SAFETY: the caller's contract.
    unsafe { stream_waits_for(&device, waiter, signaller, "order two CUDA streams") }
}

/// Waits on the host until the work queued so far on every stream of the
/// primary context of CUDA device `device_ordinal` is done: where the
/// streams that read a frame are no longer known to be alive.
pub fn synchronize_device(device_ordinal: i32) -> Result<(), Error> {
    let device = Device::get(device_ordinal)
        .map_err(|e| Error::Device(format!("CUDA device {device_ordinal}: {e}")))?;
    device.synchronize_context().map_err(|e| Error::Transport {
        what: "wait for the device's work",
        source: TransportError::Cuda(e),
    })
}
