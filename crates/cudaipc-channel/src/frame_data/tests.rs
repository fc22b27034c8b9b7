use super::*;

/// A blob of four entries of different lengths (padding of 0, 0, 3 and 6).
fn sample() -> Vec<u8> {
    let mut writer = FrameDataWriter::new(4096);
    writer.push(EntryKind::GstMeta, &[7; 8]).unwrap();
    writer.push(EntryKind::AppBytes, b"").unwrap();
    writer.push(EntryKind::AppBytes, b"hello").unwrap();
    writer.push(EntryKind::AppJson, b"{}").unwrap();
    writer.finish()
}

/// A header counting `count` entries, then `entries` as (kind, reserved,
/// len, bytes), padded as the writer pads.
fn raw(count: u16, entries: &[(u16, u16, u32, &[u8])]) -> Vec<u8> {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&count.to_le_bytes());
    for (kind, reserved, len, payload) in entries {
        bytes.extend_from_slice(&kind.to_le_bytes());
        bytes.extend_from_slice(&reserved.to_le_bytes());
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(payload);
        bytes.resize(bytes.len().next_multiple_of(ALIGN), 0);
    }
    bytes
}

#[test]
fn entries_round_trip_in_order_and_aligned() {
    let bytes = sample();
    assert_eq!(bytes.len() % ALIGN, 0);
    assert_eq!(&bytes[..4], b"CIPD");
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 1);
    assert_eq!(u16::from_le_bytes([bytes[6], bytes[7]]), 4);
    // Header 8, then 8+8, 8, 8+5+3, 8+2+6.
    assert_eq!(bytes.len(), 8 + 16 + 8 + 16 + 16);
    let parsed = parse(&bytes).unwrap();
    assert_eq!(
        parsed,
        vec![
            Entry {
                kind: EntryKind::GstMeta,
                bytes: &[7; 8]
            },
            Entry {
                kind: EntryKind::AppBytes,
                bytes: b""
            },
            Entry {
                kind: EntryKind::AppBytes,
                bytes: b"hello"
            },
            Entry {
                kind: EntryKind::AppJson,
                bytes: b"{}"
            },
        ]
    );
    // Padding is zeros.
    assert_eq!(&bytes[8 + 16 + 8 + 8 + 5..8 + 16 + 8 + 16], &[0, 0, 0]);
    assert_eq!(&bytes[bytes.len() - 6..], &[0; 6]);
}

#[test]
fn no_entries_is_no_bytes() {
    assert!(FrameDataWriter::new(1024).finish().is_empty());
    assert_eq!(parse(&[]).unwrap(), vec![]);
    // A header counting nothing is read as nothing too.
    assert_eq!(parse(&raw(0, &[])).unwrap(), vec![]);
}

#[test]
fn kinds_have_their_wire_codes() {
    for (kind, code) in [
        (EntryKind::GstMeta, 1),
        (EntryKind::AppBytes, 2),
        (EntryKind::AppJson, 3),
    ] {
        assert_eq!(kind.code(), code);
        assert_eq!(EntryKind::from_code(code), Some(kind));
    }
    assert_eq!(EntryKind::from_code(0), None);
    assert_eq!(EntryKind::from_code(4), None);
}

#[test]
fn the_bound_refuses_whole_entries_and_keeps_what_fit() {
    // Header 8 + an entry of 8 + 8 = 24 bytes: exactly the bound.
    let mut writer = FrameDataWriter::new(24);
    assert_eq!(
        writer.push(EntryKind::AppBytes, &[1; 9]),
        Err(TooLarge {
            needed: 8 + 8 + 16,
            room: 24
        })
    );
    assert!(writer.is_empty());
    writer.push(EntryKind::AppBytes, &[1; 8]).unwrap();
    assert_eq!(writer.room(), 0);
    assert_eq!(
        writer.push(EntryKind::AppBytes, &[]),
        Err(TooLarge { needed: 8, room: 0 })
    );
    let bytes = writer.finish();
    assert_eq!(bytes.len(), 24);
    assert_eq!(parse(&bytes).unwrap().len(), 1);
    // A bound smaller than a header takes nothing.
    let mut writer = FrameDataWriter::new(7);
    assert!(writer.push(EntryKind::AppBytes, &[]).is_err());
    assert!(writer.finish().is_empty());
}

#[test]
fn the_entry_count_stops_at_its_limit() {
    let mut writer = FrameDataWriter::new(usize::MAX);
    for _ in 0..MAX_ENTRIES {
        writer.push(EntryKind::AppBytes, &[]).unwrap();
    }
    assert_eq!(
        writer.push(EntryKind::AppBytes, &[]),
        Err(TooLarge { needed: 8, room: 0 })
    );
    let bytes = writer.finish();
    assert_eq!(parse(&bytes).unwrap().len(), MAX_ENTRIES);
}

