// SPDX-License-Identifier: MPL-2.0

//! The slots behind each end of a channel: where a slot's bytes are
//! ([`SlotMemory`]), what a producer's and a consumer's slots do
//! ([`ProducerSlots`], [`ConsumerSlots`]), and the functions that create or
//! open them for a transport.

use std::sync::Arc;

use crate::cuda::{Device, DeviceRegion};
use crate::{
    CudaConsumerSlots, CudaProducerSlots, GpuSync, HostConsumerSlots, HostProducerSlots,
    HostRegion, TransportError, TransportKind,
};
use cudaipc_channel::layout::{RELEASE_DESCRIPTOR_BYTES, SLOT_DESCRIPTOR_BYTES};
use cudaipc_channel::{ChannelInfo, PoolInfo, Producer};

/// Where a slot's bytes are. Each variant keeps its memory alive.
#[derive(Debug, Clone)]
pub enum SlotMemory {
    /// Shared host memory, written only on the producer side (the
    /// consumer's mapping is read-only).
    Host(HostRegion),
    /// Device memory, kept mapped (or allocated) while the region lives;
    /// `ptr()`, `len()` and `device()` say where.
    Device(DeviceRegion),
}

/// The producer's slots.
/// A stream of the slots' device's primary context on which a lent slot's
/// owner writes into it.
#[derive(Debug, Clone, Copy)]
pub struct WriterStream(cudarc::driver::sys::CUstream);

impl WriterStream {
    /// # Safety
    /// `raw` is a stream of the primary context of the device of the slots
    /// it is given to, and stays alive while this value is in use.
    pub unsafe fn new(raw: cudarc::driver::sys::CUstream) -> Self {
        Self(raw)
    }

    pub(crate) fn raw(self) -> cudarc::driver::sys::CUstream {
        self.0
    }
}

pub trait ProducerSlots: Send + Sync {
    fn kind(&self) -> TransportKind;
    fn slot_count(&self) -> usize;
    fn slot_size(&self) -> usize;
    fn slot_descriptors(&self) -> Vec<[u8; SLOT_DESCRIPTOR_BYTES]>;
    fn pool_descriptor(&self) -> Vec<u8>;
    fn slot_memory(&self, slot: usize) -> SlotMemory;
    /// Orders every later write into `slot` after the consumers' use of its
    /// previous frame. Called once a slot is reserved, before it is written.
    fn before_write(&self, slot: usize, producer: &Producer) -> Result<(), TransportError>;
    /// Signals that the writes into `slot` issued so far make the frame.
    /// Called right before the frame is published.
    fn after_write(&self, slot: usize) -> Result<(), TransportError>;
    /// Lent slots: whether the consumers' GPU reads of `slot`'s last frame
    /// are done (without waiting).
    fn reads_done(&self, _slot: usize, _producer: &Producer) -> Result<bool, TransportError> {
        Ok(true)
    }
    /// Lent slots, instead of [`before_write`](Self::before_write): orders
    /// the writes the slot's owner queues from now on `writer` after the
    /// consumers' reads of the slot, on the GPU. `Ok(false)`: these slots
    /// cannot; the caller waits with `before_write`.
    fn order_writer_after_reads(
        &self,
        _slot: usize,
        _producer: &Producer,
        _writer: WriterStream,
    ) -> Result<bool, TransportError> {
        Ok(false)
    }
    /// Descriptors of the slots' memory for a descriptor channel's
    /// consumers (`IpcMode::Fd`: the host slots' memfd; the cuda slots'
    /// timeline block, if any, then one allocation per slot); empty where
    /// consumers find the memory otherwise.
    fn shareables(&self) -> Result<Vec<cudaipc_channel::platform::Shareable>, TransportError> {
        Ok(Vec::new())
    }
}

