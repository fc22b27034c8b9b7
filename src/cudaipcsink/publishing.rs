// SPDX-License-Identifier: MPL-2.0

//! The sink's publishing, in GStreamer's terms on one side and the
//! publisher's on the other: a buffer's frame metadata, its copy into a
//! slot, whether it is a buffer of the lendable `GstCudaBufferPool` (and
//! when to lend that pool's buffers as slots), the pools proposed in an
//! allocation query, and the statistics as a structure.

use std::sync::Arc;

use gst::prelude::*;

use super::pool::{self, SlotPool};
use super::{CAT, SinkPublisher};
use crate::frame_copy::{self, Source, StreamOf, Target};
use crate::gstcuda;
use crate::memory::{self, CudaAllocator};
use crate::video;
use cudaipc_channel::layout::MAX_SLOTS;
use cudaipc_channel::socket::Peers;
use cudaipc_channel::{ChannelError, FrameMeta};
use cudaipc_transport::cuda;
use cudaipc_transport::{
    Allocated, ConfigureError, Learned, LendableFrame, PublishError, PublisherConfig,
    PublisherStats, SlotMemory, TransportKind,
};

/// From `start` to `stop`; `render` works on a copy.
#[derive(Clone)]
pub(super) struct State {
    pub(super) publisher: Arc<SinkPublisher>,
    pub(super) info: Option<gst_video::VideoInfo>,
    /// The `GstCudaBufferPool` proposed upstream, whose buffers may become
    /// the slots (see `learn`).
    pub(super) lendable: Option<gst::BufferPool>,
    /// Orders upstream's stream-ordered `GstCudaMemory` on the GPU
    /// (GStreamer 1.24+, cuda transport).
    pub(super) ordering: Option<Arc<gstcuda::StreamOrdering>>,
}

/// The device whose context to share with GStreamer's CUDA elements:
/// ours, when that library is there and we use the cuda transport.
pub(super) fn context_device(
    transport: Option<TransportKind>,
    device_id: i32,
) -> Option<Arc<cuda::Device>> {
    (gstcuda::available() && TransportKind::resolve(transport) == TransportKind::Cuda)
        .then(|| cuda::Device::get(device_id).ok())
        .flatten()
}

/// The device of the cuda transport (`None` for the host transport).
pub(super) fn device_for(
    kind: TransportKind,
    device_id: i32,
) -> Result<Option<Arc<cuda::Device>>, gst::ErrorMessage> {
    match kind {
        TransportKind::Cuda => cuda::Device::get(device_id).map(Some).map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::OpenWrite,
                (
                    "transport=cuda needs CUDA device {}: {}{}",
                    device_id,
                    e,
                    crate::hints::cuda(&e)
                )
            )
        }),
        TransportKind::Host => Ok(None),
    }
}

/// GStreamer 1.24+ memory may come with its writes still queued on its
/// stream: ordered on the GPU, not by a host wait per frame.
pub(super) fn stream_ordering(
    device: Option<&Arc<cuda::Device>>,
) -> Option<Arc<gstcuda::StreamOrdering>> {
    device
        .filter(|_| gstcuda::api_level() >= gstcuda::ApiLevel::V1_24)
        .map(|device| Arc::new(gstcuda::StreamOrdering::new(device.clone())))
}

/// The consumers `allowed-uids` and `allowed-gids` name.
pub(super) fn peers(uids: &str, gids: &str) -> Result<Peers, gst::ErrorMessage> {
    let parse = |property: &str, text: &str| {
        Peers::parse_ids(text)
            .map_err(|e| gst::error_msg!(gst::ResourceError::Settings, ("{}: {}", property, e)))
    };
    Ok(Peers {
        uids: parse("allowed-uids", uids)?,
        gids: parse("allowed-gids", gids)?,
    })
}

