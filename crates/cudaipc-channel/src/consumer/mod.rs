// The consumer side of a channel. Everything read from the control block is
// validated: a corrupt or hostile block yields `ChannelError::Corrupt`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::control_block::{control_header, recorded_producer_may_run};
use super::layout::*;
use super::shm::{self, SharedFile};
use super::socket::{self, Peers};
use super::wait::{self, WaitMode, WaitOutcome, WakeSource};
use super::{
    ChannelError, ConsumerMode, Corruption, IpcMode, ProducerGone, Seqlocked, protocol,
    read_seqlocked, write_seqlocked,
};

mod attach;
mod holds;
mod pacing;
mod records;
mod travelling;

pub use travelling::Counts as TravellingCounts;

use pacing::Pacing;

use crate::producer::waits_for;

/// At the end of a live stream, how many frames behind a consumer at its
/// own pace may be and still take them all (a consumer that keeps up is a
/// frame or two behind at times).
const KEEP_UP_FRAMES: u64 = 2;
/// Largest slot a channel may announce (1 TiB): anything above is corrupt.
const MAX_SLOT_SIZE: u64 = 1 << 40;
/// How often `attach` looks for a channel that is not there yet.
const ATTACH_POLL: Duration = Duration::from_millis(20);
/// How long a consumer within its declared hold may hold every slot of a
/// ring that is to grow for it before it is told: the producer grows the
/// ring at its next frame, or once it finds every slot held; one whose
/// upstream holds the sink's slots cannot.
const RING_GROWTH_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub channel: String,
    pub mode: ConsumerMode,
    pub wait_mode: WaitMode,
    /// How long `attach` waits for a producer; `None` waits forever.
    pub connect_timeout: Option<Duration>,
    /// How the channel is reached; `None`: through its socket if it has
    /// one, else by its name in the shm folder.
    pub ipc_mode: Option<IpcMode>,
    /// The producers trusted beside the own user: the owner of a channel's
    /// control block, and on a descriptor channel its socket's peer too.
    pub producers: Peers,
    /// Frames this consumer keeps while it asks for the next one, if it
    /// declared a number: asking while holding more is an error, and a
    /// ring with fewer than `hold + 2` slots is refused.
    pub hold: Option<u32>,
    /// Whether [`Consumer::next`] fails at once
    /// ([`ChannelError::HoldsEverySlot`]) instead of waiting when this
    /// consumer holds every frame it may hold, so that waiting would wait
    /// on itself. A GStreamer source leaves it off: other threads
    /// (downstream) release its frames while it waits.
    pub refuse_self_wait: bool,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            channel: String::new(),
            mode: ConsumerMode::Auto,
            wait_mode: WaitMode::Hybrid,
            connect_timeout: Some(Duration::from_secs(10)),
            ipc_mode: None,
            producers: Peers::default(),
            hold: None,
            refuse_self_wait: false,
        }
    }
}

/// The producer's identity, from the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelInfo {
    pub transport: u32,
    pub gpu_sync: u32,
    pub device_ordinal: u32,
    pub device_uuid: [u8; 16],
    pub producer_pid: u32,
    pub producer_session: u64,
    /// Owner of the control block: the producer's user, who must own the
    /// data files too.
    pub producer_uid: u32,
    /// A descriptor channel's: the producers trusted to hand out its
    /// memory (over its socket). `None`: names in the shm folder.
    pub descriptor_channel: Option<Peers>,
    /// Bytes of data each frame may carry, as checked against the control
    /// file at attach (the only bound a frame's `data_len` is read against).
    pub frame_data_bound: u32,
}

/// The slot pool, read consistently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolInfo {
    pub generation: u64,
    pub slot_size: u64,
    pub pool_descriptor: Vec<u8>,
    pub slot_descriptors: Vec<[u8; SLOT_DESCRIPTOR_BYTES]>,
}

/// A frame taken from the channel; the slot stays held until released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The frame's number on the channel: frames published before it
    /// (events and ends of stream, which take queue positions, not counted).
    pub seq: u64,
    pub slot: usize,
    pub caps_generation: u64,
    pub pool_generation: u64,
    pub size: u64,
    pub pts: Option<u64>,
    pub dts: Option<u64>,
    pub duration: Option<u64>,
    pub offset: u64,
    pub offset_end: u64,
    pub flags: u32,
    pub planes: Vec<(u64, u32)>,
    pub publish_time_ns: u64,
    /// Frames this consumer missed just before this one.
    pub missed_before: u64,
    /// The frame's data (metas, an application's bytes), copied out while
    /// the slot was held; empty when it carries none or when what the
    /// block said of it was impossible (counted: `frame_data_refused`).
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Frame(Frame),
    /// A serialized event (opaque here), between the frames it came between.
    Event(Vec<u8>),
    Eos,
}