#[test]
fn every_truncation_is_an_error_or_keeps_whole_entries() {
    let bytes = sample();
    let all = parse(&bytes).unwrap();
    for cut in 0..bytes.len() {
        let prefix = &bytes[..cut];
        let mut reader = entries(prefix);
        let kept: Vec<Entry<'_>> = reader.by_ref().collect();
        // What was kept is a prefix of the whole, entry for entry.
        assert_eq!(kept[..], all[..kept.len()], "cut at {cut}");
        match parse(prefix) {
            // No bytes: no entries.
            Ok(parsed) if cut == 0 => assert!(parsed.is_empty()),
            // Otherwise only where nothing but the final padding is missing.
            Ok(parsed) => {
                assert_eq!(parsed, all, "cut at {cut}");
                assert!(cut >= bytes.len() - 6, "cut at {cut}");
            }
            Err(error) => {
                assert_eq!(reader.error(), Some(&error), "cut at {cut}");
                assert!(kept.len() < all.len(), "cut at {cut}");
            }
        }
    }
}

#[test]
fn truncated_headers_magic_and_versions_are_refused() {
    assert_eq!(parse(b"CIP"), Err(FrameDataError::Truncated { len: 3 }));
    let mut bytes = sample();
    bytes[0] = b'X';
    assert_eq!(
        parse(&bytes),
        Err(FrameDataError::BadMagic { found: *b"XIPD" })
    );
    let mut bytes = sample();
    bytes[4] = 2;
    assert_eq!(
        parse(&bytes),
        Err(FrameDataError::UnsupportedVersion {
            found: 2,
            supported: 1
        })
    );
    // The lenient reader yields nothing of a blob with a bad header.
    let mut reader = entries(&bytes);
    assert_eq!(reader.next(), None);
    assert!(reader.error().is_some());
}

#[test]
fn lengths_past_the_end_are_refused_up_to_u32_max() {
    for len in [9, 1000, u32::MAX - 7, u32::MAX] {
        let bytes = raw(2, &[(2, 0, 1, b"a"), (2, 0, len, b"12345678")]);
        assert_eq!(
            parse(&bytes),
            Err(FrameDataError::LengthPastEnd {
                index: 1,
                len,
                available: 8
            }),
            "len {len}"
        );
        let mut reader = entries(&bytes);
        assert_eq!(reader.next().map(|e| e.bytes), Some(&b"a"[..]));
        assert_eq!(reader.next(), None);
        assert!(reader.error().is_some());
    }
}

#[test]
fn counts_past_the_bytes_are_refused() {
    for count in [2, 3, u16::MAX] {
        let bytes = raw(count, &[(3, 0, 2, b"{}")]);
        assert_eq!(
            parse(&bytes),
            Err(FrameDataError::CountPastEnd { count, read: 1 })
        );
        let mut reader = entries(&bytes);
        assert_eq!(reader.next().map(|e| e.kind), Some(EntryKind::AppJson));
        assert_eq!(reader.next(), None);
    }
}

#[test]
fn unknown_kinds_are_skipped_and_counted() {
    let bytes = raw(
        4,
        &[
            (0, 0, 1, b"x"),
            (2, 0, 2, b"ok"),
            (999, 0, 9, b"123456789"),
            (3, 0, 2, b"{}"),
        ],
    );
    let mut reader = entries(&bytes);
    let kinds: Vec<EntryKind> = reader.by_ref().map(|e| e.kind).collect();
    assert_eq!(kinds, [EntryKind::AppBytes, EntryKind::AppJson]);
    assert_eq!(reader.unknown_skipped(), 2);
    assert_eq!(reader.error(), None);
    assert_eq!(parse(&bytes).unwrap().len(), 2);
}

#[test]
fn reserved_fields_other_than_zero_are_refused() {
    let bytes = raw(2, &[(2, 0, 1, b"a"), (2, 1, 1, b"b")]);
    assert_eq!(
        parse(&bytes),
        Err(FrameDataError::ReservedNotZero { index: 1, value: 1 })
    );
    assert_eq!(entries(&bytes).count(), 1);
}

#[test]
fn trailing_bytes_after_the_counted_entries_are_ignored() {
    let mut bytes = raw(1, &[(2, 0, 1, b"a")]);
    bytes.extend_from_slice(&[0xff; 13]);
    assert_eq!(parse(&bytes).unwrap().len(), 1);
}

/// xorshift64*: reproducible garbage without a dependency.
fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.max(1);
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

#[test]
fn garbage_never_panics() {
    for seed in 1..2000u64 {
        let len = (seed % 200) as usize;
        let mut bytes = garbage(seed, len);
        // Half of them behind a valid header, to reach the entries.
        if seed % 2 == 0 && bytes.len() >= HEADER_LEN {
            bytes[..6].copy_from_slice(b"CIPD\x01\x00");
        }
        let _ = parse(&bytes);
        let mut reader = entries(&bytes);
        for entry in reader.by_ref() {
            assert!(entry.bytes.len() <= bytes.len());
        }
        let _ = reader.error();
    }
}

#[test]
fn entry_sizes_are_padded_and_checked() {
    assert_eq!(entry_size(0), Some(8));
    assert_eq!(entry_size(1), Some(16));
    assert_eq!(entry_size(8), Some(16));
    assert_eq!(entry_size(usize::MAX), None);
    assert_eq!(entry_size(usize::MAX - 8), None);
}
