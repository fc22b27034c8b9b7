// SPDX-License-Identifier: MPL-2.0

//! The choices a channel is made of: where its slots live
//! ([`TransportKind`]), how GPU work on them is ordered ([`GpuSync`]), and
//! how the channel is reached ([`resolve_ipc_mode`]), with their wire
//! values in the control block.

use crate::cuda::Device;
use crate::{LegacyCudaIpc, TransportError};
use cudaipc_channel::IpcMode;
use cudaipc_channel::layout::{
    GPU_SYNC_EVENT, GPU_SYNC_HOST, GPU_SYNC_TIMELINE, TRANSPORT_CUDA, TRANSPORT_HOST,
};

/// Where a channel's slots live (the `transport` property, `None` for
/// `auto`, and the control block's `transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    Cuda,
    Host,
}

impl TransportKind {
    /// `choice`, or for `auto` (`None`) CUDA when a device is usable, else
    /// host memory.
    pub fn resolve(choice: Option<TransportKind>) -> Self {
        match choice {
            Some(kind) => kind,
            // On Windows the CUDA transport has not run on a GPU yet
            // (docs/windows.md): `auto` takes host memory there.
            None if cfg!(unix) && crate::cuda::is_available() => Self::Cuda,
            None => Self::Host,
        }
    }

    pub fn wire_value(self) -> u32 {
        match self {
            Self::Cuda => TRANSPORT_CUDA,
            Self::Host => TRANSPORT_HOST,
        }
    }

    pub fn from_wire(value: u32) -> Option<Self> {
        match value {
            TRANSPORT_CUDA => Some(Self::Cuda),
            TRANSPORT_HOST => Some(Self::Host),
            _ => None,
        }
    }
}

/// How "written" and "done reading" are signalled for device slots (the
/// `gpu-sync` property and the control block's `gpu_sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuSync {
    /// Interprocess events recorded and waited on by the GPU: no host
    /// synchronisation on the hot path.
    #[default]
    Event,
    /// Synchronise the stream on the host before publishing and before
    /// releasing (the seed project's way).
    Host,
    /// Values the GPU writes into memory both processes map (see
    /// `timeline`): no event files, so it works across users (and, on a
    /// descriptor channel, PID namespaces).
    Timeline,
}

impl GpuSync {
    pub fn wire_value(self) -> u32 {
        match self {
            Self::Event => GPU_SYNC_EVENT,
            Self::Host => GPU_SYNC_HOST,
            Self::Timeline => GPU_SYNC_TIMELINE,
        }
    }

    pub fn from_wire(value: u32) -> Option<Self> {
        match value {
            GPU_SYNC_EVENT => Some(Self::Event),
            GPU_SYNC_HOST => Some(Self::Host),
            GPU_SYNC_TIMELINE => Some(Self::Timeline),
            _ => None,
        }
    }

    /// `choice`, or for `auto` (`None`): the timeline on the cuda transport
    /// where the device can write and wait for values, else events. The
    /// timeline crosses users (and, on a descriptor channel, PID
    /// namespaces), which events do not, and without MPS both sides wait by
    /// reading a word in memory rather than querying the other process's
    /// event (docs/performance.md: up to 4x on a consumer that drops frames,
    /// 1.6x on nvcodec's output, equal with MPS). `Err`: the timeline asked
    /// for where it cannot work ([`TransportError::TimelineNeedsCuda`],
    /// [`TransportError::TimelineUnsupported`]).
    ///
    /// An integrated GPU (Tegra) has no interprocess events: there `auto`
    /// means the timeline, else host synchronisation, and events asked for
    /// are refused ([`TransportError::NoLegacyCudaIpc`]).
    pub fn resolve(
        choice: Option<GpuSync>,
        kind: TransportKind,
        device: Option<&Device>,
    ) -> Result<GpuSync, TransportError> {
        Self::resolve_for(choice, kind, DeviceTraits::of(device))
    }

    /// [`resolve`](Self::resolve) for a device with `traits`.
    pub fn resolve_for(
        choice: Option<GpuSync>,
        kind: TransportKind,
        traits: DeviceTraits,
    ) -> Result<GpuSync, TransportError> {
        let cuda = kind == TransportKind::Cuda;
        match choice {
            Some(GpuSync::Timeline) if !cuda => Err(TransportError::TimelineNeedsCuda),
            Some(GpuSync::Timeline) if !traits.value_ops => {
                Err(TransportError::TimelineUnsupported)
            }
            Some(GpuSync::Event) if cuda && traits.integrated => {
                Err(TransportError::NoLegacyCudaIpc {
                    what: LegacyCudaIpc::Events,
                })
            }
            Some(choice) => Ok(choice),
            None if cuda && traits.value_ops => Ok(GpuSync::Timeline),
            None if cuda && traits.integrated => Ok(GpuSync::Host),
            None => Ok(GpuSync::Event),
        }
    }
}

/// What the choices of a channel's kind and ordering need to know of its
/// device: read from it ([`DeviceTraits::of`]), or made up by tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceTraits {
    /// An integrated GPU, sharing the system's memory
    /// (`CU_DEVICE_ATTRIBUTE_INTEGRATED`: Jetson's Tegra): CUDA's legacy
    /// IPC handles (`cuIpc*`, memory and events) do not exist there.
    pub integrated: bool,
    /// Streams can write and wait for 64-bit values in memory
    /// (`CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS`).
    pub value_ops: bool,
}

impl DeviceTraits {
    /// `device`'s traits; no device has none.
    pub fn of(device: Option<&Device>) -> Self {
        device.map_or_else(Self::default, |device| Self {
            integrated: device.is_integrated(),
            value_ops: device.has_stream_value_ops(),
        })
    }
}

/// How a producer's channel is reached (the sink's `ipc-mode`): `choice`,
/// or for `auto` (`None`) a descriptor channel on the cuda transport of an
/// integrated GPU, which has no legacy CUDA IPC handles (VMM allocations
/// exported as file descriptors take their place), else a legacy one, which
/// consumers of every version find. `Err`: a legacy channel of the cuda
/// transport asked for on an integrated GPU
/// ([`TransportError::NoLegacyCudaIpc`]).
pub fn resolve_ipc_mode(
    choice: Option<IpcMode>,
    kind: TransportKind,
    device: Option<&Device>,
) -> Result<IpcMode, TransportError> {
    resolve_ipc_mode_for(choice, kind, DeviceTraits::of(device))
}

/// [`resolve_ipc_mode`] for a device with `traits`.
pub fn resolve_ipc_mode_for(
    choice: Option<IpcMode>,
    kind: TransportKind,
    traits: DeviceTraits,
) -> Result<IpcMode, TransportError> {
    let tegra_cuda = kind == TransportKind::Cuda && traits.integrated;
    match choice {
        Some(IpcMode::Legacy) if tegra_cuda => Err(TransportError::NoLegacyCudaIpc {
            what: LegacyCudaIpc::Memory,
        }),
        Some(mode) => Ok(mode),
        None if tegra_cuda => Ok(IpcMode::Fd),
        None => Ok(IpcMode::Legacy),
    }
}
