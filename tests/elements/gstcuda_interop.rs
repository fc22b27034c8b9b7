// Interoperation with GStreamer's CUDA library and its nvcodec elements
// (cudaupload, cudadownload, cudaconvert): GstCudaMemory in and out, and one
// shared GstCudaContext. GPU tests print SKIPPED elsewhere (and fail with
// CUDAIPC_REQUIRE_GPU=1); the rest runs everywhere.

use crate::common;

use std::time::Duration;

use common::*;
use gst::prelude::*;
use gst_video::prelude::*;
use gstcudaipc::gstcuda::{self, CONTEXT_TYPE, CudaContext};

const LIMIT: Duration = Duration::from_secs(120);
const FRAMES: usize = 12;
const SOURCE: &str = "videotestsrc num-buffers=12 pattern=ball ! video/x-raw,format=RGB,width=3840,height=2160,framerate=30/1";

/// What a producer child's sink published.
struct Produced {
    zero_copy: u64,
    copied: u64,
    /// The sink's lines about lending, for a failed assertion to show.
    lending_log: String,
}

/// The producer's debug lines: the sink's per-buffer lending decisions, and
/// the context and pool choices of GStreamer's CUDA elements upstream.
const PRODUCER_DEBUG: &str = "cudaipcsink:6,cudaipc-gstcuda:5,cudabasefilter:5,cudaconvertscale:5,cudabufferpool:5,cudautils:5";

/// Runs a producer pipeline (its `cudaipcsink` named `sink`) in a child
/// process to the end, with the sink's debug lines (they say why a buffer
/// of the proposed pool is not lent).
fn run_producer(pipeline: &str) -> Produced {
    let end = PipelineChild::spawn_with(pipeline, &["sink"], &[("GST_DEBUG", PRODUCER_DEBUG)])
        .finish(LIMIT);
    end.assert_success("producer");
    let report = end.report.expect("the producer's final report");
    // Each distinct message once, without the debug line's time and source.
    let mut lending: Vec<&str> = Vec::new();
    for line in end.stderr.lines().filter(|l| {
        [
            "lend",
            "zero copy",
            "cannot share",
            "refused",
            "proposing",
            "buffers of",
            "not of",
            "context",
            "our pool",
            "stream",
        ]
        .iter()
        .any(|word| l.contains(word))
    }) {
        let message = line.rsplit_once("> ").map_or(line, |(_, m)| m);
        if !lending.contains(&message) && lending.len() < 40 {
            lending.push(message);
        }
    }
    let lending_log = lending.join("\n");
    Produced {
        zero_copy: report.num("sink.zero-copy"),
        copied: report.num("sink.copied"),
        lending_log,
    }
}

/// A GPU, and nvcodec's elements registered (they need a GPU to register).
fn gpu_with_nvcodec(test: &str) -> bool {
    if !gpu(test) {
        return false;
    }
    init();
    for factory in ["cudaupload", "cudadownload"] {
        assert!(
            gst::ElementFactory::find(factory).is_some(),
            "{factory} (gst-plugins-bad's nvcodec) is missing on a GPU host"
        );
    }
    assert!(
        gstcuda::available(),
        "libgstcuda-1.0 did not load on a GPU host"
    );
    true
}

/// As `gpu_with_nvcodec`, and nvcodec registered `cudaconvert`: GStreamer
/// registers its CUDA converters only where its NVRTC loader finds a
/// libnvrtc.so it can use (a `SKIPPED` line where not).
fn gpu_with_cudaconvert(test: &str) -> bool {
    if !gpu_with_nvcodec(test) {
        return false;
    }
    if gst::ElementFactory::find("cudaconvert").is_none() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: nvcodec registered no cudaconvert here (its NVRTC was not found) ({test})"
        );
        return false;
    }
    true
}

/// Every frame (packed formats) of `description` (ending in `appsink name=sink`), each with
/// its rows packed tightly, in order.
fn frames_of(description: &str) -> Vec<Vec<u8>> {
    frames_with(description, |_| {})
}

/// Like `frames_of`; `inspect` sees every buffer that leaves the element
/// named `probe`, if there is one.
fn frames_with(
    description: &str,
    inspect: impl Fn(&gst::BufferRef) + Send + Sync + 'static,
) -> Vec<Vec<u8>> {
    samples_probed(description, inspect)
        .iter()
        .map(|sample| {
            let info = gst_video::VideoInfo::from_caps(sample.caps().unwrap()).unwrap();
            let frame =
                gst_video::VideoFrameRef::from_buffer_ref_readable(sample.buffer().unwrap(), &info)
                    .unwrap();
            let mut tight = Vec::with_capacity(info.size());
            for plane in 0..frame.n_planes() {
                let stride = frame.plane_stride()[plane as usize] as usize;
                let data = frame.plane_data(plane).unwrap();
                let row = frame.comp_width(plane) as usize * frame.comp_pstride(plane) as usize;
                for y in 0..frame.comp_height(plane) as usize {
                    tight.extend_from_slice(&data[y * stride..y * stride + row]);
                }
            }
            tight
        })
        .collect()
}

