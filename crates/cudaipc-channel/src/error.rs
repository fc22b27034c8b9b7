// SPDX-License-Identifier: MPL-2.0

//! What the channel fails with ([`ChannelError`]): each variant carries the
//! facts, and its message says what this layer knows; the layers above add
//! the words of their own options.

use std::fmt;

use crate::{Corruption, ProducerGone, Setting, layout, shm};

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
    /// [`Producer::reserve`](crate::Producer::reserve) holding no
    /// reservation, for the caller to publish a deeper ring (or say it
    /// cannot grow) and reserve again.
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
