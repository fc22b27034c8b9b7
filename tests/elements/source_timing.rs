// cudaipcsrc never makes anyone wait on it: queries are answered while it
// waits for a producer or a frame, and a viewer that joins a producer that has
// run for minutes shows frames at once (host transport, real processes).

use crate::common;

use std::sync::mpsc;
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use common::*;
use gst::prelude::*;

const LIMIT: Duration = Duration::from_secs(30);
/// What "at once" means for a query or a frame.
const AT_ONCE: Duration = Duration::from_millis(100);
/// The producer's timestamps start ten minutes in.
const PRODUCER_OFFSET: gst::ClockTime = gst::ClockTime::from_seconds(600);

fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        gst::init().unwrap();
        gstcudaipc::plugin_register_static().unwrap();
    });
}

fn pipeline(description: &str) -> gst::Pipeline {
    init();
    gst::parse::launch(description)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap()
}

/// Runs `query` on another thread; panics unless it is answered at once.
fn answered_at_once<T: Send + 'static>(
    what: &str,
    query: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(query());
    });
    let answer = rx
        .recv_timeout(AT_ONCE)
        .unwrap_or_else(|_| panic!("{what} not answered within {AT_ONCE:?}"));
    assert!(
        start.elapsed() < AT_ONCE,
        "{what} took {:?}",
        start.elapsed()
    );
    answer
}

/// Caps, latency and position queries on the source, each answered at once;
/// the caps it answers.
fn query_all(src: &gst::Element, when: &str) -> gst::Caps {
    let pad = src.static_pad("src").unwrap();
    let caps = answered_at_once(&format!("caps query {when}"), move || pad.query_caps(None));
    let element = src.clone();
    answered_at_once(&format!("latency query {when}"), move || {
        element.query(&mut gst::query::Latency::new())
    });
    let element = src.clone();
    answered_at_once(&format!("position query {when}"), move || {
        element.query_position::<gst::ClockTime>()
    });
    caps
}

#[test]
fn queries_are_answered_while_the_source_waits() {
    let channel = unique_channel("queries");
    // connect-timeout=-1: it waits for a producer for ever.
    let consumer = pipeline(&format!(
        "rscudaipcsrc name=src channel={channel} connect-timeout=-1 ! fakesink"
    ));
    let src = consumer.by_name("src").unwrap();
    consumer.set_state(gst::State::Playing).unwrap();
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let caps = query_all(&src, "while waiting for a producer");
    assert!(!caps.is_empty(), "template caps while not attached");

    // A producer that is there but sends nothing yet.
    let producer = pipeline(&format!(
        "appsrc name=feed format=time caps=video/x-raw,format=RGBA,width=64,height=48,framerate=30/1 ! rscudaipcsink name=sink channel={channel} transport=host sync=false"
    ));
    producer.set_state(gst::State::Playing).unwrap();
    let sink = producer.by_name("sink").unwrap();
    wait_until(LIMIT, "the source attaches", || {
        sink.property::<gst::Structure>("stats")
            .get::<u32>("consumers")
            .unwrap()
            >= 1
    });
    query_all(&src, "while waiting for the first frame");

    // One frame: the channel's caps are known, and it waits for the next.
    let feed = producer
        .by_name("feed")
        .unwrap()
        .downcast::<gst_app::AppSrc>()
        .unwrap();
    let mut buffer = gst::Buffer::with_size(64 * 48 * 4).unwrap();
    buffer.get_mut().unwrap().set_pts(gst::ClockTime::ZERO);
    feed.push_buffer(buffer).unwrap();
    wait_until(LIMIT, "the frame reaches the source", || {
        src.property::<gst::Structure>("stats")
            .get::<u64>("frames")
            .unwrap()
            >= 1
    });
    let caps = query_all(&src, "while waiting for the next frame");
    let s = caps.structure(0).unwrap();
    assert_eq!(
        (s.get::<&str>("format"), s.get::<i32>("width")),
        (Ok("RGBA"), Ok(64)),
        "the channel's caps once known: {caps}"
    );
    consumer.set_state(gst::State::Null).unwrap();
    producer.set_state(gst::State::Null).unwrap();
}

/// A producer in another process whose timestamps start ten minutes in.
fn old_producer(channel: &str) -> Launch {
    let producer = launch(&format!(
        "videotestsrc timestamp-offset={} ! video/x-raw,width=64,height=48,framerate=30/1 ! identity sleep-time=10000 ! rscudaipcsink channel={channel} transport=host sync=false",
        PRODUCER_OFFSET.nseconds()
    ));
    assert!(wait_for_channel(channel, LIMIT), "no producer");
    producer
}