/// The `CUcontext` a pad's element answers a `gst.cuda.context` query with.
fn context_handle_at(pad: &gst::Pad) -> Option<usize> {
    let mut query = gst::query::Context::new(CONTEXT_TYPE);
    if !pad.query(&mut query) {
        return None;
    }
    let context = query.context_owned()?;
    Some(CudaContext::from_context(&context)?.handle() as usize)
}

#[test]
fn nvcodec_upload_feeds_cudaipcsink_and_frames_arrive_intact() {
    if !gpu_with_nvcodec("nvcodec_upload_feeds_cudaipcsink_and_frames_arrive_intact") {
        return;
    }
    let expected = reference_checksums(SOURCE);
    assert_eq!(expected.len(), FRAMES);
    let channel = unique_channel("upload");
    // One consumer hands GstCudaMemory to cudadownload (the source wraps
    // its slots or copies into its pool: the debug log says which), one
    // keeps the shared slots.
    let into_nvcodec = launch_with(
        &[],
        &[("GST_DEBUG", "cudaipcsrc:5")],
        &format!(
            "rscudaipcsrc channel={channel} connect-timeout=60000 ! cudadownload ! video/x-raw ! checksumsink"
        ),
    );
    // Lent frames keep the pool's padded rows: this one downloads them
    // laid out tightly, to compare checksums.
    let own_memory = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=60000 ! video/x-raw ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 2, LIMIT);
    // The caps make cudaupload upload (the sink also takes system memory,
    // and cudaupload would pass it through). It writes into the
    // GstCudaBufferPool the sink proposes: once each of its buffers went
    // through (copied), they are the slots.
    let Produced {
        zero_copy,
        copied,
        lending_log,
    } = run_producer(&format!(
        "{SOURCE} ! cudaupload ! video/x-raw(memory:CUDAMemory) ! rscudaipcsink name=sink channel={channel} transport=cuda sync=false"
    ));
    eprintln!("cudaupload ! cudaipcsink: {zero_copy} frames without a copy, {copied} copied");
    assert_eq!(zero_copy + copied, FRAMES as u64);
    assert!(
        zero_copy > 0,
        "no frame of cudaupload's went without a copy; the sink said:\n{lending_log}"
    );
    let into_nvcodec = into_nvcodec.finish(LIMIT);
    into_nvcodec.assert_success("consumer into cudadownload");
    assert_eq!(into_nvcodec.checksums(), expected, "through cudadownload");
    assert!(
        into_nvcodec.stderr.contains("GstCudaMemory output:"),
        "rscudaipcsrc did not output GstCudaMemory to cudadownload:\n{}",
        into_nvcodec.stderr
    );
    let own_memory = own_memory.finish(LIMIT);
    own_memory.assert_success("consumer downloading the slots");
    assert_eq!(
        own_memory.checksums(),
        expected,
        "downloaded from the slots"
    );
}

/// Whether two frames differ by at most `tolerance` in every byte.
fn within(a: &[u8], b: &[u8], tolerance: u8) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.abs_diff(*y) <= tolerance)
}

#[test]
fn nvcodec_kernels_read_frames_from_cudaipcsrc() {
    const TEST: &str = "nvcodec_kernels_read_frames_from_cudaipcsrc";
    if !gpu_with_cudaconvert(TEST) {
        return;
    }
    let source = "videotestsrc num-buffers=12 pattern=smpte ! video/x-raw,format=RGB,width=1920,height=1080,framerate=30/1";
    let expected = frames_of(&format!(
        "{source} ! videoconvert ! video/x-raw,format=BGRx ! appsink name=sink sync=false"
    ));
    assert_eq!(expected.len(), FRAMES);
    let channel = unique_channel("convert");
    let consumer_pipeline = format!(
        "rscudaipcsrc name=probe channel={channel} connect-timeout=60000 ! cudaconvert ! video/x-raw(memory:CUDAMemory),format=BGRx ! cudadownload ! video/x-raw,format=BGRx ! appsink name=sink sync=false"
    );
    let consumer = std::thread::spawn(move || {
        frames_with(&consumer_pipeline, |buffer| {
            assert!(
                gstcuda::is_cuda_memory(buffer.peek_memory(0)),
                "rscudaipcsrc must hand GstCudaMemory to cudaconvert"
            )
        })
    });
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let producer = launch(&format!(
        "{source} ! rscudaipcsink channel={channel} transport=cuda sync=false"
    ));
    producer.finish(LIMIT).assert_success("producer");
    let frames = consumer.join().expect("consumer");
    assert_eq!(frames.len(), FRAMES);
    for (n, (got, want)) in frames.iter().zip(&expected).enumerate() {
        // cudaconvert computes in floating point: allow a rounding step.
        assert!(
            within(got, want, 1),
            "frame {n} differs from videoconvert's"
        );
    }
}

