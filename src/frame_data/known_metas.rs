// SPDX-License-Identifier: MPL-2.0

//! Making a meta named by a producer known in the consumer's process.
//!
//! GStreamer registers a meta when its `*_meta_get_info()` first runs: a
//! consumer that never used a meta itself has not, and `gst_meta_deserialize`
//! refuses its name (1.28's meta factories register only GstVideoMeta and
//! GstAudioMeta). So, for a name not registered: the libraries' metas this
//! table knows are registered by calling their `get_info` (loading
//! libgstanalytics-1.0 where it is installed), and a custom meta (a payload
//! of structure text named like the meta) is registered as a custom meta.

use std::collections::HashSet;
use std::ffi::CString;
use std::str::FromStr;
use std::sync::{LazyLock, Mutex};

use gst::ffi;

use super::gst_api;
use super::meta_wire::{self, MetaWire};

/// Custom metas registered for producers, at most: each is a GType for the
/// life of the process, and the names come from another process.
const MAX_AUTO_REGISTERED: usize = 32;

type GetInfo = unsafe extern "C" fn() -> *const ffi::GstMetaInfo;

#[cfg(unix)]
const VIDEO_LIBRARY: &str = "libgstvideo-1.0.so.0";
#[cfg(windows)]
const VIDEO_LIBRARY: &str = "gstvideo-1.0-0.dll";
#[cfg(unix)]
const ANALYTICS_LIBRARY: &str = "libgstanalytics-1.0.so.0";
#[cfg(windows)]
const ANALYTICS_LIBRARY: &str = "gstanalytics-1.0-0.dll";

/// Metas of GStreamer's libraries: name, library, the function that
/// registers it. (None of them but the first serializes up to 1.28; they
/// are here for the versions that will.)
const KNOWN: &[(&str, &str, &str)] = &[
    (
        "GstReferenceTimestampMeta",
        "",
        "gst_reference_timestamp_meta_get_info",
    ),
    (
        "GstVideoRegionOfInterestMeta",
        VIDEO_LIBRARY,
        "gst_video_region_of_interest_meta_get_info",
    ),
    (
        "GstVideoCaptionMeta",
        VIDEO_LIBRARY,
        "gst_video_caption_meta_get_info",
    ),
    (
        "GstVideoTimeCodeMeta",
        VIDEO_LIBRARY,
        "gst_video_time_code_meta_get_info",
    ),
    (
        "GstVideoAFDMeta",
        VIDEO_LIBRARY,
        "gst_video_afd_meta_get_info",
    ),
    (
        "GstVideoBarMeta",
        VIDEO_LIBRARY,
        "gst_video_bar_meta_get_info",
    ),
    (
        "GstAncillaryMeta",
        VIDEO_LIBRARY,
        "gst_ancillary_meta_get_info",
    ),
    (
        "GstVideoSEIUserDataUnregisteredMeta",
        VIDEO_LIBRARY,
        "gst_video_sei_user_data_unregistered_meta_get_info",
    ),
    (
        "GstAnalyticsRelationMeta",
        ANALYTICS_LIBRARY,
        "gst_analytics_relation_meta_get_info",
    ),
    (
        "GstTensorMeta",
        ANALYTICS_LIBRARY,
        "gst_tensor_meta_get_info",
    ),
    (
        "GstAnalyticsBatchMeta",
        ANALYTICS_LIBRARY,
        "gst_analytics_batch_meta_get_info",
    ),
];

/// Libraries opened for their metas: never closed, as the metas they
/// register point into them.
static OPENED: Mutex<Vec<libloading::Library>> = Mutex::new(Vec::new());

/// Names not registered whose registration was tried, at most
/// [`MAX_TRIED`].
static TRIED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Mutex::default);
const MAX_TRIED: usize = 256;

/// Custom metas registered for producers so far.
static AUTO_REGISTERED: Mutex<usize> = Mutex::new(0);

/// The `GstMetaInfo` of a registered meta named `name`, or null.
pub fn registered(name: &str) -> *const ffi::GstMetaInfo {
    let Ok(name) = CString::new(name) else {
        return std::ptr::null();
    };
    // SAFETY: a NUL-terminated name; a lookup in GStreamer's table.
    unsafe { ffi::gst_meta_get_info(name.as_ptr()) }
}

