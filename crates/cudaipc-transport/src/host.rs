// Host transport: the slots are one shared file in the shm folder. CPU writes
// and reads are ordered by the channel's own atomics, so the ordering hooks
// have nothing to do.

use cudaipc_channel::platform::Shareable;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use super::{ConsumerSlots, ProducerSlots, SharedObject, SlotMemory, SlotRequest, TransportError};
use crate::slots::RECEIVED_POOL;
use cudaipc_channel::layout::{MAX_SLOTS, RELEASE_DESCRIPTOR_BYTES, SLOT_DESCRIPTOR_BYTES};
use cudaipc_channel::mapping::SharedMapping;
use cudaipc_channel::shm::{self, SharedFile};
use cudaipc_channel::socket::{self, Peers};
use cudaipc_channel::{ChannelError, IpcMode, PoolInfo, Producer};

/// Slots start on page boundaries.
const SLOT_ALIGN: usize = 4096;

/// The largest slot a ring may have: a ring of `MAX_SLOTS` of them, each
/// rounded up to a page, stays within the `isize::MAX` bytes one mapping
/// (and a slice of it) may span. Frames larger than this are refused where
/// their size enters.
pub const MAX_SLOT_SIZE: usize = isize::MAX as usize / MAX_SLOTS / SLOT_ALIGN * SLOT_ALIGN;

/// A slot's bytes with the padding to the next one's page; only for sizes
/// of a pool `pool_bytes` accepted.
fn slot_stride(size: usize) -> usize {
    size.next_multiple_of(SLOT_ALIGN)
}

/// The bytes `count` slots of `size` take, checked: a size from outside
/// (a frame size, or a pool's in shared memory) must not wrap the pool to a
/// few bytes whose slots then lie outside the file.
fn pool_bytes(count: usize, size: usize) -> Result<usize, TransportError> {
    size.checked_next_multiple_of(SLOT_ALIGN)
        .and_then(|stride| stride.checked_mul(count))
        .filter(|&total| total <= isize::MAX as usize)
        .ok_or(TransportError::Overflow {
            what: "the pool size",
        })
}

/// A slot's bytes in a shared host mapping. It keeps the mapping alive, so
/// safe code can neither outlive it nor read out of bounds; writes need
/// a writable (producer's) mapping and the `unsafe` [`Self::as_mut_slice`].
/// If another process truncates the file, the range turns into private
/// zero pages (never SIGBUS) and the slots report it at
/// `after_write`/`before_read`/`finish_read`.
#[derive(Debug, Clone)]
pub struct HostRegion {
    map: Arc<SharedMapping>,
    offset: usize,
    len: usize,
}

