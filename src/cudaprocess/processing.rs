// SPDX-License-Identifier: MPL-2.0

//! A frame's work on the GPU: frame verification, then the operation's
//! kernels (loaded once per device) in place or into a new buffer.

use std::sync::Arc;

use gst::subclass::prelude::*;

use super::imp::{CAT, CudaProcess};
use super::settings::Settings;
use super::state::{Gpu, State};
use super::{Operation, brightness_delta, gamma_table};
use crate::memory;
use crate::pattern;
use crate::pattern::kernels::{self, Planes, ROLE_KEEP, Verifier};
use cudaipc_transport::cuda::{CudaError, Device, DeviceBuffer};

const PROCESS_MODULE: &str = "cudaipc-process";

fn cuda_error(what: &str) -> impl Fn(CudaError) -> gst::ErrorMessage + '_ {
    move |e| gst::error_msg!(gst::StreamError::Failed, ("{what}: {e}"))
}

/// The planes of `buffer` (a frame of `info`) and the device holding them.
fn frame_planes(
    info: &gst_video::VideoInfo,
    buffer: &gst::BufferRef,
) -> Result<(Planes, Arc<Device>), gst::ErrorMessage> {
    let Some(mem) = memory::buffer_device_memory(buffer) else {
        return Err(gst::error_msg!(
            gst::StreamError::Format,
            ("cudaprocess got a buffer that is not CUDA memory of this plugin (CudaIpcMemory)"),
            [
                "buffer {buffer:?} with {} memory block(s)",
                buffer.n_memory()
            ]
        ));
    };
    let layout = pattern::buffer_planes(info, buffer)
        // SAFETY: the buffer's CudaIpcMemory holds `mem.size` bytes and is
        // freed with cuMemFree, which waits for the kernels on it.
        .and_then(|layout| unsafe { Planes::at(info, mem.ptr, mem.size, &layout) })
        .map_err(|e| gst::error_msg!(gst::StreamError::Format, ("Bad frame layout: {e}")))?;
    Ok((layout, mem.device))
}

impl CudaProcess {
    /// `transform_ip`'s work: the frame processed in place, or (out of
    /// place) from `source` into `buf`, a new buffer of our pool.
    pub(super) fn process_frame(
        &self,
        state: &mut State,
        settings: &Settings,
        buf: &gst::BufferRef,
        source: Option<gst::Buffer>,
    ) -> Result<(), gst::ErrorMessage> {
        let (src, dst, device) = {
            let info = state.info.as_ref().ok_or_else(|| {
                gst::error_msg!(
                    gst::CoreError::Negotiation,
                    ("No caps before the first frame")
                )
            })?;
            match &source {
                // Out of place: `buf` is a new buffer of our pool.
                Some(source) => {
                    let (src, device) = frame_planes(info, source)?;
                    (src, frame_planes(info, buf)?.0, device)
                }
                None => {
                    let (planes, device) = frame_planes(info, buf)?;
                    (planes, planes, device)
                }
            }
        };
        self.run(state, settings, src, Some(dst), &device)
    }

    /// `transform_ip_passthrough`'s work (`operation=none`): the frame
    /// verified, when asked, and left as it is.
    pub(super) fn verify_frame(
        &self,
        state: &mut State,
        settings: &Settings,
        buf: &gst::BufferRef,
    ) -> Result<(), gst::ErrorMessage> {
        let (src, device) = {
            let info = state.info.as_ref().ok_or_else(|| {
                gst::error_msg!(
                    gst::CoreError::Negotiation,
                    ("No caps before the first frame")
                )
            })?;
            frame_planes(info, buf)?
        };
        self.run(state, settings, src, None, &device)
    }

