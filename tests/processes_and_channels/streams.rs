// Stream changes on the producer side, seen by consumers in other
// processes: caps changes mid-stream, EOS followed by a new stream, flushing
// seeks upstream of the sink; and consumers of different speeds on one live
// channel. The producer runs in this process, so that a
// probe can record exactly which frames (PTS and SHA-1) reached the sink;
// the consumers are `gst-launch-1.0 ... ! checksumsink` children.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use cudaipc_channel::ControlBlock;
use gst::prelude::*;

const LIMIT: Duration = Duration::from_secs(60);

const HOST: &str = "transport=host";
const CUDA: &str = "transport=cuda";

/// A producer pipeline in this process that records what its sink got.
struct Producer {
    pipeline: gst::Pipeline,
    /// "PTS SHA-1" of every buffer that reached the sink, as checksumsink
    /// prints them.
    records: Arc<Mutex<Vec<String>>>,
}

impl Producer {
    /// `videotestsrc ! capsfilter name=f ! identity ! cudaipcsink name=sink`.
    fn start(channel: &str, caps: &str, sink: &str) -> Self {
        Self::start_from(
            &format!(
                "videotestsrc pattern=ball ! capsfilter name=f caps={caps} ! identity sleep-time=2000"
            ),
            channel,
            sink,
        )
    }

    /// `source ! cudaipcsink name=sink`.
    fn start_from(source: &str, channel: &str, sink: &str) -> Self {
        init();
        let pipeline = gst::parse::launch(&format!(
            "{source} ! rscudaipcsink name=sink channel={channel} sync=false {sink}"
        ))
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
        let records = Arc::new(Mutex::new(Vec::new()));
        let r = records.clone();
        pipeline
            .by_name("sink")
            .unwrap()
            .static_pad("sink")
            .unwrap()
            .add_probe(gst::PadProbeType::BUFFER, move |_, info| {
                if let Some(buffer) = info.buffer() {
                    let map = buffer.map_readable().unwrap();
                    let sum = sha1_smol::Sha1::from(&map[..]).digest().to_string();
                    r.lock()
                        .unwrap()
                        .push(format!("{} {sum}", buffer.pts().unwrap()));
                }
                gst::PadProbeReturn::Ok
            });
        pipeline.set_state(gst::State::Playing).unwrap();
        Self { pipeline, records }
    }

    fn recorded(&self) -> usize {
        self.records.lock().unwrap().len()
    }

    fn wait_recorded(&self, n: usize) {
        wait_until(LIMIT, &format!("{n} frames reach the sink"), || {
            self.recorded() >= n
        });
    }

    /// Sends EOS and waits for it to come out at the sink.
    fn eos(&self) {
        self.pipeline.send_event(gst::event::Eos::new());
        let msg = self
            .pipeline
            .bus()
            .unwrap()
            .timed_pop_filtered(
                gst::ClockTime::from_seconds(60),
                &[gst::MessageType::Eos, gst::MessageType::Error],
            )
            .expect("neither EOS nor an error");
        if let gst::MessageView::Error(e) = msg.view() {
            panic!("producer failed: {} ({:?})", e.error(), e.debug());
        }
    }

    fn take_records(&self) -> Vec<String> {
        std::mem::take(&mut *self.records.lock().unwrap())
    }

    fn stat(&self, field: &str) -> u64 {
        self.pipeline
            .by_name("sink")
            .unwrap()
            .property::<gst::Structure>("stats")
            .get::<u64>(field)
            .unwrap()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let _ = self.pipeline.set_state(gst::State::Null);
    }
}

fn caps(format: &str, width: u32, height: u32) -> String {
    format!("video/x-raw,format={format},width={width},height={height},framerate=30/1")
}

// ---------------------------------------------------------------------------

