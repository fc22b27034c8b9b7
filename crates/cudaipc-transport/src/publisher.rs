// SPDX-License-Identifier: MPL-2.0

//! The producer end of a channel: the ipc `Producer`, the slot sets (the
//! current one and the retired ones consumers still read), the reservations
//! of writers that fill a slot themselves, and the buffers an upstream pool
//! lends as slots. `cudaipcsink` only translates between GStreamer and this.
//!
//! A frame reaches a slot in one of four ways:
//! - copied: [`Publisher::publish_copy_of`] reserves a free slot, lets the
//!   caller fill it, and publishes it;
//! - published again: the same call finds a free slot that still holds a
//!   copy of the same source and publishes it without writing;
//! - written in place: a writer holds a [`SlotLoan`] (the sink's buffer
//!   pool hands one out per buffer, carried by the buffer's memory), writes
//!   into its slot, and publishes it with [`SlotLoan::publish`];
//! - lent: once every buffer of an upstream pool went through
//!   ([`Lender::learn`](crate::Lender::learn)), those buffers become the
//!   slots ([`Lender::publish`](crate::Lender::publish); see `lending`).
//!
//! Each ends the same way: the reserved slot is a `Reservation` (a
//! `SlotLoan` holds one) that publishing consumes and that gives the slot
//! back when dropped unpublished, on every error path alike.
//!
//! Locks: `current`, `retired` and the lending's are leaves (none is held while
//! another is taken, and none across a wait).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{
    CudaProducerSlots, GpuSync, LendableFrame, Lent, LentSlots, ProducerSlots, SlotMemory,
    SlotRequest, TransportError, TransportKind, WriterStream,
};
use crate::cuda::{AllocationKey, Device};
use crate::reservation::Reservation;
use crate::ring_depth::RingDepth;
use cudaipc_channel::layout::MAX_SLOTS;
use cudaipc_channel::socket::Peers;
use cudaipc_channel::wait::timed;
use cudaipc_channel::{
    Blocker, ChannelError, FrameMeta, IpcMode, Producer, ProducerConfig, ProducerStats, Setting,
    WaitMode, WhenFull,
};

/// How often the wait for consumers (`wait_for_consumers`) looks again.
const CONSUMER_POLL: Duration = Duration::from_millis(2);

/// What a publisher is made with.
#[derive(Debug, Clone)]
pub struct PublisherConfig {
    pub channel: String,
    pub kind: TransportKind,
    /// The slots' device (the cuda transport).
    pub device: Option<Arc<Device>>,
    /// Slots per set; 0: chosen by the transport (see `ring_depth.rs`).
    pub slots: usize,
    /// File mode of the channel's shared files.
    pub permissions: u32,
    pub gpu_sync: GpuSync,
    pub when_full: WhenFull,
    pub wait_mode: WaitMode,
    /// Consumers that must be attached before the first frame is published
    /// (0: none).
    pub wait_for_consumers: u32,
    pub ipc_mode: IpcMode,
    /// `IpcMode::Fd`: consumers allowed beside the own user.
    pub peers: Peers,
    /// Bytes of data (metas, an application's bytes) each frame may carry.
    pub frame_data_bound: u32,
}

/// One generation of slots.
struct SlotSet<T> {
    slots: Box<dyn ProducerSlots>,
    /// The channel's pool generation these slots were published as.
    generation: u64,
    /// Set when the slots are buffers lent by an upstream pool.
    lent: Option<LentSlots<AllocationKey, T>>,
}

/// A replaced slot set that consumers still read, with the consumers (bits
/// per slot record) that held it at the switch.
type Retired<T> = (Arc<SlotSet<T>>, [u64; MAX_SLOTS]);

/// Slots allocated by [`Publisher::configure`].
#[derive(Debug, Clone, Copy)]
pub struct Allocated {
    pub count: usize,
    pub size: usize,
}

#[derive(Debug)]
pub enum ConfigureError {
    /// The transport could not create the slots.
    Allocate {
        count: usize,
        size: usize,
        error: TransportError,
    },
    /// The channel could not switch to them (interrupted, or closed).
    Install(TransportError),
}

