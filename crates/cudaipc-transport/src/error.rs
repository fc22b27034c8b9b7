// SPDX-License-Identifier: MPL-2.0

//! What the transport fails with ([`TransportError`]), and the names its
//! errors use (the legacy handles a GPU lacks, the GPU work waited for, the
//! shared object mapped).

use std::fmt;

use crate::CudaComposition;
use crate::cuda::CudaError;
use cudaipc_channel::ChannelError;

/// Which of CUDA's legacy IPC handles an integrated GPU lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegacyCudaIpc {
    /// Device memory's (`cuIpcGetMemHandle`): the slots of a legacy
    /// channel of the cuda transport.
    Memory,
    /// Events' (`cuIpcGetEventHandle`): the event ordering.
    Events,
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
    /// A legacy CUDA channel read in the process that publishes it: CUDA
    /// opens IPC memory handles only in other processes.
    ImportInProducerProcess,
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
            TransportError::ImportInProducerProcess => f.write_str(
                "a legacy CUDA channel cannot be read in the process that publishes it (CUDA opens IPC memory handles only in other processes): read it from another process",
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
