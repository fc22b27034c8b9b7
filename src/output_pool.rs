//! Which memory a source produces CUDA frames into, given downstream's answer
//! to the allocation query and the `output-memory` property: one choice for
//! `cudatestsrc` (which writes frames) and `rscudaipcsrc` (which wraps or copies
//! them).

use std::sync::LazyLock;

use gst::prelude::*;

use crate::copy_error::FrameCopyError;
use crate::enums::OutputMemory;
use crate::gstcuda::{self, ContextShare};
use crate::memory::{self, CudaAllocator};
use crate::video;

pub(crate) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "cudaipcoutput",
        gst::DebugColorFlags::empty(),
        Some("Output memory choice of the CUDA sources"),
    )
});

/// A pool with the size, min and max it is used with.
#[derive(Debug, Clone)]
pub(crate) struct SizedPool {
    pub pool: gst::BufferPool,
    pub size: u32,
    pub min: u32,
    pub max: u32,
}

impl SizedPool {
    /// Configures the pool for `caps`; false if it refuses.
    pub fn configure(&self, caps: &gst::Caps) -> bool {
        video::configure_pool(&self.pool, caps, self.size, self.min, self.max)
    }
}

#[derive(Debug)]
pub(crate) enum CudaOutput {
    /// GstCudaMemory of this `GstCudaBufferPool`, configured for the caps:
    /// downstream is an element of GStreamer's CUDA library (or
    /// output-memory=gstcuda asked for it).
    GstCuda(SizedPool),
    /// The plugin's own CUDA memory: downstream's pool of it (rscudaipcsink's
    /// slots, or a pool with a `CudaAllocator`), not yet configured, if it
    /// offers one.
    Plugin(Option<SizedPool>),
}

/// Chooses the memory of CUDA frames for `caps` (CUDA memory) from
/// downstream's answer to the allocation query.
pub(crate) fn choose_cuda_output(
    element: &gst::Element,
    query: &gst::query::Allocation,
    caps: &gst::Caps,
    output_memory: OutputMemory,
    cuda_context: &ContextShare,
) -> Result<CudaOutput, FrameCopyError> {
    let frame_size = gst_video::VideoInfo::from_caps(caps)
        .map_err(|_| FrameCopyError::InvalidCaps { caps: caps.clone() })?
        .size() as u32;
    // rscudaipcsink's slots take our frames without a copy, even where it
    // proposes a GstCudaBufferPool first.
    let slot_pool = match output_memory {
        OutputMemory::GstCuda => None,
        _ => memory::proposed_slot_pool(query),
    };
    let downstream = slot_pool
        .or_else(|| {
            query
                .allocation_pools()
                .next()
                .and_then(|(pool, size, min, max)| Some((pool?, size, min, max)))
        })
        .map(|(pool, size, min, max)| SizedPool {
            pool,
            size: size.max(frame_size),
            min,
            max,
        });
    if output_memory != OutputMemory::CudaIpc && gstcuda::available() {
        if let Some(proposed) = downstream
            .as_ref()
            .filter(|p| gstcuda::is_cuda_buffer_pool(&p.pool))
        {
            if proposed.configure(caps) {
                gst::info!(
                    CAT,
                    obj = element,
                    "GstCudaMemory of {}",
                    proposed.pool.name()
                );
                return Ok(CudaOutput::GstCuda(proposed.clone()));
            }
            gst::warning!(
                CAT,
                obj = element,
                "{} refused {caps}",
                proposed.pool.name()
            );
        }
        if output_memory == OutputMemory::GstCuda {
            let own = cuda_context
                .get()
                .and_then(|ctx| ctx.new_buffer_pool())
                .map(|pool| SizedPool {
                    pool,
                    size: frame_size,
                    min: 0,
                    max: 0,
                })
                .filter(|own| own.configure(caps))
                .ok_or_else(|| FrameCopyError::NoGstCudaPool { caps: caps.clone() })?;
            gst::info!(CAT, obj = element, "GstCudaMemory of our own pool");
            return Ok(CudaOutput::GstCuda(own));
        }
    }
    Ok(CudaOutput::Plugin(
        downstream.filter(|p| holds_plugin_memory(&p.pool, query)),
    ))
}

/// Whether the buffers of downstream's `pool` are this plugin's CUDA memory:
/// the pool's or the query's allocator is a `CudaAllocator`, or it is the slot
/// pool of `rscudaipcsink`.
fn holds_plugin_memory(pool: &gst::BufferPool, query: &gst::query::Allocation) -> bool {
    if pool.type_().name() == memory::SLOT_POOL_TYPE_NAME {
        return true;
    }
    let config_allocator = pool
        .config()
        .allocator()
        .and_then(|(allocator, _)| allocator)
        .is_some_and(|a| a.is::<CudaAllocator>());
    let query_allocator = query
        .allocation_params()
        .next()
        .and_then(|(allocator, _)| allocator)
        .is_some_and(|a| a.is::<CudaAllocator>());
    config_allocator || query_allocator
}
