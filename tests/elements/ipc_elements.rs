// cudaipcsink and cudaipcsrc as elements: registration, properties, errors,
// and the pair inside one process with gst_check::Harness (host transport).

use crate::common;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use common::{init, unique_channel};
use cudaipc_channel::{Consumer, ConsumerConfig, Item};
use gst::glib;
use gst::prelude::*;

fn caps(format: &str, width: u32, height: u32) -> gst::Caps {
    format!("video/x-raw,format={format},width={width},height={height},framerate=30/1")
        .parse()
        .unwrap()
}

fn frame(size: usize, seed: u8, pts_ms: u64) -> gst::Buffer {
    let data: Vec<u8> = (0..size)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    let mut buffer = gst::Buffer::from_mut_slice(data);
    buffer
        .get_mut()
        .unwrap()
        .set_pts(gst::ClockTime::from_mseconds(pts_ms));
    buffer
}

/// A harness around one element made from `description` ("factory k=v ...").
fn harness(description: &str) -> gst_check::Harness {
    let element = gst::parse::launch(description)
        .unwrap()
        .downcast::<gst::Element>()
        .unwrap();
    let element = match element.downcast::<gst::Bin>() {
        Ok(bin) => bin.children().pop().unwrap(),
        Err(element) => element,
    };
    let has_sink = element.static_pad("sink").is_some();
    let has_src = element.static_pad("src").is_some();
    gst_check::Harness::with_element(
        &element,
        has_sink.then_some("sink"),
        has_src.then_some("src"),
    )
}

/// A channel-level consumer (no element), for tests that hold frames.
fn attach(channel: &str) -> Consumer {
    Consumer::attach(
        ConsumerConfig {
            channel: channel.to_string(),
            connect_timeout: Some(Duration::from_secs(5)),
            ..Default::default()
        },
        &AtomicBool::new(false),
    )
    .unwrap()
}

fn stats(element: &gst::Element) -> gst::Structure {
    element.property::<gst::Structure>("stats")
}

#[test]
fn elements_register_under_both_names_with_unique_types() {
    init();
    for (name, alias, type_name) in [
        ("rscudaipcsink", "rscudaipcsink", "GstRsCudaIpcSink"),
        ("rscudaipcsrc", "rscudaipcsrc", "GstRsCudaIpcSrc"),
    ] {
        let a = gst::ElementFactory::make(name).build().unwrap();
        let b = gst::ElementFactory::make(alias).build().unwrap();
        assert_eq!(a.type_().name(), type_name);
        assert_eq!(b.type_(), a.type_());
    }
}

#[test]
fn properties_have_documented_defaults() {
    init();
    let sink = gst::ElementFactory::make("rscudaipcsink").build().unwrap();
    assert_eq!(sink.property::<String>("channel"), "default");
    assert_eq!(sink.property::<u32>("slots"), 0, "automatic");
    assert_eq!(sink.property::<u32>("permissions"), 0o600);
    assert_eq!(sink.property::<i32>("cuda-device-id"), 0);
    for (property, nick) in [
        ("transport", "auto"),
        ("when-full", "block"),
        ("wait-mode", "hybrid"),
        ("gpu-sync", "auto"),
    ] {
        let value = sink.property_value(property);
        let (_, enum_value) = glib::EnumValue::from_value(&value).unwrap();
        assert_eq!(enum_value.nick(), nick, "{property}");
    }
    let s = stats(&sink);
    for field in [
        "frames",
        "dropped",
        "waits",
        "render-time",
        "slot-wait-time",
        "read-wait-time",
        "zero-copy",
        "copied",
    ] {
        assert_eq!(s.get::<u64>(field).unwrap(), 0, "{field}");
    }

    let src = gst::ElementFactory::make("rscudaipcsrc").build().unwrap();
    assert_eq!(src.property::<String>("channel"), "default");
    assert_eq!(src.property::<i32>("cuda-device-id"), -1);
    assert_eq!(src.property::<i64>("connect-timeout"), 10_000);
    assert!(!src.property::<bool>("is-live"));
    for (property, nick) in [
        ("wait-mode", "hybrid"),
        ("on-producer-lost", "error"),
        ("frames", "auto"),
    ] {
        let value = src.property_value(property);
        let (_, enum_value) = glib::EnumValue::from_value(&value).unwrap();
        assert_eq!(enum_value.nick(), nick, "{property}");
    }
    let s = stats(&src);
    // How frames left: wrapped or copied, and as GstCudaMemory for
    // GStreamer's CUDA elements (slots wrapped on 1.24+, copies on 1.22).
    for field in [
        "frames",
        "copied",
        "gstcuda-wrapped",
        "gstcuda-copied",
        "latency-p50-ns",
    ] {
        assert_eq!(s.get::<u64>(field).unwrap(), 0, "{field} in {s}");
    }
    // stats is read-only.
    let pspec = src.find_property("stats").unwrap();
    assert!(!pspec.flags().contains(glib::ParamFlags::WRITABLE));
}

