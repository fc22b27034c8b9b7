// cudaipcsink's own behaviour as a user sees it: which memory it asks
// upstream for, the mode of its files when `permissions` is given in octal on
// a gst-launch line, and `wait-for-connection` holding the first frame until
// consumers (other processes) are attached.

use crate::common;

use std::time::{Duration, Instant};

use common::{data_files, gpu, init, launch, reference_checksums, unique_channel, wait_until};
use gst::prelude::*;

const LIMIT: Duration = Duration::from_secs(20);

fn pipeline(description: &str) -> gst::Pipeline {
    gst::parse::launch(description)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap()
}

fn stats(pipeline: &gst::Pipeline) -> gst::Structure {
    pipeline
        .by_name("sink")
        .unwrap()
        .property::<gst::Structure>("stats")
}

/// Runs `producer` (playing) to its end of stream and stops it: the sink's
/// final stats.
fn finish_producer(producer: &gst::Pipeline) -> gst::Structure {
    let end = producer
        .bus()
        .unwrap()
        .timed_pop_filtered(
            gst::ClockTime::from_seconds(20),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        )
        .expect("the producer neither finished nor failed");
    let final_stats = stats(producer);
    producer.set_state(gst::State::Null).unwrap();
    assert!(matches!(end.view(), gst::MessageView::Eos(_)), "{end:?}");
    final_stats
}

/// Runs `producer` (playing) to its end of stream, then `consumer`, a
/// process reading its channel, to its own end: what the consumer printed,
/// and the sink's final stats.
fn run_to_eos(
    producer: &gst::Pipeline,
    consumer: common::Launch,
) -> (common::Finished, gst::Structure) {
    let final_stats = finish_producer(producer);
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer");
    (done, final_stats)
}

fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().mode() & 0o777
}

/// The features of the first structure the sink's pad answers a caps query
/// with, given a filter that lists system memory first.
fn first_answer(transport: &str) -> String {
    let sink = gst::ElementFactory::make("rscudaipcsink")
        .property_from_str("transport", transport)
        .build()
        .unwrap();
    let filter: gst::Caps = "video/x-raw, format=RGBA; video/x-raw(memory:CUDAMemory), format=RGBA"
        .parse()
        .unwrap();
    let answer = sink.static_pad("sink").unwrap().query_caps(Some(&filter));
    assert_eq!(answer.size(), 2, "{answer}");
    answer.features(0).unwrap().to_string()
}

#[test]
fn caps_queries_are_answered_in_the_sinks_order_not_the_filters() {
    init();
    // So that `cudaupload ! cudaipcsink` negotiates CUDA memory...
    assert_eq!(first_answer("cuda"), "memory:CUDAMemory");
    // ...while on host slots system memory saves an upload and a download.
    assert_eq!(first_answer("host"), "memory:SystemMemory");
}

/// What the sink says of caps it cannot take: the formats it takes and the
/// element to put before it, not GStreamer's bare not-negotiated.
const YUY2_REFUSED: &str = "rscudaipcsink does not take format YUY2: it takes RGB, RGBA, BGRA, RGBx, BGRx, GRAY8, NV12 and I420; put videoconvert before it";

