//! The consumer end of a channel: attaches, opens the producer's slots (again
//! whenever the pool changes), and hands out frames as [`HeldFrame`]s, which
//! give their slot back when dropped (like iceoryx2's `Sample`). No GStreamer
//! here: the caps travel as the producer's string.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{
    ConsumerSlots, SlotMemory, SubscriberCorruption, TransportError, TransportKind,
    open_consumer_slots,
};
use crate::cuda::{CudaError, Device};
use cudaipc_channel::{
    ChannelError, ChannelInfo, Consumer, ConsumerConfig, ConsumerMode, ConsumerWaker, Corruption,
    Frame, Item, ProducerGone, ReleaseHandle, WaitMode,
};

/// Called when the end of a GPU read cannot be marked (slot, error): the
/// slot is released all the same.
pub type FinishReadError = Arc<dyn Fn(usize, &TransportError) + Send + Sync>;

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

#[derive(Debug)]
pub enum SubscriberError {
    /// The interrupt flag was raised.
    Interrupted,
    /// No producer appeared before the connect timeout.
    NoProducer(ChannelError),
    /// The channel exists but cannot be attached to.
    Attach(ChannelError),
    /// The channel uses the cuda transport, but CUDA is not usable here.
    NoCuda { channel: String, source: CudaError },
    /// The producer's GPU is not visible in this process (see
    /// `CUDA_VISIBLE_DEVICES`), and no device to read on was configured.
    ProducerGpuNotVisible,
    /// A CUDA device cannot be opened (`ordinal`), or the producer's could
    /// not be looked for (`None`).
    Device {
        ordinal: Option<i32>,
        source: CudaError,
    },
    /// The control block holds something impossible: which field, how.
    Corrupt(SubscriberCorruption),
    /// The producer's slots cannot be opened.
    OpenSlots(TransportError),
    /// Any other failure of a read.
    Read(TransportError),
    /// Another process truncated one of the channel's shared files: the
    /// channel cannot go on, as if its producer were lost.
    Truncated(std::path::PathBuf),
}

impl fmt::Display for SubscriberError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Interrupted => f.write_str("interrupted"),
            Self::NoProducer(e) | Self::Attach(e) => write!(f, "{e}"),
            Self::NoCuda { channel, source } => write!(
                f,
                "channel '{channel}' uses the cuda transport, but CUDA is not usable here: {source}"
            ),
            Self::ProducerGpuNotVisible => f.write_str(
                "the producer's GPU is not visible in this process (check CUDA_VISIBLE_DEVICES)",
            ),
            Self::Device {
                ordinal: Some(ordinal),
                source,
            } => write!(f, "cannot open CUDA device {ordinal}: {source}"),
            Self::Device {
                ordinal: None,
                source,
            } => write!(f, "{source}"),
            Self::Corrupt(what) => write!(f, "{what}"),
            Self::OpenSlots(e) | Self::Read(e) => write!(f, "{e}"),
            Self::Truncated(path) => write!(f, "{}", ChannelError::Truncated(path.clone())),
        }
    }
}

impl std::error::Error for SubscriberError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NoProducer(e) | Self::Attach(e) => Some(e),
            Self::NoCuda { source, .. } | Self::Device { source, .. } => Some(source),
            Self::OpenSlots(e) | Self::Read(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ChannelError> for SubscriberError {
    fn from(e: ChannelError) -> Self {
        match e {
            ChannelError::Interrupted => Self::Interrupted,
            ChannelError::Corrupt(what) => Self::Corrupt(what.into()),
            ChannelError::Truncated(path) => Self::Truncated(path),
            e => Self::Read(TransportError::Channel(e)),
        }
    }
}

impl From<TransportError> for SubscriberError {
    /// A failure of the slots' ordering hooks.
    fn from(e: TransportError) -> Self {
        match e {
            TransportError::Channel(e) => e.into(),
            e => Self::Read(e),
        }
    }
}

/// What [`Subscriber::next`] yields.
// A frame is moved out at once, once per frame: boxing it would cost an
// allocation per frame for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Event {
    /// The frames that follow have these caps (the producer's string).
    Caps(String),
    Frame(HeldFrame),
    /// A serialized event, between the frames it came between.
    StreamEvent(Vec<u8>),
    Eos,
    ProducerGone(ProducerGone),
}

