use std::str::FromStr;

use super::super::gstreamer_serializes_metas;
use super::*;
use cudaipc_channel::frame_data::{self as blob, FrameDataWriter};

const TEST_META: &str = "CudaIpcTestMeta";
const TEST_META_C: &std::ffi::CStr = c"CudaIpcTestMeta";
const MEMORY_META_C: &std::ffi::CStr = c"CudaIpcTestMemoryMeta";
const NTP: &str = "timestamp/x-ntp, host=(string)pool.ntp.org, port=(int)123";

fn init() {
    gst::init().unwrap();
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        let mut none = [std::ptr::null()];
        let mut memory = [c"memory".as_ptr(), std::ptr::null()];
        // SAFETY: static names, NULL-terminated tag lists, no transform.
        unsafe {
            for (name, tags) in [
                (TEST_META_C, none.as_mut_ptr()),
                (MEMORY_META_C, memory.as_mut_ptr()),
            ] {
                gst_api::gst_meta_register_custom(
                    name.as_ptr(),
                    tags,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                    std::ptr::null(),
                );
            }
        }
    });
}

/// A copy of the structure of `buffer`'s custom meta `name`.
fn custom(buffer: &gst::BufferRef, name: &std::ffi::CStr) -> Option<gst::Structure> {
    // SAFETY: a read-only lookup; the structure is copied while the buffer
    // is borrowed.
    unsafe {
        let meta = gst_api::gst_buffer_get_custom_meta(buffer.as_mut_ptr(), name.as_ptr());
        (!meta.is_null()).then(|| gst::StructureRef::from_glib_borrow((*meta).structure).to_owned())
    }
}

/// The structure of a custom meta `name` added to `buffer`.
fn add_custom<'a>(
    buffer: &'a mut gst::BufferRef,
    name: &std::ffi::CStr,
) -> &'a mut gst::StructureRef {
    // SAFETY: a writable buffer (borrowed mutably); the meta is registered
    // (init) and its structure lives as long as the buffer.
    unsafe {
        let meta = gst_api::gst_buffer_add_custom_meta(buffer.as_mut_ptr(), name.as_ptr());
        assert!(!meta.is_null());
        gst::StructureRef::from_glib_borrow_mut((*meta).structure)
    }
}

/// A buffer with a reference timestamp meta and a custom meta of many
/// field types.
fn buffer_with_metas() -> gst::Buffer {
    // Room for a 4x4 RGBA frame's GstVideoMeta.
    let mut buffer = gst::Buffer::with_size(64).unwrap();
    let b = buffer.get_mut().unwrap();
    gst::ReferenceTimestampMeta::add(
        b,
        &gst::Caps::from_str(NTP).unwrap(),
        gst::ClockTime::from_nseconds(1_234_567_890),
        gst::ClockTime::NONE,
    );
    let s = add_custom(b, TEST_META_C);
    s.set("int", -7i32);
    s.set("text", "a \"quoted\", spaced; text");
    s.set("double", 0.1f64);
    s.set("flag", true);
    s.set("big", u64::MAX);
    s.set(
        "nested",
        gst::Structure::builder("inner")
            .field(
                "deeper",
                gst::Structure::builder("deepest").field("x", 1i32).build(),
            )
            .build(),
    );
    s.set("array", gst::Array::new([1i32, 2, 3]));
    s.set(
        "caps",
        gst::Caps::from_str("video/x-raw, width=(int)64").unwrap(),
    );
    buffer
}

fn ntp_meta(buffer: &gst::BufferRef) -> (u64, u64, String) {
    let meta = buffer
        .meta::<gst::ReferenceTimestampMeta>()
        .expect("a reference timestamp");
    // SAFETY: the meta of a borrowed buffer.
    let raw = unsafe { &*meta.as_ptr() };
    (raw.timestamp, raw.duration, meta.reference().to_string())
}

#[test]
fn meta_serialization_is_found_exactly_on_1_24_and_later() {
    init();
    let (major, minor, ..) = gst::version();
    eprintln!(
        "GStreamer {major}.{minor}: gst_meta_serialize {}",
        if gstreamer_serializes_metas() {
            "found"
        } else {
            "absent"
        }
    );
    assert_eq!(gstreamer_serializes_metas(), (major, minor) >= (1, 24));
    if let Ok(expect) = std::env::var("CUDAIPC_EXPECT_GST") {
        assert_eq!(format!("{major}.{minor}"), expect);
    }
}

