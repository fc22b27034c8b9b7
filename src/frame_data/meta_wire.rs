// SPDX-License-Identifier: MPL-2.0

//! GStreamer's wire form of one meta, as `gst_meta_serialize` (gstmeta.c,
//! 1.24.0 to 1.28) writes it, little-endian:
//!
//! ```text
//! total size u32 (all of it) | name length u32 | name | NUL | version u8 | payload
//! ```
//!
//! `name` is `g_type_name(info->type)`, the meta's implementation name
//! ("GstReferenceTimestampMeta", a custom meta's own name). The payloads of
//! the two metas this plugin writes itself on 1.22:
//! - `GstReferenceTimestampMeta` (gstbuffer.c `timestamp_meta_serialize`,
//!   version 0): timestamp u64, duration u64, `gst_caps_to_string` of the
//!   reference, NUL; 1.28 may append its `info` structure
//!   (`gst_structure_serialize_full(STRICT)`) and a NUL;
//! - a custom meta (gstmeta.c `custom_serialize_func`, version 0):
//!   `gst_structure_serialize_full(structure, STRICT)`, NUL.
//!
//! Knows no GStreamer: bytes in, bytes out, every length checked (1.24's own
//! `gst_meta_deserialize` computes the header size in 32 bits and can be made
//! to read out of bounds, so its input is checked here first).

use std::fmt;

/// Bytes of the header besides the name: two u32, the NUL, the version.
const HEADER_FIXED: usize = 4 + 4 + 1 + 1;

/// `gst_meta_serialize` keeps the header size in a guint8: a longer name
/// would be written corrupt, so none is.
const MAX_NAME_LEN: usize = u8::MAX as usize - HEADER_FIXED;

/// One meta's wire form, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaWire<'a> {
    /// The implementation name: a valid GType name.
    pub name: &'a str,
    pub version: u8,
    pub payload: &'a [u8],
}

/// Why a meta's wire form is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaWireError {
    /// Shorter than the fixed header.
    Truncated { len: usize },
    /// The total size is not the entry's length.
    SizeMismatch { total: u32, len: usize },
    /// The name length passes the bytes.
    NameTooLong { name_len: u32 },
    /// No NUL right after the name.
    NameNotTerminated,
    /// Not a name GType accepts.
    InvalidName,
}

impl fmt::Display for MetaWireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaWireError::Truncated { len } => {
                write!(
                    f,
                    "a serialized meta of {len} bytes is shorter than its header"
                )
            }
            MetaWireError::SizeMismatch { total, len } => {
                write!(
                    f,
                    "a serialized meta says {total} bytes, its entry holds {len}"
                )
            }
            MetaWireError::NameTooLong { name_len } => {
                write!(
                    f,
                    "a serialized meta's name of {name_len} bytes passes its end"
                )
            }
            MetaWireError::NameNotTerminated => {
                write!(f, "a serialized meta's name is not NUL-terminated")
            }
            MetaWireError::InvalidName => write!(f, "a serialized meta's name is not a type name"),
        }
    }
}

impl std::error::Error for MetaWireError {}

/// Reads one meta's wire form, which must be all of `bytes`.
pub fn parse(bytes: &[u8]) -> Result<MetaWire<'_>, MetaWireError> {
    let Some((head, rest)) = bytes.split_first_chunk::<8>() else {
        return Err(MetaWireError::Truncated { len: bytes.len() });
    };
    let total = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let name_len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if usize::try_from(total).ok() != Some(bytes.len()) {
        return Err(MetaWireError::SizeMismatch {
            total,
            len: bytes.len(),
        });
    }
    // The name, its NUL and the version byte must all be there.
    let room = rest
        .len()
        .checked_sub(2)
        .ok_or(MetaWireError::Truncated { len: bytes.len() })?;
    let name_bytes = usize::try_from(name_len)
        .ok()
        .filter(|&n| n <= room)
        .map(|n| &rest[..n])
        .ok_or(MetaWireError::NameTooLong { name_len })?;
    let after = &rest[name_bytes.len()..];
    if after[0] != 0 {
        return Err(MetaWireError::NameNotTerminated);
    }
    let name = std::str::from_utf8(name_bytes)
        .ok()
        .filter(|n| is_type_name(n))
        .ok_or(MetaWireError::InvalidName)?;
    Ok(MetaWire {
        name,
        version: after[1],
        payload: &after[2..],
    })
}