/// A frame whose slot this process holds: its metadata (through `Deref`) and
/// its memory. Dropping it ends the read (after the GPU work queued on the
/// slot so far) and gives the slot back to the producer.
pub struct HeldFrame {
    frame: Frame,
    /// Set once the read is ordered after the producer's writes
    /// (`before_read`); every frame handed out has them.
    slots: Option<Arc<dyn ConsumerSlots>>,
    /// See [`HeldFrame::is_written`].
    written: bool,
    release: ReleaseHandle,
    held: Arc<AtomicUsize>,
    on_finish_read_error: FinishReadError,
}

impl HeldFrame {
    /// Where the frame's bytes are.
    pub fn memory(&self) -> SlotMemory {
        self.slots().slot_memory(self.frame.slot)
    }

    fn slots(&self) -> &Arc<dyn ConsumerSlots> {
        self.slots
            .as_ref()
            .expect("a frame is handed out only once its read is ordered")
    }

    /// The frame's bytes, for the host transport.
    pub fn host_bytes(&self) -> Option<&[u8]> {
        // The producer does not write a held slot; the size was checked
        // against the slot size before the frame was handed out.
        self.slots()
            .host_region(self.frame.slot)
            .and_then(|region| region.as_slice().get(..self.frame.size as usize))
    }

    /// Whether the producer's writes of the frame were done on the GPU when
    /// it was handed out, not only ordered before this process's later
    /// reads on its stream.
    pub fn is_written(&self) -> bool {
        self.written
    }

    /// Frames of its subscriber being read, this one included.
    pub fn frames_held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Slots in the producer's pool.
    pub fn slot_count(&self) -> usize {
        self.slots().slot_count()
    }
}

impl Deref for HeldFrame {
    type Target = Frame;
    fn deref(&self) -> &Frame {
        &self.frame
    }
}