/// Gives a held slot back to the producer; cheap to clone, usable from any
/// thread, keeps the mapping alive while buffers are in flight.
#[derive(Clone)]
pub struct ReleaseHandle {
    shared: Arc<SharedFile>,
    bit: u64,
}

impl std::fmt::Debug for ReleaseHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseHandle")
            .field("bit", &self.bit)
            .finish()
    }
}

impl ReleaseHandle {
    pub fn release(&self, slot: usize) {
        if slot >= MAX_SLOTS {
            return;
        }
        let h = control_header(&self.shared);
        protocol::release_slot(&h.slots[slot].holders, self.bit);
        wait::notify(&h.release_futex, &h.producer_sleepers);
    }
}

/// Wakes the waits of consumers on a channel (from another thread), so they
/// notice an interrupt flag at once.
#[derive(Clone)]
pub struct ConsumerWaker {
    shared: Arc<SharedFile>,
}

impl ConsumerWaker {
    pub fn wake(&self) {
        let h = control_header(&self.shared);
        h.publish_futex.fetch_add(1, Ordering::SeqCst);
        wait::futex_wake_all(&h.publish_futex);
    }
}

pub struct Consumer {
    shared: Arc<SharedFile>,
    config: ConsumerConfig,
    index: usize,
    bit: u64,
    info: ChannelInfo,
    cursor: u64,
    last_published: u64,
    /// Slot count and size of the pool last read, for validation.
    slot_count: usize,
    slot_size: u64,
    pool_generation: u64,
    /// The pool and caps as last read, always while this consumer's cursor
    /// still held back the producer: the ones of the frame just taken, even
    /// if the producer replaced them right after (see `frame_pool`).
    pool_read: Option<PoolInfo>,
    caps_read: Option<(u64, String)>,
    missed: u64,
    /// Frames below this were published before we attached: not missed.
    silent_before: u64,
    /// Missed since the last frame returned, reported with the next one.
    missed_pending: u64,
    received: u64,
    waits: u64,
    pacing: Pacing,
    /// What travelled beside the frames and was lost or refused.
    travelling: travelling::Counts,
    /// Said ready in the record (see [`Consumer::mark_ready`]).
    ready: bool,
    /// Said in the record to have nothing to catch up (see `note_caught_up`).
    caught_up: bool,
    /// The marker of a consumer that waited for the producer, kept until
    /// it is ready: the producer's first frame waits for it.
    waiter_marker: Option<crate::directory::WaiterMarker>,
    /// Since when this consumer, within its declared hold, holds every
    /// slot of a ring that is to grow for it (see `check_not_waiting_on_itself`).
    every_slot_held_since: Option<Instant>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("channel", &self.config.channel)
            .field("index", &self.index)
            .finish()
    }
}

impl Consumer {
    pub fn info(&self) -> &ChannelInfo {
        &self.info
    }

    /// This consumer's record in the control block.
    pub fn index(&self) -> usize {
        self.index
    }

    pub fn release_handle(&self) -> ReleaseHandle {
        ReleaseHandle {
            shared: self.shared.clone(),
            bit: self.bit,
        }
    }

    fn header(&self) -> &ControlHeader {
        control_header(&self.shared)
    }

    /// Why the producer is gone, if it is.
    pub fn producer_gone(&self) -> Option<ProducerGone> {
        if self.header().state.load(Ordering::SeqCst) == STATE_CLOSED {
            Some(ProducerGone::Closed)
        } else if !producer_alive(&self.shared) {
            Some(ProducerGone::Died)
        } else {
            None
        }
    }

    /// Fails once another process truncated the control block.
    pub fn check_intact(&self) -> Result<(), ChannelError> {
        if self.shared.is_broken() {
            Err(ChannelError::Truncated(self.shared.path.clone()))
        } else {
            Ok(())
        }
    }

    fn check_producer(&self) -> Result<(), ChannelError> {
        self.check_intact()?;
        match self.producer_gone() {
            Some(gone) => Err(ChannelError::ProducerGone(gone)),
            None => Ok(()),
        }
    }

