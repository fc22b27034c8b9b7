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

/// How long opening a device retries a context the GPU had no memory for.
const RETAIN_RETRY_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Retains `device`'s primary context. A context holds the driver's full
/// reservation from its creation until `trim_current_context`: when many
/// processes start at once (a hundred cameras at boot), their contexts
/// briefly need twice the memory they keep, and a creation can fail with
/// `CUDA_ERROR_OUT_OF_MEMORY` while the memory is about to come back.
/// Such a failure is retried, after a growing pause with jitter, for up to
/// `RETAIN_RETRY_LIMIT`; any other error, or memory that stays taken, is
/// returned.
pub(super) fn retain_primary_context(
    device: sys::CUdevice,
) -> Result<sys::CUcontext, sys::CUresult> {
    let start = std::time::Instant::now();
    // Processes started together should not retry together.
    let mut pause_ms = 10 + u64::from(std::process::id() % 40);
    loop {
        let mut context = std::ptr::null_mut();
        // SAFETY: the driver is initialised (the caller got `device` from
        // it) and `context` is a valid out pointer.
        let code = unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) };
        match code {
            sys::CUresult::CUDA_SUCCESS => return Ok(context),
            sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY if start.elapsed() < RETAIN_RETRY_LIMIT => {
                std::thread::sleep(std::time::Duration::from_millis(pause_ms));
                pause_ms = (pause_ms * 2).min(500);
            }
            code => return Err(code),
        }
    }
}
