//! `CudaIpcMeta`: the device pointer, pitch and device of a CUDA buffer, as
//! a GstCustomMeta (GStreamer 1.20+), so that applications in any language
//! can read it: in Python, `buffer.get_custom_meta("CudaIpcMeta")`.
//!
//! Its structure holds `device-ptr` (guint64), `pitch` (gint, bytes per row
//! of plane 0), `size` (guint64), `device-id` (gint, the CUDA ordinal in
//! this process) and `cuda-stream` (guint64, a `CUstream` of this process):
//! the stream the source reads the frame on and orders its release of the
//! slot on. A reader makes its own stream wait for it before reading, and
//! makes it wait for its own stream's reads before dropping the buffer
//! (the `cudaipc` Python package's `from_gst_sample` does both).

use std::ffi::c_char;
use std::sync::Once;

pub const META_NAME: &str = "CudaIpcMeta";
const META_NAME_C: &std::ffi::CStr = c"CudaIpcMeta";

// GstCustomMeta API of GStreamer 1.20+ (not bound by gstreamer-rs without a
// version feature), declared once for the plugin.
use crate::frame_data::gst_api::{
    gst_buffer_add_custom_meta, gst_buffer_get_custom_meta, gst_meta_register_custom,
};

static REGISTER: Once = Once::new();

/// Registers the meta; called by the plugin's init.
pub fn register() {
    REGISTER.call_once(|| {
        let mut tags: [*const c_char; 2] = [c"memory".as_ptr(), std::ptr::null()];
        // SAFETY: static name, NULL-terminated tag list; no transform
        // function, so the meta is copied whole with the buffer.
        unsafe {
            gst_meta_register_custom(
                META_NAME_C.as_ptr(),
                tags.as_mut_ptr(),
                std::ptr::null(),
                std::ptr::null_mut(),
                std::ptr::null(),
            );
        }
    });
}

/// What the meta says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaIpcMeta {
    pub device_ptr: u64,
    pub pitch: i32,
    pub size: u64,
    pub device_id: i32,
    pub cuda_stream: u64,
}

impl CudaIpcMeta {
    /// Adds the meta to `buffer`.
    pub fn add(buffer: &mut gst::BufferRef, meta: CudaIpcMeta) {
        register();
        // SAFETY: the buffer is writable (we have &mut); the returned meta
        // belongs to it and its structure is owned by the meta.
        unsafe {
            let custom = gst_buffer_add_custom_meta(buffer.as_mut_ptr(), META_NAME_C.as_ptr());
            if custom.is_null() {
                return;
            }
            let s = gst::StructureRef::from_glib_borrow_mut((*custom).structure);
            s.set("device-ptr", meta.device_ptr);
            s.set("pitch", meta.pitch);
            s.set("size", meta.size);
            s.set("device-id", meta.device_id);
            s.set("cuda-stream", meta.cuda_stream);
        }
    }

    /// Reads the meta of `buffer`, if it has one.
    pub fn get(buffer: &gst::BufferRef) -> Option<CudaIpcMeta> {
        register();
        // SAFETY: read-only lookup; the meta and its structure live as long
        // as the borrowed buffer.
        unsafe {
            let custom = gst_buffer_get_custom_meta(buffer.as_mut_ptr(), META_NAME_C.as_ptr());
            if custom.is_null() {
                return None;
            }
            let s = gst::StructureRef::from_glib_borrow((*custom).structure);
            Some(CudaIpcMeta {
                device_ptr: s.get("device-ptr").ok()?,
                pitch: s.get("pitch").ok()?,
                size: s.get("size").ok()?,
                device_id: s.get("device-id").ok()?,
                cuda_stream: s.get("cuda-stream").ok()?,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_on_a_buffer() {
        gst::init().unwrap();
        let mut buffer = gst::Buffer::new();
        let meta = CudaIpcMeta {
            device_ptr: 0x7f00_0000_1000,
            pitch: 11520,
            size: 24_883_200,
            device_id: 1,
            cuda_stream: 0x5500_0000_2000,
        };
        assert_eq!(CudaIpcMeta::get(&buffer), None);
        CudaIpcMeta::add(buffer.get_mut().unwrap(), meta);
        assert_eq!(CudaIpcMeta::get(&buffer), Some(meta));
        // The meta travels with copies of the buffer.
        let copy = buffer.copy();
        assert_eq!(CudaIpcMeta::get(&copy), Some(meta));
    }
}