/// Starts `launch` and returns the text of the error it posts.
fn start_error(launch: &str) -> String {
    let pipeline = gst::parse::launch(launch).unwrap();
    assert!(pipeline.set_state(gst::State::Paused).is_err());
    let msg = pipeline
        .bus()
        .unwrap()
        .timed_pop_filtered(gst::ClockTime::from_seconds(5), &[gst::MessageType::Error])
        .expect("an error message");
    pipeline.set_state(gst::State::Null).unwrap();
    let gst::MessageView::Error(e) = msg.view() else {
        unreachable!()
    };
    e.error().to_string()
}

#[test]
fn a_bad_channel_name_fails_at_start_with_a_clear_message() {
    init();
    let text = start_error(
        "videotestsrc num-buffers=1 ! video/x-raw,width=16,height=16 ! rscudaipcsink channel=../etc transport=host",
    );
    assert!(text.contains("is invalid"), "{text}");
    assert!(text.contains("../etc"), "{text}");
}

#[test]
fn transport_cuda_without_a_gpu_fails_clearly() {
    init();
    if cudaipc_transport::cuda::is_available() {
        eprintln!("SKIPPED: a CUDA device is present (this checks the no-GPU error)");
        return;
    }
    let text = start_error(&format!(
        "videotestsrc num-buffers=1 ! video/x-raw,width=16,height=16 ! rscudaipcsink transport=cuda channel={}",
        unique_channel("nocuda")
    ));
    assert!(
        text.contains("transport=cuda needs CUDA device 0"),
        "{text}"
    );
    assert!(
        text.contains("libcuda") || text.contains("no usable CUDA device"),
        "{text}"
    );
}

#[test]
fn sink_and_source_in_one_process_deliver_frames_and_stats() {
    init();
    let channel = unique_channel("harness");
    let mut sink = harness(&format!(
        "rscudaipcsink channel={channel} transport=host slots=3 sync=false"
    ));
    sink.set_src_caps(caps("RGBA", 64, 48));
    sink.play();
    // The harness answers latency queries as a live source, which makes the
    // channel live: every frame is asked for.
    let mut src = harness(&format!(
        "rscudaipcsrc channel={channel} timestamp-mode=producer connect-timeout=5000 frames=every"
    ));
    src.play();
    // A consumer that attaches to a running channel starts with the next
    // frame: wait until it is there before pushing.
    let start = std::time::Instant::now();
    while stats(&sink.element().unwrap())
        .get::<u32>("consumers")
        .unwrap()
        < 1
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the source did not attach"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let size = 64 * 48 * 4;
    let pusher = std::thread::spawn(move || {
        for i in 0..20u8 {
            assert_eq!(
                sink.push(frame(size, i, i as u64 * 33)),
                Ok(gst::FlowSuccess::Ok)
            );
        }
        sink.push_event(gst::event::Eos::new());
        sink
    });
    for i in 0..20u8 {
        let buffer = src.pull().expect("a frame");
        assert_eq!(
            buffer.pts(),
            Some(gst::ClockTime::from_mseconds(i as u64 * 33))
        );
        let map = buffer.map_readable().unwrap();
        assert!(
            map[..] == frame(size, i, 0).map_readable().unwrap()[..],
            "frame {i}"
        );
    }
    let sink = pusher.join().unwrap();
    // The source's output caps are the producer's.
    let out_caps = src.sinkpad().unwrap().current_caps().unwrap();
    let info = gst_video::VideoInfo::from_caps(&out_caps).unwrap();
    assert_eq!(
        (info.format(), info.width(), info.height()),
        (gst_video::VideoFormat::Rgba, 64, 48)
    );
    let sink_stats = stats(&sink.element().unwrap());
    assert_eq!(sink_stats.get::<u64>("frames").unwrap(), 20);
    assert_eq!(sink_stats.get::<u32>("consumers").unwrap(), 1);
    let src_stats = stats(&src.element().unwrap());
    assert_eq!(src_stats.get::<u64>("frames").unwrap(), 20);
    assert_eq!(src_stats.get::<u64>("missed").unwrap(), 0);
    assert_eq!(src_stats.get::<u64>("latency-count").unwrap(), 20);
    assert!(src_stats.get::<u64>("latency-max-ns").unwrap() > 0);
}

