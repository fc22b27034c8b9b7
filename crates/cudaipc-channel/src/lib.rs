//! The channel: a control block in shared memory through which one producer
//! publishes frames held in a ring of slots to any number of consumers.
//!
//! This layer knows nothing of GStreamer or CUDA: slots are indices, and what
//! a slot holds is described by opaque transport descriptors. See
//! docs/protocol.md for the layout and the rules.

mod consumer;
mod control_block;
pub mod directory;
pub mod layout;
pub mod mapping;
mod producer;
pub mod shm;
pub mod socket;
pub mod stats;
pub mod wait;

use std::fmt;

pub use consumer::{
    ChannelInfo, Consumer, ConsumerConfig, ConsumerWaker, Frame, Item, PoolInfo, ReleaseHandle,
};
pub use control_block::ControlBlock;
pub use producer::{
    ConsumerSetFingerprint, FrameMeta, Producer, ProducerConfig, ProducerStats, WhenFull,
};
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
    /// Every frame, in order; with `WhenFull::Block` the producer waits for
    /// this consumer, so nothing is lost.
    #[default]
    EveryFrame,
    /// Only the newest frame; never holds the producer back.
    Latest,
}

/// Why the producer is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerGone {
    /// It stopped and closed the channel.
    Closed,
    /// It died (its liveness lock was dropped by the kernel).
    Died,
}

#[derive(Debug)]
pub enum ChannelError {
    InvalidName(String),
    /// A live producer already owns the channel.
    InUse {
        channel: String,
        pid: u32,
    },
    /// No producer appeared before the deadline.
    NoProducer {
        channel: String,
    },
    PermissionDenied(String),
    Io {
        context: String,
        source: std::io::Error,
    },
    /// The control block holds values that break the protocol.
    Corrupt(String),
    /// A well-formed control block this build cannot use.
    Incompatible(String),
    TooManyConsumers,
    ProducerGone(ProducerGone),
    Timeout,
    /// A waiting call was interrupted (element flushing or stopping).
    Interrupted,
    /// Another process truncated a shared file this process maps.
    Truncated(std::path::PathBuf),
}

impl ChannelError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        ChannelError::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for ChannelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChannelError::InvalidName(msg) => f.write_str(msg),
            ChannelError::InUse { channel, pid } => write!(
                f,
                "channel '{channel}' is in use by a live producer (pid {pid}); choose another channel name or stop that producer"
            ),
            ChannelError::NoProducer { channel } => {
                write!(
                    f,
                    "no producer appeared on channel '{channel}' before the connect timeout"
                )
            }
            ChannelError::PermissionDenied(msg) => f.write_str(msg),
            ChannelError::Io { context, source } => write!(f, "{context}: {source}"),
            ChannelError::Corrupt(msg) => write!(f, "corrupt control block: {msg}"),
            ChannelError::Incompatible(msg) => write!(f, "incompatible channel: {msg}"),
            ChannelError::TooManyConsumers => write!(
                f,
                "the channel already has {} consumers, the most it supports",
                layout::MAX_CONSUMERS
            ),
            ChannelError::ProducerGone(ProducerGone::Closed) => {
                write!(f, "the producer closed the channel")
            }
            ChannelError::ProducerGone(ProducerGone::Died) => write!(f, "the producer died"),
            ChannelError::Timeout => write!(f, "timed out"),
            ChannelError::Interrupted => write!(f, "interrupted"),
            ChannelError::Truncated(path) => write!(
                f,
                "{} was truncated by another process; the channel cannot go on",
                path.display()
            ),
        }
    }
}

impl std::error::Error for ChannelError {}

/// Reads fields guarded by a seqlock; `read` must only do loads.
fn read_seqlocked<T>(
    lock: &std::sync::atomic::AtomicU64,
    mut read: impl FnMut() -> T,
) -> Option<T> {
    use std::sync::atomic::{Ordering, fence};
    for attempt in 0..10_000u32 {
        let before = lock.load(Ordering::Acquire);
        if before % 2 == 0 {
            let value = read();
            fence(Ordering::Acquire);
            if lock.load(Ordering::Relaxed) == before {
                return Some(value);
            }
        }
        if attempt > 100 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    None
}

/// Runs `write` with the seqlock held (odd).
fn write_seqlocked(lock: &std::sync::atomic::AtomicU64, write: impl FnOnce()) {
    use std::sync::atomic::{Ordering, fence};
    lock.fetch_add(1, Ordering::Relaxed);
    fence(Ordering::Release);
    write();
    lock.fetch_add(1, Ordering::Release);
}

#[cfg(test)]
mod tests;