#[test]
fn cudatestsrc_writes_gst_cuda_memory_for_nvcodec() {
    if !gpu_with_nvcodec("cudatestsrc_writes_gst_cuda_memory_for_nvcodec") {
        return;
    }
    let caps = "format=RGB,width=1280,height=720,framerate=30/1";
    // The system-memory path is checked against the CPU reference pattern
    // in test_elements.
    let expected = frames_of(&format!(
        "cudatestsrc num-buffers=12 ! video/x-raw,{caps} ! appsink name=sink sync=false"
    ));
    let frames = frames_with(
        &format!(
            "cudatestsrc name=probe num-buffers=12 ! video/x-raw(memory:CUDAMemory),{caps} ! cudadownload ! video/x-raw,{caps} ! appsink name=sink sync=false"
        ),
        |buffer| {
            assert!(
                gstcuda::is_cuda_memory(buffer.peek_memory(0)),
                "cudatestsrc must write GstCudaMemory for cudadownload"
            )
        },
    );
    assert_eq!(frames.len(), FRAMES);
    assert!(frames == expected, "frames through cudadownload differ");
}

/// `output-memory=gstcuda` into nvcodec's elements: frames read back through
/// `cudadownload` (and converted by `cudaconvert`) equal the chain without
/// GstCudaMemory, and no GStreamer-CRITICAL is logged (`init` makes them
/// fatal). A copy of the mapped output memory (`gst_memory_copy`, which
/// fails while it is mapped for writing) once logged one per frame.
#[test]
fn gstcuda_output_of_cudatestsrc_is_read_unchanged_by_nvcodec_elements() {
    if !gpu_with_nvcodec("gstcuda_output_of_cudatestsrc_is_read_unchanged_by_nvcodec_elements") {
        return;
    }
    let caps = "format=RGBA,width=1920,height=1080,framerate=30/1";
    let expected = frames_of(&format!(
        "cudatestsrc num-buffers=12 ! video/x-raw,{caps} ! appsink name=sink sync=false"
    ));
    assert_eq!(expected.len(), FRAMES);
    for memory in ["gstcuda", "auto"] {
        let frames = frames_with(
            &format!(
                "cudatestsrc name=probe output-memory={memory} num-buffers=12 ! video/x-raw(memory:CUDAMemory),{caps} ! cudadownload ! video/x-raw,{caps} ! appsink name=sink sync=false"
            ),
            |buffer| assert!(gstcuda::is_cuda_memory(buffer.peek_memory(0))),
        );
        assert_eq!(frames.len(), FRAMES, "output-memory={memory}");
        assert!(frames == expected, "output-memory={memory}: frames differ");
    }
    if gst::ElementFactory::find("cudaconvert").is_none() {
        return;
    }
    let nv12 = "format=NV12,width=1920,height=1080,framerate=30/1";
    let converted = |head: &str| {
        frames_of(&format!(
            "{head} ! cudaconvert ! video/x-raw(memory:CUDAMemory),{nv12} ! cudadownload ! video/x-raw,{nv12} ! appsink name=sink sync=false"
        ))
    };
    let reference = converted(&format!(
        "cudatestsrc num-buffers=12 ! video/x-raw,{caps} ! cudaupload ! video/x-raw(memory:CUDAMemory),{caps}"
    ));
    let from_gstcuda = converted(&format!(
        "cudatestsrc output-memory=gstcuda num-buffers=12 ! video/x-raw(memory:CUDAMemory),{caps}"
    ));
    assert_eq!(reference.len(), FRAMES);
    assert!(from_gstcuda == reference, "cudaconvert's NV12 differs");
}

