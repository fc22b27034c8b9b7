// SPDX-License-Identifier: MPL-2.0

//! The CUDA kernels of `cudatestsrc` and `cudaprocess`: their sources (CUDA
//! C++ in `kernels/`, compiled at run time by NVRTC for the device's own
//! architecture, once per process) and the launches.
//!
//! `kernels/common.cu` (types, frame geometry, the patterns) is prepended to
//! each module's own file; [`SOURCES`] lists the complete compilation units.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::video;
use cudaipc_transport::cuda::{self, Device, DeviceRegion, KernelArgs, MappedHostBuffer, Module};

use super::Pattern;

macro_rules! kernel_source {
    ($file:literal) => {
        concat!(
            include_str!("../../kernels/common.cu"),
            "\n",
            include_str!(concat!("../../kernels/", $file))
        )
    };
}

/// cudatestsrc's generator.
pub const GENERATE_SOURCE: &str = kernel_source!("generate.cu");
/// cudaprocess's operations.
pub const PROCESS_SOURCE: &str = kernel_source!("process.cu");
/// cudaprocess's frame and sequence check.
pub const VERIFY_SOURCE: &str = kernel_source!("verify.cu");

/// Every compilation unit: (module name, complete source).
pub const SOURCES: &[(&str, &str)] = &[
    ("cudaipc-generate", GENERATE_SOURCE),
    ("cudaipc-process", PROCESS_SOURCE),
    ("cudaipc-verify", VERIFY_SOURCE),
];

/// Loads (compiling once per process) the module `name` of [`SOURCES`].
pub(crate) fn load(device: &Arc<Device>, name: &'static str) -> cuda::Result<Arc<Module>> {
    let source = SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .expect("a module of SOURCES");
    cuda::load_module(device, name, source)
}

/// Threads per block.
const BLOCK_THREADS: u32 = 256;
/// CUDA's limit on a grid's y dimension.
const MAX_GRID_Y: u32 = 65_535;

/// Row sizes of a frame's planes (what the caps imply; unused planes 0).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub n_planes: usize,
    pub row_bytes: [u32; 3],
    pub rows: [u32; 3],
}

impl Geometry {
    pub fn new(info: &gst_video::VideoInfo) -> Self {
        let mut geometry = Geometry {
            n_planes: (info.n_planes() as usize).min(3),
            ..Default::default()
        };
        for p in 0..geometry.n_planes {
            geometry.row_bytes[p] = video::row_bytes(info, p) as u32;
            geometry.rows[p] = video::rows(info, p) as u32;
        }
        geometry
    }

    fn total_rows(&self) -> u32 {
        self.rows.iter().sum()
    }

    /// Grid and block for chunks of `chunk_bytes(plane)` bytes.
    fn launch_size(
        &self,
        chunk_bytes: impl Fn(usize) -> u32,
    ) -> ((u32, u32, u32), (u32, u32, u32)) {
        let chunks = (0..self.n_planes)
            .map(|p| self.row_bytes[p].div_ceil(chunk_bytes(p).max(1)))
            .max()
            .unwrap_or(1)
            .max(1);
        // Rows narrower than a block share it (a warp per row at least).
        let block_x = chunks.next_power_of_two().clamp(32, BLOCK_THREADS);
        let block_y = BLOCK_THREADS / block_x;
        let grid_x = chunks.div_ceil(block_x);
        let grid_y = self.total_rows().div_ceil(block_y).clamp(1, MAX_GRID_Y);
        ((grid_x, grid_y, 1), (block_x, block_y, 1))
    }

    fn push(&self, args: KernelArgs, wide_mask: u32) -> KernelArgs {
        args.u32(self.n_planes as u32)
            .u32(self.row_bytes[0])
            .u32(self.rows[0])
            .u32(self.row_bytes[1])
            .u32(self.rows[1])
            .u32(self.row_bytes[2])
            .u32(self.rows[2])
            .u32(wide_mask)
    }
}

/// Where a frame's planes are in device memory.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Planes {
    pub ptr: [u64; 3],
    pub stride: [u32; 3],
}