impl HostRegion {
    /// `None` when the range does not lie within `map`.
    fn new(map: &Arc<SharedMapping>, offset: usize, len: usize) -> Option<Self> {
        (offset.checked_add(len)? <= map.len()).then(|| Self {
            map: map.clone(),
            offset,
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether this is a producer's region, which may be written.
    pub fn is_writable(&self) -> bool {
        self.map.as_mut_ptr().is_some()
    }

    /// The region's bytes. The channel's protocol keeps the producer from
    /// writing a slot while a consumer holds it.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `new` checked that offset + len lies within the mapping,
        // which `self.map` keeps mapped for the slice's lifetime.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(self.offset), self.len) }
    }

    /// The region's bytes for writing; `None` for a consumer's (read-only)
    /// mapping.
    ///
    /// # Safety
    ///
    /// The caller must hold the slot for writing (reserved and not yet
    /// published, so no consumer reads it), and no other slice of this
    /// region may be alive while the returned one is.
    // A `&mut` from `&self` is this function's purpose: exclusivity comes
    // from the slot reservation, which the caller vouches for.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> Option<&mut [u8]> {
        let base = self.map.as_mut_ptr()?;
        // SAFETY: in bounds (see `as_slice`) of a writable mapping kept alive
        // by `self.map`; exclusive by the caller's contract.
        Some(unsafe { std::slice::from_raw_parts_mut(base.add(self.offset), self.len) })
    }
}

pub struct HostProducerSlots {
    map: Arc<SharedMapping>,
    /// The data file's name (`None`: anonymous memory of a descriptor
    /// channel); also named in messages.
    path: Option<PathBuf>,
    /// Kept open with the mapping.
    file: File,
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
        let total = pool_bytes(request.count, request.size)?;
        if request.ipc_mode == IpcMode::Fd {
            let name = format!("cudaipc-{}.{}", request.channel, request.generation);
            let label = socket::socket_path(&request.channel);
            let SharedFile { file, map, .. } = SharedFile::create_sealed(&name, &label, total)
                .map_err(|e| {
                    TransportError::io(format!("cannot create {total} bytes of slots"), e)
                })?;
            return Ok(Self {
                map: Arc::new(map),
                path: None,
                file,
                name: String::from_utf8_lossy(RECEIVED_POOL).into_owned(),
                count: request.count,
                size: request.size,
            });
        }
        let mut attempt = 0;
        loop {
            let name = shm::data_file_name(&request.channel, request.session, request.generation);
            let path = shm::shm_dir().join(&name);
            match SharedFile::create_exclusive(&path, total, request.permissions) {
                Ok(SharedFile { file, map, path }) => {
                    return Ok(Self {
                        map: Arc::new(map),
                        path: Some(path),
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
                    return Err(TransportError::io(
                        format!("cannot create {} ({total} bytes)", path.display()),
                        e,
                    ));
                }
            }
        }
    }
}

impl HostProducerSlots {
    /// The slots' file, or the channel's socket for anonymous memory.
    fn label(&self) -> PathBuf {
        self.path
            .clone()
            .unwrap_or_else(|| PathBuf::from(&self.name))
    }
}

/// The bytes a pool's slots take: (count, slot size, total).
fn pool_extent(pool: &PoolInfo) -> Result<(usize, usize, usize), TransportError> {
    let count = pool.slot_descriptors.len();
    let size = usize::try_from(pool.slot_size).map_err(|_| TransportError::Overflow {
        what: "the slot size",
    })?;
    Ok((count, size, pool_bytes(count, size)?))
}

/// The error for slot memory whose file another process truncated.
fn truncated(path: PathBuf) -> TransportError {
    TransportError::Channel(ChannelError::Truncated(path))
}

impl Drop for HostProducerSlots {
    fn drop(&mut self) {
        // Consumers that still map it keep the memory; the name goes now.
        if let Some(path) = &self.path {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl ProducerSlots for HostProducerSlots {
    fn kind(&self) -> super::TransportKind {
        super::TransportKind::Host
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
        let region = HostRegion::new(&self.map, slot * slot_stride(self.size), self.size);
        SlotMemory::Host(region.expect("the slots lie within the data file"))
    }

    fn before_write(&self, _slot: usize, _producer: &Producer) -> Result<(), TransportError> {
        if self.map.is_broken() {
            return Err(truncated(self.label()));
        }
        Ok(())
    }

    /// A frame written into a truncated file is lost: never published.
    fn after_write(&self, _slot: usize) -> Result<(), TransportError> {
        if self.map.is_broken() {
            return Err(truncated(self.label()));
        }
        Ok(())
    }

    fn shareables(&self) -> Result<Vec<Shareable>, TransportError> {
        if self.path.is_some() {
            return Ok(Vec::new());
        }
        let file = self
            .file
            .try_clone()
            .map_err(|e| TransportError::io("cannot share the slots' memory", e))?;
        Ok(vec![Shareable::from(file)])
    }
}

pub struct HostConsumerSlots {
    map: Arc<SharedMapping>,
    path: PathBuf,
    /// One per slot.
    regions: Vec<HostRegion>,
    size: usize,
}

impl HostConsumerSlots {
    /// Receives the memory of `pool` from the producer of a descriptor
    /// channel, which must be one of `producers`: sealed (nobody can
    /// shrink it), and large enough for the pool.
    pub fn receive(
        channel: &str,
        pool: &PoolInfo,
        producers: &Peers,
    ) -> Result<Self, TransportError> {
        crate::slots::check_pool_received(pool)?;
        let (count, size, needed) = pool_extent(pool)?;
        let fd = crate::slots::request_pool(channel, pool.generation, producers)?;
        let [fd] =
            <[Shareable; 1]>::try_from(fd).map_err(|fds| TransportError::DescriptorCount {
                received: fds.len(),
                expected: 1,
            })?;
        socket::check_sealed(&fd, needed as u64).map_err(TransportError::Channel)?;
        let path = socket::socket_path(channel);
        Self::map_slots(File::from(fd), path, count, size, needed)
    }

    /// Opens the data file named in `pool`, which must be a regular file of
    /// this channel owned by `producer_uid` (the control block's owner).
    pub fn open(channel: &str, pool: &PoolInfo, producer_uid: u32) -> Result<Self, TransportError> {
        let name_len = pool
            .pool_descriptor
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(pool.pool_descriptor.len());
        let name = std::str::from_utf8(&pool.pool_descriptor[..name_len]).map_err(|_| {
            TransportError::NameNotUtf8 {
                object: SharedObject::Slots,
            }
        })?;
        // The name comes from shared memory: accept only this channel's own
        // data files, never a path elsewhere.
        let prefix = shm::channel_data_file_prefix(channel);
        if !name.starts_with(&prefix) || name.contains('/') || name.len() == prefix.len() {
            return Err(TransportError::ForeignName {
                object: SharedObject::Slots,
                channel: channel.to_owned(),
                name: name.to_owned(),
            });
        }
        let path = shm::shm_dir().join(name);
        // Neither a link to elsewhere nor a FIFO (whose open would block).
        let file = shm::open_regular(&path, false).map_err(|e| {
            if e.kind() == std::io::ErrorKind::InvalidInput {
                TransportError::NotRegular {
                    object: SharedObject::Slots,
                    source: e,
                }
            } else {
                TransportError::io(format!("cannot open {}", path.display()), e)
            }
        })?;
        let owner = shm::owner_uid(&file)
            .map_err(|e| TransportError::io(format!("cannot inspect {}", path.display()), e))?;
        if owner != producer_uid {
            return Err(TransportError::WrongOwner {
                path,
                owner_uid: owner,
                producer_uid,
            });
        }
        let (count, size, needed) = pool_extent(pool)?;
        let actual = file.metadata().map(|m| m.len()).unwrap_or(0);
        if actual < needed as u64 {
            return Err(TransportError::TooSmall {
                object: SharedObject::Slots,
                path,
                len: actual,
                needed: needed as u64,
            });
        }
        Self::map_slots(file, path, count, size, needed)
    }

    fn map_slots(
        file: File,
        path: PathBuf,
        count: usize,
        size: usize,
        needed: usize,
    ) -> Result<Self, TransportError> {
        // Read-only: a consumer can never write into the producer's slots.
        let map = SharedMapping::map(&file, Some(needed), false)
            .map_err(|e| TransportError::io(format!("cannot map {}", path.display()), e))?;
        let map = Arc::new(map);
        let regions = (0..count)
            .map(|slot| HostRegion::new(&map, slot * slot_stride(size), size))
            .collect::<Option<_>>()
            .ok_or_else(|| TransportError::TooSmall {
                object: SharedObject::Slots,
                path: path.clone(),
                len: map.len() as u64,
                needed: needed as u64,
            })?;
        Ok(Self {
            map,
            path,
            regions,
            size,
        })
    }
}

impl ConsumerSlots for HostConsumerSlots {
    fn kind(&self) -> super::TransportKind {
        super::TransportKind::Host
    }

    fn slot_count(&self) -> usize {
        self.regions.len()
    }

    fn slot_size(&self) -> usize {
        self.size
    }

    fn slot_memory(&self, slot: usize) -> SlotMemory {
        SlotMemory::Host(self.regions[slot].clone())
    }

    fn is_read_only(&self) -> bool {
        self.map.as_mut_ptr().is_none()
    }

    fn host_region(&self, slot: usize) -> Option<&HostRegion> {
        self.regions.get(slot)
    }

    fn before_read(
        &self,
        _slot: usize,
        _on_host: bool,
        _give_up: &dyn Fn() -> bool,
    ) -> Result<bool, TransportError> {
        if self.map.is_broken() {
            return Err(truncated(self.path.clone()));
        }
        Ok(true)
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
