// SPDX-License-Identifier: MPL-2.0

//! `cudatestsrc` and `cudaprocess`: properties, caps negotiation, errors
//! (the CPU pattern reference is tested in src/pattern); on a GPU host the pixel values of
//! every operation against a CPU reference over fresh random frames, the
//! generator's frames checked on the CPU, and `verify` catching planted
//! corrupt frames, gaps and stale frames.
//!
//! GPU tests print `SKIPPED: no CUDA device` without a GPU (and fail with
//! `CUDAIPC_REQUIRE_GPU=1`).

use crate::common;
mod reference;
mod verify;

use reference::Op;

use std::sync::Arc;
use std::time::Duration;

use gst::glib;
use gst::prelude::*;
use gst_check::Harness;
use gst_video::VideoFormat;
use gst_video::prelude::*;

use common::*;
use cudaipc_transport::cuda::Device;
use gstcudaipc::FORMATS;
use gstcudaipc::memory::{self, CudaAllocator};
use gstcudaipc::pattern::testing::{self, Random};
use gstcudaipc::pattern::{self, Pattern, PlaneLayout};

fn video_info(format: VideoFormat, width: u32, height: u32) -> gst_video::VideoInfo {
    gst_video::VideoInfo::builder(format, width, height)
        .build()
        .unwrap()
}

fn cuda_caps(info: &gst_video::VideoInfo) -> gst::Caps {
    memory::with_cuda_feature(&info.to_caps().unwrap())
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

    /// `pattern::testing::padded_planes`, carried in a GstVideoMeta.
    fn padded(info: &gst_video::VideoInfo) -> Self {
        let (planes, size) = testing::padded_planes(info);
        Layout {
            planes,
            size,
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