impl Planes {
    /// The planes of a frame at device address `base`, laid out as
    /// `layout` ((offset, stride) per plane) and checked to fit in `size`
    /// bytes.
    ///
    /// # Safety
    /// `base` must be a device address valid for `size` bytes until the
    /// kernels launched on these planes have run: the safe launches below
    /// rely on it.
    pub unsafe fn at(
        info: &gst_video::VideoInfo,
        base: u64,
        size: usize,
        layout: &[(usize, usize)],
    ) -> Result<Self, String> {
        let checked = super::fitting_planes(info, layout, size)?;
        let mut planes = Planes::default();
        for (p, &(offset, stride)) in checked.iter().take(3).enumerate() {
            planes.ptr[p] = base + offset;
            planes.stride[p] = stride;
        }
        Ok(planes)
    }

    /// Bit p set when plane p is 16-byte aligned (pointer and stride).
    fn aligned_mask(&self, n_planes: usize) -> u32 {
        (0..n_planes)
            .filter(|&p| (self.ptr[p] | self.stride[p] as u64) % 16 == 0)
            .fold(0, |mask, p| mask | 1 << p)
    }

    fn push(&self, args: KernelArgs) -> KernelArgs {
        (0..3).fold(args, |args, p| args.ptr(self.ptr[p]).u32(self.stride[p]))
    }
}

fn wide_bytes(wide_mask: u32, plane: usize, wide: u32, narrow: u32) -> u32 {
    if wide_mask & (1 << plane) != 0 {
        wide
    } else {
        narrow
    }
}

/// Enqueues the generation of frame `frame` of `pattern` into `dst` on the
/// device's shared stream.
pub(crate) fn generate(
    module: &Module,
    device: &Device,
    geometry: &Geometry,
    dst: &Planes,
    pattern: Pattern,
    frame: u32,
) -> cuda::Result<()> {
    let wide = dst.aligned_mask(geometry.n_planes);
    let (grid, block) = geometry.launch_size(|p| wide_bytes(wide, p, 16, 1));
    let args = dst
        .push(geometry.push(KernelArgs::new(), wide))
        .u32(pattern as u32)
        .u32(frame);
    // SAFETY: the arguments follow `generate` in kernels/generate.cu
    // (GEOMETRY_PARAMS, PLANE_PARAMS, pattern, frame); `dst` was checked to
    // lie inside a live device allocation (Planes::at), which stays alive
    // until the stream has run the kernel (buffers are freed with cuMemFree,
    // which waits for the device).
    unsafe { module.launch("generate", grid, block, &device.stream(), &args) }
}

/// A cudaprocess operation as the kernels see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Invert,
    /// Adds (or, with `darken`, subtracts) `amount` with saturation.
    Brightness {
        amount: u8,
        darken: bool,
    },
    /// Maps each byte through the 256-byte table at device address `lut`.
    Gamma {
        lut: u64,
    },
    /// `roles`: 4 bits per plane (ROLE_* in process.cu); `red_index`: the
    /// byte of a packed pixel that holds red.
    Grayscale {
        roles: u32,
        red_index: u32,
    },
}

/// Grayscale plane roles (process.cu).
pub(crate) const ROLE_KEEP: u32 = 0;
pub(crate) const ROLE_LUMA3: u32 = 1;
pub(crate) const ROLE_LUMA4: u32 = 2;
pub(crate) const ROLE_NEUTRAL: u32 = 3;

/// Enqueues `operation` from `src` to `dst` (the same planes: in place) on
/// the device's shared stream. `active_planes` and `colour_mask` select the
/// bytes the byte-wise operations change (see process.cu).
#[allow(clippy::too_many_arguments)]
pub(crate) fn process(
    module: &Module,
    device: &Device,
    geometry: &Geometry,
    src: &Planes,
    dst: &Planes,
    operation: Operation,
    active_planes: u32,
    colour_mask: u32,
) -> cuda::Result<()> {
    let n = geometry.n_planes;
    let wide = src.aligned_mask(n) & dst.aligned_mask(n);
    let args = dst.push(src.push(geometry.push(KernelArgs::new(), wide)));
    let (name, args, (grid, block)) = match operation {
        Operation::Grayscale { roles, red_index } => {
            let chunk = |p: usize| match (roles >> (4 * p)) & 0xF {
                ROLE_LUMA3 => wide_bytes(wide, p, 48, 3),
                ROLE_LUMA4 => wide_bytes(wide, p, 16, 4),
                _ => wide_bytes(wide, p, 16, 1),
            };
            (
                "process_grayscale",
                args.u32(roles).u32(red_index),
                geometry.launch_size(chunk),
            )
        }
        byte_wise => {
            let (name, amount, darken, lut) = match byte_wise {
                Operation::Invert => ("process_invert", 0, false, 0),
                Operation::Brightness { amount, darken } => {
                    ("process_brightness", amount as u32, darken, 0)
                }
                Operation::Gamma { lut } => ("process_gamma", 0, false, lut),
                Operation::Grayscale { .. } => unreachable!(),
            };
            (
                name,
                args.u32(active_planes)
                    .u32(colour_mask)
                    .u32(amount)
                    .u32(darken as u32)
                    .ptr(lut),
                geometry.launch_size(|p| wide_bytes(wide, p, 16, 1)),
            )
        }
    };
    // SAFETY: the arguments follow PROCESS_PARAMS / process_grayscale in
    // kernels/process.cu; `src` and `dst` were checked to lie inside live
    // device allocations of this frame's size (Planes::at), and `lut`, when
    // used, is a live 256-byte device buffer (cudaprocess replaces it only
    // after an upload that synchronises the stream).
    unsafe { module.launch(name, grid, block, &device.stream(), &args) }
}

