// SPDX-License-Identifier: MPL-2.0

//! The test patterns of `cudatestsrc` and `cudaprocess verify=true`: the
//! GPU side in [`kernels`] (sources and launches), here the frame layouts
//! they share, and in `reference` the CPU reference, byte for byte what the
//! GPU writes
//! (`kernels/common.cu`), so that frames read in system memory can be
//! checked. Both test elements use this module; neither imports the other.
//!
//! A frame is a set of planes; each plane is `rows` rows of `row_bytes`
//! bytes of pixel data, `stride` bytes apart, from `offset` in the frame's
//! bytes. Padding between rows is not part of any pattern.
//!
//! # `counter`
//!
//! Encodes the frame number in every row so that a torn frame (rows of two
//! frames), a stale one (a number seen before) or a misplaced row (shifted,
//! or from the wrong plane) is detected. Byte `x` of row `row` of plane
//! `plane` in frame `frame` (all as u32, arithmetic modulo 2^32):
//!
//! * when the row has at least 8 bytes, bytes 0..8 are a header:
//!   `frame` (u32, little endian), `row & 0xFFFF` (u16, little endian),
//!   `plane` (u8), `0xA5`;
//! * every other byte is `(frame * 131 + row * 7 + plane * 17 + x * 3) & 0xFF`.
//!
//! A frame whose rows of plane 0 are shorter than 8 bytes carries only
//! `frame & 0xFF` (131 is invertible modulo 256: `frame & 0xFF ==
//! (byte 0 of row 0 * 43) & 0xFF`).
//!
//! # `gradient`
//!
//! A moving diagonal gradient: byte `x` of row `row` of plane `plane` is
//! `(x + row + 2 * frame + 64 * plane) & 0xFF`.

use gst::glib;

use crate::video;

pub mod kernels;
mod reference;
pub use reference::*;
#[doc(hidden)]
pub mod testing;
#[cfg(test)]
mod tests;

/// What `cudatestsrc` draws (its `pattern` property).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaTestSrcPattern")]
pub enum Pattern {
    /// Frame number in every row (header + counter bytes): checkable.
    #[default]
    #[enum_value(
        name = "Counter: the frame number in every row, checkable by cudaprocess verify=true",
        nick = "counter"
    )]
    Counter = 0,
    /// A moving diagonal gradient.
    #[enum_value(name = "Gradient: a moving diagonal gradient", nick = "gradient")]
    Gradient = 1,
}

/// (offset, stride) of each plane in the layout the caps imply.
pub fn default_planes(info: &gst_video::VideoInfo) -> Vec<(usize, usize)> {
    video::planes(info)
        .into_iter()
        .map(|(offset, stride)| (offset as usize, stride as usize))
        .collect()
}

/// (offset, stride) of each plane of `buffer`: its `GstVideoMeta` when it
/// has one, else the layout the caps imply.
pub fn buffer_planes(
    info: &gst_video::VideoInfo,
    buffer: &gst::BufferRef,
) -> Result<Vec<(usize, usize)>, String> {
    let Some(meta) = buffer.meta::<gst_video::VideoMeta>() else {
        return Ok(default_planes(info));
    };
    if meta.n_planes() != info.n_planes() {
        return Err(format!(
            "the buffer's video meta has {} planes, the caps say {}",
            meta.n_planes(),
            info.n_planes()
        ));
    }
    meta.offset()
        .iter()
        .zip(meta.stride())
        .take(info.n_planes() as usize)
        .map(|(&offset, &stride)| {
            usize::try_from(stride)
                .map(|stride| (offset, stride))
                .map_err(|_| format!("negative stride {stride} in the buffer's video meta"))
        })
        .collect()
}

/// `planes` ((offset, stride) per plane) in the video layer's types,
/// checked to hold a frame of `info` within `size` bytes.
pub fn fitting_planes(
    info: &gst_video::VideoInfo,
    planes: &[(usize, usize)],
    size: usize,
) -> Result<Vec<(u64, u32)>, String> {
    let checked: Vec<(u64, u32)> = planes
        .iter()
        .map(|&(offset, stride)| {
            u32::try_from(stride)
                .map(|stride| (offset as u64, stride))
                .map_err(|_| format!("stride {stride} is too large"))
        })
        .collect::<Result<_, _>>()?;
    video::layout_fits(info, &checked, size as u64).map_err(|e| e.to_string())?;
    Ok(checked)
}
