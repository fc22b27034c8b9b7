// SPDX-License-Identifier: MPL-2.0

//! The one routine that copies a video frame's planes between host and
//! device memory, in any direction, from any plane layout (offsets and
//! strides) to any other: into a sink's slots, out of a source's slots, out
//! of a test source's scratch frame. Device memory comes only as a
//! `DeviceRegion`, and every layout is checked against the memory it
//! describes, so a bad layout is an error, never an access out of bounds.

use crate::copy_error::{FrameCopyError, Side};
use crate::video;
use cudaipc_transport::cuda::DeviceRegion;

/// Where a frame is read from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    Host(&'a [u8]),
    Device(&'a DeviceRegion),
}

/// Where a frame is written to.
#[derive(Debug)]
pub enum Target<'a> {
    Host(&'a mut [u8]),
    Device(&'a DeviceRegion),
}

/// Whose device's shared stream a device-to-device copy is ordered on: the
/// side the transport orders accesses on (a sink's slot, a source's slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamOf {
    Source,
    Target,
}

/// Copies the frame of `info` laid out in `src_planes` in `src` into `dst`,
/// laid out in `dst_planes` (padding is not copied).
///
/// Copies that touch host memory are done when this returns (an upload
/// waits until the host bytes may be reused, a download until they are
/// there). A device-to-device copy is only enqueued on the shared stream of
/// the device `stream_of` names: synchronise that stream before the source
/// may change or the target is read outside it.
pub fn copy_frame(
    info: &gst_video::VideoInfo,
    src: Source<'_>,
    src_planes: &[(u64, u32)],
    dst: Target<'_>,
    dst_planes: &[(u64, u32)],
    stream_of: StreamOf,
) -> Result<(), FrameCopyError> {
    let src_len = match src {
        Source::Host(bytes) => bytes.len(),
        Source::Device(region) => region.len(),
    };
    let dst_len = match &dst {
        Target::Host(bytes) => bytes.len(),
        Target::Device(region) => region.len(),
    };
    let fits = |side, planes, len: usize| {
        video::layout_fits(info, planes, len as u64)
            .map_err(|error| FrameCopyError::Layout { side, error })
    };
    fits(Side::Source, src_planes, src_len)?;
    fits(Side::Target, dst_planes, dst_len)?;
    match (src, dst) {
        (Source::Host(src), Target::Host(dst)) => {
            video::copy_planes(src, dst, info, src_planes, dst_planes);
        }
        (Source::Host(src), Target::Device(dst)) => {
            let end = frame_end(info, dst_planes);
            if src_planes == dst_planes {
                // `layout_fits` checked both ends against the same layout.
                dst.upload(&src[..end])?;
            } else {
                let mut staging = vec![0u8; end];
                video::copy_planes(src, &mut staging, info, src_planes, dst_planes);
                dst.upload(&staging)?;
            }
        }
        (Source::Device(src), Target::Host(dst)) => {
            let end = frame_end(info, src_planes);
            let src = src.sub(0, end).ok_or(FrameCopyError::SourceBeyondMemory)?;
            if src_planes == dst_planes {
                src.download(&mut dst[..end])?;
            } else {
                let mut staging = vec![0u8; end];
                src.download(&mut staging)?;
                video::copy_planes(&staging, dst, info, src_planes, dst_planes);
            }
        }
        (Source::Device(src), Target::Device(dst)) => {
            let device = match stream_of {
                StreamOf::Source => src.device(),
                StreamOf::Target => dst.device(),
            };
            copy_planes_device(&device.stream(), src, src_planes, dst, dst_planes, info)?;
        }
    }
    Ok(())
}

/// Enqueues on `stream` the copy of every plane between two device
/// regions, each checked against its layout by `layout_fits` beforehand.
fn copy_planes_device(
    stream: &cudaipc_transport::cuda::Stream<'_>,
    src: &DeviceRegion,
    src_planes: &[(u64, u32)],
    dst: &DeviceRegion,
    dst_planes: &[(u64, u32)],
    info: &gst_video::VideoInfo,
) -> Result<(), cudaipc_transport::cuda::CudaError> {
    for (p, (&(src_off, src_stride), &(dst_off, dst_stride))) in
        src_planes.iter().zip(dst_planes).enumerate()
    {
        // SAFETY: the regions' owners keep both memories allocated until
        // the copy has run (freeing device memory waits for the device), and
        // `layout_fits` checked this plane of both layouts against their
        // lengths.
        unsafe {
            stream.copy_2d_device(
                dst.ptr() + dst_off,
                dst_stride as usize,
                src.ptr() + src_off,
                src_stride as usize,
                video::row_bytes(info, p),
                video::rows(info, p),
            )?;
        }
    }
    Ok(())
}

