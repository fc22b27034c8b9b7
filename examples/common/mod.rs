// SPDX-License-Identifier: MPL-2.0

//! What the examples share: the test pattern (rendered on the GPU with a
//! tiny NVRTC kernel, or on the CPU), frame checksums, and option parsing.
//!
//! The pattern is RGBA, a pure function of (x, y, frame number), identical on
//! the GPU and the CPU; pixel (0, 0) holds the frame number, so a consumer
//! knows which frame it holds and the checksum of what the producer sent.
#![allow(dead_code)]

use std::str::FromStr;
use std::sync::Arc;

use cudaipc_transport::cuda::{self, Device, KernelArgs, Module};
use gstcudaipc::memory::{self, CudaAllocator};

/// The CUDA source of the GPU renderer (compiled at run time with NVRTC).
pub const KERNEL: &str = include_str!("render.cu");
/// Bytes per pixel: the pattern is RGBA (rows have no padding).
pub const PIXEL_BYTES: usize = 4;

/// The pattern's RGBA value at (x, y) of `frame`, as the kernel computes it.
fn pixel(x: u32, y: u32, frame: u32) -> [u8; 4] {
    if x == 0 && y == 0 {
        return frame.to_le_bytes();
    }
    let r = x.wrapping_add(frame) & 255;
    let g = y.wrapping_add(frame.wrapping_mul(2)) & 255;
    let b = (x ^ y).wrapping_add(frame.wrapping_mul(3)) & 255;
    [r as u8, g as u8, b as u8, 255]
}

/// Renders `frame` on the CPU into `out` (`width * height * 4` bytes).
pub fn render_cpu(frame: u32, width: u32, height: u32, out: &mut [u8]) {
    let size = width as usize * height as usize * PIXEL_BYTES;
    for (i, px) in out[..size].chunks_exact_mut(PIXEL_BYTES).enumerate() {
        let (x, y) = (i as u32 % width, i as u32 / width);
        px.copy_from_slice(&pixel(x, y, frame));
    }
}

/// The frame number a frame of the pattern carries in pixel (0, 0).
pub fn frame_number(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?))
}

pub fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}

/// One figure for a whole stream: the SHA-1 of the frames' SHA-1s (40 hex
/// digits each), in order. Equal on both ends when every frame arrived
/// intact and in order.
#[derive(Default)]
pub struct StreamChecksum(sha1_smol::Sha1);

impl StreamChecksum {
    pub fn add(&mut self, frame_sha1: &str) {
        self.0.update(frame_sha1.as_bytes());
    }

    pub fn hex(&self) -> String {
        self.0.digest().to_string()
    }
}

/// Caps of the pattern; `cuda` adds the `memory:CUDAMemory` feature.
pub fn caps(width: u32, height: u32, fps: u32, cuda: bool) -> gst::Caps {
    let caps = gst_video::VideoInfo::builder(gst_video::VideoFormat::Rgba, width, height)
        .fps(gst::Fraction::new(fps as i32, 1))
        .build()
        .expect("valid video info")
        .to_caps()
        .expect("caps from video info");
    if cuda {
        memory::with_cuda_feature(&caps)
    } else {
        caps
    }
}

/// Renders the pattern into buffers: on the GPU into CUDA memory when CUDA
/// is usable, else on the CPU into system memory.
pub enum Renderer {
    Gpu(GpuRenderer),
    Cpu { width: u32, height: u32 },
}

impl Renderer {
    /// The GPU renderer unless `cpu` is asked for or CUDA is unusable.
    pub fn new(width: u32, height: u32, cpu: bool) -> Renderer {
        if !cpu && cuda::is_available() {
            match GpuRenderer::new(width, height) {
                Ok(gpu) => return Renderer::Gpu(gpu),
                Err(e) => eprintln!("GPU rendering unavailable ({e}); rendering on the CPU"),
            }
        }
        Renderer::Cpu { width, height }
    }

    pub fn is_gpu(&self) -> bool {
        matches!(self, Renderer::Gpu(_))
    }

    /// Frame `frame` with its timestamp, and the SHA-1 of its bytes.
    pub fn render(
        &mut self,
        frame: u32,
        pts: gst::ClockTime,
        duration: gst::ClockTime,
    ) -> Result<(gst::Buffer, String), String> {
        match self {
            Renderer::Gpu(gpu) => {
                let buffer = gpu
                    .render(frame, pts, duration)
                    .map_err(|e| e.to_string())?;
                // The bytes stay on the GPU: the checksum is that of the CPU
                // rendering of the same frame, which the kernel must equal.
                let mut reference = vec![0; gpu.frame_bytes()];
                render_cpu(frame, gpu.width, gpu.height, &mut reference);
                Ok((buffer, sha1_hex(&reference)))
            }
            Renderer::Cpu { width, height } => {
                let size = *width as usize * *height as usize * PIXEL_BYTES;
                let mut buffer = gst::Buffer::with_size(size).map_err(|e| e.to_string())?;
                let sha1 = {
                    let b = buffer.get_mut().unwrap();
                    b.set_pts(pts);
                    b.set_duration(duration);
                    let mut map = b.map_writable().map_err(|e| e.to_string())?;
                    render_cpu(frame, *width, *height, &mut map);
                    sha1_hex(&map)
                };
                Ok((buffer, sha1))
            }
        }
    }
}

