// SPDX-License-Identifier: MPL-2.0

//! The parts of GStreamer's C API this module needs that gstreamer-rs binds
//! only behind version features the plugin does not enable: those of 1.20
//! (which 1.22 has) are linked; those of 1.24 (meta serialization) are looked
//! up at run time in the libgstreamer-1.0 this process already runs, so that
//! the plugin keeps loading on 1.22.

use std::ffi::{c_char, c_void};
use std::sync::LazyLock;

use gst::ffi;
use gst::glib;

/// `GstCustomMeta` (1.20): a meta holding one structure, named like the meta.
#[repr(C)]
pub(crate) struct GstCustomMeta {
    pub meta: ffi::GstMeta,
    pub structure: *mut ffi::GstStructure,
}

/// The head of 1.24's `GstMetaInfo`: 1.22's fields, then the two 1.24
/// appended. Only to be read where the runtime is 1.24 or later (1.22
/// allocates the first six fields only).
#[repr(C)]
struct GstMetaInfo1_24 {
    api: glib::ffi::GType,
    type_: glib::ffi::GType,
    size: usize,
    init_func: *const c_void,
    free_func: *const c_void,
    transform_func: *const c_void,
    serialize_func: *const c_void,
    deserialize_func: *const c_void,
}

/// `GST_SERIALIZE_FLAG_NONE`: nested structures and caps in brackets.
pub(super) const SERIALIZE_FLAG_NONE: u32 = 0;

// GStreamer 1.20 API, present in every runtime the plugin supports (the
// custom meta ones serve src/memory/meta.rs's CudaIpcMeta too).
unsafe extern "C" {
    pub(crate) fn gst_meta_register_custom(
        name: *const c_char,
        tags: *mut *const c_char,
        transform_func: *const c_void,
        user_data: *mut c_void,
        destroy_data: *const c_void,
    ) -> *const ffi::GstMetaInfo;
    pub(crate) fn gst_buffer_add_custom_meta(
        buffer: *mut ffi::GstBuffer,
        name: *const c_char,
    ) -> *mut GstCustomMeta;
    pub(crate) fn gst_buffer_get_custom_meta(
        buffer: *mut ffi::GstBuffer,
        name: *const c_char,
    ) -> *mut GstCustomMeta;
    pub(super) fn gst_meta_info_is_custom(info: *const ffi::GstMetaInfo) -> glib::ffi::gboolean;
    pub(super) fn gst_structure_serialize(
        structure: *const ffi::GstStructure,
        flags: u32,
    ) -> *mut c_char;
    pub(super) fn gst_event_set_gap_flags(event: *mut ffi::GstEvent, flags: u32);
    #[cfg(test)]
    pub(super) fn gst_event_parse_gap_flags(event: *mut ffi::GstEvent, flags: *mut u32);
}

type MetaSerializeSimple =
    unsafe extern "C" fn(*const ffi::GstMeta, *mut glib::ffi::GByteArray) -> glib::ffi::gboolean;
type MetaDeserialize =
    unsafe extern "C" fn(*mut ffi::GstBuffer, *const u8, usize, *mut u32) -> *mut ffi::GstMeta;

/// GStreamer 1.24's meta serialization.
pub(super) struct Serialization {
    serialize_simple: MetaSerializeSimple,
    deserialize: MetaDeserialize,
    _library: libloading::Library,
}

static SERIALIZATION: LazyLock<Option<Serialization>> = LazyLock::new(|| {
    let library = open_libgstreamer()?;
    // SAFETY: the types are the C prototypes of these functions in 1.24's
    // gstmeta.h; the library stays loaded as long as the pointers (kept
    // together in the static).
    unsafe {
        let serialize_simple: MetaSerializeSimple =
            *library.get(b"gst_meta_serialize_simple\0").ok()?;
        let deserialize: MetaDeserialize = *library.get(b"gst_meta_deserialize\0").ok()?;
        Some(Serialization {
            serialize_simple,
            deserialize,
            _library: library,
        })
    }
});

/// GStreamer 1.24+'s meta serialization, or `None` (1.22).
pub(super) fn serialization() -> Option<&'static Serialization> {
    SERIALIZATION.as_ref()
}

impl Serialization {
    /// What `gst_meta_serialize` writes for `meta`, or `None` where it
    /// refuses (no `serialize_func`, or one that failed).
    pub(super) fn serialize(&self, meta: *const ffi::GstMeta) -> Option<Vec<u8>> {
        // SAFETY: a new, empty GByteArray, freed below with its data; `meta`
        // is a meta of a buffer the caller borrows.
        unsafe {
            let array = glib::ffi::g_byte_array_new();
            let written = (self.serialize_simple)(meta, array) != 0;
            let bytes = written.then(|| {
                let array = &*array;
                match array.len {
                    0 => Vec::new(),
                    len => std::slice::from_raw_parts(array.data, len as usize).to_vec(),
                }
            });
            glib::ffi::g_byte_array_free(array, glib::ffi::GTRUE);
            bytes
        }
    }

    /// `gst_meta_deserialize` of one meta's wire form onto `buffer`;
    /// whether a meta was added. The caller has checked the header (1.24's
    /// own check of it can overflow).
    pub(super) fn deserialize(&self, buffer: &mut gst::BufferRef, wire: &[u8]) -> bool {
        let mut consumed = 0u32;
        // SAFETY: `buffer` is writable (borrowed mutably) and `wire` a valid
        // slice of the length given.
        let meta = unsafe {
            (self.deserialize)(
                buffer.as_mut_ptr(),
                wire.as_ptr(),
                wire.len(),
                &mut consumed,
            )
        };
        !meta.is_null()
    }
}

/// Whether `info` can be serialized and deserialized, on 1.24+: its
/// `serialize_func` and `deserialize_func`; `(false, false)` on 1.22.
pub(super) fn info_serializes(info: *const ffi::GstMetaInfo) -> (bool, bool) {
    if serialization().is_none() || info.is_null() {
        return (false, false);
    }
    // SAFETY: on 1.24+ every GstMetaInfo is allocated by GStreamer with
    // these fields (gst_meta_info_new allocates a GstMetaInfoImpl).
    let info = unsafe { &*(info as *const GstMetaInfo1_24) };
    (
        !info.serialize_func.is_null(),
        !info.deserialize_func.is_null(),
    )
}

/// The libgstreamer-1.0 this process runs, opened again (never a second
/// copy).
#[cfg(unix)]
fn open_libgstreamer() -> Option<libloading::Library> {
    // SAFETY: all-zero is a valid Dl_info (null pointers).
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let symbol = ffi::gst_init as *const libc::c_void;
    // SAFETY: `symbol` is a function of a loaded library and `info` an out
    // parameter; dli_fname, when set, is the loader's string, valid while the
    // library is loaded (it is: the plugin links it).
    let path = unsafe {
        if libc::dladdr(symbol, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        std::ffi::CStr::from_ptr(info.dli_fname).to_owned()
    };
    let path = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path.to_bytes());
    // SAFETY: RTLD_NOLOAD only takes another reference to the library
    // already loaded: no constructor runs.
    unsafe {
        libloading::os::unix::Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_NOLOAD)
            .ok()
            .map(libloading::Library::from)
    }
}

/// The gstreamer-1.0 DLL this process runs.
#[cfg(windows)]
fn open_libgstreamer() -> Option<libloading::Library> {
    libloading::os::windows::Library::open_already_loaded("gstreamer-1.0-0.dll")
        .ok()
        .map(libloading::Library::from)
}
