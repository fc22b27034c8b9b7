// Where the cuda transport's slots live, on each side: the memory half of the
// composition (see `CudaComposition`). Each kind owns its regions and writes
// the memory half of the slot descriptors; how the channel hands the memory
// over (IPC handles in the control block, or descriptors over the socket)
// follows from the kind.

use cudaipc_channel::platform::Shareable;
use std::fmt;
use std::sync::Arc;

use super::super::timeline::Timeline;
use super::super::{SharedObject, TransportError};
use crate::cuda::{
    Device, DeviceBuffer, DeviceRegion, IPC_HANDLE_BYTES, SharedDeviceMemory, shareable_size,
};
use cudaipc_channel::layout::SLOT_DESCRIPTOR_BYTES;
use cudaipc_channel::{ChannelInfo, IpcMode, PoolInfo};

/// Starts the memory half of a slot descriptor whose allocation is handed
/// over the socket; its bytes (the allocation's size) follow, little endian.
const SHARED_MEMORY_MARK: &[u8; 8] = b"@fdslot\0";

/// Where a channel's device slots come from, and so how consumers reach
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Allocated by the producer, opened by consumers by the legacy CUDA
    /// IPC handles in the slot descriptors.
    Own,
    /// Allocated by the producer as shareable (VMM) allocations, handed
    /// over a descriptor channel's socket as file descriptors.
    Shared,
    /// Device memory of another allocator of the producer's process
    /// (GStreamer's CUDA buffer pool) after placeholder slots, written
    /// outside the producer's stream. It has only legacy IPC handles.
    Lent,
}

impl MemoryKind {
    /// The kind of channel that hands this memory out: a descriptor
    /// channel hands over shared allocations only; own and lent memory are
    /// named by IPC handles in a legacy channel's control block.
    pub const fn ipc_mode(self) -> IpcMode {
        match self {
            MemoryKind::Own | MemoryKind::Lent => IpcMode::Legacy,
            MemoryKind::Shared => IpcMode::Fd,
        }
    }
}

impl fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemoryKind::Own => "own",
            MemoryKind::Shared => "shared",
            MemoryKind::Lent => "lent",
        })
    }
}

/// Stands for lent memory in the regions of lent slots: the owner that
/// `CudaProducerSlots::lend`'s caller keeps alive.
struct LentMemory;

/// The producer's slots' memory, one region per slot.
pub(super) enum ProducerMemory {
    Own(Vec<DeviceRegion>),
    Shared {
        allocations: Vec<Arc<SharedDeviceMemory>>,
        regions: Vec<DeviceRegion>,
    },
    Lent(Vec<DeviceRegion>),
}

impl ProducerMemory {
    /// `count` allocations of `size` bytes, of the kind a channel of
    /// `ipc_mode` hands out.
    pub(super) fn allocate(
        device: &Arc<Device>,
        ipc_mode: IpcMode,
        count: usize,
        size: usize,
    ) -> Result<Self, TransportError> {
        Ok(match ipc_mode {
            IpcMode::Legacy => {
                // Whole granules (2 MiB), as a descriptor channel's are: a
                // consumer read a 64-slot ring of 4K slots of a frame's
                // bytes 22% slower than one of whole granules, which it
                // reads as fast as the producer does
                // (scripts/gpu-host/memory-kinds.cu, H100, 2026-12-07).
                let allocated = shareable_size(device, size).unwrap_or(size);
                ProducerMemory::Own(
                    (0..count)
                        .map(|_| {
                            DeviceBuffer::new(device, allocated)
                                .map(|buffer| buffer.into_leading_region(size))
                        })
                        .collect::<Result<_, _>>()?,
                )
            }
            IpcMode::Fd => {
                let allocations = (0..count)
                    .map(|_| SharedDeviceMemory::new(device, size).map(Arc::new))
                    .collect::<Result<Vec<_>, _>>()?;
                let regions = allocations.iter().map(|m| m.region(size)).collect();
                ProducerMemory::Shared {
                    allocations,
                    regions,
                }
            }
        })
    }