#[test]
fn caps_the_sink_cannot_take_fail_with_the_formats_it_takes_and_videoconvert() {
    init();
    let channel = unique_channel("yuy2");
    // An application's appsrc (caps set after linking, as a decoder or a
    // parser sends its own).
    let pipeline = pipeline(&format!(
        "appsrc name=src format=time ! rscudaipcsink name=sink channel={channel} transport=host"
    ));
    let src = pipeline
        .by_name("src")
        .unwrap()
        .downcast::<gst_app::AppSrc>()
        .unwrap();
    src.set_caps(Some(
        &"video/x-raw,format=YUY2,width=64,height=48,framerate=30/1"
            .parse::<gst::Caps>()
            .unwrap(),
    ));
    pipeline.set_state(gst::State::Playing).unwrap();
    let _ = src.push_buffer(gst::Buffer::with_size(64 * 48 * 2).unwrap());
    let message = pipeline
        .bus()
        .unwrap()
        .timed_pop_filtered(gst::ClockTime::from_seconds(20), &[gst::MessageType::Error])
        .expect("an error");
    pipeline.set_state(gst::State::Null).unwrap();
    let gst::MessageView::Error(e) = message.view() else {
        unreachable!()
    };
    // The first error, from the sink, before upstream's not-negotiated.
    assert_eq!(
        message.src().map(|s| s.name().to_string()).as_deref(),
        Some("sink"),
        "{e:?}"
    );
    assert!(e.error().to_string().starts_with(YUY2_REFUSED), "{e:?}");
    assert!(e.error().matches(gst::CoreError::Negotiation), "{e:?}");
}

/// As a gst-launch-1.0 user meets it: a parser that sends a format the
/// sink does not take. The source is live so the error comes after
/// gst-launch-1.0 runs its main loop: an error posted before that (a
/// non-live source negotiates during the PAUSED change) quits a loop not
/// yet running, and gst-launch-1.0 then waits forever (6 runs in 200 here
/// under load with `filesrc`).
#[test]
fn gst_launch_says_which_formats_the_sink_takes() {
    init();
    if gst::ElementFactory::find("rawvideoparse").is_none() {
        eprintln!("SKIPPED: no rawvideoparse (gst-plugins-base rawparse)");
        return;
    }
    let channel = unique_channel("yuy2-launch");
    let done = launch(&format!(
        "fakesrc is-live=true num-buffers=1 sizetype=fixed sizemax=6144 filltype=zero ! rawvideoparse format=yuy2 width=64 height=48 ! rscudaipcsink channel={channel} transport=host"
    ))
    .finish(LIMIT);
    assert_eq!(done.code, Some(1), "{}", done.stderr);
    let first = done
        .stderr
        .lines()
        .find(|l| l.starts_with("ERROR:"))
        .unwrap_or_default();
    assert!(
        first.contains("GstRsCudaIpcSink") && first.contains(YUY2_REFUSED),
        "the first error is the sink's:\n{}",
        done.stderr
    );
}

#[test]
fn cudaupload_into_the_sink_negotiates_cuda_memory() {
    init();
    if !gpu("cudaupload_into_the_sink_negotiates_cuda_memory") {
        return;
    }
    if gst::ElementFactory::find("cudaupload").is_none() {
        eprintln!("SKIPPED: no cudaupload (GStreamer's nvcodec plugin)");
        return;
    }
    let channel = unique_channel("upload");
    let pipeline = pipeline(&format!(
        "videotestsrc num-buffers=1 ! video/x-raw,format=RGBA,width=64,height=48 ! cudaupload ! rscudaipcsink name=sink channel={channel} transport=cuda"
    ));
    pipeline.set_state(gst::State::Paused).unwrap();
    let (result, ..) = pipeline.state(gst::ClockTime::from_seconds(20));
    result.unwrap();
    let caps = pipeline
        .by_name("sink")
        .unwrap()
        .static_pad("sink")
        .unwrap()
        .current_caps()
        .unwrap();
    pipeline.set_state(gst::State::Null).unwrap();
    assert_eq!(caps.features(0).unwrap().to_string(), "memory:CUDAMemory");
}

