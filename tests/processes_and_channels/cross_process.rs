// Two real processes: a producer pipeline and `gst-launch-1.0` consumers, on
// the host transport; then 4K frames on the cuda transport (where a GPU is:
// they print SKIPPED elsewhere, and fail with CUDAIPC_REQUIRE_GPU=1).

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use gst::prelude::*;

const LIMIT: Duration = HOST.limit;

struct Frame {
    caps: gst::Caps,
    data: Vec<u8>,
    pts: gst::ClockTime,
}

fn frames(format: &str, width: u32, height: u32, count: u64, first_pts_ms: u64) -> Vec<Frame> {
    init();
    let caps: gst::Caps =
        format!("video/x-raw,format={format},width={width},height={height},framerate=30/1")
            .parse()
            .unwrap();
    let size = gst_video::VideoInfo::from_caps(&caps).unwrap().size();
    (0..count)
        .map(|i| Frame {
            caps: caps.clone(),
            data: random_bytes(first_pts_ms + i, size),
            pts: gst::ClockTime::from_mseconds(first_pts_ms + i * 33),
        })
        .collect()
}

fn sha1_hex(data: &[u8]) -> String {
    sha1_smol::Sha1::from(data).digest().to_string()
}

/// What checksumsink prints for a frame: PTS and SHA-1.
fn expected_lines(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .map(|f| format!("{} {}", f.pts, sha1_hex(&f.data)))
        .collect()
}

