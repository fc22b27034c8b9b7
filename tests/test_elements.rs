// SPDX-License-Identifier: MPL-2.0

//! `cudatestsrc` and `cudaprocess`: properties, caps negotiation, errors,
//! the CPU pattern reference everywhere; on a GPU host the pixel values of
//! every operation against a CPU reference over fresh random frames, the
//! generator's frames checked on the CPU, and `verify` catching planted
//! corrupt frames, gaps and stale frames.
//!
//! GPU tests print `SKIPPED: no CUDA device` without a GPU (and fail with
//! `CUDAIPC_REQUIRE_GPU=1`).

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gst::glib;
use gst::prelude::*;
use gst_check::Harness;
use gst_video::VideoFormat;
use gst_video::prelude::*;

use common::*;
use cudaipc_transport::cuda::Device;
use gstcudaipc::FORMATS;
use gstcudaipc::memory::{self, CudaAllocator};
use gstcudaipc::pattern::{self, Pattern, PlaneLayout};

fn video_info(format: VideoFormat, width: u32, height: u32) -> gst_video::VideoInfo {
    gst_video::VideoInfo::builder(format, width, height)
        .build()
        .unwrap()
}

fn cuda_caps(info: &gst_video::VideoInfo) -> gst::Caps {
    memory::with_cuda_feature(&info.to_caps().unwrap())
}

/// xorshift64*: fresh random bytes per run, the seed printed on failure.
struct Random(u64);

