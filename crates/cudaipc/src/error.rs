// SPDX-License-Identifier: MPL-2.0

//! What can go wrong, by cause, with the channel's and the transport's
//! errors kept as sources.

use std::fmt;
use std::time::Duration;

use cudaipc_channel::{ChannelError, Setting};
use cudaipc_transport::{SubscriberError, TransportError};

/// Everything the API's calls can fail with. Bad input is an error, never a
/// panic.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A layout that cannot describe a frame: a stride below its row's
    /// bytes, a plane outside the frame, a zero size, the wrong number of
    /// planes.
    InvalidLayout(String),
    /// A format the elements do not handle (the caps name).
    UnsupportedFormat(String),
    /// A caps string that is not a fixed `video/x-raw` of a supported
    /// format.
    InvalidCaps {
        /// The caps string.
        caps: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An option outside the values it takes, 0 to [`Setting::max`]:
    /// refused before anything is created or attached.
    OutOfRange {
        /// Which option: [`Setting::Permissions`], [`Setting::Slots`] and
        /// [`Setting::WaitForConsumers`] are those of
        /// [`PublisherOptions`](crate::PublisherOptions), [`Setting::Hold`]
        /// is [`SubscriberOptions::hold`](crate::SubscriberOptions::hold).
        setting: Setting,
        /// The value given.
        value: u64,
    },
    /// Bytes given for a frame that are not the layout's frame size.
    FrameSize {
        /// The layout's frame size.
        expected: usize,
        /// Bytes given.
        given: usize,
    },
    /// Per-frame data larger than the channel lets a frame carry
    /// (`PublisherOptions::frame_data_bound`, less the framing).
    FrameDataTooLarge {
        /// Bytes given.
        len: usize,
        /// The most an application's data may have on this channel.
        bound: usize,
    },
    /// A channel name that cannot be used (empty, too long, a `/` in it):
    /// the name.
    InvalidChannelName(String),
    /// Another live producer owns the channel.
    ChannelInUse {
        /// The channel's name.
        channel: String,
        /// The process id of the producer that owns it.
        pid: u32,
    },
    /// No producer appeared on the channel within the timeout (`None`:
    /// none was running and the attach did not wait).
    NoProducer {
        /// The channel's name.
        channel: String,
        /// How long the attach waited.
        timeout: Option<Duration>,
    },
    /// The channel exists but may not be used by this process: its files'
    /// permissions, or an owner that is neither this user nor one of the
    /// allowed producers (another user may have taken the name).
    PermissionDenied {
        /// The channel's name.
        channel: String,
        /// Which file or owner, and what to change.
        reason: String,
    },
    /// The producer closed the channel (`died: false`) or its process
    /// ended without closing it (`died: true`).
    ProducerGone {
        /// The channel's name.
        channel: String,
        /// Whether its process ended without closing the channel.
        died: bool,
    },
    /// No frame came within this time.
    Timeout(Duration),
    /// `when_full: Drop` and every slot is held by consumers: no loan now.
    NoFreeSlot,
    /// The channel's slots are smaller than a frame of the layout.
    SlotsTooSmall {
        /// The layout's frame size.
        frame_size: usize,
    },
    /// The publisher or subscriber was closed ([`Publisher::close`],
    /// [`Subscriber::close`], a [`Closer`]), before or during the call.
    ///
    /// [`Publisher::close`]: crate::Publisher::close
    /// [`Subscriber::close`]: crate::Subscriber::close
    /// [`Closer`]: crate::Closer
    Closed,
    /// The caller's interrupt flag ended the wait
    /// ([`Publisher::loan_interruptible`](crate::Publisher::loan_interruptible)).
    Interrupted,
    /// The cuda transport was asked for where no CUDA device is usable, or
    /// the channel's device cannot be opened here.
    Device(String),
    /// Any other failure of the channel (shared memory, sockets, a corrupt
    /// control block): what was being done, and the channel's error.
    Channel {
        /// What was being done.
        what: &'static str,
        /// The channel's error.
        source: ChannelError,
    },
    /// Any other failure of the slots (allocating, mapping, GPU ordering).
    Transport {
        /// What was being done.
        what: &'static str,
        /// The transport's error.
        source: TransportError,
    },
    /// A frame could not be read (the subscriber's error).
    Read(SubscriberError),
    /// The subscriber holds frames in a way that cannot work: it asked for
    /// a frame while holding every frame it may hold (waiting would wait on
    /// itself), or declared a `hold` its producer's ring cannot fit. The
    /// channel's error says how many and what to do.
    Holds(ChannelError),
}

impl Error {
    /// A subscriber's failure to read, with holding mistakes told apart.
    pub(crate) fn read(e: SubscriberError) -> Self {
        match e {
            SubscriberError::Read(TransportError::Channel(
                e @ (ChannelError::HoldsEverySlot { .. } | ChannelError::HoldExceedsRing { .. }),
            )) => Self::Holds(e),
            e => Self::Read(e),
        }
    }

