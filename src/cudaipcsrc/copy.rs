// SPDX-License-Identifier: MPL-2.0

//! Copies of a frame out of its slot, for when it is not wrapped: downloads
//! into system memory, GstCudaMemory for GStreamer's CUDA elements, and copies
//! that leave the producer its slot.

use crate::gstcuda::{MappedCudaMemory, Ordered, StreamOrdering};
use crate::memory::{self, CudaIpcMeta};
use crate::transport::{HeldFrame, SlotMemory};
use crate::video;

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
) -> Result<(), String> {
    if let CopyInto::GstCuda(ordering) = into {
        copy_to_gst_cuda(frame, info, buffer, ordering)?;
    } else {
        copy_to_plugin_or_system(frame, info, buffer)?;
    }
    if let Some(copy) = memory::buffer_device_memory(buffer) {
        // A copy in CUDA memory carries the meta as a wrapped slot does, in
        // the default layout of the caps.
        let pitch = video::planes(info).first().map(|p| p.1 as i32).unwrap_or(0);
        CudaIpcMeta::add(
            buffer,
            CudaIpcMeta {
                device_ptr: copy.ptr,
                pitch,
                size: copy.size as u64,
                device_id: copy.device.ordinal(),
            },
        );
    }
    Ok(())
}

fn copy_to_plugin_or_system(
    frame: &HeldFrame,
    info: &gst_video::VideoInfo,
    buffer: &mut gst::BufferRef,
) -> Result<(), String> {
    let planes = video::planes(info);
    match (frame.memory(), memory::buffer_device_memory(buffer)) {
        (SlotMemory::Device(slot), Some(dst)) => {
            // SAFETY: the output buffer holds a frame of `info` in `planes`;
            // the held slot holds `frame.planes`, checked against the slot
            // size by the channel.
            unsafe {
                video::copy_planes_device(
                    &slot.device().stream(),
                    dst.ptr,
                    &planes,
                    slot.ptr(),
                    &frame.planes,
                    info,
                )
            }
            .map_err(|e| e.to_string())?;
        }
        (SlotMemory::Device(slot), None) => {
            let mut map = buffer
                .map_writable()
                .map_err(|_| "cannot map the output buffer")?;
            let size = frame.size as usize;
            if frame.planes == planes && map.len() >= size {
                // Straight into the output buffer.
                slot.download(&mut map[..size]).map_err(|e| e.to_string())?;
            } else {
                let mut whole = vec![0u8; size];
                slot.download(&mut whole).map_err(|e| e.to_string())?;
                video::copy_planes(&whole, &mut map, info, &frame.planes, &planes);
            }
        }
        (SlotMemory::Host { .. }, _) => {
            let mut map = buffer
                .map_writable()
                .map_err(|_| "cannot map the output buffer")?;
            let src = frame.host_bytes().ok_or("the host slot is not mapped")?;
            video::copy_planes(src, &mut map, info, &frame.planes, &planes);
        }
    }
    Ok(())
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
) -> Result<(), String> {
    let SlotMemory::Device(slot) = frame.memory() else {
        return Err("GstCudaMemory output needs the cuda transport".into());
    };
    let stream = slot.device().stream();
    if let Some(ordering) = ordering {
        // The pool's memory may still be read by downstream's work queued on
        // its stream: write after it.
        ordering
            .wait_for_upstream(buffer.peek_memory(0), &stream)
            .map_err(|e| e.to_string())?;
    }
    {
        let dst = MappedCudaMemory::of_buffer(buffer, true)
            .ok_or("the output buffer holds no GstCudaMemory that maps")?;
        // SAFETY: the mapped output holds a frame of `info` in `dst.planes`;
        // the held slot holds `frame.planes`.
        unsafe {
            video::copy_planes_device(
                &stream,
                dst.ptr,
                &dst.planes,
                slot.ptr(),
                &frame.planes,
                info,
            )
        }
        .map_err(|e| e.to_string())?;
    }
    let ordered = match ordering {
        Some(ordering) => ordering
            .order_readers_after(buffer.peek_memory(0), &stream)
            .map_err(|e| e.to_string())?,
        None => Ordered::Unordered,
    };
    if ordered == Ordered::Unordered {
        stream.synchronize().map_err(|e| e.to_string())?;
    }
    Ok(())
}
