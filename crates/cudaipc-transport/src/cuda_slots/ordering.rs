// How GPU work on the cuda transport's slots is ordered across processes,
// on each side: the ordering half of the composition (see
// `CudaComposition`). Each variant owns its state, and the per-frame steps
// are the ordering's methods: the slots (`CudaProducerSlots`,
// `CudaConsumerSlots`) ask their ordering and never match on its kind.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::super::timeline::Timeline;
use super::super::{GpuSync, GpuWork, SlotRequest, TransportError, WriterStream};
use super::memory::PoolAccess;
use super::{Polled, poll_for, poll_on_host, wait_on_host};
use crate::cuda::{Device, Event, IPC_HANDLE_BYTES, Stream};
use cudaipc_channel::layout::{RELEASE_DESCRIPTOR_BYTES, SLOT_DESCRIPTOR_BYTES};
use cudaipc_channel::socket;
use cudaipc_channel::{ConsumerSetFingerprint, IpcMode, PoolInfo, Producer};

/// A consumer's release descriptor under `GpuSync::Timeline`: its row of the
/// timeline block is its record's.
const TIMELINE_RELEASE_MARK: &[u8; 8] = b"@timelin";

/// How long the producer waits for a consumer's released reads of a slot on
/// the timeline before it stops counting that consumer's reads (its frames
/// may then be overwritten while it reads them; the producer goes on).
const TIMELINE_READS_TIMEOUT: Duration = Duration::from_secs(2);

/// A consumer's release events, opened once per descriptor it publishes.
struct ConsumerEvents {
    session: u64,
    /// Timeline: its reads did not finish within [`TIMELINE_READS_TIMEOUT`];
    /// no longer waited for.
    ignored: bool,
    /// Per slot: the published descriptor and its event, opened.
    events: Vec<([u8; RELEASE_DESCRIPTOR_BYTES], Option<Event>)>,
}

/// The release events of the attached consumers, as last read.
#[derive(Default)]
struct ConsumerEventCache {
    /// The consumer set the events were read for.
    seen: Option<ConsumerSetFingerprint>,
    /// A consumer's descriptors were being rewritten: read again then.
    retry_at: Option<Instant>,
    consumers: HashMap<usize, ConsumerEvents>,
}

/// The producer's side of the ordering: what is shared, and the consumers'
/// release events (or timeline rows) it waits on.
pub(super) struct ProducerOrdering {
    device: Arc<Device>,
    sync: ProducerSync,
    /// See [`super::waits_on_host`].
    host_waits: bool,
    consumers: Mutex<ConsumerEventCache>,
}

/// Where the next write into a slot runs, which decides where the
/// consumers' reads before it are waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Writer {
    /// On our stream, which may wait for the reads on the GPU.
    OurStream,
    /// Outside our stream (another allocator's writer, which does not wait
    /// on it): the reads are waited for on the host.
    Elsewhere,
}

/// What the producer shares to order its writes.
enum ProducerSync {
    /// Both sides synchronise their stream: nothing is shared.
    Host,
    /// Each slot's "written" event; its IPC handle is the second half of
    /// the slot's descriptor.
    Event { ready: Vec<Event> },
    /// The timeline block: a data file named in the pool descriptor on a
    /// legacy channel, handed over first on a descriptor channel.
    Timeline(Timeline),
}

impl ProducerOrdering {
    /// The ordering `ordering` of `count` slots, shared the way `request`'s
    /// channel shares (the composition checked that its memory is handed
    /// out over that channel).
    pub(super) fn create(
        device: &Arc<Device>,
        ordering: GpuSync,
        request: &SlotRequest,
        count: usize,
    ) -> Result<Self, TransportError> {
        let sync = match ordering {
            GpuSync::Host => ProducerSync::Host,
            GpuSync::Event => ProducerSync::Event {
                ready: (0..count)
                    .map(|_| Event::new(device, true))
                    .collect::<Result<_, _>>()?,
            },
            GpuSync::Timeline => ProducerSync::Timeline(match request.ipc_mode {
                IpcMode::Legacy => Timeline::create_named(device, request)?,
                IpcMode::Fd => Timeline::create(device, &socket::socket_path(&request.channel))?,
            }),
        };
        Ok(Self {
            device: device.clone(),
            sync,
            host_waits: super::waits_on_host(device),
            consumers: Mutex::new(ConsumerEventCache::default()),
        })
    }