impl Drop for HeldFrame {
    fn drop(&mut self) {
        if let Some(slots) = &self.slots {
            self.held.fetch_sub(1, Ordering::SeqCst);
            if let Err(e) = slots.finish_read(self.frame.slot) {
                (self.on_finish_read_error)(self.frame.slot, &e);
            }
        }
        self.release.release(self.frame.slot);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::unique_channel;
    use crate::{GpuSync, ProducerSlots, SlotRequest, create_producer_slots};
    use cudaipc_channel::{FrameMeta, Producer, ProducerConfig};

    const SIZE: usize = 64;

    /// A host producer with one slot, and a subscriber attached to it.
    fn pair() -> (Producer, Box<dyn ProducerSlots>, Subscriber) {
        let channel = unique_channel("subscriber");
        let no = AtomicBool::new(false);
        let producer = Producer::create(ProducerConfig {
            channel: channel.clone(),
            transport: TransportKind::Host.wire_value(),
            ..Default::default()
        })
        .unwrap();
        let slots = new_pool(&producer, &channel, 1);
        producer.set_caps("video/x-test", &no).unwrap();
        let config = SubscriberConfig {
            channel,
            mode: ConsumerMode::EveryFrame,
            wait_mode: WaitMode::Hybrid,
            connect_timeout: Some(Duration::from_secs(5)),
            device_id: None,
            on_finish_read_error: Arc::new(|_, e| panic!("finish_read: {e}")),
            ipc_mode: None,
            producers: Default::default(),
            hold: None,
            refuse_self_wait: false,
        };
        let subscriber = Subscriber::attach(config, &no, || {}).unwrap();
        (producer, slots, subscriber)
    }

    /// Host slots of pool `generation` (one slot), published as the pool.
    fn new_pool(producer: &Producer, channel: &str, generation: u64) -> Box<dyn ProducerSlots> {
        let request = SlotRequest {
            channel: channel.to_owned(),
            session: producer.session(),
            generation,
            count: 1,
            size: SIZE,
            permissions: 0o600,
            gpu_sync: GpuSync::Event,
            ipc_mode: Default::default(),
        };
        let slots = create_producer_slots(TransportKind::Host, &request, None).unwrap();
        let descriptors = slots.slot_descriptors();
        producer
            .configure_pool(
                SIZE as u64,
                &descriptors,
                &slots.pool_descriptor(),
                &AtomicBool::new(false),
            )
            .unwrap();
        slots
    }

    fn publish(producer: &Producer, slots: &dyn ProducerSlots, byte: u8) {
        let slot = producer.reserve_now().expect("a free slot");
        write(producer, slots, slot, byte);
    }

    /// Fills reserved `slot` with `byte` and publishes it.
    fn write(producer: &Producer, slots: &dyn ProducerSlots, slot: usize, byte: u8) {
        slots.before_write(slot, producer).unwrap();
        let SlotMemory::Host(region) = slots.slot_memory(slot) else {
            unreachable!("host transport")
        };
        // SAFETY: the producer owns the reserved slot; nothing else views it.
        let bytes = unsafe { region.as_mut_slice() }.expect("the producer's mapping is writable");
        let len = SIZE.min(bytes.len());
        bytes[..len].fill(byte);
        slots.after_write(slot).unwrap();
        let meta = FrameMeta {
            size: SIZE as u64,
            ..Default::default()
        };
        producer.publish(slot, &meta).unwrap();
    }

    /// Every frame comes from a new pool with new caps, each replaced as soon
    /// as the consumer's cursor passed the frame before, racing its reading
    /// of that frame: every frame must still arrive, with its own bytes and
    /// caps (the producer keeps every pool alive here).
    #[test]
    fn every_frame_arrives_across_pool_and_caps_changes_right_after_it() {
        const FRAMES: u8 = 200;
        let (producer, slots, mut subscriber) = pair();
        let channel = subscriber.config.channel.clone();
        let producer = Arc::new(producer);
        let publishing = {
            let producer = producer.clone();
            std::thread::spawn(move || {
                let no = AtomicBool::new(false);
                let mut pools = vec![slots];
                for generation in 1..=FRAMES {
                    if generation > 1 {
                        let slots = new_pool(&producer, &channel, u64::from(generation));
                        producer
                            .set_caps(&format!("video/x-test, n=(int){generation}"), &no)
                            .unwrap();
                        pools.push(slots);
                    }
                    let slots = pools.last().unwrap();
                    let slot = producer.reserve(&no).unwrap().expect("block mode reserves");
                    write(&producer, &**slots, slot, generation);
                }
                producer.publish_eos();
                pools
            })
        };
        let no = AtomicBool::new(false);
        let mut received = Vec::new();
        let mut caps = String::new();
        loop {
            match subscriber.next(&no).unwrap() {
                Event::Caps(c) => caps = c,
                Event::StreamEvent(_) => panic!("an event"),
                Event::Frame(frame) => {
                    let byte = frame.host_bytes().unwrap()[0];
                    let expected_caps = match byte {
                        1 => "video/x-test".to_owned(),
                        n => format!("video/x-test, n=(int){n}"),
                    };
                    assert_eq!(
                        caps, expected_caps,
                        "frame {} came with other caps",
                        frame.seq
                    );
                    assert_eq!(frame.host_bytes(), Some(&[byte; SIZE][..]));
                    received.push(byte);
                }
                Event::Eos => break,
                Event::ProducerGone(gone) => panic!("the producer went: {gone:?}"),
            }
        }
        let _pools = publishing.join().unwrap();
        assert_eq!(
            received,
            (1..=FRAMES).collect::<Vec<_>>(),
            "frames lost at a pool change"
        );
        assert_eq!(subscriber.stale(), 0);
    }

    #[test]
    fn a_held_frame_keeps_its_slot_until_dropped() {
        let no = AtomicBool::new(false);
        let (producer, slots, mut subscriber) = pair();
        publish(&producer, &*slots, 7);
        assert!(matches!(subscriber.next(&no), Ok(Event::Caps(c)) if c == "video/x-test"));
        let Ok(Event::Frame(frame)) = subscriber.next(&no) else {
            panic!("the frame after its caps")
        };
        assert_eq!(frame.host_bytes(), Some(&[7u8; SIZE][..]));
        assert_eq!((subscriber.held(), frame.frames_held()), (1, 1));
        assert_eq!(producer.reserve_now(), None, "the held slot is not free");
        drop(frame);
        assert_eq!(subscriber.held(), 0);
        publish(&producer, &*slots, 8);
        let Ok(Event::Frame(frame)) = subscriber.next(&no) else {
            panic!("a frame, its caps known")
        };
        assert_eq!(frame.host_bytes(), Some(&[8u8; SIZE][..]));
        drop(frame);
        producer.publish_eos();
        assert!(matches!(subscriber.next(&no), Ok(Event::Eos)));
    }

    #[test]
    fn a_consumers_host_slot_is_read_only_and_outlives_the_channel() {
        let no = AtomicBool::new(false);
        let (producer, slots, mut subscriber) = pair();
        publish(&producer, &*slots, 5);
        assert!(matches!(subscriber.next(&no), Ok(Event::Caps(_))));
        let Ok(Event::Frame(frame)) = subscriber.next(&no) else {
            panic!("the frame after its caps")
        };
        let SlotMemory::Host(region) = frame.memory() else {
            panic!("host transport")
        };
        assert!(!region.is_writable());
        // SAFETY: nothing else views the region (and nothing is written).
        assert!(unsafe { region.as_mut_slice() }.is_none());
        drop((frame, subscriber, slots, producer));
        // The region keeps its mapping: still the frame's bytes.
        assert_eq!(&region.as_slice()[..SIZE], &[5u8; SIZE][..]);
    }

    #[test]
    fn a_frame_not_handed_out_is_given_back_with_the_subscriber() {
        let no = AtomicBool::new(false);
        let (producer, slots, mut subscriber) = pair();
        publish(&producer, &*slots, 1);
        // The frame waits behind its caps inside the subscriber.
        assert!(matches!(subscriber.next(&no), Ok(Event::Caps(_))));
        assert_eq!(producer.reserve_now(), None);
        drop(subscriber);
        assert!(producer.reserve_now().is_some(), "the slot came back");
    }

    #[test]
    fn a_wait_with_a_timeout_ends_without_an_event_and_a_later_frame_still_comes() {
        let no = AtomicBool::new(false);
        let (producer, slots, mut subscriber) = pair();
        let start = std::time::Instant::now();
        assert!(matches!(
            subscriber.next_within(&no, Some(Duration::from_millis(50))),
            Ok(None)
        ));
        assert!(start.elapsed() >= Duration::from_millis(50));
        publish(&producer, &*slots, 3);
        let timeout = Some(Duration::from_secs(5));
        assert!(matches!(
            subscriber.next_within(&no, timeout),
            Ok(Some(Event::Caps(_)))
        ));
        let Ok(Some(Event::Frame(frame))) = subscriber.next_within(&no, timeout) else {
            panic!("the frame after its caps")
        };
        assert_eq!(frame.host_bytes(), Some(&[3u8; SIZE][..]));
    }

    #[test]
    fn a_closed_producer_is_an_event() {
        let no = AtomicBool::new(false);
        let (producer, _slots, mut subscriber) = pair();
        drop(producer);
        assert!(matches!(
            subscriber.next(&no),
            Ok(Event::ProducerGone(ProducerGone::Closed))
        ));
    }
}