    /// `placeholders` tiny allocations (never written; consumers open
    /// every slot), then the lent allocations at `lent`, `size` bytes each.
    ///
    /// # Safety
    /// As `CudaProducerSlots::lend`: each lent allocation stays allocated,
    /// for at least `size` bytes, as long as the regions exist.
    pub(super) unsafe fn lend(
        device: &Arc<Device>,
        placeholders: usize,
        lent: Vec<u64>,
        size: usize,
    ) -> Result<Self, TransportError> {
        let mut regions = (0..placeholders)
            .map(|_| DeviceBuffer::new(device, 1).map(DeviceBuffer::into_region))
            .collect::<Result<Vec<_>, _>>()?;
        let owner: Arc<dyn std::any::Any + Send + Sync> = Arc::new(LentMemory);
        regions.extend(lent.into_iter().map(|ptr| {
            // SAFETY: the caller keeps `size` bytes at `ptr` allocated as
            // long as the regions exist (this function's contract).
            unsafe { DeviceRegion::from_raw_parts(device, ptr, size, owner.clone()) }
        }));
        Ok(ProducerMemory::Lent(regions))
    }

    pub(super) fn kind(&self) -> MemoryKind {
        match self {
            ProducerMemory::Own(_) => MemoryKind::Own,
            ProducerMemory::Shared { .. } => MemoryKind::Shared,
            ProducerMemory::Lent(_) => MemoryKind::Lent,
        }
    }

    pub(super) fn regions(&self) -> &[DeviceRegion] {
        match self {
            ProducerMemory::Own(regions)
            | ProducerMemory::Shared { regions, .. }
            | ProducerMemory::Lent(regions) => regions,
        }
    }

    /// Slot descriptors with their memory half written: the region's IPC
    /// handle, or for a shared allocation its mark and size.
    pub(super) fn descriptors(&self) -> Result<Vec<[u8; SLOT_DESCRIPTOR_BYTES]>, TransportError> {
        let blank = [0u8; SLOT_DESCRIPTOR_BYTES];
        match self {
            ProducerMemory::Own(regions) | ProducerMemory::Lent(regions) => regions
                .iter()
                .map(|region| {
                    let mut descriptor = blank;
                    descriptor[..IPC_HANDLE_BYTES].copy_from_slice(&region.ipc_handle()?);
                    Ok(descriptor)
                })
                .collect(),
            ProducerMemory::Shared { allocations, .. } => Ok(allocations
                .iter()
                .map(|memory| {
                    let mut descriptor = blank;
                    descriptor[..8].copy_from_slice(SHARED_MEMORY_MARK);
                    descriptor[8..16].copy_from_slice(&(memory.size() as u64).to_le_bytes());
                    descriptor
                })
                .collect()),
        }
    }
}

/// Where a consumer finds the producer's pool: a legacy channel names it
/// in its control block (IPC handles in the slot descriptors, the timeline
/// block's data file in the pool descriptor); a descriptor channel's
/// producer hands it over the socket (the timeline block first, then one
/// allocation per slot).
pub(super) enum PoolAccess<'a> {
    Named { channel: &'a str, producer_uid: u32 },
    HandedOver(std::vec::IntoIter<Shareable>),
}

impl<'a> PoolAccess<'a> {
    /// Asks a descriptor channel's producer for the pool's descriptors:
    /// one per slot, and `first` more that come before them (the
    /// ordering's).
    pub(super) fn find(
        channel: &'a str,
        info: &ChannelInfo,
        pool: &PoolInfo,
        first: usize,
    ) -> Result<Self, TransportError> {
        let Some(producers) = &info.descriptor_channel else {
            return Ok(PoolAccess::Named {
                channel,
                producer_uid: info.producer_uid,
            });
        };
        crate::slots::check_pool_received(pool)?;
        let fds = crate::slots::request_pool(channel, pool.generation, producers)?;
        let expected = pool.slot_descriptors.len() + first;
        if fds.len() != expected {
            return Err(TransportError::DescriptorCount {
                received: fds.len(),
                expected,
            });
        }
        Ok(PoolAccess::HandedOver(fds.into_iter()))
    }

