// SPDX-License-Identifier: MPL-2.0

//! The sink's side of lending (see `cudaipc_transport::Lender`): which
//! buffers are of the `GstCudaBufferPool` proposed upstream and can be lent,
//! publishing a frame from its lent slot, and learning the pool's buffers
//! from copied frames until they become the slots.

use std::sync::Arc;

use gst::prelude::*;

use super::input::Input;
use super::state::{CAT, SinkLender, SinkPublisher, State, flow_error, report_slots};
use crate::gstcuda;
use crate::video;
use cudaipc_channel::layout::MAX_SLOTS;
use cudaipc_transport::cuda;
use cudaipc_transport::{Learned, LendableFrame, Lent, PublishError, TransportError};

/// What became of a frame offered to the lending ([`try_publish`]).
pub(super) enum Lending {
    /// Published from its lent slot.
    Published,
    /// To be copied; `Some`: a buffer of the lendable pool, for [`learn`]
    /// once copied.
    Copy(Option<LendableFrame>),
}

/// Publishes the frame of `input` from its lent slot, where the slots are
/// the buffers of the pool proposed upstream and it is one of them. A frame
/// outside the lent slots makes the slots our own again, to copy it into.
pub(super) fn try_publish(
    sink: &gst::Element,
    state: &State,
    input: &Input,
) -> Result<Lending, gst::FlowError> {
    let publisher = &state.publisher;
    let Some(lender) = &state.lender else {
        return Ok(Lending::Copy(None));
    };
    // A buffer of the pool proposed upstream, on a publisher that can lend.
    let frame = match &state.lendable {
        Some(pool) if lender.can_lend() => pool_frame(publisher, pool, input),
        _ => None,
    };
    let (buffer, info) = (input.buffer, input.info);
    let ordering = state.ordering.as_deref();
    // Dropping the released buffers gives them back upstream; on 1.24+
    // upstream's stream waits for the consumers' reads.
    let writer_stream = |buffer: &gst::Buffer| {
        ordering.and_then(|ordering| ordering.writer_stream(buffer.peek_memory(0)))
    };
    // Consumers read the frame after its ready mark, queued on our stream,
    // which follows upstream's writes (on 1.24+ through an event on
    // upstream's stream: a mark queued there itself, a fenced write to host
    // memory, held upstream's next kernel back, 5% of 13b's rate on an
    // H100, docs/performance.md).
    let after_upstream = || match (ordering, &publisher.config().device) {
        (Some(ordering), Some(device)) => ordering
            .wait_for_upstream(buffer.peek_memory(0), &device.stream())
            .map(drop)
            .map_err(TransportError::from),
        _ => Ok(()),
    };
    match lender.publish(
        frame.as_ref(),
        buffer,
        &input.meta,
        after_upstream,
        &writer_stream,
    ) {
        Ok(Lent::Published(_released)) => Ok(Lending::Published),
        Ok(Lent::NotLent) => Ok(Lending::Copy(frame)),
        Ok(Lent::Outside) => {
            gst::info!(
                CAT,
                obj = sink,
                "frame outside the lent slots; copying again"
            );
            report_slots(sink, publisher.configure(info.size())).map_err(|e| {
                e.log_with_object(sink);
                match publisher.status().interrupted {
                    true => gst::FlowError::Flushing,
                    false => gst::FlowError::Error,
                }
            })?;
            Ok(Lending::Copy(frame))
        }
        Err(e) => Err(flow_error(sink, PublishError::Transport(e))),
    }
}

/// Notes a copied `frame` of the pool proposed upstream; once every buffer
/// of it went through, they become the slots. Where they could not, our own
/// slots again.
pub(super) fn learn(
    sink: &gst::Element,
    state: &State,
    frame: LendableFrame,
    info: &gst_video::VideoInfo,
) {
    let publisher = &state.publisher;
    let (Some(pool), Some(lender)) = (&state.lendable, &state.lender) else {
        return;
    };
    if let Err(e) = learn_pool(sink, publisher, lender, pool, frame, info) {
        gst::warning!(
            CAT,
            obj = sink,
            "cannot share the buffers of {}, copying: {}",
            pool.name(),
            e
        );
        // Our own slots, unless they still are the ones the channel
        // describes (it may describe the lent buffers already).
        if let Err(e) = report_slots(sink, publisher.configure(info.size())) {
            e.log_with_object(sink);
        }
    }
}

