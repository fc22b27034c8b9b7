// SPDX-License-Identifier: MPL-2.0

//! What `render` reads of the buffer it gets, once, for whichever path
//! publishes it (lent, loaned or copied): the frame's channel metadata, the
//! planes its memory holds, and its `GstCudaMemory` mapped on the device
//! when a way first asks for it (then kept until `render` returns: a
//! lendable buffer that is copied is mapped once, not twice).

use std::cell::OnceCell;

use crate::gstcuda::MappedCudaMemory;
use crate::video;
use cudaipc_channel::FrameMeta;

/// The buffer `render` got, and what was read of it.
pub(super) struct Input<'a> {
    pub(super) buffer: &'a gst::Buffer,
    /// The caps' video info.
    pub(super) info: &'a gst_video::VideoInfo,
    /// The channel's metadata of the frame, in the caps' default layout.
    pub(super) meta: FrameMeta,
    /// The planes its `GstVideoMeta` describes.
    meta_planes: Option<Vec<(u64, u32)>>,
    /// The slots are device memory (the cuda transport): a `GstCudaMemory`
    /// is read on the device.
    on_device: bool,
    mapped: OnceCell<Option<MappedCudaMemory<'a>>>,
}

impl<'a> Input<'a> {
    pub(super) fn new(
        buffer: &'a gst::Buffer,
        info: &'a gst_video::VideoInfo,
        on_device: bool,
    ) -> Self {
        Self {
            meta: frame_meta(buffer, info),
            meta_planes: meta_planes(buffer),
            buffer,
            info,
            on_device,
            mapped: OnceCell::new(),
        }
    }

    /// With `data` (its metas and application data) travelling with the
    /// frame.
    pub(super) fn with_frame_data(mut self, data: Vec<u8>) -> Self {
        self.meta.data = data;
        self
    }

    /// Its only memory if that is a `GstCudaMemory` of GStreamer's CUDA
    /// elements, mapped on the device (for reading); `None` on the host
    /// transport.
    pub(super) fn gst_cuda(&self) -> Option<&MappedCudaMemory<'a>> {
        self.mapped
            .get_or_init(|| {
                self.on_device
                    .then(|| MappedCudaMemory::of_buffer(self.buffer, false))
                    .flatten()
            })
            .as_ref()
    }

    /// (offset, stride) of each plane in its memory: its video meta's, else
    /// the `GstCudaMemory`'s own layout, else the caps' default.
    pub(super) fn planes(&self) -> Vec<(u64, u32)> {
        self.meta_planes
            .clone()
            .or_else(|| self.gst_cuda().map(|mapped| mapped.planes.clone()))
            .unwrap_or_else(|| self.meta.planes.clone())
    }

    /// What tells the frame apart as a source to publish again (see
    /// `publish_copy_of`): its only memory, by address, which a reference
    /// to the buffer keeps from being freed or written.
    pub(super) fn source_identity(&self) -> Option<usize> {
        let buffer = self.buffer;
        (buffer.n_memory() == 1).then(|| buffer.peek_memory(0).as_ptr() as usize)
    }
}

/// The channel's metadata of the frame in `buffer`, in the caps' default
/// layout.
fn frame_meta(buffer: &gst::BufferRef, info: &gst_video::VideoInfo) -> FrameMeta {
    FrameMeta {
        size: info.size() as u64,
        pts: buffer.pts().map(|t| t.nseconds()),
        dts: buffer.dts().map(|t| t.nseconds()),
        duration: buffer.duration().map(|t| t.nseconds()),
        offset: buffer.offset(),
        offset_end: buffer.offset_end(),
        flags: buffer.flags().bits(),
        planes: video::planes(info),
        data: Vec::new(),
    }
}

/// (offset, stride) of each plane the buffer's `GstVideoMeta` describes.
fn meta_planes(buffer: &gst::BufferRef) -> Option<Vec<(u64, u32)>> {
    let meta = buffer.meta::<gst_video::VideoMeta>()?;
    Some(
        meta.offset()
            .iter()
            .zip(meta.stride())
            .take(meta.n_planes() as usize)
            .map(|(o, s)| (*o as u64, *s as u32))
            .collect(),
    )
}
