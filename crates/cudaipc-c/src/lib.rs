// SPDX-License-Identifier: MPL-2.0

//! The C ABI of the `cudaipc` crate: `libcudaipc.so` (`cudaipc.dll`) with
//! the header `include/cudaipc.h`, generated from this crate by cbindgen,
//! and the header-only C++17 wrapper `include/cudaipc.hpp`. docs/c-api.md
//! shows both.
//!
//! Every entry point returns a `cudaipc_status`; an error's text is
//! `cudaipc_last_error_message()` on the same thread. Handles are numbers
//! looked up in a registry (handles.rs), never addresses: NULL, a freed
//! handle or one of another kind is an error code. Each entry point runs in
//! `status::guard`, which catches panics (bugs only: no input reaches one)
//! without printing them.

#![allow(non_camel_case_types)]
// Each `unsafe extern "C"` function's contract is its `# Safety` section.
#![deny(unsafe_op_in_unsafe_fn)]

mod frame;
mod handles;
mod loan;
mod messages;
mod publisher;
mod status;
mod subscriber;
mod types;

#[cfg(test)]
mod tests;

pub use frame::*;
pub use loan::*;
pub use publisher::*;
pub use status::*;
pub use subscriber::*;
pub use types::{
    CUDAIPC_MAX_PLANES, cudaipc_format, cudaipc_frame_data_kind, cudaipc_frame_info,
    cudaipc_frames, cudaipc_ipc_mode, cudaipc_layout, cudaipc_loan_info, cudaipc_publisher_options,
    cudaipc_subscriber_options, cudaipc_transport, cudaipc_when_full,
};

/// Bumped when a struct or a function's meaning changes incompatibly; the
/// soname's number (`libcudaipc.so.0`).
pub const CUDAIPC_ABI_VERSION: u32 = 0;

/// This library's version ("0.1.0"), a static string.
#[unsafe(no_mangle)]
pub extern "C" fn cudaipc_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