    /// Publishes this consumer's per-slot release descriptors (GPU events
    /// the producer waits on before it overwrites a slot).
    pub fn set_release_descriptors(&self, descriptors: &[[u8; RELEASE_DESCRIPTOR_BYTES]]) {
        let record = &self.header().consumers[self.index];
        let count = descriptors.len().min(MAX_SLOTS);
        write_seqlocked(&record.release_seqlock, || {
            for (words, d) in record.release.iter().zip(&descriptors[..count]) {
                store_bytes(words, d);
            }
            record.release_count.store(count as u32, Ordering::Relaxed);
        });
    }

    /// Says in the record that this consumer can take frames: its device,
    /// slots and pipeline are up. Until then a live producer waits for it
    /// (see the producer's `waits_for`), for a bounded time; the first call
    /// of [`next`](Self::next) or [`try_next`](Self::try_next) makes it so.
    pub fn mark_ready(&mut self) {
        if self.ready {
            return;
        }
        self.ready = true;
        // Never 0, which means "starting".
        self.header().consumers[self.index]
            .ready_ns
            .store(shm::monotonic_ns().max(1), Ordering::SeqCst);
        self.waiter_marker = None;
        self.note_caught_up();
        let h = self.header();
        wait::notify(&h.release_futex, &h.producer_sleepers);
    }

    /// Ready with no frame published for it yet (it attached before the
    /// producer's first frame, or nothing came while it started): says in
    /// the record that it has nothing to catch up, so a live producer stops
    /// waiting for it at once. One that has frames to catch up is waited
    /// for a bounded time instead (see the producer's `START_LIMIT`):
    /// reaching the newest frame is no sign, since the producer, held back
    /// by it, then publishes in a burst what its source made meanwhile.
    fn note_caught_up(&mut self) {
        if self.caught_up || !self.ready {
            return;
        }
        let h = control_header(&self.shared);
        if self.cursor >= protocol::load_published(&h.published) {
            self.caught_up = true;
            h.consumers[self.index].caught_up.store(1, Ordering::SeqCst);
        }
    }

    /// Whether [`mark_ready`](Self::mark_ready) was called.
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Waits for the next item. Frames already published are delivered even
    /// if the producer is gone since; after them the wait reports
    /// `ProducerGone`.
    pub fn next(
        &mut self,
        interrupt: &AtomicBool,
        timeout: Option<Duration>,
    ) -> Result<Item, ChannelError> {
        self.mark_ready();
        let deadline = timeout.map(|t| Instant::now() + t);
        let next = (|| loop {
            self.check_intact()?;
            let grace_end = self.check_not_waiting_on_itself()?;
            let until = match (deadline, grace_end) {
                (Some(d), Some(g)) => Some(d.min(g)),
                (d, g) => d.or(g),
            };
            let published = match self.wait_published(interrupt, until) {
                // The ring's growth is late: look again (and fail).
                Err(ChannelError::Timeout)
                    if grace_end.is_some() && deadline.is_none_or(|d| Instant::now() < d) =>
                {
                    continue;
                }
                published => published?,
            };
            self.check_intact()?;
            if let Some(item) = self.take(published)? {
                return Ok(item);
            }
        })();
        match next {
            Err(ChannelError::ProducerGone(_)) if self.joined_after_the_end() => Ok(Item::Eos),
            next => next.map_err(|e| self.truncation_first(e)),
        }
    }

    /// Whether the producer's last item is an end of stream that this
    /// consumer, having attached after it, never took: a producer that then
    /// goes away ended its stream (a new stream after an end of stream
    /// would have published more).
    fn joined_after_the_end(&self) -> bool {
        let h = self.header();
        let published = protocol::load_published(&h.published);
        self.cursor == published && ends_with_eos(h, published)
    }

    /// A truncated block reads as zeros from the moment of the fault that
    /// marks it broken: values that look corrupt after that are the
    /// truncation's doing.
    fn truncation_first(&self, e: ChannelError) -> ChannelError {
        match e {
            ChannelError::Corrupt(_) if self.shared.is_broken() => {
                ChannelError::Truncated(self.shared.path.clone())
            }
            e => e,
        }
    }

    /// Returns the next item if one is ready, without waiting.
    pub fn try_next(&mut self) -> Result<Option<Item>, ChannelError> {
        self.mark_ready();
        loop {
            self.check_intact()?;
            let published = protocol::load_published(&self.header().published);
            if published <= self.cursor {
                self.validate_published(published)?;
                return Ok(None);
            }
            self.validate_published(published)?;
            if let Some(item) = self.take(published)? {
                return Ok(Some(item));
            }
        }
    }