/// The cases of the report, as `gst-launch-1.0` children (which fail on a
/// CRITICAL): `cudatestsrc output-memory=gstcuda` into `cudadownload`, and
/// into GStreamer's own `cudaipcsink` (1.24+), whose `cudaipcsrc` in another
/// process then gets every frame as the chain without the pair gives it.
#[test]
fn gstcuda_output_of_cudatestsrc_crosses_gstreamers_own_cudaipc_pair() {
    if !gpu_with_nvcodec("gstcuda_output_of_cudatestsrc_crosses_gstreamers_own_cudaipc_pair") {
        return;
    }
    let caps = "format=RGBA,width=1920,height=1080,framerate=30/1";
    let downloaded = launch(&format!(
        "cudatestsrc output-memory=gstcuda num-buffers=30 ! video/x-raw(memory:CUDAMemory),{caps} ! cudadownload ! fakesink"
    ))
    .finish(LIMIT);
    downloaded.assert_success("cudatestsrc output-memory=gstcuda ! cudadownload");
    let upstream = ["cudaipcsink", "cudaipcsrc"].iter().all(|name| {
        gst::ElementFactory::find(name)
            .and_then(|f| f.plugin_name())
            .is_some_and(|p| p == "nvcodec")
    });
    if !upstream {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: GStreamer's own cudaipcsink/cudaipcsrc need 1.24+ with nvcodec"
        );
        return;
    }
    let expected = reference_checksums(&format!("cudatestsrc num-buffers=30 ! video/x-raw,{caps}"));
    let address = std::env::temp_dir().join(format!("{}.sock", unique_channel("upstream")));
    let consumer = launch(&format!(
        "cudaipcsrc address={} connection-timeout=30 num-buffers=12 ! cudadownload ! video/x-raw,{caps} ! checksumsink",
        address.display()
    ));
    let producer = launch(&format!(
        "cudatestsrc is-live=true output-memory=gstcuda num-buffers=30 ! video/x-raw(memory:CUDAMemory),{caps} ! cudaipcsink address={}",
        address.display()
    ));
    let received = consumer.finish(LIMIT);
    received.assert_success("GStreamer's cudaipcsrc");
    // Upstream's sink publishes from the moment its consumer connects:
    // twelve frames in a row of the stream, unchanged.
    let got = received.checksums();
    assert_eq!(got.len(), 12);
    assert!(
        expected.windows(12).any(|run| run == got.as_slice()),
        "frames through upstream's pair differ from cudatestsrc's"
    );
    producer
        .finish(LIMIT)
        .assert_success("cudatestsrc ! GStreamer's cudaipcsink");
    let _ = std::fs::remove_file(&address);
}

#[test]
fn the_cuda_context_is_shared_with_nvcodec_elements() {
    if !gpu_with_nvcodec("the_cuda_context_is_shared_with_nvcodec_elements") {
        return;
    }
    let primary = cudaipc_transport::cuda::Device::get(0)
        .unwrap()
        .raw_context() as usize;
    // A sink goes to READY before its upstream: cudaupload takes the
    // context cudaipcsink shares, our primary context.
    let channel = unique_channel("context");
    let upload = gst::parse::launch(&format!(
        "videotestsrc ! video/x-raw,format=RGB,width=64,height=64 ! cudaupload name=upload ! rscudaipcsink channel={channel} transport=cuda"
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    upload.set_state(gst::State::Paused).unwrap();
    let _ = upload.state(gst::ClockTime::from_seconds(30));
    let element = upload.by_name("upload").unwrap();
    assert_eq!(
        context_handle_at(&element.static_pad("src").unwrap()),
        Some(primary),
        "cudaupload did not take cudaipcsink's context"
    );
    upload.set_state(gst::State::Null).unwrap();

    // A source goes to READY after downstream: it adopts the context that
    // cudadownload shares, and answers queries with it.
    let download = gst::parse::launch(
        "cudatestsrc name=src ! video/x-raw(memory:CUDAMemory),format=RGB,width=64,height=64 ! cudadownload name=download ! fakesink",
    )
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    download.set_state(gst::State::Paused).unwrap();
    let _ = download.state(gst::ClockTime::from_seconds(30));
    let ours = context_handle_at(&download.by_name("src").unwrap().static_pad("src").unwrap());
    let theirs = context_handle_at(
        &download
            .by_name("download")
            .unwrap()
            .static_pad("sink")
            .unwrap(),
    );
    download.set_state(gst::State::Null).unwrap();
    assert!(ours.is_some(), "cudatestsrc shares no CUDA context");
    assert_eq!(
        ours, theirs,
        "cudatestsrc and cudadownload use different contexts"
    );
}

/// Where GStreamer's CUDA library or a driver is missing, asking for
/// GstCudaMemory fails with a message that says what is missing.
#[test]
fn gstcuda_output_without_the_library_or_a_driver_is_a_clear_error() {
    init();
    if gstcuda::available() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: GStreamer's CUDA library and a driver are both here (gstcuda_output_without_the_library_or_a_driver_is_a_clear_error)"
        );
        return;
    }
    let pipeline = gst::parse::launch(&format!(
        "rscudaipcsrc channel={} output-memory=gstcuda connect-timeout=100 ! fakesink",
        unique_channel("nogstcuda")
    ))
    .unwrap();
    let _ = pipeline.set_state(gst::State::Paused);
    let bus = pipeline.bus().unwrap();
    let message = bus
        .timed_pop_filtered(gst::ClockTime::from_seconds(10), &[gst::MessageType::Error])
        .expect("an error message");
    pipeline.set_state(gst::State::Null).unwrap();
    let gst::MessageView::Error(error) = message.view() else {
        unreachable!()
    };
    let text = error.error().to_string();
    assert!(
        text.contains("output-memory=gstcuda needs GStreamer's CUDA library"),
        "unclear error: {text}"
    );
}