    /// The processing kernels for `device`, loaded once.
    fn gpu<'a>(
        &self,
        gpu: &'a mut Option<Gpu>,
        device: &Arc<Device>,
    ) -> Result<&'a mut Gpu, gst::ErrorMessage> {
        if gpu
            .as_ref()
            .is_none_or(|g| g.device.ordinal() != device.ordinal())
        {
            let module = kernels::load(device, PROCESS_MODULE).map_err(|e| {
                gst::error_msg!(
                    gst::LibraryError::Init,
                    ("Cannot build cudaprocess's GPU kernels: {e}")
                )
            })?;
            gst::info!(
                CAT,
                imp = self,
                "processing on CUDA device {} ({})",
                device.ordinal(),
                device.name()
            );
            *gpu = Some(Gpu {
                device: device.clone(),
                module,
                gamma_table: None,
            });
        }
        Ok(gpu.as_mut().unwrap())
    }

    /// Verifies `src` (when asked) and applies the operation from `src`
    /// into `dst` (the same planes: in place; `None`: verify only).
    fn run(
        &self,
        state: &mut State,
        settings: &Settings,
        src: Planes,
        dst: Option<Planes>,
        device: &Arc<Device>,
    ) -> Result<(), gst::ErrorMessage> {
        let geometry = state.geometry;
        if settings.verify {
            if state
                .verifier
                .as_ref()
                .is_none_or(|v| v.device().ordinal() != device.ordinal())
            {
                state.verifier = Some(Verifier::new(device).map_err(|e| {
                    gst::error_msg!(
                        gst::LibraryError::Init,
                        ("Cannot set up frame verification: {e}")
                    )
                })?);
                state.new_sequence = true;
            }
            let verifier = state.verifier.as_ref().unwrap();
            if settings.operation == Operation::Invert
                && let Some(dst) = dst.as_ref()
            {
                // One pass reads, checks and writes the frame.
                let traits = state.traits;
                verifier
                    .check_and_invert(
                        &geometry,
                        &src,
                        dst,
                        traits.all_planes,
                        traits.colour_mask,
                        state.new_sequence,
                    )
                    .map_err(cuda_error("Frame verification failed"))?;
                state.new_sequence = false;
                return Ok(());
            }
            verifier
                .check(&geometry, &src, state.new_sequence)
                .map_err(cuda_error("Frame verification failed"))?;
            state.new_sequence = false;
        }
        let Some(dst) = dst else {
            return Ok(());
        };
        let traits = state.traits;
        let in_place = src == dst;
        let gpu = self.gpu(&mut state.gpu, device)?;
        let (operation, active_planes) = match settings.operation {
            Operation::None => (kernels::Operation::Invert, 0),
            Operation::Invert => (kernels::Operation::Invert, traits.all_planes),
            Operation::Brightness => {
                let delta = brightness_delta(settings.brightness);
                (
                    kernels::Operation::Brightness {
                        amount: delta.unsigned_abs() as u8,
                        darken: delta < 0,
                    },
                    traits.intensity_planes,
                )
            }
            Operation::Gamma => {
                if gpu
                    .gamma_table
                    .as_ref()
                    .is_none_or(|(gamma, _)| *gamma != settings.gamma)
                {
                    let table = DeviceBuffer::new(&gpu.device, 256)
                        .map_err(cuda_error("Cannot allocate the gamma table"))?
                        .into_region();
                    // Synchronises once per gamma change; earlier frames
                    // keep the table they were queued with (stream order).
                    table
                        .upload(&gamma_table(settings.gamma))
                        .map_err(cuda_error("Cannot upload the gamma table"))?;
                    gpu.gamma_table = Some((settings.gamma, table));
                }
                let lut = gpu.gamma_table.as_ref().unwrap().1.ptr();
                (kernels::Operation::Gamma { lut }, traits.intensity_planes)
            }
            Operation::Grayscale => (
                kernels::Operation::Grayscale {
                    roles: traits.grayscale_roles,
                    red_index: traits.red_index,
                },
                traits.all_planes,
            ),
        };
        let nothing_to_do = match operation {
            kernels::Operation::Grayscale { roles, .. } => roles == ROLE_KEEP,
            _ => active_planes == 0,
        };
        if in_place && nothing_to_do {
            return Ok(());
        }
        kernels::process(
            &gpu.module,
            &gpu.device,
            &geometry,
            &src,
            &dst,
            operation,
            active_planes,
            traits.colour_mask,
        )
        .map_err(cuda_error("Frame processing failed"))
    }
}
