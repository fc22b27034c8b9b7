//! Run-time compilation of the kernels with NVRTC, loaded on demand so that
//! the plugin works (without GPU elements) where NVRTC is absent, and so
//! that any NVRTC major version found on the machine can be used.

use std::ffi::{CStr, CString, OsString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
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

/// NVRTC's file names, newest major version first.
const NAMES: [&str; 4] = [
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so",
    "libnvrtc.so.11.2",
];

/// Environment variables naming a CUDA toolkit's root, as CUDA's own
/// tooling and cudarc read them, in that order.
const TOOLKIT_VARIABLES: [&str; 4] = [
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_ROOT",
    "CUDA_TOOLKIT_ROOT_DIR",
];

/// A toolkit's folders under `targets/` whose libraries this build can
/// load: on aarch64 both Jetson's (`aarch64-linux`) and Grace's and other
/// server Arm machines' (`sbsa-linux`); a machine has one of them.
fn toolkit_targets(arch: &str) -> &'static [&'static str] {
    match arch {
        "x86_64" => &["x86_64-linux"],
        "aarch64" => &["aarch64-linux", "sbsa-linux"],
        _ => &["x86_64-linux", "aarch64-linux", "sbsa-linux"],
    }
}

/// A toolkit's library folders: `lib64` (a link into `targets/` on most
/// installs) and the `targets/` ones for `arch`.
fn toolkit_lib_dirs(root: &Path, arch: &str) -> Vec<PathBuf> {
    let mut dirs = vec![root.join("lib64")];
    for target in toolkit_targets(arch) {
        dirs.push(root.join("targets").join(target).join("lib"));
    }
    dirs
}

/// Where NVRTC is looked for, in order: `CUDAIPC_NVRTC_LIB` (a file), the
/// toolkits the environment names (see [`TOOLKIT_VARIABLES`]), the
/// loader's search path, /usr/local/cuda, then NVIDIA's Python wheels.
/// `env` reads a variable; `arch` is the build's architecture. Folders
/// contribute only the files they have.
fn candidates_for(env: &dyn Fn(&str) -> Option<OsString>, arch: &str) -> Vec<PathBuf> {
    let set = |name: &str| env(name).filter(|value| !value.is_empty());
    let mut out = Vec::new();
    if let Some(path) = set("CUDAIPC_NVRTC_LIB") {
        out.push(PathBuf::from(path));
    }
    let existing = |dirs: Vec<PathBuf>| {
        dirs.into_iter()
            .flat_map(|dir| NAMES.map(|name| dir.join(name)))
            .filter(|path| path.exists())
            .collect::<Vec<_>>()
    };
    let named_roots = TOOLKIT_VARIABLES.iter().filter_map(|v| set(v));
    out.extend(existing(
        named_roots
            .flat_map(|root| toolkit_lib_dirs(Path::new(&root), arch))
            .collect(),
    ));
    out.extend(NAMES.iter().map(PathBuf::from));
    let mut dirs = toolkit_lib_dirs(Path::new("/usr/local/cuda"), arch);
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
    out.extend(existing(dirs));
    out
}

fn candidates() -> Vec<PathBuf> {
    candidates_for(&|name| std::env::var_os(name), std::env::consts::ARCH)
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
        "NVRTC (libnvrtc.so) was not found; looked for {}. Install the CUDA toolkit's NVRTC and set CUDA_HOME to the toolkit, or CUDAIPC_NVRTC_LIB to the library",
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake toolkit with NVRTC in `targets/<target>/lib` only.
    fn toolkit_with(target: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!(
            "cudaipc-nvrtc-{target}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let lib = root.join("targets").join(target).join("lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libnvrtc.so.12"), b"").unwrap();
        root
    }

    fn env_of(vars: &[(&str, &Path)]) -> impl Fn(&str) -> Option<OsString> {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_os_str().to_owned()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn every_toolkit_layout_of_the_architecture_is_searched() {
        let root = Path::new("/opt/cuda");
        let dirs = |arch| toolkit_lib_dirs(root, arch);
        assert_eq!(
            dirs("x86_64"),
            [root.join("lib64"), root.join("targets/x86_64-linux/lib")]
        );
        // Jetson (aarch64-linux) and Grace (sbsa-linux).
        assert_eq!(
            dirs("aarch64"),
            [
                root.join("lib64"),
                root.join("targets/aarch64-linux/lib"),
                root.join("targets/sbsa-linux/lib")
            ]
        );
    }

    #[test]
    fn nvrtc_of_a_toolkit_the_environment_names_is_found_first() {
        for (arch, target) in [
            ("aarch64", "aarch64-linux"),
            ("aarch64", "sbsa-linux"),
            ("x86_64", "x86_64-linux"),
        ] {
            let root = toolkit_with(target);
            let lib = root.join("targets").join(target).join("lib/libnvrtc.so.12");
            for variable in TOOLKIT_VARIABLES {
                let found = candidates_for(&env_of(&[(variable, &root)]), arch);
                // Before the loader's search path, which may hold another.
                assert_eq!(found.first(), Some(&lib), "{variable} on {arch}");
            }
            // CUDAIPC_NVRTC_LIB names the file itself and comes first.
            let chosen = Path::new("/elsewhere/libnvrtc.so.12");
            let found = candidates_for(
                &env_of(&[("CUDA_HOME", &root), ("CUDAIPC_NVRTC_LIB", chosen)]),
                arch,
            );
            assert_eq!(found[..2], [chosen.to_path_buf(), lib.clone()]);
            std::fs::remove_dir_all(&root).unwrap();
        }
    }

    #[test]
    fn another_architectures_toolkit_layout_is_not_loaded() {
        let root = toolkit_with("sbsa-linux");
        let found = candidates_for(&env_of(&[("CUDA_PATH", &root)]), "x86_64");
        assert!(
            !found.iter().any(|p| p.starts_with(&root)),
            "an arm64 NVRTC offered to an x86_64 build: {found:?}"
        );
        // Unset or empty variables add nothing; bare names stay for the loader.
        let empty = Path::new("");
        let found = candidates_for(&env_of(&[("CUDA_HOME", empty)]), "x86_64");
        assert!(found.contains(&PathBuf::from("libnvrtc.so.12")));
        assert!(!found.iter().any(|p| p.starts_with("lib64")));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
