//! What travels with a frame besides its pixels ("frame data"): one blob of
//! entries, each GStreamer's own wire form of a meta or an application's
//! bytes. The channel carries it as opaque bytes in the frame's slot; this
//! module is its format, and knows no GStreamer.
//!
//! Little-endian throughout:
//!
//! ```text
//! header:  magic b"CIPD" | version u16 (1) | entry count u16
//! entry:   kind u16 | reserved u16 (0) | len u32 | len bytes | zeros to a multiple of 8
//! ```
//!
//! Kinds: [`EntryKind::GstMeta`] (what `gst_meta_serialize` writes for one
//! meta), [`EntryKind::AppBytes`] (an application's bytes) and
//! [`EntryKind::AppJson`] (an application's dict as UTF-8 JSON text). A
//! frame without entries carries no bytes at all.
//!
//! The bytes come from another process: [`parse`] and [`entries`] never
//! panic and never read past the slice, whatever it holds. An entry of a
//! kind this build does not know (a newer producer's) is skipped and
//! counted, not an error.

use std::fmt;

/// The first bytes of every blob.
pub const MAGIC: [u8; 4] = *b"CIPD";
/// The version this build writes and reads.
pub const VERSION: u16 = 1;
/// Bytes of the blob's header: magic, version, entry count.
pub const HEADER_LEN: usize = 8;
/// Bytes of an entry's header: kind, reserved, len.
pub const ENTRY_HEADER_LEN: usize = 8;
/// Entries start at multiples of this (the blob's own start included).
pub const ALIGN: usize = 8;
/// The most entries a blob holds (the count is a u16).
pub const MAX_ENTRIES: usize = u16::MAX as usize;

/// What an entry's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntryKind {
    /// One GstMeta exactly as `gst_meta_serialize` (GStreamer 1.24+) writes
    /// it: total size u32, name length u32, name, NUL, version u8, payload.
    GstMeta,
    /// An application's bytes, opaque.
    AppBytes,
    /// An application's dict, as UTF-8 JSON text.
    AppJson,
}

impl EntryKind {
    /// The value of the entry's `kind` field.
    pub const fn code(self) -> u16 {
        match self {
            EntryKind::GstMeta => 1,
            EntryKind::AppBytes => 2,
            EntryKind::AppJson => 3,
        }
    }

    /// The kind of a `kind` field, or `None` for one this build does not know.
    pub const fn from_code(code: u16) -> Option<EntryKind> {
        match code {
            1 => Some(EntryKind::GstMeta),
            2 => Some(EntryKind::AppBytes),
            3 => Some(EntryKind::AppJson),
            _ => None,
        }
    }
}

/// One entry of a blob: its kind and its bytes (without padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    pub kind: EntryKind,
    pub bytes: &'a [u8],
}

/// Bytes an entry of `len` bytes takes in a blob: its header, the bytes and
/// the padding to [`ALIGN`]; `None` past `usize`.
pub fn entry_size(len: usize) -> Option<usize> {
    len.checked_add(ENTRY_HEADER_LEN)?
        .checked_next_multiple_of(ALIGN)
}

/// An entry refused by [`FrameDataWriter::push`]: it needs `needed` bytes
/// and the bound leaves `room` (0 also once the blob holds [`MAX_ENTRIES`],
/// or for an entry longer than a u32 can say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    pub needed: usize,
    pub room: usize,
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a frame data entry of {} bytes does not fit the {} bytes the bound leaves",
            self.needed, self.room
        )
    }
}

impl std::error::Error for TooLarge {}

/// Builds one frame's blob, never past `bound` bytes in all.
#[derive(Debug, Clone)]
pub struct FrameDataWriter {
    bound: usize,
    /// The header (count still 0) and the entries pushed; empty until the
    /// first entry.
    bytes: Vec<u8>,
    count: u16,
}

impl FrameDataWriter {
    /// A writer whose blob stays within `bound` bytes, header included.
    pub fn new(bound: usize) -> FrameDataWriter {
        FrameDataWriter {
            bound,
            bytes: Vec::new(),
            count: 0,
        }
    }

