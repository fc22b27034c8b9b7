// SPDX-License-Identifier: MPL-2.0

//! One connection between a sender and a receiver: tag messages sent and
//! received with a deadline, and the peer's failure as UCX reports it.

use std::ffi::c_void;
use std::fmt;
use std::time::{Duration, Instant};

use cudaipc_ucx::{Endpoint, Request, Status, Worker};

use crate::wire::{self, Malformed};

#[derive(Debug)]
pub enum LinkError {
    /// UCX reports the peer or the link gone.
    Lost(Status),
    /// Nothing came, or a send did not finish, in time.
    Silent(Duration),
    /// The peer sent something this protocol does not have.
    Malformed(Malformed),
    /// A call into UCX failed.
    Ucx(cudaipc_ucx::Error),
    /// This side cannot go on with the stream (its channel, its GPU).
    Local(String),
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Lost(status) => write!(f, "the connection is gone: {status}"),
            Self::Silent(t) => write!(f, "nothing from the peer for {:.1} s", t.as_secs_f64()),
            Self::Malformed(m) => write!(f, "{m}"),
            Self::Ucx(e) => write!(f, "{e}"),
            Self::Local(why) => f.write_str(why),
        }
    }
}

impl From<cudaipc_ucx::Error> for LinkError {
    fn from(e: cudaipc_ucx::Error) -> Self {
        match e.status() {
            Some(status) if status.is_peer_failure() => Self::Lost(status),
            _ => Self::Ucx(e),
        }
    }
}

impl From<Malformed> for LinkError {
    fn from(e: Malformed) -> Self {
        Self::Malformed(e)
    }
}

pub struct Link {
    pub worker: Worker,
    pub endpoint: Endpoint,
    /// How long a message may take before the peer counts as gone.
    pub patience: Duration,
}

impl Link {
    /// Waits for `request`, watching the endpoint; the request is dropped
    /// (cancelled) on an error.
    fn finish(&self, mut request: Request<'_>, what: Duration) -> Result<usize, LinkError> {
        let deadline = Instant::now() + what;
        loop {
            if let Some(result) = request.poll() {
                return result.map(|r| r.length).map_err(|status| {
                    if status.is_peer_failure() {
                        LinkError::Lost(status)
                    } else {
                        // A message longer than its buffer, among others.
                        LinkError::Ucx(cudaipc_ucx::Error::Call {
                            call: "a transfer",
                            status,
                        })
                    }
                });
            }
            if let Some(status) = self.endpoint.failure() {
                return Err(LinkError::Lost(status));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(LinkError::Silent(what));
            }
            // Busy while UCX has work (a large send is pushed out by
            // progress calls); a short sleep on the worker's events when not.
            if self.worker.progress() == 0 {
                self.worker.wait(left.min(Duration::from_millis(1)));
            }
        }
    }

    pub fn send(&self, tag: u64, bytes: &[u8]) -> Result<(), LinkError> {
        let request = self.endpoint.send(tag, bytes)?;
        self.finish(request, self.patience).map(drop)
    }

    /// Starts sending `length` bytes at `address` (host or device memory);
    /// [`finish_send`](Self::finish_send) waits for it.
    ///
    /// # Safety
    /// The memory stays valid and unchanged until the request is finished
    /// or dropped.
    pub unsafe fn start_send(
        &self,
        tag: u64,
        address: *const c_void,
        length: usize,
    ) -> Result<Request<'static>, LinkError> {
        // SAFETY: as the caller promises.
        Ok(unsafe { self.endpoint.send_raw(tag, address, length) }?)
    }

    pub fn finish_send(&self, request: Request<'_>) -> Result<(), LinkError> {
        self.finish(request, self.patience).map(drop)
    }

    /// Receives the message tagged `tag` into `buffer`, waiting up to
    /// `within`; returns its length.
    pub fn receive(
        &self,
        tag: u64,
        buffer: &mut [u8],
        within: Duration,
    ) -> Result<usize, LinkError> {
        let request = self.worker.receive(tag, wire::EXACT, buffer)?;
        self.finish(request, within)
    }

    /// Starts receiving `length` bytes tagged `tag` at `address`;
    /// [`finish_receive`](Self::finish_receive) waits for it.
    ///
    /// # Safety
    /// The memory stays valid, and written by nothing else, until the
    /// request is finished or dropped.
    pub unsafe fn start_receive(
        &self,
        tag: u64,
        address: *mut c_void,
        length: usize,
    ) -> Result<Request<'static>, LinkError> {
        // SAFETY: as the caller promises.
        Ok(unsafe { self.worker.receive_raw(tag, wire::EXACT, address, length) }?)
    }

    /// The received length, once the request finished.
    pub fn finish_receive(&self, request: Request<'_>) -> Result<usize, LinkError> {
        self.finish(request, self.patience)
    }
}
