// SPDX-License-Identifier: MPL-2.0

//! Why configuring, publishing or lending a slot failed.

use crate::TransportError;
use cudaipc_channel::ChannelError;

#[derive(Debug)]
pub enum ConfigureError {
    /// The transport could not create the slots.
    Allocate {
        count: usize,
        size: usize,
        error: TransportError,
    },
    /// The channel could not switch to them (interrupted, or closed).
    Install(TransportError),
}

impl std::fmt::Display for ConfigureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Allocate { count, size, error } => {
                write!(f, "cannot allocate {count} slots of {size} bytes: {error}")
            }
            Self::Install(e) => write!(f, "cannot publish the slot pool: {e}"),
        }
    }
}

#[derive(Debug)]
pub enum PublishError {
    Channel(ChannelError),
    Transport(TransportError),
    /// Filling slot `slot` failed: ordering it (a [`TransportError`]), or
    /// the caller's copy (its own error).
    Copy {
        slot: usize,
        error: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl PublishError {
    /// Whether the sink was unlocked (flushing or stopping) meanwhile.
    pub fn is_interrupted(&self) -> bool {
        matches!(
            self,
            Self::Channel(ChannelError::Interrupted)
                | Self::Transport(TransportError::Channel(ChannelError::Interrupted))
        )
    }
}

impl From<TransportError> for PublishError {
    fn from(e: TransportError) -> Self {
        match e {
            TransportError::Channel(e) => Self::Channel(e),
            e => Self::Transport(e),
        }
    }
}

impl std::fmt::Display for PublishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Channel(e) => write!(f, "{e}"),
            Self::Transport(e) => write!(f, "{e}"),
            Self::Copy { slot, error } => {
                write!(f, "cannot copy the frame into slot {slot}: {error}")
            }
        }
    }
}

/// Why a writer got no slot.
#[derive(Debug)]
pub enum ReserveError {
    /// Interrupted, or no slot set (yet).
    Flushing,
    /// The slots are smaller than the frame: the caps changed and the slots
    /// are not resized yet.
    TooSmall,
    Channel(ChannelError),
    Transport(TransportError),
}
