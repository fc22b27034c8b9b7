// SPDX-License-Identifier: MPL-2.0

//! The CPU pattern reference: every format's counter frames round-trip, and
//! the check finds flipped, swapped, torn and misplaced rows, and ignores
//! padding.

use gst_video::VideoFormat;

use super::testing::{Random, padded_planes};
use super::{self as pattern, Pattern, PlaneLayout, default_planes};
use crate::video::FORMATS;

fn video_info(format: VideoFormat, width: u32, height: u32) -> gst_video::VideoInfo {
    gst_video::VideoInfo::builder(format, width, height)
        .build()
        .unwrap()
}

/// A frame layout: (offset, stride) per plane and the bytes it spans.
#[derive(Debug)]
struct Layout {
    planes: Vec<(usize, usize)>,
    size: usize,
}

impl Layout {
    fn default_for(info: &gst_video::VideoInfo) -> Self {
        Layout {
            planes: default_planes(info),
            size: info.size(),
        }
    }

    fn padded(info: &gst_video::VideoInfo) -> Self {
        let (planes, size) = padded_planes(info);
        Layout { planes, size }
    }
}

fn plane_layouts(info: &gst_video::VideoInfo, layout: &Layout) -> Vec<PlaneLayout> {
    pattern::frame_layout(info, &layout.planes, layout.size).unwrap()
}

/// Sizes that give wide rows, odd rows and rows shorter than a header.
const SIZES: [(u32, u32); 4] = [(64, 48), (37, 19), (3, 5), (2, 2)];

#[test]
fn counter_frames_round_trip_on_every_format() {
    gst::init().unwrap();
    for format in FORMATS {
        for (width, height) in SIZES {
            let info = video_info(format, width, height);
            for layout in [Layout::default_for(&info), Layout::padded(&info)] {
                let mut data = Random::fresh().bytes(layout.size);
                for frame in [0u32, 1, 255, 256, 70_000, u32::MAX] {
                    pattern::fill_frame(Pattern::Counter, frame, &info, &layout.planes, &mut data)
                        .unwrap();
                    let carried = if plane_layouts(&info, &layout)[0].row_bytes >= 8 {
                        frame
                    } else {
                        frame & 0xFF
                    };
                    assert_eq!(
                        pattern::verify_frame(&info, &layout.planes, &data),
                        Ok(carried),
                        "{format:?} {width}x{height} {layout:?} frame {frame}"
                    );
                }
            }
        }
    }
}

#[test]
fn counter_check_finds_flipped_swapped_torn_and_misplaced_rows() {
    gst::init().unwrap();
    let mut random = Random::fresh();
    for format in FORMATS {
        let info = video_info(format, 40, 12);
        let layout = Layout::default_for(&info);
        let planes = plane_layouts(&info, &layout);
        let mut good = vec![0u8; layout.size];
        pattern::fill_frame(Pattern::Counter, 41, &info, &layout.planes, &mut good).unwrap();
        let context = format!("{format:?} (seed {:#x})", random.0);

        // One flipped byte, anywhere (a random plane, row and byte).
        let plane = &planes[random.next_u64() as usize % planes.len()];
        let at = plane
            .row_range(random.next_u64() as usize % plane.rows)
            .start
            + random.next_u64() as usize % plane.row_bytes;
        // (Not the frame number of row 0, which the check reads the frame's
        // number from: flipping that is tested just below.)
        let number = planes[0].row_range(0).start..planes[0].row_range(0).start + 4;
        let at = if number.contains(&at) { at + 4 } else { at };
        let mut flipped = good.clone();
        flipped[at] ^= 1 << (random.next_u64() % 8);
        let error = pattern::verify_frame(&info, &layout.planes, &flipped).unwrap_err();
        assert!(error.contains("1 byte(s) differ"), "{context}: {error}");
        let mut renumbered = good.clone();
        renumbered[number.start] ^= 1;
        assert!(
            pattern::verify_frame(&info, &layout.planes, &renumbered).is_err(),
            "{context}: a changed frame number in row 0 goes unnoticed"
        );

        // Two rows swapped.
        let mut swapped = good.clone();
        let (a, b) = (planes[0].row_range(2), planes[0].row_range(5));
        let row_a = swapped[a.clone()].to_vec();
        swapped.copy_within(b.clone(), a.start);
        swapped[b].copy_from_slice(&row_a);
        let error = pattern::verify_frame(&info, &layout.planes, &swapped).unwrap_err();
        assert!(
            error.contains("plane 0 row 2") && error.contains("header says frame 41 plane 0 row 5"),
            "{context}: {error}"
        );

        // A torn frame: one row of the next frame.
        let mut next = vec![0u8; layout.size];
        pattern::fill_frame(Pattern::Counter, 42, &info, &layout.planes, &mut next).unwrap();
        let mut torn = good.clone();
        let row = planes[0].row_range(7);
        torn[row.clone()].copy_from_slice(&next[row]);
        let error = pattern::verify_frame(&info, &layout.planes, &torn).unwrap_err();
        assert!(error.contains("header says frame 42"), "{context}: {error}");

        // A whole stale frame is intact: only the sequence check (verify)
        // can call it stale; the CPU check reports its number.
        assert_eq!(pattern::verify_frame(&info, &layout.planes, &next), Ok(42));

        // A row of another plane.
        if planes.len() > 1 {
            let mut misplaced = good.clone();
            let last = planes.len() - 1;
            let src = planes[last].row_range(0);
            let dst = planes[0].row_range(0).start;
            misplaced.copy_within(src, dst);
            let error = pattern::verify_frame(&info, &layout.planes, &misplaced).unwrap_err();
            assert!(
                error.contains(&format!("plane {last} row 0")),
                "{context}: {error}"
            );
        }

        // A frame too small for its layout.
        assert!(pattern::verify_frame(&info, &layout.planes, &good[..layout.size - 1]).is_err());
    }
}

#[test]
fn padding_is_not_part_of_the_pattern() {
    gst::init().unwrap();
    let info = video_info(VideoFormat::Rgb, 10, 4);
    let layout = Layout::padded(&info);
    let mut data = vec![0u8; layout.size];
    pattern::fill_frame(Pattern::Counter, 9, &info, &layout.planes, &mut data).unwrap();
    let plane = plane_layouts(&info, &layout)[0];
    for row in 0..plane.rows {
        let end = plane.row_range(row).end;
        data[end..end + (plane.stride - plane.row_bytes)].fill(0xEE);
    }
    assert_eq!(pattern::verify_frame(&info, &layout.planes, &data), Ok(9));
}
