// CUDA transport: slots are plain device allocations exported with CUDA IPC.
// With `GpuSync::Event` the producer records an interprocess "ready" event per
// slot after the writes, consumers make their stream wait on it, and each
// consumer records a "released" event per slot that the producer's stream
// waits on before the slot is written again: the GPU orders everything and
// the host never waits. With `GpuSync::Host` both sides synchronise their
// stream instead.
//
// Slots may also be lent: device memory of another allocator in this process
// (GStreamer's CUDA buffer pool) that upstream writes outside our stream. The
// producer then waits on the host for the consumers' release events before it
// gives such a slot back to be written.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::os::fd::OwnedFd;

use super::timeline::Timeline;
use super::{
    ConsumerSlots, GpuSync, GpuWork, ProducerSlots, SharedObject, SlotMemory, SlotRequest,
    TransportError, WriterStream,
};
use crate::cuda::{
    Device, DeviceBuffer, DeviceRegion, Event, IPC_HANDLE_BYTES, ImportedMemory,
    SharedDeviceMemory, Stream,
};
use cudaipc_channel::layout::{RELEASE_DESCRIPTOR_BYTES, SLOT_DESCRIPTOR_BYTES};
use cudaipc_channel::socket::{self, Peers};
use cudaipc_channel::{ChannelInfo, ConsumerSetFingerprint, IpcMode, PoolInfo, Producer};

/// The pool descriptor of slots handed over a descriptor channel's socket.
const RECEIVED_POOL: &[u8] = b"@socket";
/// Starts the memory half of a slot descriptor whose allocation is handed
/// over the socket; its bytes (the allocation's size) follow, little endian.
const SHARED_MEMORY_MARK: &[u8; 8] = b"@fdslot\0";
/// A consumer's release descriptor under `GpuSync::Timeline`: its row of the
/// timeline block is its record's.
const TIMELINE_RELEASE_MARK: &[u8; 8] = b"@timelin";
/// How long the producer waits for a consumer's released reads of a slot on
/// the timeline before it stops counting that consumer's reads (its frames
/// may then be overwritten while it reads them; the producer goes on).
const TIMELINE_READS_TIMEOUT: Duration = Duration::from_secs(2);

fn split_descriptor(
    d: &[u8; SLOT_DESCRIPTOR_BYTES],
) -> ([u8; IPC_HANDLE_BYTES], [u8; IPC_HANDLE_BYTES]) {
    let mut memory = [0u8; IPC_HANDLE_BYTES];
    let mut event = [0u8; IPC_HANDLE_BYTES];
    memory.copy_from_slice(&d[..IPC_HANDLE_BYTES]);
    event.copy_from_slice(&d[IPC_HANDLE_BYTES..2 * IPC_HANDLE_BYTES]);
    (memory, event)
}

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

/// How long a producer waits on the host for consumers' GPU reads of a
/// slot, or a consumer for the producer's writes, before it reports them
/// stuck.
const CROSS_PROCESS_WAIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether waits for the other process's GPU work (its event) are made on
/// the host, before queueing what depends on it, rather than by the GPU.
///
/// Without MPS the two processes' contexts take turns on the GPU, and a
/// context whose stream waits for an event the other context has not
/// reached yet keeps the GPU, idle, until its time slice ends: measured on
/// an H100 in one run (bench rows 13b and 5), 3,256 and 12,290 FPS with
/// GPU-side waits, 10,701 and 13,343 waiting on the host. Only the waits
/// move: nobody synchronises its own stream (a stream synchronisation per
/// frame, `gpu-sync=host`, starves a consumer with GPU work of its own:
/// row 5 at 3,196). Under MPS the contexts run side by side and a GPU-side
/// wait costs nothing. `CUDAIPC_CROSS_PROCESS_WAIT=gpu` or `host` overrides,
/// to compare.
pub fn waits_on_host(device: &Device) -> bool {
    match std::env::var("CUDAIPC_CROSS_PROCESS_WAIT").as_deref() {
        Ok("gpu") => false,
        Ok("host") => true,
        _ => !device.mps_enabled(),
    }
}