/// The wire form `gst_meta_serialize` writes for a meta named `name`;
/// `None` for a name GType refuses or 1.24 would write corrupt.
pub fn write(name: &str, version: u8, payload: &[u8]) -> Option<Vec<u8>> {
    if !is_type_name(name) || name.len() > MAX_NAME_LEN {
        return None;
    }
    let total = u32::try_from(HEADER_FIXED + name.len() + payload.len()).ok()?;
    let mut bytes = Vec::with_capacity(total as usize);
    bytes.extend_from_slice(&total.to_le_bytes());
    bytes.extend_from_slice(&(name.len() as u32).to_le_bytes());
    bytes.extend_from_slice(name.as_bytes());
    bytes.push(0);
    bytes.push(version);
    bytes.extend_from_slice(payload);
    Some(bytes)
}

/// What GType accepts as a type name (`g_type_name_validate`'s rule): at
/// least 3 characters, a letter or '_' first, then letters, digits and
/// "-_+".
pub fn is_type_name(name: &str) -> bool {
    let mut chars = name.bytes();
    name.len() >= 3
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && chars.all(|c| c.is_ascii_alphanumeric() || b"-_+".contains(&c))
}

/// A `GstReferenceTimestampMeta` payload, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferenceTimestamp<'a> {
    pub timestamp: u64,
    pub duration: u64,
    /// `gst_caps_to_string` of the reference.
    pub reference: &'a str,
    /// 1.28's `info` structure, as text, where there is one.
    pub info: Option<&'a str>,
}

/// The payload `timestamp_meta_serialize` writes for a meta without `info`.
pub fn reference_timestamp_payload(timestamp: u64, duration: u64, reference: &str) -> Vec<u8> {
    let mut payload = Vec::with_capacity(16 + reference.len() + 1);
    payload.extend_from_slice(&timestamp.to_le_bytes());
    payload.extend_from_slice(&duration.to_le_bytes());
    payload.extend_from_slice(reference.as_bytes());
    payload.push(0);
    payload
}

/// Reads a `GstReferenceTimestampMeta` payload as 1.28's
/// `timestamp_meta_deserialize` does (version 0, ends in a NUL), the
/// strings also UTF-8 without a NUL inside.
pub fn parse_reference_timestamp(version: u8, payload: &[u8]) -> Option<ReferenceTimestamp<'_>> {
    if version != 0 || payload.last() != Some(&0) {
        return None;
    }
    let (times, text) = payload.split_first_chunk::<16>()?;
    let text = &text[..text.len().checked_sub(1)?];
    let (reference, info) = match text.iter().position(|&b| b == 0) {
        None => (text, None),
        Some(nul) => (&text[..nul], Some(&text[nul + 1..])),
    };
    let reference = std::str::from_utf8(reference).ok()?;
    let info = match info {
        None => None,
        Some(info) if info.contains(&0) => return None,
        Some(info) => Some(std::str::from_utf8(info).ok()?),
    };
    let [
        t0,
        t1,
        t2,
        t3,
        t4,
        t5,
        t6,
        t7,
        d0,
        d1,
        d2,
        d3,
        d4,
        d5,
        d6,
        d7,
    ] = *times;
    Some(ReferenceTimestamp {
        timestamp: u64::from_le_bytes([t0, t1, t2, t3, t4, t5, t6, t7]),
        duration: u64::from_le_bytes([d0, d1, d2, d3, d4, d5, d6, d7]),
        reference,
        info,
    })
}

/// The payload `custom_serialize_func` writes: the structure's text and a
/// NUL.
pub fn custom_payload(structure_text: &str) -> Vec<u8> {
    let mut payload = Vec::with_capacity(structure_text.len() + 1);
    payload.extend_from_slice(structure_text.as_bytes());
    payload.push(0);
    payload
}