/// Renders with an NVRTC kernel into device memory of the crate's
/// [`CudaAllocator`], on the plugin's shared stream of the device.
pub struct GpuRenderer {
    device: Arc<Device>,
    module: Arc<Module>,
    allocator: CudaAllocator,
    /// Buffers we rendered into; one is reused once nobody else holds it.
    buffers: Vec<gst::Buffer>,
    width: u32,
    height: u32,
}

impl GpuRenderer {
    pub fn new(width: u32, height: u32) -> Result<Self, cuda::CudaError> {
        let device = Device::get(0)?;
        // Compiled for this GPU once per process, then cached.
        let module = cuda::load_module(&device, "examples-render", KERNEL)?;
        Ok(Self {
            allocator: CudaAllocator::for_device(&device),
            device,
            module,
            buffers: Vec::new(),
            width,
            height,
        })
    }

    pub fn frame_bytes(&self) -> usize {
        self.width as usize * self.height as usize * PIXEL_BYTES
    }

    fn render(
        &mut self,
        frame: u32,
        pts: gst::ClockTime,
        duration: gst::ClockTime,
    ) -> Result<gst::Buffer, cuda::CudaError> {
        // A buffer is free again once the pipeline dropped it and every copy
        // of it (a copy shares the memory: basesrc makes one to set the
        // DISCONT flag): the sink copied it into a slot and let go of it.
        // That copy and our next kernel are on the same stream, so the GPU
        // runs them in that order.
        let free = |b: &gst::Buffer| b.is_writable() && b.is_all_memory_writable();
        let index = match self.buffers.iter().position(free) {
            Some(index) => index,
            None => {
                let mut buffer = gst::Buffer::new();
                let memory = self.allocator.alloc_device(self.frame_bytes())?;
                buffer.get_mut().unwrap().append_memory(memory);
                self.buffers.push(buffer);
                self.buffers.len() - 1
            }
        };
        let buffer = &mut self.buffers[index];
        let target = memory::buffer_device_memory(buffer).expect("CUDA memory");
        let b = buffer.get_mut().expect("not shared");
        b.set_pts(pts);
        b.set_duration(duration);
        let args = KernelArgs::new()
            .ptr(target.ptr)
            .u32(self.width)
            .u32(self.height)
            .u32(frame);
        let grid = (self.width.div_ceil(16), self.height.div_ceil(16), 1);
        // SAFETY: `render(unsigned int *, unsigned int, unsigned int,
        // unsigned int)` takes these four arguments, and writes
        // `width * height` 32-bit pixels at `target.ptr`, which points to
        // device memory of exactly that size that this buffer owns.
        unsafe {
            self.module
                .launch("render", grid, (16, 16, 1), &self.device.stream(), &args)?;
        }
        Ok(buffer.clone())
    }
}

/// An error message from the bus, as a line for the user.
pub fn error_text(e: &gst::message::Error) -> String {
    match e.debug() {
        Some(debug) => format!("{} ({debug})", e.error()),
        None => e.error().to_string(),
    }
}

/// `WIDTHxHEIGHT`.
pub fn parse_size(s: &str) -> Option<(u32, u32)> {
    let (w, h) = s.split_once('x')?;
    let (w, h) = (w.parse().ok()?, h.parse().ok()?);
    (w > 0 && h > 0).then_some((w, h))
}

/// Minimal `--name value` / `--flag` command-line parsing.
pub struct Args {
    args: Vec<String>,
    usage: &'static str,
}

impl Args {
    pub fn from_env(usage: &'static str) -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if args.iter().any(|a| a == "--help" || a == "-h") {
            println!("{usage}");
            std::process::exit(0);
        }
        Self { args, usage }
    }

    /// Whether `--name` was given (and removes it).
    pub fn flag(&mut self, name: &str) -> bool {
        let before = self.args.len();
        self.args.retain(|a| a != name);
        self.args.len() != before
    }

    /// The value after `--name`, or `default`.
    pub fn value<T: FromStr>(&mut self, name: &str, default: T) -> T {
        let Some(i) = self.args.iter().position(|a| a == name) else {
            return default;
        };
        if i + 1 >= self.args.len() {
            self.fail(&format!("{name} needs a value"));
        }
        let value = self.args.remove(i + 1);
        self.args.remove(i);
        value
            .parse()
            .unwrap_or_else(|_| self.fail(&format!("bad value for {name}: {value}")))
    }

    /// `--size WIDTHxHEIGHT`.
    pub fn size(&mut self, default: (u32, u32)) -> (u32, u32) {
        let s: String = self.value("--size", format!("{}x{}", default.0, default.1));
        parse_size(&s).unwrap_or_else(|| self.fail(&format!("bad --size {s}: WIDTHxHEIGHT")))
    }

    /// Fails on anything not consumed.
    pub fn finish(self) {
        if let Some(extra) = self.args.first() {
            self.fail(&format!("unknown argument {extra}"));
        }
    }

    fn fail(&self, message: &str) -> ! {
        eprintln!("{message}\n{}", self.usage);
        std::process::exit(2);
    }
}