/// The frame of `input` if it is a buffer of `pool`, the
/// `GstCudaBufferPool` proposed upstream, whose memory CUDA IPC can export.
fn pool_frame(
    publisher: &SinkPublisher,
    pool: &gst::BufferPool,
    input: &Input,
) -> Option<LendableFrame> {
    let device = publisher.config().device.as_ref()?;
    let buffer = input.buffer;
    // SAFETY: `pool` is a public field of GstBuffer, set when the buffer
    // was acquired from a pool; we hold a reference to the buffer.
    if unsafe { (*buffer.as_ptr()).pool } != pool.as_ptr() {
        gst::log!(CAT, "buffer not of {}: copied", pool.name());
        return None;
    }
    let not_lendable = |why: &dyn std::fmt::Display| {
        gst::debug!(CAT, "buffer of {} not lendable: {}", pool.name(), why);
    };
    let Some(mapped) = input.gst_cuda() else {
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
    let planes = input.planes();
    let size = mapped.size.min(allocated);
    if let Err(e) = video::layout_fits(input.info, &planes, size as u64) {
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

/// Notes a copied frame of `pool`; once every buffer of the pool went
/// through, they become the slots (zero copy from then on). `Err`: they
/// could not, and the slots are in an unknown state.
fn learn_pool(
    sink: &gst::Element,
    publisher: &SinkPublisher,
    lender: &SinkLender,
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
    // SAFETY: (each `learn` here) `pool_frame` checked that each frame
    // starts an exportable allocation of at least its size, of a buffer of
    // the proposed pool, which keeps its buffers allocated while the lent
    // set, holding published ones, is in use.
    let mut learned = unsafe { lender.learn(frame, count) }?;
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
            let on_device = publisher.config().device.is_some();
            if let Some(frame) = pool_frame(publisher, pool, &Input::new(buffer, info, on_device)) {
                // SAFETY: `pool_frame` checked this frame as the first
                // (see above).
                learned = unsafe { lender.learn(frame, Some(count)) }?;
                if matches!(learned, Learned::Lent(_) | Learned::NotLendable) {
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
    match learned {
        Learned::New(seen) => {
            gst::debug!(CAT, obj = sink, "{} buffers of {} seen", seen, pool.name())
        }
        Learned::Lent(count) => gst::info!(
            CAT,
            obj = sink,
            "zero copy from now: the {} buffers of {} are the slots",
            count,
            pool.name()
        ),
        Learned::Known | Learned::NotLendable => {}
    }
    Ok(())
}

/// Whether `pool` was configured for `caps`.
pub(super) fn pool_has_caps(pool: &gst::BufferPool, caps: &gst::Caps) -> bool {
    pool.config()
        .params()
        .and_then(|(pool_caps, ..)| pool_caps)
        .is_some_and(|pool_caps| &pool_caps == caps)
}

/// A `GstCudaBufferPool` of `context` (ours) with as many buffers as the
/// lender wants, for GStreamer's CUDA elements upstream to write into.
pub(super) fn lendable_pool(
    context: Option<gstcuda::CudaContext>,
    publisher: &SinkPublisher,
    lender: Option<&Arc<SinkLender>>,
    caps: &gst::Caps,
    info: &gst_video::VideoInfo,
) -> Option<gst::BufferPool> {
    let lender = lender?;
    let device = publisher.config().device.as_ref()?;
    // CUDAIPC_LEND=0: copy instead (to compare, or to rule lending out).
    if !gstcuda::available() || std::env::var_os("CUDAIPC_LEND").is_some_and(|v| v == "0") {
        return None;
    }
    let pool = context
        .filter(|c| c.is_primary_of(device))?
        .new_buffer_pool()?;
    let count = lender.pool_buffers(info.size()) as u32;
    if !video::configure_pool(&pool, caps, info.size() as u32, count, count) {
        gst::debug!(CAT, "{} refused {}", pool.name(), caps);
        return None;
    }
    Some(pool)
}