    /// Slots of the current pool this consumer holds a frame of.
    pub fn held_count(&self) -> usize {
        let h = self.header();
        (0..self.slot_count.min(MAX_SLOTS))
            .filter(|&i| h.slots[i].holders.load(Ordering::SeqCst) & self.bit != 0)
            .count()
    }

    /// Whether the producer marks the channel live (frames come paced).
    pub fn channel_is_live(&self) -> bool {
        self.header().live.load(Ordering::Relaxed) != 0
    }

    fn validate_published(&mut self, published: u64) -> Result<(), ChannelError> {
        if published < self.last_published {
            return Err(ChannelError::Corrupt(Corruption::SequenceBackwards {
                found: published,
                last: self.last_published,
            }));
        }
        self.last_published = published;
        Ok(())
    }

    fn wait_published(
        &mut self,
        interrupt: &AtomicBool,
        deadline: Option<Instant>,
    ) -> Result<u64, ChannelError> {
        let h = control_header(&self.shared);
        let cursor = self.cursor;
        let last_published = self.last_published;
        let wake = WakeSource {
            futex: &h.publish_futex,
            sleepers: &h.consumer_sleepers,
            spin_window: self.pacing.spin_window(),
        };
        let mut outcome = WaitOutcome::default();
        let shared = &self.shared;
        let published = wait::wait_for(
            self.config.wait_mode,
            &wake,
            interrupt,
            deadline,
            &mut outcome,
            || {
                if shared.is_broken() {
                    return Err(ChannelError::Truncated(shared.path.clone()));
                }
                let p = protocol::load_published(&h.published);
                // Going backwards is returned too, to be reported as corruption.
                Ok((p > cursor || p < last_published).then_some(p))
            },
            || {
                if h.state.load(Ordering::SeqCst) == STATE_CLOSED {
                    Err(ChannelError::ProducerGone(ProducerGone::Closed))
                } else if !producer_alive(shared) {
                    Err(ChannelError::ProducerGone(ProducerGone::Died))
                } else {
                    Ok(())
                }
            },
        )?;
        if outcome.waited {
            self.waits += 1;
        }
        self.validate_published(published)?;
        Ok(published)
    }

