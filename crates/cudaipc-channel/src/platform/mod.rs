//! The operating system beneath the channel, behind one interface with a
//! Linux and a Windows implementation (as iceoryx2's platform crate does).
//! The channel code above it is the same on both, and so is the control
//! block's layout.
//!
//! Every implementation provides:
//! - **shared files**: `default_shm_dir`, `create_new_file` (exclusive, with
//!   access for the owner, group and others as a unix mode says; SIDs on
//!   Windows), `open_regular` (never through a link), `reserve_space`,
//!   `free_bytes`, `link_exclusive` (an atomic public name), `remove_name`
//!   (at once, even while mapped), `file_identity`, `path_identity`, and
//!   `mapping::SharedMapping`;
//! - **credentials**: `effective_uid`, `owner_uid`, `owner_ids`,
//!   `path_owner_uid`, `path_owner_and_mode`, `parse_user_id` (a uid on
//!   Linux; on Windows a digest of the user's SID, see docs/windows.md);
//! - **liveness**: `try_lock_byte`, `unlock_byte`, `byte_is_locked` (a lock
//!   on one byte of a shared file, held through one handle, dropped by the
//!   kernel when the process dies), and `process_start_time`,
//!   `own_start_time`, `process_runs`, `pid_namespace` (a pid with its start
//!   time names one process even after the pid is reused);
//! - **waits**: `futex_wait` and `futex_wake` on a word in a shared mapping;
//! - **handle passing**: `Shareable`, `keep_from_children` (close-on-exec,
//!   not inheritable: no process this one starts holds a channel's handle)
//!   and `socket` (the descriptor channel:
//!   a unix socket with SCM_RIGHTS on Linux, a named pipe with
//!   DuplicateHandle on Windows);
//! - `random_u64` and `monotonic_ns` (one clock for all processes of a host).
//!
//! `conformance` runs one suite over whichever implementation is built.

#[cfg(unix)]
mod linux;
#[cfg(unix)]
pub use linux::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;

#[cfg(test)]
mod conformance;
pub mod mapped_file;

/// A random odd 64-bit value for session identifiers and unique names.
pub fn random_u64() -> u64 {
    let value = os_random_u64().unwrap_or_else(|| {
        // No entropy (yet): time and pid, still unique enough.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        nanos ^ (u64::from(std::process::id()) << 32)
    });
    value | 1
}