/// Resolution and format change twice mid-stream (smaller, then larger than
/// the slots): the consumer follows, every frame arrives intact and in
/// order, none with caps it does not belong to.
fn caps_change(sink: &str, zero_copy: bool) {
    let channel = unique_channel("caps");
    let consumer = launch(&format!(
        "-v rscudaipcsrc channel={channel} timestamp-mode=producer connect-timeout=120000 ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let producer = Producer::start(&channel, &caps("RGB", 320, 240), sink);
    let filter = producer.pipeline.by_name("f").unwrap();
    producer.wait_recorded(15);
    filter.set_property(
        "caps",
        caps("GRAY8", 160, 120).parse::<gst::Caps>().unwrap(),
    );
    producer.wait_recorded(30);
    filter.set_property("caps", caps("RGBx", 400, 300).parse::<gst::Caps>().unwrap());
    producer.wait_recorded(45);
    producer.eos();
    if zero_copy {
        assert!(
            producer.stat("zero-copy") > 0,
            "upstream did not write into the slots"
        );
    }
    let expected = producer.take_records();
    drop(producer);
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer");
    assert_eq!(done.checksum_lines(), expected);
    for caps in [
        "format=(string)RGB, width=(int)320, height=(int)240",
        "format=(string)GRAY8, width=(int)160, height=(int)120",
        "format=(string)RGBx, width=(int)400, height=(int)300",
    ] {
        assert!(done.stdout.contains(caps), "{caps} not negotiated");
    }
}

#[test]
fn host_caps_changes_mid_stream_reach_the_consumer() {
    caps_change(HOST, true);
}

#[test]
fn cuda_caps_changes_mid_stream_reach_the_consumer() {
    if gpu("cuda_caps_changes_mid_stream_reach_the_consumer") {
        caps_change(CUDA, false);
    }
}

/// The producer sends EOS, then streams again (a flushing seek restarts
/// it). The consumer of the first stream ends with it (EOS: exit 0); a new
/// consumer session gets the second stream, and nothing of the first.
fn eos_then_new_stream(sink: &str) {
    let channel = unique_channel("eos");
    let first = launch(&format!(
        "rscudaipcsrc channel={channel} timestamp-mode=producer connect-timeout=120000 ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let producer = Producer::start(&channel, &caps("RGB", 320, 240), sink);
    producer.wait_recorded(20);
    producer.eos();
    let stream1 = producer.take_records();
    let done = first.finish(LIMIT);
    done.assert_success("consumer of the first stream");
    assert_eq!(done.checksum_lines(), stream1);

    let second = launch(&format!(
        "rscudaipcsrc channel={channel} timestamp-mode=producer connect-timeout=120000 ! checksumsink"
    ));
    let block = ControlBlock::open(&channel).expect("the channel stays open after EOS");
    let pid = second.pid();
    wait_until(LIMIT, "the second consumer attaches", || {
        block.consumer_of(pid).is_some()
    });
    assert!(
        producer
            .pipeline
            .seek_simple(gst::SeekFlags::FLUSH, gst::ClockTime::ZERO)
            .is_ok()
    );
    producer.wait_recorded(20);
    producer.eos();
    let stream2 = producer.take_records();
    drop(producer);
    let done = second.finish(LIMIT);
    done.assert_success("consumer of the second stream");
    assert_eq!(done.checksum_lines(), stream2);
}

#[test]
fn host_eos_ends_a_session_and_a_new_one_gets_the_next_stream() {
    eos_then_new_stream(HOST);
}

#[test]
fn cuda_eos_ends_a_session_and_a_new_one_gets_the_next_stream() {
    if gpu("cuda_eos_ends_a_session_and_a_new_one_gets_the_next_stream") {
        eos_then_new_stream(CUDA);
    }
}

/// Flushing seeks upstream of the sink, while it waits for a slot that a
/// slow consumer holds: the consumer gets exactly the frames the sink
/// published, in order and intact; a frame upstream was writing when the
/// flush came is never published.
fn flushing_seeks(sink: &str) {
    let channel = unique_channel("seek");
    let consumer = launch(&format!(
        "rscudaipcsrc channel={channel} timestamp-mode=producer connect-timeout=120000 ! identity sleep-time=5000 ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let producer = Producer::start(&channel, &caps("RGB", 320, 240), sink);
    for round in 1..=3 {
        producer.wait_recorded(20 * round);
        assert!(
            producer
                .pipeline
                .seek_simple(gst::SeekFlags::FLUSH, gst::ClockTime::ZERO)
                .is_ok()
        );
    }
    producer.wait_recorded(80);
    producer.eos();
    let published = producer.stat("frames");
    let recorded = producer.take_records();
    drop(producer);
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer");
    let got = done.checksum_lines();
    assert_eq!(got.len() as u64, published, "frames lost or invented");
    // A frame the flush caught between the probe and the sink is the only
    // one the sink may skip.
    assert!(got.len() + 3 >= recorded.len());
    let mut rest = recorded.iter();
    for line in &got {
        assert!(
            rest.any(|r| r == line),
            "{line} was not sent, or came out of order"
        );
    }
}

#[test]
fn host_flushing_seeks_upstream_push_no_stale_frame() {
    flushing_seeks(HOST);
}

#[test]
fn cuda_flushing_seeks_upstream_push_no_stale_frame() {
    if gpu("cuda_flushing_seeks_upstream_push_no_stale_frame") {
        flushing_seeks(CUDA);
    }
}

/// A live consumer (`is-live=true`, timestamps by arrival) does not preroll:
/// it must say so before it starts, or its pipeline never leaves PAUSED.
fn live_consumer(sink: &str) {
    let channel = unique_channel("live");
    let consumer = launch(&format!(
        "rscudaipcsrc channel={channel} is-live=true num-buffers=10 connect-timeout=120000 ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let producer = Producer::start(&channel, &caps("RGB", 320, 240), sink);
    let done = consumer.finish(LIMIT);
    done.assert_success("live consumer");
    assert_eq!(done.checksum_lines().len(), 10);
    drop(producer);
}

#[test]
fn host_live_consumer_starts() {
    live_consumer(HOST);
}

#[test]
fn cuda_live_consumer_starts() {
    if gpu("cuda_live_consumer_starts") {
        live_consumer(CUDA);
    }
}

/// A consumer of the latest frame promises never to hold the producer back:
/// it copies each frame it takes out of its slot (which goes back at once),
/// so a slow one keeps no slot of the ring while its downstream works. The
/// viewer is a child process: CUDA cannot open memory a process exported
/// itself.
fn latest_frame_consumer_copies(sink: &str) {
    let channel = unique_channel("latest");
    let producer = Producer::start(&channel, &caps("RGB", 320, 240), &format!("{sink} slots=2"));
    let viewer = PipelineChild::spawn(
        &format!(
            "rscudaipcsrc name=src channel={channel} frames=latest num-buffers=5 connect-timeout=120000 ! identity sleep-time=20000 ! fakesink sync=false"
        ),
        &["src"],
    );
    let end = viewer.finish(LIMIT);
    end.assert_success("viewer");
    let report = end.report.expect("the viewer's final report");
    let frames = report.num("src.frames");
    assert_eq!(frames, 5, "{report:?}");
    assert_eq!(report.num("src.copied"), frames, "{report:?}");
    drop(producer);
}

#[test]
fn host_latest_frame_consumer_copies_its_frames_out_of_the_slots() {
    latest_frame_consumer_copies(HOST);
}

#[test]
fn cuda_latest_frame_consumer_copies_its_frames_out_of_the_slots() {
    if gpu("cuda_latest_frame_consumer_copies_its_frames_out_of_the_slots") {
        latest_frame_consumer_copies(CUDA);
    }
}

/// One live producer (30 FPS) and four consumers in other processes: one at
/// the producer's pace, one asking for every frame (`frames=every`), and two
/// that take 100 ms and 500 ms a frame. The slow ones never hold the
/// producer back (it waits for no slot) nor the others (which get every
/// frame, intact and in order); they miss frames, count them and warn once.
fn live_channel_consumers_keep_their_own_pace(sink: &str) {
    const FRAMES: usize = 60;
    let channel = unique_channel("pace");
    let src = format!("rscudaipcsrc name=src channel={channel} connect-timeout=120000");
    let fast = launch(&format!("{src} ! checksumsink"));
    let every = launch(&format!("{src} frames=every ! checksumsink"));
    let slow: Vec<PipelineChild> = [100_000, 500_000]
        .iter()
        .map(|us| {
            PipelineChild::spawn(
                &format!("{src} ! identity sleep-time={us} ! fakesink sync=false"),
                &["src"],
            )
        })
        .collect();
    if !consumers_wait(&channel, 4, LIMIT) {
        // Say what each consumer did: one that gave up, or one that never
        // started.
        let mut ends: Vec<String> = [fast, every]
            .into_iter()
            .map(|c| c.finish(Duration::ZERO))
            .map(|end| format!("exit {:?}: {}", end.code, end.stderr))
            .collect();
        ends.extend(slow.into_iter().map(|c| {
            let end = c.finish(Duration::ZERO);
            format!("success {}: {}", end.success, end.stderr)
        }));
        panic!(
            "4 consumers did not start waiting on '{channel}' within {LIMIT:?}:\n{}",
            ends.join("\n")
        );
    }
    let producer = Producer::start_from(
        &format!(
            "videotestsrc is-live=true pattern=ball num-buffers={FRAMES} ! capsfilter caps={}",
            caps("RGB", 320, 240)
        ),
        &channel,
        sink,
    );
    producer.wait_recorded(FRAMES);
    let published: Vec<String> = producer
        .take_records()
        .iter()
        .map(|line| line.split_whitespace().nth(1).unwrap().to_string())
        .collect();
    for (consumer, what) in [
        (fast, "the consumer at the producer's pace"),
        (every, "frames=every"),
    ] {
        let done = consumer.finish(LIMIT);
        done.assert_success(what);
        assert!(
            done.checksums() == published,
            "{what}: {} frames, not the {FRAMES} published in order",
            done.checksums().len()
        );
    }
    // The producer never waited for the slow consumers: they hold at most a
    // frame each, and it does not wait for frames they have not taken. (It
    // may wait for the frames=every consumer, which asked for that: while it
    // opens the slots, say.) Waiting for the 2 FPS one would take over 20 s.
    let waited = Duration::from_nanos(producer.stat("slot-wait-time"));
    assert!(
        waited < Duration::from_secs(1),
        "the producer waited {waited:?} for slots"
    );
    let bus = producer.pipeline.bus().unwrap();
    let slow_pids: Vec<String> = slow.iter().map(|c| format!("pid {} ", c.pid())).collect();
    while let Some(msg) = bus.pop_filtered(&[gst::MessageType::Warning]) {
        if let gst::MessageView::Warning(w) = msg.view() {
            // While a consumer starts (it attached, it opens the slots) a
            // live producer keeps frames for it, slow or not (docs/elements.md,
            // "Consumers at their own pace"); after that, never.
            let text = w.error().to_string();
            assert!(
                !slow_pids.iter().any(|pid| text.contains(pid.as_str())
                    && !text.contains(&format!("{}(starting", pid.as_str()))),
                "the producer waited for a slow consumer: {text}"
            );
        }
    }
    for mut consumer in slow {
        consumer.send("quit");
        let end = consumer.finish(LIMIT);
        end.assert_success("a slow consumer");
        let report = end.report.expect("the slow consumer's final report");
        assert!(report.num("src.missed") > 0, "{report:?}");
        let warnings: Vec<&str> = end
            .stderr
            .lines()
            .filter(|l| l.starts_with("WARNING") && l.contains("missed"))
            .collect();
        assert_eq!(
            warnings.len(),
            1,
            "one warning, naming the fix: {}",
            end.stderr
        );
        assert!(warnings[0].contains("frames=every"), "{}", warnings[0]);
    }
    drop(producer);
}

#[test]
fn host_live_channel_consumers_keep_their_own_pace() {
    live_channel_consumers_keep_their_own_pace(HOST);
}

#[test]
fn cuda_live_channel_consumers_keep_their_own_pace() {
    if gpu("cuda_live_channel_consumers_keep_their_own_pace") {
        live_channel_consumers_keep_their_own_pace(CUDA);
    }
}

/// A consumer whose start is slow (it attached, then took 2.5 s before it
/// asked for a frame: a model to load, a CUDA context on a busy GPU) and
/// then keeps up gets every frame of a live producer from the first one
/// published after it attached: the producer keeps them for it while it
/// starts (up to `START_LIMIT`), far longer than its 8-slot ring lasts.
/// Small frames at 15 FPS, so that the reader (a debug build that hashes
/// every frame, beside other tests on a busy machine) keeps up.
fn a_slow_starting_consumer_gets_every_frame_from_its_attach(sink: &str) {
    const FRAMES: usize = 90;
    let channel = unique_channel("slow-start");
    let producer = Producer::start_from(
        &format!(
            "videotestsrc is-live=true pattern=ball num-buffers={FRAMES} ! capsfilter caps=video/x-raw,format=RGB,width=160,height=120,framerate=15/1"
        ),
        &channel,
        sink,
    );
    producer.wait_recorded(8);
    let before = producer.stat("frames");
    let reader = start_program(
        &example("api_read"),
        &[
            "--channel",
            &channel,
            "--timeout-ms",
            "30000",
            "--start-delay-ms",
            "2500",
        ],
        &[],
    );
    let sink = producer.pipeline.by_name("sink").unwrap();
    wait_until(LIMIT, "the reader attached", || {
        sink.property::<gst::Structure>("stats")
            .get::<u32>("consumers")
            .unwrap()
            == 1
    });
    let attached_by = producer.stat("frames");
    let read = reader.finish(LIMIT);
    read.assert_success("api_read, slow to start");
    let frames: Vec<(u64, &str)> = read
        .stdout
        .lines()
        .filter(|l| l.starts_with("frame="))
        .filter_map(|l| {
            let field = |key: &str| {
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            };
            Some((field("seq")?.parse().ok()?, field("sha1")?))
        })
        .collect();
    let first = frames.first().expect("frames read").0;
    assert!(
        (before..=attached_by).contains(&first),
        "its first frame is {first}: not the first published after it attached (between {before} and {attached_by})"
    );
    let seqs: Vec<u64> = frames.iter().map(|f| f.0).collect();
    let expected: Vec<u64> = (first..FRAMES as u64).collect();
    assert_eq!(
        seqs, expected,
        "every frame from its first to the end, in order"
    );
    let published: Vec<String> = producer
        .take_records()
        .iter()
        .map(|line| line.split_whitespace().nth(1).unwrap().to_string())
        .collect();
    let read_sums: Vec<&str> = frames.iter().map(|f| f.1).collect();
    assert_eq!(read_sums, published[first as usize..], "the frames' bytes");
}

#[test]
fn host_a_slow_starting_consumer_gets_every_frame_from_its_attach() {
    a_slow_starting_consumer_gets_every_frame_from_its_attach(HOST);
}

#[test]
fn cuda_a_slow_starting_consumer_gets_every_frame_from_its_attach() {
    if gpu("cuda_a_slow_starting_consumer_gets_every_frame_from_its_attach") {
        a_slow_starting_consumer_gets_every_frame_from_its_attach(CUDA);
    }
}

/// A consumer that asks for every frame (`frames=every`) and is slower than
/// a live producer holds it back, as it asked; the producer says which
/// consumer does, by pid, in a warning.
fn a_live_producer_names_the_consumer_that_holds_it_back(sink: &str) {
    let channel = unique_channel("held-back");
    let mut every = PipelineChild::spawn(
        &format!(
            "rscudaipcsrc name=src channel={channel} frames=every connect-timeout=120000 ! identity sleep-time=100000 ! fakesink sync=false"
        ),
        &["src"],
    );
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let producer = Producer::start_from(
        &format!(
            "videotestsrc is-live=true pattern=ball num-buffers=60 ! capsfilter caps={}",
            caps("RGB", 320, 240)
        ),
        &channel,
        sink,
    );
    let bus = producer.pipeline.bus().unwrap();
    let warning = bus
        .timed_pop_filtered(
            gst::ClockTime::from_seconds(30),
            &[gst::MessageType::Warning],
        )
        .expect("a warning that the producer waited for a consumer");
    let gst::MessageView::Warning(w) = warning.view() else {
        unreachable!()
    };
    let text = format!("{} {:?}", w.error(), w.debug());
    assert!(
        text.contains(&format!("pid {} ", every.pid())) && text.contains("frames=every"),
        "{text}"
    );
    assert!(producer.stat("waits") > 0);
    drop(producer);
    every.send("quit");
    let _ = every.finish(LIMIT);
}

#[test]
fn host_a_live_producer_names_the_consumer_that_holds_it_back() {
    a_live_producer_names_the_consumer_that_holds_it_back(HOST);
}

#[test]
fn cuda_a_live_producer_names_the_consumer_that_holds_it_back() {
    if gpu("cuda_a_live_producer_names_the_consumer_that_holds_it_back") {
        a_live_producer_names_the_consumer_that_holds_it_back(CUDA);
    }
}

/// The sink's ring (`slots=0`) on a live channel at 30 FPS: for one
/// consumer 4 slots (a tenth of a second of frames) on host memory and
/// under MPS, 8 where the processes' contexts take turns on the GPU;
/// and deeper, at once, for a consumer process whose downstream keeps
/// batches (`hold=8` needs 10 slots, which a ring of set depth refuses).
/// Each consumer gets every frame, intact and in order.
fn a_live_ring_is_sized_by_frame_rate_and_grows_for_a_declared_hold(sink: &str) {
    const FRAMES: usize = 45;
    let published = |producer: &Producer| -> Vec<String> {
        producer
            .take_records()
            .iter()
            .map(|line| line.split_whitespace().nth(1).unwrap().to_string())
            .collect()
    };
    let live_30 = format!(
        "videotestsrc is-live=true pattern=ball num-buffers={FRAMES} ! capsfilter caps={}",
        caps("RGB", 320, 240)
    );
    let slots = |producer: &Producer| {
        producer
            .pipeline
            .by_name("sink")
            .unwrap()
            .property::<gst::Structure>("stats")
            .get::<u32>("slots")
            .unwrap()
    };
    let time_sliced = sink == CUDA
        && !cudaipc_transport::cuda::Device::get(0)
            .unwrap()
            .mps_enabled();
    let live_depth = if time_sliced { 8 } else { 4 };
    for hold in [None, Some(8)] {
        let channel = unique_channel("live-depth");
        let declared = hold.map(|h| format!(" hold={h}")).unwrap_or_default();
        // A batching consumer: up to 9 frames downstream at once.
        let consumer = launch(&format!(
            "rscudaipcsrc channel={channel} frames=every connect-timeout=120000{declared} ! queue max-size-buffers=9 ! identity sleep-time=20000 ! checksumsink"
        ));
        wait_for_waiting_consumers(&channel, 1, LIMIT);
        let producer = Producer::start_from(&live_30, &channel, sink);
        producer.wait_recorded(FRAMES);
        let done = consumer.finish(LIMIT);
        done.assert_success(&format!("consumer{declared}"));
        assert_eq!(
            done.checksums(),
            published(&producer),
            "consumer{declared}: not every frame, intact and in order"
        );
        match hold {
            None => assert_eq!(slots(&producer), live_depth, "a live ring at 30 FPS"),
            Some(h) => assert!(
                slots(&producer) >= h + 2,
                "hold={h} needs {} slots, the ring has {}",
                h + 2,
                slots(&producer)
            ),
        }
    }
}

#[test]
fn host_a_live_ring_is_sized_by_frame_rate_and_grows_for_a_declared_hold() {
    a_live_ring_is_sized_by_frame_rate_and_grows_for_a_declared_hold(HOST);
}

#[test]
fn cuda_a_live_ring_is_sized_by_frame_rate_and_grows_for_a_declared_hold() {
    if gpu("cuda_a_live_ring_is_sized_by_frame_rate_and_grows_for_a_declared_hold") {
        a_live_ring_is_sized_by_frame_rate_and_grows_for_a_declared_hold(CUDA);
    }
}