    /// Appends an entry, or refuses it whole if it would pass the bound;
    /// what was pushed before stays either way.
    pub fn push(&mut self, kind: EntryKind, bytes: &[u8]) -> Result<(), TooLarge> {
        let header = if self.bytes.is_empty() { HEADER_LEN } else { 0 };
        let room = self.room();
        let entry = match (entry_size(bytes.len()), u32::try_from(bytes.len())) {
            (Some(entry), Ok(_)) => entry,
            _ => {
                return Err(TooLarge {
                    needed: bytes.len(),
                    room: 0,
                });
            }
        };
        let needed = header.saturating_add(entry);
        if needed > room || self.count as usize == MAX_ENTRIES {
            let room = if self.count as usize == MAX_ENTRIES {
                0
            } else {
                room
            };
            return Err(TooLarge { needed, room });
        }
        if self.bytes.is_empty() {
            self.bytes.extend_from_slice(&MAGIC);
            self.bytes.extend_from_slice(&VERSION.to_le_bytes());
            self.bytes.extend_from_slice(&0u16.to_le_bytes());
        }
        let start = self.bytes.len();
        self.bytes.extend_from_slice(&kind.code().to_le_bytes());
        self.bytes.extend_from_slice(&0u16.to_le_bytes());
        // Fits: checked above.
        self.bytes
            .extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(bytes);
        self.bytes.resize(start + entry, 0);
        self.count += 1;
        self.bytes[6..8].copy_from_slice(&self.count.to_le_bytes());
        Ok(())
    }

    /// Bytes a further push may add (the header included, for the first).
    pub fn room(&self) -> usize {
        self.bound.saturating_sub(self.bytes.len())
    }

    /// The entries pushed so far.
    pub fn count(&self) -> usize {
        self.count as usize
    }

    /// Bytes [`finish`](Self::finish) would return.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether no entry was pushed.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The blob: empty when no entry was pushed.
    pub fn finish(self) -> Vec<u8> {
        self.bytes
    }
}

/// Why a blob (or the rest of it) cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameDataError {
    /// Fewer bytes than the header (and not none, a frame without data).
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
    /// The header counts `count` entries; the bytes end after `read`.
    CountPastEnd {
        count: u16,
        read: u16,
    },
    /// Entry `index` says it holds `len` bytes; `available` follow it.
    LengthPastEnd {
        index: u16,
        len: u32,
        available: usize,
    },
    /// Entry `index` has a reserved field other than 0.
    ReservedNotZero {
        index: u16,
        value: u16,
    },
}

impl fmt::Display for FrameDataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameDataError::Truncated { len } => write!(
                f,
                "frame data of {len} bytes is shorter than its {HEADER_LEN}-byte header"
            ),
            FrameDataError::BadMagic { found } => {
                write!(f, "frame data starts with {found:02x?}, not \"CIPD\"")
            }
            FrameDataError::UnsupportedVersion { found, supported } => write!(
                f,
                "frame data version {found}, this build reads version {supported}"
            ),
            FrameDataError::CountPastEnd { count, read } => write!(
                f,
                "frame data counts {count} entries but its bytes end after {read}"
            ),
            FrameDataError::LengthPastEnd {
                index,
                len,
                available,
            } => write!(
                f,
                "frame data entry {index} says {len} bytes, {available} follow it"
            ),
            FrameDataError::ReservedNotZero { index, value } => write!(
                f,
                "frame data entry {index} has reserved field {value:#x}, not 0"
            ),
        }
    }
}

impl std::error::Error for FrameDataError {}

/// Every entry of a blob of a known kind, or why the blob is bad (then
/// none: use [`entries`] to keep those before the fault).
pub fn parse(bytes: &[u8]) -> Result<Vec<Entry<'_>>, FrameDataError> {
    let mut reader = entries(bytes);
    let parsed: Vec<Entry<'_>> = reader.by_ref().collect();
    match reader.error() {
        Some(error) => Err(error.clone()),
        None => Ok(parsed),
    }
}

