use super::*;

fn round_trip(event: &gst::Event) -> gst::Event {
    let bytes = encode_event(event).expect("the event crosses");
    assert_eq!(&bytes[..4], b"CIPE");
    let decoded = decode_event(&bytes).unwrap();
    assert_eq!(decoded.type_(), event.type_());
    decoded
}

fn header(event_type: ffi::GstEventType) -> Vec<u8> {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&(event_type as u32).to_le_bytes());
    bytes
}

fn with_text(event_type: ffi::GstEventType, text: &str) -> Vec<u8> {
    let mut bytes = header(event_type);
    bytes.extend_from_slice(text.as_bytes());
    bytes
}

#[test]
fn tags_cross_with_their_scope() {
    gst::init().unwrap();
    for scope in [gst::TagScope::Global, gst::TagScope::Stream] {
        let mut tags = gst::TagList::new();
        {
            let tags = tags.get_mut().unwrap();
            tags.add::<gst::tags::Title>(
                &"a \"title\", with; [odd] chars",
                gst::TagMergeMode::Append,
            );
            tags.add::<gst::tags::Bitrate>(&1234, gst::TagMergeMode::Append);
            tags.set_scope(scope);
        }
        let decoded = round_trip(&gst::event::Tag::new(tags.clone()));
        let gst::EventView::Tag(decoded) = decoded.view() else {
            unreachable!()
        };
        assert_eq!(decoded.tag().scope(), scope);
        assert_eq!(decoded.tag().to_string(), tags.to_string());
    }
}

#[test]
fn stream_starts_cross_with_flags_and_group() {
    gst::init().unwrap();
    let group = gst::GroupId::next();
    let event = gst::event::StreamStart::builder("producer/video/0")
        .flags(gst::StreamFlags::SPARSE | gst::StreamFlags::SELECT)
        .group_id(group)
        .build();
    let decoded = round_trip(&event);
    let gst::EventView::StreamStart(decoded) = decoded.view() else {
        unreachable!()
    };
    assert_eq!(decoded.stream_id(), "producer/video/0");
    assert_eq!(
        decoded.stream_flags(),
        gst::StreamFlags::SPARSE | gst::StreamFlags::SELECT
    );
    assert_eq!(decoded.group_id(), Some(group));
    let plain = round_trip(&gst::event::StreamStart::new("plain"));
    let gst::EventView::StreamStart(plain) = plain.view() else {
        unreachable!()
    };
    assert_eq!(plain.group_id(), None);
}

#[test]
fn a_stream_object_stays_behind() {
    gst::init().unwrap();
    let stream = gst::Stream::new(
        Some("s0"),
        None,
        gst::StreamType::VIDEO,
        gst::StreamFlags::empty(),
    );
    let event = gst::event::StreamStart::builder("s0")
        .stream(stream)
        .build();
    assert!(event.structure().unwrap().has_field("stream"));
    let decoded = round_trip(&event);
    assert!(!decoded.structure().unwrap().has_field("stream"));
}

#[test]
fn gaps_cross_with_duration_and_flags() {
    gst::init().unwrap();
    let mut event = gst::event::Gap::builder(gst::ClockTime::from_seconds(2))
        .duration(gst::ClockTime::from_mseconds(40))
        .build();
    // GST_GAP_FLAG_MISSING_DATA (1.20).
    // SAFETY: a new event, not shared.
    unsafe { gst_api::gst_event_set_gap_flags(event.make_mut().as_mut_ptr(), 1) };
    let decoded = round_trip(&event);
    let gst::EventView::Gap(gap) = decoded.view() else {
        unreachable!()
    };
    assert_eq!(
        gap.get(),
        (
            gst::ClockTime::from_seconds(2),
            Some(gst::ClockTime::from_mseconds(40))
        )
    );
    let mut flags = 0;
    // SAFETY: a gap event, borrowed.
    unsafe { gst_api::gst_event_parse_gap_flags(decoded.as_mut_ptr(), &mut flags) };
    assert_eq!(flags, 1);
    let open = round_trip(&gst::event::Gap::new(
        gst::ClockTime::ZERO,
        gst::ClockTime::NONE,
    ));
    let gst::EventView::Gap(open) = open.view() else {
        unreachable!()
    };
    assert_eq!(open.get(), (gst::ClockTime::ZERO, None));
}