/// Runs `appsrc ! cudaipcsink` in this process and pushes `frames`, then EOS.
fn produce(channel: &str, sink_props: &str, frames: &[Frame]) {
    init();
    let pipeline = gst::parse::launch(&format!(
        "appsrc name=src format=time ! rscudaipcsink name=sink channel={channel} sync=false {sink_props}"
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    let src = pipeline
        .by_name("src")
        .unwrap()
        .downcast::<gst_app::AppSrc>()
        .unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    for f in frames {
        src.set_caps(Some(&f.caps));
        let mut buffer = gst::Buffer::from_mut_slice(f.data.clone());
        buffer.get_mut().unwrap().set_pts(f.pts);
        src.push_buffer(buffer).unwrap();
    }
    src.end_of_stream().unwrap();
    let bus = pipeline.bus().unwrap();
    let msg = bus
        .timed_pop_filtered(
            gst::ClockTime::from_seconds(60),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        )
        .expect("producer neither ended nor failed");
    if let gst::MessageView::Error(e) = msg.view() {
        panic!("producer failed: {} ({:?})", e.error(), e.debug());
    }
    pipeline.set_state(gst::State::Null).unwrap();
}

#[test]
fn content_timestamps_caps_and_eos_travel() {
    let channel = unique_channel("travel");
    // The consumer starts first and waits for the producer.
    let consumer = launch(&format!(
        "-v rscudaipcsrc channel={channel} timestamp-mode=producer connect-timeout=120000 ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let mut all = frames("RGB", 320, 240, 12, 0);
    // A caps change mid-stream: size and format.
    all.extend(frames("GRAY8", 160, 120, 12, 1000));
    produce(&channel, "transport=host", &all);
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer");
    assert_eq!(done.checksum_lines(), expected_lines(&all));
    // The consumer's output caps followed the producer's.
    assert!(
        done.stdout
            .contains("format=(string)RGB, width=(int)320, height=(int)240"),
        "{}",
        done.stdout
    );
    assert!(
        done.stdout
            .contains("format=(string)GRAY8, width=(int)160, height=(int)120"),
        "{}",
        done.stdout
    );
}

/// Decoders and parsers put a multiview flag set into their caps; a
/// consumer process that never saw that type must still parse them.
#[test]
fn caps_with_a_multiview_flag_set_reach_a_fresh_process() {
    let channel = unique_channel("multiview");
    let consumer = launch(&format!(
        "rscudaipcsrc channel={channel} timestamp-mode=producer connect-timeout=120000 ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let mut all = frames("NV12", 320, 240, 4, 0);
    // This process has the type: the plugin registered it.
    let caps: gst::Caps = "video/x-raw,format=NV12,width=320,height=240,framerate=30/1,multiview-mode=mono,multiview-flags=(GstVideoMultiviewFlagsSet)0:ffffffff"
        .parse()
        .unwrap();
    let field = caps.structure(0).unwrap().value("multiview-flags").unwrap();
    assert_eq!(field.type_().name(), "GstVideoMultiviewFlagsSet");
    for frame in &mut all {
        frame.caps = caps.clone();
    }
    produce(&channel, "transport=host", &all);
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer");
    assert_eq!(done.checksum_lines(), expected_lines(&all));
}

#[test]
fn every_format_arrives_byte_identical() {
    for format in [
        "RGB", "RGBA", "BGRA", "RGBx", "BGRx", "GRAY8", "NV12", "I420",
    ] {
        let channel = unique_channel("format");
        let consumer = launch(&format!(
            "rscudaipcsrc channel={channel} timestamp-mode=producer connect-timeout=120000 ! checksumsink"
        ));
        wait_for_waiting_consumers(&channel, 1, LIMIT);
        let all = frames(format, 176, 144, 5, 0);
        produce(&channel, "transport=host slots=2", &all);
        let done = consumer.finish(LIMIT);
        done.assert_success(format);
        assert_eq!(done.checksum_lines(), expected_lines(&all), "{format}");
    }
}

#[test]
fn a_consumer_started_first_gets_every_frame_of_gst_launch_producer() {
    let channel = unique_channel("first");
    let source = "videotestsrc num-buffers=40 pattern=ball ! video/x-raw,format=RGB,width=320,height=240,framerate=30/1";
    let expected = reference_checksums(source);
    assert_eq!(expected.len(), 40);
    let consumer = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=120000 ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let producer = launch(&format!(
        "{source} ! rscudaipcsink channel={channel} transport=host sync=false"
    ));
    producer.finish(LIMIT).assert_success("producer");
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer");
    assert_eq!(done.checksums(), expected);
}

/// "Execution ended after 0:00:01.023456789" of an unquiet gst-launch-1.0.
fn execution_time(stdout: &str) -> Duration {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Execution ended after "))
        .unwrap_or_else(|| panic!("an execution time:\n{stdout}"));
    let seconds: f64 = line.trim().split(':').fold(0.0, |total, part| {
        total * 60.0 + part.parse::<f64>().unwrap()
    });
    Duration::from_secs_f64(seconds)
}

#[test]
fn a_slow_consumer_does_not_keep_a_live_producer_from_exiting() {
    let channel = unique_channel("slow-exit");
    // One frame a second: the 7 frames behind it in the 8-slot ring at the
    // end would take 7 s to drain, where the producer waited 5 s before.
    let slow = launch_unquiet(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=120000 ! identity sleep-time=1000000 ! fakesink"
    ));
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let started = std::time::Instant::now();
    let producer = launch_unquiet(&format!(
        "videotestsrc is-live=true num-buffers=30 ! video/x-raw,format=RGB,width=64,height=48,framerate=30/1 ! rscudaipcsink transport=host channel={channel}"
    ));
    let end = producer.finish(LIMIT);
    let wall = started.elapsed();
    end.assert_success("producer");
    let after_playing = wall.saturating_sub(execution_time(&end.stdout));
    // It waits for the frame the consumer reads and the newest one it skips
    // to (up to 1 s each), and no more: a bound on a wait, wide for a busy
    // machine, not a speed claim.
    assert!(
        after_playing < Duration::from_millis(3500),
        "the producer's process ended {after_playing:?} after its pipeline"
    );
    let done = slow.finish(LIMIT);
    done.assert_success("the slow consumer ends at the end of stream");
    assert!(
        done.stdout.contains("frames=every"),
        "it was told it missed frames:\n{}",
        done.stdout
    );
}

#[test]
fn two_consumers_both_receive_everything() {
    let channel = unique_channel("fanout");
    let source = "videotestsrc num-buffers=60 pattern=smpte ! video/x-raw,format=I420,width=320,height=240,framerate=30/1";
    let expected = reference_checksums(source);
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            launch(&format!(
                "rscudaipcsrc channel={channel} connect-timeout=120000 ! checksumsink"
            ))
        })
        .collect();
    wait_for_waiting_consumers(&channel, 2, LIMIT);
    // Few slots and no pacing: the producer must wait for both consumers.
    let producer = launch(&format!(
        "{source} ! rscudaipcsink channel={channel} transport=host slots=2 sync=false"
    ));
    producer.finish(LIMIT).assert_success("producer");
    for consumer in consumers {
        let done = consumer.finish(LIMIT);
        done.assert_success("consumer");
        assert_eq!(done.checksums(), expected);
    }
}

#[test]
fn a_second_producer_on_a_live_channel_fails_clearly() {
    let channel = unique_channel("busy");
    let first = launch(&format!(
        "videotestsrc is-live=true ! video/x-raw,width=64,height=48,framerate=10/1 ! rscudaipcsink channel={channel} transport=host"
    ));
    assert!(wait_for_channel(&channel, Duration::from_secs(10)));
    let second = launch(&format!(
        "videotestsrc num-buffers=5 ! video/x-raw,width=64,height=48 ! rscudaipcsink channel={channel} transport=host"
    ))
    .finish(LIMIT);
    assert!(!second.success, "a second producer must fail");
    assert!(
        second.stderr.contains("in use by a live producer")
            || second.stdout.contains("in use by a live producer"),
        "{}\n{}",
        second.stdout,
        second.stderr
    );
    first.signal(libc::SIGINT);
    let _ = first.finish(Duration::from_secs(10));
}

// Live, because gst-launch-1.0 1.22 sometimes hangs when a source fails
// while the pipeline prerolls (filesrc too); a live source does not preroll.
#[test]
fn a_missing_producer_times_out_with_a_clear_error() {
    let channel = unique_channel("nobody");
    let done = launch(&format!(
        "rscudaipcsrc channel={channel} is-live=true connect-timeout=300 ! fakesink"
    ))
    .finish(LIMIT);
    assert!(!done.success);
    let text = format!("{}{}", done.stdout, done.stderr);
    assert!(text.contains("no producer appeared on channel"), "{text}");
}

/// A mistyped channel name: the error names the channels that do have a
/// producer, so the user sees the right one.
#[test]
fn a_missing_producer_error_names_the_live_channels() {
    let live = unique_channel("named");
    let producer = launch(&format!(
        "videotestsrc is-live=true ! video/x-raw,width=64,height=48,framerate=30/1 ! rscudaipcsink channel={live} transport=host"
    ));
    assert!(
        wait_for_channel(&live, LIMIT),
        "the producer of {live} never appeared"
    );
    let done = launch(&format!(
        "rscudaipcsrc channel={live}-typo is-live=true connect-timeout=300 ! fakesink"
    ))
    .finish(LIMIT);
    producer.signal(libc::SIGINT);
    let _ = producer.finish(LIMIT);
    assert!(!done.success);
    let text = format!("{}{}", done.stdout, done.stderr);
    assert!(text.contains("no producer appeared on channel"), "{text}");
    assert!(text.contains("channels with a producer:"), "{text}");
    assert!(
        text.contains(&live),
        "the live channel is not named: {text}"
    );
}

/// One slot, and a sink that keeps its last buffer (checksumsink, like most
/// sinks): the source must copy rather than hold the only slot forever.
/// A consumer that waits for a producer says so once, at the default
/// verbosity, after about 2 s: which channel it waits for and which have a
/// producer; it still fails at its timeout.
#[test]
fn a_waiting_consumer_warns_once_naming_the_live_channels() {
    let live = unique_channel("warned");
    let producer = launch(&format!(
        "videotestsrc is-live=true ! video/x-raw,width=64,height=48,framerate=30/1 ! rscudaipcsink channel={live} transport=host"
    ));
    assert!(
        wait_for_channel(&live, LIMIT),
        "the producer of {live} never appeared"
    );
    let start = std::time::Instant::now();
    let done = launch_unquiet(&format!(
        "rscudaipcsrc channel={live}-typo connect-timeout=3500 ! fakesink"
    ))
    .finish(LIMIT);
    let elapsed = start.elapsed();
    // A consumer that finds its producer at once warns of nothing, and a
    // wait of 2 s or less ends before a warning would.
    let quick = launch_unquiet(&format!(
        "rscudaipcsrc channel={live} num-buffers=1 ! fakesink"
    ))
    .finish(LIMIT);
    let short = launch_unquiet(&format!(
        "rscudaipcsrc channel={live}-typo connect-timeout=2000 ! fakesink"
    ))
    .finish(LIMIT);
    producer.signal(libc::SIGINT);
    let _ = producer.finish(LIMIT);
    assert!(!done.success);
    let text = format!("{}{}", done.stdout, done.stderr);
    let warnings: Vec<&str> = text.lines().filter(|l| l.starts_with("WARNING:")).collect();
    assert_eq!(warnings.len(), 1, "{text}");
    let expected = format!("still waiting for a producer on channel '{live}-typo'");
    assert!(warnings[0].contains(&expected), "{text}");
    assert!(warnings[0].contains("channels with a producer:"), "{text}");
    assert!(warnings[0].contains(&live), "{text}");
    let error = text.find("no producer appeared on channel").expect(&text);
    assert!(text.find("WARNING:").unwrap() < error, "{text}");
    assert!(elapsed >= Duration::from_millis(3500), "{elapsed:?}");
    quick.assert_success("a consumer of the live channel");
    assert!(!quick.stdout.contains("WARNING:"), "{}", quick.stdout);
    assert!(!short.success);
    let text = format!("{}{}", short.stdout, short.stderr);
    assert!(text.contains("no producer appeared on channel"), "{text}");
    assert!(!text.contains("WARNING:"), "{text}");
}

/// A producer stopped without an end of stream: the consumer's error says
/// what to change (on-producer-lost, or -e on the producer); with -e the
/// consumer ends with the stream.
#[test]
fn a_closed_channel_error_names_on_producer_lost_and_the_producers_dash_e() {
    let producer_line = |channel: &str, flags: &str| {
        format!(
            "{flags}videotestsrc is-live=true ! video/x-raw,width=64,height=48,framerate=30/1 ! rscudaipcsink channel={channel} transport=host"
        )
    };
    for (flags, ends_cleanly) in [("", false), ("-e ", true)] {
        let channel = unique_channel("closed");
        let consumer = launch(&format!(
            "rscudaipcsrc channel={channel} connect-timeout=120000 ! fakesink"
        ));
        wait_for_waiting_consumers(&channel, 1, LIMIT);
        let producer = launch(&producer_line(&channel, flags));
        std::thread::sleep(Duration::from_secs(1));
        producer.signal(libc::SIGINT);
        let produced = producer.finish(LIMIT);
        let done = consumer.finish(LIMIT);
        let text = format!("{}{}", done.stdout, done.stderr);
        if ends_cleanly {
            produced.assert_success("the producer run with -e");
            done.assert_success("the consumer of a producer run with -e");
        } else {
            assert!(!done.success, "{text}");
            for words in [
                "closed the channel without an end of stream",
                "on-producer-lost=eos",
                "on-producer-lost=wait",
                "gst-launch-1.0 with -e",
            ] {
                assert!(text.contains(words), "{words:?} missing: {text}");
            }
        }
    }
}

/// Caps downstream refuses: the error names the field and what downstream
/// takes, and the element it suggests makes the pipeline work.
#[test]
fn a_format_downstream_refuses_is_named_with_the_converter_to_add() {
    let channel = unique_channel("format");
    let producer = launch(&format!(
        "videotestsrc is-live=true ! video/x-raw,format=RGB,width=64,height=48,framerate=30/1 ! rscudaipcsink channel={channel} transport=host"
    ));
    assert!(wait_for_channel(&channel, LIMIT));
    let refused = launch(&format!(
        "rscudaipcsrc channel={channel} ! video/x-raw,format=I420 ! fakesink"
    ))
    .finish(LIMIT);
    assert!(!refused.success);
    let text = format!("{}{}", refused.stdout, refused.stderr);
    assert!(
        text.contains("format=RGB (it takes I420): put videoconvert after rscudaipcsrc"),
        "{text}"
    );
    let converted = launch(&format!(
        "rscudaipcsrc channel={channel} num-buffers=3 ! videoconvert ! video/x-raw,format=I420 ! fakesink"
    ))
    .finish(LIMIT);
    producer.signal(libc::SIGINT);
    let _ = producer.finish(LIMIT);
    converted.assert_success("the pipeline with the converter the error named");
}

#[test]
fn one_slot_and_a_sink_keeping_its_last_buffer_do_not_stall() {
    let channel = unique_channel("oneslot");
    let source = "videotestsrc num-buffers=30 pattern=snow ! video/x-raw,format=RGBx,width=320,height=240,framerate=30/1";
    let expected = reference_checksums(source);
    let consumer = launch(&format!(
        "rscudaipcsrc channel={channel} wait-mode=spin connect-timeout=120000 ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let producer = launch(&format!(
        "{source} ! rscudaipcsink channel={channel} transport=host slots=1 wait-mode=spin sync=false"
    ));
    producer.finish(LIMIT).assert_success("producer");
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer");
    assert_eq!(done.checksums(), expected);
}

// The cuda transport.

const SOURCE_4K: &str = "videotestsrc num-buffers=24 pattern=ball ! video/x-raw,format=RGB,width=3840,height=2160,framerate=30/1";

/// 4K RGB over the cuda transport with `sink_props`, read by one consumer
/// that keeps CUDA memory (checksumsink maps it, which downloads) and one
/// that asks for system memory (the source downloads).
fn frames_arrive_intact(sink_props: &str) {
    let expected = reference_checksums(SOURCE_4K);
    let channel = unique_channel("gpu");
    let in_cuda = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=60000 ! checksumsink"
    ));
    let in_system = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=60000 ! videoconvert ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 2, CUDA.limit);
    let producer = launch(&format!(
        "{SOURCE_4K} ! rscudaipcsink channel={channel} transport=cuda sync=false {sink_props}"
    ));
    producer.finish(CUDA.limit).assert_success("producer");
    for consumer in [in_cuda, in_system] {
        let done = consumer.finish(CUDA.limit);
        done.assert_success("consumer");
        assert_eq!(done.checksums(), expected, "{sink_props}");
    }
}

