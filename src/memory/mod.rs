//! CUDA device memory in GStreamer buffers.
//!
//! Buffers with the caps feature `memory:CUDAMemory` produced or accepted by
//! this plugin hold `GstMemory` objects of the allocator `CudaIpcMemory`.
//! Mapping one for reading downloads it (so any element can read it, slowly);
//! applications and elements get the device pointer with [`device_memory`]
//! or from the [`CudaIpcMeta`] custom meta on the buffer.
//!
//! GPU work on such memory is ordered on the plugin's per-device shared
//! stream ([`cudaipc_transport::cuda::Device::stream`]): enqueue kernels that touch it
//! there, or synchronise with it.

mod imp;

pub(crate) use imp::CAT;
pub mod meta;

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::ObjectSubclassIsExt;

use cudaipc_transport::cuda::{CudaError, Device, DeviceBuffer, DeviceRegion};

pub use meta::CudaIpcMeta;

/// The caps feature of buffers in CUDA device memory.
pub const CAPS_FEATURE_CUDA_MEMORY: &str = "memory:CUDAMemory";
/// `GstAllocator::mem_type` of this plugin's CUDA memory.
pub const MEMORY_TYPE: &str = "CudaIpcMemory";

glib::wrapper! {
    /// Allocates and wraps CUDA device memory on one device.
    pub struct CudaAllocator(ObjectSubclass<imp::CudaAllocator>) @extends gst::Allocator, gst::Object;
}

static ALLOCATORS: LazyLock<Mutex<HashMap<i32, CudaAllocator>>> = LazyLock::new(Default::default);

/// Where a `CudaIpcMemory` lives.
#[derive(Debug, Clone)]
pub struct DeviceMemoryInfo {
    /// Device pointer of the memory's first byte (its offset applied).
    pub ptr: u64,
    /// Bytes from `ptr`.
    pub size: usize,
    pub device: Arc<Device>,
}

impl CudaAllocator {
    /// The allocator of `device`, one per device and process.
    pub fn for_device(device: &Arc<Device>) -> CudaAllocator {
        let mut allocators = ALLOCATORS.lock().unwrap();
        allocators
            .entry(device.ordinal())
            .or_insert_with(|| {
                let allocator: CudaAllocator = glib::Object::new();
                allocator.imp().set_device(device.clone());
                // Lives for the whole process, on purpose.
                allocator.set_object_flags(gst::ObjectFlags::MAY_BE_LEAKED);
                allocator
            })
            .clone()
    }

    pub fn device(&self) -> Arc<Device> {
        self.imp().device()
    }

    /// New device memory of `size` bytes (plain `cuMemAlloc`).
    pub fn alloc_device(&self, size: usize) -> Result<gst::Memory, CudaError> {
        let buffer = DeviceBuffer::new(&self.device(), size)?;
        Ok(imp::wrap(self, buffer.into_region(), None, false))
    }

    /// Wraps the device memory of `region` (on this allocator's device)
    /// without copying; the memory keeps the region, and `guard` (a held
    /// frame, say), until it is freed, on whatever thread frees it.
    /// `readonly` memory cannot be mapped for writing (shared frames).
    pub fn wrap(
        &self,
        region: DeviceRegion,
        guard: Option<Box<dyn Any + Send + Sync>>,
        readonly: bool,
    ) -> gst::Memory {
        debug_assert_eq!(region.device().ordinal(), self.device().ordinal());
        imp::wrap(self, region, guard, readonly)
    }
}

/// The device memory behind `memory`, if it is a `CudaIpcMemory`.
pub fn device_memory(memory: &gst::MemoryRef) -> Option<DeviceMemoryInfo> {
    imp::device_memory(memory)
}

/// The device memory behind `memory` as a region that keeps it allocated,
/// for safe copies in and out, if it is a `CudaIpcMemory`.
pub fn device_region(memory: &gst::MemoryRef) -> Option<DeviceRegion> {
    imp::device_region(memory)
}

/// Whether every memory of `buffer` is `CudaIpcMemory`.
pub fn is_cuda_buffer(buffer: &gst::BufferRef) -> bool {
    buffer.n_memory() > 0
        && buffer
            .iter_memories()
            .all(|m| imp::device_memory(m).is_some())
}

/// The device memory of a single-memory buffer.
pub fn buffer_device_memory(buffer: &gst::BufferRef) -> Option<DeviceMemoryInfo> {
    if buffer.n_memory() != 1 {
        return None;
    }
    device_memory(buffer.peek_memory(0))
}

/// The device memory of a single-memory buffer, as a region that keeps it
/// allocated.
pub fn buffer_device_region(buffer: &gst::BufferRef) -> Option<DeviceRegion> {
    if buffer.n_memory() != 1 {
        return None;
    }
    device_region(buffer.peek_memory(0))
}

/// `caps` with the CUDA memory feature on every structure.
pub fn with_cuda_feature(caps: &gst::Caps) -> gst::Caps {
    let mut caps = caps.clone();
    let caps_mut = caps.make_mut();
    for i in 0..caps_mut.size() {
        caps_mut.set_features(i, Some(gst::CapsFeatures::new([CAPS_FEATURE_CUDA_MEMORY])));
    }
    caps
}

/// Whether the first structure of `caps` has the CUDA memory feature.
pub fn caps_are_cuda(caps: &gst::CapsRef) -> bool {
    caps.features(0)
        .is_some_and(|f| f.contains(CAPS_FEATURE_CUDA_MEMORY))
}

/// GType name of the pool `rscudaipcsink` proposes: its buffers are its slots.
pub const SLOT_POOL_TYPE_NAME: &str = "GstRsCudaIpcSlotPool";

/// `rscudaipcsink`'s slot pool among the pools an allocation query proposes
/// (with its size, min and max). It may follow a `GstCudaBufferPool`, which
/// GStreamer's CUDA elements (they take the first pool) write into instead.
pub fn proposed_slot_pool(
    query: &gst::query::Allocation,
) -> Option<(gst::BufferPool, u32, u32, u32)> {
    query.allocation_pools().find_map(|(pool, size, min, max)| {
        let pool = pool?;
        (pool.type_().name() == SLOT_POOL_TYPE_NAME).then_some((pool, size, min, max))
    })
}
