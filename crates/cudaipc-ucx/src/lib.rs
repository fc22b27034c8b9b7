// SPDX-License-Identifier: MPL-2.0

//! A thin binding to UCX's `ucp` API, loaded at run time (`libucp.so.0`),
//! so that a program built with it runs where UCX is missing and can say
//! so. It covers what a point-to-point frame bridge needs: a context and a
//! worker, a listener that accepts or refuses connection requests, a
//! client endpoint, and tag messages sent from and received into memory
//! the caller owns (host or CUDA device memory: UCX tells them apart).
//!
//! Every object is used from the thread that made it
//! (`UCS_THREAD_MODE_SINGLE`); callbacks run inside [`Worker::progress`].
//! UCX is for Linux: elsewhere this crate is empty.
#![cfg(unix)]

mod endpoint;
mod error;
mod listener;
mod request;
#[doc(hidden)]
pub mod sys;
mod worker;

pub use endpoint::Endpoint;
pub use error::{Error, Status};
pub use listener::{ConnectionRequest, Listener};
pub use request::{Received, Request};
pub use worker::{Context, Worker};

/// The UCX library this process loaded, as `ucp_get_version_string` says
/// (e.g. "1.13.1"); an error names the library that could not be loaded.
pub fn version() -> Result<String, Error> {
    sys::api().map(|api| api.version())
}
