// SPDX-License-Identifier: MPL-2.0

// What a corrupt or hostile control block (or producer's socket) got wrong,
// as data: which field, the value found and the bound it broke. A consumer
// validates everything it reads from the shared memory and the socket; each
// check that fails names itself here, and `Display` words it for the user.

use std::fmt;

use crate::layout::{CAPS_CAPACITY, MAX_PLANES, MAX_SLOTS};

/// Which seqlock-guarded record of the control block was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seqlocked {
    Pool,
    Caps,
}

/// What a descriptor channel's producer sent descriptors for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requested {
    ControlBlock,
    Pool,
}

/// How a control block, or what a producer's socket sent, breaks the
/// protocol: one variant per field checked, with the values involved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Corruption {
    /// The shared file is too short to hold the magic and version words.
    BlockTooSmall { len: usize },
    /// The first word is not the protocol's magic.
    Magic { found: u64 },
    /// The shared file's length is not the control block's.
    BlockSize { len: usize, expected: usize },
    /// The header's record sizes are not those of its protocol version.
    HeaderSizes,
    /// The transport word names no transport.
    Transport { found: u32 },
    /// The gpu-sync word names no ordering.
    GpuSync { found: u32 },
    /// A seqlock's writer never finished (or its sequence word is stuck odd).
    NeverSettles(Seqlocked),
    /// A frame came before any slot pool was configured.
    FrameBeforePool,
    /// The pool's slot count is outside `1..=MAX_SLOTS` (or disagrees with
    /// its descriptors).
    SlotCount { found: usize },
    /// The pool's slot size is zero or beyond any real frame.
    SlotSize { found: u64 },
    /// The caps' length is outside `1..=CAPS_CAPACITY`.
    CapsLength { found: usize },
    /// The caps' bytes are not UTF-8.
    CapsNotUtf8,
    /// The caps hold a NUL byte.
    CapsNul,
    /// The published sequence number went backwards.
    SequenceBackwards { found: u64, last: u64 },
    /// A queue entry holds an item published before the one expected there.
    QueueEntry { expected: u64, found: u64 },
    /// A frame's slot index is beyond the pool.
    SlotIndex { found: usize, slots: usize },
    /// A frame's pool generation is not the pool's.
    PoolGeneration { found: u64, current: u64 },
    /// A frame's size is zero or larger than its slot.
    FrameSize { found: u64, slot_size: u64 },
    /// A frame has more planes than a frame can.
    PlaneCount { found: usize },
    /// A plane starts outside its frame.
    PlaneOffset { found: u64, frame_size: u64 },
    /// A producer's socket answered with something not in the protocol.
    SocketReply { line: String, descriptors: usize },
    /// A producer's socket sent the wrong number of descriptors.
    DescriptorCount { found: usize, requested: Requested },
    /// A producer's socket sent no control block.
    NoControlBlock,
    /// A received descriptor is not a memory file.
    NotAMemoryFile,
    /// A received memory file has no seals (it could be truncated).
    NotSealed,
    /// A received memory file can still shrink or grow.
    NotSealedAgainstResizing,
    /// A received memory file is shorter than what it must hold.
    MemoryFileSize { found: u64, needed: u64 },
    /// The producer's fresh control block was locked by someone else.
    FreshBlockLocked,
    /// The producer could not lock its fresh control block.
    FreshBlockUnlockable,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BlockTooSmall { len } => {
                write!(f, "control block of {len} bytes is too small")
            }
            Self::Magic { found } => {
                write!(f, "bad magic {found:#018x}: not a cudaipc control block")
            }
            Self::BlockSize { len, expected } => {
                write!(f, "control block of {len} bytes, expected {expected}")
            }
            Self::HeaderSizes => f.write_str("header sizes disagree with the protocol version"),
            Self::Transport { found } => write!(f, "unknown transport {found}"),
            Self::GpuSync { found } => write!(f, "unknown gpu-sync mode {found}"),
            Self::NeverSettles(Seqlocked::Pool) => f.write_str("the pool seqlock never settles"),
            Self::NeverSettles(Seqlocked::Caps) => f.write_str("the caps seqlock never settles"),
            Self::FrameBeforePool => f.write_str("a frame was published before any slot pool"),
            Self::SlotCount { found } => {
                write!(f, "slot count {found} is outside 1..={MAX_SLOTS}")
            }
            Self::SlotSize { found } => write!(f, "slot size {found} is absurd"),
            Self::CapsLength { found } => {
                write!(f, "caps length {found} is outside 1..={CAPS_CAPACITY}")
            }
            Self::CapsNotUtf8 => f.write_str("caps are not UTF-8"),
            Self::CapsNul => f.write_str("caps hold a NUL byte"),
            Self::SequenceBackwards { found, last } => write!(
                f,
                "the sequence number went backwards ({found} after {last})"
            ),
            Self::QueueEntry { expected, found } => write!(
                f,
                "queue entry for item {expected} holds item {found}, which was published earlier"
            ),
            Self::SlotIndex { found, slots } => write!(
                f,
                "slot index {found} is out of range (the pool has {slots} slots)"
            ),
            Self::PoolGeneration { found, current } => write!(
                f,
                "frame of pool generation {found}, but the pool is at {current}"
            ),
            Self::FrameSize { found, slot_size } => write!(
                f,
                "frame size {found} does not fit the slot size {slot_size}"
            ),
            Self::PlaneCount { found } => write!(f, "{found} planes (at most {MAX_PLANES})"),
            Self::PlaneOffset { found, frame_size } => write!(
                f,
                "plane offset {found} is outside the frame of {frame_size} bytes"
            ),
            Self::SocketReply { line, descriptors } => write!(
                f,
                "the producer's socket answered {line:?} with {descriptors} descriptors"
            ),
            Self::DescriptorCount { found, requested } => write!(
                f,
                "the producer's socket sent {found} descriptors for {}",
                match requested {
                    Requested::ControlBlock => "the control block",
                    Requested::Pool => "a pool",
                }
            ),
            Self::NoControlBlock => f.write_str("no control block received"),
            Self::NotAMemoryFile => f.write_str("a received descriptor is not a memory file"),
            Self::NotSealed => {
                f.write_str("a received memory file is not sealed (it could be truncated)")
            }
            Self::NotSealedAgainstResizing => {
                f.write_str("a received memory file is not sealed against shrinking and growing")
            }
            Self::MemoryFileSize { found, needed } => write!(
                f,
                "a received memory file holds {found} bytes, {needed} needed"
            ),
            Self::FreshBlockLocked => f.write_str("a fresh control block was already locked"),
            Self::FreshBlockUnlockable => f.write_str("cannot lock a fresh control block"),
        }
    }
}