/// Creates the channel, or the error to post.
pub(super) fn open(config: PublisherConfig) -> Result<SinkPublisher, gst::ErrorMessage> {
    let channel = config.channel.clone();
    SinkPublisher::create(config).map_err(|e| match e {
        ChannelError::InUse { .. } => gst::error_msg!(gst::ResourceError::Busy, ("{}", e)),
        ChannelError::InvalidName { .. } => {
            gst::error_msg!(gst::ResourceError::Settings, ("{}", e))
        }
        // It names the channel itself.
        ChannelError::NameTaken { .. } => gst::error_msg!(gst::ResourceError::OpenWrite, ("{}", e)),
        e => gst::error_msg!(
            gst::ResourceError::OpenWrite,
            ("cannot create channel '{}': {}", channel, e)
        ),
    })
}

/// Publishes the frame in `buffer`: without a copy when upstream wrote it
/// into a slot (of our pool, or lent), else copied into a free slot.
pub(super) fn render(
    sink: &super::CudaIpcSink,
    state: &State,
    info: &gst_video::VideoInfo,
    buffer: &gst::Buffer,
) -> Result<gst::FlowSuccess, gst::FlowError> {
    let (publisher, lendable, ordering) =
        (&state.publisher, &state.lendable, state.ordering.as_deref());
    publisher.reap_retired();
    let pool_frame = lendable
        .as_ref()
        .filter(|_| publisher.can_lend())
        .and_then(|pool| pool_frame(publisher, pool, buffer, info));
    let meta = frame_meta(buffer, info);
    if publisher.is_lent() {
        if let Some(frame) = &pool_frame {
            let meta = FrameMeta {
                size: frame.size as u64,
                planes: frame.planes.clone(),
                ..meta.clone()
            };
            // Dropping the released buffers gives them back upstream; on
            // 1.24+ upstream's stream waits for the consumers' reads.
            let writer_stream = |buffer: &gst::Buffer| {
                ordering.and_then(|ordering| ordering.writer_stream(buffer.peek_memory(0)))
            };
            // Consumers read the frame after its ready mark, queued on our
            // stream, which follows upstream's writes (on 1.24+ through an
            // event on upstream's stream: a mark queued there itself, a
            // fenced write to host memory, held upstream's next kernel back,
            // 5% of 13b's rate on an H100, docs/performance.md).
            if let (Some(ordering), Some(device)) = (ordering, publisher.device()) {
                ordering
                    .wait_for_upstream(buffer.peek_memory(0), &device.stream())
                    .map_err(|e| flow_error(sink, PublishError::Transport(e.into())))?;
            }
            match publisher.publish_lent(&frame.key, buffer.clone(), &meta, &writer_stream) {
                Ok(Some(_released)) => return Ok(gst::FlowSuccess::Ok),
                Ok(None) => {}
                Err(e) => return Err(flow_error(sink, PublishError::Transport(e))),
            }
        }
        gst::info!(
            CAT,
            obj = sink,
            "frame outside the lent slots; copying again"
        );
        report_slots(sink, publisher.configure(info.size())).map_err(|e| {
            e.log_with_object(sink);
            match publisher.is_interrupted() {
                true => gst::FlowError::Flushing,
                false => gst::FlowError::Error,
            }
        })?;
    }
    // Upstream wrote into a slot of our pool: its memory carries the loan.
    if let Some(loan) = pool::take_loan(buffer, publisher) {
        let slot = loan.publish(&meta).map_err(|e| flow_error(sink, e))?;
        gst::trace!(CAT, obj = sink, "published slot {} without a copy", slot);
        return Ok(gst::FlowSuccess::Ok);
    }
    if publisher.awaits_consumers() {
        gst::info!(
            CAT,
            obj = sink,
            "waiting for consumers before the first frame"
        );
    }
    let copy = |slot: &_| copy_into_slot(buffer, info, ordering, slot);
    // Our reference keeps the memory unchanged (GStreamer lets nobody write
    // memory that others hold): pushed again, it is published again from a
    // slot that still holds it.
    let source = source_identity(buffer).map(|key| (key, buffer.clone()));
    match publisher
        .publish_copy_of(source, &meta, copy)
        .map_err(|e| flow_error(sink, e))?
    {
        Some((slot, true)) => gst::trace!(CAT, obj = sink, "copied into slot {}", slot),
        Some((slot, false)) => gst::trace!(
            CAT,
            obj = sink,
            "published slot {} again: it holds this memory's frame",
            slot
        ),
        None => {
            gst::trace!(
                CAT,
                obj = sink,
                "all slots busy: dropped {:?}",
                buffer.pts()
            );
            return Ok(gst::FlowSuccess::Ok);
        }
    }
    if let (Some(pool), Some(frame)) = (lendable, pool_frame)
        && let Err(e) = learn(sink, publisher, pool, frame, info)
    {
        gst::warning!(
            CAT,
            obj = sink,
            "cannot share the buffers of {}, copying: {}",
            pool.name(),
            e
        );
        // The channel may already describe the lent buffers.
        if let Err(e) = report_slots(sink, publisher.allocate(info.size()).map(Some)) {
            e.log_with_object(sink);
        }
    }
    Ok(gst::FlowSuccess::Ok)
}

