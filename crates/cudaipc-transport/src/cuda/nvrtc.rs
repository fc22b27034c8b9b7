//! Run-time compilation of the kernels with NVRTC, loaded on demand so that
//! the plugin works (without GPU elements) where NVRTC is absent, and so
//! that any NVRTC major version found on the machine can be used.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::LazyLock;

use super::{CudaError, Result};

type Program = *mut c_void;
type CreateProgram = unsafe extern "C" fn(
    *mut Program,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> c_int;
type CompileProgram = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int;
type GetSize = unsafe extern "C" fn(Program, *mut usize) -> c_int;
type GetBytes = unsafe extern "C" fn(Program, *mut c_char) -> c_int;
type DestroyProgram = unsafe extern "C" fn(*mut Program) -> c_int;
type Version = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
type ErrorString = unsafe extern "C" fn(c_int) -> *const c_char;

struct Nvrtc {
    path: String,
    create: CreateProgram,
    compile: CompileProgram,
    ptx_size: GetSize,
    ptx: GetBytes,
    cubin_size: GetSize,
    cubin: GetBytes,
    log_size: GetSize,
    log: GetBytes,
    destroy: DestroyProgram,
    version: (i32, i32),
    error_string: ErrorString,
    _library: libloading::Library,
}

/// Where NVRTC is looked for, in order. `CUDAIPC_NVRTC_LIB` names a file.
fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(path) = std::env::var_os("CUDAIPC_NVRTC_LIB") {
        out.push(PathBuf::from(path));
    }
    let names = [
        "libnvrtc.so.13",
        "libnvrtc.so.12",
        "libnvrtc.so",
        "libnvrtc.so.11.2",
    ];
    out.extend(names.iter().map(PathBuf::from));
    let mut dirs = vec![
        PathBuf::from("/usr/local/cuda/lib64"),
        PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"),
    ];
    // Python wheels (nvidia-cuda-nvrtc-cu12 and the CUDA 13 layout).
    for root in ["/usr/local/lib", "/usr/lib", "/opt/torch/.venv/lib"] {
        if let Ok(entries) = std::fs::read_dir(root) {
            for entry in entries.flatten() {
                let py = entry.path();
                for site in ["site-packages", "dist-packages"] {
                    for sub in [
                        "nvidia/cuda_nvrtc/lib",
                        "nvidia/cu13/lib",
                        "nvidia/cu12/lib",
                    ] {
                        dirs.push(py.join(site).join(sub));
                    }
                }
            }
        }
    }
    for dir in dirs {
        for name in &names {
            let p = dir.join(name);
            if p.exists() {
                out.push(p);
            }
        }
    }
    out
}

fn load() -> Result<Nvrtc> {
    let tried = candidates();
    for path in &tried {
        // SAFETY: loading NVRTC runs its initialisers, which have no
        // preconditions.
        let Ok(library) = (unsafe { libloading::Library::new(path) }) else {
            continue;
        };
        // SAFETY: the symbol types match NVRTC's C API (nvrtc.h).
        let nvrtc = unsafe {
            let sym = |name: &[u8]| -> Result<*mut c_void> {
                library
                    .get::<*mut c_void>(name)
                    .map(|s| *s)
                    .map_err(|e| CudaError::Nvrtc(format!("{}: {e}", path.display())))
            };
            let version: Version = std::mem::transmute(sym(b"nvrtcVersion\0")?);
            let (mut major, mut minor) = (0, 0);
            version(&mut major, &mut minor);
            Nvrtc {
                path: path.display().to_string(),
                create: std::mem::transmute::<*mut c_void, CreateProgram>(sym(
                    b"nvrtcCreateProgram\0",
                )?),
                compile: std::mem::transmute::<*mut c_void, CompileProgram>(sym(
                    b"nvrtcCompileProgram\0",
                )?),
                ptx_size: std::mem::transmute::<*mut c_void, GetSize>(sym(b"nvrtcGetPTXSize\0")?),
                ptx: std::mem::transmute::<*mut c_void, GetBytes>(sym(b"nvrtcGetPTX\0")?),
                cubin_size: std::mem::transmute::<*mut c_void, GetSize>(sym(
                    b"nvrtcGetCUBINSize\0",
                )?),
                cubin: std::mem::transmute::<*mut c_void, GetBytes>(sym(b"nvrtcGetCUBIN\0")?),
                log_size: std::mem::transmute::<*mut c_void, GetSize>(sym(
                    b"nvrtcGetProgramLogSize\0",
                )?),
                log: std::mem::transmute::<*mut c_void, GetBytes>(sym(b"nvrtcGetProgramLog\0")?),
                destroy: std::mem::transmute::<*mut c_void, DestroyProgram>(sym(
                    b"nvrtcDestroyProgram\0",
                )?),
                error_string: std::mem::transmute::<*mut c_void, ErrorString>(sym(
                    b"nvrtcGetErrorString\0",
                )?),
                version: (major, minor),
                _library: library,
            }
        };
        return Ok(nvrtc);
    }
    Err(CudaError::Nvrtc(format!(
        "NVRTC (libnvrtc.so) was not found; looked for {}. Install the CUDA toolkit's NVRTC or set CUDAIPC_NVRTC_LIB to its path",
        tried
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

static NVRTC: LazyLock<Result<Nvrtc>> = LazyLock::new(load);

fn nvrtc() -> Result<&'static Nvrtc> {
    NVRTC.as_ref().map_err(Clone::clone)
}

/// Path and version of the NVRTC in use.
pub fn describe() -> Result<(String, (i32, i32))> {
    let n = nvrtc()?;
    Ok((n.path.clone(), n.version))
}

/// What a compilation produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// Machine code for one architecture.
    Cubin(Vec<u8>),
    /// PTX (NUL-terminated), compiled further by the driver.
    Ptx(Vec<u8>),
}

impl Image {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Image::Cubin(b) | Image::Ptx(b) => b,
        }
    }
}