impl std::fmt::Display for ConfigureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Allocate { count, size, error } => {
                write!(f, "cannot allocate {count} slots of {size} bytes: {error}")
            }
            Self::Install(e) => write!(f, "cannot publish the slot pool: {e}"),
        }
    }
}

#[derive(Debug)]
pub enum PublishError {
    Channel(ChannelError),
    Transport(TransportError),
    /// Filling slot `slot` failed: ordering it (a [`TransportError`]), or
    /// the caller's copy (its own error).
    Copy {
        slot: usize,
        error: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl PublishError {
    /// Whether the sink was unlocked (flushing or stopping) meanwhile.
    pub fn is_interrupted(&self) -> bool {
        matches!(
            self,
            Self::Channel(ChannelError::Interrupted)
                | Self::Transport(TransportError::Channel(ChannelError::Interrupted))
        )
    }
}

impl From<TransportError> for PublishError {
    fn from(e: TransportError) -> Self {
        match e {
            TransportError::Channel(e) => Self::Channel(e),
            e => Self::Transport(e),
        }
    }
}

impl std::fmt::Display for PublishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Channel(e) => write!(f, "{e}"),
            Self::Transport(e) => write!(f, "{e}"),
            Self::Copy { slot, error } => {
                write!(f, "cannot copy the frame into slot {slot}: {error}")
            }
        }
    }
}

/// Why a writer got no slot.
#[derive(Debug)]
pub enum ReserveError {
    /// Interrupted, or no slot set (yet).
    Flushing,
    /// The slots are smaller than the frame: the caps changed and the slots
    /// are not resized yet.
    TooSmall,
    Channel(ChannelError),
    Transport(TransportError),
}

/// Statistics of a publisher.
#[derive(Debug, Clone)]
pub struct PublisherStats {
    pub producer: ProducerStats,
    /// Frames published where they were written (in place or lent).
    pub zero_copy: u64,
    pub copied: u64,
    /// Frames published again from a slot that still held them (the same
    /// source pushed again), without a copy.
    pub repeated: u64,
    /// Time spent waiting on the host for consumers' GPU reads of a slot
    /// to finish before it is written again, in nanoseconds.
    pub read_wait_ns: u64,
    pub slots: usize,
    pub kind: TransportKind,
    /// The consumers that kept the producer waiting for a slot the last
    /// time it waited.
    pub last_blockers: Vec<Blocker>,
}

/// What a publisher is doing now ([`Publisher::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublisherStatus {
    /// The channel is closed.
    pub closed: bool,
    /// Every wait ends at once ([`Publisher::set_interrupted`]).
    pub interrupted: bool,
    /// Frames come paced ([`Publisher::set_paced`]): the channel is live.
    pub paced: bool,
    /// Publishing still waits for the consumers asked for to attach.
    pub awaits_consumers: bool,
    /// The slots are buffers lent by an upstream pool (see `Lender`).
    pub lent: bool,
}

/// How long a producer that ended its stream waits, when it stops, for its
/// every-frame consumers to take what it published.
pub const END_OF_STREAM_GRACE: Duration = Duration::from_secs(5);

/// The producer end of a channel; `T` is what keeps a lent buffer alive
/// while its frame is published, and the source of a frame that may be
/// published again unchanged (see `publish_copy_of`).
pub struct Publisher<T> {
    producer: Producer,
    config: PublisherConfig,
    /// Set while the sink is unlocked (flushing or stopping).
    interrupt: AtomicBool,
    /// How many slots a ring of ours gets; the lending sizes its pool by it.
    depth: RingDepth,
    current: Mutex<Option<Arc<SlotSet<T>>>>,
    retired: Mutex<Vec<Retired<T>>>,
    /// Whether `retired` may hold a set: publishing takes no lock per frame
    /// for the sets that are rarely there.
    any_retired: AtomicBool,
    /// Set once `wait_for_consumers` consumers were attached.
    consumers_ready: AtomicBool,
    /// Set once the end of the stream was published.
    ended: AtomicBool,
    zero_copy: AtomicU64,
    copied: AtomicU64,
    repeated: AtomicU64,
    /// See `PublisherStats::read_wait_ns`.
    read_wait_ns: AtomicU64,
    /// What the slots of the current set still hold of the source copied
    /// last (see `publish_copy_of`). A leaf lock, as the others here.
    repeatable: Mutex<Option<Repeatable<T>>>,
}

