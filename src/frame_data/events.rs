// SPDX-License-Identifier: MPL-2.0

//! The downstream serialized events that cross to the consumer, in the
//! channel's ordered event queue: tags, stream-start, gap, segment (so that
//! the consumer can apply a rate or applied rate other than 1) and custom
//! downstream events (plain, sticky, and both-ways). The rest stays in its
//! process: flushes, caps and EOS travel by other means; QoS, upstream and
//! out-of-band events are this process's own.
//!
//! Wire form, little-endian:
//!
//! ```text
//! magic b"CIPE" | version u16 (1) | GstEventType u32 | the event's structure as text
//! ```
//!
//! The text is `gst_structure_serialize` (nested structures and caps in
//! brackets; `gst_structure_to_string` nests them in escaped strings, which
//! two levels deep it cannot read back), without the fields that cannot
//! cross (objects and pointers: stream-start's `stream`). It is empty for a
//! custom event without a structure, and otherwise ends in ';' (text without
//! it was cut short, and is refused).

use std::fmt;
use std::str::FromStr;

use gst::ffi;
use gst::glib;
use gst::glib::translate::{IntoGlib, IntoGlibPtr};
use gst::prelude::*;

use super::gst_api;
use super::legacy::structure_text;

pub const MAGIC: [u8; 4] = *b"CIPE";
pub const VERSION: u16 = 1;
const HEADER_LEN: usize = 4 + 2 + 4;

/// The event types that cross.
const CARRIED: &[ffi::GstEventType] = &[
    ffi::GST_EVENT_STREAM_START,
    ffi::GST_EVENT_SEGMENT,
    ffi::GST_EVENT_TAG,
    ffi::GST_EVENT_GAP,
    ffi::GST_EVENT_CUSTOM_DOWNSTREAM,
    ffi::GST_EVENT_CUSTOM_DOWNSTREAM_STICKY,
    ffi::GST_EVENT_CUSTOM_BOTH,
];

/// Why bytes are not an event that crossed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventDecodeError {
    /// Shorter than the header.
    Truncated {
        len: usize,
    },
    BadMagic {
        found: [u8; 4],
    },
    UnsupportedVersion {
        found: u16,
        supported: u16,
    },
    /// A type that does not cross (unknown, upstream, flush, caps, EOS...).
    NotCarried {
        event_type: u32,
    },
    /// Text that is not UTF-8, or holds a NUL.
    NotText,
    /// Text that does not parse as a structure.
    Unparsable {
        text: String,
    },
    /// A structure of another name than the event type's.
    WrongStructure {
        expected: &'static str,
        found: String,
    },
    /// A field the event needs, missing or of another type.
    BadField {
        event: &'static str,
        field: &'static str,
    },
    /// A field whose value the event's constructor refuses.
    InvalidValue {
        event: &'static str,
        field: &'static str,
    },
}

impl fmt::Display for EventDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventDecodeError::Truncated { len } => {
                write!(f, "an event of {len} bytes is shorter than its header")
            }
            EventDecodeError::BadMagic { found } => {
                write!(f, "an event starts with {found:02x?}, not \"CIPE\"")
            }
            EventDecodeError::UnsupportedVersion { found, supported } => write!(
                f,
                "event version {found}, this build reads version {supported}"
            ),
            EventDecodeError::NotCarried { event_type } => {
                write!(f, "events of type {event_type:#x} do not cross")
            }
            EventDecodeError::NotText => write!(f, "an event's structure is not text"),
            EventDecodeError::Unparsable { text } => {
                let shown: String = text.chars().take(80).collect();
                write!(f, "an event's structure does not parse: {shown:?}")
            }
            EventDecodeError::WrongStructure { expected, found } => {
                write!(f, "a {expected} event holds a structure named {found:?}")
            }
            EventDecodeError::BadField { event, field } => {
                write!(f, "a {event} event lacks a valid `{field}`")
            }
            EventDecodeError::InvalidValue { event, field } => {
                write!(f, "a {event} event's `{field}` is out of range")
            }
        }
    }
}

impl std::error::Error for EventDecodeError {}