#[test]
fn the_1_22_writer_writes_the_bytes_of_gst_meta_serialize() {
    init();
    let buffer = buffer_with_metas();
    let timestamp = buffer.meta::<gst::ReferenceTimestampMeta>().unwrap();
    let ours = legacy::serialize_reference_timestamp(&timestamp).unwrap();
    // Known bytes: the header, both times, the caps, a NUL.
    let expected = meta_wire::write(
        "GstReferenceTimestampMeta",
        0,
        &meta_wire::reference_timestamp_payload(1_234_567_890, u64::MAX, NTP),
    )
    .unwrap();
    assert_eq!(ours, expected);
    let structure = custom(&buffer, TEST_META_C).unwrap();
    let ours_custom = legacy::serialize_custom(TEST_META, &structure).unwrap();
    let Some(native) = gst_api::serialization() else {
        eprintln!("SKIPPED: comparison with gst_meta_serialize (GStreamer 1.22 has none)");
        return;
    };
    let mut compared = 0;
    for meta in buffer.iter_meta::<gst::Meta>() {
        let theirs = native.serialize(meta.as_ptr()).unwrap();
        let name = meta.type_().name();
        match name {
            "GstReferenceTimestampMeta" => assert_eq!(ours, theirs),
            TEST_META => assert_eq!(
                String::from_utf8_lossy(&ours_custom),
                String::from_utf8_lossy(&theirs)
            ),
            other => panic!("unexpected meta {other}"),
        }
        compared += 1;
    }
    assert_eq!(compared, 2);
}

#[test]
fn both_writers_refuse_a_custom_meta_holding_an_object() {
    init();
    let mut buffer = gst::Buffer::new();
    let s = add_custom(buffer.get_mut().unwrap(), TEST_META_C);
    s.set("element", gst::Bin::new());
    assert_eq!(legacy::serialize_custom(TEST_META, s), None);
    if let Some(native) = gst_api::serialization() {
        let meta = buffer.iter_meta::<gst::Meta>().next().unwrap();
        assert_eq!(native.serialize(meta.as_ptr()), None);
    }
    let mut report = MetaReport::default();
    let mut writer = FrameDataWriter::new(4096);
    encode_metas(&buffer, &mut writer, &mut report);
    assert!(writer.is_empty());
    assert_eq!(report.stats().not_crossed[TEST_META], 1);
}

#[test]
fn a_1_22_producer_and_a_newer_consumer_agree_both_ways() {
    init();
    let source = buffer_with_metas();
    let timestamp = source.meta::<gst::ReferenceTimestampMeta>().unwrap();
    let wires = [
        legacy::serialize_reference_timestamp(&timestamp).unwrap(),
        legacy::serialize_custom(TEST_META, &custom(&source, TEST_META_C).unwrap()).unwrap(),
    ];
    let expected_structure = custom(&source, TEST_META_C).unwrap();
    let check = |buffer: &gst::BufferRef| {
        assert_eq!(ntp_meta(buffer), ntp_meta(&source));
        assert_eq!(custom(buffer, TEST_META_C).unwrap(), expected_structure);
    };
    // The 1.22 reader, whatever the runtime.
    let mut read = gst::Buffer::new();
    for bytes in &wires {
        let wire = meta_wire::parse(bytes).unwrap();
        let b = read.get_mut().unwrap();
        assert!(match wire.name {
            "GstReferenceTimestampMeta" => legacy::deserialize_reference_timestamp(&wire, b),
            _ => legacy::deserialize_custom(&wire, b),
        });
    }
    check(&read);
    let Some(native) = gst_api::serialization() else {
        eprintln!("SKIPPED: gst_meta_deserialize of 1.22 bytes (GStreamer 1.22 has none)");
        return;
    };
    // 1.22's bytes, read by GStreamer's own deserializer.
    let mut read = gst::Buffer::new();
    for bytes in &wires {
        assert!(native.deserialize(read.get_mut().unwrap(), bytes));
    }
    check(&read);
    // GStreamer's bytes, read by the 1.22 reader.
    let mut read = gst::Buffer::new();
    for meta in source.iter_meta::<gst::Meta>() {
        let bytes = native.serialize(meta.as_ptr()).unwrap();
        let wire = meta_wire::parse(&bytes).unwrap();
        let b = read.get_mut().unwrap();
        assert!(match wire.name {
            "GstReferenceTimestampMeta" => legacy::deserialize_reference_timestamp(&wire, b),
            _ => legacy::deserialize_custom(&wire, b),
        });
    }
    check(&read);
}

#[test]
fn the_1_22_reader_reads_past_1_28_s_info() {
    init();
    let mut payload = meta_wire::reference_timestamp_payload(5, 6, NTP);
    payload.extend_from_slice(b"info, clock=(string)ptp;\0");
    let bytes = meta_wire::write("GstReferenceTimestampMeta", 0, &payload).unwrap();
    let wire = meta_wire::parse(&bytes).unwrap();
    let mut buffer = gst::Buffer::new();
    assert!(legacy::deserialize_reference_timestamp(
        &wire,
        buffer.get_mut().unwrap()
    ));
    assert_eq!(
        ntp_meta(&buffer),
        (5, 6, gst::Caps::from_str(NTP).unwrap().to_string())
    );
}

