// How GPU work on the cuda transport's slots is ordered across processes,
// on each side: the ordering half of the composition (see
// `CudaComposition`). Each variant owns its state; the per-frame steps
// live with the slots (`CudaProducerSlots`, `CudaConsumerSlots`), which
// match on these.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use super::super::timeline::Timeline;
use super::super::{GpuSync, SlotRequest, TransportError};
use super::CudaComposition;
use super::memory::PoolAccess;
use crate::cuda::{Device, Event, IPC_HANDLE_BYTES};
use cudaipc_channel::layout::{RELEASE_DESCRIPTOR_BYTES, SLOT_DESCRIPTOR_BYTES};
use cudaipc_channel::socket;
use cudaipc_channel::{IpcMode, PoolInfo};

/// A consumer's release descriptor under `GpuSync::Timeline`: its row of the
/// timeline block is its record's.
const TIMELINE_RELEASE_MARK: &[u8; 8] = b"@timelin";

/// The producer's side of the ordering.
pub(super) enum ProducerOrdering {
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
    /// `composition`'s ordering of `count` slots, shared the way the
    /// channel its memory is handed out over shares.
    pub(super) fn create(
        device: &Arc<Device>,
        composition: CudaComposition,
        request: &SlotRequest,
        count: usize,
    ) -> Result<Self, TransportError> {
        Ok(match composition.ordering {
            GpuSync::Host => ProducerOrdering::Host,
            GpuSync::Event => ProducerOrdering::Event {
                ready: (0..count)
                    .map(|_| Event::new(device, true))
                    .collect::<Result<_, _>>()?,
            },
            GpuSync::Timeline => ProducerOrdering::Timeline(match composition.memory.ipc_mode() {
                IpcMode::Legacy => Timeline::create_named(device, request)?,
                IpcMode::Fd => Timeline::create(device, &socket::socket_path(&request.channel))?,
            }),
        })
    }

    /// Writes the ordering's half of the slot descriptors: each slot's
    /// event's IPC handle.
    pub(super) fn describe(
        &self,
        descriptors: &mut [[u8; SLOT_DESCRIPTOR_BYTES]],
    ) -> Result<(), TransportError> {
        if let ProducerOrdering::Event { ready } = self {
            for (descriptor, event) in descriptors.iter_mut().zip(ready) {
                descriptor[IPC_HANDLE_BYTES..2 * IPC_HANDLE_BYTES]
                    .copy_from_slice(&event.ipc_handle()?);
            }
        }
        Ok(())
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
}
