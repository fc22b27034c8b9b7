// SPDX-License-Identifier: MPL-2.0

//! `GstCudaMemory` output for GStreamer's CUDA elements. On GStreamer 1.24+
//! the slot itself is wrapped (no copy): the source waits on the host until
//! the producer's frame is written (downstream's filters would otherwise
//! synchronise the host, later), the memory carries a `GstCudaStream` of our
//! context with nothing pending on it, and the slot goes back to the
//! producer when downstream frees the memory, after the GPU work downstream
//! queued on it. On 1.22, or where the slot cannot be wrapped, frames are
//! copied into a `GstCudaBufferPool` (copy.rs).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::CAT;
use crate::gstcuda::{self, ApiLevel, CudaContext, CudaStream, StreamOrdering};
use crate::video;
use cudaipc_transport::cuda::Device;
use cudaipc_transport::{HeldFrame, SlotMemory};

/// How frames reach downstream as `GstCudaMemory`, chosen per caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GstCudaPath {
    /// The slots themselves, wrapped (GStreamer 1.24+).
    WrapSlots,
    /// Copies into a `GstCudaBufferPool`, for the reason given.
    Copy(&'static str),
}

/// Which path the loaded `libgstcuda` and the shared context allow.
pub(super) fn choose_path(api: ApiLevel, context_is_our_primary: bool) -> GstCudaPath {
    if api < ApiLevel::V1_24 {
        GstCudaPath::Copy("GStreamer 1.22 cannot wrap device memory as GstCudaMemory")
    } else if !context_is_our_primary {
        // The slot is mapped in our primary context, and our events order
        // only streams of it.
        GstCudaPath::Copy("the shared GstCudaContext is not the primary context of our device")
    } else {
        GstCudaPath::WrapSlots
    }
}

/// `info` (the caps') with the frame's own plane layout and size, as
/// `gst_cuda_allocator_alloc_wrapped` records it.
pub(super) fn slot_info(
    info: &gst_video::VideoInfo,
    planes: &[(u64, u32)],
    size: u64,
) -> Option<gst_video::VideoInfo> {
    if planes.len() != info.n_planes() as usize {
        return None;
    }
    let offsets: Vec<usize> = planes.iter().map(|p| p.0 as usize).collect();
    let strides: Vec<i32> = planes.iter().map(|p| p.1 as i32).collect();
    gst_video::VideoInfo::builder(info.format(), info.width(), info.height())
        .interlace_mode(info.interlace_mode())
        .flags(info.flags())
        .par(info.par())
        .fps(info.fps())
        .colorimetry(&info.colorimetry())
        .chroma_site(info.chroma_site())
        .offset(&offsets)
        .stride(&strides)
        .size(usize::try_from(size).ok()?)
        .build()
        .ok()
}

/// Wraps slots as `GstCudaMemory` of the shared context, for one
/// negotiation.
pub(super) struct SlotWrapper {
    context: CudaContext,
    /// The stream the wrapped memory carries, ordered after our stream.
    stream: CudaStream,
    ordering: Arc<StreamOrdering>,
    device: Arc<Device>,
    /// A frame whose layout GStreamer cannot describe was logged.
    logged_layout: AtomicBool,
}

impl SlotWrapper {
    /// `None` where GStreamer has no streams (1.22) or cannot make one.
    pub fn new(
        context: CudaContext,
        device: Arc<Device>,
        ordering: Arc<StreamOrdering>,
    ) -> Option<SlotWrapper> {
        let stream = CudaStream::new(&context)?;
        Some(SlotWrapper {
            context,
            stream,
            ordering,
            device,
            logged_layout: AtomicBool::new(false),
        })
    }

    /// A buffer whose memory is `frame`'s slot, laid out as the frame is
    /// (a `GstVideoMeta` where that is not `info`'s default layout). The
    /// frame back when it cannot be wrapped (then it is copied).
    pub fn wrap(
        &self,
        frame: HeldFrame,
        info: &gst_video::VideoInfo,
    ) -> Result<gst::Buffer, Box<HeldFrame>> {
        let SlotMemory::Device(slot) = frame.memory() else {
            return Err(Box::new(frame));
        };
        if slot.device().ordinal() != self.device.ordinal() {
            return Err(Box::new(frame));
        }
        let ptr = slot.ptr();
        let Some(layout) = slot_info(info, &frame.planes, frame.size)
            .filter(|layout| gstcuda::wrappable_layout(layout) && layout.size() <= slot.len())
        else {
            if !self.logged_layout.swap(true, Ordering::Relaxed) {
                gst::debug!(
                    CAT,
                    "copying frames laid out as {:?} ({} bytes): GstCudaMemory cannot describe that layout",
                    frame.planes,
                    frame.size
                );
            }
            return Err(Box::new(frame));
        };
        // The source has the subscriber wait for the producer's writes on
        // the host while it wraps slots, so nothing is pending: GStreamer's
        // readers read at once. Had it only queued the wait on our stream,
        // the memory's stream would be ordered after it and marked pending,
        // and readers of another stream (cudaconvert) would synchronise the
        // host on it: a wait also for the previous frame's reads, which each
        // release orders our stream after, leaving the GPU idle between
        // frames (13a into cudaconvert, H100: 15,366 FPS against 19,902).
        let pending = !frame.is_written();
        if pending
            && let Err(e) = self
                .ordering
                .order_after(&self.stream, &self.device.stream())
        {
            gst::warning!(CAT, "cannot order the wrapped slot's stream: {e}");
            return Err(Box::new(frame));
        }
        let default_layout = frame.planes == video::planes(info);
        let release = SlotRelease {
            frame: Some(frame),
            ordering: self.ordering.clone(),
            device: self.device.clone(),
        };
        let memory = gstcuda::wrap_device_memory(
            &self.context,
            Some((&self.stream, pending)),
            &layout,
            ptr,
            release,
        )
        .map_err(|release| Box::new(release.into_frame()))?;
        let mut buffer = gst::Buffer::new();
        {
            let b = buffer.get_mut().expect("a new buffer");
            b.append_memory(memory);
            if !default_layout {
                // Cannot fail: the layout is the memory's own.
                let _ = video::add_meta(b, &layout, &video::planes(&layout));
            }
        }
        Ok(buffer)
    }
}