/// An error posted on the bus, or flushing when the sink was unlocked.
fn flow_error(sink: &super::CudaIpcSink, e: PublishError) -> gst::FlowError {
    if e.is_interrupted() {
        return gst::FlowError::Flushing;
    }
    gst::element_error!(sink, gst::ResourceError::Write, ("{}", e));
    gst::FlowError::Error
}

/// Logs slots just allocated, or posts why they could not be.
pub(super) fn report_slots(
    sink: &super::CudaIpcSink,
    result: Result<Option<Allocated>, ConfigureError>,
) -> Result<(), gst::LoggableError> {
    match result {
        Ok(None) => Ok(()),
        Ok(Some(slots)) => {
            gst::info!(
                CAT,
                obj = sink,
                "{} slots of {} bytes",
                slots.count,
                slots.size
            );
            Ok(())
        }
        Err(e @ ConfigureError::Allocate { .. }) => {
            gst::element_error!(sink, gst::ResourceError::NoSpaceLeft, ("{}", e));
            Err(gst::loggable_error!(CAT, "slot allocation failed"))
        }
        Err(e) => Err(gst::loggable_error!(CAT, "{}", e)),
    }
}

/// Answers an allocation query for `caps`: the lendable `GstCudaBufferPool`
/// (GStreamer's CUDA elements write only into one, and take the first pool
/// proposed: its buffers become the slots), then the slot pool (which this
/// plugin's elements find after it). `Some`: the lendable pool changed.
pub(super) fn propose(
    sink: &super::CudaIpcSink,
    query: &mut gst::query::Allocation,
    publisher: &Arc<SinkPublisher>,
    lendable: Option<gst::BufferPool>,
    caps: &gst::Caps,
    context: Option<gstcuda::CudaContext>,
) -> Result<Option<Option<gst::BufferPool>>, gst::LoggableError> {
    let matches = match publisher.kind() {
        TransportKind::Cuda => memory::caps_are_cuda(caps),
        TransportKind::Host => !memory::caps_are_cuda(caps),
    };
    if !matches {
        return Ok(None);
    }
    let info = gst_video::VideoInfo::from_caps(caps)
        .map_err(|_| gst::loggable_error!(CAT, "cannot parse caps {}", caps))?;
    // Upstream may ask again for the same caps (and keep the pool it has):
    // the same pool then.
    let proposed = lendable.filter(|pool| pool_has_caps(pool, caps));
    if proposed.is_none() || !publisher.is_lent() {
        // Upstream may ask before the caps event reached us (imagefreeze
        // does): the slots must exist for the pool to hand them out.
        report_slots(sink, publisher.configure(info.size()))?;
    }
    let changed = proposed.is_none();
    let lendable = match proposed {
        Some(pool) => Some(pool),
        None => {
            publisher.restart_learning();
            lendable_pool(context, publisher, caps, &info)
        }
    };
    if let Some(pool) = &lendable
        && let Some((_, size, min, max)) = pool.config().params()
    {
        gst::debug!(
            CAT,
            obj = sink,
            "proposing {} ({} buffers)",
            pool.name(),
            max
        );
        query.add_allocation_pool(Some(pool), size, min, max);
    }
    propose_slot_pool(sink, query, publisher.clone(), caps, &info)?;
    Ok(changed.then_some(lendable))
}