/// The wire form of `event`, or `None` for an event that does not cross.
pub fn encode_event(event: &gst::Event) -> Option<Vec<u8>> {
    let event_type = event.type_().into_glib();
    if !CARRIED.contains(&event_type) {
        return None;
    }
    let text = match event.structure() {
        None => String::new(),
        Some(structure) => {
            let mut crossing = structure.to_owned();
            let staying: Vec<String> = crossing
                .iter()
                .filter(|(_, value)| !crosses(value))
                .map(|(name, _)| name.to_string())
                .collect();
            crossing.remove_fields(staying.iter().map(String::as_str));
            structure_text(&crossing)?
        }
    };
    let mut bytes = Vec::with_capacity(HEADER_LEN + text.len());
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&(event_type as u32).to_le_bytes());
    bytes.extend_from_slice(text.as_bytes());
    Some(bytes)
}

/// Whether a field's value can cross: not an object, not a pointer.
fn crosses(value: &glib::Value) -> bool {
    let type_ = value.type_();
    !type_.is_a(glib::Object::static_type()) && type_ != glib::Type::POINTER
}

/// The event `bytes` describe, rebuilt through its constructor, or why
/// they are refused; never panics.
pub fn decode_event(bytes: &[u8]) -> Result<gst::Event, EventDecodeError> {
    let Some((header, text)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Err(EventDecodeError::Truncated { len: bytes.len() });
    };
    let magic = [header[0], header[1], header[2], header[3]];
    if magic != MAGIC {
        return Err(EventDecodeError::BadMagic { found: magic });
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    if version != VERSION {
        return Err(EventDecodeError::UnsupportedVersion {
            found: version,
            supported: VERSION,
        });
    }
    let event_type = u32::from_le_bytes([header[6], header[7], header[8], header[9]]);
    let carried = CARRIED
        .iter()
        .copied()
        .find(|&t| t as u32 == event_type)
        .ok_or(EventDecodeError::NotCarried { event_type })?;
    let text = std::str::from_utf8(text)
        .ok()
        .filter(|text| !text.contains('\0'))
        .ok_or(EventDecodeError::NotText)?;
    // The serialized text ends in ';': without it, it was cut short (a
    // cut text may parse, as a shorter string say).
    if !text.is_empty() && !text.ends_with(';') {
        return Err(EventDecodeError::Unparsable {
            text: text.to_owned(),
        });
    }
    let structure = match text.is_empty() {
        true => None,
        false => {
            Some(
                gst::Structure::from_str(text).map_err(|_| EventDecodeError::Unparsable {
                    text: text.to_owned(),
                })?,
            )
        }
    };
    match carried {
        ffi::GST_EVENT_STREAM_START => stream_start(needs(structure, "stream-start")?),
        ffi::GST_EVENT_SEGMENT => segment(needs(structure, "segment")?),
        ffi::GST_EVENT_TAG => tag(needs(structure, "tag")?),
        ffi::GST_EVENT_GAP => gap(needs(structure, "gap")?),
        custom => Ok(custom_event(custom, structure)),
    }
}

fn needs(
    structure: Option<gst::Structure>,
    event: &'static str,
) -> Result<gst::Structure, EventDecodeError> {
    structure.ok_or(EventDecodeError::WrongStructure {
        expected: event,
        found: String::new(),
    })
}

fn named(
    structure: &gst::StructureRef,
    event: &'static str,
    expected: &'static str,
) -> Result<(), EventDecodeError> {
    match structure.name() == expected {
        true => Ok(()),
        false => Err(EventDecodeError::WrongStructure {
            expected: event,
            found: structure.name().to_string(),
        }),
    }
}

fn field<'a, T: glib::value::FromValue<'a>>(
    structure: &'a gst::StructureRef,
    event: &'static str,
    field: &'static str,
) -> Result<T, EventDecodeError> {
    structure
        .get::<T>(field)
        .map_err(|_| EventDecodeError::BadField { event, field })
}

/// A field that may be absent; present, it must be of its type.
fn optional<'a, T: glib::value::FromValue<'a>>(
    structure: &'a gst::StructureRef,
    event: &'static str,
    name: &'static str,
) -> Result<Option<T>, EventDecodeError> {
    match structure.has_field(name) {
        false => Ok(None),
        true => field(structure, event, name).map(Some),
    }
}

fn stream_start(structure: gst::Structure) -> Result<gst::Event, EventDecodeError> {
    const EVENT: &str = "stream-start";
    named(&structure, EVENT, "GstEventStreamStart")?;
    let stream_id: &str = field(&structure, EVENT, "stream-id")?;
    let flags: Option<gst::StreamFlags> = optional(&structure, EVENT, "flags")?;
    let group_id: Option<u32> = optional(&structure, EVENT, "group-id")?;
    let mut event = gst::event::StreamStart::builder(stream_id)
        .flags(flags.unwrap_or(gst::StreamFlags::empty()))
        .build();
    if let Some(group_id) = group_id.filter(|&id| id != 0) {
        // SAFETY: a new event, not shared (make_mut), and a group id.
        unsafe { ffi::gst_event_set_group_id(event.make_mut().as_mut_ptr(), group_id) };
    }
    Ok(event)
}

fn segment(structure: gst::Structure) -> Result<gst::Event, EventDecodeError> {
    const EVENT: &str = "segment";
    named(&structure, EVENT, "GstEventSegment")?;
    let segment: gst::Segment = field(&structure, EVENT, "segment")?;
    // What gst_event_new_segment refuses (with a critical).
    let invalid = |rate: f64| rate == 0.0 || !rate.is_finite();
    if invalid(segment.rate()) {
        return Err(EventDecodeError::InvalidValue {
            event: EVENT,
            field: "rate",
        });
    }
    if invalid(segment.applied_rate()) {
        return Err(EventDecodeError::InvalidValue {
            event: EVENT,
            field: "applied-rate",
        });
    }
    if segment.format() == gst::Format::Undefined {
        return Err(EventDecodeError::InvalidValue {
            event: EVENT,
            field: "format",
        });
    }
    Ok(gst::event::Segment::new(&segment))
}

fn tag(structure: gst::Structure) -> Result<gst::Event, EventDecodeError> {
    const EVENT: &str = "tag";
    // gst_event_new_tag names the structure after the list's scope.
    let scope = match structure.name().as_str() {
        "GstTagList-stream" => gst::TagScope::Stream,
        "GstTagList-global" => gst::TagScope::Global,
        other => {
            return Err(EventDecodeError::WrongStructure {
                expected: EVENT,
                found: other.to_owned(),
            });
        }
    };
    let mut tags: gst::TagList = field(&structure, EVENT, "taglist")?;
    tags.make_mut().set_scope(scope);
    Ok(gst::event::Tag::new(tags))
}

fn gap(structure: gst::Structure) -> Result<gst::Event, EventDecodeError> {
    const EVENT: &str = "gap";
    named(&structure, EVENT, "GstEventGap")?;
    let timestamp: u64 = field(&structure, EVENT, "timestamp")?;
    let duration: Option<u64> = optional(&structure, EVENT, "duration")?;
    // gst_event_new_gap refuses a timestamp of NONE.
    if timestamp == u64::MAX {
        return Err(EventDecodeError::InvalidValue {
            event: EVENT,
            field: "timestamp",
        });
    }
    let flags = match structure.value("gap-flags") {
        Err(_) => None,
        Ok(value) => Some(
            value
                .transform::<u32>()
                .ok()
                .and_then(|v| v.get::<u32>().ok())
                .ok_or(EventDecodeError::BadField {
                    event: EVENT,
                    field: "gap-flags",
                })?,
        ),
    };
    let duration = duration
        .filter(|&d| d != u64::MAX)
        .map(gst::ClockTime::from_nseconds);
    let mut event = gst::event::Gap::builder(gst::ClockTime::from_nseconds(timestamp))
        .duration(duration)
        .build();
    if let Some(flags) = flags {
        // SAFETY: a new event, not shared (make_mut); GstGapFlags are a
        // guint of flags (1.20).
        unsafe { gst_api::gst_event_set_gap_flags(event.make_mut().as_mut_ptr(), flags) };
    }
    Ok(event)
}

fn custom_event(event_type: ffi::GstEventType, structure: Option<gst::Structure>) -> gst::Event {
    let structure = structure.map_or(std::ptr::null_mut(), |s| s.into_glib_ptr());
    // SAFETY: a custom event type (checked against CARRIED) and a structure
    // whose ownership passes to the event (or NULL, which it takes).
    unsafe { gst::Event::from_glib_full(ffi::gst_event_new_custom(event_type, structure)) }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