#[test]
fn segments_cross_with_their_rates() {
    gst::init().unwrap();
    let mut time = gst::FormattedSegment::<gst::ClockTime>::new();
    time.set_rate(2.0);
    time.set_applied_rate(0.5);
    time.set_start(gst::ClockTime::from_seconds(3));
    time.set_base(gst::ClockTime::from_seconds(1));
    let mut bytes = gst::FormattedSegment::<gst::format::Bytes>::new();
    bytes.set_rate(-1.0);
    for segment in [time.upcast(), bytes.upcast()] {
        let decoded = round_trip(&gst::event::Segment::new(&segment));
        let gst::EventView::Segment(decoded) = decoded.view() else {
            unreachable!()
        };
        assert_eq!(decoded.segment(), &segment);
    }
}

#[test]
fn custom_events_cross_nested_two_levels_deep() {
    gst::init().unwrap();
    let structure = gst::Structure::builder("my-app-event")
        .field("id", 7i32)
        .field("text", "hi, \"there\"")
        .field(
            "nested",
            gst::Structure::builder("outer")
                .field(
                    "inner",
                    gst::Structure::builder("inner").field("x", 1.5f64).build(),
                )
                .build(),
        )
        .field(
            "caps",
            gst::Caps::builder("video/x-raw").field("width", 8).build(),
        )
        .build();
    for event in [
        gst::event::CustomDownstream::new(structure.clone()),
        gst::event::CustomDownstreamSticky::new(structure.clone()),
        gst::event::CustomBoth::new(structure.clone()),
    ] {
        let decoded = round_trip(&event);
        assert_eq!(decoded.structure().unwrap(), structure.as_ref());
    }
    // A custom event without a structure.
    // SAFETY: a custom type and no structure, as C allows.
    let bare = unsafe {
        gst::Event::from_glib_full(ffi::gst_event_new_custom(
            ffi::GST_EVENT_CUSTOM_DOWNSTREAM,
            std::ptr::null_mut(),
        ))
    };
    assert!(round_trip(&bare).structure().is_none());
}

#[test]
fn events_that_stay_are_not_encoded() {
    gst::init().unwrap();
    let seek = gst::event::Seek::new(
        1.0,
        gst::SeekFlags::FLUSH,
        gst::SeekType::Set,
        gst::ClockTime::ZERO,
        gst::SeekType::None,
        gst::ClockTime::NONE,
    );
    let s = || gst::Structure::new_empty("x");
    for event in [
        gst::event::FlushStart::new(),
        gst::event::FlushStop::new(true),
        gst::event::Caps::new(&gst::Caps::builder("video/x-raw").field("width", 8).build()),
        gst::event::Eos::new(),
        gst::event::Qos::new(gst::QOSType::Overflow, 1.0, 0, gst::ClockTime::ZERO),
        seek,
        gst::event::Reconfigure::new(),
        gst::event::CustomUpstream::new(s()),
        gst::event::CustomDownstreamOob::new(s()),
        gst::event::Latency::new(gst::ClockTime::ZERO),
    ] {
        assert_eq!(encode_event(&event), None, "{:?}", event.type_());
    }
}