/// One past the last pixel byte of a frame of `info` laid out in `planes`.
fn frame_end(info: &gst_video::VideoInfo, planes: &[(u64, u32)]) -> usize {
    planes
        .iter()
        .enumerate()
        .map(|(p, &(offset, stride))| {
            let rows = video::rows(info, p);
            offset as usize + rows.saturating_sub(1) * stride as usize + video::row_bytes(info, p)
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gst_video::VideoFormat;

    fn padded(info: &gst_video::VideoInfo, stride: u32) -> Vec<(u64, u32)> {
        let mut offset = 0u64;
        (0..info.n_planes() as usize)
            .map(|p| {
                let plane = (offset, stride);
                offset += stride as u64 * video::rows(info, p) as u64;
                plane
            })
            .collect()
    }

    #[test]
    fn host_frames_move_between_layouts() {
        gst::init().unwrap();
        // 8 pixels wide: the default layout has no padding, so every byte
        // is pixel data and must come back.
        let info = gst_video::VideoInfo::builder(VideoFormat::Nv12, 8, 4)
            .build()
            .unwrap();
        let tight = video::planes(&info);
        let wide = padded(&info, 16);
        let frame: Vec<u8> = (0..info.size()).map(|i| (i * 5 + 1) as u8).collect();
        let mut spread = vec![0xAAu8; frame_end(&info, &wide)];
        copy_frame(
            &info,
            Source::Host(&frame),
            &tight,
            Target::Host(&mut spread),
            &wide,
            StreamOf::Target,
        )
        .unwrap();
        assert_eq!(spread[8..16], [0xAA; 8], "padding is left alone");
        let mut back = vec![0u8; info.size()];
        copy_frame(
            &info,
            Source::Host(&spread),
            &wide,
            Target::Host(&mut back),
            &tight,
            StreamOf::Target,
        )
        .unwrap();
        assert_eq!(back, frame);
    }

    #[test]
    fn a_layout_beyond_its_memory_is_an_error() {
        gst::init().unwrap();
        let info = gst_video::VideoInfo::builder(VideoFormat::Rgba, 8, 8)
            .build()
            .unwrap();
        let frame = vec![0u8; info.size()];
        let mut short = vec![0u8; info.size() - 1];
        let planes = video::planes(&info);
        let error = copy_frame(
            &info,
            Source::Host(&frame),
            &planes,
            Target::Host(&mut short),
            &planes,
            StreamOf::Target,
        )
        .unwrap_err()
        .to_string();
        assert!(error.starts_with("target: plane 0 ends at byte"), "{error}");
        let wide = padded(&info, 64);
        let mut big = vec![0u8; 4096];
        let error = copy_frame(
            &info,
            Source::Host(&frame),
            &wide,
            Target::Host(&mut big),
            &planes,
            StreamOf::Target,
        )
        .unwrap_err()
        .to_string();
        assert!(error.starts_with("source:"), "{error}");
    }

    #[test]
    fn frames_cross_between_host_and_device_in_every_direction() {
        gst::init().unwrap();
        let Some(device) = cudaipc_transport::cuda::gpu_or_skip("frame_copy device directions")
        else {
            return;
        };
        let info = gst_video::VideoInfo::builder(VideoFormat::I420, 8, 4)
            .build()
            .unwrap();
        let tight = video::planes(&info);
        let wide = padded(&info, 16);
        let region = |len| {
            cudaipc_transport::cuda::DeviceBuffer::new(&device, len)
                .unwrap()
                .into_region()
        };
        let (dev_wide, dev_tight) = (region(frame_end(&info, &wide)), region(info.size()));
        let frame: Vec<u8> = (0..info.size()).map(|i| (i * 3 + 7) as u8).collect();
        // host (tight) -> device (padded) -> device (tight) -> host.
        let up = Target::Device(&dev_wide);
        copy_frame(
            &info,
            Source::Host(&frame),
            &tight,
            up,
            &wide,
            StreamOf::Target,
        )
        .unwrap();
        let across = Target::Device(&dev_tight);
        let src = Source::Device(&dev_wide);
        copy_frame(&info, src, &wide, across, &tight, StreamOf::Source).unwrap();
        let mut back = vec![0u8; info.size()];
        let down = Target::Host(&mut back);
        copy_frame(
            &info,
            Source::Device(&dev_tight),
            &tight,
            down,
            &tight,
            StreamOf::Target,
        )
        .unwrap();
        assert_eq!(back, frame);
        // device (padded) -> host (tight) directly.
        back.fill(0);
        let down = Target::Host(&mut back);
        copy_frame(&info, src, &wide, down, &tight, StreamOf::Target).unwrap();
        assert_eq!(back, frame);
    }
}
