// SPDX-License-Identifier: MPL-2.0

//! The settings whose values the channel limits, their limits and why.

use crate::{ChannelError, layout};

/// A setting of a producer or a consumer whose values the channel limits:
/// each takes 0 to [`max`](Self::max). The channel checks those it is given
/// (a producer's `permissions`, the slots of a pool) and the layers above
/// check the others before they reach it; each layer names the setting in
/// its own terms ([`ChannelError::OutOfRange`] carries which one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// The file mode of the channel's files and socket: read, write and
    /// execute bits for the owner, the group and others (0o777 at most: a
    /// setuid, setgid or sticky bit on shared memory is never wanted).
    Permissions,
    /// Slots in a producer's ring; 0 leaves the depth to the transport.
    Slots,
    /// Consumers a producer waits for before its first frame: a channel
    /// has at most `MAX_CONSUMERS`.
    WaitForConsumers,
    /// Frames a consumer keeps while it asks for the next: a hold of N
    /// needs N+2 slots, and a ring has at most `MAX_SLOTS`.
    Hold,
    /// Bytes of data (metas, an application's bytes) each frame may carry.
    FrameDataBound,
}

impl Setting {
    /// The largest value the setting takes (the smallest is 0).
    pub const fn max(self) -> u64 {
        match self {
            Setting::Permissions => 0o777,
            Setting::Slots => layout::MAX_SLOTS as u64,
            Setting::WaitForConsumers => layout::MAX_CONSUMERS as u64,
            Setting::Hold => layout::MAX_SLOTS as u64 - 2,
            Setting::FrameDataBound => layout::MAX_FRAME_DATA_BOUND as u64,
        }
    }

    /// [`ChannelError::OutOfRange`] unless `value` is 0 to [`max`](Self::max).
    pub fn check(self, value: u64) -> Result<(), ChannelError> {
        match value <= self.max() {
            true => Ok(()),
            false => Err(ChannelError::OutOfRange {
                setting: self,
                value,
            }),
        }
    }

    /// Why [`max`](Self::max) is the limit, for a message that refuses a
    /// value above it.
    pub fn why(self) -> String {
        match self {
            Setting::Permissions => {
                "a file mode has read, write and execute bits only (no setuid, setgid or sticky bit)"
                    .to_owned()
            }
            Setting::Slots => format!("a ring has at most {} slots", layout::MAX_SLOTS),
            Setting::WaitForConsumers => {
                format!("a channel has at most {} consumers", layout::MAX_CONSUMERS)
            }
            Setting::Hold => format!(
                "a ring has at most {} slots, and a hold of N needs N+2",
                layout::MAX_SLOTS
            ),
            Setting::FrameDataBound => format!(
                "the control block holds an area of it for each of {} slots",
                layout::MAX_SLOTS
            ),
        }
    }

    /// The setting's name, as the APIs' option fields spell it (Rust, C
    /// and Python alike).
    pub fn name(self) -> &'static str {
        match self {
            Setting::Permissions => "permissions",
            Setting::Slots => "slots",
            Setting::WaitForConsumers => "wait_for_consumers",
            Setting::Hold => "hold",
            Setting::FrameDataBound => "frame_data_bound",
        }
    }
}