/// 64-bit words of the verify report (verify.cu's `publish`).
pub(crate) const REPORT_WORDS: usize = 8;
const REPORT_SEQUENCE: usize = 0;
const REPORT_FRAMES: usize = 1;
const REPORT_CORRUPT: usize = 2;
const REPORT_MISSING: usize = 3;
const REPORT_LAST_FRAME: usize = 4;
const REPORT_FIRST_BAD_KIND: usize = 5;
const REPORT_FIRST_BAD_FRAME: usize = 6;
const REPORT_FIRST_BAD_DETAIL: usize = 7;
/// Most blocks a verify launch uses (a full wave of 256-thread blocks on
/// a large GPU).
const VERIFY_MAX_BLOCKS: u32 = 1024;
/// Bytes of verify.cu's `VerifyState`.
const VERIFY_STATE_BYTES: usize = 80;

/// The first bad event a verifier saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstBad {
    /// Frame `frame` had `bytes` bytes that differ from the pattern.
    Corrupt { frame: u32, bytes: u64 },
    /// `count` frames from `frame` on never came.
    Gap { frame: u32, count: u64 },
    /// Frame `frame` came after frame `last` (a repeat or older frame).
    Stale { frame: u32, last: u32 },
}

impl FirstBad {
    pub fn frame(&self) -> u32 {
        match *self {
            FirstBad::Corrupt { frame, .. }
            | FirstBad::Gap { frame, .. }
            | FirstBad::Stale { frame, .. } => frame,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            FirstBad::Corrupt { .. } => "corrupt",
            FirstBad::Gap { .. } => "missing",
            FirstBad::Stale { .. } => "stale",
        }
    }

    pub fn describe(&self) -> String {
        match *self {
            FirstBad::Corrupt { frame, bytes } => {
                format!("frame {frame} is corrupt: {bytes} byte(s) differ from the counter pattern")
            }
            FirstBad::Gap { frame, count: 1 } => format!("frame {frame} is missing"),
            FirstBad::Gap { frame, count } => format!(
                "{count} frames are missing, from frame {frame} to frame {}",
                frame as u64 + count - 1
            ),
            FirstBad::Stale { frame, last } => {
                format!("frame {frame} is stale: it came after frame {last}")
            }
        }
    }
}

/// What a verifier counted so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VerifyReport {
    pub frames: u64,
    pub corrupt: u64,
    pub missing: u64,
    pub last_frame: u32,
    pub first_bad: Option<FirstBad>,
}

/// Device state and host-mapped report of one `cudaprocess verify=true`.
pub(crate) struct Verifier {
    module: Arc<Module>,
    device: Arc<Device>,
    state: DeviceRegion,
    report: MappedHostBuffer,
}

