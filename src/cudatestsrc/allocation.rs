// SPDX-License-Identifier: MPL-2.0

//! Where frames are written: a pool of whole frames for system memory;
//! for CUDA memory, downstream's pool (GStreamer's `GstCudaMemory`, or the
//! plugin's memory when downstream proposes it and takes the caps), else
//! a CUDA pool of our own.

use gst::prelude::*;
use gst::subclass::prelude::*;

use super::imp::{CAT, CudaTestSrc};
use crate::memory::{self, CudaAllocator};
use crate::output_pool::{self, CudaOutput, SizedPool};

impl CudaTestSrc {
    /// `decide_allocation`: the pool the frames go out in, set in `query`.
    pub(super) fn choose_pool(
        &self,
        query: &mut gst::query::Allocation,
    ) -> Result<(), gst::LoggableError> {
        let (Some(caps), _) = query.get_owned() else {
            return Err(gst::loggable_error!(CAT, "Allocation query without caps"));
        };
        let info = gst_video::VideoInfo::from_caps(&caps)
            .map_err(|_| gst::loggable_error!(CAT, "Invalid video caps {caps}"))?;
        let frame_size = info.size() as u32;
        if !memory::caps_are_cuda(&caps) {
            // System memory: a pool of whole frames (filled by a download).
            let pool = gst_video::VideoBufferPool::new();
            let mut config = pool.config();
            config.set_params(Some(&caps), frame_size, 0, 0);
            config.add_option(gst_video::BUFFER_POOL_OPTION_VIDEO_META.as_str());
            pool.set_config(config)
                .map_err(|e| gst::loggable_error!(CAT, "Cannot configure a buffer pool: {e}"))?;
            if query.allocation_pools().next().is_some() {
                query.set_nth_allocation_pool(0, Some(&pool), frame_size, 0, 0);
            } else {
                query.add_allocation_pool(Some(&pool), frame_size, 0, 0);
            }
            return Ok(());
        }
        let output_memory = self.settings.lock().unwrap().output_memory;
        let chosen = output_pool::choose_cuda_output(
            self.obj().upcast_ref(),
            query,
            &caps,
            output_memory,
            &self.cuda_context,
        )
        .map_err(|e| gst::loggable_error!(CAT, "{e}"))?;
        let had_pool = query.allocation_pools().next().is_some();
        let downstream = match chosen {
            CudaOutput::GstCuda(chosen) => Some(chosen),
            CudaOutput::Plugin(Some(proposed)) if proposed.configure(&caps) => Some(proposed),
            CudaOutput::Plugin(Some(refused)) => {
                gst::warning!(
                    CAT,
                    imp = self,
                    "{} refused {caps}; using our own CUDA pool",
                    refused.pool.name()
                );
                None
            }
            CudaOutput::Plugin(None) => None,
        };
        if let Some(chosen) = downstream {
            gst::info!(CAT, imp = self, "writing into {}", chosen.pool.name());
            let SizedPool {
                pool,
                size,
                min,
                max,
            } = chosen;
            if had_pool {
                query.set_nth_allocation_pool(0, Some(&pool), size, min, max);
            } else {
                query.add_allocation_pool(Some(&pool), size, min, max);
            }
            return Ok(());
        }
        let device = match &self.state.lock().unwrap().gpu {
            Some(gpu) => gpu.device.clone(),
            None => return Err(gst::loggable_error!(CAT, "Not started")),
        };
        let pool = gst_video::VideoBufferPool::new();
        let mut config = pool.config();
        config.set_params(Some(&caps), frame_size, 0, 0);
        config.set_allocator(Some(&CudaAllocator::for_device(&device)), None);
        config.add_option(gst_video::BUFFER_POOL_OPTION_VIDEO_META.as_str());
        pool.set_config(config)
            .map_err(|e| gst::loggable_error!(CAT, "Cannot configure a CUDA buffer pool: {e}"))?;
        gst::debug!(CAT, imp = self, "using our own CUDA buffer pool");
        if query.allocation_pools().next().is_some() {
            query.set_nth_allocation_pool(0, Some(&pool), frame_size, 0, 0);
        } else {
            query.add_allocation_pool(Some(&pool), frame_size, 0, 0);
        }
        Ok(())
    }
}
