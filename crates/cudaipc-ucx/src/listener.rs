// SPDX-License-Identifier: MPL-2.0

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::rc::Rc;

use crate::error::{Error, check};
use crate::sys;
use crate::worker::{Worker, WorkerInner};

/// The connection requests the listener's callback queued.
type Pending = RefCell<VecDeque<sys::ucp_conn_request_h>>;

/// A listening socket address; connection requests arrive while its worker
/// progresses, and each is accepted ([`Endpoint::accept`](crate::Endpoint::accept))
/// or refused ([`Listener::reject`]).
pub struct Listener {
    handle: sys::ucp_listener_h,
    pending: Box<Pending>,
    worker: Rc<WorkerInner>,
}

/// A client asking to connect, and from where.
pub struct ConnectionRequest {
    pub(crate) handle: sys::ucp_conn_request_h,
    pub client: Option<SocketAddr>,
}

unsafe extern "C" fn on_connection(request: sys::ucp_conn_request_h, arg: *mut c_void) {
    // SAFETY: arg is the listener's boxed queue, which outlives the
    // listener handle; callbacks run in progress on the worker's thread.
    let pending = unsafe { &*(arg as *const Pending) };
    pending.borrow_mut().push_back(request);
}

impl Listener {
    /// Listens on `address` (port 0: one the system picks; see
    /// [`local_address`](Self::local_address)).
    pub fn bind(worker: &Worker, address: SocketAddr) -> Result<Self, Error> {
        let api = worker.inner.api;
        let (storage, length) = to_sockaddr(address);
        let pending: Box<Pending> = Box::default();
        let params = sys::ucp_listener_params_t {
            field_mask: sys::UCP_LISTENER_PARAM_FIELD_SOCK_ADDR
                | sys::UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
            sockaddr: sys::ucs_sock_addr_t {
                addr: &storage as *const _ as *const libc::sockaddr,
                addrlen: length,
            },
            accept_handler: [std::ptr::null_mut(); 2],
            conn_handler: sys::ucp_listener_conn_handler_t {
                cb: Some(on_connection),
                arg: &*pending as *const Pending as *mut c_void,
            },
        };
        let mut handle = std::ptr::null_mut();
        // SAFETY: a live worker; the address is copied by UCX; the queue
        // is boxed and outlives the listener (destroyed first in drop).
        let status = unsafe { (api.listener_create)(worker.inner.handle, &params, &mut handle) };
        check("ucp_listener_create", status)?;
        Ok(Self {
            handle,
            pending,
            worker: worker.inner.clone(),
        })
    }

    /// The address it listens on.
    pub fn local_address(&self) -> Result<SocketAddr, Error> {
        // SAFETY: all-zero is a valid attribute struct.
        let mut attr: sys::ucp_listener_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = sys::UCP_LISTENER_ATTR_FIELD_SOCKADDR;
        // SAFETY: a live listener; attr as above.
        let status = unsafe { (self.worker.api.listener_query)(self.handle, &mut attr) };
        check("ucp_listener_query", status)?;
        from_sockaddr(&attr.sockaddr)
            .ok_or_else(|| Error::Argument("the listener's address is not IP".into()))
    }

    /// The next queued connection request (after the worker progressed).
    pub fn next_request(&self) -> Option<ConnectionRequest> {
        let handle = self.pending.borrow_mut().pop_front()?;
        // SAFETY: all-zero is a valid attribute struct.
        let mut attr: sys::ucp_conn_request_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = sys::UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
        // SAFETY: a request UCX handed to the callback, not yet accepted or
        // rejected.
        let status = unsafe { (self.worker.api.conn_request_query)(handle, &mut attr) };
        let client = if status == sys::UCS_OK {
            from_sockaddr(&attr.client_address)
        } else {
            None
        };
        Some(ConnectionRequest { handle, client })
    }

    /// Refuses a request: the client's endpoint fails.
    pub fn reject(&self, request: ConnectionRequest) -> Result<(), Error> {
        // SAFETY: a live listener and a request of it, consumed here.
        let status = unsafe { (self.worker.api.listener_reject)(self.handle, request.handle) };
        check("ucp_listener_reject", status)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Requests never taken are refused, so their clients learn of it.
        while let Some(request) = self.pending.borrow_mut().pop_front() {
            // SAFETY: a request of this listener, consumed here.
            unsafe { (self.worker.api.listener_reject)(self.handle, request) };
        }
        // SAFETY: made by ucp_listener_create; no callback runs after it.
        unsafe { (self.worker.api.listener_destroy)(self.handle) };
    }
}

pub(crate) fn to_sockaddr(address: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let length = match address {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any
            // sockaddr type.
            let sin = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above.
            let sin6 = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            sin6.sin6_scope_id = v6.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, length as libc::socklen_t)
}

pub(crate) fn from_sockaddr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says it holds a sockaddr_in.
            let sin = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says it holds a sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::new(
                IpAddr::V6(ip),
                u16::from_be(sin6.sin6_port),
            ))
        }
        _ => None,
    }
}
