// The producer side of a channel.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::control_block::{control_header, take_lock_of_dead_producer};
use super::layout::*;
use super::shm::{self, SharedFile};
use super::socket::{self, Peers};
use super::wait::{self, WaitMode, WaitOutcome, WakeSource};
use super::{ChannelError, IpcMode, Setting, protocol, write_seqlocked};

mod consumers;
mod create;
mod reserve;
mod travelling;

/// What the producer does when no slot is free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WhenFull {
    /// Wait for a consumer to release a slot: lossless.
    #[default]
    Block,
    /// Drop the new frame (counted), never wait. Consumers that lag lose the
    /// frames they have not taken yet.
    Drop,
}

#[derive(Debug, Clone)]
pub struct ProducerConfig {
    pub channel: String,
    /// File mode of the control block (and host data files).
    pub permissions: u32,
    pub transport: u32,
    pub gpu_sync: u32,
    pub device_ordinal: u32,
    pub device_uuid: [u8; 16],
    pub when_full: WhenFull,
    pub wait_mode: WaitMode,
    pub ipc_mode: IpcMode,
    /// With `IpcMode::Fd`: the consumers allowed beside the own user.
    pub peers: Peers,
    /// Bytes of data each frame may carry (`FrameMeta::data`), rounded up
    /// to a multiple of 8; 0: none.
    pub frame_data_bound: u32,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            channel: String::new(),
            permissions: 0o600,
            transport: TRANSPORT_HOST,
            gpu_sync: GPU_SYNC_EVENT,
            device_ordinal: 0,
            device_uuid: [0; 16],
            when_full: WhenFull::Block,
            wait_mode: WaitMode::Hybrid,
            ipc_mode: IpcMode::Legacy,
            peers: Peers::default(),
            frame_data_bound: DEFAULT_FRAME_DATA_BOUND,
        }
    }
}

/// Per-frame metadata that travels with a slot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrameMeta {
    pub size: u64,
    pub pts: Option<u64>,
    pub dts: Option<u64>,
    pub duration: Option<u64>,
    pub offset: u64,
    pub offset_end: u64,
    pub flags: u32,
    /// (offset, stride) of each plane.
    pub planes: Vec<(u64, u32)>,
    /// The frame's data (metas, an application's bytes: opaque here), at
    /// most [`Producer::frame_data_bound`] bytes: more is not published
    /// (counted in `ControlHeader::frame_data_dropped`), the frame is.
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerStats {
    pub frames: u64,
    /// Frames lost to `WhenFull::Drop`: not published because every slot
    /// was held, or published and then overwritten before every every-frame
    /// consumer took them (those are also counted in `overwritten`).
    pub dropped: u64,
    pub overwritten: u64,
    /// Frames for which the producer had to wait for a free slot.
    pub waits: u64,
    /// Time spent in those waits, in nanoseconds.
    pub wait_ns: u64,
    pub consumers: u32,
    pub reclaimed_consumers: u64,
}

/// A consumer's release descriptors, as the transport needs them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerReleaseInfo {
    pub index: usize,
    pub session: u64,
    pub descriptors: Vec<[u8; RELEASE_DESCRIPTOR_BYTES]>,
}

/// See [`Producer::consumer_fingerprint`]: (session, release seqlock) of each
/// active consumer record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSetFingerprint([Option<(u64, u64)>; MAX_CONSUMERS]);

pub struct Producer {
    shared: SharedFile,
    config: ProducerConfig,
    session: u64,
    /// Slots reserved by this producer and not yet published or cancelled.
    reserved: AtomicU64,
    slot_count: AtomicU32,
    next_slot_hint: AtomicUsize,
    /// Next sequence number; the lock also serialises publication.
    publish: Mutex<u64>,
    waits: AtomicU64,
    wait_ns: AtomicU64,
    overwritten: AtomicU64,
    reclaimed: AtomicU64,
    /// Until the first frame: the deadline for consumers that were waiting
    /// for this producer to attach.
    waiters_gate: Mutex<Option<std::time::Instant>>,
    gate_open: std::sync::atomic::AtomicBool,
    /// The socket of a descriptor channel (`IpcMode::Fd`), until closed.
    listener: Mutex<Option<socket::Listener>>,
    /// Who kept the producer waiting the last time it waited for a slot.
    last_blockers: Mutex<Vec<Blocker>>,
    /// How many slots which declared holds need, for a ring that may grow
    /// (`set_ring_grows_to`).
    slots_needed: Mutex<Option<SlotsNeeded>>,
}

