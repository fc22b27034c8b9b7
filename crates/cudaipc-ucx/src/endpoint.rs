// SPDX-License-Identifier: MPL-2.0

use std::cell::Cell;
use std::ffi::c_void;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::error::{Error, Status, check};
use crate::listener::{ConnectionRequest, to_sockaddr};
use crate::request::Request;
use crate::sys;
use crate::worker::{Worker, WorkerInner};

/// How long closing an endpoint progresses its worker at most.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// A connection to one peer. A failure of the peer or of the link (seen
/// while the worker progresses) is kept: [`failure`](Self::failure).
pub struct Endpoint {
    handle: sys::ucp_ep_h,
    failure: Box<Cell<Option<Status>>>,
    worker: Rc<WorkerInner>,
}

unsafe extern "C" fn on_error(arg: *mut c_void, _ep: sys::ucp_ep_h, status: sys::ucs_status_t) {
    // SAFETY: arg is the endpoint's boxed cell, which outlives the handle
    // (kept until the close finished); callbacks run on the worker's thread.
    let failure = unsafe { &*(arg as *const Cell<Option<Status>>) };
    failure.set(Some(Status(status)));
}

impl Endpoint {
    /// Connects to a listener at `address` (the connection is made while
    /// the worker progresses; a refusal shows as a failure).
    pub fn connect(worker: &Worker, address: SocketAddr) -> Result<Self, Error> {
        let (storage, length) = to_sockaddr(address);
        Self::create(worker, |params| {
            params.field_mask |= sys::UCP_EP_PARAM_FIELD_SOCK_ADDR | sys::UCP_EP_PARAM_FIELD_FLAGS;
            params.flags = sys::UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
            params.sockaddr = sys::ucs_sock_addr_t {
                addr: &storage as *const _ as *const libc::sockaddr,
                addrlen: length,
            };
        })
    }

    /// Accepts a listener's connection request.
    pub fn accept(worker: &Worker, request: ConnectionRequest) -> Result<Self, Error> {
        Self::create(worker, |params| {
            params.field_mask |= sys::UCP_EP_PARAM_FIELD_CONN_REQUEST;
            params.conn_request = request.handle;
        })
    }

    fn create(worker: &Worker, set: impl FnOnce(&mut sys::ucp_ep_params_t)) -> Result<Self, Error> {
        let failure: Box<Cell<Option<Status>>> = Box::default();
        // SAFETY: all-zero is a valid ucp_ep_params_t (integers, pointers).
        let mut params: sys::ucp_ep_params_t = unsafe { std::mem::zeroed() };
        params.field_mask =
            sys::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | sys::UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.err_mode = sys::UCP_ERR_HANDLING_MODE_PEER;
        params.err_handler = sys::ucp_err_handler_t {
            cb: Some(on_error),
            arg: &*failure as *const Cell<Option<Status>> as *mut c_void,
        };
        set(&mut params);
        let mut handle = std::ptr::null_mut();
        // SAFETY: a live worker; the parameters' pointers (address, cell)
        // are valid for the call, and the cell for the endpoint's life.
        let status =
            unsafe { (worker.inner.api.ep_create)(worker.inner.handle, &params, &mut handle) };
        check("ucp_ep_create", status)?;
        Ok(Self {
            handle,
            failure,
            worker: worker.inner.clone(),
        })
    }

    /// The peer's or the link's failure, once UCX reported one.
    pub fn failure(&self) -> Option<Status> {
        self.failure.get()
    }

    /// Sends `data` as one tag message.
    pub fn send<'a>(&self, tag: u64, data: &'a [u8]) -> Result<Request<'a>, Error> {
        // SAFETY: the bytes stay borrowed for the request's life.
        unsafe { self.send_raw(tag, data.as_ptr() as *const c_void, data.len()) }
    }

    /// Sends `length` bytes at `address` (host or CUDA device memory).
    ///
    /// # Safety
    /// The memory must stay valid and unchanged until the request finished
    /// (or was dropped).
    pub unsafe fn send_raw<'a>(
        &self,
        tag: u64,
        address: *const c_void,
        length: usize,
    ) -> Result<Request<'a>, Error> {
        if let Some(status) = self.failure() {
            return Err(Error::Call {
                call: "ucp_tag_send_nbx",
                status,
            });
        }
        let params = sys::ucp_request_param_t::plain();
        // SAFETY: a live endpoint; the caller keeps the memory valid.
        let ptr =
            unsafe { (self.worker.api.tag_send_nbx)(self.handle, address, length, tag, &params) };
        let done = crate::Received { tag, length };
        Request::new(self.worker.clone(), "ucp_tag_send_nbx", ptr, false, done)
    }

    /// Closes the connection: flushed, or forced after a failure. Whether
    /// UCX finished with it (no callback of it runs any more).
    fn close(&mut self) -> bool {
        let mut params = sys::ucp_request_param_t::plain();
        if self.failure().is_some() {
            params.op_attr_mask = sys::UCP_OP_ATTR_FIELD_FLAGS;
            params.flags = sys::UCP_EP_CLOSE_FLAG_FORCE;
        }
        // SAFETY: a live endpoint, closed once.
        let ptr = unsafe { (self.worker.api.ep_close_nbx)(self.handle, &params) };
        if let sys::StatusPtr::Pending(request) = sys::status_ptr(ptr) {
            let deadline = Instant::now() + CLOSE_WAIT;
            loop {
                // SAFETY: the close request, not yet freed.
                let status = unsafe { (self.worker.api.request_check_status)(request) };
                let finished = status != sys::UCS_INPROGRESS;
                if finished || Instant::now() > deadline {
                    // SAFETY: freed once (UCX finishes it itself if pending).
                    unsafe { (self.worker.api.request_free)(request) };
                    return finished;
                }
                self.worker.wait(Duration::from_millis(10));
            }
        }
        true
    }
}

impl Worker {
    /// Receives the next tag message whose tag matches `tag` under `mask`
    /// into `buffer` (host or device memory the caller owns).
    pub fn receive<'a>(
        &self,
        tag: u64,
        mask: u64,
        buffer: &'a mut [u8],
    ) -> Result<Request<'a>, Error> {
        // SAFETY: the bytes stay mutably borrowed for the request's life.
        unsafe { self.receive_raw(tag, mask, buffer.as_mut_ptr() as *mut c_void, buffer.len()) }
    }

    /// Like [`receive`](Self::receive), into `length` bytes at `address`.
    ///
    /// # Safety
    /// The memory must stay valid, and unused by anything else, until the
    /// request finished (or was dropped).
    pub unsafe fn receive_raw<'a>(
        &self,
        tag: u64,
        mask: u64,
        address: *mut c_void,
        length: usize,
    ) -> Result<Request<'a>, Error> {
        // Always a request, whose test gives the message's tag and length:
        // UCX 1.13 leaves `recv_info` unset when a message that arrived
        // earlier finishes the receive at once.
        let mut params = sys::ucp_request_param_t::plain();
        params.op_attr_mask = sys::UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        // SAFETY: a live worker; the caller keeps the memory valid.
        let ptr = unsafe {
            (self.inner.api.tag_recv_nbx)(self.inner.handle, address, length, tag, mask, &params)
        };
        let never = crate::Received { tag, length: 0 };
        Request::new(self.inner.clone(), "ucp_tag_recv_nbx", ptr, true, never)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if !self.close() {
            // Unfinished, the close may still call the error callback
            // later: its cell must outlive this endpoint.
            std::mem::forget(std::mem::take(&mut self.failure));
        }
    }
}