/// The channel's metadata of the frame in `buffer`, in the caps' default
/// layout.
fn frame_meta(buffer: &gst::BufferRef, info: &gst_video::VideoInfo) -> FrameMeta {
    FrameMeta {
        size: info.size() as u64,
        pts: buffer.pts().map(|t| t.nseconds()),
        dts: buffer.dts().map(|t| t.nseconds()),
        duration: buffer.duration().map(|t| t.nseconds()),
        offset: buffer.offset(),
        offset_end: buffer.offset_end(),
        flags: buffer.flags().bits(),
        planes: video::planes(info),
    }
}

/// What tells the frame of `buffer` apart as a source to publish again
/// (see `publish_copy_of`): its only memory, by address, which the
/// reference kept with it keeps from being freed or written.
fn source_identity(buffer: &gst::BufferRef) -> Option<usize> {
    (buffer.n_memory() == 1).then(|| buffer.peek_memory(0).as_ptr() as usize)
}

/// Copies (or uploads, or downloads) `buffer` into a free slot, in the
/// caps' default layout.
fn copy_into_slot(
    buffer: &gst::Buffer,
    info: &gst_video::VideoInfo,
    ordering: Option<&gstcuda::StreamOrdering>,
    memory: &SlotMemory,
) -> Result<(), String> {
    let dst_planes = video::planes(info);
    // GstCudaMemory of GStreamer's CUDA elements, mapped on the device when
    // our slots are on one too.
    let gst_cuda = match memory {
        SlotMemory::Device(_) => gstcuda::MappedCudaMemory::of_buffer(buffer, false),
        SlotMemory::Host(_) => None,
    };
    let src_planes = video::meta_planes(buffer)
        .or_else(|| gst_cuda.as_ref().map(|mapped| mapped.planes.clone()))
        .unwrap_or_else(|| dst_planes.clone());
    let target = match memory {
        SlotMemory::Device(slot) => Target::Device(slot),
        // SAFETY: the slot is reserved by us, so no consumer reads it until
        // it is published, and this copy is the only view of it.
        SlotMemory::Host(slot) => {
            Target::Host(unsafe { slot.as_mut_slice() }.ok_or("the slot's mapping is read-only")?)
        }
    };
    let copy = |src, target| {
        frame_copy::copy_frame(
            info,
            src,
            &src_planes,
            target,
            &dst_planes,
            StreamOf::Target,
        )
    };
    if let (SlotMemory::Device(slot), Some(mapped)) = (memory, &gst_cuda) {
        let stream = slot.device().stream();
        let input = buffer.peek_memory(0);
        // GStreamer 1.24+: upstream's writes may still be queued on its
        // stream; read after them.
        let access = gstcuda::OrderedAccess::begin(ordering, input, &stream, gstcuda::Access::Read)
            .map_err(|e| e.to_string())?;
        let src = mapped.region().map_err(|e| e.to_string())?;
        copy(Source::Device(&src), target)?;
        // Upstream rewrites its memory once we return the buffer: on its
        // stream, ordered after the copy (1.24+), or after a host wait.
        return access.finish(input).map_err(|e| e.to_string());
    }
    if let Some(src) = memory::buffer_device_region(buffer) {
        return copy(Source::Device(&src), target);
    }
    let map = buffer
        .map_readable()
        .map_err(|_| "cannot map the input buffer".to_string())?;
    copy(Source::Host(&map), target)
}