/// Where the compilation is aimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Machine code for compute capability (major, minor).
    Sass(i32, i32),
    /// PTX for a virtual architecture (major, minor).
    Ptx(i32, i32),
}

/// Compiles CUDA C++ `source`; on failure the error names the library and
/// holds the compiler log.
pub fn compile(source: &str, name: &str, target: Target) -> Result<Image> {
    let n = nvrtc()?;
    let c_source = CString::new(source)
        .map_err(|_| CudaError::Nvrtc("kernel source holds a NUL byte".into()))?;
    let c_name =
        CString::new(name).map_err(|_| CudaError::Nvrtc("kernel name holds a NUL byte".into()))?;
    let arch = match target {
        Target::Sass(major, minor) => format!("--gpu-architecture=sm_{major}{minor}"),
        Target::Ptx(major, minor) => format!("--gpu-architecture=compute_{major}{minor}"),
    };
    let options: Vec<CString> = [
        arch.as_str(),
        "--std=c++17",
        "-default-device",
        "--use_fast_math",
        "-lineinfo",
    ]
    .iter()
    .map(|o| CString::new(*o).unwrap())
    .collect();
    let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    let error = |what: &str, code: c_int| {
        // SAFETY: nvrtcGetErrorString returns a static string for any code.
        let text = unsafe { CStr::from_ptr((n.error_string)(code)) }.to_string_lossy();
        CudaError::Nvrtc(format!(
            "NVRTC ({}) {what} failed for {name}: {text}",
            n.path
        ))
    };
    let mut program: Program = std::ptr::null_mut();
    // SAFETY: valid NUL-terminated strings and an out pointer; no headers.
    let code = unsafe {
        (n.create)(
            &mut program,
            c_source.as_ptr(),
            c_name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if code != 0 {
        return Err(error("nvrtcCreateProgram", code));
    }
    struct Guard<'a>(&'a Nvrtc, Program);
    impl Drop for Guard<'_> {
        fn drop(&mut self) {
            // SAFETY: the program was created and is destroyed once.
            unsafe { (self.0.destroy)(&mut self.1) };
        }
    }
    let guard = Guard(n, program);
    // SAFETY: the program is valid; options point to live CStrings.
    let code = unsafe { (n.compile)(guard.1, option_ptrs.len() as c_int, option_ptrs.as_ptr()) };
    if code != 0 {
        let log = read_bytes(guard.1, n.log_size, n.log)
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .trim_end_matches('\0')
                    .to_string()
            })
            .unwrap_or_default();
        // SAFETY: static string for any code.
        let text = unsafe { CStr::from_ptr((n.error_string)(code)) }.to_string_lossy();
        return Err(CudaError::Nvrtc(format!(
            "NVRTC ({}, version {}.{}) could not compile {name} for {arch}: {text}\n{log}",
            n.path, n.version.0, n.version.1
        )));
    }
    match target {
        Target::Sass(..) => read_bytes(guard.1, n.cubin_size, n.cubin)
            .map(Image::Cubin)
            .map_err(|c| error("nvrtcGetCUBIN", c)),
        Target::Ptx(..) => read_bytes(guard.1, n.ptx_size, n.ptx)
            .map(Image::Ptx)
            .map_err(|c| error("nvrtcGetPTX", c)),
    }
}

fn read_bytes(
    program: Program,
    size: GetSize,
    get: GetBytes,
) -> std::result::Result<Vec<u8>, c_int> {
    let mut len = 0usize;
    // SAFETY: valid program and out pointer.
    let code = unsafe { size(program, &mut len) };
    if code != 0 {
        return Err(code);
    }
    let mut buffer = vec![0u8; len];
    // SAFETY: the buffer has the size NVRTC asked for.
    let code = unsafe { get(program, buffer.as_mut_ptr() as *mut c_char) };
    if code != 0 {
        return Err(code);
    }
    Ok(buffer)
}
