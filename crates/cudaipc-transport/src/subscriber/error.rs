// SPDX-License-Identifier: MPL-2.0

//! What attaching to a channel or reading from it fails with.

use std::fmt;

use crate::cuda::CudaError;
use crate::{SubscriberCorruption, TransportError};
use cudaipc_channel::ChannelError;

#[derive(Debug)]
pub enum SubscriberError {
    /// The interrupt flag was raised.
    Interrupted,
    /// No producer appeared before the connect timeout.
    NoProducer(ChannelError),
    /// The channel exists but cannot be attached to.
    Attach(ChannelError),
    /// The channel uses the cuda transport, but CUDA is not usable here.
    NoCuda { channel: String, source: CudaError },
    /// The producer's GPU is not visible in this process (see
    /// `CUDA_VISIBLE_DEVICES`), and no device to read on was configured.
    ProducerGpuNotVisible,
    /// A CUDA device cannot be opened (`ordinal`), or the producer's could
    /// not be looked for (`None`).
    Device {
        ordinal: Option<i32>,
        source: CudaError,
    },
    /// The control block holds something impossible: which field, how.
    Corrupt(SubscriberCorruption),
    /// The producer's slots cannot be opened.
    OpenSlots(TransportError),
    /// Any other failure of a read.
    Read(TransportError),
    /// Another process truncated one of the channel's shared files: the
    /// channel cannot go on, as if its producer were lost.
    Truncated(std::path::PathBuf),
}

impl fmt::Display for SubscriberError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Interrupted => f.write_str("interrupted"),
            Self::NoProducer(e) | Self::Attach(e) => write!(f, "{e}"),
            Self::NoCuda { channel, source } => write!(
                f,
                "channel '{channel}' uses the cuda transport, but CUDA is not usable here: {source}"
            ),
            Self::ProducerGpuNotVisible => f.write_str(
                "the producer's GPU is not visible in this process (check CUDA_VISIBLE_DEVICES)",
            ),
            Self::Device {
                ordinal: Some(ordinal),
                source,
            } => write!(f, "cannot open CUDA device {ordinal}: {source}"),
            Self::Device {
                ordinal: None,
                source,
            } => write!(f, "{source}"),
            Self::Corrupt(what) => write!(f, "{what}"),
            Self::OpenSlots(e) | Self::Read(e) => write!(f, "{e}"),
            Self::Truncated(path) => write!(f, "{}", ChannelError::Truncated(path.clone())),
        }
    }
}

impl std::error::Error for SubscriberError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NoProducer(e) | Self::Attach(e) => Some(e),
            Self::NoCuda { source, .. } | Self::Device { source, .. } => Some(source),
            Self::OpenSlots(e) | Self::Read(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ChannelError> for SubscriberError {
    fn from(e: ChannelError) -> Self {
        match e {
            ChannelError::Interrupted => Self::Interrupted,
            ChannelError::Corrupt(what) => Self::Corrupt(what.into()),
            ChannelError::Truncated(path) => Self::Truncated(path),
            e => Self::Read(TransportError::Channel(e)),
        }
    }
}

impl From<TransportError> for SubscriberError {
    /// A failure of the slots' ordering hooks.
    fn from(e: TransportError) -> Self {
        match e {
            TransportError::Channel(e) => e.into(),
            e => Self::Read(e),
        }
    }
}