    /// The channel's error, as the cause that the variants above name.
    pub(crate) fn channel(channel: &str, what: &'static str, e: ChannelError) -> Self {
        match e {
            ChannelError::InvalidName { name } => Self::InvalidChannelName(name),
            ChannelError::InUse { channel, pid } => Self::ChannelInUse { channel, pid },
            ChannelError::NoProducer { channel } => Self::NoProducer {
                channel,
                timeout: None,
            },
            e @ ChannelError::NoAccess { .. } => Self::PermissionDenied {
                channel: channel.to_owned(),
                reason: format!("{e}: the publisher must widen PublisherOptions::permissions"),
            },
            e @ ChannelError::UntrustedProducer { .. } => Self::PermissionDenied {
                channel: channel.to_owned(),
                reason: format!(
                    "{e}; allow it with SubscriberOptions::allowed_producer_uids (or allowed_producer_gids)"
                ),
            },
            e @ (ChannelError::NameTaken { .. } | ChannelError::Refused { .. }) => {
                Self::PermissionDenied {
                    channel: channel.to_owned(),
                    reason: e.to_string(),
                }
            }
            ChannelError::ProducerGone(gone) => Self::ProducerGone {
                channel: channel.to_owned(),
                died: gone == cudaipc_channel::ProducerGone::Died,
            },
            ChannelError::Interrupted => Self::Closed,
            ChannelError::OutOfRange { setting, value } => Self::OutOfRange { setting, value },
            source => Self::Channel { what, source },
        }
    }

    pub(crate) fn transport(channel: &str, what: &'static str, e: TransportError) -> Self {
        match e {
            TransportError::Channel(e) => Self::channel(channel, what, e),
            source => Self::Transport { what, source },
        }
    }
}

/// Appended to a CUDA error without a driver: the host transport needs
/// none.
pub(crate) fn no_driver_note(e: &cudaipc_transport::cuda::CudaError) -> &'static str {
    match e {
        cudaipc_transport::cuda::CudaError::NoDriver => {
            " (without one, Transport::Host needs no GPU, on both sides)"
        }
        _ => "",
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidLayout(why) => write!(f, "invalid frame layout: {why}"),
            Self::UnsupportedFormat(name) => write!(
                f,
                "unsupported video format '{name}' (supported: RGB, RGBA, BGRA, RGBx, BGRx, GRAY8, NV12, I420)"
            ),
            Self::InvalidCaps { caps, reason } => {
                write!(f, "unusable caps \"{caps}\": {reason}")
            }
            Self::OutOfRange { setting, value } => {
                let (field, value, extra) = match setting {
                    Setting::Permissions => (
                        "PublisherOptions::permissions",
                        format!("{value:#o}"),
                        " (0o600: this user only)",
                    ),
                    Setting::Slots => (
                        "PublisherOptions::slots",
                        value.to_string(),
                        " (0: the transport chooses)",
                    ),
                    Setting::WaitForConsumers => (
                        "PublisherOptions::wait_for_consumers",
                        value.to_string(),
                        "",
                    ),
                    Setting::Hold => (
                        "SubscriberOptions::hold",
                        format!("Some({value})"),
                        ", or None (not declared)",
                    ),
                    Setting::FrameDataBound => {
                        ("PublisherOptions::frame_data_bound", value.to_string(), "")
                    }
                };
                let max = match setting {
                    Setting::Permissions => format!("{:#o}", setting.max()),
                    _ => setting.max().to_string(),
                };
                write!(
                    f,
                    "{field} is {value}: {}, so it takes 0 to {max}{extra}",
                    setting.why()
                )
            }
            Self::FrameSize { expected, given } => write!(
                f,
                "a frame of this layout has {expected} bytes, {given} were given"
            ),
            Self::FrameDataTooLarge { len, bound } => write!(
                f,
                "per-frame data of {len} bytes: this channel's frames carry at most {bound} (the producer's frame_data_bound sets it)"
            ),
            Self::InvalidChannelName(name) => {
                write!(f, "{}", ChannelError::InvalidName { name: name.clone() })
            }
            Self::ChannelInUse { channel, pid } => write!(
                f,
                "channel '{channel}' is in use by a live producer (pid {pid})"
            ),
            Self::NoProducer {
                channel,
                timeout: Some(timeout),
            } => write!(
                f,
                "no producer on channel '{channel}' within {} ms",
                timeout.as_millis()
            ),
            Self::NoProducer {
                channel,
                timeout: None,
            } => write!(f, "no producer on channel '{channel}'"),
            Self::PermissionDenied { channel, reason } => {
                write!(f, "channel '{channel}' may not be used: {reason}")
            }
            Self::ProducerGone {
                channel,
                died: false,
            } => write!(f, "the producer of channel '{channel}' closed it"),
            Self::ProducerGone {
                channel,
                died: true,
            } => write!(f, "the producer of channel '{channel}' died"),
            Self::Timeout(timeout) => {
                write!(f, "no frame within {} ms", timeout.as_millis())
            }
            Self::NoFreeSlot => f.write_str("every slot is held by consumers"),
            Self::SlotsTooSmall { frame_size } => write!(
                f,
                "the channel's slots are smaller than a frame of {frame_size} bytes"
            ),
            Self::Closed => f.write_str("the channel is closed"),
            Self::Interrupted => f.write_str("the wait was interrupted"),
            Self::Device(why) => write!(f, "CUDA device: {why}"),
            Self::Channel { what, source } => write!(f, "cannot {what}: {source}"),
            Self::Transport { what, source } => write!(f, "cannot {what}: {source}"),
            Self::Read(e) => write!(f, "cannot read a frame: {e}"),
            Self::Holds(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Channel { source, .. } => Some(source),
            Self::Transport { source, .. } => Some(source),
            Self::Read(e) => Some(e),
            Self::Holds(e) => Some(e),
            _ => None,
        }
    }
}