impl Random {
    fn fresh() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        Random(nanos | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A frame layout: (offset, stride) per plane and the bytes it spans.
#[derive(Debug, Clone)]
struct Layout {
    planes: Vec<(usize, usize)>,
    size: usize,
    /// Whether buffers carry it in a GstVideoMeta (else it is the caps').
    meta: bool,
}

impl Layout {
    fn default_for(info: &gst_video::VideoInfo) -> Self {
        Layout {
            planes: pattern::default_planes(info),
            size: info.size(),
            meta: false,
        }
    }

    /// Every plane at a 16-byte aligned offset with a stride of 16 bytes
    /// more than its row rounded up to 16: wide accesses with partial last
    /// chunks, and padding that must stay untouched.
    fn padded(info: &gst_video::VideoInfo) -> Self {
        let mut planes = Vec::new();
        let mut offset = 0;
        for plane in plane_layouts(info, &Layout::default_for(info)) {
            let stride = plane.row_bytes.next_multiple_of(16) + 16;
            planes.push((offset, stride));
            offset = (offset + stride * plane.rows).next_multiple_of(16) + 16;
        }
        Layout {
            planes,
            size: offset,
            meta: true,
        }
    }
}

fn plane_layouts(info: &gst_video::VideoInfo, layout: &Layout) -> Vec<PlaneLayout> {
    pattern::frame_layout(info, &layout.planes, layout.size).unwrap()
}

// ---------------------------------------------------------------------------
// Without a GPU: properties, negotiation, errors.

#[test]
fn cudatestsrc_properties() {
    init();
    let src = gst::ElementFactory::make("cudatestsrc").build().unwrap();
    assert_eq!(src.type_().name(), "GstRsCudaTestSrc");
    assert_eq!(src.property::<Pattern>("pattern"), Pattern::Counter);
    assert!(!src.property::<bool>("is-live"));
    assert_eq!(src.property::<i32>("cuda-device-id"), 0);
    assert_eq!(src.property::<i32>("num-buffers"), -1);

    let pspec = src.find_property("pattern").unwrap();
    let class = glib::EnumClass::with_type(pspec.value_type()).unwrap();
    let nicks: Vec<&str> = class.values().iter().map(|v| v.nick()).collect();
    assert_eq!(nicks, ["counter", "gradient"]);
    src.set_property_from_str("pattern", "gradient");
    assert_eq!(src.property::<Pattern>("pattern"), Pattern::Gradient);

    let device = src.find_property("cuda-device-id").unwrap();
    let device = device.downcast_ref::<glib::ParamSpecInt>().unwrap();
    assert_eq!(device.minimum(), 0);

    src.set_property("is-live", true);
    let base_src = src.downcast_ref::<gst_base::BaseSrc>().unwrap();
    assert!(base_src.is_live(), "is-live must make the base source live");
}

#[test]
fn cudatestsrc_offers_cuda_memory_first_then_system_memory() {
    init();
    let src = gst::ElementFactory::make("cudatestsrc").build().unwrap();
    let caps = src.static_pad("src").unwrap().query_caps(None);
    assert_eq!(caps.size(), 2, "{caps}");
    assert!(
        memory::caps_are_cuda(&caps),
        "CUDA memory must come first: {caps}"
    );
    assert!(
        !caps
            .features(1)
            .unwrap()
            .contains(memory::CAPS_FEATURE_CUDA_MEMORY)
    );
    for format in FORMATS {
        for i in 0..2 {
            let formats = caps
                .structure(i)
                .unwrap()
                .get::<gst::List>("format")
                .unwrap();
            assert!(
                formats
                    .iter()
                    .any(|f| f.get::<&str>().unwrap() == format.to_str()),
                "{format:?} missing from {caps}"
            );
        }
    }
}

#[test]
fn cudaprocess_properties() {
    init();
    let process = gst::ElementFactory::make("cudaprocess").build().unwrap();
    assert_eq!(process.type_().name(), "GstRsCudaProcess");
    let operation = process.property_value("operation");
    let (_, default) = glib::EnumValue::from_value(&operation).unwrap();
    assert_eq!(default.nick(), "none");
    let pspec = process.find_property("operation").unwrap();
    let class = glib::EnumClass::with_type(pspec.value_type()).unwrap();
    let nicks: Vec<&str> = class.values().iter().map(|v| v.nick()).collect();
    assert_eq!(
        nicks,
        ["none", "invert", "brightness", "gamma", "grayscale"]
    );

    let double = |name: &str| {
        let pspec = process.find_property(name).unwrap();
        let pspec = pspec.downcast_ref::<glib::ParamSpecDouble>().unwrap();
        (
            pspec.default_value(),
            pspec.minimum(),
            pspec.maximum(),
            process.property::<f64>(name),
        )
    };
    assert_eq!(double("brightness"), (0.1, -1.0, 1.0, 0.1));
    assert_eq!(double("gamma"), (2.2, 0.01, 10.0, 2.2));
    assert!(!process.property::<bool>("verify"));
    assert!(!process.property::<bool>("verify-fatal"));

    let stats = process.find_property("stats").unwrap();
    assert!(stats.flags().contains(glib::ParamFlags::READABLE));
    assert!(!stats.flags().contains(glib::ParamFlags::WRITABLE));
    let stats = process.property::<gst::Structure>("stats");
    assert_eq!(stats.name(), "cudaprocess-stats");
    for counter in ["frames", "verified", "corrupt", "missing"] {
        assert_eq!(
            stats.get::<u64>(counter).unwrap(),
            0,
            "{counter} in {stats}"
        );
    }
    assert_eq!(stats.get::<i64>("first-bad-frame").unwrap(), -1);

    process.set_property_from_str("operation", "gamma");
    process.set_property("gamma", 0.5);
    assert_eq!(process.property::<f64>("gamma"), 0.5);
    let transform = process.downcast_ref::<gst_base::BaseTransform>().unwrap();
    assert!(
        !transform.is_passthrough(),
        "an operation is not passthrough"
    );
    process.set_property_from_str("operation", "none");
    assert!(transform.is_passthrough(), "operation=none passes through");
}

#[test]
fn cudaprocess_negotiates_every_format_in_cuda_memory() {
    init();
    for format in FORMATS {
        let info = video_info(format, 64, 48);
        let caps = cuda_caps(&info);
        let mut h = Harness::new("cudaprocess");
        h.set_src_caps(caps.clone());
        let out = h.sinkpad().unwrap().current_caps();
        assert_eq!(
            out.as_ref(),
            Some(&caps),
            "{format:?}: same caps in and out"
        );
    }
}

#[test]
fn operation_none_passes_buffers_through_untouched() {
    init();
    let info = video_info(VideoFormat::Rgb, 16, 8);
    let mut h = Harness::new("cudaprocess");
    h.set_src_caps(cuda_caps(&info));
    // Without verify, nothing reads the buffer: it need not even be CUDA
    // memory.
    let buffer = gst::Buffer::from_slice(vec![7u8; info.size()]);
    let pushed = buffer.as_ptr();
    h.push(buffer).unwrap();
    let out = h.pull().unwrap();
    assert_eq!(out.as_ptr(), pushed, "the very same buffer comes out");
    assert!(out.map_readable().unwrap().iter().all(|&b| b == 7));
}

#[test]
fn cudaprocess_rejects_unsupported_caps_with_a_clear_message() {
    init();
    let yuy2 = cuda_caps(&video_info(VideoFormat::Yuy2, 64, 48));
    let system_memory = video_info(VideoFormat::Rgb, 64, 48).to_caps().unwrap();
    for caps in [yuy2, system_memory] {
        let mut h = Harness::new("cudaprocess");
        let bus = gst::Bus::new();
        h.element().unwrap().set_bus(Some(&bus));
        // Sticky events are stored whatever the peer says; the refusal
        // shows when data flows.
        h.push_event(gst::event::StreamStart::new("caps-test"));
        h.push_event(gst::event::Caps::new(&caps));
        h.push_event(gst::event::Segment::new(&gst::FormattedSegment::<
            gst::ClockTime,
        >::new()));
        let buffer = gst::Buffer::with_size(64).unwrap();
        assert_eq!(
            h.push(buffer),
            Err(gst::FlowError::NotNegotiated),
            "{caps} must be refused"
        );
        assert_eq!(h.sinkpad().unwrap().current_caps(), None);
        let messages: Vec<gst::Message> = std::iter::from_fn(|| bus.pop()).collect();
        let warning = messages
            .iter()
            .find_map(|m| match m.view() {
                gst::MessageView::Warning(w) => Some(w.error().to_string()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no warning posted for {caps}: {messages:?}"));
        assert!(
            warning.contains("cudaprocess cannot take") && warning.contains("format=(string)"),
            "unclear warning: {warning}"
        );
    }
}

#[test]
fn cudaprocess_reports_buffers_that_are_not_cuda_memory() {
    init();
    let info = video_info(VideoFormat::Rgb, 16, 8);
    let mut h = Harness::new("cudaprocess");
    let bus = gst::Bus::new();
    h.element().unwrap().set_bus(Some(&bus));
    h.element()
        .unwrap()
        .set_property_from_str("operation", "invert");
    h.set_src_caps(cuda_caps(&info));
    let buffer = gst::Buffer::from_slice(vec![0u8; info.size()]);
    assert_eq!(h.push(buffer), Err(gst::FlowError::Error));
    let error = std::iter::from_fn(|| bus.pop())
        .find_map(|m| match m.view() {
            gst::MessageView::Error(e) => Some(e.error().to_string()),
            _ => None,
        })
        .expect("an error message");
    assert!(error.contains("not CUDA memory"), "unclear error: {error}");
}

/// Runs `pipeline` to its end; returns the error text if it failed.
fn run_to_end(pipeline: &gst::Element, timeout: Duration) -> Result<(), String> {
    let bus = pipeline.bus().unwrap();
    let started = pipeline.set_state(gst::State::Playing);
    let message = bus.timed_pop_filtered(
        gst::ClockTime::from_nseconds(timeout.as_nanos() as u64),
        &[gst::MessageType::Eos, gst::MessageType::Error],
    );
    let result = match message.as_ref().map(|m| m.view()) {
        None => Err("timed out".to_string()),
        Some(gst::MessageView::Error(e)) => Err(format!(
            "{} ({})",
            e.error(),
            e.debug().map(|d| d.to_string()).unwrap_or_default()
        )),
        Some(_) => Ok(()),
    };
    pipeline.set_state(gst::State::Null).unwrap();
    if result.is_ok() {
        started.map_err(|e| e.to_string())?;
    }
    result
}

#[test]
fn cudatestsrc_without_its_device_fails_clearly() {
    init();
    // Device 4095 exists nowhere: the same clear error with or without a
    // GPU (without a driver, it names libcuda.so.1).
    let pipeline =
        gst::parse::launch("cudatestsrc cuda-device-id=4095 num-buffers=1 ! fakesink").unwrap();
    let error = run_to_end(&pipeline, Duration::from_secs(10)).expect_err("must fail");
    assert!(error.contains("CUDA device 4095"), "unclear error: {error}");
    if !cudaipc_transport::cuda::is_available() {
        assert!(error.contains("libcuda.so.1"), "unclear error: {error}");
        let pipeline = gst::parse::launch("cudatestsrc num-buffers=1 ! fakesink").unwrap();
        let error = run_to_end(&pipeline, Duration::from_secs(10)).expect_err("must fail");
        assert!(
            error.contains("cudatestsrc needs CUDA device 0") && error.contains("libcuda.so.1"),
            "unclear error: {error}"
        );
        // cudatestsrc has no `transport` property: the advice names elements.
        assert!(error.contains("use videotestsrc"), "{error}");
    }
}

// ---------------------------------------------------------------------------
// The CPU pattern reference.

/// Sizes that give wide rows, odd rows and rows shorter than a header.
const SIZES: [(u32, u32); 4] = [(64, 48), (37, 19), (3, 5), (2, 2)];

#[test]
fn counter_frames_round_trip_on_every_format() {
    init();
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
    init();
    let mut random = Random::fresh();
    for format in FORMATS {
        let info = video_info(format, 40, 12);
        let layout = Layout::default_for(&info);
        let planes = plane_layouts(&info, &layout);
        let mut good = vec![0u8; layout.size];
        pattern::fill_frame(Pattern::Counter, 41, &info, &layout.planes, &mut good).unwrap();
        let context = format!("{format:?} (seed {:#x})", random.0);

        // One flipped byte, anywhere (a random plane, row and byte).
        let plane = &planes[random.next() as usize % planes.len()];
        let at = plane.row_range(random.next() as usize % plane.rows).start
            + random.next() as usize % plane.row_bytes;
        // (Not the frame number of row 0, which the check reads the frame's
        // number from: flipping that is tested just below.)
        let number = planes[0].row_range(0).start..planes[0].row_range(0).start + 4;
        let at = if number.contains(&at) { at + 4 } else { at };
        let mut flipped = good.clone();
        flipped[at] ^= 1 << (random.next() % 8);
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
    init();
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

// ---------------------------------------------------------------------------
// On a GPU.

fn allocator(device: &Arc<Device>) -> CudaAllocator {
    CudaAllocator::for_device(device)
}

/// `bytes` in fresh device memory, as a buffer of `info` laid out as
/// `layout`; read-only memory when asked (as cudaipcsrc's slots are). Also
/// returns the memory, which keeps the bytes alive for later reads.
fn upload(
    device: &Arc<Device>,
    info: &gst_video::VideoInfo,
    layout: &Layout,
    bytes: &[u8],
    readonly: bool,
) -> (gst::Buffer, gst::Memory) {
    let allocator = allocator(device);
    let memory = allocator.alloc_device(bytes.len()).unwrap();
    let region = memory::device_region(&memory).unwrap();
    region.upload(bytes).unwrap();
    let in_buffer = if readonly {
        allocator.wrap(region, Some(Box::new(memory.clone())), true)
    } else {
        memory.clone()
    };
    let mut buffer = gst::Buffer::new();
    {
        let buffer = buffer.get_mut().unwrap();
        buffer.append_memory(in_buffer);
        if layout.meta {
            let strides: Vec<i32> = layout.planes.iter().map(|p| p.1 as i32).collect();
            let offsets: Vec<usize> = layout.planes.iter().map(|p| p.0).collect();
            gst_video::VideoMeta::add_full(
                buffer,
                gst_video::VideoFrameFlags::empty(),
                info.format(),
                info.width(),
                info.height(),
                &offsets,
                &strides,
            )
            .unwrap();
        }
    }
    (buffer, memory)
}

/// The device bytes behind a single-memory CUDA buffer (or memory).
fn download(memory: &gst::MemoryRef) -> (Vec<u8>, u64) {
    let region = memory::device_region(memory).expect("CUDA memory");
    let mut data = vec![0u8; region.len()];
    region.download(&mut data).unwrap();
    (data, region.ptr())
}

#[derive(Debug, Clone, Copy)]
enum Op {
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
    fn reference(&self, format: VideoFormat, plane: usize, input: &[u8]) -> Vec<u8> {
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

fn check_counter_samples(samples: &[gst::Sample], first: u32, context: &str) {
    for (n, sample) in samples.iter().enumerate() {
        let info = gst_video::VideoInfo::from_caps(sample.caps().unwrap()).unwrap();
        let buffer = sample.buffer().unwrap();
        let planes = pattern::buffer_planes(&info, buffer).unwrap();
        let map = buffer.map_readable().unwrap();
        let expected = first + n as u32;
        let expected =
            if pattern::frame_layout(&info, &planes, map.len()).unwrap()[0].row_bytes >= 8 {
                expected
            } else {
                expected & 0xFF
            };
        assert_eq!(
            pattern::verify_frame(&info, &planes, &map),
            Ok(expected),
            "{context}: sample {n}"
        );
        assert_eq!(buffer.offset(), n as u64, "{context}: offset");
    }
}

#[test]
fn cudatestsrc_frames_check_on_the_cpu_in_every_format() {
    init();
    if gpu_or_skip("cudatestsrc_frames_check_on_the_cpu_in_every_format").is_none() {
        return;
    }
    for format in FORMATS {
        for (width, height) in [(320, 240), (37, 19), (2, 3)] {
            for features in ["(memory:CUDAMemory)", ""] {
                let description = format!(
                    "cudatestsrc num-buffers=5 ! video/x-raw{features},format={},width={width},height={height} ! appsink name=sink sync=false",
                    format.to_str()
                );
                let samples = common::samples(&description);
                assert_eq!(samples.len(), 5, "{description}");
                let caps = samples[0].caps().unwrap();
                assert_eq!(
                    memory::caps_are_cuda(caps),
                    !features.is_empty(),
                    "{description}: {caps}"
                );
                check_counter_samples(&samples, 0, &description);
            }
        }
    }
}

#[test]
fn cudatestsrc_gradient_matches_the_cpu_reference() {
    init();
    if gpu_or_skip("cudatestsrc_gradient_matches_the_cpu_reference").is_none() {
        return;
    }
    for format in FORMATS {
        let description = format!(
            "cudatestsrc pattern=gradient num-buffers=3 ! video/x-raw(memory:CUDAMemory),format={},width=50,height=10 ! appsink name=sink sync=false",
            format.to_str()
        );
        for (n, sample) in common::samples(&description).iter().enumerate() {
            let info = gst_video::VideoInfo::from_caps(sample.caps().unwrap()).unwrap();
            let buffer = sample.buffer().unwrap();
            let planes = pattern::buffer_planes(&info, buffer).unwrap();
            let map = buffer.map_readable().unwrap();
            for (p, plane) in pattern::frame_layout(&info, &planes, map.len())
                .unwrap()
                .iter()
                .enumerate()
            {
                for row in 0..plane.rows {
                    assert_eq!(
                        &map[plane.row_range(row)],
                        pattern::expected_row(Pattern::Gradient, n as u32, p, row, plane.row_bytes)
                            .as_slice(),
                        "{description}: frame {n} plane {p} row {row}"
                    );
                }
            }
        }
    }
}

#[test]
fn cudatestsrc_defaults_to_4k_rgb_in_cuda_memory_at_30_fps() {
    init();
    if gpu_or_skip("cudatestsrc_defaults_to_4k_rgb_in_cuda_memory_at_30_fps").is_none() {
        return;
    }
    let samples = common::samples("cudatestsrc num-buffers=3 ! appsink name=sink sync=false");
    assert_eq!(samples.len(), 3);
    let caps = samples[0].caps().unwrap();
    assert!(memory::caps_are_cuda(caps), "{caps}");
    let info = gst_video::VideoInfo::from_caps(caps).unwrap();
    assert_eq!(
        (info.format(), info.width(), info.height(), info.fps()),
        (VideoFormat::Rgb, 3840, 2160, gst::Fraction::new(30, 1))
    );
    // n / 30 s, rounded down: durations are the differences.
    let pts = [0, 33_333_333, 66_666_666, 100_000_000].map(gst::ClockTime::from_nseconds);
    for (n, sample) in samples.iter().enumerate() {
        let buffer = sample.buffer().unwrap();
        assert_eq!(buffer.pts(), Some(pts[n]), "pts of frame {n}");
        assert_eq!(
            buffer.duration(),
            Some(pts[n + 1] - pts[n]),
            "duration of frame {n}"
        );
        assert_eq!(buffer.offset(), n as u64);
    }
    check_counter_samples(&samples, 0, "default caps");
}

#[test]
fn cudatestsrc_unlimited_rate_has_no_timestamps_and_live_rate_has() {
    init();
    if gpu_or_skip("cudatestsrc_unlimited_rate_has_no_timestamps_and_live_rate_has").is_none() {
        return;
    }
    let fast = common::samples(
        "cudatestsrc num-buffers=3 ! video/x-raw(memory:CUDAMemory),width=64,height=64,framerate=0/1 ! appsink name=sink sync=false",
    );
    assert_eq!(fast.len(), 3);
    for sample in &fast {
        let buffer = sample.buffer().unwrap();
        assert_eq!((buffer.pts(), buffer.duration()), (None, None));
    }
    let started = std::time::Instant::now();
    let live = common::samples(
        "cudatestsrc is-live=true num-buffers=4 ! video/x-raw(memory:CUDAMemory),width=64,height=64,framerate=20/1 ! appsink name=sink sync=false",
    );
    // A live source produces at its rate, even into a sink that does not
    // synchronise: 4 frames at 20 fps take 150 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(140),
        "{:?}",
        started.elapsed()
    );
    let pts: Vec<_> = live
        .iter()
        .map(|s| s.buffer().unwrap().pts().unwrap())
        .collect();
    for pair in pts.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            gst::ClockTime::from_mseconds(50),
            "{pts:?}"
        );
    }
    check_counter_samples(&live, 0, "live");
}

#[test]
fn cudatestsrc_writes_into_a_downstream_cuda_pool_with_its_strides() {
    init();
    let Some(device) =
        gpu_or_skip("cudatestsrc_writes_into_a_downstream_cuda_pool_with_its_strides")
    else {
        return;
    };
    for format in [VideoFormat::Rgb, VideoFormat::Nv12, VideoFormat::I420] {
        let info = video_info(format, 100, 30);
        let caps = cuda_caps(&info);
        let description = format!("cudatestsrc num-buffers=4 ! {caps} ! appsink");
        let pipeline = gst::parse::launch(
            "cudatestsrc num-buffers=4 ! capsfilter name=filter ! appsink name=sink sync=false",
        )
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
        pipeline
            .by_name("filter")
            .unwrap()
            .set_property("caps", &caps);
        let sink = pipeline
            .by_name("sink")
            .unwrap()
            .downcast::<gst_app::AppSink>()
            .unwrap();
        // Downstream proposes a CUDA pool whose rows are padded by 24 pixels.
        let pool = gst_video::VideoBufferPool::new();
        let mut config = pool.config();
        let mut aligned = info.clone();
        let mut alignment = gst_video::VideoAlignment::new(0, 0, 0, 24, &[0; 4]);
        aligned.align(&mut alignment).unwrap();
        config.set_params(Some(&caps), aligned.size() as u32, 0, 0);
        config.set_allocator(Some(&allocator(&device)), None);
        config.add_option(gst_video::BUFFER_POOL_OPTION_VIDEO_META.as_str());
        config.add_option(gst_video::BUFFER_POOL_OPTION_VIDEO_ALIGNMENT.as_str());
        config.set_video_alignment(&alignment);
        pool.set_config(config).unwrap();
        let size = aligned.size() as u32;
        let proposed = pool.clone();
        sink.static_pad("sink").unwrap().add_probe(
            gst::PadProbeType::QUERY_DOWNSTREAM,
            move |_, probe| {
                if let Some(gst::PadProbeData::Query(query)) = probe.data.as_mut()
                    && let gst::QueryViewMut::Allocation(allocation) = query.view_mut()
                {
                    allocation.add_allocation_pool(Some(&proposed), size, 0, 0);
                    allocation.add_allocation_meta::<gst_video::VideoMeta>(None);
                    return gst::PadProbeReturn::Handled;
                }
                gst::PadProbeReturn::Ok
            },
        );
        pipeline.set_state(gst::State::Playing).unwrap();
        let mut got = Vec::new();
        while let Ok(sample) = sink.pull_sample() {
            got.push(sample);
        }
        pipeline.set_state(gst::State::Null).unwrap();
        assert_eq!(got.len(), 4, "{description}");
        for sample in &got {
            let meta = sample
                .buffer()
                .unwrap()
                .meta::<gst_video::VideoMeta>()
                .expect("a video meta from the pool");
            assert_eq!(
                meta.stride()[0],
                aligned.stride()[0],
                "{format:?}: not the downstream pool's padded stride"
            );
            assert!(aligned.stride()[0] > info.stride()[0]);
        }
        check_counter_samples(&got, 0, &description);
    }
}

#[test]
fn cudatestsrc_explains_a_format_it_cannot_produce() {
    init();
    if gpu_or_skip("cudatestsrc_explains_a_format_it_cannot_produce").is_none() {
        return;
    }
    let pipeline =
        gst::parse::launch("cudatestsrc num-buffers=1 ! capsfilter name=filter ! fakesink")
            .unwrap()
            .downcast::<gst::Bin>()
            .unwrap();
    // Set after linking, so that the failure comes at negotiation.
    pipeline.by_name("filter").unwrap().set_property(
        "caps",
        "video/x-raw,format=YUY2".parse::<gst::Caps>().unwrap(),
    );
    let pipeline = pipeline.upcast::<gst::Element>();
    let error = run_to_end(&pipeline, Duration::from_secs(10)).expect_err("must fail");
    assert!(
        error.contains("cudatestsrc cannot produce a format downstream accepts"),
        "unclear error: {error}"
    );
}

#[test]
fn cudatestsrc_feeds_videoconvert() {
    init();
    if gpu_or_skip("cudatestsrc_feeds_videoconvert").is_none() {
        return;
    }
    if gst::ElementFactory::find("videoconvert").is_none() {
        eprintln!("SKIPPED: videoconvert is not installed");
        return;
    }
    let pipeline = gst::parse::launch(
        "cudatestsrc num-buffers=3 pattern=gradient ! videoconvert ! video/x-raw,format=BGRA ! fakesink",
    )
    .unwrap();
    run_to_end(&pipeline, Duration::from_secs(30)).unwrap();
}

/// A pipeline of cudatestsrc ! caps ! cudaprocess verify=true `extra` !
/// fakesink; returns cudaprocess's stats after EOS and its messages.
fn verify_pipeline(caps: &str, extra: &str, buffers: u32) -> (gst::Structure, Vec<gst::Message>) {
    let description = format!(
        "cudatestsrc num-buffers={buffers} ! {caps} ! cudaprocess name=process verify=true {extra} ! fakesink"
    );
    let pipeline = gst::parse::launch(&description)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    run_to_end(pipeline.upcast_ref(), Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{description}: {e}"));
    let process = pipeline.by_name("process").unwrap();
    let stats = process.property::<gst::Structure>("stats");
    let bus = pipeline.bus().unwrap();
    let messages = std::iter::from_fn(|| bus.pop_filtered(&[gst::MessageType::Element]))
        .filter(|m| {
            m.structure()
                .is_some_and(|s| s.name() == "cudaprocess-verify")
        })
        .collect();
    (stats, messages)
}

fn counters(stats: &gst::StructureRef) -> (u64, u64, u64, u64, i64) {
    (
        stats.get("frames").unwrap(),
        stats.get("verified").unwrap(),
        stats.get("corrupt").unwrap(),
        stats.get("missing").unwrap(),
        stats.get("first-bad-frame").unwrap(),
    )
}

#[test]
fn verify_passes_every_generated_frame_in_every_format() {
    init();
    if gpu_or_skip("verify_passes_every_generated_frame_in_every_format").is_none() {
        return;
    }
    for format in FORMATS {
        for (width, height) in [(320, 240), (37, 19)] {
            for extra in ["", "operation=invert"] {
                let caps = format!(
                    "video/x-raw(memory:CUDAMemory),format={},width={width},height={height}",
                    format.to_str()
                );
                let (stats, messages) = verify_pipeline(&caps, extra, 40);
                assert_eq!(
                    counters(&stats),
                    (40, 40, 0, 0, -1),
                    "{caps} {extra}: {stats}"
                );
                assert!(messages.is_empty(), "{caps} {extra}: {messages:?}");
            }
        }
    }
    // Rows shorter than the header carry frame & 0xFF: 300 frames wrap.
    let (stats, _) = verify_pipeline(
        "video/x-raw(memory:CUDAMemory),format=GRAY8,width=4,height=2",
        "",
        300,
    );
    assert_eq!(counters(&stats), (300, 300, 0, 0, -1), "{stats}");
}

#[test]
fn verify_flags_every_frame_of_another_pattern() {
    init();
    if gpu_or_skip("verify_flags_every_frame_of_another_pattern").is_none() {
        return;
    }
    let description = "cudatestsrc pattern=gradient num-buffers=10 ! video/x-raw(memory:CUDAMemory),width=64,height=16 ! cudaprocess name=process verify=true ! fakesink";
    let pipeline = gst::parse::launch(description)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    run_to_end(pipeline.upcast_ref(), Duration::from_secs(30)).unwrap();
    let stats = pipeline
        .by_name("process")
        .unwrap()
        .property::<gst::Structure>("stats");
    let (frames, verified, corrupt, _, _) = counters(&stats);
    assert_eq!((frames, verified, corrupt), (10, 10, 10), "{stats}");
}

/// Pushes counter frames with the given numbers through a fresh
/// `cudaprocess verify=true` (`corrupt`: frames to damage by one byte),
/// then EOS; returns the stats and the verify messages and errors posted.
fn push_counter_frames(
    device: &Arc<Device>,
    numbers: &[u32],
    corrupt: &[usize],
    configure: impl Fn(&gst::Element),
    readonly: bool,
) -> (gst::Structure, Vec<gst::Structure>, Vec<String>) {
    let info = video_info(VideoFormat::Rgb, 96, 20);
    let layout = Layout::default_for(&info);
    let mut h = Harness::new("cudaprocess");
    let element = h.element().unwrap();
    let bus = gst::Bus::new();
    element.set_bus(Some(&bus));
    element.set_property("verify", true);
    configure(&element);
    h.set_src_caps(cuda_caps(&info));
    let mut random = Random::fresh();
    for (i, &number) in numbers.iter().enumerate() {
        let mut frame = vec![0u8; layout.size];
        pattern::fill_frame(Pattern::Counter, number, &info, &layout.planes, &mut frame).unwrap();
        if corrupt.contains(&i) {
            // Past the header of a random row.
            let at = random.next() as usize % (layout.size - 8) + 8;
            frame[at] ^= 0x10;
        }
        let (buffer, _memory) = upload(device, &info, &layout, &frame, readonly);
        // A fatal error refuses the frames after it; that is checked by the
        // caller through the posted error.
        let _ = h.push(buffer);
        while h.try_pull().is_some() {}
    }
    assert!(h.push_event(gst::event::Eos::new()));
    let stats = element.property::<gst::Structure>("stats");
    let mut verdicts = Vec::new();
    let mut errors = Vec::new();
    while let Some(message) = bus.pop() {
        match message.view() {
            gst::MessageView::Element(e) => {
                if let Some(s) = e.structure().filter(|s| s.name() == "cudaprocess-verify") {
                    verdicts.push(s.to_owned());
                }
            }
            gst::MessageView::Error(e) => errors.push(e.error().to_string()),
            _ => (),
        }
    }
    (stats, verdicts, errors)
}

#[test]
fn verify_catches_a_planted_corrupt_frame_and_a_planted_gap() {
    init();
    let Some(device) = gpu_or_skip("verify_catches_a_planted_corrupt_frame_and_a_planted_gap")
    else {
        return;
    };
    // Frame 3 damaged, frame 5 missing; on both the passthrough and the
    // in-place path, and on read-only input processed out of place.
    type Configure = Box<dyn Fn(&gst::Element)>;
    let cases: [(&str, Configure, bool); 4] = [
        ("passthrough", Box::new(|_: &gst::Element| ()), false),
        (
            "in place",
            Box::new(|e: &gst::Element| e.set_property_from_str("operation", "invert")),
            false,
        ),
        (
            "read-only, checked and inverted in one pass",
            Box::new(|e: &gst::Element| e.set_property_from_str("operation", "invert")),
            true,
        ),
        (
            "read-only",
            Box::new(|e: &gst::Element| e.set_property_from_str("operation", "grayscale")),
            true,
        ),
    ];
    for (name, configure, readonly) in cases {
        let (stats, verdicts, errors) =
            push_counter_frames(&device, &[0, 1, 2, 3, 4, 6, 7], &[3], configure, readonly);
        assert_eq!(counters(&stats), (7, 7, 1, 1, 3), "{name}: {stats}");
        assert!(
            errors.is_empty(),
            "{name}: not fatal by default: {errors:?}"
        );
        assert_eq!(
            verdicts.len(),
            1,
            "{name}: one message for the first bad frame: {verdicts:?}"
        );
        let verdict = &verdicts[0];
        assert_eq!(verdict.get::<i64>("frame").unwrap(), 3, "{name}: {verdict}");
        assert_eq!(
            verdict.get::<&str>("kind").unwrap(),
            "corrupt",
            "{name}: {verdict}"
        );
        assert!(
            verdict.get::<u64>("corrupt").unwrap() >= 1,
            "{name}: {verdict}"
        );
        let description = verdict.get::<&str>("description").unwrap();
        assert!(
            description.contains("frame 3 is corrupt: 1 byte(s) differ"),
            "{name}: {description}"
        );
    }

    // A gap alone: the first bad frame is the first missing one.
    let (stats, verdicts, _) = push_counter_frames(&device, &[10, 11, 14, 15], &[], |_| (), false);
    assert_eq!(counters(&stats), (4, 4, 0, 2, 12), "{stats}");
    assert_eq!(verdicts[0].get::<&str>("kind").unwrap(), "missing");
    assert!(
        verdicts[0]
            .get::<&str>("description")
            .unwrap()
            .contains("2 frames are missing, from frame 12 to frame 13")
    );

    // A repeated and an older frame are stale (counted corrupt); the
    // sequence goes on from the real last frame.
    let (stats, verdicts, _) =
        push_counter_frames(&device, &[20, 21, 21, 19, 22, 23], &[], |_| (), false);
    assert_eq!(counters(&stats), (6, 6, 2, 0, 21), "{stats}");
    assert_eq!(verdicts[0].get::<&str>("kind").unwrap(), "stale");

    // The first frame only sets the baseline, wherever the stream starts.
    let (stats, verdicts, _) = push_counter_frames(&device, &[1000, 1001], &[], |_| (), false);
    assert_eq!(counters(&stats), (2, 2, 0, 0, -1), "{stats}");
    assert!(verdicts.is_empty());
}

#[test]
fn verify_fatal_posts_an_error() {
    init();
    let Some(device) = gpu_or_skip("verify_fatal_posts_an_error") else {
        return;
    };
    let (stats, verdicts, errors) = push_counter_frames(
        &device,
        &[0, 1, 3, 4, 5],
        &[],
        |e| e.set_property("verify-fatal", true),
        false,
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("Frame check failed: frame 2 is missing"),
        "{errors:?}"
    );
    assert_eq!(verdicts.len(), 1);
    // Frames after the error are refused; how many got through before the
    // lagging check saw frame 3 depends on the GPU.
    let (_, verified, _, missing, first_bad) = counters(&stats);
    assert_eq!((missing, first_bad), (1, 2), "{stats}");
    assert!((3..=5).contains(&verified), "{stats}");
}

#[test]
fn a_new_stream_starts_a_new_sequence() {
    init();
    let Some(device) = gpu_or_skip("a_new_stream_starts_a_new_sequence") else {
        return;
    };
    let info = video_info(VideoFormat::Gray8, 32, 8);
    let layout = Layout::default_for(&info);
    let mut h = Harness::new("cudaprocess");
    h.element().unwrap().set_property("verify", true);
    h.set_src_caps(cuda_caps(&info));
    let push = |h: &mut Harness, number: u32| {
        let mut frame = vec![0u8; layout.size];
        pattern::fill_frame(Pattern::Counter, number, &info, &layout.planes, &mut frame).unwrap();
        h.push(upload(&device, &info, &layout, &frame, false).0)
            .unwrap();
        h.pull().unwrap();
    };
    for n in 0..5 {
        push(&mut h, n);
    }
    assert!(h.push_event(gst::event::FlushStart::new()));
    assert!(h.push_event(gst::event::FlushStop::new(true)));
    assert!(
        h.push_event(gst::event::Segment::new(&gst::FormattedSegment::<
            gst::ClockTime,
        >::new()))
    );
    for n in 0..3 {
        push(&mut h, n);
    }
    assert!(h.push_event(gst::event::StreamStart::new("second")));
    assert!(h.push_event(gst::event::Caps::new(&cuda_caps(&info))));
    assert!(
        h.push_event(gst::event::Segment::new(&gst::FormattedSegment::<
            gst::ClockTime,
        >::new()))
    );
    for n in 100..103 {
        push(&mut h, n);
    }
    let stats = h.element().unwrap().property::<gst::Structure>("stats");
    assert_eq!(counters(&stats), (11, 11, 0, 0, -1), "{stats}");
}

/// verify=true with operation=invert runs one kernel that checks and
/// inverts: its output must be the inverted frame, in place and from
/// read-only input alike, in every format.
#[test]
fn checking_and_inverting_in_one_pass_matches_the_cpu_reference() {
    init();
    let Some(device) = gpu_or_skip("checking_and_inverting_in_one_pass_matches_the_cpu_reference")
    else {
        return;
    };
    for format in FORMATS {
        for (width, height) in [(320, 240), (37, 19)] {
            let info = video_info(format, width, height);
            let layout = Layout::default_for(&info);
            let planes = plane_layouts(&info, &layout);
            let mut h = Harness::new("cudaprocess");
            let element = h.element().unwrap();
            element.set_property("verify", true);
            element.set_property_from_str("operation", "invert");
            h.set_src_caps(cuda_caps(&info));
            for (number, readonly) in [(0u32, false), (1, true), (2, false), (3, true)] {
                let context =
                    format!("{format:?} {width}x{height} frame {number} read-only={readonly}");
                let mut input = vec![0u8; layout.size];
                pattern::fill_frame(Pattern::Counter, number, &info, &layout.planes, &mut input)
                    .unwrap();
                let (buffer, _memory) = upload(&device, &info, &layout, &input, readonly);
                h.push(buffer)
                    .unwrap_or_else(|e| panic!("{context}: {e:?}"));
                let output = h.pull().unwrap();
                let (data, _) = download(output.peek_memory(0));
                let out_planes = pattern::buffer_planes(&info, &output).unwrap();
                let out_layout = pattern::frame_layout(&info, &out_planes, data.len()).unwrap();
                for (p, (src, dst)) in planes.iter().zip(&out_layout).enumerate() {
                    for row in 0..src.rows {
                        let expected = Op::Invert.reference(format, p, &input[src.row_range(row)]);
                        assert_eq!(
                            &data[dst.row_range(row)],
                            expected.as_slice(),
                            "{context}: plane {p} row {row}"
                        );
                    }
                }
            }
            assert!(h.push_event(gst::event::Eos::new()));
            let stats = element.property::<gst::Structure>("stats");
            assert_eq!(counters(&stats), (4, 4, 0, 0, -1), "{format:?}: {stats}");
        }
    }
}
