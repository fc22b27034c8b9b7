use std::str::FromStr;

use super::*;
use cudaipc_channel::frame_data::{EntryKind, FrameDataWriter};

fn buffer_with_everything() -> gst::Buffer {
    let mut buffer = gst::Buffer::new();
    let b = buffer.get_mut().unwrap();
    gst::ReferenceTimestampMeta::add(
        b,
        &gst::Caps::from_str("timestamp/x-unix").unwrap(),
        gst::ClockTime::from_seconds(1_700_000_000),
        gst::ClockTime::from_mseconds(40),
    );
    app_data::set(
        b,
        Some(&[0, 1, 2, 255]),
        Some(r#"{"frame": 7, "label": "cat"}"#),
    );
    buffer
}

#[test]
fn frame_data_round_trips_onto_a_fresh_buffer() {
    gst::init().unwrap();
    let source = buffer_with_everything();
    let mut producer = MetaReport::default();
    let bytes = frame_data_of(&source, 64 * 1024, &mut producer);
    assert_eq!(producer.stats().metas, 1);
    assert_eq!(producer.stats().app_entries, 2);
    // The application's data first, as entries the other APIs read.
    let entries = wire::parse(&bytes).unwrap();
    let kinds: Vec<EntryKind> = entries.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [EntryKind::AppBytes, EntryKind::AppJson, EntryKind::GstMeta]
    );
    assert_eq!(entries[0].bytes, [0, 1, 2, 255]);

    let mut consumer = MetaReport::default();
    let mut read = gst::Buffer::new();
    apply_frame_data(&bytes, read.get_mut().unwrap(), &mut consumer);
    assert_eq!(consumer.stats().metas, 1);
    assert_eq!(consumer.stats().app_entries, 2);
    let (app_bytes, json) = app_data::get(&read);
    assert_eq!(app_bytes.as_deref(), Some(&[0, 1, 2, 255][..]));
    assert_eq!(json.as_deref(), Some(r#"{"frame": 7, "label": "cat"}"#));
    let meta = read.meta::<gst::ReferenceTimestampMeta>().unwrap();
    assert_eq!(
        meta.timestamp(),
        gst::ClockTime::from_seconds(1_700_000_000)
    );
    assert_eq!(meta.duration(), Some(gst::ClockTime::from_mseconds(40)));
}

#[test]
fn a_buffer_without_anything_to_carry_has_no_frame_data() {
    gst::init().unwrap();
    let mut report = MetaReport::default();
    assert!(frame_data_of(&gst::Buffer::new(), 1024, &mut report).is_empty());
    let mut buffer = gst::Buffer::new();
    apply_frame_data(&[], buffer.get_mut().unwrap(), &mut report);
    assert_eq!(buffer.iter_meta::<gst::Meta>().count(), 0);
    assert_eq!(report.stats(), &FrameDataStats::default());
}

#[test]
fn a_tight_bound_keeps_the_application_s_data_before_metas() {
    gst::init().unwrap();
    let source = buffer_with_everything();
    let mut report = MetaReport::default();
    // Header, 4 bytes, 28 bytes of JSON: 8 + 16 + 40.
    let bytes = frame_data_of(&source, 64, &mut report);
    assert_eq!(bytes.len(), 64);
    let kinds: Vec<EntryKind> = wire::parse(&bytes)
        .unwrap()
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, [EntryKind::AppBytes, EntryKind::AppJson]);
    assert_eq!(report.stats().not_crossed["GstReferenceTimestampMeta"], 1);
    assert!(report.stats().bytes_dropped > 0);
}

#[test]
fn application_data_of_the_wrong_type_is_counted() {
    gst::init().unwrap();
    let mut buffer = gst::Buffer::new();
    app_data::set(buffer.get_mut().unwrap(), None, None);
    {
        // SAFETY: a writable test buffer whose meta was just added.
        let structure = unsafe {
            let meta = gst_api::gst_buffer_get_custom_meta(
                buffer.get_mut().unwrap().as_mut_ptr(),
                c"CudaIpcFrameData".as_ptr(),
            );
            gst::StructureRef::from_glib_borrow_mut((*meta).structure)
        };
        structure.set("bytes", "not bytes");
        structure.set("json", 5i32);
    }
    let mut report = MetaReport::default();
    assert!(frame_data_of(&buffer, 1024, &mut report).is_empty());
    assert_eq!(report.stats().not_crossed["CudaIpcFrameData"], 2);
}

#[test]
fn hostile_frame_data_keeps_the_entries_before_the_fault() {
    gst::init().unwrap();
    let mut writer = FrameDataWriter::new(1024);
    writer.push(EntryKind::AppJson, b"{}").unwrap();
    writer.push(EntryKind::AppBytes, b"12345678").unwrap();
    let mut bytes = writer.finish();
    // The second entry's length now passes the end.
    let second = wire::HEADER_LEN + wire::entry_size(2).unwrap();
    bytes[second + 4..second + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut report = MetaReport::default();
    let mut buffer = gst::Buffer::new();
    apply_frame_data(&bytes, buffer.get_mut().unwrap(), &mut report);
    assert_eq!(report.stats().hostile, 1);
    assert_eq!(app_data::get(&buffer), (None, Some("{}".to_owned())));
    // JSON that is not UTF-8, and a second entry of one kind.
    let mut writer = FrameDataWriter::new(1024);
    writer.push(EntryKind::AppJson, b"\xff\xfe").unwrap();
    writer.push(EntryKind::AppBytes, b"a").unwrap();
    writer.push(EntryKind::AppBytes, b"b").unwrap();
    let mut report = MetaReport::default();
    let mut buffer = gst::Buffer::new();
    apply_frame_data(&writer.finish(), buffer.get_mut().unwrap(), &mut report);
    assert_eq!(report.stats().hostile, 2);
    let (app_bytes, json) = app_data::get(&buffer);
    assert_eq!(app_bytes.as_deref(), Some(&b"a"[..]));
    assert_eq!(json, None);
}

#[test]
fn garbage_frame_data_never_panics() {
    gst::init().unwrap();
    let source = frame_data_of(&buffer_with_everything(), 4096, &mut MetaReport::default());
    let mut report = MetaReport::default();
    // Every truncation, and every single byte flipped.
    for cut in 0..source.len() {
        let mut buffer = gst::Buffer::new();
        apply_frame_data(&source[..cut], buffer.get_mut().unwrap(), &mut report);
    }
    for at in 0..source.len() {
        let mut flipped = source.clone();
        flipped[at] ^= 0xa5;
        let mut buffer = gst::Buffer::new();
        apply_frame_data(&flipped, buffer.get_mut().unwrap(), &mut report);
    }
    assert!(report.stats().hostile > 0);
}