    /// The producer's timeline block: the data file the pool descriptor
    /// names, or the next descriptor handed over.
    pub(super) fn timeline(
        &mut self,
        device: &Arc<Device>,
        pool: &PoolInfo,
    ) -> Result<Timeline, TransportError> {
        match self {
            PoolAccess::Named {
                channel,
                producer_uid,
            } => {
                let name_len = pool
                    .pool_descriptor
                    .iter()
                    .position(|&b| b == 0)
                    .unwrap_or(pool.pool_descriptor.len());
                let name =
                    std::str::from_utf8(&pool.pool_descriptor[..name_len]).map_err(|_| {
                        TransportError::NameNotUtf8 {
                            object: SharedObject::TimelineBlock,
                        }
                    })?;
                Timeline::open_named(device, channel, name, *producer_uid)
            }
            PoolAccess::HandedOver(fds) => {
                let fd = fds.next().ok_or(TransportError::DescriptorCount {
                    received: 0,
                    expected: pool.slot_descriptors.len() + 1,
                })?;
                Timeline::receive(device, fd)
            }
        }
    }

    /// Maps each slot's memory, bounded by the pool's slot size.
    pub(super) fn memory(
        self,
        device: &Arc<Device>,
        info: &ChannelInfo,
        pool: &PoolInfo,
        size: usize,
    ) -> Result<ConsumerMemory, TransportError> {
        let peer = device.uuid() != info.device_uuid;
        match self {
            PoolAccess::Named { .. } => {
                // The driver refuses (CUDA_ERROR_INVALID_CONTEXT); say why.
                // Legacy channels refuse consumers in another PID namespace,
                // so the same pid is this process.
                if info.producer_pid == std::process::id() {
                    return Err(TransportError::ImportInProducerProcess);
                }
                let mut regions = Vec::with_capacity(pool.slot_descriptors.len());
                for (i, d) in pool.slot_descriptors.iter().enumerate() {
                    let mut handle = [0u8; IPC_HANDLE_BYTES];
                    handle.copy_from_slice(&d[..IPC_HANDLE_BYTES]);
                    // A producer announcing more than it exported gets
                    // regions only as long as the mapping: frames beyond it
                    // are refused, not read. Mapped once per process: other
                    // subscribers of the channel here share it.
                    let region = crate::cuda::open_shared_region(device, &handle, size).map_err(
                        |source| TransportError::ImportMemory {
                            slot: i,
                            shared: false,
                            peer,
                            source,
                        },
                    )?;
                    regions.push(region);
                }
                Ok(ConsumerMemory {
                    regions,
                    read_only: false,
                })
            }
            PoolAccess::HandedOver(fds) => {
                let mut read_only = true;
                let mut regions = Vec::with_capacity(pool.slot_descriptors.len());
                for ((i, d), fd) in pool.slot_descriptors.iter().enumerate().zip(fds) {
                    let (mark, bytes) = d.split_at(8);
                    let shared_size = bytes
                        .get(..8)
                        .and_then(|b| b.try_into().ok())
                        .map(u64::from_le_bytes)
                        .unwrap_or(0);
                    if mark != SHARED_MEMORY_MARK || shared_size < size as u64 {
                        return Err(TransportError::SlotDescriptor { slot: i, size });
                    }
                    let shared_size =
                        usize::try_from(shared_size).map_err(|_| TransportError::Overflow {
                            what: "the slot size",
                        })?;
                    let imported =
                        SharedDeviceMemory::import(device, &fd, shared_size).map_err(|source| {
                            TransportError::ImportMemory {
                                slot: i,
                                shared: true,
                                peer,
                                source,
                            }
                        })?;
                    read_only &= imported.is_read_only();
                    regions.push(Arc::new(imported).region(size));
                }
                Ok(ConsumerMemory { regions, read_only })
            }
        }
    }
}

/// A consumer's mappings of the producer's slots.
pub(super) struct ConsumerMemory {
    /// Each slot's mapping, bounded by what the driver mapped.
    pub(super) regions: Vec<DeviceRegion>,
    /// Whether every slot is mapped for reading only.
    pub(super) read_only: bool,
}
