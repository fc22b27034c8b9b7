// SPDX-License-Identifier: MPL-2.0

//! An application's per-frame data in a pipeline: the custom meta
//! `CudaIpcFrameData`, whose structure holds `bytes` (a GBytes) and/or
//! `json` (a string, a dict as JSON text). On the producer it becomes the
//! frame's `AppBytes`/`AppJson` entries (not a serialized meta), which the
//! Rust, Python and C subscribers read as the frame's data; on the consumer
//! those entries become the meta again.
//!
//! In Python: `cudaipc.set_gst_buffer_data(buffer, {"id": 7})` and
//! `cudaipc.gst_buffer_data(buffer)` downstream of the source (PyGObject's
//! `meta.get_structure()` is a copy, which `set_value` does not write through).

use std::ffi::{CStr, c_char};
use std::sync::Once;

use gst::glib;

use cudaipc_channel::frame_data::{Entry, EntryKind, FrameDataWriter};

use super::gst_api;
use super::report::{MetaReport, NotCrossed};

pub const META_NAME: &str = "CudaIpcFrameData";
const META_NAME_C: &CStr = c"CudaIpcFrameData";
/// The structure's field holding an application's bytes (GBytes).
pub const BYTES_FIELD: &str = "bytes";
/// The structure's field holding an application's JSON text (string).
pub const JSON_FIELD: &str = "json";

static REGISTER: Once = Once::new();

/// Registers the meta (once; no tags, so every transform that copies metas
/// copies it).
pub fn register() {
    REGISTER.call_once(|| {
        let mut tags: [*const c_char; 1] = [std::ptr::null()];
        // SAFETY: static name, empty NULL-terminated tag list; no transform
        // function, so the meta is copied whole with the buffer.
        unsafe {
            gst_api::gst_meta_register_custom(
                META_NAME_C.as_ptr(),
                tags.as_mut_ptr(),
                std::ptr::null(),
                std::ptr::null_mut(),
                std::ptr::null(),
            );
        }
    });
}

/// The structure of `buffer`'s `CudaIpcFrameData`, if it has one.
fn structure_of(buffer: &gst::BufferRef) -> Option<&gst::StructureRef> {
    register();
    // SAFETY: a read-only lookup by name; the meta and its structure live as
    // long as the borrowed buffer.
    unsafe {
        let custom = gst_api::gst_buffer_get_custom_meta(buffer.as_mut_ptr(), META_NAME_C.as_ptr());
        (!custom.is_null()).then(|| gst::StructureRef::from_glib_borrow((*custom).structure))
    }
}

/// Writes the application's data of `buffer` as `AppBytes`/`AppJson`
/// entries.
pub fn encode(buffer: &gst::BufferRef, writer: &mut FrameDataWriter, report: &mut MetaReport) {
    let Some(structure) = structure_of(buffer) else {
        return;
    };
    if structure.has_field(BYTES_FIELD) {
        match structure.get::<glib::Bytes>(BYTES_FIELD) {
            Ok(bytes) => push(writer, EntryKind::AppBytes, &bytes, report),
            Err(_) => report.not_crossed(META_NAME, NotCrossed::WrongFieldType),
        }
    }
    if structure.has_field(JSON_FIELD) {
        match structure.get::<&str>(JSON_FIELD) {
            Ok(json) => push(writer, EntryKind::AppJson, json.as_bytes(), report),
            Err(_) => report.not_crossed(META_NAME, NotCrossed::WrongFieldType),
        }
    }
}

fn push(writer: &mut FrameDataWriter, kind: EntryKind, bytes: &[u8], report: &mut MetaReport) {
    match writer.push(kind, bytes) {
        Ok(()) => report.app_entry(),
        Err(refused) => {
            report.dropped(refused.needed);
            report.not_crossed(META_NAME, NotCrossed::Bound);
        }
    }
}

/// Adds the `AppBytes`/`AppJson` entries to `buffer` as its
/// `CudaIpcFrameData` (the first of each kind; a second is refused, as no
/// producer writes one).
pub fn decode(entries: &[Entry<'_>], buffer: &mut gst::BufferRef, report: &mut MetaReport) {
    let mut bytes = None;
    let mut json = None;
    for entry in entries {
        match entry.kind {
            EntryKind::AppBytes if bytes.is_none() => bytes = Some(entry.bytes),
            EntryKind::AppJson if json.is_none() => match std::str::from_utf8(entry.bytes) {
                Ok(text) => json = Some(text),
                Err(_) => report.hostile(&"application JSON that is not UTF-8"),
            },
            EntryKind::AppBytes | EntryKind::AppJson => {
                report.hostile(&"a second application data entry of one kind")
            }
            EntryKind::GstMeta => {}
        }
    }
    if bytes.is_none() && json.is_none() {
        return;
    }
    let Some(structure) = structure_of_mut(buffer) else {
        return;
    };
    if let Some(bytes) = bytes {
        structure.set(BYTES_FIELD, glib::Bytes::from(bytes));
        report.app_entry();
    }
    if let Some(json) = json {
        structure.set(JSON_FIELD, json);
        report.app_entry();
    }
}

/// The structure of `buffer`'s `CudaIpcFrameData`, added if need be
/// (`None` only if GStreamer refused to register the meta).
fn structure_of_mut(buffer: &mut gst::BufferRef) -> Option<&mut gst::StructureRef> {
    register();
    // SAFETY: the buffer is writable (borrowed mutably); the meta belongs to
    // it and its structure to the meta.
    unsafe {
        let mut custom =
            gst_api::gst_buffer_get_custom_meta(buffer.as_mut_ptr(), META_NAME_C.as_ptr());
        if custom.is_null() {
            custom = gst_api::gst_buffer_add_custom_meta(buffer.as_mut_ptr(), META_NAME_C.as_ptr());
        }
        (!custom.is_null()).then(|| gst::StructureRef::from_glib_borrow_mut((*custom).structure))
    }
}

/// Puts an application's data on `buffer` (what an application does).
#[cfg(test)]
pub fn set(buffer: &mut gst::BufferRef, bytes: Option<&[u8]>, json: Option<&str>) {
    let Some(structure) = structure_of_mut(buffer) else {
        return;
    };
    if let Some(bytes) = bytes {
        structure.set(BYTES_FIELD, glib::Bytes::from(bytes));
    }
    if let Some(json) = json {
        structure.set(JSON_FIELD, json);
    }
}

/// The application's data of `buffer`: its bytes and its JSON text.
#[cfg(test)]
pub fn get(buffer: &gst::BufferRef) -> (Option<glib::Bytes>, Option<String>) {
    match structure_of(buffer) {
        None => (None, None),
        Some(s) => (
            s.get::<glib::Bytes>(BYTES_FIELD).ok(),
            s.get::<String>(JSON_FIELD).ok(),
        ),
    }
}
