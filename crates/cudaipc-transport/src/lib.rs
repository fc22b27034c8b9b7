//! Where the slots live and how access to them is ordered: the seam between
//! the channel (which only knows slot indices) and the elements.
//!
//! Two backends pass the same contract tests: `cuda` (device memory of a
//! [`MemoryKind`] ordered across processes by a [`GpuSync`], composed as
//! one of [`CUDA_COMPOSITIONS`]) and `host` (shared host memory, for
//! machines without a GPU and for CI).
//!
//! [`cuda`] holds the CUDA driver wrappers both use. Nothing here knows
//! GStreamer.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod corruption;
pub mod cuda;
mod cuda_slots;
mod host;
mod lending;
mod lent_slots;
mod publisher;
mod reservation;
mod subscriber;
#[cfg(test)]
mod tests;
mod timeline;

use std::fmt;
use std::sync::Arc;

use crate::cuda::{CudaError, Device, DeviceRegion};
use cudaipc_channel::layout::{
    GPU_SYNC_EVENT, GPU_SYNC_HOST, GPU_SYNC_TIMELINE, RELEASE_DESCRIPTOR_BYTES,
    SLOT_DESCRIPTOR_BYTES, TRANSPORT_CUDA, TRANSPORT_HOST,
};
use cudaipc_channel::{ChannelError, ChannelInfo, IpcMode, PoolInfo, Producer};

pub use corruption::SubscriberCorruption;
pub use cuda_slots::{
    CUDA_COMPOSITIONS, CudaComposition, CudaConsumerSlots, CudaProducerSlots, MemoryKind,
    waits_on_host,
};
pub use host::{HostConsumerSlots, HostProducerSlots, HostRegion};
pub use lending::{Learned, LendableFrame, Lender, Lent};
pub use lent_slots::LentSlots;
pub use publisher::{
    Allocated, ConfigureError, PublishError, Publisher, PublisherConfig, PublisherStats,
    ReserveError, SlotLoan,
};
pub use subscriber::{Event, HeldFrame, Subscriber, SubscriberConfig, SubscriberError};

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

/// Which of CUDA's legacy IPC handles an integrated GPU lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegacyCudaIpc {
    /// Device memory's (`cuIpcGetMemHandle`): the slots of a legacy
    /// channel of the cuda transport.
    Memory,
    /// Events' (`cuIpcGetEventHandle`): the event ordering.
    Events,
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

/// GPU work of one process that another waits for on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuWork {
    /// The consumers' reads of a slot (the producer waits).
    ConsumerReads,
    /// The producer's own writes into a slot.
    OwnWrites,
    /// The producer's writes into a slot (a consumer waits).
    ProducerWrites,
}

impl fmt::Display for GpuWork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GpuWork::ConsumerReads => "consumers' GPU reads",
            GpuWork::OwnWrites => "our writes",
            GpuWork::ProducerWrites => "the producer's writes",
        })
    }
}

/// A file or block of shared memory a transport maps: the names in its
/// errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedObject {
    /// Host slots (a data file, or memory handed over a socket).
    Slots,
    /// The GPU-written values of `GpuSync::Timeline`.
    TimelineBlock,
}

impl fmt::Display for SharedObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SharedObject::Slots => "data file",
            SharedObject::TimelineBlock => "timeline block",
        })
    }
}

