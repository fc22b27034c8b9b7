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

use super::{GpuSync, TransportKind};
use crate::cuda::Device;
use crate::ring_policy::RingPolicy;
use cudaipc_channel::socket::Peers;
use cudaipc_channel::{
    Blocker, ChannelError, IpcMode, Producer, ProducerConfig, ProducerStats, Setting, WaitMode,
    WhenFull,
};

mod copy;
mod errors;
mod lent;
mod loan;
mod slot_sets;

use copy::Repeatable;
pub use errors::{ConfigureError, PublishError, ReserveError};
pub use loan::SlotLoan;
pub use slot_sets::Allocated;
use slot_sets::{Retired, SlotSet};

/// How often the wait for consumers (`wait_for_consumers`) looks again.
const CONSUMER_POLL: Duration = Duration::from_millis(2);

/// What a publisher is made with.
#[derive(Debug, Clone)]
pub struct PublisherConfig {
    pub channel: String,
    pub kind: TransportKind,
    /// The slots' device (the cuda transport).
    pub device: Option<Arc<Device>>,
    /// Slots per set; 0: chosen by the transport (see `ring_policy.rs`).
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
    depth: RingPolicy,
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
        let depth = RingPolicy::new(config.kind, config.device.clone(), config.slots);
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
}
