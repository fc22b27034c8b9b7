// SPDX-License-Identifier: MPL-2.0

//! What `cudaprocess` holds while it runs: the negotiated format and the
//! bytes of it that the operations touch, the GPU's kernels, the
//! verification totals, the pool for out-of-place output.

use std::sync::Arc;

use gst_video::VideoFormat;

use crate::pattern::kernels::{
    Geometry, ROLE_KEEP, ROLE_LUMA3, ROLE_LUMA4, ROLE_NEUTRAL, Verifier, VerifyReport,
};
use cudaipc_transport::cuda::{Device, DeviceRegion, Module};

/// Which bytes of a format the operations touch.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct FormatTraits {
    /// Colour bytes of each 4-byte word (alpha and padding excluded).
    pub(super) colour_mask: u32,
    /// Planes `invert` changes: all of them.
    pub(super) all_planes: u32,
    /// Planes `brightness` and `gamma` change: RGB or luma, not chroma.
    pub(super) intensity_planes: u32,
    /// `grayscale`: per plane role (4 bits each) and the red byte.
    pub(super) grayscale_roles: u32,
    pub(super) red_index: u32,
}

impl FormatTraits {
    pub(super) fn of(format: VideoFormat) -> Self {
        let packed4 = |red_index| FormatTraits {
            colour_mask: 0x00FF_FFFF,
            all_planes: 0b1,
            intensity_planes: 0b1,
            grayscale_roles: ROLE_LUMA4,
            red_index,
        };
        match format {
            VideoFormat::Rgba | VideoFormat::Rgbx => packed4(0),
            VideoFormat::Bgra | VideoFormat::Bgrx => packed4(2),
            VideoFormat::Rgb => FormatTraits {
                colour_mask: u32::MAX,
                all_planes: 0b1,
                intensity_planes: 0b1,
                grayscale_roles: ROLE_LUMA3,
                red_index: 0,
            },
            VideoFormat::Nv12 => FormatTraits {
                colour_mask: u32::MAX,
                all_planes: 0b11,
                intensity_planes: 0b1,
                grayscale_roles: ROLE_KEEP | ROLE_NEUTRAL << 4,
                red_index: 0,
            },
            VideoFormat::I420 => FormatTraits {
                colour_mask: u32::MAX,
                all_planes: 0b111,
                intensity_planes: 0b1,
                grayscale_roles: ROLE_KEEP | ROLE_NEUTRAL << 4 | ROLE_NEUTRAL << 8,
                red_index: 0,
            },
            // GRAY8 (and anything else the caps let through): every byte is
            // intensity; grayscale keeps it.
            _ => FormatTraits {
                colour_mask: u32::MAX,
                all_planes: 0b1,
                intensity_planes: 0b1,
                grayscale_roles: ROLE_KEEP,
                red_index: 0,
            },
        }
    }
}

/// The processing kernels of one device.
pub(super) struct Gpu {
    pub(super) device: Arc<Device>,
    pub(super) module: Arc<Module>,
    /// The gamma table in device memory, and the gamma it was made for.
    pub(super) gamma_table: Option<(f64, DeviceRegion)>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) info: Option<gst_video::VideoInfo>,
    pub(super) caps: Option<gst::Caps>,
    pub(super) geometry: Geometry,
    pub(super) traits: FormatTraits,
    pub(super) gpu: Option<Gpu>,
    pub(super) verifier: Option<Verifier>,
    /// The next verified frame starts a new sequence.
    pub(super) new_sequence: bool,
    /// Last totals read, kept after stop for the `stats` property.
    pub(super) report: VerifyReport,
    /// Whether the first bad frame was posted.
    pub(super) reported: bool,
    /// A fatal verification error was posted: refuse further frames.
    pub(super) failed: bool,
    /// Pool for out-of-place output, and the device it allocates on.
    pub(super) pool: Option<(i32, gst::BufferPool)>,
    /// Set by prepare_output_buffer when the output is a new buffer: the
    /// input it must be computed from.
    pub(super) pending_source: Option<gst::Buffer>,
    pub(super) frames: u64,
    /// Whether rejected caps were already reported.
    pub(super) warned_caps: bool,
}

/// What to post once the state lock is released.
#[derive(Default)]
pub(super) struct Posts {
    pub(super) message: Option<gst::Message>,
    pub(super) error: Option<gst::ErrorMessage>,
}