/// Everything the slots and their GPU ordering can fail with, the channel's
/// and CUDA's errors included. The variants carry the facts; what a user
/// should change (a property, an option) is said by the caller.
#[derive(Debug)]
pub enum TransportError {
    /// A CUDA driver call failed (which one, and its result).
    Cuda(CudaError),
    /// The channel failed.
    Channel(ChannelError),
    /// A system call on shared memory failed: what was being done (naming
    /// the file or the bytes), and the error.
    Io {
        context: String,
        source: std::io::Error,
    },
    /// The cuda transport was asked for without a CUDA device.
    NoDevice,
    /// The control block names a transport this build does not know.
    UnknownTransport(u32),
    /// The control block names a GPU ordering this build does not know.
    UnknownGpuSync(u32),
    /// The timeline ordering asked for on the host transport.
    TimelineNeedsCuda,
    /// The timeline ordering asked for on a device that cannot write and
    /// wait for values in memory (or without a device).
    TimelineUnsupported,
    /// Legacy CUDA IPC handles asked for (a legacy channel of the cuda
    /// transport, or the event ordering) on an integrated GPU, which has
    /// none.
    NoLegacyCudaIpc { what: LegacyCudaIpc },
    /// Slots of a memory kind and ordering that `CUDA_COMPOSITIONS` has no
    /// row for on this kind of channel (lent memory on a descriptor
    /// channel).
    NoComposition {
        composition: CudaComposition,
        ipc_mode: cudaipc_channel::IpcMode,
    },
    /// A descriptor channel's producer no longer hands out this pool.
    PoolGone { generation: u64 },
    /// A descriptor channel's socket no longer answers (its producer
    /// stopped or died).
    SocketGone { channel: String },
    /// A descriptor channel's pool that names memory elsewhere (a data
    /// file) instead of handing it over.
    PoolNotHandedOver,
    /// The producer handed over another number of descriptors than its
    /// pool needs.
    DescriptorCount { received: usize, expected: usize },
    /// A slot's descriptor describes no allocation of the pool's slot size.
    SlotDescriptor { slot: usize, size: usize },
    /// A size that does not fit this process's address space.
    Overflow { what: &'static str },
    /// A name read from the control block that is not UTF-8.
    NameNotUtf8 { object: SharedObject },
    /// A name read from the control block that is not one of the channel's
    /// own files.
    ForeignName {
        object: SharedObject,
        channel: String,
        name: String,
    },
    /// A shared file that is not a regular file (a link, a FIFO).
    NotRegular {
        object: SharedObject,
        source: std::io::Error,
    },
    /// A shared file owned by another user than the channel's producer.
    WrongOwner {
        path: std::path::PathBuf,
        owner_uid: u32,
        producer_uid: u32,
    },
    /// Shared memory smaller than what it must hold.
    TooSmall {
        object: SharedObject,
        path: std::path::PathBuf,
        len: u64,
        needed: u64,
    },
    /// The producer's timeline block does not carry the timeline's mark.
    NotTimelineBlock,
    /// Shared memory this process must write is mapped read-only.
    ReadOnly { object: SharedObject },
    /// A frame larger than the slot it is written into.
    SlotTooSmall { slot_size: usize, frame_size: usize },
    /// A slot of the producer's device memory cannot be imported: opened
    /// from a CUDA IPC handle, or mapped from a handed-over descriptor
    /// (`shared`); `peer`: the producer runs on another GPU.
    ImportMemory {
        slot: usize,
        shared: bool,
        peer: bool,
        source: CudaError,
    },
    /// The producer's interprocess event of a slot cannot be opened (CUDA
    /// keeps them in files only their creator's user can map, in its PID
    /// namespace).
    OpenEvent { slot: usize, source: CudaError },
    /// A wait on the host for another process's GPU work took longer than
    /// the cross-process wait timeout.
    WaitTimedOut {
        work: GpuWork,
        slot: usize,
        after: std::time::Duration,
    },
    /// A wait on the host for another process's GPU work was given up (its
    /// process is gone, or the waiter stops).
    WaitAbandoned { work: GpuWork, slot: usize },
    /// A freshly published pool of lent slots found one of them busy.
    LentSlotBusy { slot: usize },
    /// Upstream wrote into a lent slot while its frame was still published.
    LentSlotRewritten { slot: usize },
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::Cuda(e) => write!(f, "{e}"),
            TransportError::Channel(e) => write!(f, "{e}"),
            TransportError::Io { context, source } => write!(f, "{context}: {source}"),
            TransportError::NoDevice => f.write_str("the cuda transport needs a device"),
            TransportError::UnknownTransport(value) => write!(f, "unknown transport {value}"),
            TransportError::UnknownGpuSync(value) => write!(f, "unknown GPU ordering {value}"),
            TransportError::TimelineNeedsCuda => f.write_str(
                "the timeline ordering needs the cuda transport (it orders GPU work)",
            ),
            TransportError::TimelineUnsupported => f.write_str(
                "the timeline ordering: this device cannot write and wait for values in memory (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS)",
            ),
            TransportError::NoLegacyCudaIpc { what } => {
                let needs = match what {
                    LegacyCudaIpc::Memory => {
                        "a legacy channel of the cuda transport needs CUDA IPC memory handles (cuIpcGetMemHandle)"
                    }
                    LegacyCudaIpc::Events => {
                        "the event ordering needs CUDA IPC event handles (cuIpcGetEventHandle)"
                    }
                };
                write!(
                    f,
                    "{needs}, which an integrated GPU (CU_DEVICE_ATTRIBUTE_INTEGRATED: Jetson) does not have"
                )
            }
            TransportError::NoComposition {
                composition,
                ipc_mode,
            } => {
                let channel = match ipc_mode {
                    cudaipc_channel::IpcMode::Legacy => "a legacy channel",
                    cudaipc_channel::IpcMode::Fd => "a descriptor channel",
                };
                write!(f, "the cuda transport has no slots of {composition} on {channel}")
            }
            TransportError::PoolGone { generation } => write!(
                f,
                "the producer no longer hands out pool {generation}"
            ),
            TransportError::SocketGone { channel } => {
                write!(f, "channel '{channel}': the producer's socket is gone")
            }
            TransportError::PoolNotHandedOver => {
                f.write_str("a descriptor channel announced slots it does not hand over")
            }
            TransportError::DescriptorCount { received, expected } => write!(
                f,
                "the producer handed over {received} descriptors for its pool ({expected} expected)"
            ),
            TransportError::SlotDescriptor { slot, size } => write!(
                f,
                "slot {slot} of a descriptor channel describes no allocation of {size} bytes"
            ),
            TransportError::Overflow { what } => write!(f, "{what} overflows"),
            TransportError::NameNotUtf8 { object } => {
                write!(f, "the {object}'s name is not UTF-8")
            }
            TransportError::ForeignName {
                object,
                channel,
                name,
            } => match object {
                SharedObject::Slots => {
                    write!(f, "data file name {name:?} does not belong to channel '{channel}'")
                }
                SharedObject::TimelineBlock => {
                    write!(f, "timeline block {name:?} does not belong to channel '{channel}'")
                }
            },
            TransportError::NotRegular { object, source } => write!(f, "{object}: {source}"),
            TransportError::WrongOwner {
                path,
                owner_uid,
                producer_uid,
            } => write!(
                f,
                "{} belongs to uid {owner_uid}, but the channel to uid {producer_uid}",
                path.display()
            ),
            TransportError::TooSmall {
                object,
                path,
                len,
                needed,
            } => match object {
                SharedObject::Slots => write!(
                    f,
                    "data file {} holds {len} bytes, the pool needs {needed}",
                    path.display()
                ),
                SharedObject::TimelineBlock => write!(
                    f,
                    "the timeline block {} holds {len} bytes, {needed} needed",
                    path.display()
                ),
            },
            TransportError::NotTimelineBlock => {
                f.write_str("the producer's timeline block is not one")
            }
            TransportError::ReadOnly { object } => write!(f, "the {object} is mapped read-only"),
            TransportError::SlotTooSmall {
                slot_size,
                frame_size,
            } => write!(
                f,
                "a slot of {slot_size} bytes cannot hold a frame of {frame_size}"
            ),
            TransportError::ImportMemory {
                slot,
                shared,
                peer,
                source,
            } => {
                let verb = if *shared { "map" } else { "open" };
                write!(
                    f,
                    "cannot {verb} slot {slot} of the producer's device memory: {source}"
                )?;
                match (peer, shared) {
                    (true, false) => f.write_str(
                        " (the producer runs on another GPU: peer access between the two is needed)",
                    ),
                    (true, true) => f.write_str(" (the producer runs on another GPU)"),
                    (false, _) => Ok(()),
                }
            }
            TransportError::OpenEvent { slot, source } => write!(
                f,
                "cannot open the producer's event of slot {slot}: {source}"
            ),
            TransportError::WaitTimedOut { work, slot, after } => write!(
                f,
                "{work} into slot {slot} did not finish within {} s",
                after.as_secs()
            ),
            TransportError::WaitAbandoned { work, slot } => {
                write!(f, "stopped waiting for {work} of slot {slot}")
            }
            TransportError::LentSlotBusy { slot } => {
                write!(f, "slot {slot} of a freshly published pool is busy")
            }
            TransportError::LentSlotRewritten { slot } => write!(
                f,
                "upstream wrote into lent slot {slot} while its frame was still published"
            ),
        }
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TransportError::Cuda(e)
            | TransportError::ImportMemory { source: e, .. }
            | TransportError::OpenEvent { source: e, .. } => Some(e),
            TransportError::Channel(e) => Some(e),
            TransportError::Io { source, .. } | TransportError::NotRegular { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }
}