/// A consumer joining late: for each of its first `frames` buffers, the PTS
/// and the time from leaving cudaipcsrc to reaching the application.
fn late_viewer(
    channel: &str,
    props: &str,
    sync: bool,
    frames: usize,
) -> Vec<(gst::ClockTime, Duration)> {
    let consumer = pipeline(&format!(
        "rscudaipcsrc name=src channel={channel} connect-timeout=10000 {props} ! appsink name=out sync={sync}"
    ));
    let pushed = Arc::new(Mutex::new(Vec::new()));
    let record = pushed.clone();
    consumer
        .by_name("src")
        .unwrap()
        .static_pad("src")
        .unwrap()
        .add_probe(gst::PadProbeType::BUFFER, move |_, _| {
            record.lock().unwrap().push(Instant::now());
            gst::PadProbeReturn::Ok
        });
    let out = consumer
        .by_name("out")
        .unwrap()
        .downcast::<gst_app::AppSink>()
        .unwrap();
    consumer.set_state(gst::State::Playing).unwrap();
    let mut got = Vec::new();
    for n in 0..frames {
        let Some(sample) = out.try_pull_sample(gst::ClockTime::from_seconds(2)) else {
            break;
        };
        let delay = pushed.lock().unwrap()[n].elapsed();
        got.push((sample.buffer().unwrap().pts().unwrap(), delay));
    }
    consumer.set_state(gst::State::Null).unwrap();
    got
}

#[test]
fn a_late_viewer_shows_frames_at_once_and_producer_timestamps_stay_available() {
    let channel = unique_channel("late");
    let producer = old_producer(&channel);
    // Let the producer run before the viewer joins.
    std::thread::sleep(Duration::from_millis(300));

    let frames = late_viewer(&channel, "", true, 5);
    assert_eq!(frames.len(), 5, "a syncing late viewer got {frames:?}");
    for (n, (pts, delay)) in frames.iter().enumerate() {
        assert!(
            *pts < PRODUCER_OFFSET,
            "frame {n}: pipeline timestamps, got {pts}"
        );
        assert!(
            *delay < AT_ONCE,
            "frame {n} waited {delay:?} in a syncing sink"
        );
    }

    let frames = late_viewer(&channel, "timestamp-mode=producer", false, 3);
    assert_eq!(frames.len(), 3);
    for (n, (pts, _)) in frames.iter().enumerate() {
        assert!(
            *pts >= PRODUCER_OFFSET,
            "frame {n}: the producer's timestamps, got {pts}"
        );
    }
    // Which a syncing sink waits on: the reason for the default.
    let frames = late_viewer(&channel, "timestamp-mode=producer", true, 1);
    assert!(
        frames.is_empty(),
        "a syncing sink rendered {frames:?} at once"
    );
    drop(producer);
}

#[test]
fn a_live_late_viewer_is_stamped_with_its_running_time() {
    let channel = unique_channel("late-live");
    let producer = old_producer(&channel);
    std::thread::sleep(Duration::from_millis(300));
    let frames = late_viewer(&channel, "is-live=true", true, 3);
    assert_eq!(frames.len(), 3, "a live late viewer got {frames:?}");
    for (n, (pts, _)) in frames.iter().enumerate() {
        assert!(*pts < PRODUCER_OFFSET, "frame {n}: running time, got {pts}");
    }
    drop(producer);
}

#[test]
fn a_waiting_consumer_says_so() {
    let channel = unique_channel("says");
    let done = launch_with(
        &[],
        &[("GST_DEBUG", "cudaipcsrc:4")],
        &format!("rscudaipcsrc channel={channel} connect-timeout=300 ! fakesink"),
    )
    .finish(LIMIT);
    assert!(!done.success, "no producer: it fails");
    let line = format!("waiting for a producer on channel '{channel}' (connect-timeout=300 ms)");
    assert!(
        done.stderr.contains(&line),
        "no INFO line {line:?} in:\n{}",
        done.stderr
    );
}

#[test]
fn a_host_channel_into_cuda_only_downstream_names_the_cause() {
    let channel = unique_channel("host-cuda");
    let producer = old_producer(&channel);
    let done = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=10000 ! video/x-raw(memory:CUDAMemory) ! fakesink"
    ))
    .finish(LIMIT);
    assert!(!done.success, "it cannot negotiate");
    let output = format!("{}{}", done.stdout, done.stderr);
    assert!(
        output.contains("uses the host transport, so its frames are in system memory, but downstream takes only CUDA memory"),
        "{output}"
    );
    drop(producer);
}