    /// Tries to take the item at the cursor (or the newest one in latest
    /// mode). `Ok(None)`: it was overwritten; the cursor moved on.
    fn take(&mut self, published: u64) -> Result<Option<Item>, ChannelError> {
        let shared = self.shared.clone();
        let h = control_header(&shared);
        let record = &h.consumers[self.index];
        let mut target = self.cursor;
        if self.config.mode == ConsumerMode::Latest || published - target > QUEUE_LEN as u64 {
            target = published - 1;
        } else if let Some(newest_frame) = self.end_to_skip_to(published) {
            target = newest_frame;
        }
        let skipped = target - self.cursor;
        let entry = protocol::load_queue_entry(&h.queue[target as usize % QUEUE_LEN]);
        let entry_seq = queue_entry_seq(entry);
        if entry_seq != target {
            if entry_seq < target {
                return Err(ChannelError::Corrupt(Corruption::QueueEntry {
                    expected: target,
                    found: entry_seq,
                }));
            }
            // Overwritten by a producer that does not wait for us.
            self.advance(target + 1, skipped + 1);
            return Ok(None);
        }
        let kind = queue_entry_kind(entry);
        if kind == QUEUE_EOS {
            self.advance(target + 1, skipped);
            return Ok(Some(Item::Eos));
        }
        if kind == QUEUE_EVENT {
            let event = self.read_event(target);
            self.advance(target + 1, skipped);
            return Ok(event.map(Item::Event));
        }
        let slot = kind as usize;
        if slot >= self.slot_count {
            // Not read yet, or replaced by a larger pool since.
            self.pool()?;
        }
        if slot >= self.slot_count {
            return Err(ChannelError::Corrupt(Corruption::SlotIndex {
                found: slot,
                slots: self.slot_count,
            }));
        }
        let slot_record = &h.slots[slot];
        if !protocol::hold_slot(&slot_record.holders, &slot_record.seq, self.bit, target) {
            wait::notify(&h.release_futex, &h.producer_sleepers);
            self.advance(target + 1, skipped + 1);
            return Ok(None);
        }
        let frame = match self
            .check_intact()
            .and_then(|()| self.read_frame(slot))
            .and_then(|frame| {
                if let Some(frame) = &frame {
                    self.keep_caps_of(frame.caps_generation)?;
                }
                Ok(frame)
            }) {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                // Its pool was replaced under it: gone like an overwritten one.
                protocol::release_slot(&slot_record.holders, self.bit);
                wait::notify(&h.release_futex, &h.producer_sleepers);
                self.advance(target + 1, skipped + 1);
                return Ok(None);
            }
            Err(e) => {
                protocol::release_slot(&slot_record.holders, self.bit);
                return Err(e);
            }
        };
        self.received += 1;
        self.pacing.note(frame.publish_time_ns);
        record.frames_received.fetch_add(1, Ordering::Relaxed);
        self.advance(target + 1, skipped);
        let missed_before = std::mem::take(&mut self.missed_pending);
        Ok(Some(Item::Frame(Frame {
            missed_before,
            ..frame
        })))
    }

    /// Where a consumer at its own pace on a live channel goes once the
    /// producer is stopping while it is more than [`KEEP_UP_FRAMES`] behind
    /// the newest frame: to that frame, the frames between counted missed
    /// (then to the end of stream that follows it, if there is one). It
    /// never kept the producer waiting for them while it ran, and at the
    /// end it does not either: the producer then waits only for the frame
    /// it reads and the newest. One that keeps up takes every frame; while
    /// the producer runs, one behind an end of stream still takes what the
    /// ring kept.
    fn end_to_skip_to(&self, published: u64) -> Option<u64> {
        let h = self.header();
        let live = h.live.load(Ordering::Relaxed) != 0;
        if !live
            || h.state.load(Ordering::SeqCst) != STATE_CLOSING
            || waits_for(&h.consumers[self.index], live)
        {
            return None;
        }
        let newest = published - 1;
        // The newest frame: before the end of stream, if that is the newest item.
        let frame = match ends_with_eos(h, published) {
            true => newest.checked_sub(1)?,
            false => newest,
        };
        (frame >= self.cursor && frame - self.cursor > KEEP_UP_FRAMES).then_some(frame)
    }

    fn advance(&mut self, cursor: u64, missed: u64) {
        let shared = self.shared.clone();
        let h = control_header(&shared);
        let record = &h.consumers[self.index];
        self.cursor = cursor;
        if missed > 0 && self.config.mode != ConsumerMode::Latest && cursor > self.silent_before {
            self.missed = self.missed.saturating_add(missed);
            self.missed_pending = self.missed_pending.saturating_add(missed);
            record.frames_missed.fetch_add(missed, Ordering::Relaxed);
        }
        record.cursor.store(cursor, Ordering::SeqCst);
        wait::notify(&h.release_futex, &h.producer_sleepers);
    }

    /// Gives back a held slot (same as through a `ReleaseHandle`).
    pub fn release(&self, slot: usize) {
        self.release_handle().release(slot);
    }

    pub fn frames_received(&self) -> u64 {
        self.received
    }

    /// Frames missed since the last frame taken, which the next frame's
    /// `missed_before` would carry: at an end of stream, those skipped to
    /// reach it. Counted once.
    pub fn take_missed_pending(&mut self) -> u64 {
        std::mem::take(&mut self.missed_pending)
    }

    pub fn frames_missed(&self) -> u64 {
        self.missed
    }

    pub fn waits(&self) -> u64 {
        self.waits
    }

    pub fn waker(&self) -> ConsumerWaker {
        ConsumerWaker {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        // Buffers still in flight keep their bits (and the lock, through the
        // shared file) until they are released.
        let record = &self.header().consumers[self.index];
        record.state.store(CONSUMER_FREE, Ordering::SeqCst);
        let h = self.header();
        wait::notify(&h.release_futex, &h.producer_sleepers);
    }
}

/// The producer's lock is held, and its recorded process runs (see
/// [`recorded_producer_may_run`]): a consumer that attached to a producer
/// killed a moment before found it dead 100 ms later, instead of waiting
/// for the next producer.
fn producer_alive(shared: &SharedFile) -> bool {
    shm::byte_is_locked(&shared.file, PRODUCER_LOCK_BYTE).unwrap_or(false)
        && recorded_producer_may_run(shared)
}

/// Whether the newest of the `published` items is an end of stream.
fn ends_with_eos(h: &ControlHeader, published: u64) -> bool {
    let Some(newest) = published.checked_sub(1) else {
        return false;
    };
    let entry = protocol::load_queue_entry(&h.queue[newest as usize % QUEUE_LEN]);
    queue_entry_seq(entry) == newest && queue_entry_kind(entry) == QUEUE_EOS
}
