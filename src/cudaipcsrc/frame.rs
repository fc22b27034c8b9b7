// SPDX-License-Identifier: MPL-2.0

//! A held frame as a buffer: its slot wrapped (zero copy) or copied out, with
//! the producer's metadata.

use gst::prelude::*;

use super::channel::Output;
use super::copy::{CopyInto, copy_frame};
use crate::memory::{CudaAllocator, CudaIpcMeta};
use crate::video;
use cudaipc_transport::{HeldFrame, SlotMemory};

/// Buffer flags that travel from the producer.
const TRAVELLING_FLAGS: gst::BufferFlags = gst::BufferFlags::DISCONT
    .union(gst::BufferFlags::DELTA_UNIT)
    .union(gst::BufferFlags::HEADER)
    .union(gst::BufferFlags::GAP)
    .union(gst::BufferFlags::DROPPABLE)
    .union(gst::BufferFlags::MARKER)
    .union(gst::BufferFlags::CORRUPTED)
    .union(gst::BufferFlags::NON_DROPPABLE);

/// Which timestamps a buffer gets.
pub(super) enum Timestamps {
    /// The producer's PTS and DTS.
    Producer,
    /// This running time as PTS.
    RunningTime(gst::ClockTime),
    /// None: BaseSrc stamps them (a live source's do-timestamp).
    ByBaseSrc,
}

/// Why a frame did not become a buffer.
pub(super) enum Failure {
    /// The pool to copy into did not give a buffer (flushing, mostly).
    Pool(gst::FlowError),
    Failed(String),
}

/// How a frame became a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Delivery {
    /// Its slot, as this plugin's memory (or shared host memory).
    Slot,
    /// Its slot, as `GstCudaMemory` (GStreamer 1.24+).
    GstCudaSlot,
    /// Copied into this plugin's memory or system memory.
    Copied,
    /// Copied into `GstCudaMemory`.
    GstCudaCopied,
}

/// The buffer of `frame`: its slot wrapped when `wrap` (as `GstCudaMemory`
/// where the output is that and the slot can be), else a copy (the slot is
/// given back once the copy is queued, after it on the GPU).
pub(super) fn to_buffer(
    frame: HeldFrame,
    output: &Output,
    wrap: bool,
    timestamps: Timestamps,
    discont: bool,
) -> Result<(gst::Buffer, Delivery), Failure> {
    let stamp = Stamp::of(&frame, timestamps, discont);
    let frame = match (&output.slot_wrapper, wrap) {
        (Some(wrapper), true) => match wrapper.wrap(frame, &output.info) {
            Ok(mut buffer) => {
                stamp.apply(buffer.get_mut().unwrap());
                return Ok((buffer, Delivery::GstCudaSlot));
            }
            Err(frame) => *frame,
        },
        _ => frame,
    };
    let wrap = wrap && output.gst_cuda_pool.is_none();
    let mut buffer = match (wrap, &output.gst_cuda_pool) {
        (true, _) => gst::Buffer::new(),
        (false, Some(pool)) => pool.acquire_buffer(None).map_err(Failure::Pool)?,
        (false, None) => output
            .copy_pool
            .acquire_buffer(None)
            .map_err(Failure::Pool)?,
    };
    let b = buffer.get_mut().unwrap();
    stamp.apply(b);
    if !wrap {
        let (into, delivery) = match &output.gst_cuda_pool {
            Some(_) => (
                CopyInto::GstCuda(output.ordering.as_deref()),
                Delivery::GstCudaCopied,
            ),
            None => (CopyInto::PluginOrSystem, Delivery::Copied),
        };
        copy_frame(&frame, &output.info, b, into)
            .map_err(|e| Failure::Failed(format!("cannot copy the frame out of its slot: {e}")))?;
        return Ok((buffer, delivery));
    }
    if frame.planes != video::planes(&output.info) {
        video::add_meta(b, &output.info, &frame.planes)
            .map_err(|e| Failure::Failed(format!("cannot describe the frame's layout: {e}")))?;
    }
    let size = frame.size as usize;
    match frame.memory() {
        SlotMemory::Device(slot) => {
            let meta = CudaIpcMeta {
                device_ptr: slot.ptr(),
                pitch: frame.planes.first().map(|p| p.1 as i32).unwrap_or(0),
                size: frame.size,
                device_id: slot.device().ordinal(),
                cuda_stream: slot.device().stream().raw() as u64,
            };
            let allocator = CudaAllocator::for_device(slot.device());
            // A frame larger than the slot's mapping is cut to it (the
            // channel refuses those before they get here).
            let frame_memory = slot.sub(0, size.min(slot.len())).unwrap_or(slot);
            b.append_memory(allocator.wrap(frame_memory, Some(Box::new(frame)), true));
            CudaIpcMeta::add(b, meta);
        }
        SlotMemory::Host(_) => b.append_memory(gst::Memory::from_slice(HostSlot(frame))),
    }
    Ok((buffer, Delivery::Slot))
}

/// Timestamps, offsets and flags of a frame's buffer, taken before the
/// frame goes into it.
struct Stamp {
    pts: Option<gst::ClockTime>,
    dts: Option<gst::ClockTime>,
    set_timestamps: bool,
    duration: Option<gst::ClockTime>,
    offset: u64,
    offset_end: u64,
    flags: gst::BufferFlags,
}

impl Stamp {
    fn of(frame: &HeldFrame, timestamps: Timestamps, discont: bool) -> Stamp {
        let time = |ns: Option<u64>| ns.map(gst::ClockTime::from_nseconds);
        let (pts, dts, set_timestamps) = match timestamps {
            Timestamps::Producer => (time(frame.pts), time(frame.dts), true),
            Timestamps::RunningTime(running_time) => (Some(running_time), None, true),
            Timestamps::ByBaseSrc => (None, None, false),
        };
        let mut flags = gst::BufferFlags::from_bits_truncate(frame.flags) & TRAVELLING_FLAGS;
        if frame.missed_before > 0 || discont {
            flags |= gst::BufferFlags::DISCONT;
        }
        Stamp {
            pts,
            dts,
            set_timestamps,
            duration: time(frame.duration),
            offset: frame.offset,
            offset_end: frame.offset_end,
            flags,
        }
    }

    fn apply(&self, buffer: &mut gst::BufferRef) {
        if self.set_timestamps {
            buffer.set_pts(self.pts);
            buffer.set_dts(self.dts);
        }
        buffer.set_duration(self.duration);
        buffer.set_offset(self.offset);
        buffer.set_offset_end(self.offset_end);
        buffer.set_flags(self.flags);
    }
}

/// A host slot as read-only buffer memory.
struct HostSlot(HeldFrame);

impl AsRef<[u8]> for HostSlot {
    fn as_ref(&self) -> &[u8] {
        self.0.host_bytes().unwrap_or_default()
    }
}