/// The frame in `buffer` if it is a buffer of `pool`, the
/// `GstCudaBufferPool` proposed upstream, whose memory CUDA IPC can export.
fn pool_frame(
    publisher: &SinkPublisher,
    pool: &gst::BufferPool,
    buffer: &gst::BufferRef,
    info: &gst_video::VideoInfo,
) -> Option<LendableFrame> {
    let device = publisher.device()?;
    // SAFETY: `pool` is a public field of GstBuffer, set when the buffer
    // was acquired from a pool; we hold a reference to the buffer.
    if unsafe { (*buffer.as_ptr()).pool } != pool.as_ptr() {
        gst::log!(CAT, "buffer not of {}: copied", pool.name());
        return None;
    }
    let not_lendable = |why: &dyn std::fmt::Display| {
        gst::debug!(CAT, "buffer of {} not lendable: {}", pool.name(), why);
    };
    let Some(mapped) = gstcuda::MappedCudaMemory::of_buffer(buffer, false) else {
        not_lendable(&"not one GstCudaMemory that maps on the device");
        return None;
    };
    let (key, allocated) = match cuda::exportable_allocation(device, mapped.ptr) {
        Ok(Some(allocation)) => allocation,
        Ok(None) => {
            not_lendable(&"the allocation cannot be exported with CUDA IPC");
            return None;
        }
        Err(e) => {
            not_lendable(&e);
            return None;
        }
    };
    let planes = video::meta_planes(buffer).unwrap_or_else(|| mapped.planes.clone());
    let size = mapped.size.min(allocated);
    if let Err(e) = video::layout_fits(info, &planes, size as u64) {
        not_lendable(&e);
        return None;
    }
    Some(LendableFrame {
        key,
        ptr: mapped.ptr,
        size,
        planes,
    })
}

/// Notes a copied frame of the proposed pool; once every buffer of the
/// pool went through, they become the slots (zero copy from then on).
/// `Err`: they could not, and the slots are in an unknown state.
fn learn(
    sink: &super::CudaIpcSink,
    publisher: &SinkPublisher,
    pool: &gst::BufferPool,
    frame: LendableFrame,
    info: &gst_video::VideoInfo,
) -> Result<(), cudaipc_transport::TransportError> {
    // A pool of at most `max` buffers (decoders set `min` to 0: they
    // allocate on demand) hands each of them out in turn.
    let count = pool.config().params().and_then(|(_, _, _, max)| {
        (1..=MAX_SLOTS)
            .contains(&(max as usize))
            .then_some(max as usize)
    });
    let mut learned = publisher.learn(frame, count);
    // GStreamer 1.24+ pools allocate buffers only when asked for one more
    // than they have: upstream, which rarely holds more than two at once,
    // would never make the others. So, once, take every buffer the pool can
    // give without waiting (it allocates the rest) to know them all; they
    // go back to it when `spare` is dropped, after lending.
    let mut spare = Vec::new();
    if let (Learned::New(1), Some(count)) = (&learned, count) {
        let params =
            gst::BufferPoolAcquireParams::with_flags(gst::BufferPoolAcquireFlags::DONTWAIT);
        while spare.len() < count {
            match pool.acquire_buffer(Some(&params)) {
                Ok(buffer) => spare.push(buffer),
                Err(_) => break,
            }
        }
        for buffer in &spare {
            if let Some(frame) = pool_frame(publisher, pool, buffer, info) {
                learned = publisher.learn(frame, Some(count));
                if matches!(learned, Learned::All(_)) {
                    break;
                }
            }
        }
        gst::debug!(
            CAT,
            obj = sink,
            "took {} spare buffers of {} to learn them",
            spare.len(),
            pool.name()
        );
    }
    let frames = match learned {
        Learned::New(seen) => {
            gst::debug!(CAT, obj = sink, "{} buffers of {} seen", seen, pool.name());
            return Ok(());
        }
        Learned::Known => return Ok(()),
        Learned::All(frames) => frames,
    };
    let count = frames.len();
    // SAFETY: `pool_frame` checked that each frame starts an exportable
    // allocation of at least its size, of a buffer of the proposed pool,
    // which keeps its buffers allocated while the lent set, holding
    // published ones, is in use.
    if unsafe { publisher.lend(frames) }? {
        gst::info!(
            CAT,
            obj = sink,
            "zero copy from now: the {} buffers of {} are the slots",
            count,
            pool.name()
        );
    }
    Ok(())
}