/// Slots of one slot set that hold a copy of one source, whose content the
/// caller guarantees unchanged while `keeper` lives.
struct Repeatable<T> {
    /// The slot set (its address while it is current).
    set: usize,
    source: usize,
    /// One bit per slot.
    slots: u64,
    _keeper: T,
}

impl<T: Send + 'static> Publisher<T> {
    /// Creates the channel (no slots yet: see `configure`).
    pub fn create(config: PublisherConfig) -> Result<Self, ChannelError> {
        // Refused here, not when the first pool is published: a ring deeper
        // than the channel's slot records, or more consumers than it has
        // (a wait that would never end).
        Setting::Slots.check(config.slots as u64)?;
        Setting::WaitForConsumers.check(u64::from(config.wait_for_consumers))?;
        let device = config.device.as_ref();
        let producer = Producer::create(ProducerConfig {
            channel: config.channel.clone(),
            permissions: config.permissions,
            transport: config.kind.wire_value(),
            gpu_sync: config.gpu_sync.wire_value(),
            device_ordinal: device.map(|d| d.ordinal() as u32).unwrap_or(0),
            device_uuid: device.map(|d| d.uuid()).unwrap_or_default(),
            when_full: config.when_full,
            wait_mode: config.wait_mode,
            ipc_mode: config.ipc_mode,
            peers: config.peers.clone(),
            frame_data_bound: config.frame_data_bound,
        })?;
        let depth = RingDepth::new(config.kind, config.device.clone(), config.slots);
        Ok(Self {
            producer,
            ended: AtomicBool::new(false),
            consumers_ready: AtomicBool::new(config.wait_for_consumers == 0),
            config,
            interrupt: AtomicBool::new(false),
            depth,
            current: Mutex::new(None),
            retired: Mutex::new(Vec::new()),
            any_retired: AtomicBool::new(false),
            zero_copy: AtomicU64::new(0),
            copied: AtomicU64::new(0),
            repeated: AtomicU64::new(0),
            read_wait_ns: AtomicU64::new(0),
            repeatable: Mutex::new(None),
        })
    }

    /// What the publisher was made with (its transport, device, ...).
    pub fn config(&self) -> &PublisherConfig {
        &self.config
    }

    /// What it is doing now: closed, interrupted, paced, waiting for
    /// consumers, lent.
    pub fn status(&self) -> PublisherStatus {
        PublisherStatus {
            closed: self.producer.is_closed(),
            interrupted: self.interrupt.load(Ordering::SeqCst),
            paced: self.depth.is_paced(),
            awaits_consumers: !self.consumers_ready.load(Ordering::Acquire),
            lent: self.current_set().is_some_and(|set| set.lent.is_some()),
        }
    }

    /// `true`: ends every wait of the publisher, and every later one ends
    /// at once (unlock: flushing or stopping); `false`: waits wait again
    /// (unlock_stop).
    pub fn set_interrupted(&self, interrupted: bool) {
        self.interrupt.store(interrupted, Ordering::SeqCst);
        if interrupted {
            self.producer.wake();
        }
    }

    /// Wakes waits of writers so that they see their own interrupt flag.
    pub fn wake(&self) {
        self.producer.wake();
    }

    /// Publishes the caps (a string consumers parse), waiting until no
    /// consumer reads a frame of the old ones.
    pub fn set_caps(&self, caps: &str) -> Result<u64, ChannelError> {
        // A source copied under other caps may be laid out otherwise now.
        self.forget_all_content();
        self.producer.set_caps(caps, &self.interrupt)
    }

    /// Bytes of data each frame may carry (`FrameMeta::data`).
    pub fn frame_data_bound(&self) -> usize {
        self.producer.frame_data_bound()
    }

    /// Publishes a serialized event between the frames published before it
    /// and those after it.
    pub fn publish_event(&self, bytes: &[u8]) -> Result<u64, ChannelError> {
        self.producer.publish_event(bytes, &self.interrupt)
    }

    pub fn eos(&self) {
        self.producer.publish_eos();
        self.ended.store(true, Ordering::SeqCst);
    }

    /// Interrupts every wait, lets consumers finish reading for up to
    /// `grace` (at least `END_OF_STREAM_GRACE` after an EOS: a lossless
    /// consumer then gets the whole stream, however slow its start), then
    /// removes the channel's name and drops the slots (their memory goes
    /// once the last loan, and the last buffer wrapping a slot, is gone).
    /// Returns whether the consumers were done in time.
    pub fn close(&self, grace: Duration) -> bool {
        self.set_interrupted(true);
        let grace = if self.ended.load(Ordering::SeqCst) {
            grace.max(END_OF_STREAM_GRACE)
        } else {
            grace
        };
        self.producer.begin_close();
        let released = self.producer.wait_released(grace);
        self.producer.close();
        *self.current.lock().unwrap() = None;
        self.forget_all_content();
        self.retired.lock().unwrap().clear();
        released
    }

    /// See `Producer::count_dropped`.
    pub fn count_dropped(&self, frames: u64) {
        self.producer.count_dropped(frames);
    }

    pub fn stats(&self) -> PublisherStats {
        PublisherStats {
            producer: self.producer.stats(),
            zero_copy: self.zero_copy.load(Ordering::Relaxed),
            copied: self.copied.load(Ordering::Relaxed),
            repeated: self.repeated.load(Ordering::Relaxed),
            read_wait_ns: self.read_wait_ns.load(Ordering::Relaxed),
            slots: self.producer.slot_count(),
            kind: self.config.kind,
            last_blockers: self.producer.last_blockers(),
        }
    }

    fn current_set(&self) -> Option<Arc<SlotSet<T>>> {
        self.current.lock().unwrap().clone()
    }

    /// Makes sure slots of our own of at least `frame_size` bytes are the
    /// current ones, and the ones the channel describes (allocating them if
    /// the current ones are too small, lent, not as many as `slots=0`
    /// stands for now, or not what the channel describes since a lending
    /// failed half way). `Some` if it allocated.
    pub fn configure(&self, frame_size: usize) -> Result<Option<Allocated>, ConfigureError> {
        if let Some(current) = self.current_set()
            && current.slots.slot_size() >= frame_size
            && current.lent.is_none()
            && current.generation == self.producer.pool_generation()
            && current.slots.slot_count() == self.own_depth(frame_size)
        {
            return Ok(None);
        }
        self.allocate(frame_size).map(Some)
    }

    /// Says whether frames come paced (synchronised to a clock, or from a
    /// live source) rather than as fast as the pipeline runs: `slots=0`
    /// then keeps the shallow ring, since a consumer catches up between
    /// frames. Takes effect at the next allocation.
    pub fn set_paced(&self, paced: bool) {
        self.depth.set_paced(paced);
        // A paced channel is live: consumers keep their own pace on it.
        self.producer.set_live(paced);
    }

    /// Says at what rate paced frames come (frames a second; 0: not known):
    /// with `slots=0` a live ring holds a tenth of a second of them and
    /// more (see `ring_depth.rs`). Takes effect at the next allocation.
    pub fn set_frame_rate(&self, fps: f64) {
        self.depth.set_frame_rate(fps);
    }

    /// The depth of a ring of our own now: `slots`, or the automatic depth,
    /// deeper where the attached consumers need it (declared holds, their
    /// number on a live channel).
    fn own_depth(&self, frame_size: usize) -> usize {
        self.depth
            .own_for_consumers(frame_size, self.producer.slots_consumers_need())
    }

    /// Allocates and publishes a new set of slots of our own.
    fn allocate(&self, frame_size: usize) -> Result<Allocated, ConfigureError> {
        let count = self.own_depth(frame_size);
        let request = SlotRequest {
            channel: self.config.channel.clone(),
            session: self.producer.session(),
            generation: self.producer.pool_generation() + 1,
            count,
            size: frame_size,
            permissions: self.config.permissions,
            gpu_sync: self.config.gpu_sync,
            ipc_mode: self.config.ipc_mode,
        };
        let slots =
            super::create_producer_slots(self.config.kind, &request, self.config.device.as_ref())
                .map_err(|error| ConfigureError::Allocate {
                count,
                size: frame_size,
                error,
            })?;
        self.install(slots, None).map_err(ConfigureError::Install)?;
        // An automatic ring grows for the holds consumers declare.
        self.producer
            .set_ring_grows_to(match self.depth.is_automatic() {
                true => self.depth.growth_limit(frame_size),
                false => 0,
            });
        Ok(Allocated {
            count,
            size: frame_size,
        })
    }

    /// Publishes `slots` as the channel's new slot pool (lent ones with the
    /// key of each slot's memory) and makes it the current set.
    fn install(
        &self,
        slots: Box<dyn ProducerSlots>,
        lent_keys: Option<(usize, Vec<AllocationKey>)>,
    ) -> Result<(), TransportError> {
        if let Some(old) = self.current_set()
            && let Some(lent) = &old.lent
        {
            // The new pool waits for no reserved slot.
            lent.cancel_reservations(&self.producer);
        }
        // Before the pool is published: consumers ask for its memory then.
        let memory = slots.shareables()?;
        if !memory.is_empty() {
            self.producer
                .offer_pool(self.producer.pool_generation() + 1, memory);
        }
        // Waits until consumers are done with the old slots.
        let generation = self.producer.configure_pool(
            slots.slot_size() as u64,
            &slots.slot_descriptors(),
            &slots.pool_descriptor(),
            &self.interrupt,
        )?;
        let lent = lent_keys
            .map(|(placeholders, keys)| LentSlots::new(placeholders, keys, &self.producer))
            .transpose()?;
        // Consumers holding frames of the old set keep it alive.
        let readers = self.producer.held_slots();
        let old = self.current.lock().unwrap().replace(Arc::new(SlotSet {
            slots,
            generation,
            lent,
        }));
        // The new slots hold nothing yet.
        self.forget_all_content();
        if let Some(old) = old
            && readers.iter().any(|&r| r != 0)
        {
            let mut retired = self.retired.lock().unwrap();
            retired.push((old, readers));
            self.any_retired.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Frees the retired slot sets that no consumer reads any more (each
    /// publish path does, once per frame). A bit once seen clear stays
    /// clear: a consumer that released a frame of a retired set cannot take
    /// another one from it.
    fn reap_retired(&self) {
        if !self.any_retired.load(Ordering::Acquire) {
            return;
        }
        let mut retired = self.retired.lock().unwrap();
        if retired.is_empty() {
            self.any_retired.store(false, Ordering::Release);
            return;
        }
        let held = self.producer.held_slots();
        retired.retain_mut(|(_, readers)| {
            for (r, h) in readers.iter_mut().zip(held) {
                *r &= h;
            }
            readers.iter().any(|&r| r != 0)
        });
        self.any_retired
            .store(!retired.is_empty(), Ordering::Release);
    }

    /// Reserves a slot to write the next frame into; before the first
    /// frame, waits until the consumers asked for are attached.
    fn reserve(&self, interrupt: &AtomicBool) -> Result<Option<usize>, ChannelError> {
        if !self.consumers_ready.load(Ordering::Acquire) {
            self.wait_for_consumers(interrupt)?;
        }
        loop {
            match self.producer.reserve(interrupt) {
                Err(ChannelError::RingTooShallow { .. }) => self.grow(),
                reserved => return reserved,
            }
        }
    }

    /// A consumer declared a hold that our ring is too shallow for, and
    /// nothing is reserved: a deeper ring of our own replaces it (consumers
    /// keep the frames they hold of the old one). Where it cannot (lent
    /// slots, or the allocation failed), the ring stops growing, and the
    /// consumer is told once it holds every slot.
    fn grow(&self) {
        let grown = match self.current_set() {
            Some(set) if set.lent.is_none() => self.allocate(set.slots.slot_size()).is_ok(),
            _ => false,
        };
        if !grown {
            self.producer.set_ring_grows_to(0);
        }
    }

    /// Waits (polling, like the producer's wait for early consumers) until
    /// `wait_for_consumers` consumers are attached, the interrupt flag is
    /// set or the channel is closed.
    fn wait_for_consumers(&self, interrupt: &AtomicBool) -> Result<(), ChannelError> {
        let wanted = self.config.wait_for_consumers;
        while self.producer.stats().consumers < wanted {
            if interrupt.load(Ordering::SeqCst) || self.producer.is_closed() {
                return Err(ChannelError::Interrupted);
            }
            std::thread::sleep(CONSUMER_POLL);
        }
        self.consumers_ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Copies a frame into a free slot with `fill` and publishes it with
    /// `meta`. `Ok(None)`: every slot was busy and the policy drops.
    ///
    /// With a `source`: an identity (e.g. the address of the memory it is read from) and a
    /// `keeper` that guarantees its content does not change while it lives
    /// (e.g. a reference to the buffer: GStreamer lets nobody write memory
    /// that others hold). Where a free slot still holds a copy of the same
    /// source, made while a keeper of it lived, that slot is published again
    /// with `meta` and nothing is copied (a frame pushed again: imagefreeze,
    /// videorate duplicates, a tee). The publisher keeps the last source's
    /// keeper. `Ok(Some((slot, copied)))`.
    pub fn publish_copy_of<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
        &self,
        source: Option<(usize, T)>,
        meta: &FrameMeta,
        fill: impl FnOnce(&SlotMemory) -> Result<(), E>,
    ) -> Result<Option<(usize, bool)>, PublishError> {
        self.reap_retired();
        let key = source.as_ref().map(|(key, _)| *key);
        // A free slot that holds the frame already, else any free slot.
        let reserved =
            match key.and_then(|key| self.producer.reserve_one_of(self.slots_holding(key))) {
                Some(slot) => Some(slot),
                None => self
                    .reserve(&self.interrupt)
                    .map_err(PublishError::Channel)?,
            };
        let Some(slot) = reserved else {
            return Ok(None);
        };
        // From here on an early return gives the slot back.
        let reservation = Reservation::new(&self.producer, slot);
        let Some(set) = self.current_set() else {
            return Err(PublishError::Channel(ChannelError::Interrupted));
        };
        let holds = key.is_some_and(|key| self.slots_holding(key) & (1 << slot) != 0);
        // Holding it, there is nothing to write, nor to signal: the slot's
        // ready event was last recorded after its copy (consumers' waits on
        // it pass at once), and no GPU work of ours means no turn on the
        // GPU for this process without MPS.
        if !holds {
            self.forget_content(slot);
            timed(&self.read_wait_ns, || {
                set.slots.before_write(slot, &self.producer)
            })
            .map_err(Into::into)
            .and_then(|()| fill(&set.slots.slot_memory(slot)).map_err(Into::into))
            .map_err(|error| PublishError::Copy { slot, error })?;
        }
        let written = (!holds).then_some(&*set.slots);
        reservation
            .publish(written, meta)
            .map_err(PublishError::from)?;
        let counter = if holds { &self.repeated } else { &self.copied };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some((key, keeper)) = source {
            self.keep_content(key, keeper, &set, slot);
        }
        Ok(Some((slot, !holds)))
    }

    /// The slots of the current set that hold a copy of `source` (a bit
    /// each).
    fn slots_holding(&self, source: usize) -> u64 {
        let Some(set) = self.current_set() else {
            return 0;
        };
        match self.repeatable.lock().unwrap().as_ref() {
            Some(r) if r.source == source && r.set == Arc::as_ptr(&set) as usize => r.slots,
            _ => 0,
        }
    }

    /// Notes that `slot` of `set` (the current set) holds a copy of
    /// `source`, kept unchanged by `keeper`; another source replaces what was
    /// noted.
    fn keep_content(&self, source: usize, keeper: T, set: &Arc<SlotSet<T>>, slot: usize) {
        let set = Arc::as_ptr(set) as usize;
        let mut repeatable = self.repeatable.lock().unwrap();
        let slots = match repeatable.as_ref() {
            Some(r) if r.source == source && r.set == set => r.slots | 1 << slot,
            _ => 1 << slot,
        };
        // The newer keeper holds the same content; the older one may go.
        let old = repeatable.replace(Repeatable {
            set,
            source,
            slots,
            _keeper: keeper,
        });
        drop(repeatable);
        drop(old);
    }

    /// No slot holds a noted source any more (new slots or caps, a writer
    /// in the slots); the keeper goes (outside the lock).
    fn forget_all_content(&self) {
        let forgotten = self.repeatable.lock().unwrap().take();
        drop(forgotten);
    }

    /// `slot` is about to be written: it no longer holds the noted source.
    fn forget_content(&self, slot: usize) {
        if let Some(r) = self.repeatable.lock().unwrap().as_mut() {
            r.slots &= !(1u64 << slot);
        }
    }

    /// Lends a free slot to a writer that fills it in place (waiting
    /// unless `interrupt` is set), for a frame of `frame_size` bytes; the
    /// writer's later writes are ordered after the consumers' reads of the
    /// slot's previous frame.
    pub fn loan(
        self: &Arc<Self>,
        frame_size: usize,
        interrupt: &AtomicBool,
    ) -> Result<SlotLoan<T>, ReserveError> {
        let slot = match self.reserve(interrupt) {
            Ok(Some(slot)) => slot,
            Ok(None) | Err(ChannelError::Interrupted) => return Err(ReserveError::Flushing),
            Err(e) => return Err(ReserveError::Channel(e)),
        };
        // From here on an early return gives the slot back.
        let reservation = Reservation::new(&self.producer, slot);
        // The writer's memory may itself be a noted source (a slot of ours
        // that a downstream element holds and pushes again): forget all.
        self.forget_all_content();
        let Some(set) = self.current_set() else {
            return Err(ReserveError::Flushing);
        };
        if set.slots.slot_size() < frame_size {
            return Err(ReserveError::TooSmall);
        }
        timed(&self.read_wait_ns, || {
            set.slots.before_write(slot, &self.producer)
        })
        .map_err(ReserveError::Transport)?;
        Ok(SlotLoan {
            memory: set.slots.slot_memory(slot),
            publisher: self.clone(),
            set,
            slot,
            generation: reservation.keep(),
            published: false,
        })
    }

    /// Whether `set` is the current slot set (not closed, not replaced).
    fn is_current(&self, set: &Arc<SlotSet<T>>) -> bool {
        self.current
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, set))
    }
}