#[test]
fn permissions_in_octal_on_a_launch_line_set_the_file_mode() {
    init();
    let channel = unique_channel("octal");
    let pipeline = pipeline(&format!(
        "videotestsrc num-buffers=1 ! video/x-raw,format=RGBA,width=64,height=48 ! rscudaipcsink name=sink channel={channel} transport=host permissions=0660"
    ));
    pipeline.set_state(gst::State::Paused).unwrap();
    let (result, ..) = pipeline.state(gst::ClockTime::from_seconds(20));
    result.unwrap();
    let sink = pipeline.by_name("sink").unwrap();
    assert_eq!(sink.property::<u32>("permissions"), 0o660);
    let control = cudaipc_channel::shm::control_path(&channel);
    let data = data_files(&channel);
    let modes: Vec<u32> = std::iter::once(control)
        .chain(
            data.iter()
                .map(|name| cudaipc_channel::shm::shm_dir().join(name)),
        )
        .map(|path| mode_of(&path))
        .collect();
    pipeline.set_state(gst::State::Null).unwrap();
    assert!(!data.is_empty(), "no data file for the slots");
    assert!(modes.iter().all(|&m| m == 0o660), "{modes:?} (decimal)");
}

#[test]
fn wait_for_connection_holds_the_first_frame_until_a_consumer_process_attaches() {
    init();
    let channel = unique_channel("waitconn");
    let source = "videotestsrc num-buffers=20 pattern=ball ! video/x-raw,format=RGB,width=160,height=120,framerate=30/1";
    let expected = reference_checksums(source);
    // Unpaced: without the wait, every frame would be gone before the
    // consumer exists.
    let producer = pipeline(&format!(
        "{source} ! rscudaipcsink name=sink channel={channel} transport=host slots=2 sync=false wait-for-connection=1"
    ));
    producer.set_state(gst::State::Playing).unwrap();
    wait_until(LIMIT, "the channel exists", || {
        cudaipc_channel::shm::control_path(&channel).exists()
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(stats(&producer).get::<u64>("frames").unwrap(), 0);
    let consumer = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=120000 ! checksumsink"
    ));
    let (done, _) = run_to_eos(&producer, consumer);
    assert_eq!(done.checksums(), expected, "every frame from the first");
}

#[test]
fn stopping_ends_the_wait_for_connection() {
    init();
    let channel = unique_channel("waitstop");
    let producer = pipeline(&format!(
        "videotestsrc ! video/x-raw,format=RGBA,width=64,height=48 ! rscudaipcsink name=sink channel={channel} transport=host wait-for-connection=2"
    ));
    producer.set_state(gst::State::Playing).unwrap();
    wait_until(LIMIT, "the channel exists", || {
        cudaipc_channel::shm::control_path(&channel).exists()
    });
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(stats(&producer).get::<u64>("frames").unwrap(), 0);
    let start = Instant::now();
    producer.set_state(gst::State::Null).unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "stopping took {:?}",
        start.elapsed()
    );
    assert!(!cudaipc_channel::shm::control_path(&channel).exists());
}

#[test]
fn wait_for_connection_is_off_by_default() {
    init();
    let sink = gst::ElementFactory::make("rscudaipcsink").build().unwrap();
    assert_eq!(sink.property::<u32>("wait-for-connection"), 0);
    assert_eq!(sink.property::<u32>("permissions"), 0o600);
}

/// A buffer pushed again (imagefreeze repeats one frame) is published again
/// from a slot that still holds it: the consumer, another process, gets
/// every frame with the right picture, and the sink copied only a few.
#[test]
fn a_frame_pushed_again_is_published_again_without_a_copy() {
    const PUSHES: usize = 200;
    init();
    let channel = unique_channel("again");
    let frame = "videotestsrc num-buffers=1 pattern=smpte ! video/x-raw,format=RGB,width=320,height=240,framerate=0/1";
    let expected = reference_checksums(frame);
    assert_eq!(expected.len(), 1);
    let producer = pipeline(&format!(
        "{frame} ! imagefreeze num-buffers={PUSHES} ! rscudaipcsink name=sink channel={channel} transport=host slots=4 sync=false wait-for-connection=1"
    ));
    producer.set_state(gst::State::Playing).unwrap();
    let consumer = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=120000 ! checksumsink"
    ));
    let (done, stats) = run_to_eos(&producer, consumer);
    assert_eq!(done.checksums(), vec![expected[0].clone(); PUSHES]);
    let copied = stats.get::<u64>("copied").unwrap();
    let repeated = stats.get::<u64>("repeated").unwrap();
    let zero_copy = stats.get::<u64>("zero-copy").unwrap();
    // The first frame may be written into a slot by videotestsrc itself.
    assert_eq!(zero_copy + copied + repeated, PUSHES as u64, "{stats}");
    assert!(repeated > 0, "{stats}");
    // At most one copy per slot.
    assert!(copied <= 4, "{stats}");
}

