// SPDX-License-Identifier: MPL-2.0

// What a subscriber found impossible in what it read, as data: the channel's
// own checks (`Corruption`), and those that need the transport's slots or
// the caps' meaning.

use std::fmt;

use cudaipc_channel::Corruption;

/// How what a subscriber read breaks the protocol; `Display` words it as
/// the reason after "corrupt control block: ".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubscriberCorruption {
    /// The channel's control block or socket (see [`Corruption`]).
    Channel(Corruption),
    /// A frame lies outside the slots the transport opened.
    FrameOutsideSlots {
        seq: u64,
        slot: usize,
        size: u64,
        slots: usize,
        slot_size: usize,
    },
    /// A frame of a pool generation that neither the channel nor the
    /// subscriber holds.
    PoolGeneration { found: u64, current: u64 },
    /// The caps cannot be parsed, are not fixed, or describe no video.
    UnusableCaps { caps: String },
    /// The caps' video format is not one the reader handles.
    UnsupportedFormat { caps: String },
    /// A frame's planes do not fit its caps (the layout check's words).
    FrameLayout { seq: u64, problem: String },
}

impl From<Corruption> for SubscriberCorruption {
    fn from(corruption: Corruption) -> Self {
        Self::Channel(corruption)
    }
}

impl fmt::Display for SubscriberCorruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Channel(corruption) => write!(f, "{corruption}"),
            Self::FrameOutsideSlots {
                seq,
                slot,
                size,
                slots,
                slot_size,
            } => write!(
                f,
                "frame {seq} (slot {slot}, {size} bytes) lies outside the {slots} slots of {slot_size} bytes"
            ),
            Self::PoolGeneration { found, current } => write!(
                f,
                "a frame of pool generation {found}, but the pool is at {current}"
            ),
            Self::UnusableCaps { caps } => write!(f, "unusable caps {caps:?}"),
            Self::UnsupportedFormat { caps } => write!(f, "unsupported format in caps {caps:?}"),
            Self::FrameLayout { seq, problem } => {
                write!(f, "frame {seq} does not match the caps: {problem}")
            }
        }
    }
}
