// SPDX-License-Identifier: MPL-2.0

//! Ctrl-C and SIGTERM for the commands that run until stopped (`watch`,
//! `serve-metrics`): they end between two steps, with status 0.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// From now on Ctrl-C (and SIGTERM) only set a flag (`interrupted`).
pub fn end_on_interrupt() {
    let handler = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; nothing else in this process handles signals.
        unsafe { libc::signal(signal, handler) };
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Sleeps for `interval`; `false` if interrupted meanwhile.
pub fn sleep_unless_interrupted(interval: Duration) -> bool {
    let end = Instant::now() + interval;
    while !interrupted() {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
    false
}