/// A clip for NVDEC: 30 frames of 320x240 H.264 (x264, byte-stream), from
/// the source tree.
fn clip() -> String {
    repo_file("tests/data/ball-320x240.h264")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn frames_nvdec_decodes_reach_another_process_unchanged() {
    const TEST: &str = "frames_nvdec_decodes_reach_another_process_unchanged";
    if !gpu_with_nvcodec(TEST) {
        return;
    }
    if gst::ElementFactory::find("nvh264dec").is_none()
        || gst::ElementFactory::find("h264parse").is_none()
    {
        // h264parse is in gst-plugins-bad's videoparsersbad, which the
        // GPU host's runtime gets from scripts/gpu-host/stage.sh.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: needs nvh264dec (an NVDEC GPU) and h264parse ({TEST})"
        );
        return;
    }
    let decode = format!(
        "filesrc location={} ! h264parse ! nvh264dec ! video/x-raw(memory:CUDAMemory)",
        clip()
    );
    // The same decoder in one process is the reference.
    let expected = reference_checksums(&format!("{decode} ! cudadownload ! video/x-raw"));
    assert_eq!(expected.len(), 30);
    let channel = unique_channel("nvdec");
    // Lent frames keep the decoder's padded rows: checksums compare frames
    // laid out tightly (cudadownload's, and the source's own download).
    let consumers: Vec<Launch> = [
        "cudadownload ! video/x-raw ! checksumsink",
        "video/x-raw ! checksumsink",
    ]
    .iter()
    .map(|tail| {
        launch(&format!(
            "rscudaipcsrc channel={channel} connect-timeout=60000 ! {tail}"
        ))
    })
    .collect();
    wait_for_waiting_consumers(&channel, consumers.len(), LIMIT);
    // GstCudaMemory from the decoder: copied until each buffer of the pool
    // the sink proposed went through once, then lent as slots.
    let Produced {
        zero_copy,
        copied,
        lending_log,
    } = run_producer(&format!(
        "{decode} ! rscudaipcsink name=sink channel={channel} transport=cuda sync=false"
    ));
    eprintln!("nvh264dec ! cudaipcsink: {zero_copy} frames without a copy, {copied} copied");
    assert_eq!(zero_copy + copied, 30);
    assert!(
        zero_copy > 0,
        "no decoded frame went without a copy; the sink said:\n{lending_log}"
    );
    for consumer in consumers {
        let done = consumer.finish(LIMIT);
        done.assert_success("consumer");
        assert_eq!(done.checksums(), expected, "{}", done.stdout);
    }
}

/// Lent slots under load: cudatestsrc writes GstCudaMemory into the
/// GstCudaBufferPool the sink proposes (as nvcodec's elements do), as fast
/// as it can, and two consumers verify every frame on the GPU: no buffer
/// goes back to be rewritten while a consumer still reads its frame.
#[test]
fn lent_slots_deliver_every_frame_intact_to_verifying_consumers() {
    const TEST: &str = "lent_slots_deliver_every_frame_intact_to_verifying_consumers";
    const FRAMES: u64 = 3000;
    if !gpu_with_nvcodec(TEST) {
        return;
    }
    let channel = unique_channel("lent");
    let consumers = verifying_consumers(&channel, 2, "");
    let Produced {
        zero_copy,
        copied,
        lending_log,
    } = run_counter_producer(FRAMES, &channel, "", "");
    eprintln!("lent slots: {zero_copy} frames without a copy, {copied} copied");
    assert_eq!(zero_copy + copied, FRAMES);
    // Copied only until each buffer of the pool went through once.
    assert!(
        copied <= 16 && zero_copy > 0,
        "{zero_copy} lent / {copied} copied; the sink said:\n{lending_log}"
    );
    for consumer in consumers {
        let report = intact_report(consumer, "verifying consumer");
        assert_eq!(report.num("check.verified"), FRAMES, "{report:?}");
        assert_eq!(report.num("check.missing"), 0, "{report:?}");
    }
}

/// A consumer of the newest frame only (`frames=latest`) next to lent slots:
/// it gets frames, all intact, while the producer runs at its own pace to
/// the end (it never waits for such a consumer; paced at 1 ms a frame, so
/// that the consumer's start, its kernels' compilation, does not outlast
/// it). Before the fix, each frame went back to upstream as soon as it was
/// published, and the consumer got none.
#[test]
fn lent_slots_reach_a_consumer_of_the_latest_frame() {
    const TEST: &str = "lent_slots_reach_a_consumer_of_the_latest_frame";
    const FRAMES: u64 = 3000;
    if !gpu_with_nvcodec(TEST) {
        return;
    }
    let channel = unique_channel("lentlatest");
    let consumer = verifying_consumers(&channel, 1, "frames=latest").remove(0);
    let Produced {
        zero_copy,
        copied,
        lending_log,
    } = run_counter_producer(
        FRAMES,
        &channel,
        "! identity sleep-time=1000 ",
        "wait-for-connection=1",
    );
    assert_eq!(zero_copy + copied, FRAMES);
    assert!(
        zero_copy > 0,
        "{zero_copy} lent / {copied} copied; the sink said:\n{lending_log}"
    );
    let report = intact_report(consumer, "consumer of the latest frame");
    eprintln!(
        "lent slots, consumer of the latest frame: {} of {FRAMES} frames verified",
        report.num("check.verified")
    );
    assert!(report.num("check.verified") > 0, "{report:?}");
}

