// cudaprocess verify=true: every generated frame passes, another pattern,
// a planted corrupt frame, a gap and a new stream are caught (GPU host).

use super::*;

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
            let at = random.next_u64() as usize % (layout.size - 8) + 8;
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
