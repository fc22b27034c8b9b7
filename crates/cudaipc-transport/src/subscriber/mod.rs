//! The consumer end of a channel: attaches, opens the producer's slots (again
//! whenever the pool changes), and hands out frames as [`HeldFrame`]s, which
//! give their slot back when dropped (like iceoryx2's `Sample`). No GStreamer
//! here: the caps travel as the producer's string.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{
    ConsumerSlots, SubscriberCorruption, TransportError, TransportKind, open_consumer_slots,
};
use crate::cuda::Device;
use cudaipc_channel::{
    ChannelError, ChannelInfo, Consumer, ConsumerConfig, ConsumerMode, ConsumerWaker, Corruption,
    Item, ProducerGone, WaitMode,
};

mod error;
mod held;
#[cfg(test)]
mod tests;

pub use error::SubscriberError;
pub use held::{Event, FinishReadError, HeldFrame};

#[derive(Clone)]
pub struct SubscriberConfig {
    pub channel: String,
    pub mode: ConsumerMode,
    pub wait_mode: WaitMode,
    /// How long `attach` waits for a producer; `None` waits forever.
    pub connect_timeout: Option<Duration>,
    /// CUDA device to read on; `None`: the producer's own.
    pub device_id: Option<i32>,
    pub on_finish_read_error: FinishReadError,
    /// How the channel is reached; `None`: its socket if it has one.
    pub ipc_mode: Option<cudaipc_channel::IpcMode>,
    /// For a descriptor channel: the producers trusted beside the own user.
    pub producers: cudaipc_channel::socket::Peers,
    /// Frames kept while asking for the next one, if declared (see
    /// `ConsumerConfig::hold`).
    pub hold: Option<u32>,
    /// Fail instead of waiting on frames this subscriber holds itself (see
    /// `ConsumerConfig::refuse_self_wait`).
    pub refuse_self_wait: bool,
}

pub struct Subscriber {
    config: SubscriberConfig,
    consumer: Consumer,
    kind: TransportKind,
    device: Option<Arc<Device>>,
    slots: Option<Arc<dyn ConsumerSlots>>,
    pool_generation: u64,
    caps_generation: u64,
    /// A frame taken with new caps: handed out after them.
    pending: Option<HeldFrame>,
    /// Frames being read (held, or in buffers downstream).
    held: Arc<AtomicUsize>,
    /// Frames skipped because the pool or caps had moved on past them.
    stale: AtomicU64,
    /// See [`Subscriber::wait_on_host`].
    host_waits: bool,
}

impl fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscriber")
            .field("channel", &self.config.channel)
            .field("kind", &self.kind)
            .finish()
    }
}

impl Subscriber {
    /// Attaches to the channel, waiting up to the connect timeout for a
    /// producer; `on_wait` is called once if there is none yet.
    pub fn attach(
        config: SubscriberConfig,
        interrupt: &AtomicBool,
        on_wait: impl FnOnce(),
    ) -> Result<Self, SubscriberError> {
        let consumer_config = |connect_timeout| ConsumerConfig {
            channel: config.channel.clone(),
            mode: config.mode,
            wait_mode: config.wait_mode,
            connect_timeout,
            ipc_mode: config.ipc_mode,
            producers: config.producers.clone(),
            hold: config.hold,
            refuse_self_wait: config.refuse_self_wait,
        };
        // One look first, so that a wait is announced only when it happens.
        let consumer = match Consumer::attach(consumer_config(Some(Duration::ZERO)), interrupt) {
            Err(ChannelError::NoProducer { .. }) => {
                on_wait();
                Consumer::attach(consumer_config(config.connect_timeout), interrupt)
            }
            attached => attached,
        }
        .map_err(|e| match e {
            ChannelError::Interrupted => SubscriberError::Interrupted,
            e @ ChannelError::NoProducer { .. } => SubscriberError::NoProducer(e),
            e => SubscriberError::Attach(e),
        })?;
        let info = consumer.info().clone();
        let kind = TransportKind::from_wire(info.transport).ok_or_else(|| {
            SubscriberError::Corrupt(
                Corruption::Transport {
                    found: info.transport,
                }
                .into(),
            )
        })?;
        let device = match kind {
            TransportKind::Host => None,
            TransportKind::Cuda => Some(open_device(&config, &info)?),
        };
        let mut subscriber = Self {
            config,
            consumer,
            kind,
            device,
            slots: None,
            pool_generation: 0,
            caps_generation: 0,
            pending: None,
            held: Arc::new(AtomicUsize::new(0)),
            stale: AtomicU64::new(0),
            host_waits: false,
        };
        subscriber.open_current_pool();
        Ok(subscriber)
    }

