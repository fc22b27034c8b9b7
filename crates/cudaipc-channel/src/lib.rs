//! The channel: a control block in shared memory through which one producer
//! publishes frames held in a ring of slots to any number of consumers.
//!
//! This layer knows nothing of GStreamer or CUDA: slots are indices, and what
//! a slot holds is described by opaque transport descriptors. See
//! docs/protocol.md for the layout and the rules.

mod consumer;
mod control_block;
mod corruption;
mod descriptor_wire;
pub mod directory;
mod error;
pub mod frame_data;
pub mod layout;
mod peers;
pub mod platform;
mod producer;
mod protocol;
mod setting;
pub mod shm;
pub mod stats;
pub mod wait;
pub mod watch;

use protocol::{read_seqlocked, write_seqlocked};

pub use consumer::{
    ChannelInfo, Consumer, ConsumerConfig, ConsumerWaker, Frame, Item, PoolInfo, ReleaseHandle,
    TravellingCounts,
};
pub use control_block::ControlBlock;
pub use corruption::{Corruption, Requested, Seqlocked};
pub use error::{ChannelError, Endpoint};
pub use platform::{mapping, socket};
pub use producer::{
    Blocker, ConsumerSetFingerprint, FrameMeta, Producer, ProducerConfig, ProducerStats,
    START_LIMIT, SlotsNeeded, WhenFull,
};
pub use setting::Setting;
pub use wait::WaitMode;

/// How a channel is reached (`ipc-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IpcMode {
    /// A control block (and host data files) under names in the shm folder.
    #[default]
    Legacy,
    /// Descriptors handed over the channel's unix socket to the peers whose
    /// credentials are allowed; nothing else has a name (see `socket`).
    Fd,
}

/// Which frames a consumer wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConsumerMode {
    /// Every frame, in order, at the consumer's own pace on a live channel:
    /// there the producer never waits for it, and a consumer that falls
    /// behind misses frames (counted). On a channel that is not live it is
    /// [`EveryFrame`](Self::EveryFrame).
    #[default]
    Auto,
    /// Every frame, in order, live or not: with `WhenFull::Block` the
    /// producer waits for this consumer, so nothing is lost, even when that
    /// holds a live source back.
    EveryFrame,
    /// Only the newest frame; never holds the producer back.
    Latest,
}

impl ConsumerMode {
    /// The value of `ConsumerRecord::mode`.
    pub(crate) fn record_value(self) -> u32 {
        match self {
            ConsumerMode::Auto => layout::MODE_AUTO,
            ConsumerMode::EveryFrame => layout::MODE_EVERY_FRAME,
            ConsumerMode::Latest => layout::MODE_LATEST,
        }
    }
}

/// Why the producer is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerGone {
    /// It stopped and closed the channel.
    Closed,
    /// It died (its liveness lock was dropped by the kernel).
    Died,
}

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_pace;
#[cfg(test)]
mod tests_travelling;
