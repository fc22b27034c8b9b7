// Kernel modules: compiled once per process and device, then launched on the
// shared stream.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::{Arc, LazyLock, Mutex};

use cudarc::driver::sys;

use super::nvrtc::{self, Target};
use super::{Device, Result, Stream, check};

/// A loaded module and the functions looked up in it.
pub struct Module {
    device: Arc<Device>,
    raw: sys::CUmodule,
    functions: Mutex<HashMap<String, usize>>,
}

// SAFETY: module and function handles are usable from any thread once the
// context is bound, which every method does.
unsafe impl Send for Module {}
// SAFETY: see above; the function cache is behind a mutex.
unsafe impl Sync for Module {}

/// Loaded modules by (device ordinal, module name).
type ModuleCache = HashMap<(i32, &'static str), Arc<Module>>;

static MODULES: LazyLock<Mutex<ModuleCache>> = LazyLock::new(Default::default);

/// Compiles `source` for `device`'s own architecture (falling back to PTX
/// when NVRTC cannot target it) and loads it, once per process and device.
pub fn load_module(device: &Arc<Device>, name: &'static str, source: &str) -> Result<Arc<Module>> {
    let key = (device.ordinal(), name);
    let mut modules = MODULES.lock().unwrap();
    if let Some(module) = modules.get(&key) {
        return Ok(module.clone());
    }
    let (major, minor) = device.compute_capability();
    let image = match nvrtc::compile(source, name, Target::Sass(major, minor)) {
        Ok(image) => image,
        // An NVRTC older than the device knows no machine code for it; PTX
        // of the newest architecture it knows is still loadable.
        Err(sass_error) => match nvrtc::compile(source, name, Target::Ptx(major, minor)) {
            Ok(image) => image,
            Err(_) => return Err(sass_error),
        },
    };
    device.bind()?;
    let mut raw = std::ptr::null_mut();
    // SAFETY: the image is a complete cubin or NUL-terminated PTX.
    check("cuModuleLoadData", unsafe {
        sys::cuModuleLoadData(&mut raw, image.bytes().as_ptr() as *const c_void)
    })?;
    let module = Arc::new(Module {
        device: device.clone(),
        raw,
        functions: Mutex::new(HashMap::new()),
    });
    modules.insert(key, module.clone());
    Ok(module)
}

impl Module {
    fn function(&self, name: &str) -> Result<sys::CUfunction> {
        let mut functions = self.functions.lock().unwrap();
        if let Some(f) = functions.get(name) {
            return Ok(*f as sys::CUfunction);
        }
        self.device.bind()?;
        let c_name = CString::new(name).expect("kernel names have no NUL");
        let mut f = std::ptr::null_mut();
        // SAFETY: valid module and out pointer; the name is NUL-terminated.
        check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut f, self.raw, c_name.as_ptr())
        })?;
        functions.insert(name.to_owned(), f as usize);
        Ok(f)
    }

    /// Launches kernel `name` on `stream`.
    ///
    /// # Safety
    /// `args` must match the kernel's parameter list in number, order and
    /// size, and every pointer argument must be valid for what the kernel
    /// does with it.
    pub unsafe fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        stream: &Stream<'_>,
        args: &KernelArgs,
    ) -> Result<()> {
        let function = self.function(name)?;
        self.device.bind()?;
        let mut pointers: Vec<*mut c_void> = args
            .values
            .iter()
            .map(|v| v as *const u64 as *mut c_void)
            .collect();
        // SAFETY: per this function's contract; `pointers` point into
        // `args`, which outlives the call (the driver copies the values).
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                function,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                0,
                stream.raw(),
                pointers.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }
}

/// Kernel arguments: scalars and device pointers, each stored in 8 bytes
/// (little endian, so a 4-byte parameter reads the low half).
#[derive(Debug, Default, Clone)]
pub struct KernelArgs {
    values: Vec<u64>,
}

impl KernelArgs {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn ptr(mut self, value: u64) -> Self {
        self.values.push(value);
        self
    }

    pub fn u32(mut self, value: u32) -> Self {
        self.values.push(value as u64);
        self
    }
}
