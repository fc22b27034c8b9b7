//! Where the slots live and how access to them is ordered: the seam between
//! the channel (which only knows slot indices) and the elements.
//!
//! Two backends pass the same contract tests: `cuda` (device memory exported
//! with CUDA IPC, GPU-side ordering with interprocess events, or host
//! synchronisation) and `host` (a shared host-memory file, for machines
//! without a GPU and for CI).

mod cuda;
mod host;
mod lending;
#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::cuda::{CudaError, Device};
use crate::ipc::layout::{
    RELEASE_DESCRIPTOR_BYTES, SLOT_DESCRIPTOR_BYTES, TRANSPORT_CUDA, TRANSPORT_HOST,
};
use crate::ipc::{ChannelError, ChannelInfo, PoolInfo, Producer};

pub use cuda::{CudaConsumerSlots, CudaProducerSlots};
pub use host::{HostConsumerSlots, HostProducerSlots};
pub use lending::LentSlots;

/// The `transport` property.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportChoice {
    /// CUDA when a device is usable, else host.
    #[default]
    Auto,
    Cuda,
    Host,
}

impl FromStr for TransportChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "cuda" => Ok(Self::Cuda),
            "host" => Ok(Self::Host),
            other => Err(format!("unknown transport {other:?}")),
        }
    }
}

/// The transport actually in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    Cuda,
    Host,
}

impl TransportKind {
    /// Resolves `auto` by asking whether CUDA is usable.
    pub fn resolve(choice: TransportChoice) -> Self {
        match choice {
            TransportChoice::Cuda => Self::Cuda,
            TransportChoice::Host => Self::Host,
            TransportChoice::Auto if crate::cuda::is_available() => Self::Cuda,
            TransportChoice::Auto => Self::Host,
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

/// How "written" and "done reading" are signalled for device slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuSync {
    /// Interprocess events recorded and waited on by the GPU: no host
    /// synchronisation on the hot path.
    #[default]
    Event,
    /// Synchronise the stream on the host before publishing and before
    /// releasing (the seed project's way).
    Host,
}

impl FromStr for GpuSync {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "event" => Ok(Self::Event),
            "host" => Ok(Self::Host),
            other => Err(format!("unknown gpu-sync mode {other:?}")),
        }
    }
}

#[derive(Debug)]
pub enum TransportError {
    Cuda(CudaError),
    Channel(ChannelError),
    Io(String),
    Invalid(String),
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::Cuda(e) => write!(f, "{e}"),
            TransportError::Channel(e) => write!(f, "{e}"),
            TransportError::Io(e) => f.write_str(e),
            TransportError::Invalid(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for TransportError {}

impl From<CudaError> for TransportError {
    fn from(e: CudaError) -> Self {
        TransportError::Cuda(e)
    }
}

impl From<ChannelError> for TransportError {
    fn from(e: ChannelError) -> Self {
        TransportError::Channel(e)
    }
}

/// Where a slot's bytes are.
#[derive(Debug, Clone)]
pub enum SlotMemory {
    /// Shared host memory. Writable only on the producer side (the
    /// consumer's mapping is read-only). If another process truncates the
    /// file, the range turns into private zero pages (never SIGBUS) and the
    /// slots report it at `after_write`/`before_read`/`finish_read`.
    Host { ptr: *mut u8, len: usize },
    /// Device memory on `device`.
    Device {
        ptr: u64,
        len: usize,
        device: Arc<Device>,
    },
}

// SAFETY: the host pointer is into a shared mapping owned by the slots
// object that produced it, which its users keep alive while they use it.
unsafe impl Send for SlotMemory {}
// SAFETY: see above.
unsafe impl Sync for SlotMemory {}

/// The producer's slots.
pub trait ProducerSlots: Send + Sync {
    fn kind(&self) -> TransportKind;
    fn slot_count(&self) -> usize;
    fn slot_size(&self) -> usize;
    fn slot_descriptors(&self) -> Vec<[u8; SLOT_DESCRIPTOR_BYTES]>;
    fn pool_descriptor(&self) -> Vec<u8>;
    fn slot_memory(&self, slot: usize) -> SlotMemory;
    /// Orders every later write into `slot` after the consumers' use of its
    /// previous frame. Called once a slot is reserved, before it is written.
    fn before_write(&self, slot: usize, producer: &Producer) -> Result<(), TransportError>;
    /// Signals that the writes into `slot` issued so far make the frame.
    /// Called right before the frame is published.
    fn after_write(&self, slot: usize) -> Result<(), TransportError>;
}

/// A consumer's view of the producer's slots.
pub trait ConsumerSlots: Send + Sync {
    fn kind(&self) -> TransportKind;
    fn slot_count(&self) -> usize;
    fn slot_size(&self) -> usize;
    fn slot_memory(&self, slot: usize) -> SlotMemory;
    /// Orders every later read of `slot` after the producer's writes.
    fn before_read(&self, slot: usize) -> Result<(), TransportError>;
    /// Marks the point after which this process no longer reads `slot`:
    /// everything issued so far. The channel release follows it.
    fn finish_read(&self, slot: usize) -> Result<(), TransportError>;
    /// Descriptors the producer waits on before reusing each slot.
    fn release_descriptors(&self) -> Vec<[u8; RELEASE_DESCRIPTOR_BYTES]>;
}

/// Parameters for creating a producer's slots.
#[derive(Debug, Clone)]
pub struct SlotRequest {
    pub channel: String,
    pub session: u64,
    pub generation: u64,
    pub count: usize,
    pub size: usize,
    pub permissions: u32,
    pub gpu_sync: GpuSync,
}

pub fn create_producer_slots(
    kind: TransportKind,
    request: &SlotRequest,
    device: Option<&Arc<Device>>,
) -> Result<Box<dyn ProducerSlots>, TransportError> {
    match kind {
        TransportKind::Host => Ok(Box::new(HostProducerSlots::create(request)?)),
        TransportKind::Cuda => {
            let device = device.ok_or_else(|| {
                TransportError::Invalid("the cuda transport needs a device".into())
            })?;
            Ok(Box::new(CudaProducerSlots::create(device, request)?))
        }
    }
}

/// Opens the slots of a channel's current pool. `device` is the consumer's
/// own device for the cuda transport (it may differ from the producer's).
pub fn open_consumer_slots(
    channel: &str,
    info: &ChannelInfo,
    pool: &PoolInfo,
    device: Option<&Arc<Device>>,
) -> Result<Arc<dyn ConsumerSlots>, TransportError> {
    match TransportKind::from_wire(info.transport) {
        Some(TransportKind::Host) => Ok(Arc::new(HostConsumerSlots::open(
            channel,
            pool,
            info.producer_uid,
        )?)),
        Some(TransportKind::Cuda) => {
            let device = device.ok_or_else(|| {
                TransportError::Invalid("the cuda transport needs a device".into())
            })?;
            let sync = if info.gpu_sync == crate::ipc::layout::GPU_SYNC_HOST {
                GpuSync::Host
            } else {
                GpuSync::Event
            };
            Ok(Arc::new(CudaConsumerSlots::open(device, info, pool, sync)?))
        }
        None => Err(TransportError::Invalid(format!(
            "unknown transport {}",
            info.transport
        ))),
    }
}
