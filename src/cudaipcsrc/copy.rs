// SPDX-License-Identifier: MPL-2.0

//! Copies of a frame out of its slot, for when it is not wrapped: downloads
//! into system memory, GstCudaMemory for GStreamer's CUDA elements, and copies
//! that leave the producer its slot.

use crate::copy_error::{Buffer, FrameCopyError};
use crate::frame_copy::{self, Source, StreamOf, Target};
use crate::gstcuda::{Access, MappedCudaMemory, OrderedAccess, StreamOrdering};
use crate::memory::{self, CudaIpcMeta};
use crate::video;
use cudaipc_transport::{HeldFrame, SlotMemory};

/// Where a frame is copied to.
pub(super) enum CopyInto<'a> {
    /// The plugin's CUDA memory or system memory.
    PluginOrSystem,
    /// `GstCudaMemory`, whose readers are ordered with this (GStreamer
    /// 1.24+; `None`: synchronised on the host, as on 1.22).
    GstCuda(Option<&'a StreamOrdering>),
}

/// Copies `frame` into `buffer` (of the output memory type), in the caps'
/// default layout. The copy is queued before the frame's read ends (its
/// drop), so the slot is given back after it.
pub(super) fn copy_frame(
    frame: &HeldFrame,
    info: &gst_video::VideoInfo,
    buffer: &mut gst::BufferRef,
    into: CopyInto,
) -> Result<(), FrameCopyError> {
    if let CopyInto::GstCuda(ordering) = into {
        copy_to_gst_cuda(frame, info, buffer, ordering)?;
    } else {
        copy_to_plugin_or_system(frame, info, buffer)?;
    }
    if let Some(copy) = memory::buffer_device_memory(buffer) {
        // A copy in CUDA memory carries the meta as a wrapped slot does, in
        // the default layout of the caps.
        let pitch = video::planes(info).first().map(|p| p.1 as i32).unwrap_or(0);
        // The copy was queued on the slot's stream (StreamOf::Source).
        let cuda_stream = match frame.memory() {
            SlotMemory::Device(slot) => slot.device().stream().raw() as u64,
            SlotMemory::Host(_) => copy.device.stream().raw() as u64,
        };
        CudaIpcMeta::add(
            buffer,
            CudaIpcMeta {
                device_ptr: copy.ptr,
                pitch,
                size: copy.size as u64,
                device_id: copy.device.ordinal(),
                cuda_stream,
            },
        );
    }
    Ok(())
}

fn copy_to_plugin_or_system(
    frame: &HeldFrame,
    info: &gst_video::VideoInfo,
    buffer: &mut gst::BufferRef,
) -> Result<(), FrameCopyError> {
    let planes = video::planes(info);
    let memory = frame.memory();
    let src = match &memory {
        SlotMemory::Device(slot) => Source::Device(slot),
        SlotMemory::Host(_) => {
            Source::Host(frame.host_bytes().ok_or(FrameCopyError::HostSlotUnmapped)?)
        }
    };
    let copy = |target| {
        frame_copy::copy_frame(info, src, &frame.planes, target, &planes, StreamOf::Source)
    };
    if let Some(dst) = memory::buffer_device_region(buffer) {
        return copy(Target::Device(&dst));
    }
    let mut map = buffer
        .map_writable()
        .map_err(|_| FrameCopyError::CannotMap(Buffer::Output))?;
    copy(Target::Host(&mut map))
}

/// Into a buffer of `GstCudaMemory`. Memory with a stream (GStreamer 1.24+)
/// is pushed with the copy still queued, its stream ordered after it;
/// memory without one is complete when this returns, as GStreamer 1.22's
/// CUDA elements take pushed memory as ready.
fn copy_to_gst_cuda(
    frame: &HeldFrame,
    info: &gst_video::VideoInfo,
    buffer: &mut gst::BufferRef,
    ordering: Option<&StreamOrdering>,
) -> Result<(), FrameCopyError> {
    let SlotMemory::Device(slot) = frame.memory() else {
        return Err(FrameCopyError::GstCudaNeedsCuda);
    };
    let stream = slot.device().stream();
    // The pool's memory may still be read by downstream's work queued on
    // its stream: written after it.
    let access = OrderedAccess::begin(ordering, buffer.peek_memory(0), &stream, Access::Write)?;
    {
        let mapped =
            MappedCudaMemory::of_buffer(buffer, true).ok_or(FrameCopyError::NoGstCudaMemory)?;
        let dst = mapped.region()?;
        // On the slot's stream, which the ordering is about.
        frame_copy::copy_frame(
            info,
            Source::Device(&slot),
            &frame.planes,
            Target::Device(&dst),
            &mapped.planes,
            StreamOf::Source,
        )?;
    }
    access.finish(buffer.peek_memory(0))?;
    Ok(())
}