/// The sink's statistics say where the producer's time went: with a
/// consumer (another process) that takes 20 ms per frame, the producer
/// waits for free slots for most of the run. Upstream (videotestsrc) writes
/// into the sink's slots, so it waits when it asks the sink's pool for a
/// buffer, not in `render`.
#[test]
fn the_stats_say_how_long_the_producer_waited_for_a_slow_consumer() {
    const FRAMES: u64 = 30;
    init();
    let channel = unique_channel("slow");
    let producer = pipeline(&format!(
        "videotestsrc num-buffers={FRAMES} ! video/x-raw,format=RGB,width=64,height=48 ! rscudaipcsink name=sink channel={channel} transport=host slots=2 sync=false wait-for-connection=1"
    ));
    producer.set_state(gst::State::Playing).unwrap();
    let consumer = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=120000 ! identity sleep-time=20000 ! checksumsink"
    ));
    let (done, stats) = run_to_eos(&producer, consumer);
    assert_eq!(done.checksums().len(), FRAMES as usize);
    let ms = |field: &str| stats.get::<u64>(field).unwrap() as f64 / 1e6;
    assert_eq!(stats.get::<u64>("zero-copy").unwrap(), FRAMES, "{stats}");
    assert!(stats.get::<u64>("waits").unwrap() > 0, "{stats}");
    // 30 frames at 20 ms, of which the two slots absorb two and the last
    // ones are taken after the producer's end: at least 20 frames' worth.
    assert!(ms("slot-wait-time") >= 400.0, "{stats}");
    assert!(ms("render-time") > 0.0, "{stats}");
    assert!(ms("render-time") < ms("slot-wait-time"), "{stats}");
}

/// With `slots=0` the ring's depth follows what it holds. Upstream that
/// writes into the sink's own slots (`cudatestsrc` takes them even where a
/// lendable `GstCudaBufferPool` is proposed first) is never lent, so
/// frames that come as fast as the pipeline runs get every slot record the
/// device's 5% holds (64 small frames; 2 with MPS); a live source at 30
/// FPS gets a tenth of a second of frames, 4 with MPS, and 8 where the
/// processes' contexts take turns on the GPU.
#[test]
fn a_ring_written_in_place_is_as_deep_as_a_ring_goes_unless_live() {
    const FRAMES: u64 = 30;
    init();
    if !gpu("a_ring_written_in_place_is_as_deep_as_a_ring_goes_unless_live") {
        return;
    }
    let mps = cudaipc_transport::cuda::Device::get(0)
        .unwrap()
        .mps_enabled();
    for (live, expected) in [
        (false, if mps { 2 } else { 64 }),
        (true, if mps { 4 } else { 8 }),
    ] {
        let channel = unique_channel("depth");
        let producer = pipeline(&format!(
            "cudatestsrc num-buffers={FRAMES} is-live={live} ! video/x-raw(memory:CUDAMemory),format=RGB,width=320,height=240,framerate=30/1 ! rscudaipcsink name=sink channel={channel} transport=cuda sync=false"
        ));
        producer.set_state(gst::State::Playing).unwrap();
        let stats = finish_producer(&producer);
        assert_eq!(stats.get::<u64>("zero-copy").unwrap(), FRAMES, "{stats}");
        assert_eq!(
            stats.get::<u32>("slots").unwrap(),
            expected,
            "live={live}: {stats}"
        );
    }
}