#[test]
fn cuda_transport_default_configuration_delivers_4k_frames_intact() {
    if gpu("cuda_transport_default_configuration_delivers_4k_frames_intact") {
        frames_arrive_intact("");
    }
}

#[test]
fn cuda_transport_seed_configuration_delivers_4k_frames_intact() {
    if gpu("cuda_transport_seed_configuration_delivers_4k_frames_intact") {
        frames_arrive_intact("slots=1 gpu-sync=host wait-mode=spin");
    }
}

/// The source wraps the producer's slots: its buffers are CUDA memory whose
/// device pointers are exactly the `slots` slot addresses, reused in turn.
#[test]
fn the_source_wraps_the_slots_without_copying() {
    if !gpu("the_source_wraps_the_slots_without_copying") {
        return;
    }
    init();
    let channel = unique_channel("wrap");
    let producer = launch(&format!(
        "videotestsrc num-buffers=40 ! video/x-raw,format=RGB,width=3840,height=2160,framerate=30/1 ! rscudaipcsink channel={channel} transport=cuda slots=3 sync=false"
    ));
    let pipeline = gst::parse::launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=60000 ! appsink name=out sync=false"
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    let appsink = pipeline
        .by_name("out")
        .unwrap()
        .downcast::<gst_app::AppSink>()
        .unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let mut pointers = HashSet::new();
    let mut frames = 0;
    while let Ok(sample) = appsink.pull_sample() {
        let buffer = sample.buffer().unwrap();
        let memory = gstcudaipc::memory::buffer_device_memory(buffer)
            .expect("buffers from rscudaipcsrc hold CUDA memory");
        let meta = gstcudaipc::memory::CudaIpcMeta::get(buffer).expect("CudaIpcMeta");
        assert_eq!(meta.device_ptr, memory.ptr);
        assert_eq!(meta.pitch, 3840 * 3);
        assert_eq!(meta.size, 3840 * 2160 * 3);
        assert!(
            buffer
                .peek_memory(0)
                .flags()
                .contains(gst::MemoryFlags::READONLY),
            "shared frames are read-only"
        );
        pointers.insert(memory.ptr);
        frames += 1;
    }
    pipeline.set_state(gst::State::Null).unwrap();
    producer.finish(CUDA.limit).assert_success("producer");
    assert_eq!(frames, 40);
    assert_eq!(pointers.len(), 3, "every frame must be one of the 3 slots");
}

