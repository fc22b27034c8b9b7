// SPDX-License-Identifier: MPL-2.0

// What travels with the frames between real processes: a producer whose
// buffers carry a reference timestamp (as rtspsrc/v4l2src add) and a custom
// meta (an application's detections), with a tag event before the first
// frame and a custom downstream event between two frames; a consumer that
// prints what its sink gets. Each process is this test binary run again as
// `travelling::travelling_child` (a harness drives the producer's sink, a
// pad probe watches the consumer's sink). With CUDAIPC_PEER_TEST_BINARY the
// consumer is that binary instead (the same tests built for, or run on,
// another GStreamer: scripts/test-gst-runtime.sh pairs 1.22 with 1.28).

use std::process::{Command, Stdio};
use std::time::Duration;

use gst::prelude::*;

use crate::common::{self, CUDA, HOST, Transport, checked, unique_channel};

const FRAMES: u64 = 30;
/// The custom event goes between this frame and the next.
const MARKER_AFTER: u64 = 9;
const DETECTIONS: &str = "TestDetections";

/// The reference timestamp of frame `n`: an NTP time, say.
fn reference_ns(n: u64) -> u64 {
    1_700_000_000_000_000_000 + n * 33_333_333 + 7
}

/// The child processes: `CUDAIPC_TRAVELLING_ROLE` is `producer` or
/// `consumer`, of channel `CUDAIPC_TRAVELLING_CHANNEL`.
#[test]
#[ignore = "entry point of the travelling tests' child processes"]
fn travelling_child() {
    common::init();
    let channel = std::env::var("CUDAIPC_TRAVELLING_CHANNEL").unwrap();
    match std::env::var("CUDAIPC_TRAVELLING_ROLE").as_deref() {
        Ok("producer") => produce(&channel, &std::env::var("CUDAIPC_TRAVELLING_SINK").unwrap()),
        Ok("consumer") => consume(&channel),
        other => panic!("role {other:?}"),
    }
}

fn produce(channel: &str, sink_props: &str) {
    gst::meta::CustomMeta::register(DETECTIONS, &[]);
    // Set up before the harness starts it: the channel is made at start.
    let sink = gst::ElementFactory::make("rscudaipcsink")
        .property("channel", channel)
        // The harness's clock is a test clock: a synced sink would wait on it.
        .property("sync", false)
        .build()
        .unwrap();
    for prop in sink_props.split_whitespace() {
        let (name, value) = prop.split_once('=').unwrap();
        sink.set_property_from_str(name, value);
    }
    let mut h = gst_check::Harness::with_element(&sink, Some("sink"), None);
    h.set_src_caps_str("video/x-raw,format=RGB,width=64,height=48,framerate=30/1");
    let mut tags = gst::TagList::new();
    tags.get_mut()
        .unwrap()
        .add::<gst::tags::Title>(&"cam-travelling", gst::TagMergeMode::Replace);
    assert!(h.push_event(gst::event::Tag::new(tags)));
    let reference = gst::Caps::builder("timestamp/x-ntp").build();
    for n in 0..FRAMES {
        let mut buffer = gst::Buffer::with_size(64 * 48 * 3).unwrap();
        {
            let b = buffer.get_mut().unwrap();
            b.set_pts(gst::ClockTime::from_mseconds(33 * n));
            gst::ReferenceTimestampMeta::add(
                b,
                &reference,
                gst::ClockTime::from_nseconds(reference_ns(n)),
                Some(gst::ClockTime::from_nseconds(1000)),
            );
            let mut detections = gst::meta::CustomMeta::add(b, DETECTIONS).unwrap();
            detections.mut_structure().set("n", n);
            detections.mut_structure().set("label", "person");
        }
        assert_eq!(h.push(buffer), Ok(gst::FlowSuccess::Ok), "frame {n}");
        if n == MARKER_AFTER {
            let marker = gst::Structure::builder("test-marker")
                .field("after", n)
                .build();
            assert!(h.push_event(gst::event::CustomDownstream::new(marker)));
        }
    }
    assert!(h.push_event(gst::event::Eos::new()));
    // Dropped: the sink stops and waits for the consumer to take the rest.
}