#[test]
fn the_sink_proposes_a_pool_whose_buffers_are_the_slots() {
    init();
    let channel = unique_channel("pool");
    let mut h = harness(&format!(
        "rscudaipcsink channel={channel} transport=host slots=2 sync=false"
    ));
    let caps = caps("GRAY8", 32, 16);
    h.set_src_caps(caps.clone());
    h.play();
    let mut query = gst::query::Allocation::new(Some(&caps), true);
    assert!(h.srcpad().unwrap().peer_query(&mut query));
    let (pool, size, _, _) = query.allocation_pools().next().expect("a proposed pool");
    let pool = pool.expect("a pool object");
    assert_eq!(size, 32 * 16);
    pool.set_active(true).unwrap();
    let no = AtomicBool::new(false);
    let mut consumer = attach(&channel);
    for i in 0..6u8 {
        let mut buffer = pool.acquire_buffer(None).unwrap();
        buffer.get_mut().unwrap().map_writable().unwrap().fill(i);
        assert_eq!(h.push(buffer), Ok(gst::FlowSuccess::Ok));
        let Item::Frame(f) = consumer.next(&no, Some(Duration::from_secs(5))).unwrap() else {
            panic!("expected a frame");
        };
        assert_eq!(f.size, 32 * 16);
        consumer.release(f.slot);
    }
    let s = stats(&h.element().unwrap());
    assert_eq!(s.get::<u64>("zero-copy").unwrap(), 6, "{s}");
    assert_eq!(s.get::<u64>("copied").unwrap(), 0, "{s}");
    // A buffer dropped unpublished gives its slot back.
    let unused = pool.acquire_buffer(None).unwrap();
    drop(unused);
    let again = pool.acquire_buffer(None).unwrap();
    let again2 = pool.acquire_buffer(None).unwrap();
    drop((again, again2));
    pool.set_active(false).unwrap();
}

/// The slot a buffer of the sink's pool wraps travels with the buffer's
/// memory: a copy of the buffer (an element that changes its timestamps)
/// is still published without a copy, and another sink that gets the buffer
/// (behind a tee) copies the frame and leaves the slot to the sink it is of.
#[test]
fn a_pool_buffers_slot_travels_with_its_memory_to_the_sink_it_is_of() {
    init();
    let lender_channel = unique_channel("lender");
    let other_channel = unique_channel("other");
    let sink = |channel: &str| {
        harness(&format!(
            "rscudaipcsink channel={channel} transport=host slots=2 sync=false"
        ))
    };
    let (mut lender, mut other) = (sink(&lender_channel), sink(&other_channel));
    let caps = caps("GRAY8", 32, 16);
    for h in [&mut lender, &mut other] {
        h.set_src_caps(caps.clone());
        h.play();
    }
    let mut query = gst::query::Allocation::new(Some(&caps), true);
    assert!(lender.srcpad().unwrap().peer_query(&mut query));
    let (pool, ..) = query.allocation_pools().next().expect("a proposed pool");
    let pool = pool.expect("a pool object");
    pool.set_active(true).unwrap();
    let no = AtomicBool::new(false);
    let mut lender_consumer = attach(&lender_channel);
    let mut other_consumer = attach(&other_channel);

    let mut buffer = pool.acquire_buffer(None).unwrap();
    buffer.get_mut().unwrap().map_writable().unwrap().fill(7);
    assert_eq!(other.push(buffer.clone()), Ok(gst::FlowSuccess::Ok));
    let mut retimed = buffer.copy();
    drop(buffer);
    retimed
        .get_mut()
        .unwrap()
        .set_pts(gst::ClockTime::from_mseconds(40));
    assert_eq!(lender.push(retimed), Ok(gst::FlowSuccess::Ok));

    for (consumer, pts) in [
        (&mut other_consumer, None),
        (&mut lender_consumer, Some(40)),
    ] {
        let Item::Frame(f) = consumer.next(&no, Some(Duration::from_secs(5))).unwrap() else {
            panic!("expected a frame");
        };
        assert_eq!((f.size, f.pts), (32 * 16, pts.map(|ms| ms * 1_000_000)));
        consumer.release(f.slot);
    }
    let (l, o) = (
        stats(&lender.element().unwrap()),
        stats(&other.element().unwrap()),
    );
    assert_eq!(
        (
            l.get::<u64>("zero-copy").unwrap(),
            l.get::<u64>("copied").unwrap()
        ),
        (1, 0),
        "{l}"
    );
    assert_eq!(
        (
            o.get::<u64>("zero-copy").unwrap(),
            o.get::<u64>("copied").unwrap()
        ),
        (0, 1),
        "{o}"
    );
    pool.set_active(false).unwrap();
}