/// Where lending cannot keep its promises the sink copies every frame of
/// the pool it proposed, intact: with `when-full=drop` (a lent buffer comes
/// back only once consumers release it, so the sink could have to wait), on
/// a descriptor channel (lent memory has only legacy IPC handles) and with
/// one slot (upstream must keep a buffer to write into while the other is
/// published: one buffer would have it wait for every consumer).
#[test]
fn the_sink_copies_instead_of_lending_in_drop_mode_on_descriptor_channels_and_with_one_slot() {
    const TEST: &str =
        "the_sink_copies_instead_of_lending_in_drop_mode_on_descriptor_channels_and_with_one_slot";
    const FRAMES: u64 = 300;
    if !gpu_with_nvcodec(TEST) {
        return;
    }
    // Paced in drop mode (2 ms a frame), so that the consumer, which may
    // start its kernels later than the producer runs, still gets frames.
    for (pace, sink_props) in [
        ("! identity sleep-time=2000 ", "when-full=drop"),
        ("", "ipc-mode=fd"),
        ("", "slots=1"),
    ] {
        let channel = unique_channel("nolend");
        let consumer = verifying_consumers(&channel, 1, "").remove(0);
        let Produced {
            zero_copy,
            copied,
            lending_log,
        } = run_counter_producer(
            FRAMES,
            &channel,
            pace,
            &format!("wait-for-connection=1 {sink_props}"),
        );
        assert_eq!(
            (zero_copy, copied),
            (0, FRAMES),
            "{sink_props}; the sink said:\n{lending_log}"
        );
        let report = intact_report(consumer, &format!("verifying consumer, {sink_props}"));
        assert!(report.num("check.verified") > 0, "{sink_props}: {report:?}");
    }
}

/// `count` consumers in other processes that verify every counter frame
/// they get (`cudaprocess name=check verify=true`), with `src_props` on their
/// source; all wait on `channel` when this returns.
fn verifying_consumers(channel: &str, count: usize, src_props: &str) -> Vec<PipelineChild> {
    let consumers = (0..count)
        .map(|_| {
            PipelineChild::spawn(
                &format!(
                    "rscudaipcsrc channel={channel} connect-timeout=60000 {src_props} ! cudaprocess name=check verify=true ! fakesink sync=false"
                ),
                &["check"],
            )
        })
        .collect();
    wait_for_waiting_consumers(channel, count, LIMIT);
    consumers
}

/// Ends a consumer of `verifying_consumers`: it succeeded and found no
/// corrupt frame (`what` names it in failures); its final report.
fn intact_report(consumer: PipelineChild, what: &str) -> Report {
    let end = consumer.finish(LIMIT);
    end.assert_success(what);
    let report = end.report.expect("the consumer's final report");
    assert_eq!(report.num("check.corrupt"), 0, "{what}: {report:?}");
    report
}

/// Runs the producer of `frames` counter frames (1080p RGB `GstCudaMemory`
/// from `cudatestsrc`, through `between`, into `rscudaipcsink name=sink` with
/// `sink_props`) to its end.
fn run_counter_producer(frames: u64, channel: &str, between: &str, sink_props: &str) -> Produced {
    run_producer(&format!(
        "cudatestsrc output-memory=gstcuda num-buffers={frames} pattern=counter ! video/x-raw(memory:CUDAMemory),format=RGB,width=1920,height=1080,framerate=0/1 {between}! rscudaipcsink name=sink channel={channel} sync=false {sink_props}"
    ))
}

/// What a consumer that checks every frame in its `appsink name=sink` saw,
/// and the final stats of its `rscudaipcsrc name=src`.
struct Checked {
    frames: u64,
    /// The first few bad frames, described.
    bad: Vec<String>,
    bad_count: u64,
    /// Buffers the source pushed with GPU work still pending on their
    /// memory's stream (`NEED_SYNC`).
    pending_on_push: u64,
    src_stats: gst::Structure,
}

