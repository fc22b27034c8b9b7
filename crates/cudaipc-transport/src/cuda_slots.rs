// CUDA transport: device slots, composed of where their memory comes from
// (`MemoryKind`, `memory`) and how GPU work on them is ordered across
// processes (`GpuSync`, `ordering`), chosen once per slot set from the
// table `CUDA_COMPOSITIONS`.
//
// With `GpuSync::Event` the producer records an interprocess "ready" event
// per slot after the writes, consumers make their stream wait on it, and
// each consumer records a "released" event per slot that the producer's
// stream waits on before the slot is written again: the GPU orders
// everything and the host never waits. With `GpuSync::Timeline` values the
// GPUs write into a shared block take the events' place (see `timeline`).
// With `GpuSync::Host` both sides synchronise their stream instead.
//
// Lent memory (`MemoryKind::Lent`) is written by upstream outside our
// stream: the producer then waits on the host for the consumers' reads
// before it gives such a slot back to be written.

mod memory;
mod ordering;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudaipc_channel::platform::Shareable;

use super::{
    ConsumerSlots, GpuSync, GpuWork, ProducerSlots, SlotMemory, SlotRequest, TransportError,
    WriterStream,
};
use crate::cuda::{Device, DeviceRegion, Event};
use crate::slots::RECEIVED_POOL;
use cudaipc_channel::layout::{RELEASE_DESCRIPTOR_BYTES, SLOT_DESCRIPTOR_BYTES};
use cudaipc_channel::{ChannelInfo, IpcMode, PoolInfo, Producer};
pub use memory::MemoryKind;
use memory::{PoolAccess, ProducerMemory};
use ordering::{ConsumerOrdering, ProducerOrdering, Writer};

/// One way to build the cuda transport's slots: where their memory comes
/// from, and how GPU work on them is ordered across processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaComposition {
    pub memory: MemoryKind,
    pub ordering: GpuSync,
}

/// Every composition the cuda transport builds: the slots' constructors
/// refuse any other, and the transport's contract suite runs each (in
/// consumer processes). A new memory kind or ordering gets its rows here,
/// once; the compiler points at the matches that must learn it.
pub const CUDA_COMPOSITIONS: [CudaComposition; 9] = {
    use GpuSync::{Event, Host, Timeline};
    use MemoryKind::{Lent, Own, Shared};
    const fn row(memory: MemoryKind, ordering: GpuSync) -> CudaComposition {
        CudaComposition { memory, ordering }
    }
    [
        row(Own, Event),
        row(Own, Host),
        row(Own, Timeline),
        row(Shared, Event),
        row(Shared, Host),
        row(Shared, Timeline),
        row(Lent, Event),
        row(Lent, Host),
        row(Lent, Timeline),
    ]
};

impl CudaComposition {
    /// `memory` ordered as `request` asks, if the table has that row and
    /// `request`'s channel hands such memory out (lent memory has only
    /// legacy IPC handles: no descriptor channel).
    pub fn for_request(memory: MemoryKind, request: &SlotRequest) -> Result<Self, TransportError> {
        let composition = CudaComposition {
            memory,
            ordering: request.gpu_sync,
        };
        if memory.ipc_mode() == request.ipc_mode && CUDA_COMPOSITIONS.contains(&composition) {
            Ok(composition)
        } else {
            Err(TransportError::NoComposition {
                composition,
                ipc_mode: request.ipc_mode,
            })
        }
    }

    /// Whether a consumer can read slots of a channel of `ipc_mode`
    /// ordered by `ordering`: own and lent memory look the same to it, so
    /// any row of that kind of channel will do.
    fn check_readable(ipc_mode: IpcMode, ordering: GpuSync) -> Result<(), TransportError> {
        if CUDA_COMPOSITIONS
            .iter()
            .any(|c| c.memory.ipc_mode() == ipc_mode && c.ordering == ordering)
        {
            return Ok(());
        }
        let memory = match ipc_mode {
            IpcMode::Legacy => MemoryKind::Own,
            IpcMode::Fd => MemoryKind::Shared,
        };
        Err(TransportError::NoComposition {
            composition: CudaComposition { memory, ordering },
            ipc_mode,
        })
    }
}

