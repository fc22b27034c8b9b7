// Host transport: the slots are one shared file in the shm folder. CPU writes
// and reads are ordered by the channel's own atomics, so the ordering hooks
// have nothing to do.

use std::path::PathBuf;

use super::{ConsumerSlots, ProducerSlots, SlotMemory, SlotRequest, TransportError, TransportKind};
use crate::ipc::layout::{RELEASE_DESCRIPTOR_BYTES, SLOT_DESCRIPTOR_BYTES};
use crate::ipc::mapping::SharedMapping;
use crate::ipc::shm::{self, SharedFile};
use crate::ipc::{ChannelError, PoolInfo, Producer};

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
    /// Creates the data file, its space reserved (a full shm folder is an
    /// error naming the bytes needed and free, and leaves no file). Its
    /// name has a random part; if another user created it anyway, a fresh
    /// name is taken.
    pub fn create(request: &SlotRequest) -> Result<Self, TransportError> {
        let total = slot_stride(request.size) * request.count;
        let mut attempt = 0;
        loop {
            let name = shm::data_file_name(&request.channel, request.session, request.generation);
            let path = shm::shm_dir().join(&name);
            match SharedFile::create_exclusive(&path, total, request.permissions) {
                Ok(file) => {
                    return Ok(Self {
                        file,
                        name,
                        count: request.count,
                        size: request.size,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 8 => {
                    attempt += 1;
                }
                Err(e) => {
                    return Err(TransportError::Io(format!(
                        "cannot create {} ({total} bytes): {e}",
                        path.display()
                    )));
                }
            }
        }
    }
}

/// The error for slot memory whose file another process truncated.
fn truncated(path: PathBuf) -> TransportError {
    TransportError::Channel(ChannelError::Truncated(path))
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
        let base = self
            .file
            .map
            .as_mut_ptr()
            .expect("the producer maps its data file writable");
        // SAFETY: slot < count, so the offset stays inside the mapping.
        let ptr = unsafe { base.add(slot * slot_stride(self.size)) };
        SlotMemory::Host {
            ptr,
            len: self.size,
        }
    }

    fn before_write(&self, _slot: usize, _producer: &Producer) -> Result<(), TransportError> {
        if self.file.is_broken() {
            return Err(truncated(self.file.path.clone()));
        }
        Ok(())
    }

    /// A frame written into a truncated file is lost: never published.
    fn after_write(&self, _slot: usize) -> Result<(), TransportError> {
        if self.file.is_broken() {
            return Err(truncated(self.file.path.clone()));
        }
        Ok(())
    }
}

pub struct HostConsumerSlots {
    map: SharedMapping,
    path: PathBuf,
    count: usize,
    size: usize,
}

impl HostConsumerSlots {
    /// Opens the data file named in `pool`, which must be a regular file of
    /// this channel owned by `producer_uid` (the control block's owner).
    pub fn open(channel: &str, pool: &PoolInfo, producer_uid: u32) -> Result<Self, TransportError> {
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
        let file = shm::open_regular(&path, false).map_err(|e| {
            if e.kind() == std::io::ErrorKind::InvalidInput {
                TransportError::Invalid(format!("data file: {e}"))
            } else {
                TransportError::Io(format!("cannot open {}: {e}", path.display()))
            }
        })?;
        let owner = shm::owner_uid(&file)
            .map_err(|e| TransportError::Io(format!("cannot inspect {}: {e}", path.display())))?;
        if owner != producer_uid {
            return Err(TransportError::Invalid(format!(
                "data file {} belongs to uid {owner}, but the channel to uid {producer_uid}",
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
        // Read-only: a consumer can never write into the producer's slots.
        let map = SharedMapping::map(&file, Some(needed), false)
            .map_err(|e| TransportError::Io(format!("cannot map {}: {e}", path.display())))?;
        Ok(Self {
            map,
            path,
            count,
            size,
        })
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
        // The pointer is `*mut` only by the type's shape: the mapping is
        // read-only, and consumers never write through it.
        let ptr = unsafe { self.map.as_ptr().add(slot * slot_stride(self.size)) as *mut u8 };
        SlotMemory::Host {
            ptr,
            len: self.size,
        }
    }

    fn before_read(&self, _slot: usize) -> Result<(), TransportError> {
        if self.map.is_broken() {
            return Err(truncated(self.path.clone()));
        }
        Ok(())
    }

    /// What was read from a truncated file was zeros: an error, not a frame.
    fn finish_read(&self, _slot: usize) -> Result<(), TransportError> {
        if self.map.is_broken() {
            return Err(truncated(self.path.clone()));
        }
        Ok(())
    }

    fn release_descriptors(&self) -> Vec<[u8; RELEASE_DESCRIPTOR_BYTES]> {
        Vec::new()
    }
}
