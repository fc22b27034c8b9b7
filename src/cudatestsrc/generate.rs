// SPDX-License-Identifier: MPL-2.0

//! Frames generated on the GPU into whatever buffer the frame goes out in:
//! `GstCudaMemory` (in place, or copied from a scratch frame when it is of
//! another CUDA context), the plugin's CUDA memory (on the memory's device),
//! or system memory (generated in scratch, then downloaded).

use super::state::{Gpu, State};
use crate::frame_copy::{self, Source, StreamOf, Target};
use crate::gstcuda::{self, Access, MappedCudaMemory, OrderedAccess};
use crate::memory;
use crate::pattern::kernels::{self, Geometry, Planes};
use crate::pattern::{self, Pattern};
use crate::video;
use cudaipc_transport::cuda::{DeviceBuffer, DeviceRegion};

pub(super) const GENERATE_MODULE: &str = "cudaipc-generate";

fn layout_error(e: String) -> gst::ErrorMessage {
    gst::error_msg!(gst::StreamError::Format, ("Bad frame layout: {e}"))
}

fn copy_error(e: crate::copy_error::FrameCopyError) -> gst::ErrorMessage {
    gst::error_msg!(gst::StreamError::Failed, ("Frame copy failed: {e}"))
}

fn gpu_error(e: cudaipc_transport::cuda::CudaError) -> gst::ErrorMessage {
    gst::error_msg!(gst::StreamError::Failed, ("GPU work failed: {e}"))
}

/// Generates frame `frame` into `scratch` (grown to `size` bytes when
/// smaller), laid out as `layout`: for outputs the kernels cannot write.
#[allow(clippy::too_many_arguments)]
fn generate_in_scratch<'a>(
    scratch: &'a mut Option<DeviceRegion>,
    gpu: &Gpu,
    info: &gst_video::VideoInfo,
    geometry: &Geometry,
    layout: &[(usize, usize)],
    size: usize,
    pattern: Pattern,
    frame: u32,
) -> Result<&'a DeviceRegion, gst::ErrorMessage> {
    if scratch.as_ref().is_none_or(|s| s.len() < size) {
        let region = DeviceBuffer::new(&gpu.device, size)
            .map_err(gpu_error)?
            .into_region();
        // The kernels write every pixel but not the padding at the end of
        // rows, which the download carries too: zeroed once, it is defined
        // (compute-sanitizer's initcheck reported it) and the same in every
        // frame.
        region.memset(0).map_err(gpu_error)?;
        *scratch = Some(region);
    }
    let scratch = scratch.as_ref().unwrap();
    // SAFETY: the scratch region holds at least `size` bytes and stays
    // allocated until the stream has run the kernel (cuMemFree waits).
    let planes = unsafe { Planes::at(info, scratch.ptr(), size, layout) }.map_err(layout_error)?;
    kernels::generate(&gpu.module, &gpu.device, geometry, &planes, pattern, frame)
        .map_err(gpu_error)?;
    Ok(scratch)
}

