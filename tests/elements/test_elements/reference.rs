// On a GPU host every operation of cudaprocess against the CPU pattern
// reference over fresh random frames (the reference itself is tested in
// src/pattern/tests.rs).

use super::*;

#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Invert,
    Brightness(f64),
    Gamma(f64),
    Grayscale,
}

impl Op {
    fn configure(&self, element: &gst::Element) {
        match *self {
            Op::Invert => element.set_property_from_str("operation", "invert"),
            Op::Brightness(b) => {
                element.set_property_from_str("operation", "brightness");
                element.set_property("brightness", b);
            }
            Op::Gamma(g) => {
                element.set_property_from_str("operation", "gamma");
                element.set_property("gamma", g);
            }
            Op::Grayscale => element.set_property_from_str("operation", "grayscale"),
        }
    }

    /// What the documentation says `self` makes of row `input` of `plane`:
    /// an independent CPU reference.
    pub(crate) fn reference(&self, format: VideoFormat, plane: usize, input: &[u8]) -> Vec<u8> {
        let four_bytes = matches!(
            format,
            VideoFormat::Rgba | VideoFormat::Bgra | VideoFormat::Rgbx | VideoFormat::Bgrx
        );
        // Alpha and padding bytes are never changed.
        let colour = |x: usize| !four_bytes || x % 4 != 3;
        let intensity_plane = plane == 0;
        let map = |f: &dyn Fn(u8) -> u8, applies: bool| -> Vec<u8> {
            input
                .iter()
                .enumerate()
                .map(|(x, &b)| if applies && colour(x) { f(b) } else { b })
                .collect()
        };
        match *self {
            Op::Invert => map(&|b| 255 - b, true),
            Op::Brightness(brightness) => {
                let delta = (brightness * 255.0).round() as i32;
                map(&|b| (b as i32 + delta).clamp(0, 255) as u8, intensity_plane)
            }
            Op::Gamma(gamma) => map(
                &|b| (255.0 * (b as f64 / 255.0).powf(1.0 / gamma)).round() as u8,
                intensity_plane,
            ),
            Op::Grayscale => {
                let luma = |r: u8, g: u8, b: u8| {
                    ((77 * r as u32 + 150 * g as u32 + 29 * b as u32 + 128) >> 8) as u8
                };
                match format {
                    VideoFormat::Gray8 => input.to_vec(),
                    VideoFormat::Nv12 | VideoFormat::I420 => {
                        if plane == 0 {
                            input.to_vec()
                        } else {
                            vec![128; input.len()]
                        }
                    }
                    _ => {
                        let bpp = if four_bytes { 4 } else { 3 };
                        let red = if matches!(format, VideoFormat::Bgra | VideoFormat::Bgrx) {
                            2
                        } else {
                            0
                        };
                        let mut out = input.to_vec();
                        for px in out.chunks_mut(bpp) {
                            let y = luma(px[red], px[1], px[2 - red]);
                            px[..3].fill(y);
                        }
                        out
                    }
                }
            }
        }
    }
}

const OPS: [Op; 7] = [
    Op::Invert,
    Op::Brightness(0.1),
    Op::Brightness(-0.3),
    Op::Brightness(1.0),
    Op::Gamma(2.2),
    Op::Gamma(0.45),
    Op::Grayscale,
];

/// How the frame reaches cudaprocess.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Path {
    /// A writable buffer of writable memory: processed in place.
    InPlace,
    /// Read-only memory (a cudaipcsrc slot): processed into a new buffer.
    ReadOnly,
    /// A buffer someone else also holds: processed into a new buffer.
    Shared,
}

#[test]
fn operations_match_the_cpu_reference_on_random_frames() {
    init();
    let Some(device) = gpu_or_skip("operations_match_the_cpu_reference_on_random_frames") else {
        return;
    };
    let mut random = Random::fresh();
    let seed = random.0;
    for format in FORMATS {
        for (width, height) in [(320, 240), (37, 19)] {
            let info = video_info(format, width, height);
            let mut h = Harness::new("cudaprocess");
            h.set_src_caps(cuda_caps(&info));
            let element = h.element().unwrap();
            for layout in [Layout::default_for(&info), Layout::padded(&info)] {
                let planes = plane_layouts(&info, &layout);
                for op in OPS {
                    op.configure(&element);
                    for path in [Path::InPlace, Path::ReadOnly, Path::Shared] {
                        let context = format!(
                            "{format:?} {width}x{height} {op:?} {path:?} meta={} (seed {seed:#x})",
                            layout.meta
                        );
                        let input = random.bytes(layout.size);
                        let (buffer, memory) =
                            upload(&device, &info, &layout, &input, path == Path::ReadOnly);
                        let held = (path == Path::Shared).then(|| buffer.clone());
                        h.push(buffer)
                            .unwrap_or_else(|e| panic!("{context}: {e:?}"));
                        let output = h.pull().unwrap();
                        drop(held);
                        let (data, out_ptr) = download(output.peek_memory(0));
                        let (after, in_ptr) = download(&memory);
                        let out_layout = if path == Path::InPlace {
                            assert_eq!(out_ptr, in_ptr, "{context}: not in place");
                            planes.clone()
                        } else {
                            assert_ne!(out_ptr, in_ptr, "{context}: wrote into the input");
                            assert_eq!(after, input, "{context}: the input changed");
                            let out_planes = pattern::buffer_planes(&info, &output).unwrap();
                            pattern::frame_layout(&info, &out_planes, data.len()).unwrap()
                        };
                        for (p, (src, dst)) in planes.iter().zip(&out_layout).enumerate() {
                            for row in 0..src.rows {
                                let expected = op.reference(format, p, &input[src.row_range(row)]);
                                assert_eq!(
                                    &data[dst.row_range(row)],
                                    expected.as_slice(),
                                    "{context}: plane {p} row {row}"
                                );
                            }
                        }
                        if path == Path::InPlace {
                            // Padding between rows and planes is untouched.
                            let mut is_pixel = vec![false; layout.size];
                            for plane in &planes {
                                for row in 0..plane.rows {
                                    is_pixel[plane.row_range(row)].fill(true);
                                }
                            }
                            let changed =
                                (0..layout.size).find(|&i| !is_pixel[i] && data[i] != input[i]);
                            assert_eq!(changed, None, "{context}: padding changed");
                        }
                    }
                }
            }
        }
    }
}