    pub(super) fn gpu_sync(&self) -> GpuSync {
        match self.sync {
            ProducerSync::Host => GpuSync::Host,
            ProducerSync::Event { .. } => GpuSync::Event,
            ProducerSync::Timeline(_) => GpuSync::Timeline,
        }
    }

    /// The timeline block, if the slots are ordered by one.
    pub(super) fn timeline(&self) -> Option<&Timeline> {
        match &self.sync {
            ProducerSync::Timeline(timeline) => Some(timeline),
            ProducerSync::Host | ProducerSync::Event { .. } => None,
        }
    }

    /// Writes the ordering's half of the slot descriptors: each slot's
    /// event's IPC handle.
    pub(super) fn describe(
        &self,
        descriptors: &mut [[u8; SLOT_DESCRIPTOR_BYTES]],
    ) -> Result<(), TransportError> {
        if let ProducerSync::Event { ready } = &self.sync {
            for (descriptor, event) in descriptors.iter_mut().zip(ready) {
                descriptor[IPC_HANDLE_BYTES..2 * IPC_HANDLE_BYTES]
                    .copy_from_slice(&event.ipc_handle()?);
            }
        }
        Ok(())
    }

    /// Orders the next write into `slot` after the consumers' reads of its
    /// last frame: nothing to do under host synchronisation (consumers
    /// synchronised before releasing), a wait on the timeline, a host wait
    /// for a `writer` outside our stream or without MPS, else on our stream
    /// on the GPU.
    pub(super) fn before_write(
        &self,
        slot: usize,
        producer: &Producer,
        writer: Writer,
    ) -> Result<(), TransportError> {
        match &self.sync {
            // Consumers synchronised before releasing: nothing is in flight.
            ProducerSync::Host => Ok(()),
            ProducerSync::Timeline(timeline) => {
                self.wait_reads_on_timeline(timeline, slot, producer)
            }
            ProducerSync::Event { .. } if writer == Writer::Elsewhere || self.host_waits => {
                self.wait_reads_on_host(slot, producer)
            }
            ProducerSync::Event { .. } => {
                self.wait_for_reads_on(slot, producer, &self.device.stream())
            }
        }
    }