impl TransportError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        TransportError::Io {
            context: context.into(),
            source,
        }
    }
}

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

/// Where a slot's bytes are. Each variant keeps its memory alive.
#[derive(Debug, Clone)]
pub enum SlotMemory {
    /// Shared host memory, written only on the producer side (the
    /// consumer's mapping is read-only).
    Host(HostRegion),
    /// Device memory, kept mapped (or allocated) while the region lives;
    /// `ptr()`, `len()` and `device()` say where.
    Device(DeviceRegion),
}

/// The producer's slots.
/// A stream of the slots' device's primary context on which a lent slot's
/// owner writes into it.
#[derive(Debug, Clone, Copy)]
pub struct WriterStream(cudarc::driver::sys::CUstream);

impl WriterStream {
    /// # Safety
    /// `raw` is a stream of the primary context of the device of the slots
    /// it is given to, and stays alive while this value is in use.
    pub unsafe fn new(raw: cudarc::driver::sys::CUstream) -> Self {
        Self(raw)
    }

    pub(crate) fn raw(self) -> cudarc::driver::sys::CUstream {
        self.0
    }
}

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
    /// Lent slots: whether the consumers' GPU reads of `slot`'s last frame
    /// are done (without waiting).
    fn reads_done(&self, _slot: usize, _producer: &Producer) -> Result<bool, TransportError> {
        Ok(true)
    }
    /// Lent slots, instead of [`before_write`](Self::before_write): orders
    /// the writes the slot's owner queues from now on `writer` after the
    /// consumers' reads of the slot, on the GPU. `Ok(false)`: these slots
    /// cannot; the caller waits with `before_write`.
    fn order_writer_after_reads(
        &self,
        _slot: usize,
        _producer: &Producer,
        _writer: WriterStream,
    ) -> Result<bool, TransportError> {
        Ok(false)
    }
    /// Descriptors of the slots' memory for a descriptor channel's
    /// consumers (`IpcMode::Fd`: the host slots' memfd; the cuda slots'
    /// timeline block, if any, then one allocation per slot); empty where
    /// consumers find the memory otherwise.
    fn shareables(&self) -> Result<Vec<cudaipc_channel::platform::Shareable>, TransportError> {
        Ok(Vec::new())
    }
}