/// The structure text of a custom meta's payload (version 0, one NUL, at
/// the end, as `custom_deserialize_func` wants).
pub fn parse_custom(version: u8, payload: &[u8]) -> Option<&str> {
    let (last, text) = payload.split_last()?;
    if version != 0 || *last != 0 || text.contains(&0) {
        return None;
    }
    std::str::from_utf8(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_what_gst_meta_serialize_writes() {
        let bytes = write("MyMeta", 0, b"x\0").unwrap();
        let mut expected = vec![18, 0, 0, 0, 6, 0, 0, 0];
        expected.extend_from_slice(b"MyMeta\0\0x\0");
        assert_eq!(bytes, expected);
        assert_eq!(
            parse(&bytes).unwrap(),
            MetaWire {
                name: "MyMeta",
                version: 0,
                payload: b"x\0"
            }
        );
    }

    #[test]
    fn hostile_headers_are_refused_at_every_cut_and_length() {
        let bytes = write("GstReferenceTimestampMeta", 0, &[1; 20]).unwrap();
        for cut in 0..bytes.len() {
            assert!(parse(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        // Name lengths that overflow 1.24's 32-bit header size.
        for name_len in [u32::MAX, u32::MAX - 9, u32::MAX - 10, 1000, 26] {
            let mut hostile = bytes.clone();
            hostile[4..8].copy_from_slice(&name_len.to_le_bytes());
            assert!(parse(&hostile).is_err(), "name_len {name_len}");
        }
        // Sizes that agree but leave no room for the NUL and the version.
        for short in [&[8, 0, 0, 0, 0, 0, 0, 0][..], &[9, 0, 0, 0, 0, 0, 0, 0, 0]] {
            assert_eq!(
                parse(short),
                Err(MetaWireError::Truncated { len: short.len() })
            );
        }
        let mut hostile = bytes.clone();
        hostile[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            parse(&hostile),
            Err(MetaWireError::SizeMismatch { .. })
        ));
        let mut hostile = bytes.clone();
        hostile[8 + 25] = b'x';
        assert_eq!(parse(&hostile), Err(MetaWireError::NameNotTerminated));
        let mut hostile = bytes;
        hostile[8] = b'1';
        assert_eq!(parse(&hostile), Err(MetaWireError::InvalidName));
    }

    #[test]
    fn names_follow_gtype_rules() {
        assert!(is_type_name("GstVideoMeta"));
        assert!(is_type_name("_a-b+c"));
        for bad in ["", "ab", "1abc", "a b c", "abc/", "abcé"] {
            assert!(!is_type_name(bad), "{bad:?}");
            assert_eq!(write(bad, 0, b""), None);
        }
        assert_eq!(write(&"a".repeat(MAX_NAME_LEN + 1), 0, b""), None);
        assert!(write(&"a".repeat(MAX_NAME_LEN), 0, b"").is_some());
    }

    #[test]
    fn reference_timestamps_round_trip_with_and_without_info() {
        let payload = reference_timestamp_payload(5, u64::MAX, "timestamp/x-ntp");
        assert_eq!(payload.len(), 16 + 15 + 1);
        assert_eq!(
            parse_reference_timestamp(0, &payload),
            Some(ReferenceTimestamp {
                timestamp: 5,
                duration: u64::MAX,
                reference: "timestamp/x-ntp",
                info: None
            })
        );
        assert_eq!(parse_reference_timestamp(1, &payload), None);
        let mut with_info = payload.clone();
        with_info.extend_from_slice(b"info, a=(int)1;\0");
        assert_eq!(
            parse_reference_timestamp(0, &with_info).unwrap().info,
            Some("info, a=(int)1;")
        );
        for cut in 0..payload.len() {
            assert_eq!(parse_reference_timestamp(0, &payload[..cut]), None);
        }
        let mut two_infos = with_info;
        two_infos.extend_from_slice(b"more\0");
        assert_eq!(parse_reference_timestamp(0, &two_infos), None);
    }

    #[test]
    fn custom_payloads_are_one_nul_terminated_text() {
        let payload = custom_payload("MyMeta, a=(int)1;");
        assert_eq!(parse_custom(0, &payload), Some("MyMeta, a=(int)1;"));
        assert_eq!(parse_custom(1, &payload), None);
        assert_eq!(parse_custom(0, b""), None);
        assert_eq!(parse_custom(0, b"abc"), None);
        assert_eq!(parse_custom(0, b"a\0b\0"), None);
        assert_eq!(parse_custom(0, b"\xff\0"), None);
    }
}