impl fmt::Display for CudaComposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ordering = match self.ordering {
            GpuSync::Event => "events",
            GpuSync::Host => "host synchronisation",
            GpuSync::Timeline => "the timeline",
        };
        write!(f, "{} memory ordered by {ordering}", self.memory)
    }
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

pub struct CudaProducerSlots {
    device: Arc<Device>,
    memory: ProducerMemory,
    ordering: ProducerOrdering,
    /// Where the slots are written: lent memory by upstream, outside our
    /// stream.
    writer: Writer,
    descriptors: Vec<[u8; SLOT_DESCRIPTOR_BYTES]>,
    size: usize,
}

impl CudaProducerSlots {
    /// Slots of the producer's own allocations, of the kind `request`'s
    /// channel hands out (`MemoryKind::Own` on a legacy channel,
    /// `MemoryKind::Shared` on a descriptor channel).
    pub fn create(device: &Arc<Device>, request: &SlotRequest) -> Result<Self, TransportError> {
        let memory =
            ProducerMemory::allocate(device, request.ipc_mode, request.count, request.size)?;
        Self::compose(device, memory, request.size, request)
    }

    /// Slots made of device memory another allocator of this process owns
    /// (each pointer starts an exportable allocation of at least `size`
    /// bytes), after `placeholders` slots that are never written (see
    /// `LentSlots`). Writes into it happen outside this plugin's stream.
    /// Only for a legacy channel (`MemoryKind::Lent`): on a descriptor
    /// channel it fails with [`TransportError::NoComposition`].
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
        CudaComposition::for_request(MemoryKind::Lent, request)?;
        // SAFETY: this function's contract.
        let memory = unsafe { ProducerMemory::lend(device, placeholders, lent, size) }?;
        Self::compose(device, memory, size, request)
    }

    /// The one way slots are put together: `memory` ordered as `request`
    /// asks, if [`CUDA_COMPOSITIONS`] has that row.
    fn compose(
        device: &Arc<Device>,
        memory: ProducerMemory,
        size: usize,
        request: &SlotRequest,
    ) -> Result<Self, TransportError> {
        let composition = CudaComposition::for_request(memory.kind(), request)?;
        let count = memory.regions().len();
        let ordering = ProducerOrdering::create(device, composition.ordering, request, count)?;
        let mut descriptors = memory.descriptors()?;
        ordering.describe(&mut descriptors)?;
        let writer = match composition.memory {
            MemoryKind::Lent => Writer::Elsewhere,
            MemoryKind::Own | MemoryKind::Shared => Writer::OurStream,
        };
        Ok(Self {
            device: device.clone(),
            memory,
            ordering,
            writer,
            descriptors,
            size,
        })
    }

    /// What these slots are made of.
    pub fn composition(&self) -> CudaComposition {
        CudaComposition {
            memory: self.memory.kind(),
            ordering: self.ordering.gpu_sync(),
        }
    }
}

impl ProducerSlots for CudaProducerSlots {
    fn kind(&self) -> super::TransportKind {
        super::TransportKind::Cuda
    }

    fn slot_count(&self) -> usize {
        self.memory.regions().len()
    }

    fn slot_size(&self) -> usize {
        self.size
    }

    fn slot_descriptors(&self) -> Vec<[u8; SLOT_DESCRIPTOR_BYTES]> {
        self.descriptors.clone()
    }

    fn pool_descriptor(&self) -> Vec<u8> {
        match (&self.memory, self.ordering.timeline()) {
            (ProducerMemory::Shared { .. }, _) => RECEIVED_POOL.to_vec(),
            // A legacy channel's timeline block is a data file named here.
            (_, Some(timeline)) => timeline
                .name()
                .map(|name| name.as_bytes().to_vec())
                .unwrap_or_default(),
            (_, None) => Vec::new(),
        }
    }