    /// Whether the consumers' GPU reads of `slot`'s last frame are done
    /// (asked, never waited for).
    pub(super) fn reads_done(
        &self,
        slot: usize,
        producer: &Producer,
    ) -> Result<bool, TransportError> {
        match &self.sync {
            // Consumers synchronised before releasing.
            ProducerSync::Host => Ok(true),
            ProducerSync::Timeline(timeline) => {
                if !timeline.is_written(slot) {
                    return Ok(false);
                }
                let mut cache = self.consumers.lock().unwrap();
                self.refresh_consumers(producer, &mut cache);
                Ok(cache
                    .consumers
                    .iter()
                    .all(|(&row, c)| c.ignored || timeline.reads_done(row, slot)))
            }
            ProducerSync::Event { ready } => {
                if !ready[slot].is_complete()? {
                    return Ok(false);
                }
                let mut cache = self.consumers.lock().unwrap();
                self.refresh_consumers(producer, &mut cache);
                for consumer in cache.consumers.values() {
                    if let Some((_, Some(event))) = consumer.events.get(slot)
                        && !event.is_complete()?
                    {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        }
    }

    /// Makes `writer` (another element's stream) wait on the GPU for the
    /// consumers' reads of `slot`, where the ordering can; `false`: the
    /// caller waits on the host instead.
    pub(super) fn order_writer_after_reads(
        &self,
        slot: usize,
        producer: &Producer,
        writer: WriterStream,
    ) -> Result<bool, TransportError> {
        match &self.sync {
            ProducerSync::Host => Ok(true),
            ProducerSync::Timeline(_) => Ok(false),
            ProducerSync::Event { .. } if self.host_waits => Ok(false),
            ProducerSync::Event { .. } => {
                // SAFETY: `WriterStream::new`'s contract: a live stream of
                // this device's primary context.
                let stream = unsafe { self.device.foreign_stream(writer.raw()) };
                self.wait_for_reads_on(slot, producer, &stream)?;
                Ok(true)
            }
        }
    }

    /// Marks the frame in `slot` written once the work queued so far on
    /// `stream` is done.
    pub(super) fn mark_written(&self, slot: usize, stream: &Stream) -> Result<(), TransportError> {
        match &self.sync {
            ProducerSync::Timeline(timeline) => timeline.mark_written(slot, stream)?,
            ProducerSync::Host => stream.synchronize()?,
            ProducerSync::Event { ready } => stream.record(&ready[slot])?,
        }
        Ok(())
    }

    /// Before the slots go: the stream's pending writes into the timeline
    /// block must run before the block is unregistered.
    pub(super) fn finish_before_drop(&self) {
        if let ProducerSync::Timeline(_) = self.sync {
            let _ = self.device.stream().synchronize();
        }
    }

    /// Makes later work on `stream` wait for the consumers' reads of
    /// `slot` (their release events), on the GPU.
    fn wait_for_reads_on(
        &self,
        slot: usize,
        producer: &Producer,
        stream: &Stream,
    ) -> Result<(), TransportError> {
        let mut cache = self.consumers.lock().unwrap();
        self.refresh_consumers(producer, &mut cache);
        for consumer in cache.consumers.values() {
            if let Some((_, Some(event))) = consumer.events.get(slot) {
                stream.wait_event(event)?;
            }
        }
        Ok(())
    }

    /// Waits on the host until the consumers' GPU reads of `slot`'s last
    /// frame are done: for a writer that does not wait on our stream, and
    /// without MPS (see [`super::waits_on_host`]). Consumers
    /// that die meanwhile stop counting.
    fn wait_reads_on_host(&self, slot: usize, producer: &Producer) -> Result<(), TransportError> {
        poll_on_host(
            (GpuWork::ConsumerReads, slot),
            Duration::from_micros(50),
            || self.reads_done(slot, producer),
            || {
                producer.reclaim_dead_consumers();
                false
            },
        )
    }

    /// Waits on the host until the consumers' GPU reads of `slot` that
    /// they released are done, by the timeline. A consumer whose reads do
    /// not finish within [`TIMELINE_READS_TIMEOUT`] is not waited for again
    /// (it can delay the producer once, never stop it).
    fn wait_reads_on_timeline(
        &self,
        timeline: &Timeline,
        slot: usize,
        producer: &Producer,
    ) -> Result<(), TransportError> {
        self.wait_written(timeline, slot)?;
        // The consumers (rows) whose released reads of the slot are not done.
        let late = || {
            let mut cache = self.consumers.lock().unwrap();
            self.refresh_consumers(producer, &mut cache);
            let rows: Vec<usize> = cache
                .consumers
                .iter()
                .filter(|(row, c)| !c.ignored && !timeline.reads_done(**row, slot))
                .map(|(row, _)| *row)
                .collect();
            (cache, rows)
        };
        let polled = poll_for(
            Duration::from_micros(50),
            TIMELINE_READS_TIMEOUT,
            || Ok(late().1.is_empty()),
            || {
                producer.reclaim_dead_consumers();
                false
            },
        )?;
        if let Polled::TimedOut = polled {
            let (mut cache, rows) = late();
            for row in rows {
                if let Some(consumer) = cache.consumers.get_mut(&row) {
                    consumer.ignored = true;
                }
            }
        }
        Ok(())
    }

    /// Opens the release events of consumers that attached since last time.
    fn refresh_consumers(&self, producer: &Producer, cache: &mut ConsumerEventCache) {
        let fingerprint = producer.consumer_fingerprint();
        let retry_due = cache.retry_at.is_some_and(|at| Instant::now() >= at);
        if cache.seen.as_ref() == Some(&fingerprint) && !retry_due {
            return;
        }
        let (infos, unread) = producer.consumer_release_info();
        // Events of a consumer whose record could not be read stay in use.
        cache.consumers.retain(|index, c| {
            unread.contains(index)
                || infos
                    .iter()
                    .any(|i| i.index == *index && i.session == c.session)
        });
        for info in infos {
            let entry = cache
                .consumers
                .entry(info.index)
                .or_insert_with(|| ConsumerEvents {
                    session: info.session,
                    ignored: false,
                    events: Vec::new(),
                });
            // Consumers publish new events with each pool they open.
            entry.events.truncate(info.descriptors.len());
            for (slot, descriptor) in info.descriptors.iter().enumerate() {
                if entry.events.get(slot).is_some_and(|(d, _)| d == descriptor) {
                    continue;
                }
                let mut handle = [0u8; IPC_HANDLE_BYTES];
                handle.copy_from_slice(&descriptor[..IPC_HANDLE_BYTES]);
                // A consumer that publishes garbage only loses its own
                // ordering guarantee; it cannot stop the producer.
                let event = match self.sync {
                    ProducerSync::Event { .. } => Event::open_ipc(&self.device, &handle).ok(),
                    ProducerSync::Host | ProducerSync::Timeline(_) => None,
                };
                let opened = (*descriptor, event);
                if slot < entry.events.len() {
                    entry.events[slot] = opened;
                } else {
                    entry.events.push(opened);
                }
            }
        }
        cache.seen = Some(fingerprint);
        // Bounded re-reads: a consumer stuck mid-write must not cost every
        // frame a full seqlock read.
        cache.retry_at = (!unread.is_empty()).then(|| Instant::now() + Duration::from_millis(1));
    }

    /// Waits on the host until the frame last published in `slot` is
    /// written, before the slot is written again (or handed back to a writer
    /// outside our stream): that bounds how far our queued GPU work runs ahead of
    /// the GPU to the slots. Every-frame consumers bound it anyway (they
    /// release a frame after reading it); without them the host would queue
    /// as much as the driver takes (tens of milliseconds of 4K frames), and
    /// a consumer of the latest frame would wait that long for each one.
    fn wait_written(&self, timeline: &Timeline, slot: usize) -> Result<(), TransportError> {
        poll_on_host(
            (GpuWork::OwnWrites, slot),
            Duration::from_micros(20),
            || Ok(timeline.is_written(slot)),
            || false,
        )
    }
}

/// A consumer's side of the ordering.
pub(super) enum ConsumerOrdering {
    /// Both sides synchronise their stream: nothing is shared.
    Host,
    /// Per slot the producer's "written" event and our "read" one, whose
    /// IPC handles are our release descriptors.
    Event {
        ready: Vec<Event>,
        released: Vec<Event>,
        release_descriptors: Vec<[u8; RELEASE_DESCRIPTOR_BYTES]>,
    },
    Timeline(ConsumerTimeline),
}

/// A consumer's part of the timeline: the block, our row in it, and per
/// slot the value its frame's reads waited for.
pub(super) struct ConsumerTimeline {
    pub(super) block: Timeline,
    pub(super) row: usize,
    pub(super) targets: Vec<AtomicU64>,
}

impl ConsumerOrdering {
    /// Opens `sync`'s ordering of `pool`'s slots: the producer's timeline
    /// block from `access` (whose row `row`, our consumer record's, is
    /// ours), or the producer's events from the slot descriptors.
    pub(super) fn open(
        device: &Arc<Device>,
        sync: GpuSync,
        access: &mut PoolAccess,
        pool: &PoolInfo,
        row: usize,
    ) -> Result<Self, TransportError> {
        Ok(match sync {
            GpuSync::Host => ConsumerOrdering::Host,
            GpuSync::Timeline => {
                let block = access.timeline(device, pool)?;
                block.reset_row(row);
                ConsumerOrdering::Timeline(ConsumerTimeline {
                    block,
                    row,
                    targets: (0..pool.slot_descriptors.len())
                        .map(|_| AtomicU64::new(0))
                        .collect(),
                })
            }
            GpuSync::Event => {
                let count = pool.slot_descriptors.len();
                let mut ready = Vec::with_capacity(count);
                let mut released = Vec::with_capacity(count);
                let mut release_descriptors = Vec::with_capacity(count);
                for (i, d) in pool.slot_descriptors.iter().enumerate() {
                    let mut handle = [0u8; IPC_HANDLE_BYTES];
                    handle.copy_from_slice(&d[IPC_HANDLE_BYTES..2 * IPC_HANDLE_BYTES]);
                    ready.push(
                        Event::open_ipc(device, &handle)
                            .map_err(|source| TransportError::OpenEvent { slot: i, source })?,
                    );
                    let release = Event::new(device, true)?;
                    let mut descriptor = [0u8; RELEASE_DESCRIPTOR_BYTES];
                    descriptor[..IPC_HANDLE_BYTES].copy_from_slice(&release.ipc_handle()?);
                    released.push(release);
                    release_descriptors.push(descriptor);
                }
                ConsumerOrdering::Event {
                    ready,
                    released,
                    release_descriptors,
                }
            }
        })
    }

    /// What the producer waits on before reusing each slot.
    pub(super) fn release_descriptors(&self) -> Vec<[u8; RELEASE_DESCRIPTOR_BYTES]> {
        match self {
            ConsumerOrdering::Host => Vec::new(),
            ConsumerOrdering::Event {
                release_descriptors,
                ..
            } => release_descriptors.clone(),
            ConsumerOrdering::Timeline(timeline) => {
                let mut descriptor = [0u8; RELEASE_DESCRIPTOR_BYTES];
                descriptor[..8].copy_from_slice(TIMELINE_RELEASE_MARK);
                vec![descriptor; timeline.targets.len()]
            }
        }
    }

    /// Orders our reads of `slot` after the producer's writes of its frame:
    /// on the GPU, or `on_host` (then returns `true`), giving up when
    /// `give_up` says so.
    pub(super) fn before_read(
        &self,
        device: &Device,
        slot: usize,
        on_host: bool,
        give_up: &dyn Fn() -> bool,
    ) -> Result<bool, TransportError> {
        match self {
            ConsumerOrdering::Host => return Ok(true),
            ConsumerOrdering::Timeline(timeline) => {
                let target = timeline.block.ready_target(slot);
                timeline.targets[slot].store(target, Ordering::Relaxed);
                match on_host {
                    true => poll_on_host(
                        (GpuWork::ProducerWrites, slot),
                        Duration::from_micros(20),
                        || Ok(timeline.block.is_ready(slot, target)),
                        give_up,
                    )?,
                    false => timeline
                        .block
                        .wait_ready_on(slot, target, &device.stream())?,
                }
            }
            ConsumerOrdering::Event { ready, .. } if on_host => {
                wait_on_host(&ready[slot], (GpuWork::ProducerWrites, slot), give_up)?
            }
            ConsumerOrdering::Event { ready, .. } => device.stream().wait_event(&ready[slot])?,
        }
        Ok(on_host)
    }

    /// Tells the producer our reads of `slot` are queued: once they are
    /// done, it may write the slot again.
    pub(super) fn finish_read(&self, device: &Device, slot: usize) -> Result<(), TransportError> {
        let stream = device.stream();
        match self {
            ConsumerOrdering::Host => stream.synchronize()?,
            ConsumerOrdering::Timeline(timeline) => {
                let target = timeline.targets[slot].load(Ordering::Relaxed);
                // Downstream reads the frame on our stream or orders its
                // reads before it (wrapped slots): with the stream idle the
                // reads are done (or there were none, a consumer that drops
                // frames), and the release needs no GPU work. Our earlier
                // marks of the slot have run too, so no older value can
                // land after this one.
                if stream.is_idle()? {
                    timeline.block.mark_read_done(timeline.row, slot, target);
                } else {
                    timeline
                        .block
                        .mark_read(timeline.row, slot, target, &stream)?;
                }
            }
            ConsumerOrdering::Event { released, .. } => stream.record(&released[slot])?,
        }
        Ok(())
    }

    /// Before the slots go (their timeline block with them).
    pub(super) fn finish_before_drop(&self, device: &Device) {
        let ConsumerOrdering::Timeline(timeline) = self else {
            return;
        };
        // Our stream may still wait for the producer's marks (a producer
        // that died before its GPU wrote them): give them a moment, then
        // write them ourselves, so that it never waits on memory that is
        // gone; its own writes into the block run before it is unregistered.
        let targets: Vec<u64> = timeline
            .targets
            .iter()
            .map(|t| t.load(Ordering::Relaxed))
            .collect();
        let all_ready = || {
            targets
                .iter()
                .enumerate()
                .all(|(slot, &target)| timeline.block.is_ready(slot, target))
        };
        let deadline = Instant::now() + Duration::from_secs(1);
        while !all_ready() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        timeline.block.release_waits(&targets);
        let _ = device.stream().synchronize();
    }
}