/// A consumer's view of the producer's slots.
pub trait ConsumerSlots: Send + Sync {
    fn kind(&self) -> TransportKind;
    fn slot_count(&self) -> usize;
    fn slot_size(&self) -> usize;
    fn slot_memory(&self, slot: usize) -> SlotMemory;
    /// Whether this process can only read the slots.
    fn is_read_only(&self) -> bool;
    /// The memory of `slot` when it is host memory, borrowed from the
    /// slots (a held frame's bytes live as long as the frame).
    fn host_region(&self, _slot: usize) -> Option<&HostRegion> {
        None
    }
    /// Orders every later read of `slot` after the producer's writes, on
    /// the host where `on_host` asks for it even if this device would wait
    /// on the GPU. True where the writes are done on return (waited for on
    /// the host, or the producer synchronised before publishing), false
    /// where only a wait on this process's stream was queued. A wait on the
    /// host for them gives up with an error once `give_up` says so (the
    /// producer is gone, or the reader stops).
    fn before_read(
        &self,
        slot: usize,
        on_host: bool,
        give_up: &dyn Fn() -> bool,
    ) -> Result<bool, TransportError>;
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
    /// `IpcMode::Fd`: host slots are anonymous memory handed over the
    /// channel's socket, not a named file.
    pub ipc_mode: cudaipc_channel::IpcMode,
}

