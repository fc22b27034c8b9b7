// SPDX-License-Identifier: MPL-2.0

//! The CPU reference of the test patterns, byte for byte what the GPU
//! writes (`kernels/common.cu`): tests, examples and the benchmark fill and
//! check frames in system memory with it. Not in the shipped plugin (the
//! elements draw and verify on the GPU).

use super::{Pattern, fitting_planes};
use crate::video;

/// Bytes of the counter pattern's row header.
pub const HEADER_BYTES: usize = 8;
/// Last byte of the counter pattern's row header.
pub const HEADER_MARKER: u8 = 0xA5;
/// `131 * INVERSE_131 == 1 (mod 256)`.
const INVERSE_131: u32 = 43;

/// The first counter-pattern byte of a row that is not header: byte `x` is
/// `counter_seed(..) + 3 * x` modulo 256.
fn counter_seed(frame: u32, plane: u32, row: u32) -> u32 {
    frame
        .wrapping_mul(131)
        .wrapping_add(row.wrapping_mul(7))
        .wrapping_add(plane.wrapping_mul(17))
}

/// The counter pattern's non-header byte `x` of a row.
pub fn counter_byte(frame: u32, plane: usize, row: usize, x: usize) -> u8 {
    counter_seed(frame, plane as u32, row as u32).wrapping_add((x as u32).wrapping_mul(3)) as u8
}

/// The counter pattern's row header.
pub fn row_header(frame: u32, plane: usize, row: usize) -> [u8; HEADER_BYTES] {
    let f = frame.to_le_bytes();
    let r = (row as u16).to_le_bytes();
    [
        f[0],
        f[1],
        f[2],
        f[3],
        r[0],
        r[1],
        plane as u8,
        HEADER_MARKER,
    ]
}

/// Writes row `row` of plane `plane` of frame `frame` into `out` (its
/// length is the row's byte count).
pub fn fill_row(pattern: Pattern, frame: u32, plane: usize, row: usize, out: &mut [u8]) {
    match pattern {
        Pattern::Counter => {
            for (x, byte) in out.iter_mut().enumerate() {
                *byte = counter_byte(frame, plane, row, x);
            }
            if out.len() >= HEADER_BYTES {
                out[..HEADER_BYTES].copy_from_slice(&row_header(frame, plane, row));
            }
        }
        Pattern::Gradient => {
            let seed = (row as u32)
                .wrapping_add(frame.wrapping_mul(2))
                .wrapping_add((plane as u32).wrapping_mul(64));
            for (x, byte) in out.iter_mut().enumerate() {
                *byte = seed.wrapping_add(x as u32) as u8;
            }
        }
    }
}

/// Row `row` of plane `plane` of frame `frame`, `row_bytes` long.
pub fn expected_row(
    pattern: Pattern,
    frame: u32,
    plane: usize,
    row: usize,
    row_bytes: usize,
) -> Vec<u8> {
    let mut out = vec![0; row_bytes];
    fill_row(pattern, frame, plane, row, &mut out);
    out
}

/// One plane of a frame as it lies in the frame's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaneLayout {
    pub offset: usize,
    pub stride: usize,
    pub row_bytes: usize,
    pub rows: usize,
}

impl PlaneLayout {
    /// Byte range of row `row`.
    pub fn row_range(&self, row: usize) -> std::ops::Range<usize> {
        let start = self.offset + row * self.stride;
        start..start + self.row_bytes
    }
}

/// The full layout of a frame of `info` with `planes` ((offset, stride) per
/// plane), checked to fit in `size` bytes.
pub fn frame_layout(
    info: &gst_video::VideoInfo,
    planes: &[(usize, usize)],
    size: usize,
) -> Result<Vec<PlaneLayout>, String> {
    fitting_planes(info, planes, size)?;
    Ok(planes
        .iter()
        .enumerate()
        .map(|(p, &(offset, stride))| PlaneLayout {
            offset,
            stride,
            row_bytes: video::row_bytes(info, p),
            rows: video::rows(info, p),
        })
        .collect())
}