fn consume(channel: &str) {
    println!("RUNTIME {}", gst::version_string());
    let pipeline = gst::parse::launch(&format!(
        "rscudaipcsrc channel={channel} frames=every connect-timeout=60000 timestamp-mode=producer ! fakesink name=sink sync=false"
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    let sink = pipeline.by_name("sink").unwrap();
    sink.static_pad("sink").unwrap().add_probe(
        gst::PadProbeType::BUFFER | gst::PadProbeType::EVENT_DOWNSTREAM,
        |_, info| {
            match &info.data {
                Some(gst::PadProbeData::Buffer(buffer)) => println!("SEEN {}", describe(buffer)),
                Some(gst::PadProbeData::Event(event)) => match event.view() {
                    gst::EventView::Tag(tag) => {
                        let title = tag
                            .tag()
                            .get::<gst::tags::Title>()
                            .map(|t| t.get().to_owned());
                        println!("SEEN TAG title={}", title.unwrap_or_default());
                    }
                    gst::EventView::CustomDownstream(custom) => {
                        let s = custom.structure().unwrap();
                        println!(
                            "SEEN EVENT {} after={}",
                            s.name(),
                            s.get::<u64>("after").unwrap()
                        );
                    }
                    _ => {}
                },
                _ => {}
            }
            gst::PadProbeReturn::Ok
        },
    );
    pipeline.set_state(gst::State::Playing).unwrap();
    let bus = pipeline.bus().unwrap();
    let ended = bus.timed_pop_filtered(
        gst::ClockTime::from_seconds(120),
        &[gst::MessageType::Eos, gst::MessageType::Error],
    );
    pipeline.set_state(gst::State::Null).unwrap();
    match ended.as_ref().map(|m| m.view()) {
        Some(gst::MessageView::Eos(_)) => println!("SEEN END"),
        other => panic!("the consumer ended with {other:?}"),
    }
}

/// A buffer's reference timestamp and detections, as one line.
fn describe(buffer: &gst::BufferRef) -> String {
    let reference = buffer.meta::<gst::ReferenceTimestampMeta>().map(|m| {
        format!(
            "{}@{}",
            m.timestamp().nseconds(),
            m.reference().structure(0).unwrap().name()
        )
    });
    let detections = gst::meta::CustomMeta::from_buffer(buffer, DETECTIONS)
        .ok()
        .map(|m| {
            let s = m.structure();
            format!(
                "{}:{}",
                s.get::<u64>("n").unwrap_or(u64::MAX),
                s.get::<&str>("label").unwrap_or("?")
            )
        });
    format!(
        "FRAME ref={} det={}",
        reference.unwrap_or_default(),
        detections.unwrap_or_default()
    )
}

/// Runs `binary` (this one, or a peer's) as `role` of `channel`.
fn start(
    binary: &std::path::Path,
    role: &str,
    channel: &str,
    sink_props: &str,
) -> std::process::Child {
    start_with(&[], &[], binary, role, channel, sink_props)
}

/// Like `start`, through `wrapper` (e.g. `ip netns exec NS`), with `env`.
pub(crate) fn start_with(
    wrapper: &[&str],
    env: &[(&str, &str)],
    binary: &std::path::Path,
    role: &str,
    channel: &str,
    sink_props: &str,
) -> std::process::Child {
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(binary);
            c
        }
        None => Command::new(binary),
    };
    checked(&mut command)
        .envs(env.iter().copied())
        .args([
            "travelling::travelling_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CUDAIPC_TRAVELLING_ROLE", role)
        .env("CUDAIPC_TRAVELLING_CHANNEL", channel)
        .env("CUDAIPC_TRAVELLING_SINK", sink_props)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

pub(crate) fn finish(child: std::process::Child, what: &str, limit: Duration) -> String {
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(limit);
        // SAFETY: signalling our own child, which may have ended already
        // (then the pid is a zombie until waited for below: not reused).
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let out = child.wait_with_output().unwrap();
    drop(watchdog);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{what} failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    common::assert_no_glib_complaints(what, &stderr);
    stdout
}

fn metas_and_events_cross(transport: Transport, test: &str) {
    if !transport.runs_here(test) {
        return;
    }
    let channel = unique_channel("travelling");
    let own = std::env::current_exe().unwrap();
    let peer = std::env::var_os("CUDAIPC_PEER_TEST_BINARY").map(std::path::PathBuf::from);
    let consumer = start(peer.as_deref().unwrap_or(&own), "consumer", &channel, "");
    common::wait_for_waiting_consumers(&channel, 1, transport.limit);
    let producer = start(&own, "producer", &channel, transport.sink);
    finish(producer, "the producer", transport.limit);
    let seen = finish(consumer, "the consumer", transport.limit);
    // The peer is on the GStreamer it should be (scripts/test-gst-runtime.sh).
    if let Ok(version) = std::env::var("CUDAIPC_PEER_EXPECT_GST") {
        let runtime = format!("RUNTIME GStreamer {version}.");
        assert!(seen.contains(&runtime), "no '{runtime}' in:\n{seen}");
    }
    assert_eq!(
        seen_lines(&seen),
        expected_seen(),
        "what the consumer's sink got:\n{seen}"
    );
}

/// What the consumer's sink got, one line each.
pub(crate) fn seen_lines(seen: &str) -> Vec<&str> {
    seen.lines()
        // The test harness's own lines may share a line with ours.
        .filter_map(|l| l.split_once("SEEN ").map(|(_, seen)| seen))
        .collect()
}

/// What the producer sent, as `seen_lines` gives it.
pub(crate) fn expected_seen() -> Vec<String> {
    let mut expected = vec!["TAG title=cam-travelling".to_owned()];
    for n in 0..FRAMES {
        expected.push(format!(
            "FRAME ref={}@timestamp/x-ntp det={n}:person",
            reference_ns(n)
        ));
        if n == MARKER_AFTER {
            expected.push(format!("EVENT test-marker after={n}"));
        }
    }
    expected.push("END".into());
    expected
}

#[test]
fn host_metas_tags_and_custom_events_cross_in_order() {
    metas_and_events_cross(HOST, "host_metas_tags_and_custom_events_cross_in_order");
}

#[test]
fn cuda_metas_tags_and_custom_events_cross_in_order() {
    metas_and_events_cross(CUDA, "cuda_metas_tags_and_custom_events_cross_in_order");
}
