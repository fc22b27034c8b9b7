// SPDX-License-Identifier: MPL-2.0

//! The ucp types this crate passes (as in UCX 1.13's `ucp.h`, checked by
//! `tests/layout.rs` against the installed header) and the functions,
//! looked up once in `libucp.so.0`. Later UCX versions only append
//! fields, and read a field only when its `field_mask` bit is set, so
//! these layouts stay valid for them.

#![allow(non_camel_case_types)]

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::fmt;
use std::sync::OnceLock;

use crate::error::{Error, Status};

pub type ucs_status_t = i8;
pub type ucs_status_ptr_t = *mut c_void;
pub type ucp_context_h = *mut c_void;
pub type ucp_worker_h = *mut c_void;
pub type ucp_ep_h = *mut c_void;
pub type ucp_listener_h = *mut c_void;
pub type ucp_conn_request_h = *mut c_void;
pub type ucp_tag_t = u64;

pub const UCS_OK: ucs_status_t = 0;
pub const UCS_INPROGRESS: ucs_status_t = 1;
/// `UCS_ERR_LAST`: a status pointer at or above it (as unsigned) is an error.
const UCS_ERR_LAST: isize = -100;

pub const UCP_PARAM_FIELD_FEATURES: u64 = 1 << 0;
pub const UCP_PARAM_FIELD_NAME: u64 = 1 << 8;
pub const UCP_FEATURE_TAG: u64 = 1 << 0;
pub const UCP_FEATURE_WAKEUP: u64 = 1 << 4;

pub const UCP_WORKER_PARAM_FIELD_THREAD_MODE: u64 = 1 << 0;
pub const UCS_THREAD_MODE_SINGLE: c_int = 0;

pub const UCP_LISTENER_PARAM_FIELD_SOCK_ADDR: u64 = 1 << 0;
pub const UCP_LISTENER_PARAM_FIELD_CONN_HANDLER: u64 = 1 << 2;
pub const UCP_LISTENER_ATTR_FIELD_SOCKADDR: u64 = 1 << 0;
pub const UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR: u64 = 1 << 0;

pub const UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE: u64 = 1 << 1;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLER: u64 = 1 << 2;
pub const UCP_EP_PARAM_FIELD_SOCK_ADDR: u64 = 1 << 4;
pub const UCP_EP_PARAM_FIELD_FLAGS: u64 = 1 << 5;
pub const UCP_EP_PARAM_FIELD_CONN_REQUEST: u64 = 1 << 6;
pub const UCP_EP_PARAMS_FLAGS_CLIENT_SERVER: c_uint = 1 << 0;
pub const UCP_ERR_HANDLING_MODE_PEER: c_int = 1;
pub const UCP_EP_CLOSE_FLAG_FORCE: u32 = 1 << 0;

pub const UCP_OP_ATTR_FIELD_FLAGS: u32 = 1 << 4;
pub const UCP_OP_ATTR_FLAG_NO_IMM_CMPL: u32 = 1 << 16;

#[repr(C)]
pub struct ucp_params_t {
    pub field_mask: u64,
    pub features: u64,
    pub request_size: usize,
    pub request_init: Option<unsafe extern "C" fn(*mut c_void)>,
    pub request_cleanup: Option<unsafe extern "C" fn(*mut c_void)>,
    pub tag_sender_mask: u64,
    pub mt_workers_shared: c_int,
    pub estimated_num_eps: usize,
    pub estimated_num_ppn: usize,
    pub name: *const c_char,
}

/// `ucs_cpu_set_t`: 1024 CPUs.
#[repr(C)]
pub struct ucs_cpu_set_t {
    pub bits: [u64; 16],
}

#[repr(C)]
pub struct ucp_worker_params_t {
    pub field_mask: u64,
    pub thread_mode: c_int,
    pub cpu_mask: ucs_cpu_set_t,
    pub events: c_uint,
    pub user_data: *mut c_void,
    pub event_fd: c_int,
    pub flags: u64,
    pub name: *const c_char,
    pub am_alignment: usize,
    pub client_id: u64,
}

#[repr(C)]
pub struct ucs_sock_addr_t {
    pub addr: *const libc::sockaddr,
    pub addrlen: libc::socklen_t,
}

pub type ConnCallback = unsafe extern "C" fn(ucp_conn_request_h, *mut c_void);
pub type ErrCallback = unsafe extern "C" fn(*mut c_void, ucp_ep_h, ucs_status_t);