/// A consumer's view of the producer's slots.
pub trait ConsumerSlots: Send + Sync {
    fn kind(&self) -> TransportKind;
    fn slot_count(&self) -> usize;
    fn slot_size(&self) -> usize;
    fn slot_memory(&self, slot: usize) -> SlotMemory;
    /// Whether this process can only read the slots.
    fn is_read_only(&self) -> bool;
    /// The memory of `slot` when it is host memory, borrowed from the
    /// slots (a held frame's bytes live as long as the frame).
    fn host_region(&self, _slot: usize) -> Option<&HostRegion> {
        None
    }
    /// Orders every later read of `slot` after the producer's writes, on
    /// the host where `on_host` asks for it even if this device would wait
    /// on the GPU. True where the writes are done on return (waited for on
    /// the host, or the producer synchronised before publishing), false
    /// where only a wait on this process's stream was queued. A wait on the
    /// host for them gives up with an error once `give_up` says so (the
    /// producer is gone, or the reader stops).
    fn before_read(
        &self,
        slot: usize,
        on_host: bool,
        give_up: &dyn Fn() -> bool,
    ) -> Result<bool, TransportError>;
    /// Marks the point after which this process no longer reads `slot`:
    /// everything issued so far. The channel release follows it.
    fn finish_read(&self, slot: usize) -> Result<(), TransportError>;
    /// Descriptors the producer waits on before reusing each slot.
    fn release_descriptors(&self) -> Vec<[u8; RELEASE_DESCRIPTOR_BYTES]>;
}

/// Parameters for creating a producer's slots.
#[derive(Debug, Clone)]
pub struct SlotRequest {
    pub channel: String,
    pub session: u64,
    pub generation: u64,
    pub count: usize,
    pub size: usize,
    pub permissions: u32,
    pub gpu_sync: GpuSync,
    /// `IpcMode::Fd`: host slots are anonymous memory handed over the
    /// channel's socket, not a named file.
    pub ipc_mode: cudaipc_channel::IpcMode,
}

pub fn create_producer_slots(
    kind: TransportKind,
    request: &SlotRequest,
    device: Option<&Arc<Device>>,
) -> Result<Box<dyn ProducerSlots>, TransportError> {
    match kind {
        TransportKind::Host => Ok(Box::new(HostProducerSlots::create(request)?)),
        TransportKind::Cuda => {
            let device = device.ok_or(TransportError::NoDevice)?;
            Ok(Box::new(CudaProducerSlots::create(device, request)?))
        }
    }
}

/// The pool descriptor of a descriptor channel's slots (host or cuda):
/// consumers ask the producer's socket for the pool's memory (by
/// generation).
pub(crate) const RECEIVED_POOL: &[u8] = b"@socket";

/// Checks that `pool` is handed over a descriptor channel's socket.
pub(crate) fn check_pool_received(pool: &PoolInfo) -> Result<(), TransportError> {
    let descriptor = pool
        .pool_descriptor
        .split(|&b| b == 0)
        .next()
        .unwrap_or(&[]);
    if descriptor != RECEIVED_POOL {
        return Err(TransportError::PoolNotHandedOver);
    }
    Ok(())
}

/// Asks a descriptor channel's producer (one of `producers`) for the
/// memory of pool `generation`.
pub(crate) fn request_pool(
    channel: &str,
    generation: u64,
    producers: &cudaipc_channel::socket::Peers,
) -> Result<Vec<cudaipc_channel::platform::Shareable>, TransportError> {
    use cudaipc_channel::socket::{self, RequestError};
    socket::request(channel, socket::Request::Pool(generation), producers).map_err(|e| match e {
        RequestError::Channel(e) => TransportError::Channel(e),
        RequestError::NoProducer => TransportError::SocketGone {
            channel: channel.to_owned(),
        },
        RequestError::Gone => TransportError::PoolGone { generation },
    })
}

/// Opens the slots of a channel's current pool. `device` is the consumer's
/// own device for the cuda transport (it may differ from the producer's).
pub fn open_consumer_slots(
    channel: &str,
    info: &ChannelInfo,
    pool: &PoolInfo,
    device: Option<&Arc<Device>>,
    consumer_index: usize,
) -> Result<Arc<dyn ConsumerSlots>, TransportError> {
    match TransportKind::from_wire(info.transport) {
        Some(TransportKind::Host) => Ok(Arc::new(match &info.descriptor_channel {
            Some(producers) => HostConsumerSlots::receive(channel, pool, producers)?,
            None => HostConsumerSlots::open(channel, pool, info.producer_uid)?,
        })),
        Some(TransportKind::Cuda) => {
            let device = device.ok_or(TransportError::NoDevice)?;
            Ok(Arc::new(CudaConsumerSlots::open(
                device,
                channel,
                info,
                pool,
                consumer_index,
            )?))
        }
        None => Err(TransportError::UnknownTransport(info.transport)),
    }
}
