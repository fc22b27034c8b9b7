// SPDX-License-Identifier: MPL-2.0

//! Device memory wrapped as a `GstCudaMemory` without a copy (GStreamer
//! 1.24's `gst_cuda_allocator_alloc_wrapped`), with the owner that keeps it
//! valid dropped when the memory is freed.

use gst::glib;
use gst::glib::translate::ToGlibPtr;

use super::stream::{CudaStream, CudaStreamHead, TRANSFER_NEED_SYNC, api};
use super::{CAT, CudaContext};

/// Whether `gst_cuda_allocator_alloc_wrapped` describes memory of layout
/// `info` faithfully. It keeps one pitch (`stride[0]`) and `size / pitch`
/// rows of plane 0's width, which its host copies (system-memory maps,
/// `gst_memory_copy`) use for the whole memory: right when every plane has
/// that pitch (as GStreamer's own CUDA memory does) or when plane 0 has no
/// padding (the copy is then contiguous), and when the size is whole rows.
pub fn wrappable_layout(info: &gst_video::VideoInfo) -> bool {
    let pitch = info.stride()[0];
    if pitch <= 0 || info.size() % pitch as usize != 0 {
        return false;
    }
    let row_bytes = info.comp_width(0) as i64 * info.comp_pstride(0) as i64;
    row_bytes == pitch as i64 || info.stride().iter().all(|&s| s == pitch)
}

/// Destroy notify of wrapped memory: drops the owner boxed for it.
///
/// # Safety
/// `data` is a `Box<T>` turned into a raw pointer, passed once.
unsafe extern "C" fn drop_owner<T>(data: glib::ffi::gpointer) {
    // SAFETY: per the contract above.
    let owner = unsafe { Box::from_raw(data as *mut T) };
    // A panic must not unwind into C.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(owner))).is_err() {
        gst::error!(CAT, "releasing wrapped CUDA memory panicked");
    }
}