#[repr(C)]
pub struct ucp_listener_conn_handler_t {
    pub cb: Option<ConnCallback>,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ucp_listener_params_t {
    pub field_mask: u64,
    pub sockaddr: ucs_sock_addr_t,
    pub accept_handler: [*mut c_void; 2],
    pub conn_handler: ucp_listener_conn_handler_t,
}

#[repr(C)]
pub struct ucp_listener_attr_t {
    pub field_mask: u64,
    pub sockaddr: libc::sockaddr_storage,
}

#[repr(C)]
pub struct ucp_conn_request_attr_t {
    pub field_mask: u64,
    pub client_address: libc::sockaddr_storage,
    pub client_id: u64,
}

#[repr(C)]
pub struct ucp_err_handler_t {
    pub cb: Option<ErrCallback>,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ucp_ep_params_t {
    pub field_mask: u64,
    pub address: *const c_void,
    pub err_mode: c_int,
    pub err_handler: ucp_err_handler_t,
    pub user_data: *mut c_void,
    pub flags: c_uint,
    pub sockaddr: ucs_sock_addr_t,
    pub conn_request: ucp_conn_request_h,
    pub name: *const c_char,
    pub local_sockaddr: ucs_sock_addr_t,
}

/// `ucp_request_param_t`; the callbacks are not used (requests are
/// polled), so `cb` is a plain pointer.
#[repr(C)]
pub struct ucp_request_param_t {
    pub op_attr_mask: u32,
    pub flags: u32,
    pub request: *mut c_void,
    pub cb: *mut c_void,
    pub datatype: u64,
    pub user_data: *mut c_void,
    pub reply_buffer: *mut c_void,
    pub memory_type: c_int,
    pub recv_info: *mut c_void,
    pub memh: *mut c_void,
}

impl ucp_request_param_t {
    /// No attribute: contiguous bytes, memory type detected, no callback.
    pub fn plain() -> Self {
        // SAFETY: every field is an integer or a raw pointer, for which
        // zero is a valid value (and what UCX reads for an unset field).
        unsafe { std::mem::zeroed() }
    }
}

#[repr(C)]
#[derive(Default)]
pub struct ucp_tag_recv_info_t {
    pub sender_tag: ucp_tag_t,
    pub length: usize,
}

/// The functions, from `libucp.so.0` (and the libucs it loads).
pub struct Api {
    _library: libloading::Library,
    pub init_version: unsafe extern "C" fn(
        c_uint,
        c_uint,
        *const ucp_params_t,
        *const c_void,
        *mut ucp_context_h,
    ) -> ucs_status_t,
    pub cleanup: unsafe extern "C" fn(ucp_context_h),
    pub worker_create: unsafe extern "C" fn(
        ucp_context_h,
        *const ucp_worker_params_t,
        *mut ucp_worker_h,
    ) -> ucs_status_t,
    pub worker_destroy: unsafe extern "C" fn(ucp_worker_h),
    pub worker_progress: unsafe extern "C" fn(ucp_worker_h) -> c_uint,
    pub worker_get_efd: unsafe extern "C" fn(ucp_worker_h, *mut c_int) -> ucs_status_t,
    pub worker_arm: unsafe extern "C" fn(ucp_worker_h) -> ucs_status_t,
    pub listener_create: unsafe extern "C" fn(
        ucp_worker_h,
        *const ucp_listener_params_t,
        *mut ucp_listener_h,
    ) -> ucs_status_t,
    pub listener_destroy: unsafe extern "C" fn(ucp_listener_h),
    pub listener_query:
        unsafe extern "C" fn(ucp_listener_h, *mut ucp_listener_attr_t) -> ucs_status_t,
    pub listener_reject: unsafe extern "C" fn(ucp_listener_h, ucp_conn_request_h) -> ucs_status_t,
    pub conn_request_query:
        unsafe extern "C" fn(ucp_conn_request_h, *mut ucp_conn_request_attr_t) -> ucs_status_t,
    pub ep_create:
        unsafe extern "C" fn(ucp_worker_h, *const ucp_ep_params_t, *mut ucp_ep_h) -> ucs_status_t,
    pub ep_close_nbx:
        unsafe extern "C" fn(ucp_ep_h, *const ucp_request_param_t) -> ucs_status_ptr_t,
    pub tag_send_nbx: unsafe extern "C" fn(
        ucp_ep_h,
        *const c_void,
        usize,
        ucp_tag_t,
        *const ucp_request_param_t,
    ) -> ucs_status_ptr_t,
    pub tag_recv_nbx: unsafe extern "C" fn(
        ucp_worker_h,
        *mut c_void,
        usize,
        ucp_tag_t,
        ucp_tag_t,
        *const ucp_request_param_t,
    ) -> ucs_status_ptr_t,
    pub tag_recv_request_test:
        unsafe extern "C" fn(*mut c_void, *mut ucp_tag_recv_info_t) -> ucs_status_t,
    pub request_check_status: unsafe extern "C" fn(*mut c_void) -> ucs_status_t,
    pub request_free: unsafe extern "C" fn(*mut c_void),
    pub request_cancel: unsafe extern "C" fn(ucp_worker_h, *mut c_void),
    status_string: unsafe extern "C" fn(ucs_status_t) -> *const c_char,
    get_version_string: unsafe extern "C" fn() -> *const c_char,
}

/// The library's name as the dynamic loader looks it up.
pub const LIBRARY: &str = "libucp.so.0";

impl Api {
    fn load() -> Result<Self, Error> {
        // SAFETY: loading libucp runs its initialisers, which set up UCX's
        // own globals only; no other code of this process depends on them.
        let library = unsafe { libloading::Library::new(LIBRARY) }.map_err(|e| {
            Error::Library(format!(
                "UCX is not installed here ({LIBRARY}: {e}): install Debian's libucx0 \
                 (apt-get install libucx0), or point LD_LIBRARY_PATH at a UCX build"
            ))
        })?;
        macro_rules! get {
            ($name:literal) => {
                // SAFETY: the symbol is UCX's function of that name, whose
                // C signature the field's type repeats (ucp.h, 1.13).
                *unsafe { library.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| Error::Library(format!("{LIBRARY} has no {}: {e}", $name)))?
            };
        }
        Ok(Self {
            init_version: get!("ucp_init_version"),
            cleanup: get!("ucp_cleanup"),
            worker_create: get!("ucp_worker_create"),
            worker_destroy: get!("ucp_worker_destroy"),
            worker_progress: get!("ucp_worker_progress"),
            worker_get_efd: get!("ucp_worker_get_efd"),
            worker_arm: get!("ucp_worker_arm"),
            listener_create: get!("ucp_listener_create"),
            listener_destroy: get!("ucp_listener_destroy"),
            listener_query: get!("ucp_listener_query"),
            listener_reject: get!("ucp_listener_reject"),
            conn_request_query: get!("ucp_conn_request_query"),
            ep_create: get!("ucp_ep_create"),
            ep_close_nbx: get!("ucp_ep_close_nbx"),
            tag_send_nbx: get!("ucp_tag_send_nbx"),
            tag_recv_nbx: get!("ucp_tag_recv_nbx"),
            tag_recv_request_test: get!("ucp_tag_recv_request_test"),
            request_check_status: get!("ucp_request_check_status"),
            request_free: get!("ucp_request_free"),
            request_cancel: get!("ucp_request_cancel"),
            status_string: get!("ucs_status_string"),
            get_version_string: get!("ucp_get_version_string"),
            _library: library,
        })
    }