/// A consumer on GPU 1 reads the slots of a producer on GPU 0 through peer
/// access (`cuda-device-id=1`): its buffers are GPU 1 memory, and every
/// counter frame arrives intact (checked on GPU 1 by `cudaprocess verify`).
#[test]
fn a_consumer_on_another_gpu_reads_every_frame_through_peer_access() {
    const TEST: &str = "a_consumer_on_another_gpu_reads_every_frame_through_peer_access";
    const FRAMES: u64 = 240;
    let Some(gpu0) = gpu_or_skip(TEST) else {
        return;
    };
    // CUDAIPC_REQUIRE_GPU=1 asks for one GPU, not two: skipped, not failed.
    let skip = match cudaipc_transport::cuda::Device::get(1) {
        Err(e) => Some(format!("needs two CUDA devices ({e})")),
        Ok(gpu1) if !gpu1.can_access_peer(&gpu0).unwrap_or(false) => {
            Some("needs two CUDA devices with peer access (GPU 1 cannot map GPU 0's memory)".into())
        }
        Ok(_) => None,
    };
    if let Some(why) = skip {
        // Past the harness's capture, as gpu_or_skip prints.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED: {why} ({TEST})");
        return;
    }
    init();
    let channel = unique_channel("peer");
    let pipeline = gst::parse::launch(&format!(
        "rscudaipcsrc channel={channel} cuda-device-id=1 connect-timeout=60000 ! cudaprocess name=check verify=true ! fakesink sync=false"
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    let check = pipeline.by_name("check").unwrap();
    let devices = std::sync::Arc::new(std::sync::Mutex::new(HashSet::new()));
    let seen = devices.clone();
    check
        .static_pad("sink")
        .unwrap()
        .add_probe(gst::PadProbeType::BUFFER, move |_, info| {
            if let Some(buffer) = info.buffer() {
                let device = gstcudaipc::memory::buffer_device_memory(buffer)
                    .map_or(-1, |m| m.device.ordinal());
                seen.lock().unwrap().insert(device);
            }
            gst::PadProbeReturn::Ok
        });
    pipeline.set_state(gst::State::Playing).unwrap();
    wait_for_waiting_consumers(&channel, 1, CUDA.limit);
    let producer = launch(&format!(
        "cudatestsrc num-buffers={FRAMES} pattern=counter ! video/x-raw(memory:CUDAMemory),format=RGB,width=3840,height=2160,framerate=0/1 ! rscudaipcsink channel={channel} sync=false"
    ));
    producer.finish(CUDA.limit).assert_success("producer");
    let end = pipeline
        .bus()
        .unwrap()
        .timed_pop_filtered(
            gst::ClockTime::from_seconds(CUDA.limit.as_secs()),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        )
        .expect("the consumer on GPU 1 reaches EOS");
    if let gst::MessageView::Error(e) = end.view() {
        panic!("consumer on GPU 1: {} ({:?})", e.error(), e.debug());
    }
    let stats = check.property::<gst::Structure>("stats");
    pipeline.set_state(gst::State::Null).unwrap();
    let count = |field: &str| stats.get::<u64>(field).unwrap();
    assert_eq!(count("frames"), FRAMES, "{stats}");
    assert_eq!(count("verified"), FRAMES, "{stats}");
    assert_eq!(count("corrupt"), 0, "{stats}");
    assert_eq!(count("missing"), 0, "{stats}");
    assert_eq!(
        *devices.lock().unwrap(),
        HashSet::from([1]),
        "the consumer reads on GPU 1"
    );
}

/// One consumer process reading several channels at once, as a
/// video-analytics application does (one CUDA context for all): a
/// `gst-launch-1.0` with one `rscudaipcsrc` branch per producer gets every
/// frame of each.
fn one_consumer_process_reads_several_channels(transport: Transport) {
    const CHANNELS: usize = 4;
    let channels: Vec<String> = (0..CHANNELS)
        .map(|i| unique_channel(&format!("many-{i}")))
        .collect();
    // A moving ball, of another colour on each channel: every frame differs.
    let sources: Vec<String> = (0..CHANNELS)
        .map(|i| {
            let colour = 0xff00_0000u32 | ((0x40 * (i as u32 + 1)) << 8);
            format!(
                "videotestsrc num-buffers=30 pattern=ball foreground-color={colour} ! {}",
                transport.caps
            )
        })
        .collect();
    let mut expected: Vec<String> = sources
        .iter()
        .flat_map(|s| reference_checksums(s))
        .collect();
    let branches: Vec<String> = channels
        .iter()
        .map(|c| format!("rscudaipcsrc channel={c} connect-timeout=120000 ! checksumsink"))
        .collect();
    let consumer = launch(&branches.join(" "));
    for channel in &channels {
        wait_for_waiting_consumers(channel, 1, transport.limit);
    }
    let producers: Vec<Launch> = channels
        .iter()
        .zip(&sources)
        .map(|(c, s)| {
            launch(&format!(
                "{s} ! rscudaipcsink channel={c} {} sync=false",
                transport.sink
            ))
        })
        .collect();
    for producer in producers {
        producer.finish(transport.limit).assert_success("producer");
    }
    let done = consumer.finish(transport.limit);
    done.assert_success("the consumer of every channel");
    // The branches print in any order between them: every frame of every
    // channel, once.
    let mut got = done.checksums();
    got.sort();
    expected.sort();
    assert_eq!(got.len(), CHANNELS * 30);
    let distinct: HashSet<&String> = expected.iter().collect();
    assert_eq!(distinct.len(), CHANNELS * 30, "every frame differs");
    assert_eq!(got, expected);
}

#[test]
fn host_one_consumer_process_reads_several_channels() {
    one_consumer_process_reads_several_channels(HOST);
}

#[test]
fn cuda_one_consumer_process_reads_several_channels() {
    if CUDA.runs_here("cuda_one_consumer_process_reads_several_channels") {
        one_consumer_process_reads_several_channels(CUDA);
    }
}