/// The `GstMetaInfo` of the meta `wire` names, registering it as said
/// above where it is not yet; null where it cannot be.
pub fn info_for(wire: &MetaWire<'_>) -> *const ffi::GstMetaInfo {
    let info = registered(wire.name);
    if !info.is_null() {
        return info;
    }
    // Each name is tried once: loading a library that is not there is not
    // for every frame.
    let mut tried = TRIED.lock().unwrap_or_else(|e| e.into_inner());
    if tried.contains(wire.name) || tried.len() >= MAX_TRIED {
        return std::ptr::null();
    }
    tried.insert(wire.name.to_owned());
    drop(tried);
    if let Some(&(_, library, symbol)) = KNOWN.iter().find(|(name, ..)| *name == wire.name) {
        register_known(library, symbol);
    } else if is_custom_payload(wire) {
        register_custom(wire.name);
    }
    registered(wire.name)
}

/// Runs a library's `get_info`, loading the library if need be.
fn register_known(library: &str, symbol: &str) {
    if library.is_empty() {
        // SAFETY: GStreamer core's own registration, callable after init.
        unsafe { ffi::gst_reference_timestamp_meta_get_info() };
        return;
    }
    // SAFETY: loading a GStreamer library runs its constructors only, which
    // register nothing by themselves.
    let Ok(opened) = (unsafe { libloading::Library::new(library) }) else {
        gst::debug!(super::CAT, "{library} is not available");
        return;
    };
    let symbol = format!("{symbol}\0");
    // SAFETY: `*_meta_get_info` takes nothing and returns the registered
    // info; the library is kept loaded for ever below.
    unsafe {
        if let Ok(get_info) = opened.get::<GetInfo>(symbol.as_bytes()) {
            get_info();
        }
    }
    OPENED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(opened);
}

/// Whether `wire` looks like a custom meta's: structure text named like
/// the meta (`custom_init_func` names the structure after the meta).
fn is_custom_payload(wire: &MetaWire<'_>) -> bool {
    meta_wire::parse_custom(wire.version, wire.payload)
        .and_then(|text| gst::Structure::from_str(text).ok())
        .is_some_and(|s| s.name() == wire.name)
}

/// Registers `name` as a custom meta without tags, unless its names are
/// GTypes already or too many were.
fn register_custom(name: &str) {
    let mut count = AUTO_REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    let api = format!("{name}-api");
    if *count >= MAX_AUTO_REGISTERED
        || gst::glib::Type::from_name(name).is_some()
        || gst::glib::Type::from_name(&api).is_some()
    {
        return;
    }
    let Ok(c_name) = CString::new(name) else {
        return;
    };
    let mut tags = [std::ptr::null()];
    // SAFETY: a NUL-terminated name, free as a GType (checked above), an
    // empty NULL-terminated tag list, no transform function.
    let info = unsafe {
        gst_api::gst_meta_register_custom(
            c_name.as_ptr(),
            tags.as_mut_ptr(),
            std::ptr::null(),
            std::ptr::null_mut(),
            std::ptr::null(),
        )
    };
    if !info.is_null() {
        *count += 1;
        gst::info!(
            super::CAT,
            "registered custom meta {name} for a producer's frames; an application that registers it too should do so before the source starts"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire_of<'a>(name: &'a str, payload: &'a [u8]) -> MetaWire<'a> {
        MetaWire {
            name,
            version: 0,
            payload,
        }
    }

    #[test]
    fn library_metas_are_registered_where_their_library_is() {
        gst::init().unwrap();
        // libgstvideo is always there (the plugin links it).
        let roi = wire_of("GstVideoRegionOfInterestMeta", b"");
        assert!(!info_for(&roi).is_null());
        // libgstanalytics (1.24+, gst-plugins-bad) only where installed.
        let relation = wire_of("GstAnalyticsRelationMeta", b"");
        // SAFETY: as in register_known.
        let installed = unsafe { libloading::Library::new(ANALYTICS_LIBRARY) }.is_ok();
        eprintln!("libgstanalytics-1.0 installed: {installed}");
        assert_eq!(!info_for(&relation).is_null(), installed);
    }

    #[test]
    fn only_custom_looking_payloads_register_a_custom_meta() {
        gst::init().unwrap();
        // Structure text named otherwise, or no text: not registered.
        let other = wire_of("CudaIpcTestOtherName", b"Else, a=(int)1;\0");
        assert!(info_for(&other).is_null());
        let binary = wire_of("CudaIpcTestBinary", b"\x01\x02\0");
        assert!(info_for(&binary).is_null());
        let named = wire_of("CudaIpcTestNamed", b"CudaIpcTestNamed, a=(int)1;\0");
        let info = info_for(&named);
        assert!(!info.is_null());
        // SAFETY: a registered info.
        assert_ne!(unsafe { gst_api::gst_meta_info_is_custom(info) }, 0);
        assert_eq!(info_for(&named), info, "registered once");
    }
}