/// Wraps `size` bytes of device memory at `ptr`, laid out as `info`
/// describes (offsets and strides of the real layout), as a `GstCudaMemory`
/// of `context`, without a copy (GStreamer 1.24+).
///
/// `owner` is dropped when the memory is freed (on whichever thread drops
/// the last reference, with the memory's context current): hand it what
/// keeps `ptr` valid, e.g. a held frame whose drop releases the slot. The
/// memory is read-only (writers in the pipeline copy it first).
///
/// `stream`: the memory's stream, and whether writes are still pending on
/// it. Pending, `NEED_SYNC` is set, so that readers order themselves after
/// it (see the module's notes); the caller orders `stream` after its own
/// writes before pushing ([`StreamOrdering::order_after`](super::StreamOrdering::order_after)). Not pending, or
/// without a stream, the content must be complete when pushed.
///
/// Gives `owner` back when it cannot wrap: GStreamer 1.22, no usable driver,
/// a null pointer, a layout it cannot describe ([`wrappable_layout`]), or a
/// stream of another context.
pub fn wrap_device_memory<T: Send + 'static>(
    context: &CudaContext,
    stream: Option<(&CudaStream, bool)>,
    info: &gst_video::VideoInfo,
    ptr: u64,
    owner: T,
) -> Result<gst::Memory, T> {
    let pending = stream.is_some_and(|(_, pending)| pending);
    let stream = stream.map(|(stream, _)| stream);
    let Some(api) = api() else {
        return Err(owner);
    };
    if ptr == 0 || !wrappable_layout(info) {
        return Err(owner);
    }
    if let Some(stream) = stream {
        // SAFETY: GstCudaStream starts with CudaStreamHead.
        let stream_context = unsafe { (*(stream.raw.as_ptr() as *const CudaStreamHead)).context };
        if stream_context != context.0.to_glib_none().0 {
            gst::warning!(CAT, "not wrapping: the stream is of another context");
            return Err(owner);
        }
    }
    let data = Box::into_raw(Box::new(owner));
    // SAFETY: valid context, stream (or NULL) and info; NULL allocator picks
    // the default one. The call refs what it keeps; on success `drop_owner`
    // is called exactly once, when the memory is freed.
    let raw = unsafe {
        (api.alloc_wrapped)(
            std::ptr::null_mut(),
            context.0.to_glib_none().0,
            stream.map_or(std::ptr::null_mut(), |s| s.raw.as_ptr()),
            info.to_glib_none().0,
            ptr,
            data.cast(),
            Some(drop_owner::<T>),
        )
    };
    if raw.is_null() {
        // SAFETY: not taken by the failed call: reclaim it.
        return Err(*unsafe { Box::from_raw(data) });
    }
    let mut flags = gst::ffi::GST_MEMORY_FLAG_READONLY;
    if pending {
        flags |= TRANSFER_NEED_SYNC;
    }
    // SAFETY: a new memory that only we reference; setting flags before it is
    // shared, then taking the full reference.
    unsafe {
        (*raw).mini_object.flags |= flags;
        Ok(glib::translate::from_glib_full(raw))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

    use gst::prelude::*;

    use super::super::stream::{UpstreamOrder, needs_sync, upstream_order};
    use super::super::{ApiLevel, MappedCudaMemory, Ordered, StreamOrdering, api_level};
    use super::*;

    /// Counts its drops: stands for the held frame whose drop releases a slot.
    struct Owner(Arc<AtomicUsize>);

    impl Drop for Owner {
        fn drop(&mut self) {
            self.0.fetch_add(1, AtomicOrdering::SeqCst);
        }
    }

    fn video_info(format: gst_video::VideoFormat, width: u32, height: u32) -> gst_video::VideoInfo {
        gst_video::VideoInfo::builder(format, width, height)
            .build()
            .unwrap()
    }

    #[test]
    fn layouts_gstreamer_can_describe_are_wrapped() {
        gst::init().unwrap();
        use gst_video::VideoFormat::*;
        // One plane, or planes without row padding: contiguous.
        assert!(wrappable_layout(&video_info(Rgba, 1920, 1080)));
        assert!(wrappable_layout(&video_info(I420, 1920, 1080)));
        assert!(wrappable_layout(&video_info(Nv12, 3840, 2160)));
        // A pitch shared by every plane, as GStreamer's own CUDA memory has:
        // 100 luma rows and 50 chroma rows of 1024 bytes.
        let pitch = 1024;
        let with_pitch = |size| {
            gst_video::VideoInfo::builder(Nv12, 1000, 100)
                .stride(&[pitch, pitch])
                .offset(&[0, pitch as usize * 100])
                .size(size)
                .build()
                .unwrap()
        };
        assert!(wrappable_layout(&with_pitch(150 * pitch as usize)));
        // Not whole rows: GStreamer's host copies would drop the last one.
        assert!(!wrappable_layout(&with_pitch(149 * pitch as usize + 1000)));
        // Padded rows with per-plane pitches: GStreamer's host copies would
        // skip data rows; the source copies instead.
        let padded = gst_video::VideoInfo::builder(I420, 1000, 100)
            .stride(&[1024, 512, 512])
            .offset(&[0, 102_400, 128_000])
            .build()
            .unwrap();
        assert!(!wrappable_layout(&padded));
    }

    #[test]
    fn the_release_notify_drops_the_owner_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let data = Box::into_raw(Box::new(Owner(drops.clone())));
        // SAFETY: a boxed owner, passed once, as the allocator does.
        unsafe { drop_owner::<Owner>(data.cast()) };
        assert_eq!(drops.load(AtomicOrdering::SeqCst), 1);
    }

    #[test]
    fn without_the_1_24_api_wrapping_gives_the_owner_back() {
        gst::init().unwrap();
        if api().is_some() {
            return; // covered by the GPU test below
        }
        let drops = Arc::new(AtomicUsize::new(0));
        // Never dereferenced: the call gives up before using the context.
        let context = CudaContext(gst::Pipeline::new().upcast());
        let info = video_info(gst_video::VideoFormat::Rgba, 64, 64);
        let owner = wrap_device_memory(&context, None, &info, 0x1000, Owner(drops.clone()))
            .expect_err("no 1.24 API here");
        assert_eq!(drops.load(AtomicOrdering::SeqCst), 0, "owner handed back");
        drop(owner);
        assert_eq!(drops.load(AtomicOrdering::SeqCst), 1);
        assert!(CudaStream::new(&context).is_none());
    }

    /// GPU and GStreamer 1.24+: a device buffer wrapped with a stream reads
    /// back in place, carries the stream and NEED_SYNC, orders on the GPU,
    /// and releases its owner when dropped.
    #[test]
    fn wrapped_device_memory_is_read_in_place_and_released() {
        gst::init().unwrap();
        let Some(device) = cudaipc_transport::cuda::gpu_or_skip(
            "wrapped_device_memory_is_read_in_place_and_released",
        ) else {
            return;
        };
        if api_level() < ApiLevel::V1_24 {
            eprintln!(
                "SKIPPED: GStreamer {:?} has no wrapped CUDA memory",
                gst::version()
            );
            return;
        }
        let context = CudaContext::wrap(&device).expect("wrap the primary context");
        let stream = CudaStream::new(&context).expect("a GstCudaStream");
        assert!(!stream.handle().is_null());

        let info = video_info(gst_video::VideoFormat::Rgba, 64, 16);
        let buffer = cudaipc_transport::cuda::DeviceBuffer::new(&device, info.size()).unwrap();
        let ordering = StreamOrdering::new(device.clone());
        let ours = device.stream();
        // Written on our stream, read through GStreamer's stream: the order
        // comes from `order_after` alone (no host sync in between).
        // SAFETY: the buffer holds `info.size()` bytes and outlives the
        // stream's work (it is freed after the host read below).
        unsafe { ours.memset(buffer.ptr(), 0x5a, info.size()) }.unwrap();
        assert_eq!(
            ordering.order_after(&stream, &ours).unwrap(),
            Ordered::OnGpu
        );

        let drops = Arc::new(AtomicUsize::new(0));
        let memory = wrap_device_memory(
            &context,
            Some((&stream, true)),
            &info,
            buffer.ptr(),
            Owner(drops.clone()),
        )
        .unwrap_or_else(|_| panic!("wrapping failed"));
        assert!(super::super::is_cuda_memory(&memory));
        assert!(needs_sync(&memory));
        assert!(memory.flags().contains(gst::MemoryFlags::READONLY));
        match upstream_order(&memory) {
            UpstreamOrder::Pending(s) => assert_eq!(s.handle(), stream.handle()),
            other => panic!("expected a pending stream, got {other:?}"),
        }
        {
            let mapped = MappedCudaMemory::map(&memory, false).unwrap();
            assert_eq!(mapped.ptr, buffer.ptr(), "no copy");
        }
        // A host read downloads on the memory's stream, after our memset.
        {
            let map = memory.map_readable().unwrap();
            assert!(map.iter().all(|&b| b == 0x5a));
        }
        // The sink's calls on such memory order on the GPU.
        let pending = wrap_device_memory(&context, Some((&stream, true)), &info, buffer.ptr(), ())
            .unwrap_or_else(|_| panic!("wrapping failed"));
        assert_eq!(
            ordering.wait_for_upstream(&pending, &ours).unwrap(),
            Ordered::OnGpu
        );
        assert_eq!(
            ordering.wait_for_context_work(&ours).unwrap(),
            Ordered::OnGpu
        );
        assert_eq!(
            ordering.order_readers_after(&pending, &ours).unwrap(),
            Ordered::OnGpu
        );
        assert!(needs_sync(&pending));
        ours.synchronize().unwrap();
        drop(pending);

        assert_eq!(drops.load(AtomicOrdering::SeqCst), 0);
        drop(memory);
        assert_eq!(drops.load(AtomicOrdering::SeqCst), 1, "released on free");
        // Without a stream the memory is unordered (the 1.22 rules).
        let plain = wrap_device_memory(&context, None, &info, buffer.ptr(), ())
            .unwrap_or_else(|_| panic!("wrapping failed"));
        assert!(!needs_sync(&plain));
        assert!(matches!(upstream_order(&plain), UpstreamOrder::Unordered));
        assert_eq!(
            ordering.wait_for_upstream(&plain, &ours).unwrap(),
            Ordered::Unordered
        );
        // Written already (the source waited on the host): the stream, and
        // nothing for readers to wait for, so cudaconvert does not
        // synchronise the host.
        let written = wrap_device_memory(&context, Some((&stream, false)), &info, buffer.ptr(), ())
            .unwrap_or_else(|_| panic!("wrapping failed"));
        assert!(!needs_sync(&written));
        match upstream_order(&written) {
            UpstreamOrder::Ready(s) => assert_eq!(s.handle(), stream.handle()),
            other => panic!("expected a stream with nothing pending, got {other:?}"),
        }
        assert_eq!(
            ordering.wait_for_upstream(&written, &ours).unwrap(),
            Ordered::NothingPending
        );
    }
}
