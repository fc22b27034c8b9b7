// SPDX-License-Identifier: MPL-2.0

//! The sink's properties, and the one place they become the transport's
//! configuration ([`Settings::publisher_config`]): the transport, device,
//! IPC mode and GPU ordering resolved, the policies converted, the allowed
//! consumers parsed.

use std::sync::Arc;

use crate::enums::{self, Transport};
use crate::gstcuda;
use cudaipc_channel::socket::Peers;
use cudaipc_transport::cuda;
use cudaipc_transport::{self as transport, GpuSync, PublisherConfig, TransportKind};

pub(super) const DEFAULT_CHANNEL: &str = "default";
/// 0: chosen by the transport.
pub(super) const DEFAULT_SLOTS: u32 = 0;
pub(super) const DEFAULT_DEVICE_ID: i32 = 0;
pub(super) const DEFAULT_PERMISSIONS: u32 = 0o600;
pub(super) const DEFAULT_WAIT_FOR_CONNECTION: u32 = 0;
pub(super) const DEFAULT_FRAME_DATA_SIZE: u32 = cudaipc_channel::layout::DEFAULT_FRAME_DATA_BOUND;
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) channel: String,
    pub(super) slots: u32,
    pub(super) transport: Transport,
    pub(super) device_id: i32,
    pub(super) when_full: enums::WhenFull,
    pub(super) wait_mode: enums::WaitMode,
    pub(super) gpu_sync: enums::GpuSync,
    pub(super) permissions: u32,
    pub(super) wait_for_connection: u32,
    pub(super) ipc_mode: enums::IpcMode,
    /// `ipc-mode=fd`: consumers allowed beside the own user.
    pub(super) allowed_uids: String,
    pub(super) allowed_gids: String,
    /// Bytes of metas and application data each frame may carry.
    pub(super) frame_data_size: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            channel: DEFAULT_CHANNEL.into(),
            slots: DEFAULT_SLOTS,
            transport: Transport::default(),
            device_id: DEFAULT_DEVICE_ID,
            when_full: enums::WhenFull::default(),
            wait_mode: enums::WaitMode::default(),
            gpu_sync: enums::GpuSync::default(),
            permissions: DEFAULT_PERMISSIONS,
            wait_for_connection: DEFAULT_WAIT_FOR_CONNECTION,
            ipc_mode: enums::IpcMode::default(),
            allowed_uids: String::new(),
            allowed_gids: String::new(),
            frame_data_size: DEFAULT_FRAME_DATA_SIZE,
        }
    }
}

impl Settings {
    /// The transport the `transport` property stands for.
    pub(super) fn kind(&self) -> TransportKind {
        TransportKind::resolve(self.transport.into())
    }

    /// Whether a full ring makes the sink wait (`when-full=block`), the only
    /// policy the slot pool suits.
    pub(super) fn blocks_when_full(&self) -> bool {
        self.when_full == enums::WhenFull::Block
    }

    /// The device whose context to share with GStreamer's CUDA elements:
    /// ours, when that library is there and we use the cuda transport.
    pub(super) fn context_device(&self) -> Option<Arc<cuda::Device>> {
        context_device(self.kind(), self.device_id)
    }

    /// The transport's configuration, or the error to post.
    pub(super) fn publisher_config(&self) -> Result<PublisherConfig, gst::ErrorMessage> {
        let kind = self.kind();
        let device = device_for(kind, self.device_id)?;
        let ipc_mode = transport::resolve_ipc_mode(self.ipc_mode.into(), kind, device.as_deref())
            .map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::Settings,
                ("{}{}", e, crate::hints::transport(&e))
            )
        })?;
        let gpu_sync =
            GpuSync::resolve(self.gpu_sync.into(), kind, device.as_deref()).map_err(|e| {
                match crate::hints::gpu_sync(&e) {
                    Some(message) => gst::error_msg!(gst::ResourceError::Settings, ("{}", message)),
                    None => gst::error_msg!(gst::ResourceError::Settings, ("{}", e)),
                }
            })?;
        Ok(PublisherConfig {
            channel: self.channel.clone(),
            kind,
            device,
            slots: self.slots as usize,
            permissions: self.permissions,
            gpu_sync,
            when_full: self.when_full.into(),
            wait_mode: self.wait_mode.into(),
            wait_for_consumers: self.wait_for_connection,
            ipc_mode,
            peers: peers(&self.allowed_uids, &self.allowed_gids)?,
            frame_data_bound: self.frame_data_size,
        })
    }
}

/// The device whose context to share with GStreamer's CUDA elements:
/// ours, when that library is there and we use the cuda transport.
fn context_device(kind: TransportKind, device_id: i32) -> Option<Arc<cuda::Device>> {
    (gstcuda::available() && kind == TransportKind::Cuda)
        .then(|| cuda::Device::get(device_id).ok())
        .flatten()
}

/// The device of the cuda transport (`None` for the host transport).
fn device_for(
    kind: TransportKind,
    device_id: i32,
) -> Result<Option<Arc<cuda::Device>>, gst::ErrorMessage> {
    match kind {
        TransportKind::Cuda => cuda::Device::get(device_id).map(Some).map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::OpenWrite,
                (
                    "transport=cuda needs CUDA device {}: {}{}",
                    device_id,
                    e,
                    crate::hints::cuda(&e)
                )
            )
        }),
        TransportKind::Host => Ok(None),
    }
}

/// The consumers `allowed-uids` and `allowed-gids` name.
fn peers(uids: &str, gids: &str) -> Result<Peers, gst::ErrorMessage> {
    let parse = |property: &str, text: &str| {
        Peers::parse_ids(text)
            .map_err(|e| gst::error_msg!(gst::ResourceError::Settings, ("{}: {}", property, e)))
    };
    Ok(Peers {
        uids: parse("allowed-uids", uids)?,
        gids: parse("allowed-gids", gids)?,
    })
}