/// The entries of a blob, leniently: the good ones before the first fault,
/// which [`EntryReader::error`] then says.
pub fn entries(bytes: &[u8]) -> EntryReader<'_> {
    EntryReader {
        bytes,
        offset: 0,
        count: None,
        read: 0,
        unknown_skipped: 0,
        error: None,
    }
}

/// The iterator of [`entries`].
#[derive(Debug, Clone)]
pub struct EntryReader<'a> {
    bytes: &'a [u8],
    offset: usize,
    /// The header's count, once read.
    count: Option<u16>,
    /// Entries read so far, of any kind.
    read: u16,
    unknown_skipped: u32,
    error: Option<FrameDataError>,
}

impl<'a> EntryReader<'a> {
    /// What stopped the reading short, if anything did.
    pub fn error(&self) -> Option<&FrameDataError> {
        self.error.as_ref()
    }

    /// Entries of kinds this build does not know, skipped so far.
    pub fn unknown_skipped(&self) -> u32 {
        self.unknown_skipped
    }

    /// Reads the header: the entry count, or the fault (recorded).
    fn header(&mut self) -> Option<u16> {
        if let Some(count) = self.count {
            return Some(count);
        }
        let count = match header_count(self.bytes) {
            Ok(count) => count,
            Err(error) => {
                self.error = Some(error);
                0
            }
        };
        self.offset = HEADER_LEN.min(self.bytes.len());
        self.count = Some(count);
        Some(count)
    }

    /// The next entry of any kind (its kind code and bytes), or a fault.
    fn next_raw(&mut self) -> Option<Result<(u16, &'a [u8]), FrameDataError>> {
        let count = self.header()?;
        if self.error.is_some() || self.read == count {
            return None;
        }
        let index = self.read;
        let rest = self.bytes.get(self.offset..).unwrap_or_default();
        let Some((head, rest)) = rest.split_first_chunk::<ENTRY_HEADER_LEN>() else {
            return Some(Err(FrameDataError::CountPastEnd { count, read: index }));
        };
        let kind = u16::from_le_bytes([head[0], head[1]]);
        let reserved = u16::from_le_bytes([head[2], head[3]]);
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if reserved != 0 {
            return Some(Err(FrameDataError::ReservedNotZero {
                index,
                value: reserved,
            }));
        }
        let Some(payload) = usize::try_from(len).ok().and_then(|l| rest.get(..l)) else {
            return Some(Err(FrameDataError::LengthPastEnd {
                index,
                len,
                available: rest.len(),
            }));
        };
        // The last entry's padding may be cut: there is nothing after it.
        let padding = (ALIGN - payload.len() % ALIGN) % ALIGN;
        let taken = ENTRY_HEADER_LEN + payload.len() + padding.min(rest.len() - payload.len());
        self.offset += taken;
        self.read += 1;
        Some(Ok((kind, payload)))
    }
}

impl<'a> Iterator for EntryReader<'a> {
    type Item = Entry<'a>;

    fn next(&mut self) -> Option<Entry<'a>> {
        loop {
            match self.next_raw()? {
                Err(error) => {
                    self.error = Some(error);
                    return None;
                }
                Ok((code, bytes)) => match EntryKind::from_code(code) {
                    Some(kind) => return Some(Entry { kind, bytes }),
                    None => self.unknown_skipped += 1,
                },
            }
        }
    }
}

/// The entry count of a blob's header; an empty blob has none.
fn header_count(bytes: &[u8]) -> Result<u16, FrameDataError> {
    if bytes.is_empty() {
        return Ok(0);
    }
    let Some(header) = bytes.first_chunk::<HEADER_LEN>() else {
        return Err(FrameDataError::Truncated { len: bytes.len() });
    };
    let magic = [header[0], header[1], header[2], header[3]];
    if magic != MAGIC {
        return Err(FrameDataError::BadMagic { found: magic });
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    if version != VERSION {
        return Err(FrameDataError::UnsupportedVersion {
            found: version,
            supported: VERSION,
        });
    }
    Ok(u16::from_le_bytes([header[6], header[7]]))
}

#[cfg(test)]
mod tests;
