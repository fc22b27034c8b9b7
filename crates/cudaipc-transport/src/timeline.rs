//! GPU ordering as a timeline (`gpu-sync=timeline`, the cuda transport):
//! 64-bit values in a small block both sides map and register with the
//! driver: on a descriptor channel a sealed memfd the producer hands over
//! the socket, on a legacy channel a data file of the channel named in the
//! pool descriptor. The GPU writes them (`cuStreamWriteValue64`, after a frame's
//! writes or a consumer's reads), so no event file is involved: it works
//! across users and PID namespaces.
//!
//! Per slot the producer keeps `ready` (written by its GPU) and
//! `ready_target` (written by its CPU before publishing: the value `ready`
//! reaches once the published frame is written). Each consumer record has a
//! row: `release_target` (its CPU, before releasing a slot: the `ready`
//! value of the frame it read) and `released` (its GPU, once the reads are
//! done; its CPU when its stream is idle at the release, nothing pending). Values only grow, per slot, so a late write of an older value
//! never satisfies a newer wait.
//!
//! Waits: the producer always waits on the host (a consumer can then never
//! stall the producer's GPU work; one whose reads do not finish in time only
//! loses the guarantee for its own frames). A consumer waits on the GPU
//! (`cuStreamWaitValue64`) under MPS, else on the host, like the event
//! waits (see `waits_on_host`).

use cudaipc_channel::platform::Shareable;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{SharedObject, SlotRequest, TransportError};
use crate::cuda::{Device, HostRegistration, Stream};
use cudaipc_channel::layout::{MAX_CONSUMERS, MAX_SLOTS};
use cudaipc_channel::mapping::SharedMapping;
use cudaipc_channel::shm::{self, SharedFile};
use cudaipc_channel::socket;

/// First word of the block: "CUIPCTL1".
const MAGIC: u64 = u64::from_le_bytes(*b"CUIPCTL1");
/// Ends the name of a legacy channel's timeline block (a data file).
const TIMELINE_SUFFIX: &str = ".timeline";

#[repr(C)]
pub struct TimelineBlock {
    magic: AtomicU64,
    ready: [AtomicU64; MAX_SLOTS],
    ready_target: [AtomicU64; MAX_SLOTS],
    rows: [TimelineRow; MAX_CONSUMERS],
}

#[repr(C)]
struct TimelineRow {
    release_target: [AtomicU64; MAX_SLOTS],
    released: [AtomicU64; MAX_SLOTS],
}

/// Bytes of the block (whole pages, for the driver's registration).
pub const fn timeline_size() -> usize {
    std::mem::size_of::<TimelineBlock>().next_multiple_of(4096)
}

/// A mapped, registered timeline block.
pub struct Timeline {
    // Declared first: unregistered before the mapping goes.
    registration: HostRegistration,
    map: SharedMapping,
    file: File,
    /// A legacy channel's block has a name in the shm folder, removed with
    /// the producer's block.
    path: Option<PathBuf>,
}