/// Waits on the host until `event` (another process's) completes; gives
/// up when `give_up` says so (checked every 10 ms: its process is gone, and
/// a dead process's event may never complete, or the waiter stops), or
/// reports it stuck after [`CROSS_PROCESS_WAIT_TIMEOUT`].
fn wait_on_host(
    event: &Event,
    (work, slot): (GpuWork, usize),
    give_up: &dyn Fn() -> bool,
) -> Result<(), TransportError> {
    poll_on_host(
        (work, slot),
        Duration::from_micros(20),
        || Ok(event.is_complete()?),
        give_up,
    )
}

/// Polls `done` on the host until it holds. The other process's work
/// usually ends within microseconds of being reached: yields for the first
/// 200 us, then sleeps `nap` between polls. Every 10 ms runs `every_10ms`,
/// whose `true` ends the wait with an error; after
/// [`CROSS_PROCESS_WAIT_TIMEOUT`] reports the `work` on `slot` stuck.
fn poll_on_host(
    (work, slot): (GpuWork, usize),
    nap: Duration,
    done: impl FnMut() -> Result<bool, TransportError>,
    every_10ms: impl FnMut() -> bool,
) -> Result<(), TransportError> {
    match poll_for(nap, CROSS_PROCESS_WAIT_TIMEOUT, done, every_10ms)? {
        Polled::Done => Ok(()),
        Polled::TimedOut => Err(TransportError::WaitTimedOut {
            work,
            slot,
            after: CROSS_PROCESS_WAIT_TIMEOUT,
        }),
        Polled::GaveUp => Err(TransportError::WaitAbandoned { work, slot }),
    }
}

/// How a [`poll_for`] ended.
enum Polled {
    Done,
    TimedOut,
    GaveUp,
}

/// The polling loop of [`poll_on_host`], ending after `timeout` or when
/// `every_10ms` says so, for the caller to judge.
fn poll_for(
    nap: Duration,
    timeout: Duration,
    mut done: impl FnMut() -> Result<bool, TransportError>,
    mut every_10ms: impl FnMut() -> bool,
) -> Result<Polled, TransportError> {
    let start = Instant::now();
    let mut next_check = Duration::from_millis(10);
    while !done()? {
        let waited = start.elapsed();
        if waited >= timeout {
            return Ok(Polled::TimedOut);
        }
        if waited >= next_check {
            if every_10ms() {
                return Ok(Polled::GaveUp);
            }
            next_check = waited + Duration::from_millis(10);
        }
        if waited < Duration::from_micros(200) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(nap);
        }
    }
    Ok(Polled::Done)
}

/// Stands for lent memory in the regions of lent slots: the owner that
/// `CudaProducerSlots::lend`'s caller keeps alive.
struct LentMemory;

pub struct CudaProducerSlots {
    device: Arc<Device>,
    /// Each slot's memory: allocated here, or lent (see `lend`).
    regions: Vec<DeviceRegion>,
    /// `IpcMode::Fd`: the slots' allocations, exported to consumers as
    /// descriptors.
    shared: Vec<Arc<SharedDeviceMemory>>,
    /// `GpuSync::Timeline`: the values that order writes and reads.
    timeline: Option<Timeline>,
    /// A legacy channel's timeline block's name (its pool descriptor).
    timeline_name: Option<String>,
    lent: bool,
    /// `GpuSync::Event`: each slot's "written" event.
    ready: Vec<Event>,
    descriptors: Vec<[u8; SLOT_DESCRIPTOR_BYTES]>,
    size: usize,
    sync: GpuSync,
    /// See [`waits_on_host`].
    host_waits: bool,
    consumers: Mutex<ConsumerEventCache>,
}

