// SPDX-License-Identifier: MPL-2.0

//! GStreamer 1.22 has no `gst_meta_serialize`: there the plugin writes and
//! reads the two metas that matter most itself, byte for byte as 1.24+
//! does (see [`super::meta_wire`]), so that a 1.22 producer and a 1.28
//! consumer agree, and the other way round:
//! - `GstReferenceTimestampMeta` (1.14), without 1.28's `info` (1.22 has
//!   none; a 1.28 producer's is read past);
//! - custom metas (`gst_meta_register_custom`, 1.20), their structure as
//!   `gst_structure_serialize` text, refused where 1.24's
//!   `GST_SERIALIZE_FLAG_STRICT` would refuse it.

use std::str::FromStr;

use gst::ffi;
use gst::glib;
use gst::glib::translate::{FromGlibPtrFull, ToGlibPtr};
use gst::prelude::*;

use super::gst_api;
use super::meta_wire::{self, MetaWire};

/// The implementation name of `GstReferenceTimestampMeta`.
pub const REFERENCE_TIMESTAMP: &str = "GstReferenceTimestampMeta";

/// The wire form 1.24+'s `gst_meta_serialize` writes for a reference
/// timestamp meta without `info`.
pub fn serialize_reference_timestamp(meta: &gst::ReferenceTimestampMeta) -> Option<Vec<u8>> {
    // SAFETY: the meta is borrowed from its buffer; the fields are read
    // raw because gstreamer-rs panics on a timestamp of NONE, which the C
    // serializer writes as is.
    let (timestamp, duration) = unsafe {
        let raw =
            &*(meta as *const gst::ReferenceTimestampMeta as *const ffi::GstReferenceTimestampMeta);
        (raw.timestamp, raw.duration)
    };
    let reference = meta.reference().to_string();
    let payload = meta_wire::reference_timestamp_payload(timestamp, duration, &reference);
    meta_wire::write(REFERENCE_TIMESTAMP, 0, &payload)
}

/// The wire form 1.24+'s `gst_meta_serialize` writes for a custom meta
/// named `name` holding `structure`; `None` where 1.24 refuses it.
pub fn serialize_custom(name: &str, structure: &gst::StructureRef) -> Option<Vec<u8>> {
    if !strictly_serializable(structure) {
        return None;
    }
    let text = structure_text(structure)?;
    meta_wire::write(name, 0, &meta_wire::custom_payload(&text))
}

/// `gst_structure_serialize(structure, GST_SERIALIZE_FLAG_NONE)`: nested
/// structures and caps in brackets, the form 1.24's strict serialization
/// writes where it succeeds.
pub fn structure_text(structure: &gst::StructureRef) -> Option<String> {
    // SAFETY: a borrowed structure; the result is a new string or NULL.
    unsafe {
        let text =
            gst_api::gst_structure_serialize(structure.as_ptr(), gst_api::SERIALIZE_FLAG_NONE);
        (!text.is_null()).then(|| glib::GString::from_glib_full(text).to_string())
    }
}

/// Whether 1.24's `gst_structure_serialize_full(.., STRICT)` would
/// serialize `structure` (gststructure.c `priv_gst_structure_append_to_gstring`):
/// it refuses a field it cannot serialize, one holding a pointer, and one
/// holding an object; lists, arrays and caps it always writes; nested
/// structures by the same rule.
pub fn strictly_serializable(structure: &gst::StructureRef) -> bool {
    structure.iter().all(|(_, value)| {
        let type_ = value.type_();
        if type_ == gst::Array::static_type()
            || type_ == gst::List::static_type()
            || type_ == gst::Caps::static_type()
        {
            return true;
        }
        if type_ == gst::Structure::static_type() {
            return value
                .get::<gst::Structure>()
                .is_ok_and(|nested| strictly_serializable(&nested));
        }
        if type_.is_a(glib::Object::static_type()) || type_ == glib::Type::POINTER {
            return false;
        }
        // SAFETY: a borrowed value; the result is a new string or NULL.
        unsafe {
            let text = ffi::gst_value_serialize(value.to_glib_none().0);
            let serializable = !text.is_null();
            glib::ffi::g_free(text.cast());
            serializable
        }
    })
}

/// Adds the reference timestamp meta of `wire` to `buffer`, as 1.24's
/// `timestamp_meta_deserialize` does; whether it could. 1.28's `info` has
/// no place on 1.22 and is left.
pub fn deserialize_reference_timestamp(wire: &MetaWire<'_>, buffer: &mut gst::BufferRef) -> bool {
    let Some(parsed) = meta_wire::parse_reference_timestamp(wire.version, wire.payload) else {
        return false;
    };
    let Ok(reference) = gst::Caps::from_str(parsed.reference) else {
        return false;
    };
    // SAFETY: a writable buffer (borrowed mutably) and caps it refs; the
    // timestamps are passed raw, NONE included, as the C deserializer does.
    let meta = unsafe {
        ffi::gst_buffer_add_reference_timestamp_meta(
            buffer.as_mut_ptr(),
            reference.to_glib_none().0,
            parsed.timestamp,
            parsed.duration,
        )
    };
    !meta.is_null()
}

/// Whether `wire`'s payload is one a reference timestamp meta's
/// deserializer takes without fault: 1.24 to 1.28 hand the caps they parse
/// to `gst_buffer_add_reference_timestamp_meta` unchecked (NULL caps: a
/// critical, and a crash on 1.28).
pub fn reference_timestamp_is_sound(wire: &MetaWire<'_>) -> bool {
    meta_wire::parse_reference_timestamp(wire.version, wire.payload)
        .is_some_and(|parsed| gst::Caps::from_str(parsed.reference).is_ok())
}

/// Adds the custom meta of `wire` to `buffer`, as 1.24's
/// `custom_deserialize_func` does; whether it could. The meta must be
/// registered (custom).
pub fn deserialize_custom(wire: &MetaWire<'_>, buffer: &mut gst::BufferRef) -> bool {
    let Some(text) = meta_wire::parse_custom(wire.version, wire.payload) else {
        return false;
    };
    let Ok(parsed) = gst::Structure::from_str(text) else {
        return false;
    };
    let Ok(name) = std::ffi::CString::new(wire.name) else {
        return false;
    };
    // SAFETY: a writable buffer (borrowed mutably); the meta belongs to it
    // and its structure to the meta, whose parent refcount is the buffer's,
    // which we hold writable.
    unsafe {
        let custom = gst_api::gst_buffer_add_custom_meta(buffer.as_mut_ptr(), name.as_ptr());
        if custom.is_null() {
            return false;
        }
        let structure = gst::StructureRef::from_glib_borrow_mut((*custom).structure);
        for (field, value) in parsed.iter() {
            structure.set_value(field, value.clone());
        }
    }
    true
}