/// Writes frame `frame` of `pattern` into `data` (a frame of `info` laid
/// out as `planes`); padding is left as it is.
pub fn fill_frame(
    pattern: Pattern,
    frame: u32,
    info: &gst_video::VideoInfo,
    planes: &[(usize, usize)],
    data: &mut [u8],
) -> Result<(), String> {
    for (p, plane) in frame_layout(info, planes, data.len())?.iter().enumerate() {
        for row in 0..plane.rows {
            fill_row(pattern, frame, p, row, &mut data[plane.row_range(row)]);
        }
    }
    Ok(())
}

/// The frame number a counter frame carries (only `& 0xFF` of it when its
/// plane-0 rows are shorter than the header).
pub fn encoded_frame_number(first_row: &[u8]) -> Option<u32> {
    if first_row.len() >= HEADER_BYTES {
        Some(u32::from_le_bytes(first_row[..4].try_into().unwrap()))
    } else {
        first_row
            .first()
            .map(|&b| (b as u32).wrapping_mul(INVERSE_131) & 0xFF)
    }
}

/// Checks a counter-pattern frame of `info` laid out as `planes` ((offset,
/// stride) per plane, e.g. from [`buffer_planes`](super::buffer_planes)) in `data`. Returns the
/// frame number it carries, or what is wrong: how many bytes differ, where
/// the first one is, and whose row it looks like when a header is off.
pub fn verify_frame(
    info: &gst_video::VideoInfo,
    planes: &[(usize, usize)],
    data: &[u8],
) -> Result<u32, String> {
    let layout = frame_layout(info, planes, data.len())?;
    let first = layout
        .first()
        .filter(|p| p.rows > 0 && p.row_bytes > 0)
        .ok_or("the frame has no pixel data")?;
    let frame = encoded_frame_number(&data[first.row_range(0)]).unwrap();
    let mut differing = 0usize;
    let mut first_problem = None;
    let mut expected = Vec::new();
    for (p, plane) in layout.iter().enumerate() {
        expected.resize(plane.row_bytes, 0);
        for row in 0..plane.rows {
            fill_row(Pattern::Counter, frame, p, row, &mut expected);
            let actual = &data[plane.row_range(row)];
            if actual == expected.as_slice() {
                continue;
            }
            let bad = actual.iter().zip(&expected).filter(|(a, e)| a != e).count();
            differing += bad;
            if first_problem.is_none() {
                let x = actual
                    .iter()
                    .zip(&expected)
                    .position(|(a, e)| a != e)
                    .unwrap();
                let mut text = format!(
                    "plane {p} row {row}: {bad} byte(s) differ, the first at byte {x} (expected {:#04x}, found {:#04x})",
                    expected[x], actual[x]
                );
                if actual.len() >= HEADER_BYTES && actual[HEADER_BYTES - 1] == HEADER_MARKER {
                    let their_frame = u32::from_le_bytes(actual[..4].try_into().unwrap());
                    let their_row = u16::from_le_bytes([actual[4], actual[5]]);
                    let their_plane = actual[6];
                    if (their_frame, their_row as usize, their_plane as usize)
                        != (frame, row & 0xFFFF, p)
                    {
                        text.push_str(&format!(
                            "; its header says frame {their_frame} plane {their_plane} row {their_row}"
                        ));
                    }
                }
                first_problem = Some(text);
            }
        }
    }
    match first_problem {
        None => Ok(frame),
        Some(text) => Err(format!(
            "frame {frame}: {differing} byte(s) differ from the counter pattern; {text}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_bytes_follow_the_documented_formula() {
        // Row 3 of plane 1 in frame 5: header, then (5*131 + 3*7 + 17 + 3x).
        let row = expected_row(Pattern::Counter, 5, 1, 3, 12);
        assert_eq!(&row[..8], &[5, 0, 0, 0, 3, 0, 1, 0xA5]);
        for (x, &byte) in row.iter().enumerate().skip(8) {
            assert_eq!(byte as usize, (5 * 131 + 3 * 7 + 17 + 3 * x) & 0xFF);
        }
        // Short rows have no header.
        let short = expected_row(Pattern::Counter, 300, 0, 0, 6);
        assert_eq!(short[0], ((300 * 131) & 0xFF) as u8);
        assert_eq!(encoded_frame_number(&short), Some(300 & 0xFF));
        let gradient = expected_row(Pattern::Gradient, 10, 2, 1, 4);
        assert_eq!(gradient, vec![149, 150, 151, 152]);
    }
}
