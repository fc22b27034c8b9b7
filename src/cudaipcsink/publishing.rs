// SPDX-License-Identifier: MPL-2.0

//! The sink's publishing, in GStreamer's terms on one side and the
//! publisher's on the other: which way a frame goes (lent, loaned, copied;
//! decided in `render` alone), its copy into a slot, the pools proposed in
//! an allocation query, and the statistics as a structure.

use std::sync::Arc;

use gst::prelude::*;

use super::input::Input;
use super::lending::{self, Lending};
use super::pool::{self, SlotPool};
use super::state::{CAT, SinkLender, SinkPublisher, State, flow_error, report_slots};
use crate::copy_error::{Buffer, FrameCopyError};
use crate::frame_copy::{self, Source, StreamOf, Target};
use crate::gstcuda;
use crate::memory::{self, CudaAllocator};
use cudaipc_channel::ChannelError;
use cudaipc_transport::cuda;
use cudaipc_transport::{PublisherConfig, PublisherStats, SlotMemory, TransportKind};

/// GStreamer 1.24+ memory may come with its writes still queued on its
/// stream: ordered on the GPU, not by a host wait per frame.
pub(super) fn stream_ordering(
    device: Option<&Arc<cuda::Device>>,
) -> Option<Arc<gstcuda::StreamOrdering>> {
    device
        .filter(|_| gstcuda::api_level() >= gstcuda::ApiLevel::V1_24)
        .map(|device| Arc::new(gstcuda::StreamOrdering::new(device.clone())))
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
/// into a slot (lent, or of our pool), else copied into a free slot. The
/// one place that decides which; what each way needs of the buffer is read
/// once (`Input`).
pub(super) fn render(
    sink: &gst::Element,
    state: &State,
    info: &gst_video::VideoInfo,
    buffer: &gst::Buffer,
    frame_data: Vec<u8>,
) -> Result<gst::FlowSuccess, gst::FlowError> {
    let publisher = &state.publisher;
    let input =
        Input::new(buffer, info, publisher.config().device.is_some()).with_frame_data(frame_data);
    let lendable = match lending::try_publish(sink, state, &input)? {
        Lending::Published => return Ok(gst::FlowSuccess::Ok),
        Lending::Copy(lendable) => lendable,
    };
    // Upstream wrote into a slot of our pool: its memory carries the loan.
    if let Some(loan) = pool::take_loan(buffer, publisher) {
        let slot = loan.publish(&input.meta).map_err(|e| flow_error(sink, e))?;
        gst::trace!(CAT, obj = sink, "published slot {} without a copy", slot);
        return Ok(gst::FlowSuccess::Ok);
    }
    if publish_copy(sink, state, &input)?
        && let Some(frame) = lendable
    {
        lending::learn(sink, state, frame, info);
    }
    Ok(gst::FlowSuccess::Ok)
}

/// Copies the frame of `input` into a free slot, or publishes again a slot
/// that still holds it; `false`: every slot was busy, and it was dropped.
fn publish_copy(sink: &gst::Element, state: &State, input: &Input) -> Result<bool, gst::FlowError> {
    let publisher = &state.publisher;
    if publisher.status().awaits_consumers {
        gst::info!(
            CAT,
            obj = sink,
            "waiting for consumers before the first frame"
        );
    }
    let copy = |slot: &_| copy_into_slot(input, state.ordering.as_deref(), slot);
    // Our reference keeps the memory unchanged (GStreamer lets nobody write
    // memory that others hold): pushed again, it is published again from a
    // slot that still holds it.
    let source = input
        .source_identity()
        .map(|key| (key, input.buffer.clone()));
    match publisher
        .publish_copy_of(source, &input.meta, copy)
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
                input.buffer.pts()
            );
            return Ok(false);
        }
    }
    Ok(true)
}