/// A checking consumer here (`consumer`, which waits for `channel`) and a
/// producer in another process (`producer`), started once the consumer
/// waits: what the consumer saw.
fn check_against_producer(
    channel: &str,
    consumer: String,
    check: fn(u64, &gst_video::VideoInfo, &gst::BufferRef) -> Result<(), String>,
    producer: &str,
) -> Checked {
    let consumer = std::thread::spawn(move || run_checking_consumer(&consumer, check));
    wait_for_waiting_consumers(channel, 1, LIMIT);
    run_producer(producer);
    consumer.join().expect("consumer")
}

/// Runs `description` in this process to its end; `check` sees each frame
/// with its number in arrival order and says what is wrong with it.
fn run_checking_consumer(
    description: &str,
    check: impl Fn(u64, &gst_video::VideoInfo, &gst::BufferRef) -> Result<(), String>
    + Send
    + Sync
    + 'static,
) -> Checked {
    use std::sync::{Arc, Mutex};
    let pipeline = gst::parse::launch(description)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    let sink = pipeline
        .by_name("sink")
        .unwrap()
        .downcast::<gst_app::AppSink>()
        .unwrap();
    // (frames, first bad ones, bad count)
    let seen = Arc::new(Mutex::new((0u64, Vec::new(), 0u64)));
    let record = seen.clone();
    sink.set_callbacks(
        gst_app::AppSinkCallbacks::builder()
            .new_sample(move |sink| {
                let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                let info = gst_video::VideoInfo::from_caps(sample.caps().unwrap()).unwrap();
                let mut seen = record.lock().unwrap();
                let n = seen.0;
                seen.0 += 1;
                if let Err(what) = check(n, &info, sample.buffer().unwrap()) {
                    seen.2 += 1;
                    if seen.1.len() < 5 {
                        seen.1.push(format!("frame {n}: {what}"));
                    }
                }
                Ok(gst::FlowSuccess::Ok)
            })
            .build(),
    );
    let pending = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count_pending = pending.clone();
    let src_pad = pipeline.by_name("src").unwrap().static_pad("src").unwrap();
    src_pad.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
        if let Some(buffer) = info.buffer()
            && buffer.iter_memories().any(gstcuda::needs_sync)
        {
            count_pending.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        gst::PadProbeReturn::Ok
    });
    pipeline.set_state(gst::State::Playing).unwrap();
    let bus = pipeline.bus().unwrap();
    let message = bus
        .timed_pop_filtered(
            gst::ClockTime::from_seconds(LIMIT.as_secs() * 2),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        )
        .expect("the consumer ends");
    let src_stats = pipeline
        .by_name("src")
        .unwrap()
        .property::<gst::Structure>("stats");
    pipeline.set_state(gst::State::Null).unwrap();
    if let gst::MessageView::Error(e) = message.view() {
        panic!("{description}: {} ({:?})", e.error(), e.debug());
    }
    let (frames, bad, bad_count) = std::mem::take(&mut *seen.lock().unwrap());
    Checked {
        frames,
        bad,
        bad_count,
        pending_on_push: pending.load(std::sync::atomic::Ordering::Relaxed),
        src_stats,
    }
}

/// Checks a frame of cudatestsrc's counter pattern in system memory: every
/// byte, and that it is frame `n` of the sequence.
fn exact_counter_frame(
    n: u64,
    info: &gst_video::VideoInfo,
    buffer: &gst::BufferRef,
) -> Result<(), String> {
    use gstcudaipc::pattern;
    let planes = pattern::buffer_planes(info, buffer)?;
    let map = buffer.map_readable().map_err(|_| "cannot map")?;
    let frame = pattern::verify_frame(info, &planes, &map)?;
    if u64::from(frame) != n {
        return Err(format!("carries frame {frame}"));
    }
    Ok(())
}

/// Checks frame `n` of cudatestsrc's RGBA counter pattern after a
/// conversion to BGRA by cudaconvert (which computes in floating point: one
/// rounding step allowed): each row's header and bytes across it. A frame
/// overwritten while it was read carries another frame's numbers in some
/// rows, far outside that tolerance.
fn counter_frame_as_bgra(
    n: u64,
    info: &gst_video::VideoInfo,
    buffer: &gst::BufferRef,
) -> Result<(), String> {
    use gstcudaipc::pattern;
    const RGBA_FROM_BGRA: [usize; 4] = [2, 1, 0, 3];
    let planes = pattern::buffer_planes(info, buffer)?;
    let (offset, stride) = planes[0];
    let map = buffer.map_readable().map_err(|_| "cannot map")?;
    let row_bytes = info.width() as usize * 4;
    let frame = n as u32;
    for row in 0..info.height() as usize {
        let data = &map[offset + row * stride..][..row_bytes];
        let header = pattern::row_header(frame, 0, row);
        // The header, and every 997th byte after it (all four channels).
        let samples =
            (0..pattern::HEADER_BYTES).chain((pattern::HEADER_BYTES..row_bytes).step_by(997));
        for x in samples {
            let expected = if x < pattern::HEADER_BYTES {
                header[x]
            } else {
                pattern::counter_byte(frame, 0, row, x)
            };
            let found = data[x / 4 * 4 + RGBA_FROM_BGRA[x % 4]];
            if found.abs_diff(expected) > 1 {
                return Err(format!(
                    "row {row} byte {x}: expected {expected:#04x}, found {found:#04x}"
                ));
            }
        }
    }
    Ok(())
}