/// What the lending (`lending.rs`, which sits above the publisher) asks of
/// it beyond its terms (`config`): the ring depth, which it shares, to lend
/// a pool's buffers, and to publish a frame from a lent slot. The learning
/// is the lending's own.
impl<T: Send + 'static> Publisher<T> {
    /// How deep the rings are; the lending sizes its pool by it and says
    /// when one may be lent.
    pub(crate) fn ring_depth(&self) -> &RingDepth {
        &self.depth
    }

    /// Whether a ring of `slots` fits every hold attached consumers
    /// declared (`hold + 2` slots).
    pub(crate) fn fits_declared_holds(&self, slots: usize) -> bool {
        self.producer
            .deepest_declared_hold()
            .is_none_or(|hold| hold as usize + 2 <= slots)
    }

    /// Makes the buffers at `ptrs` (of `size` bytes at least, keyed by
    /// `keys`) the slots, after a placeholder for each record of the current
    /// pool, which consumers may still hold. `Ok(false)`: that many records
    /// do not fit in a channel.
    ///
    /// # Safety
    /// Each pointer must start a device allocation of at least `size` bytes
    /// on the publisher's device that stays allocated while the publisher
    /// exists (an upstream pool keeps its buffers allocated, and the lent
    /// set holds the published ones).
    pub(crate) unsafe fn lend(
        &self,
        ptrs: Vec<u64>,
        keys: Vec<AllocationKey>,
        size: usize,
    ) -> Result<bool, TransportError> {
        let Some(device) = &self.config.device else {
            return Ok(false);
        };
        let placeholders = self.producer.slot_count();
        if placeholders + ptrs.len() > MAX_SLOTS {
            return Ok(false);
        }
        let config = &self.config;
        let request = SlotRequest {
            channel: config.channel.clone(),
            session: self.producer.session(),
            generation: self.producer.pool_generation() + 1,
            count: placeholders + ptrs.len(),
            size,
            permissions: config.permissions,
            gpu_sync: config.gpu_sync,
            ipc_mode: config.ipc_mode,
        };
        // SAFETY: the caller's contract.
        let slots = unsafe { CudaProducerSlots::lend(device, placeholders, ptrs, size, &request) }?;
        // Upstream's pool is as deep as it is.
        self.producer.set_ring_grows_to(0);
        self.install(Box::new(slots), Some((placeholders, keys)))?;
        Ok(true)
    }

    /// Publishes the frame upstream wrote into the lent buffer `frame`
    /// (`None`: not a buffer of the lendable pool) with `meta` in its own
    /// layout, keeping `buffer` while it is published, then takes back the
    /// buffers consumers are done with (for the caller to give back
    /// upstream). Before publishing, `order_after_writer` orders our stream
    /// after upstream's writes; `writer_stream` as in
    /// [`LentSlots::take_released`].
    pub(crate) fn publish_lent(
        &self,
        frame: Option<&LendableFrame>,
        buffer: &T,
        meta: &FrameMeta,
        order_after_writer: impl FnOnce() -> Result<(), TransportError>,
        writer_stream: &dyn Fn(&T) -> Option<WriterStream>,
    ) -> Result<Lent<T>, TransportError>
    where
        T: Clone,
    {
        let Some(set) = self.current_set().filter(|set| set.lent.is_some()) else {
            return Ok(Lent::NotLent);
        };
        let (Some(lent), Some(frame)) = (&set.lent, frame) else {
            return Ok(Lent::Outside);
        };
        let meta = FrameMeta {
            size: frame.size as u64,
            planes: frame.planes.clone(),
            ..meta.clone()
        };
        self.reap_retired();
        order_after_writer()?;
        let Some(reservation) = lent
            .slot_of(&frame.key)
            .and_then(|slot| lent.waiting_for_frame(slot, &self.producer))
        else {
            return Ok(Lent::Outside);
        };
        let slot = reservation.slot();
        lent.publish(reservation, buffer.clone(), &meta, &*set.slots)?;
        self.zero_copy.fetch_add(1, Ordering::Relaxed);
        lent.take_released(
            &*set.slots,
            &self.producer,
            &self.interrupt,
            writer_stream,
            &self.read_wait_ns,
            Some(slot),
        )
        .map(Lent::Published)
    }
}

