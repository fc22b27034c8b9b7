// SPDX-License-Identifier: MPL-2.0

//! Out-of-place output: input in read-only memory (a `rscudaipcsrc` slot,
//! memory that other buffers share) is processed into a buffer of our own
//! pool, on the input's device.

use std::sync::Arc;

use gst::prelude::*;
use gst_base::subclass::prelude::*;

use super::imp::{CAT, CudaProcess};
use super::state::State;
use crate::memory::{self, CudaAllocator};
use cudaipc_transport::cuda::Device;

impl CudaProcess {
    /// Our pool for out-of-place output on `device`.
    fn output_pool(
        &self,
        state: &mut State,
        device: &Arc<Device>,
    ) -> Result<gst::BufferPool, gst::ErrorMessage> {
        if let Some((ordinal, pool)) = &state.pool
            && *ordinal == device.ordinal()
        {
            return Ok(pool.clone());
        }
        if let Some((_, old)) = state.pool.take() {
            let _ = old.set_active(false);
        }
        let (Some(caps), Some(info)) = (state.caps.as_ref(), state.info.as_ref()) else {
            return Err(gst::error_msg!(
                gst::CoreError::Negotiation,
                ("No caps before the first frame")
            ));
        };
        let pool = gst_video::VideoBufferPool::new();
        let mut config = pool.config();
        config.set_params(Some(caps), info.size() as u32, 0, 0);
        config.set_allocator(Some(&CudaAllocator::for_device(device)), None);
        config.add_option(gst_video::BUFFER_POOL_OPTION_VIDEO_META.as_str());
        let pool: gst::BufferPool = pool.upcast();
        pool.set_config(config)
            .and_then(|_| pool.set_active(true))
            .map_err(|e| {
                gst::error_msg!(
                    gst::ResourceError::Failed,
                    ("Cannot set up a CUDA buffer pool: {e}")
                )
            })?;
        gst::debug!(
            CAT,
            imp = self,
            "output pool for read-only input on device {}",
            device.ordinal()
        );
        state.pool = Some((device.ordinal(), pool.clone()));
        Ok(pool)
    }

    pub(super) fn new_output_buffer(
        &self,
        input: &gst::BufferRef,
    ) -> Result<gst::Buffer, gst::ErrorMessage> {
        let mut state = self.state.lock().unwrap();
        let Some(mem) = memory::buffer_device_memory(input) else {
            return Err(gst::error_msg!(
                gst::StreamError::Format,
                ("cudaprocess got a buffer that is not CUDA memory of this plugin (CudaIpcMemory)")
            ));
        };
        let pool = self.output_pool(&mut state, &mem.device)?;
        drop(state);
        let mut output = pool.acquire_buffer(None).map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::Failed,
                ("Cannot get an output buffer: {e:?}")
            )
        })?;
        self.parent_copy_metadata(input, output.get_mut().unwrap())
            .map_err(|_| {
                gst::error_msg!(
                    gst::CoreError::Failed,
                    ("Cannot copy the buffer's metadata")
                )
            })?;
        self.state.lock().unwrap().pending_source = Some(input.to_owned());
        Ok(output)
    }
}
