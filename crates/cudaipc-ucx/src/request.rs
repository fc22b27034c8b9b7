// SPDX-License-Identifier: MPL-2.0

use std::ffi::c_void;
use std::marker::PhantomData;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::error::{Error, Status};
use crate::sys;
use crate::worker::WorkerInner;

/// How long dropping an unfinished request waits for its cancellation.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// What a finished receive got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    pub tag: u64,
    pub length: usize,
}

/// A send or receive in flight, borrowing its buffer for `'a`. Dropping an
/// unfinished one cancels it and waits until UCX no longer touches the
/// buffer.
pub struct Request<'a> {
    state: State,
    worker: Rc<WorkerInner>,
    receive: bool,
    _buffer: PhantomData<&'a mut [u8]>,
}

enum State {
    Pending(*mut c_void),
    Finished(Result<Received, Status>),
}

impl<'a> Request<'a> {
    /// `done`: what an operation that finished at once did.
    pub(crate) fn new(
        worker: Rc<WorkerInner>,
        call: &'static str,
        ptr: sys::ucs_status_ptr_t,
        receive: bool,
        done: Received,
    ) -> Result<Self, Error> {
        let state = match sys::status_ptr(ptr) {
            sys::StatusPtr::Done => State::Finished(Ok(done)),
            sys::StatusPtr::Failed(status) => return Err(Error::call(call, status)),
            sys::StatusPtr::Pending(request) => State::Pending(request),
        };
        Ok(Self {
            state,
            worker,
            receive,
            _buffer: PhantomData,
        })
    }

    /// The result once finished (`None` while in flight); progresses the
    /// worker once.
    pub fn poll(&mut self) -> Option<Result<Received, Status>> {
        if let State::Pending(_) = self.state {
            self.worker.progress();
        }
        self.check()
    }

    fn check(&mut self) -> Option<Result<Received, Status>> {
        let request = match self.state {
            State::Finished(result) => return Some(result),
            State::Pending(request) => request,
        };
        let api = self.worker.api;
        let mut info = sys::ucp_tag_recv_info_t::default();
        // SAFETY: a request UCX handed out and this one has not freed.
        let status = unsafe {
            if self.receive {
                (api.tag_recv_request_test)(request, &mut info)
            } else {
                (api.request_check_status)(request)
            }
        };
        if status == sys::UCS_INPROGRESS {
            return None;
        }
        // SAFETY: finished; freed once, never used again (state changes).
        unsafe { (api.request_free)(request) };
        let result = if status == sys::UCS_OK {
            Ok(Received {
                tag: info.sender_tag,
                length: info.length,
            })
        } else {
            Err(Status(status))
        };
        self.state = State::Finished(result);
        Some(result)
    }

    /// Waits (progressing the worker) until finished or `timeout` passed
    /// (`None` then; the request stays in flight).
    pub fn wait(&mut self, timeout: Duration) -> Option<Result<Received, Status>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(result) = self.poll() {
                return Some(result);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.worker.wait(left.min(Duration::from_millis(50)));
        }
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        let State::Pending(request) = self.state else {
            return;
        };
        // SAFETY: a request in flight of this worker; cancelling a send UCX
        // cannot cancel is a no-op.
        unsafe { (self.worker.api.request_cancel)(self.worker.handle, request) };
        let deadline = Instant::now() + CANCEL_WAIT;
        while self.check().is_none() {
            if Instant::now() > deadline {
                // UCX still owns the request: let it free it when it
                // finishes (the buffer must then outlive this process's
                // use of it, which the caller's leak on this path keeps).
                // SAFETY: frees a pending request once, never used again.
                unsafe { (self.worker.api.request_free)(request) };
                return;
            }
            self.worker.wait(Duration::from_millis(10));
        }
    }
}
