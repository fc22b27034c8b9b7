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
pub mod frame_data;
pub mod layout;
mod peers;
pub mod platform;
mod producer;
mod protocol;
pub mod shm;
pub mod stats;
pub mod wait;
pub mod watch;

use std::fmt;

use protocol::{read_seqlocked, write_seqlocked};

pub use consumer::{
    ChannelInfo, Consumer, ConsumerConfig, ConsumerWaker, Frame, Item, PoolInfo, ReleaseHandle,
    TravellingCounts,
};
pub use control_block::ControlBlock;
pub use corruption::{Corruption, Requested, Seqlocked};
pub use platform::{mapping, socket};
pub use producer::{
    Blocker, ConsumerSetFingerprint, FrameMeta, Producer, ProducerConfig, ProducerStats,
    START_LIMIT, WhenFull,
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

/// Why the producer is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerGone {
    /// It stopped and closed the channel.
    Closed,
    /// It died (its liveness lock was dropped by the kernel).
    Died,
}

/// Where a permission check met a channel: its control block (a file in
/// the shm folder) or its socket (a descriptor channel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// The control block at this path.
    File(std::path::PathBuf),
    /// The channel's unix socket at this path.
    Socket(std::path::PathBuf),
}

/// Everything the channel can fail with. Each variant carries the facts (the
/// channel, the file, the owner, the limit); what a user should change is
/// said by the caller, which knows its own options (an element names its
/// properties, the Rust API its option fields).
#[derive(Debug)]
pub enum ChannelError {
    /// A channel name outside 1 to `MAX_CHANNEL_NAME` of `[A-Za-z0-9_-]`.
    InvalidName {
        name: String,
    },
    /// A live producer already owns the channel.
    InUse {
        channel: String,
        pid: u32,
    },
    /// No producer appeared before the deadline.
    NoProducer {
        channel: String,
    },
    /// The channel's file or socket exists, but its mode does not let this
    /// user open it (the producer's permissions are too narrow).
    /// `owner`: (uid, mode) of the file, where it could be read.
    NoAccess {
        channel: String,
        endpoint: Endpoint,
        owner: Option<(u32, u32)>,
    },
    /// The channel is owned (control block) or served (socket) by a user and
    /// group this consumer does not trust: another user may have taken the
    /// name.
    UntrustedProducer {
        channel: String,
        endpoint: Endpoint,
        uid: u32,
        gid: u32,
        consumer_uid: u32,
    },
    /// A file of another user holds one of the channel's names, so this
    /// producer cannot create it. `owner_uid`: that user, where known;
    /// `source`: the refused system call, where one was.
    NameTaken {
        channel: String,
        path: std::path::PathBuf,
        owner_uid: Option<u32>,
        source: Option<std::io::Error>,
    },
    /// The producer of a descriptor channel refused this consumer, for the
    /// reason it gave.
    Refused {
        channel: String,
        reason: String,
    },
    /// The producer runs in another PID namespace, which this channel
    /// cannot cross: a channel named in the shm folder never does; a
    /// descriptor channel of the cuda transport does not with events.
    OtherPidNamespace {
        channel: String,
        producer_pid: u32,
        descriptor_channel: bool,
    },
    /// The control block speaks another protocol version.
    ProtocolVersion {
        found: u32,
        supported: u32,
    },
    /// Caps longer than the control block holds.
    CapsTooLong {
        len: usize,
        capacity: usize,
    },
    /// A frame reserved or published before any slot pool.
    NoSlotPool,
    /// A serialized event larger than an event record holds.
    EventTooLarge {
        len: usize,
        capacity: usize,
    },
    /// A slot published that the producer had not reserved.
    NotReserved {
        slot: usize,
    },
    /// A system call failed: what was being done (naming the file or
    /// channel), and the error.
    Io {
        context: String,
        source: std::io::Error,
    },
    /// The control block (or a producer's socket) breaks the protocol:
    /// which field, and how.
    Corrupt(Corruption),
    /// Every consumer record of the channel is taken.
    TooManyConsumers,
    /// The consumer asked for a frame while it holds every frame it may
    /// hold: `held` frames, `slots` in the ring, `hold` declared (if any).
    /// Waiting would wait on itself.
    HoldsEverySlot {
        channel: String,
        held: usize,
        slots: usize,
        hold: Option<u32>,
    },
    /// A declared `hold` that the ring cannot fit: it needs `hold + 2`
    /// slots (the frames held, the one read, the one being written).
    HoldExceedsRing {
        channel: String,
        hold: u32,
        slots: usize,
    },
    /// A setting outside 0 to [`Setting::max`]: which one, and the value
    /// given.
    OutOfRange {
        setting: Setting,
        value: u64,
    },
    /// The producer's ring is shallower than a consumer's declared hold
    /// needs, and may grow (`ControlHeader::ring_grows_to`): returned by
    /// [`Producer::reserve`] holding no reservation, for the caller to
    /// publish a deeper ring (or say it cannot grow) and reserve again.
    RingTooShallow {
        wanted: usize,
    },
    ProducerGone(ProducerGone),
    Timeout,
    /// A waiting call was interrupted (element flushing or stopping).
    Interrupted,
    /// Another process truncated a shared file this process maps.
    Truncated(std::path::PathBuf),
    /// A wait mode name other than spin, hybrid or sleep.
    UnknownWaitMode(String),
    /// A user or group id that is not a number.
    NotAnId(String),
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
            ChannelError::InvalidName { name } => write!(
                f,
                "channel name {name:?} is invalid: use 1 to {} characters from A-Z, a-z, 0-9, '_' and '-'",
                shm::MAX_CHANNEL_NAME
            ),
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
            ChannelError::NoAccess {
                channel,
                endpoint,
                owner,
            } => {
                let (verb, path) = match endpoint {
                    Endpoint::File(path) => ("open", path),
                    Endpoint::Socket(path) => ("connect to", path),
                };
                write!(
                    f,
                    "no permission to {verb} channel '{channel}' at {}",
                    path.display()
                )?;
                if let Some((uid, mode)) = owner {
                    write!(f, " (owner uid {uid}, mode {mode:o})")?;
                }
                Ok(())
            }
            ChannelError::UntrustedProducer {
                channel,
                endpoint,
                uid,
                gid,
                consumer_uid,
            } => match endpoint {
                Endpoint::File(path) => write!(
                    f,
                    "channel '{channel}' ({}) belongs to uid {uid} (gid {gid}), which this consumer (uid {consumer_uid}) does not trust: another user may have taken the name",
                    path.display()
                ),
                Endpoint::Socket(_) => write!(
                    f,
                    "channel '{channel}' is served by a process of uid {uid} (gid {gid}), which this consumer does not trust: another user may have taken the name"
                ),
            },
            ChannelError::NameTaken {
                channel,
                path,
                owner_uid,
                source,
            } => {
                write!(f, "cannot create channel '{channel}': ")?;
                match (owner_uid, source) {
                    (Some(uid), _) => write!(
                        f,
                        "{} belongs to uid {uid}, not to this user (uid {}): another user created it",
                        path.display(),
                        shm::effective_uid()
                    )?,
                    (None, Some(source)) => {
                        write!(f, "{} belongs to another user ({source})", path.display())?
                    }
                    (None, None) => write!(f, "{} belongs to another user", path.display())?,
                }
                // Its producer may well be running: the file is not this
                // user's to remove.
                f.write_str("; choose another channel name (if that user's producer is gone, that user or root removes what it left with `cudaipc-channels remove-stale`)")
            }
            ChannelError::Refused { channel, reason } => write!(
                f,
                "the producer of channel '{channel}' refused this consumer: {reason}"
            ),
            ChannelError::OtherPidNamespace { producer_pid, .. } => write!(
                f,
                "incompatible channel: the producer (pid {producer_pid} in its namespace) runs in another PID namespace"
            ),
            ChannelError::ProtocolVersion { found, supported } => write!(
                f,
                "incompatible channel: protocol version {found}, this build speaks {supported}"
            ),
            ChannelError::CapsTooLong { len, capacity } => {
                write!(f, "caps of {len} bytes exceed the channel's {capacity}")
            }
            ChannelError::NoSlotPool => write!(f, "no slot pool configured"),
            ChannelError::EventTooLarge { len, capacity } => write!(
                f,
                "an event of {len} bytes exceeds the {capacity} bytes an event may take"
            ),
            ChannelError::OutOfRange {
                setting: Setting::Permissions,
                value,
            } => write!(
                f,
                "permissions {value:#o} is outside 0 to 0o777: {}",
                Setting::Permissions.why()
            ),
            ChannelError::OutOfRange { setting, value } => write!(
                f,
                "{} is {value}, outside 0 to {}: {}",
                setting.name(),
                setting.max(),
                setting.why()
            ),
            ChannelError::NotReserved { slot } => write!(f, "slot {slot} is not reserved"),
            ChannelError::Io { context, source } => write!(f, "{context}: {source}"),
            ChannelError::Corrupt(what) => write!(f, "corrupt control block: {what}"),
            ChannelError::TooManyConsumers => write!(
                f,
                "the channel already has {} consumers, the most it supports",
                layout::MAX_CONSUMERS
            ),
            ChannelError::HoldsEverySlot {
                channel,
                held,
                slots,
                hold,
            } => {
                write!(
                    f,
                    "this consumer holds {held} frames of channel '{channel}' and asked for another"
                )?;
                match hold {
                    Some(hold) if *held <= *hold as usize => {
                        return write!(
                            f,
                            ", every slot of a ring of {slots}; hold={hold} needs {} and the producer did not grow its ring in time (upstream holds its slots): give the producer slots={} or hold fewer frames (keep copies instead)",
                            *hold as u64 + 2,
                            *hold as u64 + 2
                        );
                    }
                    Some(hold) => write!(
                        f,
                        ", more than it declared (hold={hold}: {} frames at once)",
                        *hold as u64 + 1
                    )?,
                    None => write!(
                        f,
                        "; the ring has {slots} slots, so the producer cannot publish one until this consumer releases a frame"
                    )?,
                }
                write!(
                    f,
                    ": release frames it no longer needs, keep copies instead (copy=True), or declare how many it holds (hold=N; the ring needs N+2 slots)"
                )
            }
            ChannelError::HoldExceedsRing {
                channel,
                hold,
                slots,
            } => write!(
                f,
                "channel '{channel}' has {slots} slots, and hold={hold} needs {}: give the producer more slots (slots={} or more) or hold fewer frames (keep copies instead)",
                *hold as u64 + 2,
                *hold as u64 + 2
            ),
            ChannelError::ProducerGone(ProducerGone::Closed) => {
                write!(f, "the producer closed the channel")
            }
            ChannelError::ProducerGone(ProducerGone::Died) => write!(f, "the producer died"),
            ChannelError::RingTooShallow { wanted } => write!(
                f,
                "a consumer's declared hold needs a ring of {wanted} slots, deeper than the producer's"
            ),
            ChannelError::Timeout => write!(f, "timed out"),
            ChannelError::Interrupted => write!(f, "interrupted"),
            ChannelError::Truncated(path) => write!(
                f,
                "{} was truncated by another process; the channel cannot go on",
                path.display()
            ),
            ChannelError::NotAnId(id) => write!(f, "'{id}' is not a numeric user or group id"),
            ChannelError::UnknownWaitMode(name) => {
                write!(f, "unknown wait mode {name:?} (spin, hybrid or sleep)")
            }
        }
    }
}

impl std::error::Error for ChannelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ChannelError::Io { source, .. } => Some(source),
            ChannelError::NameTaken {
                source: Some(source),
                ..
            } => Some(source),
            _ => None,
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_pace;
#[cfg(test)]
mod tests_travelling;