    pub fn status_string(&self, status: ucs_status_t) -> String {
        // SAFETY: ucs_status_string returns a static string for any value.
        let text = unsafe { (self.status_string)(status) };
        if text.is_null() {
            return "unknown status".into();
        }
        // SAFETY: non-null, NUL-terminated and static (checked above).
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }

    pub fn version(&self) -> String {
        // SAFETY: returns a static NUL-terminated string.
        let text = unsafe { (self.get_version_string)() };
        if text.is_null() {
            return "unknown".into();
        }
        // SAFETY: non-null, NUL-terminated and static (checked above).
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

/// The loaded library, or why it cannot be loaded (said the same each time).
pub fn api() -> Result<&'static Api, Error> {
    API.get_or_init(|| Api::load().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|why| Error::Library(why.clone()))
}

/// A status as the loaded library words it (`ucs_status_string`), or its
/// number alone where the library cannot be loaded.
impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match api() {
            Ok(api) => write!(f, "{} ({})", api.status_string(self.0), self.0),
            Err(_) => write!(f, "UCX status {}", self.0),
        }
    }
}

/// What a `ucs_status_ptr_t` holds.
pub enum StatusPtr {
    Done,
    Failed(ucs_status_t),
    Pending(*mut c_void),
}

pub fn status_ptr(ptr: ucs_status_ptr_t) -> StatusPtr {
    let value = ptr as isize;
    if ptr.is_null() {
        StatusPtr::Done
    } else if (value as usize) >= (UCS_ERR_LAST as usize) {
        StatusPtr::Failed(value as ucs_status_t)
    } else {
        StatusPtr::Pending(ptr)
    }
}