    /// Opens the producer's slots now rather than at the first frame, so
    /// that frames published before a clean close (which removes the
    /// slots' names) can still be read after it, as after a killed
    /// producer. Best effort: a failure here comes again at the first frame.
    fn open_current_pool(&mut self) {
        if let Ok(pool) = self.consumer.pool() {
            let _ = self.refresh_pool(pool.generation);
        }
    }

    pub fn kind(&self) -> TransportKind {
        self.kind
    }

    /// The device frames are read on (cuda transport).
    pub fn device(&self) -> Option<&Arc<Device>> {
        self.device.as_ref()
    }

    pub fn info(&self) -> &ChannelInfo {
        self.consumer.info()
    }

    /// Wakes a `next` waiting in another thread, to see its interrupt flag.
    pub fn waker(&self) -> ConsumerWaker {
        self.consumer.waker()
    }

    /// Times `next` had to wait for a frame.
    pub fn waits(&self) -> u64 {
        self.consumer.waits()
    }

    /// From the next frame on, waits for the producer's writes on the host
    /// (`on`) even where this device would wait on the GPU (under MPS). For
    /// readers that synchronise the host on memory whose writes may still
    /// be pending: GStreamer's CUDA filters, given the slots themselves,
    /// would wait for the GPU to drain before each frame (see
    /// [`HeldFrame::is_written`]).
    pub fn wait_on_host(&mut self, on: bool) {
        self.host_waits = on;
    }

    /// Frames missed since the last frame taken (a frame's `missed_before`
    /// carries them otherwise): at an end of stream, those it skipped to
    /// reach it, being far behind a live producer. Counted once.
    pub fn take_missed_at_end(&mut self) -> u64 {
        self.consumer.take_missed_pending()
    }

    /// Frames this subscriber missed: overwritten before it took them (it
    /// fell behind a live producer, or one that drops).
    pub fn frames_missed(&self) -> u64 {
        self.consumer.frames_missed()
    }

    /// Whether the producer marks the channel live (frames come paced).
    pub fn channel_is_live(&self) -> bool {
        self.consumer.channel_is_live()
    }

    /// What this subscriber lost or refused of what travels beside the
    /// frames (data past its bound, events overwritten).
    pub fn travelling_counts(&self) -> cudaipc_channel::TravellingCounts {
        self.consumer.travelling_counts()
    }

    /// Frames skipped because the pool or caps had moved on past them.
    pub fn stale(&self) -> u64 {
        self.stale.load(Ordering::Relaxed)
    }

    /// Frames of this subscriber still being read.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// The channel's caps now, if its producer published some yet, for a
    /// reader that sets itself up before it asks for its first frame (and
    /// so is ready to keep up when it asks: see
    /// [`cudaipc_channel::START_LIMIT`]). Frames of these caps then come
    /// without an `Event::Caps` before them.
    pub fn current_caps(&mut self) -> Result<Option<String>, SubscriberError> {
        let Some((generation, caps)) = self.consumer.current_caps()? else {
            return Ok(None);
        };
        self.caps_generation = generation;
        Ok(Some(caps))
    }

    /// Waits for the next event until `interrupt` is raised (and the waker
    /// woken). A frame with new caps comes after an `Event::Caps`.
    pub fn next(&mut self, interrupt: &AtomicBool) -> Result<Event, SubscriberError> {
        loop {
            // Without a timeout, `next_within` returns only with an event.
            if let Some(event) = self.next_within(interrupt, None)? {
                return Ok(event);
            }
        }
    }