impl CudaProducerSlots {
    pub fn create(device: &Arc<Device>, request: &SlotRequest) -> Result<Self, TransportError> {
        if request.ipc_mode == IpcMode::Fd {
            return Self::create_shared(device, request);
        }
        let regions = (0..request.count)
            .map(|_| DeviceBuffer::new(device, request.size).map(DeviceBuffer::into_region))
            .collect::<Result<Vec<_>, _>>()?;
        let mut slots = Self::with_memory(
            device,
            regions,
            request.size,
            request.gpu_sync,
            false,
            false,
        )?;
        slots.add_named_timeline(request)?;
        Ok(slots)
    }

    /// A legacy channel's timeline block (`GpuSync::Timeline`), named in
    /// the pool descriptor.
    fn add_named_timeline(&mut self, request: &SlotRequest) -> Result<(), TransportError> {
        if request.gpu_sync == GpuSync::Timeline {
            let (timeline, name) = Timeline::create_named(&self.device, request)?;
            self.timeline = Some(timeline);
            self.timeline_name = Some(name);
        }
        Ok(())
    }

    /// Slots of a descriptor channel: allocations exported as file
    /// descriptors, and with `GpuSync::Timeline` the timeline block.
    fn create_shared(device: &Arc<Device>, request: &SlotRequest) -> Result<Self, TransportError> {
        let shared = (0..request.count)
            .map(|_| SharedDeviceMemory::new(device, request.size).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let regions = shared.iter().map(|m| m.region(request.size)).collect();
        let mut slots =
            Self::with_memory(device, regions, request.size, request.gpu_sync, false, true)?;
        for (descriptor, memory) in slots.descriptors.iter_mut().zip(&shared) {
            descriptor[..IPC_HANDLE_BYTES].fill(0);
            descriptor[..8].copy_from_slice(SHARED_MEMORY_MARK);
            descriptor[8..16].copy_from_slice(&(memory.size() as u64).to_le_bytes());
        }
        slots.shared = shared;
        if request.gpu_sync == GpuSync::Timeline {
            slots.timeline = Some(Timeline::create(
                device,
                &socket::socket_path(&request.channel),
            )?);
        }
        Ok(slots)
    }

    /// Slots made of device memory another allocator of this process owns
    /// (each pointer starts an exportable allocation of at least `size`
    /// bytes), after `placeholders` slots that are never written (see
    /// `LentSlots`). Writes into it happen outside this plugin's stream.
    ///
    /// # Safety
    /// Each lent allocation must stay allocated, for at least `size` bytes,
    /// as long as the returned slots or any `SlotMemory` they hand out
    /// exist.
    pub unsafe fn lend(
        device: &Arc<Device>,
        placeholders: usize,
        lent: Vec<u64>,
        size: usize,
        request: &SlotRequest,
    ) -> Result<Self, TransportError> {
        let sync = request.gpu_sync;
        // Consumers open every slot: a placeholder is a real, tiny
        // allocation.
        let mut regions = (0..placeholders)
            .map(|_| DeviceBuffer::new(device, 1).map(DeviceBuffer::into_region))
            .collect::<Result<Vec<_>, _>>()?;
        let owner: Arc<dyn std::any::Any + Send + Sync> = Arc::new(LentMemory);
        regions.extend(lent.into_iter().map(|ptr| {
            // SAFETY: the caller keeps `size` bytes at `ptr` allocated as
            // long as the slots and their regions exist (this function's
            // contract).
            unsafe { DeviceRegion::from_raw_parts(device, ptr, size, owner.clone()) }
        }));
        let mut slots = Self::with_memory(device, regions, size, sync, true, false)?;
        slots.add_named_timeline(request)?;
        Ok(slots)
    }

    fn with_memory(
        device: &Arc<Device>,
        regions: Vec<DeviceRegion>,
        size: usize,
        sync: GpuSync,
        lent: bool,
        shared: bool,
    ) -> Result<Self, TransportError> {
        let mut ready = Vec::with_capacity(regions.len());
        let mut descriptors = Vec::with_capacity(regions.len());
        for region in &regions {
            let mut descriptor = [0u8; SLOT_DESCRIPTOR_BYTES];
            // Allocations of `create_shared` have no IPC handle: it writes
            // their descriptors itself.
            if !shared {
                descriptor[..IPC_HANDLE_BYTES].copy_from_slice(&region.ipc_handle()?);
            }
            if sync == GpuSync::Event {
                let event = Event::new(device, true)?;
                descriptor[IPC_HANDLE_BYTES..2 * IPC_HANDLE_BYTES]
                    .copy_from_slice(&event.ipc_handle()?);
                ready.push(event);
            }
            descriptors.push(descriptor);
        }
        Ok(Self {
            device: device.clone(),
            shared: Vec::new(),
            timeline: None,
            timeline_name: None,
            lent,
            regions,
            ready,
            descriptors,
            size,
            sync,
            host_waits: waits_on_host(device),
            consumers: Mutex::new(ConsumerEventCache::default()),
        })
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
    /// frame are done: for a lent slot, whose next writer does not wait on
    /// our stream, and without MPS (see [`waits_on_host`]). Consumers that
    /// die meanwhile stop counting.
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
        self.wait_written(slot)?;
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
                    GpuSync::Event => Event::open_ipc(&self.device, &handle).ok(),
                    _ => None,
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
}

impl ProducerSlots for CudaProducerSlots {
    fn kind(&self) -> super::TransportKind {
        super::TransportKind::Cuda
    }

    fn slot_count(&self) -> usize {
        self.regions.len()
    }

    fn slot_size(&self) -> usize {
        self.size
    }

    fn slot_descriptors(&self) -> Vec<[u8; SLOT_DESCRIPTOR_BYTES]> {
        self.descriptors.clone()
    }

    fn pool_descriptor(&self) -> Vec<u8> {
        match (&self.timeline_name, self.shared.is_empty()) {
            (_, false) => RECEIVED_POOL.to_vec(),
            (Some(name), true) => name.as_bytes().to_vec(),
            (None, true) => Vec::new(),
        }
    }

    fn shareables(&self) -> Result<Vec<OwnedFd>, TransportError> {
        let mut fds = Vec::with_capacity(self.shared.len() + 1);
        if let Some(timeline) = &self.timeline {
            fds.push(
                timeline
                    .export()
                    .map_err(|e| TransportError::io("cannot share the timeline block", e))?,
            );
        }
        for memory in &self.shared {
            fds.push(memory.export()?);
        }
        Ok(fds)
    }

    fn slot_memory(&self, slot: usize) -> SlotMemory {
        SlotMemory::Device(self.regions[slot].clone())
    }

    fn before_write(&self, slot: usize, producer: &Producer) -> Result<(), TransportError> {
        if self.sync == GpuSync::Host {
            // Consumers synchronised before releasing: nothing is in flight.
            return Ok(());
        }
        if let Some(timeline) = &self.timeline {
            return self.wait_reads_on_timeline(timeline, slot, producer);
        }
        if self.lent || self.host_waits {
            return self.wait_reads_on_host(slot, producer);
        }
        self.wait_for_reads_on(slot, producer, &self.device.stream())
    }

    fn reads_done(&self, slot: usize, producer: &Producer) -> Result<bool, TransportError> {
        if self.sync == GpuSync::Host {
            // Consumers synchronised before releasing.
            return Ok(true);
        }
        if !self.written(slot)? {
            return Ok(false);
        }
        let mut cache = self.consumers.lock().unwrap();
        self.refresh_consumers(producer, &mut cache);
        if let Some(timeline) = &self.timeline {
            return Ok(cache
                .consumers
                .iter()
                .all(|(&row, c)| c.ignored || timeline.reads_done(row, slot)));
        }
        for consumer in cache.consumers.values() {
            if let Some((_, Some(event))) = consumer.events.get(slot)
                && !event.is_complete()?
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn order_writer_after_reads(
        &self,
        slot: usize,
        producer: &Producer,
        writer: WriterStream,
    ) -> Result<bool, TransportError> {
        if self.sync == GpuSync::Host {
            return Ok(true);
        }
        if self.host_waits || self.timeline.is_some() {
            return Ok(false);
        }
        // SAFETY: `WriterStream::new`'s contract: a live stream of this
        // device's primary context.
        let stream = unsafe { self.device.foreign_stream(writer.raw()) };
        self.wait_for_reads_on(slot, producer, &stream)?;
        Ok(true)
    }

    fn after_write(&self, slot: usize) -> Result<(), TransportError> {
        self.mark_written(slot, &self.device.stream())
    }
}

impl CudaProducerSlots {
    /// Whether the frame last published in `slot` is written (its ready
    /// mark ran on the GPU).
    fn written(&self, slot: usize) -> Result<bool, TransportError> {
        Ok(match (self.sync, &self.timeline) {
            (GpuSync::Host, _) => true,
            (GpuSync::Timeline, Some(timeline)) => timeline.is_written(slot),
            (_, _) => self.ready[slot].is_complete()?,
        })
    }

    /// Waits on the host until the frame last published in `slot` is
    /// written, before the slot is written again (or its lent buffer goes
    /// back upstream): that bounds how far our queued GPU work runs ahead of
    /// the GPU to the slots. Every-frame consumers bound it anyway (they
    /// release a frame after reading it); without them the host would queue
    /// as much as the driver takes (tens of milliseconds of 4K frames), and
    /// a consumer of the latest frame would wait that long for each one.
    fn wait_written(&self, slot: usize) -> Result<(), TransportError> {
        poll_on_host(
            (GpuWork::OwnWrites, slot),
            Duration::from_micros(20),
            || self.written(slot),
            || false,
        )
    }

    /// Marks the frame in `slot` written once the work queued so far on
    /// `stream` is done.
    fn mark_written(&self, slot: usize, stream: &Stream) -> Result<(), TransportError> {
        match (self.sync, &self.timeline) {
            (GpuSync::Timeline, Some(timeline)) => timeline.mark_written(slot, stream)?,
            (GpuSync::Host, _) => stream.synchronize()?,
            (_, _) => stream.record(&self.ready[slot])?,
        }
        Ok(())
    }
}

impl Drop for CudaProducerSlots {
    fn drop(&mut self) {
        // The stream's pending writes into the timeline block must run
        // before the block is unregistered.
        if self.timeline.is_some() {
            let _ = self.device.stream().synchronize();
        }
    }
}

pub struct CudaConsumerSlots {
    device: Arc<Device>,
    /// Each slot's mapping, bounded by what the driver mapped.
    memory: Vec<DeviceRegion>,
    /// `GpuSync::Event`: the producer's "written" and our "read" events.
    ready: Vec<Event>,
    released: Vec<Event>,
    /// `GpuSync::Timeline`: the block, our row in it, and per slot the value
    /// its frame's reads waited for.
    timeline: Option<ConsumerTimeline>,
    release_descriptors: Vec<[u8; RELEASE_DESCRIPTOR_BYTES]>,
    size: usize,
    sync: GpuSync,
    /// See [`waits_on_host`].
    host_waits: bool,
    /// Whether every slot is mapped for reading only.
    read_only: bool,
}

struct ConsumerTimeline {
    block: Timeline,
    row: usize,
    targets: Vec<AtomicU64>,
}

impl CudaConsumerSlots {
    pub fn open(
        device: &Arc<Device>,
        channel: &str,
        info: &ChannelInfo,
        pool: &PoolInfo,
        row: usize,
        sync: GpuSync,
    ) -> Result<Self, TransportError> {
        let size = pool_slot_size(pool)?;
        let timeline = match sync {
            GpuSync::Timeline => {
                let name_len = pool
                    .pool_descriptor
                    .iter()
                    .position(|&b| b == 0)
                    .unwrap_or(pool.pool_descriptor.len());
                let name =
                    std::str::from_utf8(&pool.pool_descriptor[..name_len]).map_err(|_| {
                        TransportError::NameNotUtf8 {
                            object: SharedObject::TimelineBlock,
                        }
                    })?;
                let block = Timeline::open_named(device, channel, name, info.producer_uid)?;
                block.reset_row(row);
                Some(ConsumerTimeline {
                    block,
                    row,
                    targets: (0..pool.slot_descriptors.len())
                        .map(|_| AtomicU64::new(0))
                        .collect(),
                })
            }
            _ => None,
        };
        let peer = device.uuid() != info.device_uuid;
        let mut memory = Vec::new();
        for (i, d) in pool.slot_descriptors.iter().enumerate() {
            let (mem_handle, _) = split_descriptor(d);
            let imported = ImportedMemory::open(device, &mem_handle).map_err(|source| {
                TransportError::ImportMemory {
                    slot: i,
                    shared: false,
                    peer,
                    source,
                }
            })?;
            // A producer announcing more than it exported gets regions only
            // as long as the mapping: frames beyond it are refused, not read.
            memory.push(imported.into_region(size));
        }
        Self::with_memory(device, memory, pool, size, sync, timeline)
    }

    /// Receives the slots of a descriptor channel from its producer, which
    /// must be one of `producers`: one allocation per slot (mapped read-only
    /// where the driver allows), and with `GpuSync::Timeline` first the
    /// timeline block, whose row `row` (our consumer record's) is ours.
    pub fn receive(
        device: &Arc<Device>,
        channel: &str,
        info: &ChannelInfo,
        pool: &PoolInfo,
        producers: &Peers,
        row: usize,
        sync: GpuSync,
    ) -> Result<Self, TransportError> {
        let descriptor = pool
            .pool_descriptor
            .split(|&b| b == 0)
            .next()
            .unwrap_or(&[]);
        if descriptor != RECEIVED_POOL {
            return Err(TransportError::PoolNotHandedOver);
        }
        let size = pool_slot_size(pool)?;
        let mut fds = super::request_pool(channel, pool.generation, producers)?.into_iter();
        let expected = pool.slot_descriptors.len() + usize::from(sync == GpuSync::Timeline);
        if fds.len() != expected {
            return Err(TransportError::DescriptorCount {
                received: fds.len(),
                expected,
            });
        }
        let timeline = match sync {
            GpuSync::Timeline => {
                let fd = fds.next().ok_or(TransportError::DescriptorCount {
                    received: 0,
                    expected,
                })?;
                let block = Timeline::receive(device, fd)?;
                block.reset_row(row);
                Some(ConsumerTimeline {
                    block,
                    row,
                    targets: (0..pool.slot_descriptors.len())
                        .map(|_| AtomicU64::new(0))
                        .collect(),
                })
            }
            _ => None,
        };
        let peer = device.uuid() != info.device_uuid;
        let mut read_only = true;
        let mut memory = Vec::with_capacity(pool.slot_descriptors.len());
        for ((i, d), fd) in pool.slot_descriptors.iter().enumerate().zip(fds) {
            let (mark, bytes) = d.split_at(8);
            let shared_size = bytes
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .unwrap_or(0);
            if mark != SHARED_MEMORY_MARK || shared_size < size as u64 {
                return Err(TransportError::SlotDescriptor { slot: i, size });
            }
            let shared_size =
                usize::try_from(shared_size).map_err(|_| TransportError::Overflow {
                    what: "the slot size",
                })?;
            let imported =
                SharedDeviceMemory::import(device, &fd, shared_size).map_err(|source| {
                    TransportError::ImportMemory {
                        slot: i,
                        shared: true,
                        peer,
                        source,
                    }
                })?;
            read_only &= imported.is_read_only();
            memory.push(Arc::new(imported).region(size));
        }
        let mut slots = Self::with_memory(device, memory, pool, size, sync, timeline)?;
        slots.read_only = read_only;
        Ok(slots)
    }

    fn with_memory(
        device: &Arc<Device>,
        memory: Vec<DeviceRegion>,
        pool: &PoolInfo,
        size: usize,
        sync: GpuSync,
        timeline: Option<ConsumerTimeline>,
    ) -> Result<Self, TransportError> {
        let mut ready = Vec::new();
        let mut released = Vec::new();
        let mut release_descriptors = Vec::new();
        for (i, d) in pool.slot_descriptors.iter().enumerate() {
            match sync {
                // Stream synchronisation on both sides: nothing to share.
                GpuSync::Host => {}
                GpuSync::Timeline => {
                    let mut descriptor = [0u8; RELEASE_DESCRIPTOR_BYTES];
                    descriptor[..8].copy_from_slice(TIMELINE_RELEASE_MARK);
                    release_descriptors.push(descriptor);
                }
                GpuSync::Event => {
                    let (_, event_handle) = split_descriptor(d);
                    ready.push(
                        Event::open_ipc(device, &event_handle)
                            .map_err(|source| TransportError::OpenEvent { slot: i, source })?,
                    );
                    let release = Event::new(device, true)?;
                    let mut descriptor = [0u8; RELEASE_DESCRIPTOR_BYTES];
                    descriptor[..IPC_HANDLE_BYTES].copy_from_slice(&release.ipc_handle()?);
                    released.push(release);
                    release_descriptors.push(descriptor);
                }
            }
        }
        Ok(Self {
            device: device.clone(),
            memory,
            ready,
            released,
            timeline,
            release_descriptors,
            size,
            sync,
            host_waits: waits_on_host(device),
            read_only: false,
        })
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }
}

fn pool_slot_size(pool: &PoolInfo) -> Result<usize, TransportError> {
    usize::try_from(pool.slot_size).map_err(|_| TransportError::Overflow {
        what: "the slot size",
    })
}

impl ConsumerSlots for CudaConsumerSlots {
    fn kind(&self) -> super::TransportKind {
        super::TransportKind::Cuda
    }

    fn slot_count(&self) -> usize {
        self.memory.len()
    }

    fn slot_size(&self) -> usize {
        self.size
    }

    fn slot_memory(&self, slot: usize) -> SlotMemory {
        SlotMemory::Device(self.memory[slot].clone())
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn before_read(
        &self,
        slot: usize,
        on_host: bool,
        give_up: &dyn Fn() -> bool,
    ) -> Result<bool, TransportError> {
        let on_host = on_host || self.host_waits;
        match (self.sync, &self.timeline) {
            (GpuSync::Host, _) => {}
            (GpuSync::Timeline, Some(timeline)) => {
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
                        .wait_ready_on(slot, target, &self.device.stream())?,
                }
            }
            (_, _) if on_host => {
                wait_on_host(&self.ready[slot], (GpuWork::ProducerWrites, slot), give_up)?
            }
            (_, _) => self.device.stream().wait_event(&self.ready[slot])?,
        }
        Ok(self.sync == GpuSync::Host || on_host)
    }

    fn finish_read(&self, slot: usize) -> Result<(), TransportError> {
        let stream = self.device.stream();
        match (self.sync, &self.timeline) {
            (GpuSync::Host, _) => stream.synchronize()?,
            (GpuSync::Timeline, Some(timeline)) => {
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
            (_, _) => stream.record(&self.released[slot])?,
        }
        Ok(())
    }

    fn release_descriptors(&self) -> Vec<[u8; RELEASE_DESCRIPTOR_BYTES]> {
        self.release_descriptors.clone()
    }
}

impl Drop for CudaConsumerSlots {
    fn drop(&mut self) {
        let Some(timeline) = &self.timeline else {
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
        let _ = self.device.stream().synchronize();
    }
}