#[test]
fn hostile_events_are_refused() {
    gst::init().unwrap();
    let valid = encode_event(&gst::event::StreamStart::new("abc")).unwrap();
    for cut in 0..valid.len() {
        assert!(decode_event(&valid[..cut]).is_err(), "cut at {cut}");
    }
    let mut bad = valid.clone();
    bad[0] = b'X';
    assert!(matches!(
        decode_event(&bad),
        Err(EventDecodeError::BadMagic { .. })
    ));
    let mut bad = valid.clone();
    bad[4] = 9;
    assert!(matches!(
        decode_event(&bad),
        Err(EventDecodeError::UnsupportedVersion { .. })
    ));
    let text = "GstEventStreamStart, stream-id=(string)abc;";
    for event_type in [
        0x0dea_dbee,
        0,
        ffi::GST_EVENT_FLUSH_START,
        ffi::GST_EVENT_FLUSH_STOP,
        ffi::GST_EVENT_EOS,
        ffi::GST_EVENT_CAPS,
        ffi::GST_EVENT_QOS,
        ffi::GST_EVENT_SEEK,
        ffi::GST_EVENT_CUSTOM_UPSTREAM,
        ffi::GST_EVENT_CUSTOM_DOWNSTREAM_OOB,
    ] {
        assert_eq!(
            decode_event(&with_text(event_type, text)).err(),
            Some(EventDecodeError::NotCarried {
                event_type: event_type as u32
            })
        );
    }
    let start = ffi::GST_EVENT_STREAM_START;
    let mut nul = with_text(start, text);
    nul[12] = 0;
    assert_eq!(decode_event(&nul).err(), Some(EventDecodeError::NotText));
    let mut not_utf8 = with_text(start, text);
    not_utf8[12] = 0xff;
    assert_eq!(
        decode_event(&not_utf8).err(),
        Some(EventDecodeError::NotText)
    );
    for (event_type, text) in [
        (start, "=== not a structure"),
        (start, ""),
        (start, "GstEventGap, stream-id=(string)abc;"),
        (start, "GstEventStreamStart, stream-id=(int)5;"),
        (start, "GstEventStreamStart, stream-id=(string)abc"),
        (start, "GstEventStreamStart, flags=(string)x;"),
        (
            start,
            "GstEventStreamStart, stream-id=(string)a, group-id=(string)g;",
        ),
        (
            ffi::GST_EVENT_GAP,
            "GstEventGap, timestamp=(guint64)18446744073709551615;",
        ),
        (ffi::GST_EVENT_GAP, "GstEventGap, duration=(guint64)1;"),
        (
            ffi::GST_EVENT_GAP,
            "GstEventGap, timestamp=(guint64)1, gap-flags=(string)x;",
        ),
        (
            ffi::GST_EVENT_TAG,
            "GstTagList-weird, taglist=(taglist)\"taglist;\";",
        ),
        (ffi::GST_EVENT_TAG, "GstTagList-global, taglist=(int)1;"),
        (ffi::GST_EVENT_SEGMENT, "GstEventSegment;"),
    ] {
        assert!(
            decode_event(&with_text(event_type, text)).is_err(),
            "{text}"
        );
    }
    // Segments whose values gst_event_new_segment refuses.
    let segment = encode_event(&gst::event::Segment::new(&gst::FormattedSegment::<
        gst::ClockTime,
    >::new()))
    .unwrap();
    let text = std::str::from_utf8(&segment[HEADER_LEN..]).unwrap();
    for (from, to) in [
        ("rate=(double)1", "rate=(double)0"),
        ("applied-rate=(double)1", "applied-rate=(double)0"),
        ("format=(GstFormat)time", "format=(GstFormat)undefined"),
    ] {
        assert!(text.contains(from), "{text}");
        let hostile = with_text(ffi::GST_EVENT_SEGMENT, &text.replacen(from, to, 1));
        assert!(
            matches!(
                decode_event(&hostile),
                Err(EventDecodeError::InvalidValue { .. })
            ),
            "{to}"
        );
    }
}

#[test]
fn garbage_after_a_valid_header_never_panics() {
    gst::init().unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..500 {
        let event_type = CARRIED[round % CARRIED.len()];
        let len = round % 60;
        let text: String = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                // Printable ASCII, structure punctuation included.
                (b' ' + (state % 95) as u8) as char
            })
            .collect();
        let _ = decode_event(&with_text(event_type, &text));
    }
}
