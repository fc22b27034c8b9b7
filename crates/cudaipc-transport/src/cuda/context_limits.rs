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