/// A free slot lent to a writer that fills it in place (see
/// [`Publisher::loan`]). Owned: it may travel with the writer's buffer to
/// another thread. [`publish`](Self::publish) consumes it; dropped
/// unpublished (the buffer was never rendered, an error), it gives the slot
/// back. Keeps the slot's memory alive.
pub struct SlotLoan<T: Send + 'static> {
    publisher: Arc<Publisher<T>>,
    set: Arc<SlotSet<T>>,
    memory: SlotMemory,
    slot: usize,
    /// The pool generation the slot was reserved in.
    generation: u64,
    /// Set once `publish` took the slot over.
    published: bool,
}

impl<T: Send + 'static> SlotLoan<T> {
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Where the slot's bytes are; valid while the loan or a clone of the
    /// memory lives.
    pub fn memory(&self) -> &SlotMemory {
        &self.memory
    }

    /// Whether this loan is a slot of `publisher`.
    pub fn is_of(&self, publisher: &Arc<Publisher<T>>) -> bool {
        Arc::ptr_eq(&self.publisher, publisher)
    }

    /// Publishes the frame written into the slot with `meta`; returns the
    /// slot. On an error the slot goes back to the ring.
    pub fn publish(mut self, meta: &FrameMeta) -> Result<usize, PublishError> {
        self.published = true;
        let publisher = &self.publisher;
        publisher.reap_retired();
        let reservation =
            Reservation::of_generation(&publisher.producer, self.slot, self.generation);
        if !publisher.is_current(&self.set) {
            // Closed (a new set waits for every loan to end).
            return Err(PublishError::Channel(ChannelError::Interrupted));
        }
        reservation
            .publish(Some(&*self.set.slots), meta)
            .map_err(PublishError::from)?;
        publisher.zero_copy.fetch_add(1, Ordering::Relaxed);
        Ok(self.slot)
    }
}

impl<T: Send + 'static> Drop for SlotLoan<T> {
    fn drop(&mut self) {
        if !self.published {
            drop(Reservation::of_generation(
                &self.publisher.producer,
                self.slot,
                self.generation,
            ));
        }
    }
}
