// SPDX-License-Identifier: MPL-2.0

//! Orders one CUDA stream after the work queued on another, on the GPU: an
//! event recorded on the one and waited for by the other. No host
//! synchronisation.

use std::ffi::c_void;
use std::sync::Arc;

use cudaipc_transport::TransportError;
use cudaipc_transport::cuda::{Device, Event};

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