/// How many slots the attached consumers need, from the `hold` each
/// declared (`None`: not declared) on a live channel or not; `None`: none.
/// The policy of whoever sizes the ring (the transport's
/// `slots_consumers_need`); the channel only compares it with its slots.
pub type SlotsNeeded =
    fn(holds: &mut dyn Iterator<Item = Option<u32>>, live: bool) -> Option<usize>;

/// A consumer that kept the producer from writing a slot: it holds frames,
/// or it asks for every frame and has not taken them all yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocker {
    /// Its consumer record.
    pub index: usize,
    pub pid: u32,
    /// It asked for every frame, live or not
    /// ([`ConsumerMode::EveryFrame`](crate::ConsumerMode::EveryFrame)).
    pub every_frame: bool,
    /// Slots it holds.
    pub held: u32,
    /// Frames published that it has not taken (counted only for consumers
    /// the producer waits for).
    pub behind: u64,
    /// It is still starting (attached and not ready to take frames, or
    /// taking those published while it got ready): a live producer waits
    /// for it up to [`START_LIMIT`].
    pub starting: bool,
}

/// How long a live producer waits for a consumer that attached and is not
/// ready yet (it makes its CUDA context, opens the slots, starts its
/// pipeline): one that keeps up then gets every frame from the first
/// published after it attached, however long its start took within this.
/// One not ready by then is treated like any consumer at its own pace: it
/// misses what was overwritten meanwhile, and says so.
pub const START_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// After a consumer said it is ready with frames published while it
/// started, a live producer waits for it to take them (and those the
/// producer, held back meanwhile, publishes in a burst after) for twice
/// the time its start took, at most [`START_LIMIT`]: a consumer twice as
/// fast as the producer drains them in that time.
const CATCH_UP_FACTOR: u64 = 2;

/// Where a consumer of [`ConsumerMode::Auto`](crate::ConsumerMode) on a
/// live channel stands in its start, as the producer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// Attached, not ready yet, within [`START_LIMIT`].
    Starting,
    /// Ready, taking the frames published while it started, within twice
    /// its start (see [`CATCH_UP_FACTOR`]).
    CatchingUp,
    /// Ready with nothing to catch up, keeping its own pace; or out of
    /// time for its start.
    Done,
}

pub(crate) fn start_of(record: &ConsumerRecord) -> Start {
    if record.caught_up.load(Ordering::Relaxed) != 0 {
        return Start::Done;
    }
    let now = shm::monotonic_ns();
    let ready_ns = record.ready_ns.load(Ordering::Relaxed);
    let attached_ns = record.attached_ns.load(Ordering::Relaxed);
    let limit_ns = START_LIMIT.as_nanos() as u64;
    let since = |t: u64| now.saturating_sub(t);
    if ready_ns == 0 {
        match since(attached_ns) < limit_ns {
            true => Start::Starting,
            false => Start::Done,
        }
    } else {
        let took = ready_ns.saturating_sub(attached_ns);
        match since(ready_ns) < took.saturating_mul(CATCH_UP_FACTOR).min(limit_ns) {
            true => Start::CatchingUp,
            false => Start::Done,
        }
    }
}

/// Whether the producer waits for the consumer of `record`: one that asks
/// for every frame always; one of [`ConsumerMode::Auto`](crate::ConsumerMode)
/// when the channel is not live, or on a live one while it starts (see
/// [`START_LIMIT`]) and takes the frames published meanwhile.
pub(crate) fn waits_for(record: &ConsumerRecord, live: bool) -> bool {
    match record.mode.load(Ordering::Relaxed) {
        MODE_EVERY_FRAME => true,
        MODE_AUTO if !live => true,
        MODE_AUTO => start_of(record) != Start::Done,
        _ => false,
    }
}