impl Verifier {
    pub fn new(device: &Arc<Device>) -> cuda::Result<Self> {
        let module = load(device, "cudaipc-verify")?;
        let state = cuda::DeviceBuffer::new(device, VERIFY_STATE_BYTES)?.into_region();
        state.memset(0)?;
        let report = MappedHostBuffer::new(device, REPORT_WORDS * 8)?;
        Ok(Self {
            module,
            device: device.clone(),
            state,
            report,
        })
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Enqueues the check of one frame; `reset` makes it the first of a new
    /// sequence.
    pub fn check(&self, geometry: &Geometry, src: &Planes, reset: bool) -> cuda::Result<()> {
        let wide = src.aligned_mask(geometry.n_planes);
        let ((grid_x, grid_y, _), block) = geometry.launch_size(|p| wide_bytes(wide, p, 16, 1));
        // About one wave of blocks, looping over the rows: every block ends
        // with an atomic on the same counter, so fewer blocks contend less.
        let grid = (grid_x, grid_y.min((VERIFY_MAX_BLOCKS / grid_x).max(1)), 1);
        let args = src
            .push(geometry.push(KernelArgs::new(), wide))
            .ptr(self.state.ptr())
            .ptr(self.report.device_ptr())
            .u32(reset as u32);
        // SAFETY: the arguments follow `verify_counter` in kernels/verify.cu;
        // `src` lies inside a live device allocation (Planes::at); the state
        // buffer holds a VerifyState and the report REPORT_WORDS u64 words,
        // both alive as long as `self`, whose Drop waits for the stream.
        unsafe {
            self.module
                .launch("verify_counter", grid, block, &self.device.stream(), &args)
        }
    }

    /// Enqueues the check of one frame fused with inverting it into `dst`
    /// (the same planes: in place): the frame is read once for both.
    pub fn check_and_invert(
        &self,
        geometry: &Geometry,
        src: &Planes,
        dst: &Planes,
        active_planes: u32,
        colour_mask: u32,
        reset: bool,
    ) -> cuda::Result<()> {
        let wide = src.aligned_mask(geometry.n_planes) & dst.aligned_mask(geometry.n_planes);
        let ((grid_x, grid_y, _), block) = geometry.launch_size(|p| wide_bytes(wide, p, 16, 1));
        let grid = (grid_x, grid_y.min((VERIFY_MAX_BLOCKS / grid_x).max(1)), 1);
        let in_place = src == dst;
        if in_place {
            let begin = KernelArgs::new()
                .ptr(src.ptr[0])
                .u32(geometry.row_bytes[0])
                .ptr(self.state.ptr());
            // SAFETY: the arguments follow `verify_begin` in
            // kernels/verify.cu: plane 0's first row lies in a live
            // allocation, and the state buffer (a VerifyState) lives as long
            // as `self`.
            unsafe {
                self.module.launch(
                    "verify_begin",
                    (1, 1, 1),
                    (1, 1, 1),
                    &self.device.stream(),
                    &begin,
                )?;
            }
        }
        let args = dst
            .push(src.push(geometry.push(KernelArgs::new(), wide)))
            .u32(active_planes)
            .u32(colour_mask)
            .ptr(self.state.ptr())
            .ptr(self.report.device_ptr())
            .u32(reset as u32)
            .u32(in_place as u32);
        // SAFETY: the arguments follow `verify_counter_invert` in
        // kernels/verify.cu; `src` and `dst` lie inside live device
        // allocations of the frame's size (Planes::at); the state and report
        // buffers live as long as `self`, whose Drop waits for the stream.
        unsafe {
            self.module.launch(
                "verify_counter_invert",
                grid,
                block,
                &self.device.stream(),
                &args,
            )
        }
    }

    fn report_words(&self) -> &[AtomicU64] {
        let words = self.report.words();
        let ptr = words.as_ptr() as *const AtomicU64;
        assert!(ptr.is_aligned() && words.len() >= 2 * REPORT_WORDS);
        // SAFETY: the mapped buffer is page aligned (checked above to be
        // 8-byte aligned) and at least REPORT_WORDS * 8 bytes; AtomicU64 has
        // the layout of u64; the slice borrows `self.report`, which owns the
        // memory.
        unsafe { std::slice::from_raw_parts(ptr, REPORT_WORDS) }
    }

    /// The exact totals: publishes them on the GPU and waits for the
    /// stream (EOS, stop, and reading the `stats` property).
    pub fn exact_report(&self) -> cuda::Result<VerifyReport> {
        let args = KernelArgs::new()
            .ptr(self.state.ptr())
            .ptr(self.report.device_ptr());
        // SAFETY: the arguments follow `verify_publish` in kernels/verify.cu;
        // both buffers live as long as `self`.
        unsafe {
            self.module.launch(
                "verify_publish",
                (1, 1, 1),
                (1, 1, 1),
                &self.device.stream(),
                &args,
            )?;
        }
        self.device.stream().synchronize()?;
        Ok(self.report())
    }

    /// The totals as last published by the GPU (a few frames behind the
    /// stream unless it was synchronised); never blocks on the GPU.
    pub fn report(&self) -> VerifyReport {
        let words = self.report_words();
        let mut values = [0u64; REPORT_WORDS];
        // Seqlock: the GPU makes the sequence odd while it writes. It
        // finishes within microseconds, so the loop is bounded only to
        // survive a GPU that died mid-write.
        for _ in 0..100_000 {
            let before = words[REPORT_SEQUENCE].load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            for (value, word) in values.iter_mut().zip(words) {
                *value = word.load(Ordering::Relaxed);
            }
            std::sync::atomic::fence(Ordering::Acquire);
            if words[REPORT_SEQUENCE].load(Ordering::Relaxed) == before {
                break;
            }
        }
        let frame = values[REPORT_FIRST_BAD_FRAME] as u32;
        let detail = values[REPORT_FIRST_BAD_DETAIL];
        let first_bad = match values[REPORT_FIRST_BAD_KIND] {
            1 => Some(FirstBad::Corrupt {
                frame,
                bytes: detail,
            }),
            2 => Some(FirstBad::Gap {
                frame,
                count: detail,
            }),
            3 => Some(FirstBad::Stale {
                frame,
                last: detail as u32,
            }),
            _ => None,
        };
        VerifyReport {
            frames: values[REPORT_FRAMES],
            corrupt: values[REPORT_CORRUPT],
            missing: values[REPORT_MISSING],
            last_frame: values[REPORT_LAST_FRAME] as u32,
            first_bad,
        }
    }
}

impl Drop for Verifier {
    fn drop(&mut self) {
        // Queued checks still write the state and the report. A failure
        // here means the context is lost, and the memory with it.
        let _ = self.device.stream().synchronize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gst_video::VideoFormat;

    fn geometry(format: VideoFormat, width: u32, height: u32) -> Geometry {
        gst::init().unwrap();
        Geometry::new(
            &gst_video::VideoInfo::builder(format, width, height)
                .build()
                .unwrap(),
        )
    }

    #[test]
    fn launch_covers_every_chunk_with_few_idle_threads() {
        // 4K RGB: 720 chunks of 16 bytes per row, one row per block line.
        let rgb = geometry(VideoFormat::Rgb, 3840, 2160);
        assert_eq!(rgb.row_bytes[0], 11_520);
        assert_eq!(
            rgb.launch_size(|_| 16),
            ((3, 2160, 1), (256, 1, 1)),
            "one 16-byte chunk per thread"
        );
        // Narrow rows share blocks: 4 chunks per row, 8 rows per block.
        let gray = geometry(VideoFormat::Gray8, 64, 48);
        assert_eq!(gray.launch_size(|_| 16), ((1, 6, 1), (32, 8, 1)));
        // I420: the rows of all three planes are covered.
        let i420 = geometry(VideoFormat::I420, 64, 48);
        assert_eq!(i420.rows, [48, 24, 24]);
        let ((_, grid_y, _), (_, block_y, _)) = i420.launch_size(|_| 1);
        assert!(grid_y * block_y >= 96);
        // Taller than a grid may be: rows are looped over.
        let tall = geometry(VideoFormat::Gray8, 4, 1 << 20);
        assert_eq!(tall.launch_size(|_| 16).0.1, MAX_GRID_Y);
    }

    #[test]
    fn planes_are_wide_only_when_aligned() {
        let planes = Planes {
            ptr: [0x1000, 0x2008, 0x3000],
            stride: [64, 64, 36],
        };
        assert_eq!(planes.aligned_mask(3), 0b001);
        assert_eq!(planes.aligned_mask(1), 0b001);
    }

    #[test]
    fn first_bad_events_read_clearly() {
        assert_eq!(
            FirstBad::Corrupt {
                frame: 3,
                bytes: 12
            }
            .describe(),
            "frame 3 is corrupt: 12 byte(s) differ from the counter pattern"
        );
        assert_eq!(
            FirstBad::Gap {
                frame: 12,
                count: 2
            }
            .describe(),
            "2 frames are missing, from frame 12 to frame 13"
        );
        assert_eq!(
            FirstBad::Stale { frame: 7, last: 9 }.describe(),
            "frame 7 is stale: it came after frame 9"
        );
    }
}