/// Answers an allocation query for `caps`: the lendable `GstCudaBufferPool`
/// (GStreamer's CUDA elements write only into one, and take the first pool
/// proposed: its buffers become the slots), then the slot pool (which this
/// plugin's elements find after it). `Some`: the lendable pool changed.
pub(super) fn propose(
    sink: &gst::Element,
    query: &mut gst::query::Allocation,
    publisher: &Arc<SinkPublisher>,
    lender: Option<&Arc<SinkLender>>,
    lendable: Option<gst::BufferPool>,
    caps: &gst::Caps,
    context: Option<gstcuda::CudaContext>,
) -> Result<Option<Option<gst::BufferPool>>, gst::LoggableError> {
    let matches = match publisher.config().kind {
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
    let proposed = lendable.filter(|pool| lending::pool_has_caps(pool, caps));
    let changed = proposed.is_none();
    let lent = publisher.status().lent;
    let lendable = match proposed {
        Some(pool) => Some(pool),
        None => {
            let pool = lending::lendable_pool(context, publisher, lender, caps, &info);
            if let Some(lender) = lender {
                // Our own ring is as deep as it goes unless it may be lent.
                lender.restart(pool.is_some() && lender.can_lend());
            }
            pool
        }
    };
    if changed || !lent {
        // Upstream may ask before the caps event reached us (imagefreeze
        // does): the slots must exist for the pool to hand them out.
        report_slots(sink, publisher.configure(info.size()))?;
    }
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
    propose_slot_pool(sink, query, publisher.clone(), lender.cloned(), caps, &info)?;
    Ok(changed.then_some(lendable))
}

/// Copies (or uploads, or downloads) the frame of `input` into a free
/// slot, in the caps' default layout.
fn copy_into_slot(
    input: &Input,
    ordering: Option<&gstcuda::StreamOrdering>,
    memory: &SlotMemory,
) -> Result<(), FrameCopyError> {
    let (buffer, info) = (input.buffer, input.info);
    let dst_planes = &input.meta.planes;
    // GstCudaMemory of GStreamer's CUDA elements, mapped on the device when
    // our slots are on one too.
    let gst_cuda = match memory {
        SlotMemory::Device(_) => input.gst_cuda(),
        SlotMemory::Host(_) => None,
    };
    let src_planes = input.planes();
    let target = match memory {
        SlotMemory::Device(slot) => Target::Device(slot),
        SlotMemory::Host(slot) => {
            // SAFETY: the slot is reserved by us, so no consumer reads it
            // until it is published, and this copy is the only view of it.
            let bytes = unsafe { slot.as_mut_slice() };
            Target::Host(bytes.ok_or(FrameCopyError::SlotReadOnly)?)
        }
    };
    let copy = |src, target| {
        frame_copy::copy_frame(info, src, &src_planes, target, dst_planes, StreamOf::Target)
    };
    if let (SlotMemory::Device(slot), Some(mapped)) = (memory, gst_cuda) {
        let stream = slot.device().stream();
        let input = buffer.peek_memory(0);
        // GStreamer 1.24+: upstream's writes may still be queued on its
        // stream; read after them.
        let access =
            gstcuda::OrderedAccess::begin(ordering, input, &stream, gstcuda::Access::Read)?;
        let src = mapped.region()?;
        copy(Source::Device(&src), target)?;
        // Upstream rewrites its memory once we return the buffer: on its
        // stream, ordered after the copy (1.24+), or after a host wait.
        return Ok(access.finish(input)?);
    }
    if let Some(src) = memory::buffer_device_region(buffer) {
        return copy(Source::Device(&src), target);
    }
    let map = buffer
        .map_readable()
        .map_err(|_| FrameCopyError::CannotMap(Buffer::Input))?;
    copy(Source::Host(&map), target)
}

/// Adds the slot pool (whose buffers are free slots) to `query`.
fn propose_slot_pool(
    sink: &gst::Element,
    query: &mut gst::query::Allocation,
    publisher: Arc<SinkPublisher>,
    lender: Option<Arc<SinkLender>>,
    caps: &gst::Caps,
    info: &gst_video::VideoInfo,
) -> Result<(), gst::LoggableError> {
    let allocator = publisher
        .config()
        .device
        .as_ref()
        .map(|d| CudaAllocator::for_device(d).upcast::<gst::Allocator>());
    let pool = SlotPool::new(publisher, lender, sink);
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
        last_blockers: Vec::new(),
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