#[test]
fn drop_mode_drops_and_counts_instead_of_waiting() {
    init();
    let channel = unique_channel("dropmode");
    let mut h = harness(&format!(
        "rscudaipcsink channel={channel} transport=host slots=2 when-full=drop sync=false"
    ));
    h.set_src_caps(caps("GRAY8", 16, 16));
    h.play();
    let no = AtomicBool::new(false);
    let mut consumer = attach(&channel);
    // The consumer takes the first two frames and never gives them back.
    let mut held = vec![];
    for i in 0..2u8 {
        assert_eq!(h.push(frame(256, i, i as u64)), Ok(gst::FlowSuccess::Ok));
        let Item::Frame(f) = consumer.next(&no, Some(Duration::from_secs(5))).unwrap() else {
            panic!("expected a frame");
        };
        held.push(f);
    }
    let start = std::time::Instant::now();
    for i in 2..12u8 {
        assert_eq!(h.push(frame(256, i, i as u64)), Ok(gst::FlowSuccess::Ok));
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "drop mode must not wait"
    );
    let s = stats(&h.element().unwrap());
    assert_eq!(s.get::<u64>("frames").unwrap(), 2, "{s}");
    assert_eq!(s.get::<u64>("dropped").unwrap(), 10, "{s}");
    for f in held {
        consumer.release(f.slot);
    }
    assert_eq!(h.push(frame(256, 99, 99)), Ok(gst::FlowSuccess::Ok));
    assert_eq!(
        stats(&h.element().unwrap()).get::<u64>("frames").unwrap(),
        3
    );
}

/// `stats-interval` posts the stats structure on the bus while frames flow.
#[test]
fn stats_are_posted_on_the_bus_at_the_interval() {
    init();
    let channel = unique_channel("statsmsg");
    let producer = gst::parse::launch(&format!(
        "videotestsrc is-live=true num-buffers=40 ! video/x-raw,width=64,height=48,framerate=100/1 ! rscudaipcsink channel={channel} transport=host stats-interval=100"
    ))
    .unwrap();
    let consumer = gst::parse::launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=5000 stats-interval=100 ! fakesink"
    ))
    .unwrap();
    consumer.set_state(gst::State::Playing).unwrap();
    producer.set_state(gst::State::Playing).unwrap();
    let mut seen = std::collections::HashSet::new();
    for (pipeline, name) in [
        (&consumer, "cudaipcsrc-stats"),
        (&producer, "cudaipcsink-stats"),
    ] {
        let bus = pipeline.bus().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            let Some(msg) = bus.timed_pop_filtered(
                gst::ClockTime::from_mseconds(100),
                &[gst::MessageType::Element, gst::MessageType::Error],
            ) else {
                continue;
            };
            if let gst::MessageView::Error(e) = msg.view() {
                panic!("{}", e.error());
            }
            let s = msg.structure().unwrap();
            if s.name() == name {
                assert!(s.get::<u64>("frames").unwrap() > 0, "{s}");
                seen.insert(name);
                break;
            }
        }
    }
    producer.set_state(gst::State::Null).unwrap();
    consumer.set_state(gst::State::Null).unwrap();
    assert_eq!(seen.len(), 2, "{seen:?}");
}