impl Drop for Timeline {
    fn drop(&mut self) {
        if let Some(path) = &self.path {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Timeline {
    /// The producer's block, zeroed.
    pub fn create(device: &Arc<Device>, label: &Path) -> Result<Self, TransportError> {
        let size = timeline_size();
        let SharedFile { file, map, .. } =
            SharedFile::create_sealed("cudaipc-timeline", label, size)
                .map_err(|e| TransportError::io("cannot create the timeline block", e))?;
        let timeline = Self::register(device, map, file)?;
        timeline.block().magic.store(MAGIC, Ordering::Release);
        Ok(timeline)
    }

    /// A consumer's view of the block the producer sent: sealed, large
    /// enough, and marked as a timeline block.
    pub fn receive(device: &Arc<Device>, fd: Shareable) -> Result<Self, TransportError> {
        let size = timeline_size();
        socket::check_sealed(&fd, size as u64).map_err(TransportError::Channel)?;
        Self::map_received(device, File::from(fd))
    }

    /// Maps and registers a consumer's block and checks its mark.
    fn map_received(device: &Arc<Device>, file: File) -> Result<Self, TransportError> {
        let map = SharedMapping::map(&file, Some(timeline_size()), true)
            .map_err(|e| TransportError::io("cannot map the timeline block", e))?;
        let timeline = Self::register(device, map, file)?;
        if timeline.block().magic.load(Ordering::Acquire) != MAGIC {
            return Err(TransportError::NotTimelineBlock);
        }
        Ok(timeline)
    }

    /// The producer's block of a legacy channel: a data file of the
    /// channel (a fresh random name, mode `request.permissions`), named in
    /// the pool descriptor (see [`name`](Self::name)).
    pub fn create_named(
        device: &Arc<Device>,
        request: &SlotRequest,
    ) -> Result<Self, TransportError> {
        let mut attempt = 0;
        loop {
            let name = format!(
                "{}{TIMELINE_SUFFIX}",
                shm::data_file_name(&request.channel, request.session, request.generation)
            );
            let path = shm::shm_dir().join(&name);
            match SharedFile::create_exclusive(&path, timeline_size(), request.permissions) {
                Ok(SharedFile { file, map, path }) => {
                    let mut timeline = Self::register(device, map, file)?;
                    timeline.path = Some(path);
                    timeline.block().magic.store(MAGIC, Ordering::Release);
                    return Ok(timeline);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 8 => {
                    attempt += 1;
                }
                Err(e) => {
                    return Err(TransportError::io(
                        format!("cannot create the timeline block {}", path.display()),
                        e,
                    ));
                }
            }
        }
    }

    /// A consumer's view of a legacy channel's block, named `name` (from the
    /// pool descriptor): a data file of `channel` owned by `producer_uid`,
    /// large enough, and marked as a timeline block.
    pub fn open_named(
        device: &Arc<Device>,
        channel: &str,
        name: &str,
        producer_uid: u32,
    ) -> Result<Self, TransportError> {
        // The name comes from shared memory: only this channel's own files.
        let prefix = shm::channel_data_file_prefix(channel);
        if !name.starts_with(&prefix) || !name.ends_with(TIMELINE_SUFFIX) || name.contains('/') {
            return Err(TransportError::ForeignName {
                object: SharedObject::TimelineBlock,
                channel: channel.to_owned(),
                name: name.to_owned(),
            });
        }
        let path = shm::shm_dir().join(name);
        let file = shm::open_regular(&path, true).map_err(|e| {
            TransportError::io(
                format!("cannot open the timeline block {}", path.display()),
                e,
            )
        })?;
        let inspect_error = |e| TransportError::io(format!("cannot inspect {}", path.display()), e);
        let owner = shm::owner_uid(&file).map_err(inspect_error)?;
        if owner != producer_uid {
            return Err(TransportError::WrongOwner {
                path,
                owner_uid: owner,
                producer_uid,
            });
        }
        let len = file.metadata().map_err(inspect_error)?.len();
        if len < timeline_size() as u64 {
            return Err(TransportError::TooSmall {
                object: SharedObject::TimelineBlock,
                path,
                len,
                needed: timeline_size() as u64,
            });
        }
        Self::map_received(device, file)
    }

    fn register(
        device: &Arc<Device>,
        map: SharedMapping,
        file: File,
    ) -> Result<Self, TransportError> {
        let host = map.as_mut_ptr().ok_or(TransportError::ReadOnly {
            object: SharedObject::TimelineBlock,
        })?;
        // SAFETY: a page-aligned writable mapping of `map.len()` bytes (at
        // least `timeline_size`), which `Timeline` keeps mapped longer than
        // the registration (field order).
        let registration = unsafe { HostRegistration::new(device, host, map.len()) }?;
        Ok(Self {
            registration,
            map,
            file,
            path: None,
        })
    }

    fn block(&self) -> &TimelineBlock {
        // SAFETY: the mapping is page aligned, at least `timeline_size()`
        // bytes, and lives as long as `self`; the block is atomics only, so
        // any bytes another process wrote are a valid value.
        unsafe { &*(self.map.as_ptr() as *const TimelineBlock) }
    }

    /// The device address of `word`, a word of this block.
    fn address(&self, word: &AtomicU64) -> u64 {
        let offset = word as *const AtomicU64 as usize - self.map.as_ptr() as usize;
        self.registration
            .device_address(offset)
            .expect("a word of the block lies within its registration")
    }

    /// The name of a legacy channel's block in the shm folder (what the
    /// pool descriptor holds); `None` for a block handed over a socket.
    pub fn name(&self) -> Option<&str> {
        self.path.as_deref()?.file_name()?.to_str()
    }

    /// A new descriptor of the block, for a consumer.
    pub fn export(&self) -> std::io::Result<Shareable> {
        self.file.try_clone().map(Shareable::from)
    }

    // Producer side.

    /// After queueing a frame's writes into `slot` on `stream`: the GPU
    /// marks them done once they are, and consumers learn what to wait
    /// for. Called before the frame is published.
    pub fn mark_written(&self, slot: usize, stream: &Stream) -> Result<(), TransportError> {
        let block = self.block();
        let value = block.ready_target[slot].load(Ordering::Relaxed) + 1;
        // SAFETY: an aligned word of the registered block, which stays
        // registered while `self` lives; the producer's slots keep the
        // timeline until their stream's work is done (see their drop).
        unsafe { stream.write_value(self.address(&block.ready[slot]), value) }?;
        block.ready_target[slot].store(value, Ordering::Release);
        Ok(())
    }

    /// Whether the frame last marked in `slot` is written (its mark ran).
    pub fn is_written(&self, slot: usize) -> bool {
        self.is_ready(slot, self.ready_target(slot))
    }

    /// Whether consumer `row`'s reads of `slot` that it released are done.
    pub fn reads_done(&self, row: usize, slot: usize) -> bool {
        let row = &self.block().rows[row];
        row.released[slot].load(Ordering::Acquire)
            >= row.release_target[slot].load(Ordering::Acquire)
    }

    // Consumer side.

    /// What `ready` of `slot` reaches once the frame published there now is
    /// written (read after taking the frame).
    pub fn ready_target(&self, slot: usize) -> u64 {
        self.block().ready_target[slot].load(Ordering::Acquire)
    }

    pub fn is_ready(&self, slot: usize, target: u64) -> bool {
        self.block().ready[slot].load(Ordering::Acquire) >= target
    }

    /// Makes later work on `stream` wait until the frame of `target` in
    /// `slot` is written.
    pub fn wait_ready_on(
        &self,
        slot: usize,
        target: u64,
        stream: &Stream,
    ) -> Result<(), TransportError> {
        // SAFETY: an aligned word of the registered block; the producer
        // queued the write of `target` before publishing, and the consumer's
        // slots write it themselves before the block goes if the producer
        // never does (see `release_waits`).
        unsafe { stream.wait_value(self.address(&self.block().ready[slot]), target) }?;
        Ok(())
    }

    /// After queueing the last read of `slot`'s frame of `target` on
    /// `stream`: the producer may write the slot again once the GPU says
    /// the reads are done. Called before the slot is released.
    pub fn mark_read(
        &self,
        row: usize,
        slot: usize,
        target: u64,
        stream: &Stream,
    ) -> Result<(), TransportError> {
        let row = &self.block().rows[row];
        row.release_target[slot].store(target, Ordering::Release);
        // SAFETY: an aligned word of the registered block; the consumer's
        // slots keep the timeline until their stream's work is done.
        unsafe { stream.write_value(self.address(&row.released[slot]), target) }?;
        Ok(())
    }

    /// [`mark_read`](Self::mark_read) done on the host: for reads that are
    /// done already (nothing of them left on any stream).
    pub fn mark_read_done(&self, row: usize, slot: usize, target: u64) {
        let row = &self.block().rows[row];
        row.release_target[slot].store(target, Ordering::Release);
        row.released[slot].fetch_max(target, Ordering::AcqRel);
    }

    /// A consumer taking over record `row`: what an earlier owner released
    /// and never finished (it died) stops counting.
    pub fn reset_row(&self, row: usize) {
        for target in &self.block().rows[row].release_target {
            target.store(0, Ordering::Release);
        }
    }

    /// Before a consumer lets go of the block with waits of its stream
    /// possibly pending (a producer that died before its GPU wrote them):
    /// writes each slot's `ready` up to the targets waited for, so that its
    /// stream never waits on memory that is gone.
    pub fn release_waits(&self, targets: &[u64]) {
        let block = self.block();
        for (ready, &target) in block.ready.iter().zip(targets) {
            ready.fetch_max(target, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_fits_whole_pages_for_every_slot_and_consumer() {
        assert_eq!(timeline_size() % 4096, 0);
        assert!(timeline_size() >= std::mem::size_of::<TimelineBlock>());
        assert!(timeline_size() <= 64 * 1024, "{}", timeline_size());
    }
}
