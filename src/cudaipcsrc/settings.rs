// SPDX-License-Identifier: MPL-2.0

//! The source's properties, and the one place they become the transport's
//! configuration ([`Settings::subscriber_config`]), as the sink's
//! `settings.rs` does for the publisher: the policies converted, the
//! allowed producers parsed (once, at `start`).

use std::sync::Arc;
use std::time::Duration;

use super::{CAT, TimestampMode};
use crate::enums::{self, OutputMemory, ProducerLost};
use cudaipc_channel::socket::Peers;
use cudaipc_transport::SubscriberConfig;

pub(super) const DEFAULT_CHANNEL: &str = "default";
pub(super) const DEFAULT_DEVICE_ID: i32 = -1;
pub(super) const DEFAULT_CONNECT_TIMEOUT_MS: i64 = 10_000;
pub(super) const DEFAULT_IS_LIVE: bool = false;
pub(super) const DEFAULT_TIMESTAMP_MODE: TimestampMode = TimestampMode::Pipeline;

#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) channel: String,
    pub(super) device_id: i32,
    pub(super) wait_mode: enums::WaitMode,
    pub(super) connect_timeout_ms: i64,
    pub(super) on_producer_lost: ProducerLost,
    pub(super) is_live: bool,
    pub(super) timestamp_mode: TimestampMode,
    pub(super) frames: enums::ConsumerMode,
    /// Buffers downstream keeps while this source pushes the next (0: none
    /// declared).
    pub(super) hold: u32,
    pub(super) output_memory: OutputMemory,
    pub(super) ipc_mode: enums::SrcIpcMode,
    /// Producers trusted beside the own user (descriptor channels).
    pub(super) allowed_producers: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            channel: DEFAULT_CHANNEL.into(),
            device_id: DEFAULT_DEVICE_ID,
            wait_mode: enums::WaitMode::default(),
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            on_producer_lost: ProducerLost::default(),
            is_live: DEFAULT_IS_LIVE,
            timestamp_mode: DEFAULT_TIMESTAMP_MODE,
            frames: enums::ConsumerMode::default(),
            hold: 0,
            output_memory: OutputMemory::default(),
            ipc_mode: enums::SrcIpcMode::default(),
            allowed_producers: String::new(),
        }
    }
}

impl Settings {
    /// The subscriber's configuration, or the error `start` posts (an
    /// `allowed-producers` that does not parse).
    pub(super) fn subscriber_config(&self) -> Result<SubscriberConfig, gst::ErrorMessage> {
        let uids = Peers::parse_ids(&self.allowed_producers).map_err(|e| {
            gst::error_msg!(gst::ResourceError::Settings, ("allowed-producers: {}", e))
        })?;
        Ok(SubscriberConfig {
            channel: self.channel.clone(),
            mode: self.frames.into(),
            wait_mode: self.wait_mode.into(),
            connect_timeout: (self.connect_timeout_ms >= 0)
                .then(|| Duration::from_millis(self.connect_timeout_ms as u64)),
            device_id: (self.device_id >= 0).then_some(self.device_id),
            on_finish_read_error: Arc::new(|slot, e| {
                gst::warning!(CAT, "cannot mark the end of reading slot {slot}: {e}");
            }),
            ipc_mode: self.ipc_mode.into(),
            producers: Peers {
                uids,
                gids: Vec::new(),
            },
            hold: (self.hold > 0).then_some(self.hold),
            // Downstream's threads release our frames while we wait, and we
            // copy frames rather than hold every slot (`frame_to_buffer`).
            refuse_self_wait: false,
        })
    }
}