    /// Like [`next`](Self::next), giving up with `Ok(None)` once `timeout`
    /// passed without an event (`None`: waits as long as `next`).
    pub fn next_within(
        &mut self,
        interrupt: &AtomicBool,
        timeout: Option<Duration>,
    ) -> Result<Option<Event>, SubscriberError> {
        if let Some(frame) = self.pending.take() {
            return Ok(Some(Event::Frame(frame)));
        }
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        // The whole timeout on the first pass; what is left of it after a
        // stale frame.
        let mut left = timeout;
        loop {
            let frame = match self.consumer.next(interrupt, left) {
                Ok(Item::Frame(frame)) => frame,
                Ok(Item::Eos) => return Ok(Some(Event::Eos)),
                Ok(Item::Event(bytes)) => return Ok(Some(Event::StreamEvent(bytes))),
                Err(ChannelError::ProducerGone(gone)) => {
                    return Ok(Some(Event::ProducerGone(gone)));
                }
                Err(ChannelError::Timeout) if deadline.is_some() => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            // From here on the slot goes back on every path.
            let mut frame = HeldFrame {
                frame,
                slots: None,
                written: false,
                release: self.consumer.release_handle(),
                held: self.held.clone(),
                on_finish_read_error: self.config.on_finish_read_error.clone(),
            };
            let slots = match self.refresh_pool(frame.pool_generation)? {
                Refresh::Current(slots) => slots,
                Refresh::Stale => {
                    self.stale.fetch_add(1, Ordering::Relaxed);
                    left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                    continue;
                }
                Refresh::Gone(gone) => return Ok(Some(Event::ProducerGone(gone))),
            };
            let new_caps = if frame.caps_generation != self.caps_generation {
                let Some(caps) = self.consumer.frame_caps(frame.caps_generation) else {
                    self.stale.fetch_add(1, Ordering::Relaxed);
                    left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                    continue;
                };
                self.caps_generation = frame.caps_generation;
                Some(caps.to_owned())
            } else {
                None
            };
            let (count, size) = (slots.slot_count(), slots.slot_size());
            if frame.slot >= count || frame.size > size as u64 {
                return Err(SubscriberError::Corrupt(
                    SubscriberCorruption::FrameOutsideSlots {
                        seq: frame.seq,
                        slot: frame.slot,
                        size: frame.size,
                        slots: count,
                        slot_size: size,
                    },
                ));
            }
            let consumer = &self.consumer;
            let give_up =
                || interrupt.load(Ordering::Relaxed) || consumer.producer_gone().is_some();
            match slots.before_read(frame.slot, self.host_waits, &give_up) {
                Ok(written) => frame.written = written,
                Err(e) => {
                    // A producer that died before its writes finished, or a
                    // stop while waiting for them.
                    if let Some(gone) = self.consumer.producer_gone() {
                        return Ok(Some(Event::ProducerGone(gone)));
                    }
                    if interrupt.load(Ordering::Relaxed) {
                        return Err(SubscriberError::Interrupted);
                    }
                    return Err(e.into());
                }
            }
            frame.slots = Some(slots);
            self.held.fetch_add(1, Ordering::SeqCst);
            return Ok(Some(match new_caps {
                Some(caps) => {
                    self.pending = Some(frame);
                    Event::Caps(caps)
                }
                None => Event::Frame(frame),
            }));
        }
    }

    /// The slots of pool `generation`, opened when it is new.
    fn refresh_pool(&mut self, generation: u64) -> Result<Refresh, SubscriberError> {
        if let Some(slots) = self
            .slots
            .as_ref()
            .filter(|_| generation == self.pool_generation)
        {
            return Ok(Refresh::Current(slots.clone()));
        }
        // The pool read when the frame was taken, not the channel's pool now:
        // the producer may replace it as soon as our cursor moved past the
        // frame, and the frame must still be read from its own pool.
        let pool = match self.consumer.frame_pool(generation) {
            Some(pool) => pool.clone(),
            None if self.consumer.pool_generation() > generation => {
                // A consumer the producer does not wait for (latest frame,
                // or its own pace on a live channel) overtaken by a newer
                // pool.
                return Ok(Refresh::Stale);
            }
            None => {
                return Err(SubscriberError::Corrupt(
                    SubscriberCorruption::PoolGeneration {
                        found: generation,
                        current: self.consumer.pool_generation(),
                    },
                ));
            }
        };
        let slots = match open_consumer_slots(
            &self.config.channel,
            self.consumer.info(),
            &pool,
            self.device.as_ref(),
            self.consumer.index(),
        ) {
            Ok(slots) => slots,
            // A producer that died meanwhile takes its device memory with it:
            // that is its death, not a failure to open.
            Err(e) => match self.consumer.producer_gone() {
                Some(gone) => return Ok(Refresh::Gone(gone)),
                None => {
                    return Err(match e {
                        TransportError::Channel(ChannelError::Truncated(path)) => {
                            SubscriberError::Truncated(path)
                        }
                        e => SubscriberError::OpenSlots(e),
                    });
                }
            },
        };
        self.consumer
            .set_release_descriptors(&slots.release_descriptors());
        self.slots = Some(slots.clone());
        self.pool_generation = pool.generation;
        Ok(Refresh::Current(slots))
    }
}

enum Refresh {
    Current(Arc<dyn ConsumerSlots>),
    Stale,
    Gone(ProducerGone),
}

/// The device to read a cuda channel on: the configured one, else the
/// producer's own (found by UUID).
fn open_device(
    config: &SubscriberConfig,
    info: &ChannelInfo,
) -> Result<Arc<Device>, SubscriberError> {
    if let Err(source) = crate::cuda::driver() {
        return Err(SubscriberError::NoCuda {
            channel: config.channel.clone(),
            source,
        });
    }
    let ordinal = match config.device_id {
        Some(ordinal) => ordinal,
        None => match Device::find_by_uuid(&info.device_uuid) {
            Ok(Some(ordinal)) => ordinal,
            Ok(None) => return Err(SubscriberError::ProducerGpuNotVisible),
            Err(source) => {
                return Err(SubscriberError::Device {
                    ordinal: None,
                    source,
                });
            }
        },
    };
    Device::get(ordinal).map_err(|source| SubscriberError::Device {
        ordinal: Some(ordinal),
        source,
    })
}
