// SPDX-License-Identifier: MPL-2.0

use std::ffi::CString;
use std::rc::Rc;
use std::time::Duration;

use crate::error::{Error, check};
use crate::sys::{self, Api};

/// A UCX context (`ucp_init` with tag messages and wake-ups); UCX reads
/// its `UCX_*` environment (e.g. `UCX_TLS`) here.
pub struct Context {
    handle: sys::ucp_context_h,
    api: &'static Api,
}

impl Context {
    /// A context named `name` (UCX's logs say it).
    pub fn new(name: &str) -> Result<Rc<Self>, Error> {
        let api = sys::api()?;
        let name = CString::new(name).map_err(|_| Error::Argument("a name with a NUL".into()))?;
        let params = sys::ucp_params_t {
            field_mask: sys::UCP_PARAM_FIELD_FEATURES | sys::UCP_PARAM_FIELD_NAME,
            features: sys::UCP_FEATURE_TAG | sys::UCP_FEATURE_WAKEUP,
            request_size: 0,
            request_init: None,
            request_cleanup: None,
            tag_sender_mask: 0,
            mt_workers_shared: 0,
            estimated_num_eps: 0,
            estimated_num_ppn: 0,
            name: name.as_ptr(),
        };
        let mut handle = std::ptr::null_mut();
        // SAFETY: params is a valid ucp_params_t whose set fields are
        // valid; a null config makes UCX read its environment; the API
        // version is the one these layouts are from.
        let status = unsafe { (api.init_version)(1, 13, &params, std::ptr::null(), &mut handle) };
        check("ucp_init", status)?;
        Ok(Rc::new(Self { handle, api }))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context was made by ucp_init; every worker holds an
        // Rc of it, so none is left.
        unsafe { (self.api.cleanup)(self.handle) }
    }
}

pub(crate) struct WorkerInner {
    pub(crate) handle: sys::ucp_worker_h,
    pub(crate) api: &'static Api,
    efd: libc::c_int,
    _context: Rc<Context>,
}

impl Drop for WorkerInner {
    fn drop(&mut self) {
        // SAFETY: every endpoint, listener and request holds an Rc of
        // this, so none is left; the worker was made by ucp_worker_create.
        unsafe { (self.api.worker_destroy)(self.handle) }
    }
}

impl WorkerInner {
    pub(crate) fn progress(&self) -> u32 {
        // SAFETY: a live worker, used from the thread that made it.
        unsafe { (self.api.worker_progress)(self.handle) }
    }

    /// Progress, then sleep until UCX has something to do or `timeout`
    /// passed.
    pub(crate) fn wait(&self, timeout: Duration) {
        if self.progress() != 0 {
            return;
        }
        // SAFETY: a live worker made with UCP_FEATURE_WAKEUP.
        let armed = unsafe { (self.api.worker_arm)(self.handle) };
        if armed != sys::UCS_OK {
            // UCS_ERR_BUSY: events are pending; progress again at once.
            return;
        }
        let mut fd = libc::pollfd {
            fd: self.efd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd; the efd lives as long as the worker.
        unsafe { libc::poll(&mut fd, 1, ms) };
    }
}

/// A worker: where messages are progressed. Its endpoints, listener and
/// requests are used from the thread that made it.
#[derive(Clone)]
pub struct Worker {
    pub(crate) inner: Rc<WorkerInner>,
}

impl Worker {
    pub fn new(context: &Rc<Context>) -> Result<Self, Error> {
        let api = context.api;
        // SAFETY: all-zero is a valid ucp_worker_params_t (integers and
        // raw pointers); only the thread mode is set and flagged.
        let mut params: sys::ucp_worker_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = sys::UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        params.thread_mode = sys::UCS_THREAD_MODE_SINGLE;
        let mut handle = std::ptr::null_mut();
        // SAFETY: a live context; params as above.
        let status = unsafe { (api.worker_create)(context.handle, &params, &mut handle) };
        check("ucp_worker_create", status)?;
        let mut efd = -1;
        // SAFETY: a live worker made with UCP_FEATURE_WAKEUP.
        let status = unsafe { (api.worker_get_efd)(handle, &mut efd) };
        if let Err(e) = check("ucp_worker_get_efd", status) {
            // SAFETY: made above, used by nothing else.
            unsafe { (api.worker_destroy)(handle) };
            return Err(e);
        }
        Ok(Self {
            inner: Rc::new(WorkerInner {
                handle,
                api,
                efd,
                _context: context.clone(),
            }),
        })
    }

    /// Makes progress on every pending operation and callback; returns
    /// how many events it processed.
    pub fn progress(&self) -> u32 {
        self.inner.progress()
    }

    /// Progresses, then sleeps until there is something to progress or
    /// `timeout` passed.
    pub fn wait(&self, timeout: Duration) {
        self.inner.wait(timeout)
    }
}