/// How long a new producer waits, before its first frame, for consumers
/// that were already waiting for it to be ready (they drop their waiter
/// marker then).
const WAITER_GRACE: std::time::Duration = START_LIMIT;

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("channel", &self.config.channel)
            .field("session", &self.session)
            .finish()
    }
}

impl Producer {
    pub fn session(&self) -> u64 {
        self.session
    }

    pub fn config(&self) -> &ProducerConfig {
        &self.config
    }

    pub fn path(&self) -> &std::path::Path {
        &self.shared.path
    }

    fn header(&self) -> &ControlHeader {
        control_header(&self.shared)
    }

    /// Fails once another process truncated the control block.
    pub fn check_intact(&self) -> Result<(), ChannelError> {
        if self.shared.is_broken() {
            Err(ChannelError::Truncated(self.shared.path.clone()))
        } else {
            Ok(())
        }
    }

    pub fn slot_count(&self) -> usize {
        self.slot_count.load(Ordering::Acquire) as usize
    }

    pub fn pool_generation(&self) -> u64 {
        self.header().pool_generation.load(Ordering::Relaxed)
    }

    pub fn caps_generation(&self) -> u64 {
        self.header().caps_generation.load(Ordering::Relaxed)
    }

    /// Publishes a new slot pool. With a pool in place it first waits until
    /// every every-frame consumer took all published frames and no slot is
    /// reserved. Consumers may still hold frames of the old pool (a sink
    /// keeps its last buffer until the next one comes, which cannot come
    /// before the new pool): their slot records stay busy until released
    /// (see `held_slots`), and the caller keeps the old memory until then.
    pub fn configure_pool(
        &self,
        slot_size: u64,
        slot_descriptors: &[[u8; SLOT_DESCRIPTOR_BYTES]],
        pool_descriptor: &[u8],
        interrupt: &AtomicBool,
    ) -> Result<u64, ChannelError> {
        self.check_intact()?;
        let count = slot_descriptors.len();
        // A ring deeper than the control block's slot records is asked for
        // from outside (a `slots` setting); no ring, or a descriptor the
        // transport made too long, is a bug of the caller.
        Setting::Slots.check(count as u64)?;
        assert!(count >= 1 && pool_descriptor.len() <= POOL_DESCRIPTOR_BYTES);
        if self.slot_count() > 0 {
            self.drain(interrupt)?;
        }
        let h = self.header();
        let generation = h.pool_generation.load(Ordering::Relaxed) + 1;
        write_seqlocked(&h.pool_seqlock, || {
            h.pool_generation.store(generation, Ordering::Relaxed);
            h.slot_size.store(slot_size, Ordering::Relaxed);
            h.slot_count.store(count as u32, Ordering::Relaxed);
            store_bytes(&h.pool_descriptor, pool_descriptor);
            for (i, slot) in h.slots.iter().enumerate() {
                slot.seq.store(SEQ_WRITING, Ordering::Relaxed);
                match slot_descriptors.get(i) {
                    Some(d) => store_bytes(&slot.descriptor, d),
                    None => store_bytes(&slot.descriptor, &[]),
                }
            }
        });
        self.slot_count.store(count as u32, Ordering::Release);
        Ok(generation)
    }

    /// Publishes caps that the following frames carry. In block mode it
    /// first waits until every-frame consumers took all frames of the old
    /// caps, so none of them reads a frame with caps it cannot look up.
    pub fn set_caps(&self, caps: &str, interrupt: &AtomicBool) -> Result<u64, ChannelError> {
        self.check_intact()?;
        if caps.len() > CAPS_CAPACITY {
            return Err(ChannelError::CapsTooLong {
                len: caps.len(),
                capacity: CAPS_CAPACITY,
            });
        }
        if self.config.when_full == WhenFull::Block {
            let published = self.header().published.load(Ordering::Acquire);
            self.wait_producer_side(interrupt, || {
                Ok(self
                    .every_frame_cursors()
                    .all(|cursor| cursor >= published)
                    .then_some(()))
            })?;
        }
        let h = self.header();
        let generation = h.caps_generation.load(Ordering::Relaxed) + 1;
        write_seqlocked(&h.caps_seqlock, || {
            h.caps_generation.store(generation, Ordering::Relaxed);
            h.caps_len.store(caps.len() as u32, Ordering::Relaxed);
            store_bytes(&h.caps, caps.as_bytes());
        });
        Ok(generation)
    }