/// Writes the next frame into `buffer`.
pub(super) fn generate_into(
    state: &mut State,
    buffer: &mut gst::BufferRef,
    pattern: Pattern,
) -> Result<(), gst::ErrorMessage> {
    let State {
        gpu,
        info,
        geometry,
        cuda_memory,
        frames,
        scratch,
        ..
    } = state;
    let (Some(gpu), Some(info)) = (gpu.as_ref(), info.as_ref()) else {
        return Err(gst::error_msg!(
            gst::CoreError::Negotiation,
            ("cudatestsrc produced a frame before it was started and negotiated")
        ));
    };
    // The pattern's frame number wraps at 2^32 (verify expects that).
    let frame = *frames as u32;
    if buffer.n_memory() == 1 && gstcuda::is_cuda_memory(buffer.peek_memory(0)) {
        // GstCudaMemory of GStreamer's CUDA library.
        let stream = gpu.device.stream();
        // Downstream's reads of the memory's last frame may still be
        // queued on its stream: written after them.
        let access = OrderedAccess::begin(
            gpu.ordering.as_ref(),
            buffer.peek_memory(0),
            &stream,
            Access::Write,
        )
        .map_err(gpu_error)?;
        let mapped = MappedCudaMemory::of_buffer(buffer, true).ok_or_else(|| {
            gst::error_msg!(
                gst::StreamError::Failed,
                ("Cannot map the output GstCudaMemory for the GPU")
            )
        })?;
        let layout: Vec<(usize, usize)> = mapped
            .planes
            .iter()
            .map(|&(offset, stride)| (offset as usize, stride as usize))
            .collect();
        if mapped.context.is_primary_of(&gpu.device) {
            // SAFETY: the mapped GstCudaMemory holds `mapped.size` bytes
            // and GStreamer frees it only after a stream sync.
            let planes = unsafe { Planes::at(info, mapped.ptr, mapped.size, &layout) }
                .map_err(layout_error)?;
            kernels::generate(&gpu.module, &gpu.device, geometry, &planes, pattern, frame)
                .map_err(gpu_error)?;
        } else {
            // Memory of another CUDA context: our kernels cannot touch
            // it, a copy can.
            let generated = generate_in_scratch(
                scratch,
                gpu,
                info,
                geometry,
                &pattern::default_planes(info),
                info.size(),
                pattern,
                frame,
            )?;
            let dst = mapped.region().map_err(gpu_error)?;
            // On our stream, which the ordering is about.
            frame_copy::copy_frame(
                info,
                Source::Device(generated),
                &video::planes(info),
                Target::Device(&dst),
                &mapped.planes,
                StreamOf::Source,
            )
            .map_err(copy_error)?;
        }
        drop(mapped);
        // Memory with a stream (1.24+) is pushed with the writes still
        // queued, its readers ordered after them; GStreamer 1.22's CUDA
        // elements take pushed memory as ready.
        access.finish(buffer.peek_memory(0)).map_err(gpu_error)?;
        return Ok(());
    }
    let layout = pattern::buffer_planes(info, buffer).map_err(layout_error)?;
    if *cuda_memory {
        let Some(mem) = memory::buffer_device_memory(buffer) else {
            return Err(gst::error_msg!(
                gst::StreamError::Format,
                ("The output buffer is not CUDA memory of this plugin (CudaIpcMemory)"),
                ["buffer {buffer:?}"]
            ));
        };
        // SAFETY: the buffer's CudaIpcMemory holds `mem.size` bytes and
        // is freed with cuMemFree, which waits for the kernel.
        let planes =
            unsafe { Planes::at(info, mem.ptr, mem.size, &layout) }.map_err(layout_error)?;
        // Downstream's pool may live on another device than ours.
        let module = if mem.device.ordinal() == gpu.device.ordinal() {
            gpu.module.clone()
        } else {
            kernels::load(&mem.device, GENERATE_MODULE).map_err(gpu_error)?
        };
        kernels::generate(&module, &mem.device, geometry, &planes, pattern, frame)
            .map_err(gpu_error)?;
    } else {
        let generated = generate_in_scratch(
            scratch,
            gpu,
            info,
            geometry,
            &layout,
            buffer.size(),
            pattern,
            frame,
        )?;
        let mut map = buffer.map_writable().map_err(|_| {
            gst::error_msg!(gst::ResourceError::Write, ("Cannot map the output buffer"))
        })?;
        let planes: Vec<(u64, u32)> = layout
            .iter()
            .map(|&(offset, stride)| (offset as u64, stride as u32))
            .collect();
        // Synchronises the stream: the price of system memory.
        frame_copy::copy_frame(
            info,
            Source::Device(generated),
            &planes,
            Target::Host(map.as_mut_slice()),
            &planes,
            StreamOf::Source,
        )
        .map_err(copy_error)?;
    }
    Ok(())
}