/// Owner of a wrapped slot: dropped when GStreamer frees the memory.
struct SlotRelease {
    /// `None` once taken back (the wrap failed).
    frame: Option<HeldFrame>,
    ordering: Arc<StreamOrdering>,
    device: Arc<Device>,
}

impl SlotRelease {
    fn into_frame(mut self) -> HeldFrame {
        self.frame.take().expect("the frame is taken once")
    }
}

impl Drop for SlotRelease {
    fn drop(&mut self) {
        let Some(frame) = self.frame.take() else {
            return;
        };
        // GStreamer's elements drop their input once their reads are queued,
        // often on streams of their own: order the release (recorded on our
        // stream when the frame drops) after all work queued so far in the
        // context, without a host wait.
        if let Err(e) = self.ordering.wait_for_context_work(&self.device.stream()) {
            gst::warning!(
                CAT,
                "cannot order the slot's release after downstream's reads, waiting on the host: {e}"
            );
            let synchronized = self.device.bind().and_then(|()| {
                // SAFETY: the device's primary context is bound; waits for
                // all its streams, GStreamer's included.
                cudaipc_transport::cuda::check("cuCtxSynchronize", unsafe {
                    cudarc::driver::sys::cuCtxSynchronize()
                })
            });
            if let Err(e) = synchronized {
                gst::error!(CAT, "cannot wait for downstream's reads: {e}");
            }
        }
        drop(frame);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(format: gst_video::VideoFormat, width: u32, height: u32) -> gst_video::VideoInfo {
        gst_video::VideoInfo::builder(format, width, height)
            .build()
            .unwrap()
    }

    #[test]
    fn slots_are_wrapped_only_on_1_24_in_our_primary_context() {
        assert_eq!(choose_path(ApiLevel::V1_24, true), GstCudaPath::WrapSlots);
        assert!(matches!(
            choose_path(ApiLevel::V1_22, true),
            GstCudaPath::Copy(why) if why.contains("1.22")
        ));
        assert!(matches!(
            choose_path(ApiLevel::Absent, true),
            GstCudaPath::Copy(_)
        ));
        assert!(matches!(
            choose_path(ApiLevel::V1_24, false),
            GstCudaPath::Copy(why) if why.contains("primary context")
        ));
    }

    #[test]
    fn the_slot_layout_keeps_the_caps_and_takes_the_frames_planes() {
        gst::init().unwrap();
        use gst_video::VideoFormat::*;
        let caps = gst_video::VideoInfo::builder(Nv12, 1920, 1080)
            .fps(gst::Fraction::new(30, 1))
            .build()
            .unwrap();
        // The default layout: wrapped as it is.
        let same = slot_info(&caps, &video::planes(&caps), caps.size() as u64).unwrap();
        assert_eq!(same.offset(), caps.offset());
        assert_eq!(same.stride(), caps.stride());
        assert_eq!(same.fps(), caps.fps());
        assert!(gstcuda::wrappable_layout(&same));
        // A pitch of 2048 for both planes, as a GPU allocator lays it out.
        let pitched = [(0, 2048), (2048 * 1080, 2048)];
        let layout = slot_info(&caps, &pitched, 2048 * 1620).unwrap();
        assert_eq!(layout.stride(), &[2048, 2048]);
        assert_eq!(layout.offset(), &[0, 2048 * 1080]);
        assert_eq!(layout.size(), 2048 * 1620);
        assert!(gstcuda::wrappable_layout(&layout));
        // Per-plane pitches with padding: GStreamer's host copies would
        // misread it, so it is copied.
        let i420 = info(I420, 1000, 100);
        let padded = [(0, 1024), (102_400, 512), (128_000, 512)];
        let layout = slot_info(&i420, &padded, 153_600).unwrap();
        assert!(!gstcuda::wrappable_layout(&layout));
        // Planes that do not match the format: no layout.
        assert!(slot_info(&i420, &pitched, 153_600).is_none());
    }
}