    /// The cursors of the consumers the producer waits for: those that ask
    /// for every frame, and on a channel that is not live those of
    /// [`ConsumerMode::Auto`](crate::ConsumerMode::Auto) too.
    fn every_frame_cursors(&self) -> impl Iterator<Item = u64> + '_ {
        let live = self.is_live();
        self.header()
            .consumers
            .iter()
            .filter(move |c| {
                c.state.load(Ordering::SeqCst) == CONSUMER_ACTIVE && waits_for(c, live)
            })
            .map(|c| c.cursor.load(Ordering::SeqCst))
    }

    /// Says whether frames come paced (a live source, a clock): on a live
    /// channel the producer waits only for consumers that ask for every
    /// frame ([`ConsumerMode::EveryFrame`](crate::ConsumerMode::EveryFrame)).
    pub fn set_live(&self, live: bool) {
        self.header().live.store(u32::from(live), Ordering::SeqCst);
        // A producer waiting for a consumer it no longer waits for re-checks.
        let h = self.header();
        wait::notify(&h.release_futex, &h.producer_sleepers);
    }

    pub fn is_live(&self) -> bool {
        self.header().live.load(Ordering::Relaxed) != 0
    }

    /// The consumers that kept the producer waiting for a slot the last
    /// time it had to wait (see [`Blocker`]).
    pub fn last_blockers(&self) -> Vec<Blocker> {
        self.last_blockers.lock().unwrap().clone()
    }

    /// The consumers that keep every slot from being written now: those
    /// holding slots, and those the producer waits for that have frames
    /// still to take.
    fn blockers_now(&self) -> Vec<Blocker> {
        let h = self.header();
        let live = self.is_live();
        let published = h.published.load(Ordering::Acquire);
        let count = self.slot_count();
        // Holding a slot holds the producer back only when every slot is
        // held; otherwise it waits for the consumers that are behind.
        let every_slot_held = (0..count).all(|i| h.slots[i].holders.load(Ordering::SeqCst) != 0);
        h.consumers
            .iter()
            .enumerate()
            .filter(|(_, c)| c.state.load(Ordering::SeqCst) == CONSUMER_ACTIVE)
            .filter_map(|(index, c)| {
                let bit = 1u64 << index;
                let held = (0..count)
                    .filter(|&i| h.slots[i].holders.load(Ordering::SeqCst) & bit != 0)
                    .count() as u32;
                let mode = c.mode.load(Ordering::Relaxed);
                let behind = if waits_for(c, live) {
                    published.saturating_sub(c.cursor.load(Ordering::SeqCst))
                } else {
                    0
                };
                ((held > 0 && every_slot_held) || behind > 0).then(|| Blocker {
                    index,
                    pid: c.pid.load(Ordering::Relaxed),
                    every_frame: mode == MODE_EVERY_FRAME,
                    held,
                    behind,
                    starting: mode == MODE_AUTO && live && start_of(c) != Start::Done,
                })
            })
            .collect()
    }

    fn wait_producer_side<T>(
        &self,
        interrupt: &AtomicBool,
        poll: impl FnMut() -> Result<Option<T>, ChannelError>,
    ) -> Result<T, ChannelError> {
        let h = self.header();
        let wake = WakeSource {
            futex: &h.release_futex,
            sleepers: &h.producer_sleepers,
            spin_window: None,
        };
        let mut outcome = WaitOutcome::default();
        wait::wait_for(
            self.config.wait_mode,
            &wake,
            interrupt,
            None,
            &mut outcome,
            poll,
            || {
                self.check_intact()?;
                // Closed from another thread: no slot will be wanted.
                if self.is_closed() {
                    return Err(ChannelError::Interrupted);
                }
                self.reclaim_dead_consumers();
                Ok(())
            },
        )
    }

    /// Waits until no every-frame consumer lags and no slot is reserved.
    fn drain(&self, interrupt: &AtomicBool) -> Result<(), ChannelError> {
        let published = self.header().published.load(Ordering::Acquire);
        self.wait_producer_side(interrupt, || {
            let idle = self.every_frame_cursors().all(|c| c >= published)
                && self.reserved.load(Ordering::SeqCst) == 0;
            Ok(idle.then_some(()))
        })
    }

    /// Per slot record, the consumers (one bit each) holding its frame.
    pub fn held_slots(&self) -> [u64; MAX_SLOTS] {
        let h = self.header();
        std::array::from_fn(|i| h.slots[i].holders.load(Ordering::SeqCst))
    }

    /// Publishes the frame written into reserved `slot`; returns its sequence
    /// number.
    pub fn publish(&self, slot: usize, meta: &FrameMeta) -> Result<u64, ChannelError> {
        self.check_intact()?;
        if !self.is_reserved(slot) {
            return Err(ChannelError::NotReserved { slot });
        }
        let h = self.header();
        let record = &h.slots[slot];
        let mut next_seq = self.publish.lock().unwrap();
        let seq = *next_seq;
        *next_seq += 1;
        self.next_slot_hint
            .store((slot + 1) % self.slot_count().max(1), Ordering::Relaxed);
        record
            .caps_generation
            .store(h.caps_generation.load(Ordering::Relaxed), Ordering::Relaxed);
        record
            .pool_generation
            .store(h.pool_generation.load(Ordering::Relaxed), Ordering::Relaxed);
        record.size.store(meta.size, Ordering::Relaxed);
        record
            .pts
            .store(meta.pts.unwrap_or(TIME_NONE), Ordering::Relaxed);
        record
            .dts
            .store(meta.dts.unwrap_or(TIME_NONE), Ordering::Relaxed);
        record
            .duration
            .store(meta.duration.unwrap_or(TIME_NONE), Ordering::Relaxed);
        record.offset.store(meta.offset, Ordering::Relaxed);
        record.offset_end.store(meta.offset_end, Ordering::Relaxed);
        record.flags.store(meta.flags, Ordering::Relaxed);
        let planes = meta.planes.len().min(MAX_PLANES);
        record.n_planes.store(planes as u32, Ordering::Relaxed);
        for p in 0..MAX_PLANES {
            let (offset, stride) = meta.planes.get(p).copied().unwrap_or((0, 0));
            record.plane_offset[p].store(offset, Ordering::Relaxed);
            record.plane_stride[p].store(stride, Ordering::Relaxed);
        }
        self.write_frame_data(slot, &meta.data);
        record.frame_number.store(
            h.frames_published.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        record
            .publish_time_ns
            .store(shm::monotonic_ns(), Ordering::Relaxed);
        protocol::publish_frame(
            &record.seq,
            &h.queue[seq as usize % QUEUE_LEN],
            &h.published,
            seq,
            slot as u64,
        );
        h.frames_published.fetch_add(1, Ordering::Relaxed);
        self.reserved.fetch_and(!(1u64 << slot), Ordering::SeqCst);
        drop(next_seq);
        wait::notify(&h.publish_futex, &h.consumer_sleepers);
        Ok(seq)
    }

    /// Publishes end-of-stream after all frames so far.
    pub fn publish_eos(&self) {
        let h = self.header();
        let mut next_seq = self.publish.lock().unwrap();
        let seq = *next_seq;
        *next_seq += 1;
        protocol::publish_entry(
            &h.queue[seq as usize % QUEUE_LEN],
            &h.published,
            seq,
            QUEUE_EOS,
        );
        wait::notify(&h.publish_futex, &h.consumer_sleepers);
    }

    /// Counts `frames` lost before they reached this producer (a bridge's
    /// receiver: frames its sender's side missed), beside its own drops.
    pub fn count_dropped(&self, frames: u64) {
        self.header()
            .frames_dropped
            .fetch_add(frames, Ordering::Relaxed);
    }

    pub fn stats(&self) -> ProducerStats {
        let h = self.header();
        ProducerStats {
            frames: h.frames_published.load(Ordering::Relaxed),
            dropped: h.frames_dropped.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            wait_ns: self.wait_ns.load(Ordering::Relaxed),
            overwritten: self.overwritten.load(Ordering::Relaxed),
            consumers: h
                .consumers
                .iter()
                .filter(|c| c.state.load(Ordering::Relaxed) == CONSUMER_ACTIVE)
                .count() as u32,
            reclaimed_consumers: self.reclaimed.load(Ordering::Relaxed),
        }
    }

    /// Waits up to `timeout` until every every-frame consumer took every
    /// item published and no consumer holds a slot, so that frames are not
    /// freed before or while they are read. Returns whether it is so.
    pub fn wait_released(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let published = self.header().published.load(Ordering::Acquire);
        loop {
            self.reclaim_dead_consumers();
            // Every-frame consumers take every item (the EOS too) before the
            // slots go: one still opening them would find them gone.
            let taken = self.every_frame_cursors().all(|c| c >= published);
            let released = self
                .header()
                .slots
                .iter()
                .all(|s| s.holders.load(Ordering::SeqCst) == 0);
            if taken && released {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// Says the producer is stopping: no consumer attaches any more, and
    /// consumers at their own pace on a live channel stop taking frames
    /// they fell behind on (they skip to the end), so that the wait for
    /// the slots they hold ([`wait_released`](Self::wait_released)) lasts
    /// at most the frame each is reading.
    pub fn begin_close(&self) {
        let h = self.header();
        if h.state
            .compare_exchange(
                STATE_OPEN,
                STATE_CLOSING,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
        {
            wait::notify(&h.publish_futex, &h.consumer_sleepers);
        }
    }

    /// Marks the channel closed (consumers report `ProducerGone::Closed`
    /// after the frames already published) and removes its name, so a new
    /// producer can take it. Idempotent; also done on drop.
    pub fn close(&self) {
        let h = self.header();
        if h.state.swap(STATE_CLOSED, Ordering::SeqCst) == STATE_CLOSED {
            return;
        }
        h.publish_futex.fetch_add(1, Ordering::SeqCst);
        wait::futex_wake_all(&h.publish_futex);
        if self.shared.is_linked_at_path() {
            let _ = shm::remove_name(&self.shared.path);
        }
        // A descriptor channel's name goes with its socket.
        let listener = self.listener.lock().unwrap().take();
        drop(listener);
    }

    pub fn is_closed(&self) -> bool {
        self.header().state.load(Ordering::SeqCst) == STATE_CLOSED
    }

    /// Wakes this producer's own waits so they notice an interrupt flag.
    pub fn wake(&self) {
        let h = self.header();
        h.release_futex.fetch_add(1, Ordering::SeqCst);
        wait::futex_wake_all(&h.release_futex);
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.close();
    }
}

fn init_header(h: &ControlHeader, config: &ProducerConfig, session: u64) {
    let r = Ordering::Relaxed;
    h.magic.store(MAGIC, r);
    h.version.store(PROTOCOL_VERSION, r);
    h.header_size
        .store(std::mem::size_of::<ControlHeader>() as u32, r);
    h.total_size
        .store(control_file_size(config.frame_data_bound) as u64, r);
    h.frame_data_bound.store(config.frame_data_bound, r);
    h.max_slots.store(MAX_SLOTS as u32, r);
    h.max_consumers.store(MAX_CONSUMERS as u32, r);
    h.slot_record_size
        .store(std::mem::size_of::<SlotRecord>() as u32, r);
    h.consumer_record_size
        .store(std::mem::size_of::<ConsumerRecord>() as u32, r);
    h.transport.store(config.transport, r);
    h.gpu_sync.store(config.gpu_sync, r);
    h.device_ordinal.store(config.device_ordinal, r);
    h.producer_pid.store(std::process::id(), r);
    h.device_uuid[0].store(
        u64::from_le_bytes(config.device_uuid[..8].try_into().unwrap()),
        r,
    );
    h.device_uuid[1].store(
        u64::from_le_bytes(config.device_uuid[8..].try_into().unwrap()),
        r,
    );
    h.producer_start_time
        .store(shm::own_start_time().unwrap_or(0), r);
    h.producer_pid_namespace.store(shm::pid_namespace(), r);
    h.producer_session.store(session, r);
    for slot in &h.slots {
        slot.seq.store(SEQ_WRITING, r);
    }
    h.state.store(STATE_OPEN, Ordering::SeqCst);
}
