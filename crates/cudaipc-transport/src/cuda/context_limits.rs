//! What a CUDA context reserves beyond what this plugin's work needs.
//!
//! A context reserves local memory for a stack of `CU_LIMIT_STACK_SIZE`
//! bytes (1 KiB by default) for every thread the GPU can hold at once:
//! on an H100, 132 SMs x 2048 threads x 1 KiB, about 270 MB a process,
//! which makes up much of the 520 MiB a context costs (docs/performance.md,
//! "Memory per process"). The kernels of this plugin use no stack, and
//! the driver raises the limit itself for a kernel that needs more when it
//! launches it, so the smallest limit costs no kernel of the process
//! anything. `CUDAIPC_KEEP_CONTEXT_LIMITS=1` keeps the driver's default.

use cudarc::driver::sys;

/// Asked for; the driver rounds it up to what the hardware needs.
const STACK_BYTES: usize = 0;

/// Lowers the stack reservation of the current context, once per device
/// this process opens. Failures are ignored: the context then keeps the
/// driver's default, as before.
pub(super) fn trim_current_context() {
    if std::env::var("CUDAIPC_KEEP_CONTEXT_LIMITS").is_ok_and(|v| v == "1") {
        return;
    }
    // SAFETY: a context is current on this thread (the caller made it so);
    // setting a limit takes a plain value.
    let _ = unsafe { sys::cuCtxSetLimit(sys::CUlimit::CU_LIMIT_STACK_SIZE, STACK_BYTES) };
}

/// Retains `device`'s primary context. Without MPS each process has a
/// context of its own, and an H100 or H200 took about 100 of them (101 on
/// the H200), whatever their memory: the next failed with
/// `CUDA_ERROR_OUT_OF_MEMORY` with half the memory free. The count is of
/// the GPU's hardware queues (channels), 8 a context by default: with
/// `CUDA_DEVICE_MAX_CONNECTIONS=1` or `2` the H200 held 200 contexts
/// (docs/performance.md, "Streams per GPU"). That failure says so.
pub(super) fn retain_primary_context(device: sys::CUdevice) -> super::Result<sys::CUcontext> {
    let mut context = std::ptr::null_mut();
    // SAFETY: the driver is initialised (the caller got `device` from it)
    // and `context` is a valid out pointer.
    let code = unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) };
    match super::check("cuDevicePrimaryCtxRetain", code) {
        Ok(()) => Ok(context),
        Err(super::CudaError::Call {
            call,
            name,
            description,
        }) if code == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(super::CudaError::Call {
            call,
            name,
            description: format!(
                "{description}: the GPU has no room for another CUDA context (its memory is full, or, without MPS, it holds about 100 processes' contexts with CUDA's default of 8 connections each: set CUDA_DEVICE_MAX_CONNECTIONS=1 in the processes of every channel, read several channels in one process, or use MPS)"
            ),
        }),
        Err(e) => Err(e),
    }
}