pub fn create_producer_slots(
    kind: TransportKind,
    request: &SlotRequest,
    device: Option<&Arc<Device>>,
) -> Result<Box<dyn ProducerSlots>, TransportError> {
    match kind {
        TransportKind::Host => Ok(Box::new(HostProducerSlots::create(request)?)),
        TransportKind::Cuda => {
            let device = device.ok_or(TransportError::NoDevice)?;
            Ok(Box::new(CudaProducerSlots::create(device, request)?))
        }
    }
}

/// The pool descriptor of a descriptor channel's slots (host or cuda):
/// consumers ask the producer's socket for the pool's memory (by
/// generation).
const RECEIVED_POOL: &[u8] = b"@socket";

/// Checks that `pool` is handed over a descriptor channel's socket.
fn check_pool_received(pool: &PoolInfo) -> Result<(), TransportError> {
    let descriptor = pool
        .pool_descriptor
        .split(|&b| b == 0)
        .next()
        .unwrap_or(&[]);
    if descriptor != RECEIVED_POOL {
        return Err(TransportError::PoolNotHandedOver);
    }
    Ok(())
}

/// Asks a descriptor channel's producer (one of `producers`) for the
/// memory of pool `generation`.
fn request_pool(
    channel: &str,
    generation: u64,
    producers: &cudaipc_channel::socket::Peers,
) -> Result<Vec<cudaipc_channel::platform::Shareable>, TransportError> {
    use cudaipc_channel::socket::{self, RequestError};
    socket::request(channel, socket::Request::Pool(generation), producers).map_err(|e| match e {
        RequestError::Channel(e) => TransportError::Channel(e),
        RequestError::NoProducer => TransportError::SocketGone {
            channel: channel.to_owned(),
        },
        RequestError::Gone => TransportError::PoolGone { generation },
    })
}

/// Opens the slots of a channel's current pool. `device` is the consumer's
/// own device for the cuda transport (it may differ from the producer's).
pub fn open_consumer_slots(
    channel: &str,
    info: &ChannelInfo,
    pool: &PoolInfo,
    device: Option<&Arc<Device>>,
    consumer_index: usize,
) -> Result<Arc<dyn ConsumerSlots>, TransportError> {
    match TransportKind::from_wire(info.transport) {
        Some(TransportKind::Host) => Ok(Arc::new(match &info.descriptor_channel {
            Some(producers) => HostConsumerSlots::receive(channel, pool, producers)?,
            None => HostConsumerSlots::open(channel, pool, info.producer_uid)?,
        })),
        Some(TransportKind::Cuda) => {
            let device = device.ok_or(TransportError::NoDevice)?;
            Ok(Arc::new(CudaConsumerSlots::open(
                device,
                channel,
                info,
                pool,
                consumer_index,
            )?))
        }
        None => Err(TransportError::UnknownTransport(info.transport)),
    }
}
