// Host transport: the slots are one shared file in the shm folder. CPU writes
// and reads are ordered by the channel's own atomics, so the ordering hooks
// have nothing to do.

use std::os::unix::fs::OpenOptionsExt;

use memmap2::{Mmap, MmapOptions};

use super::{ConsumerSlots, ProducerSlots, SlotMemory, SlotRequest, TransportError, TransportKind};
use crate::ipc::layout::{RELEASE_DESCRIPTOR_BYTES, SLOT_DESCRIPTOR_BYTES};
use crate::ipc::shm::{self, SharedFile};
use crate::ipc::{PoolInfo, Producer};

/// Slots start on page boundaries.
const SLOT_ALIGN: usize = 4096;

fn slot_stride(size: usize) -> usize {
    size.next_multiple_of(SLOT_ALIGN)
}

pub struct HostProducerSlots {
    file: SharedFile,
    name: String,
    count: usize,
    size: usize,
}

impl HostProducerSlots {
    pub fn create(request: &SlotRequest) -> Result<Self, TransportError> {
        let name = shm::data_file_name(&request.channel, request.session, request.generation);
        let path = shm::shm_dir().join(&name);
        let total = slot_stride(request.size) * request.count;
        let file =
            SharedFile::create_exclusive(&path, total, request.permissions).map_err(|e| {
                TransportError::Io(format!(
                    "cannot create {} ({total} bytes): {e}",
                    path.display()
                ))
            })?;
        Ok(Self {
            file,
            name,
            count: request.count,
            size: request.size,
        })
    }
}

impl Drop for HostProducerSlots {
    fn drop(&mut self) {
        // Consumers that still map it keep the memory; the name goes now.
        let _ = std::fs::remove_file(&self.file.path);
    }
}

impl ProducerSlots for HostProducerSlots {
    fn kind(&self) -> TransportKind {
        TransportKind::Host
    }

    fn slot_count(&self) -> usize {
        self.count
    }

    fn slot_size(&self) -> usize {
        self.size
    }

    fn slot_descriptors(&self) -> Vec<[u8; SLOT_DESCRIPTOR_BYTES]> {
        vec![[0; SLOT_DESCRIPTOR_BYTES]; self.count]
    }

    fn pool_descriptor(&self) -> Vec<u8> {
        self.name.as_bytes().to_vec()
    }

    fn slot_memory(&self, slot: usize) -> SlotMemory {
        assert!(slot < self.count);
        // SAFETY: slot < count, so the offset stays inside the mapping.
        let ptr = unsafe { self.file.map.as_ptr().add(slot * slot_stride(self.size)) as *mut u8 };
        SlotMemory::Host {
            ptr,
            len: self.size,
        }
    }

    fn before_write(&self, _slot: usize, _producer: &Producer) -> Result<(), TransportError> {
        Ok(())
    }

    fn after_write(&self, _slot: usize) -> Result<(), TransportError> {
        Ok(())
    }
}

pub struct HostConsumerSlots {
    map: Mmap,
    count: usize,
    size: usize,
}

impl HostConsumerSlots {
    pub fn open(channel: &str, pool: &PoolInfo) -> Result<Self, TransportError> {
        let name_len = pool
            .pool_descriptor
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(pool.pool_descriptor.len());
        let name = std::str::from_utf8(&pool.pool_descriptor[..name_len])
            .map_err(|_| TransportError::Invalid("the host data file name is not UTF-8".into()))?;
        // The name comes from shared memory: accept only this channel's own
        // data files, never a path elsewhere.
        let prefix = format!("cudaipc-{channel}.");
        if !name.starts_with(&prefix) || name.contains('/') || name.len() == prefix.len() {
            return Err(TransportError::Invalid(format!(
                "data file name {name:?} does not belong to channel '{channel}'"
            )));
        }
        let path = shm::shm_dir().join(name);
        // Neither a link to elsewhere nor a FIFO (whose open would block).
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| TransportError::Io(format!("cannot open {}: {e}", path.display())))?;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Err(TransportError::Invalid(format!(
                "data file {} is not a regular file",
                path.display()
            )));
        }
        let count = pool.slot_descriptors.len();
        let size = usize::try_from(pool.slot_size)
            .map_err(|_| TransportError::Invalid("slot size overflows".into()))?;
        let needed = slot_stride(size)
            .checked_mul(count)
            .ok_or_else(|| TransportError::Invalid("pool size overflows".into()))?;
        let actual = file.metadata().map(|m| m.len()).unwrap_or(0);
        if actual < needed as u64 {
            return Err(TransportError::Invalid(format!(
                "data file {} holds {actual} bytes, the pool needs {needed}",
                path.display()
            )));
        }
        // SAFETY: read-only shared mapping of a file at least `needed` bytes
        // long; the producer never shrinks it.
        let map = unsafe { MmapOptions::new().len(needed).map(&file) }
            .map_err(|e| TransportError::Io(format!("cannot map {}: {e}", path.display())))?;
        Ok(Self { map, count, size })
    }
}

impl ConsumerSlots for HostConsumerSlots {
    fn kind(&self) -> TransportKind {
        TransportKind::Host
    }

    fn slot_count(&self) -> usize {
        self.count
    }

    fn slot_size(&self) -> usize {
        self.size
    }

    fn slot_memory(&self, slot: usize) -> SlotMemory {
        assert!(slot < self.count);
        // SAFETY: slot < count, so the offset stays inside the mapping.
        let ptr = unsafe { self.map.as_ptr().add(slot * slot_stride(self.size)) as *mut u8 };
        SlotMemory::Host {
            ptr,
            len: self.size,
        }
    }

    fn before_read(&self, _slot: usize) -> Result<(), TransportError> {
        Ok(())
    }

    fn finish_read(&self, _slot: usize) -> Result<(), TransportError> {
        Ok(())
    }

    fn release_descriptors(&self) -> Vec<[u8; RELEASE_DESCRIPTOR_BYTES]> {
        Vec::new()
    }
}
