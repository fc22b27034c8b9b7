// SPDX-License-Identifier: MPL-2.0

//! `cudaprocess`: processes frames in CUDA memory on the GPU (invert,
//! brightness, gamma, grayscale) and, with `verify=true`, checks every frame
//! of `cudatestsrc`'s counter pattern and their sequence.
//!
//! Same caps in and out: `video/x-raw(memory:CUDAMemory)` in the plugin's
//! formats. Frames are changed in place when the buffer and its memory are
//! writable; frames in read-only memory (those of `rscudaipcsrc`, which wrap
//! shared slots) are processed into a buffer of the element's own pool.
//! `operation=none` passes buffers through untouched.
//!
//! ```text
//! gst-launch-1.0 cudatestsrc num-buffers=1000 ! cudaprocess operation=invert verify=true ! fakesink
//! ```
//!
//! Verification runs on the GPU without synchronising the stream per frame:
//! the totals are read from host-mapped memory a few frames late, and
//! exactly at EOS, at stop and when the `stats` property is read. The first
//! bad frame posts an element message `cudaprocess-verify` (and, with
//! `verify-fatal=true`, an error). See docs/test-elements.md.

use gst::glib;
use gst::prelude::*;

mod imp;
mod output;
mod processing;
mod settings;
mod state;
mod verification;

pub(crate) use imp::CAT;

/// What `cudaprocess` does to each frame (its `operation` property).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaProcessOperation")]
pub enum Operation {
    #[default]
    #[enum_value(name = "None: pass frames through untouched", nick = "none")]
    None = 0,
    #[enum_value(name = "Invert: every colour byte x becomes 255 - x", nick = "invert")]
    Invert = 1,
    #[enum_value(
        name = "Brightness: add the brightness property (times 255) to colour bytes, saturating",
        nick = "brightness"
    )]
    Brightness = 2,
    #[enum_value(
        name = "Gamma: x becomes round(255 * (x / 255)^(1 / gamma)) on colour bytes",
        nick = "gamma"
    )]
    Gamma = 3,
    #[enum_value(
        name = "Grayscale: BT.601 luma into R, G and B; chroma planes to 128",
        nick = "grayscale"
    )]
    Grayscale = 4,
}

glib::wrapper! {
    pub struct CudaProcess(ObjectSubclass<imp::CudaProcess>)
        @extends gst_base::BaseTransform, gst::Element, gst::Object;
}

pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "cudaprocess",
        gst::Rank::NONE,
        CudaProcess::static_type(),
    )
}

/// The table `operation=gamma` maps bytes through:
/// `round(255 * (x / 255)^(1 / gamma))`.
pub fn gamma_table(gamma: f64) -> [u8; 256] {
    std::array::from_fn(|x| (255.0 * (x as f64 / 255.0).powf(1.0 / gamma)).round() as u8)
}

/// The signed amount `operation=brightness` adds to each colour byte.
pub fn brightness_delta(brightness: f64) -> i32 {
    (brightness * 255.0).round().clamp(-255.0, 255.0) as i32
}