/// Whether `pool` was configured for `caps`.
fn pool_has_caps(pool: &gst::BufferPool, caps: &gst::Caps) -> bool {
    pool.config()
        .params()
        .and_then(|(pool_caps, ..)| pool_caps)
        .is_some_and(|pool_caps| &pool_caps == caps)
}

/// A `GstCudaBufferPool` of `context` (ours) with `lendable_count` buffers,
/// for GStreamer's CUDA elements upstream to write into.
fn lendable_pool(
    context: Option<gstcuda::CudaContext>,
    publisher: &SinkPublisher,
    caps: &gst::Caps,
    info: &gst_video::VideoInfo,
) -> Option<gst::BufferPool> {
    let device = publisher.device()?;
    // CUDAIPC_LEND=0: copy instead (to compare, or to rule lending out).
    if !gstcuda::available() || std::env::var_os("CUDAIPC_LEND").is_some_and(|v| v == "0") {
        return None;
    }
    let pool = context
        .filter(|c| c.is_primary_of(device))?
        .new_buffer_pool()?;
    let count = publisher.lendable_count(info.size()) as u32;
    if !video::configure_pool(&pool, caps, info.size() as u32, count, count) {
        gst::debug!(CAT, "{} refused {}", pool.name(), caps);
        return None;
    }
    Some(pool)
}

/// Adds the slot pool (whose buffers are free slots) to `query`.
fn propose_slot_pool(
    sink: &super::CudaIpcSink,
    query: &mut gst::query::Allocation,
    publisher: Arc<SinkPublisher>,
    caps: &gst::Caps,
    info: &gst_video::VideoInfo,
) -> Result<(), gst::LoggableError> {
    let allocator = publisher
        .device()
        .map(|d| CudaAllocator::for_device(d).upcast::<gst::Allocator>());
    let pool = SlotPool::new(publisher, sink.upcast_ref());
    let mut config = pool.config();
    config.set_params(Some(caps), info.size() as u32, 0, 0);
    if let Some(allocator) = allocator.as_ref() {
        // Tells upstream that the pool's buffers are CUDA memory of this
        // plugin, which it may write with its kernels.
        config.set_allocator(Some(allocator), None);
        query.add_allocation_param(Some(allocator), gst::AllocationParams::default());
    }
    pool.set_config(config)
        .map_err(|_| gst::loggable_error!(CAT, "cannot configure the slot pool"))?;
    query.add_allocation_pool(Some(&pool), info.size() as u32, 0, 0);
    Ok(())
}

/// The `stats` property and message; zeros before `start`. `render_ns`:
/// the time spent in `render`.
pub(super) fn stats(stats: Option<PublisherStats>, render_ns: u64) -> gst::Structure {
    let transport = match stats.as_ref().map(|s| s.kind) {
        Some(TransportKind::Cuda) => "cuda",
        Some(TransportKind::Host) => "host",
        None => "none",
    };
    let s = stats.unwrap_or_else(|| PublisherStats {
        producer: Default::default(),
        zero_copy: 0,
        copied: 0,
        repeated: 0,
        read_wait_ns: 0,
        slots: 0,
        kind: TransportKind::Host,
    });
    gst::Structure::builder("cudaipcsink-stats")
        .field("frames", s.producer.frames)
        .field("dropped", s.producer.dropped)
        .field("overwritten", s.producer.overwritten)
        .field("waits", s.producer.waits)
        .field("render-time", render_ns)
        .field("slot-wait-time", s.producer.wait_ns)
        .field("read-wait-time", s.read_wait_ns)
        .field("zero-copy", s.zero_copy)
        .field("copied", s.copied)
        .field("repeated", s.repeated)
        .field("slots", s.slots as u32)
        .field("consumers", s.producer.consumers)
        .field("reclaimed-consumers", s.producer.reclaimed_consumers)
        .field("transport", transport)
        .build()
}