#[test]
fn metas_round_trip_and_the_rest_is_counted() {
    init();
    let mut source = buffer_with_metas();
    {
        let b = source.get_mut().unwrap();
        gst_video::VideoMeta::add(
            b,
            gst_video::VideoFrameFlags::empty(),
            gst_video::VideoFormat::Rgba,
            4,
            4,
        )
        .unwrap();
        gst::ProtectionMeta::add(b, gst::Structure::new_empty("drm"));
        add_custom(b, MEMORY_META_C).set("ptr", 1u64);
    }
    let mut report = MetaReport::default();
    let mut writer = FrameDataWriter::new(64 * 1024);
    encode_metas(&source, &mut writer, &mut report);
    let bytes = writer.finish();
    let stats = report.stats();
    assert_eq!(stats.metas, 2);
    assert_eq!(stats.local, 2, "GstVideoMeta and a memory-tagged meta stay");
    assert_eq!(
        stats.not_crossed.keys().collect::<Vec<_>>(),
        ["GstProtectionMeta"]
    );
    let entries = blob::parse(&bytes).unwrap();
    assert_eq!(entries.len(), 2);
    let mut consumer = MetaReport::default();
    let mut read = gst::Buffer::new();
    decode_metas(&entries, read.get_mut().unwrap(), &mut consumer);
    assert_eq!(consumer.stats().metas, 2);
    assert_eq!(ntp_meta(&read), ntp_meta(&source));
    assert_eq!(
        custom(&read, TEST_META_C).unwrap(),
        custom(&source, TEST_META_C).unwrap()
    );
    assert!(read.meta::<gst_video::VideoMeta>().is_none());
}

#[test]
fn the_bound_drops_metas_and_counts_their_bytes() {
    init();
    let source = buffer_with_metas();
    let mut report = MetaReport::default();
    // Room for the header and the reference timestamp only.
    let timestamp = source.meta::<gst::ReferenceTimestampMeta>().unwrap();
    let first = legacy::serialize_reference_timestamp(&timestamp).unwrap();
    let bound = blob::HEADER_LEN + blob::entry_size(first.len()).unwrap();
    let mut writer = FrameDataWriter::new(bound);
    encode_metas(&source, &mut writer, &mut report);
    assert_eq!(writer.len(), bound);
    assert_eq!(report.stats().metas, 1);
    assert_eq!(report.stats().not_crossed[TEST_META], 1);
    assert!(report.stats().bytes_dropped > 0);
}

#[test]
fn custom_metas_unknown_to_the_consumer_are_registered() {
    init();
    let name = "CudaIpcNeverRegisteredMeta";
    let payload = meta_wire::custom_payload(&format!("{name}, answer=(int)42;"));
    let bytes = meta_wire::write(name, 0, &payload).unwrap();
    let mut read = gst::Buffer::new();
    let mut report = MetaReport::default();
    let entries = [Entry {
        kind: EntryKind::GstMeta,
        bytes: &bytes,
    }];
    decode_metas(&entries, read.get_mut().unwrap(), &mut report);
    assert_eq!(report.stats().metas, 1);
    let s = custom(&read, c"CudaIpcNeverRegisteredMeta").unwrap();
    assert_eq!(s.get::<i32>("answer").unwrap(), 42);
}

#[test]
fn unknown_and_hostile_metas_are_counted_never_added() {
    init();
    let unknown = meta_wire::write("GstNoSuchMeta", 0, b"\x01\x02").unwrap();
    let bad_caps = meta_wire::write(
        "GstReferenceTimestampMeta",
        0,
        &meta_wire::reference_timestamp_payload(1, 2, "(((not caps"),
    )
    .unwrap();
    let frame_data =
        meta_wire::write(app_data::META_NAME, 0, &meta_wire::custom_payload("x, a=1")).unwrap();
    let mut overflowing = unknown.clone();
    overflowing[4..8].copy_from_slice(&(u32::MAX - 9).to_le_bytes());
    let bad_custom = meta_wire::write(TEST_META, 0, b"=invalid\0").unwrap();
    let mut hostile: Vec<Vec<u8>> = vec![bad_caps, frame_data, overflowing];
    hostile.extend((0..unknown.len()).map(|cut| unknown[..cut].to_vec()));
    let mut report = MetaReport::default();
    let mut read = gst::Buffer::new();
    let all: Vec<&[u8]> = hostile
        .iter()
        .map(Vec::as_slice)
        .chain([&unknown[..], &bad_custom])
        .collect();
    let entries: Vec<Entry<'_>> = all
        .iter()
        .map(|bytes| Entry {
            kind: EntryKind::GstMeta,
            bytes,
        })
        .collect();
    decode_metas(&entries, read.get_mut().unwrap(), &mut report);
    assert_eq!(read.iter_meta::<gst::Meta>().count(), 0);
    let stats = report.stats();
    assert_eq!(stats.hostile, hostile.len() as u64);
    assert_eq!(stats.not_crossed["GstNoSuchMeta"], 1);
    assert_eq!(stats.not_crossed[TEST_META], 1);
    assert_eq!(stats.metas, 0);
}