    fn shareables(&self) -> Result<Vec<Shareable>, TransportError> {
        // A legacy channel names its memory and timeline block in the
        // control block.
        let ProducerMemory::Shared { allocations, .. } = &self.memory else {
            return Ok(Vec::new());
        };
        let mut fds = Vec::with_capacity(allocations.len() + 1);
        if let Some(timeline) = self.ordering.timeline() {
            fds.push(
                timeline
                    .export()
                    .map_err(|e| TransportError::io("cannot share the timeline block", e))?,
            );
        }
        for memory in allocations {
            fds.push(memory.export()?);
        }
        Ok(fds)
    }

    fn slot_memory(&self, slot: usize) -> SlotMemory {
        SlotMemory::Device(self.memory.regions()[slot].clone())
    }

    fn before_write(&self, slot: usize, producer: &Producer) -> Result<(), TransportError> {
        self.ordering.before_write(slot, producer, self.writer)
    }

    fn reads_done(&self, slot: usize, producer: &Producer) -> Result<bool, TransportError> {
        self.ordering.reads_done(slot, producer)
    }

    fn order_writer_after_reads(
        &self,
        slot: usize,
        producer: &Producer,
        writer: WriterStream,
    ) -> Result<bool, TransportError> {
        self.ordering
            .order_writer_after_reads(slot, producer, writer)
    }

    fn after_write(&self, slot: usize) -> Result<(), TransportError> {
        self.ordering.mark_written(slot, &self.device.stream())
    }
}

impl Drop for CudaProducerSlots {
    fn drop(&mut self) {
        self.ordering.finish_before_drop();
    }
}

pub struct CudaConsumerSlots {
    device: Arc<Device>,
    /// Each slot's mapping, bounded by what the driver mapped.
    memory: Vec<DeviceRegion>,
    /// Whether every slot is mapped for reading only.
    read_only: bool,
    ordering: ConsumerOrdering,
    size: usize,
    /// See [`waits_on_host`].
    host_waits: bool,
}

impl CudaConsumerSlots {
    /// Opens the slots of a channel's current pool: the memory the channel
    /// names (legacy) or its producer, one of `info`'s, hands over
    /// (descriptor channel), ordered as `info` announces. `row` (our
    /// consumer record's) is our row of a timeline block.
    pub fn open(
        device: &Arc<Device>,
        channel: &str,
        info: &ChannelInfo,
        pool: &PoolInfo,
        row: usize,
    ) -> Result<Self, TransportError> {
        let sync = GpuSync::from_wire(info.gpu_sync)
            .ok_or(TransportError::UnknownGpuSync(info.gpu_sync))?;
        let ipc_mode = match info.descriptor_channel {
            Some(_) => IpcMode::Fd,
            None => IpcMode::Legacy,
        };
        CudaComposition::check_readable(ipc_mode, sync)?;
        let size = pool_slot_size(pool)?;
        // A descriptor channel hands the timeline block over first.
        let first = usize::from(sync == GpuSync::Timeline);
        let mut access = PoolAccess::find(channel, info, pool, first)?;
        let ordering = ConsumerOrdering::open(device, sync, &mut access, pool, row)?;
        let memory = access.memory(device, info, pool, size)?;
        Ok(Self {
            device: device.clone(),
            memory: memory.regions,
            read_only: memory.read_only,
            ordering,
            size,
            host_waits: waits_on_host(device),
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
        self.ordering
            .before_read(&self.device, slot, on_host, give_up)
    }

    fn finish_read(&self, slot: usize) -> Result<(), TransportError> {
        self.ordering.finish_read(&self.device, slot)
    }

    fn release_descriptors(&self) -> Vec<[u8; RELEASE_DESCRIPTOR_BYTES]> {
        self.ordering.release_descriptors()
    }
}

impl Drop for CudaConsumerSlots {
    fn drop(&mut self) {
        self.ordering.finish_before_drop(&self.device);
    }
}