/// Asserts how the source handed its frames to GStreamer's CUDA elements:
/// on GStreamer 1.24+ every slot wrapped as GstCudaMemory, on 1.22 every
/// frame copied into it.
fn assert_gstcuda_delivery(stats: &gst::Structure, frames: u64) {
    let wrapped = stats.get::<u64>("gstcuda-wrapped").unwrap();
    let copied = stats.get::<u64>("gstcuda-copied").unwrap();
    eprintln!(
        "GStreamer {:?}, libgstcuda {:?}: {wrapped} slots wrapped as GstCudaMemory, {copied} frames copied into it",
        gst::version(),
        gstcuda::api_level()
    );
    if gstcuda::api_level() >= gstcuda::ApiLevel::V1_24 {
        assert_eq!((wrapped, copied), (frames, 0), "{stats}");
    } else {
        assert_eq!((wrapped, copied), (0, frames), "{stats}");
    }
}

/// GstCudaMemory out of the source, read by cudadownload: on GStreamer
/// 1.24+ the slots themselves (no copy), on 1.22 copies; every frame of a
/// fast producer arrives intact and in order, in a packed and a planar
/// format.
#[test]
fn gstcuda_output_delivers_every_frame_intact_wrapping_slots_on_1_24() {
    const TEST: &str = "gstcuda_output_delivers_every_frame_intact_wrapping_slots_on_1_24";
    const FRAMES: u64 = 1500;
    if !gpu_with_nvcodec(TEST) {
        return;
    }
    for (format, width, height) in [("RGBA", 1920, 1080), ("NV12", 3840, 2160)] {
        let caps = format!("format={format},width={width},height={height}");
        let channel = unique_channel("gstcudaout");
        let consumer_pipeline = format!(
            "rscudaipcsrc name=src channel={channel} connect-timeout=60000 output-memory=gstcuda ! cudadownload ! video/x-raw,{caps} ! appsink name=sink sync=false"
        );
        let checked = check_against_producer(
            &channel,
            consumer_pipeline,
            exact_counter_frame,
            &format!(
                "cudatestsrc num-buffers={FRAMES} pattern=counter ! video/x-raw(memory:CUDAMemory),{caps},framerate=0/1 ! rscudaipcsink name=sink channel={channel} sync=false"
            ),
        );
        assert_eq!(checked.frames, FRAMES, "{format}");
        assert!(
            checked.bad.is_empty(),
            "{format}: {} bad frames: {:#?}",
            checked.bad_count,
            checked.bad
        );
        assert_gstcuda_delivery(&checked.src_stats, FRAMES);
    }
}

/// The release race: the producer has two slots and writes as fast as it
/// can; the source wraps them for cudaconvert, which only queues its reads
/// before dropping its input. A slot given back before those reads ran
/// would be rewritten under them: every frame must still arrive intact.
#[test]
fn wrapped_slots_go_back_only_after_cudaconvert_read_them() {
    const TEST: &str = "wrapped_slots_go_back_only_after_cudaconvert_read_them";
    const FRAMES: u64 = 2000;
    if !gpu_with_cudaconvert(TEST) {
        return;
    }
    let size = "width=3840,height=2160";
    let channel = unique_channel("race");
    let consumer_pipeline = format!(
        "rscudaipcsrc name=src channel={channel} connect-timeout=60000 output-memory=gstcuda ! cudaconvert ! video/x-raw(memory:CUDAMemory),format=BGRA,{size} ! cudadownload ! video/x-raw,format=BGRA,{size} ! appsink name=sink sync=false"
    );
    let checked = check_against_producer(
        &channel,
        consumer_pipeline,
        counter_frame_as_bgra,
        &format!(
            "cudatestsrc num-buffers={FRAMES} pattern=counter ! video/x-raw(memory:CUDAMemory),format=RGBA,{size},framerate=0/1 ! rscudaipcsink name=sink channel={channel} slots=2 sync=false"
        ),
    );
    assert_eq!(checked.frames, FRAMES);
    assert!(
        checked.bad.is_empty(),
        "{} frames were rewritten while cudaconvert read them: {:#?}",
        checked.bad_count,
        checked.bad
    );
    assert_gstcuda_delivery(&checked.src_stats, FRAMES);
    // Pushed written: cudaconvert reads them without synchronising the
    // host on each (which kept the GPU idle between frames).
    assert_eq!(checked.pending_on_push, 0);
}
