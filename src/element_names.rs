// SPDX-License-Identifier: MPL-2.0

//! Which names the channel elements register under.
//!
//! GStreamer 1.24 and later also ship elements named `cudaipcsink` and
//! `cudaipcsrc` (nvcodec, gst-plugins-bad; another protocol). When two
//! plugins register one name, the registry keeps the one it met last, so
//! which element a name gives would depend on the order of plugin scanning.
//! This plugin decides from the installation instead: where nvcodec provides
//! its own elements of those names, the bare names stay nvcodec's and this
//! plugin's elements are `rscudaipcsink`/`rscudaipcsrc` only; elsewhere
//! (GStreamer 1.22, no nvcodec, no CUDA device) both names are this
//! plugin's. The `rs` names always work. `CUDAIPC_ELEMENT_NAMES=bare` or
//! `=rs` overrides the choice.

use std::path::PathBuf;

use gst::prelude::*;

/// The names under which an element of this plugin registers.
pub(crate) fn names(bare: &'static str, rs: &'static str) -> Vec<&'static str> {
    if register_bare_names() {
        vec![bare, rs]
    } else {
        vec![rs]
    }
}

/// Renames an instance that GStreamer named after its GType
/// (`GstRsCudaTestSrc` gives `rscudatestsrc0`) after its factory instead
/// (`cudatestsrc0`), keeping GStreamer's number. A name the application
/// gave is kept.
pub(crate) fn name_after_factory(element: &impl IsA<gst::Object>, factory: &str) {
    let name = element.name();
    let number = name
        .strip_prefix("rs")
        .and_then(|rest| rest.strip_prefix(factory))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if let Some(number) = number {
        element.set_property("name", format!("{factory}{number}"));
    }
}

/// Whether the bare names (`cudaipcsink`, `cudaipcsrc`) are this plugin's.
pub fn register_bare_names() -> bool {
    match std::env::var("CUDAIPC_ELEMENT_NAMES").as_deref() {
        Ok("bare") => true,
        Ok("rs") => false,
        _ => !nvcodec_provides_cudaipc(),
    }
}

/// GStreamer's nvcodec registers its `cudaipcsink`/`cudaipcsrc` from 1.24
/// on, when its plugin is installed and a CUDA device is usable.
fn nvcodec_provides_cudaipc() -> bool {
    let (major, minor, _, _) = gst::version();
    (major, minor) >= (1, 24) && nvcodec_installed() && cudaipc_transport::cuda::is_available()
}

/// The file of nvcodec's plugin.
const NVCODEC_FILE: &str = if cfg!(windows) {
    "gstnvcodec.dll"
} else {
    "libgstnvcodec.so"
};

fn nvcodec_installed() -> bool {
    plugin_dirs()
        .iter()
        .any(|dir| dir.join(NVCODEC_FILE).is_file())
}

/// The folders GStreamer scans for plugins: the two environment paths, and
/// the built-in system folder (`gstreamer-1.0` beside libgstreamer) when
/// `GST_PLUGIN_SYSTEM_PATH` does not replace it.
fn plugin_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut system_set = false;
    for var in [
        "GST_PLUGIN_PATH_1_0",
        "GST_PLUGIN_PATH",
        "GST_PLUGIN_SYSTEM_PATH_1_0",
        "GST_PLUGIN_SYSTEM_PATH",
    ] {
        if let Some(value) = std::env::var_os(var) {
            system_set |= var.starts_with("GST_PLUGIN_SYSTEM");
            dirs.extend(std::env::split_paths(&value));
        }
    }
    if !system_set && let Some(lib) = libgstreamer_path() {
        // Linux: <libdir>/gstreamer-1.0 beside the library; Windows:
        // <prefix>\lib\gstreamer-1.0, the DLL being in <prefix>\bin.
        let system_dir = if cfg!(windows) {
            lib.parent()
                .and_then(|bin| bin.parent())
                .map(|prefix| prefix.join("lib").join("gstreamer-1.0"))
        } else {
            lib.parent().map(|parent| parent.join("gstreamer-1.0"))
        };
        dirs.extend(system_dir);
    }
    dirs
}

/// Where the gstreamer-1.0 DLL this process runs is.
#[cfg(windows)]
fn libgstreamer_path() -> Option<PathBuf> {
    use std::os::windows::ffi::OsStringExt;
    use windows_sys::Win32::System::LibraryLoader::{
        GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS, GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
        GetModuleFileNameW, GetModuleHandleExW,
    };
    let symbol = gst::ffi::gst_init as *const u16;
    let mut module = std::ptr::null_mut();
    // SAFETY: `symbol` is the address of a function of a loaded DLL and
    // `module` an out parameter; the reference count is left unchanged.
    let found = unsafe {
        GetModuleHandleExW(
            GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
            symbol,
            &mut module,
        )
    } != 0;
    if !found {
        return None;
    }
    let mut name = vec![0u16; 32 * 1024];
    // SAFETY: a loaded module and a buffer of the length given.
    let len = unsafe { GetModuleFileNameW(module, name.as_mut_ptr(), name.len() as u32) } as usize;
    (len > 0 && len < name.len())
        .then(|| PathBuf::from(std::ffi::OsString::from_wide(&name[..len])))
}

/// Where the libgstreamer-1.0 this process runs is.
#[cfg(unix)]
fn libgstreamer_path() -> Option<PathBuf> {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    // SAFETY: all-zero is a valid Dl_info (null pointers).
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let symbol = gst::ffi::gst_init as *const libc::c_void;
    // SAFETY: `symbol` is the address of a function of a loaded library and
    // `info` a valid out parameter; dli_fname, when set, is a NUL-terminated
    // string owned by the loader that outlives this call.
    let found = unsafe { libc::dladdr(symbol, &mut info) } != 0 && !info.dli_fname.is_null();
    if !found {
        return None;
    }
    // SAFETY: see above.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    std::fs::canonicalize(Path::new(OsStr::from_bytes(name.to_bytes()))).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_plugin_folder_is_found() {
        gst::init().unwrap();
        // coreelements lives in the system folder wherever GStreamer is
        // installed; finding it shows the folder list is right.
        let dirs = plugin_dirs();
        assert!(
            dirs.iter()
                .any(|d| d.join("libgstcoreelements.so").is_file()),
            "no plugin folder with coreelements among {dirs:?}"
        );
    }

    #[test]
    fn the_rs_names_are_always_registered() {
        gst::init().unwrap();
        let names = names("cudaipcsink", "rscudaipcsink");
        assert!(names.contains(&"rscudaipcsink"));
        // Without CUDA (CI) nvcodec has no CUDA elements: both names are ours.
        if !cudaipc_transport::cuda::is_available()
            && std::env::var_os("CUDAIPC_ELEMENT_NAMES").is_none()
        {
            assert!(names.contains(&"cudaipcsink"));
        }
    }
}
