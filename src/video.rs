// Video formats and frame layouts shared by the elements.

use gst::glib;
use gst_video::VideoFormat;

use crate::copy_error::LayoutError;
use crate::memory::CAPS_FEATURE_CUDA_MEMORY;

/// Formats every element of the plugin handles: 8-bit packed RGB variants,
/// GRAY8, and the two common 8-bit YUV 4:2:0 layouts. The list is the API
/// crate's ([`cudaipc::VideoFormat::ALL`], GStreamer-free), in its order.
pub const FORMATS: [VideoFormat; cudaipc::VideoFormat::ALL.len()] = {
    let mut formats = [VideoFormat::Unknown; cudaipc::VideoFormat::ALL.len()];
    let mut i = 0;
    while i < formats.len() {
        formats[i] = gst_format(cudaipc::VideoFormat::ALL[i]);
        i += 1;
    }
    formats
};

/// A format of the list as GStreamer's enum names it (caps name the two
/// alike: tests/api/api.rs holds them to it).
const fn gst_format(format: cudaipc::VideoFormat) -> VideoFormat {
    use cudaipc::VideoFormat as Api;
    match format {
        Api::Rgb => VideoFormat::Rgb,
        Api::Rgba => VideoFormat::Rgba,
        Api::Bgra => VideoFormat::Bgra,
        Api::Rgbx => VideoFormat::Rgbx,
        Api::Bgrx => VideoFormat::Bgrx,
        Api::Gray8 => VideoFormat::Gray8,
        Api::Nv12 => VideoFormat::Nv12,
        Api::I420 => VideoFormat::I420,
    }
}

/// `video/x-raw` caps of the supported formats, any size and rate; with
/// the CUDA memory feature when `cuda`.
pub fn raw_caps(cuda: bool) -> gst::Caps {
    let builder = gst_video::VideoCapsBuilder::new().format_list(FORMATS);
    if cuda {
        builder.features([CAPS_FEATURE_CUDA_MEMORY]).build()
    } else {
        builder.build()
    }
}

/// CUDA memory caps first (preferred), then system memory.
pub fn any_memory_caps() -> gst::Caps {
    let mut caps = raw_caps(true);
    caps.merge(raw_caps(false));
    caps
}

/// (offset, stride) of each plane.
pub fn planes(info: &gst_video::VideoInfo) -> Vec<(u64, u32)> {
    (0..info.n_planes() as usize)
        .map(|p| (info.offset()[p] as u64, info.stride()[p] as u32))
        .collect()
}

/// Adds a `GstVideoMeta` saying that `buffer` holds a frame of `info` laid
/// out in `planes` ((offset, stride) each): the reader of a frame that is
/// not in the caps' default layout needs it.
pub fn add_meta(
    buffer: &mut gst::BufferRef,
    info: &gst_video::VideoInfo,
    planes: &[(u64, u32)],
) -> Result<(), glib::BoolError> {
    let offsets: Vec<usize> = planes.iter().map(|p| p.0 as usize).collect();
    let strides: Vec<i32> = planes.iter().map(|p| p.1 as i32).collect();
    gst_video::VideoMeta::add_full(
        buffer,
        gst_video::VideoFrameFlags::empty(),
        info.format(),
        info.width(),
        info.height(),
        &offsets,
        &strides,
    )
    .map(|_| ())
}

/// Configures a pool of another element for `caps`, with video meta when it
/// offers that; false if it refuses.
pub fn configure_pool(
    pool: &gst::BufferPool,
    caps: &gst::Caps,
    size: u32,
    min: u32,
    max: u32,
) -> bool {
    use gst::prelude::*;
    let mut config = pool.config();
    config.set_params(Some(caps), size, min, max);
    if pool.has_option(gst_video::BUFFER_POOL_OPTION_VIDEO_META.as_str()) {
        config.add_option(gst_video::BUFFER_POOL_OPTION_VIDEO_META.as_str());
    }
    pool.set_config(config).is_ok()
        || pool
            .config()
            .validate_params(Some(caps), size, min, max)
            .is_ok()
}

/// Bytes of pixel data in one row of `plane` (without padding).
pub fn row_bytes(info: &gst_video::VideoInfo, plane: usize) -> usize {
    let finfo = info.format_info();
    // Planes hold one component each, except packed RGB (plane 0 holds all)
    // and NV12's interleaved chroma (plane 1 holds two).
    let components: Vec<usize> = (0..finfo.n_components() as usize)
        .filter(|&c| finfo.plane()[c] as usize == plane)
        .collect();
    let Some(&first) = components.first() else {
        return 0;
    };
    let width = finfo.scale_width(first as u8, info.width()) as usize;
    width * finfo.pixel_stride()[first] as usize
}

/// Rows in `plane`.
pub fn rows(info: &gst_video::VideoInfo, plane: usize) -> usize {
    let finfo = info.format_info();
    (0..finfo.n_components() as usize)
        .find(|&c| finfo.plane()[c] as usize == plane)
        .map(|c| finfo.scale_height(c as u8, info.height()) as usize)
        .unwrap_or(0)
}

/// Checks that a frame's layout fits in `size` bytes: every row of every
/// plane inside the buffer, strides at least the row width.
pub fn layout_fits(
    info: &gst_video::VideoInfo,
    planes: &[(u64, u32)],
    size: u64,
) -> Result<(), LayoutError> {
    if planes.len() != info.n_planes() as usize {
        return Err(LayoutError::PlaneCount {
            planes: planes.len(),
            caps: info.n_planes() as usize,
        });
    }
    for (p, &(offset, stride)) in planes.iter().enumerate() {
        let row = row_bytes(info, p) as u64;
        let rows = rows(info, p) as u64;
        if (stride as u64) < row {
            return Err(LayoutError::StrideBelowRow {
                plane: p,
                stride,
                row,
            });
        }
        let end = offset
            .checked_add(
                (rows.saturating_sub(1))
                    .checked_mul(stride as u64)
                    .ok_or(LayoutError::Overflow)?,
            )
            .and_then(|e| e.checked_add(row))
            .ok_or(LayoutError::Overflow)?;
        if end > size {
            return Err(LayoutError::BeyondMemory {
                plane: p,
                end,
                size,
            });
        }
    }
    Ok(())
}

/// Copies a frame from one layout of `info` to another (whole when the
/// layouts are the same, row by row otherwise; padding is not copied).
pub fn copy_planes(
    src: &[u8],
    dst: &mut [u8],
    info: &gst_video::VideoInfo,
    src_planes: &[(u64, u32)],
    dst_planes: &[(u64, u32)],
) {
    if src_planes == dst_planes {
        let n = info.size().min(src.len()).min(dst.len());
        dst[..n].copy_from_slice(&src[..n]);
        return;
    }
    for (p, (&(so, ss), &(d_o, ds))) in src_planes.iter().zip(dst_planes).enumerate() {
        let width = row_bytes(info, p);
        for row in 0..rows(info, p) {
            let s = so as usize + row * ss as usize;
            let d = d_o as usize + row * ds as usize;
            dst[d..d + width].copy_from_slice(&src[s..s + width]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_of_supported_formats() {
        gst::init().unwrap();
        let info = gst_video::VideoInfo::builder(VideoFormat::Rgb, 3840, 2160)
            .build()
            .unwrap();
        assert_eq!(info.size(), 24_883_200);
        assert_eq!((row_bytes(&info, 0), rows(&info, 0)), (11520, 2160));
        let nv12 = gst_video::VideoInfo::builder(VideoFormat::Nv12, 64, 48)
            .build()
            .unwrap();
        assert_eq!((row_bytes(&nv12, 1), rows(&nv12, 1)), (64, 24));
        let i420 = gst_video::VideoInfo::builder(VideoFormat::I420, 64, 48)
            .build()
            .unwrap();
        assert_eq!((row_bytes(&i420, 2), rows(&i420, 2)), (32, 24));
        for format in FORMATS {
            let info = gst_video::VideoInfo::builder(format, 320, 240)
                .build()
                .unwrap();
            assert!(
                layout_fits(&info, &planes(&info), info.size() as u64).is_ok(),
                "{format:?}"
            );
            assert!(
                layout_fits(&info, &planes(&info), info.size() as u64 - 1).is_err(),
                "{format:?}"
            );
        }
    }

    #[test]
    fn frames_move_between_layouts_intact() {
        gst::init().unwrap();
        let info = gst_video::VideoInfo::builder(VideoFormat::I420, 6, 4)
            .build()
            .unwrap();
        let tight = planes(&info);
        // Rows padded to 16 bytes, planes one after the other.
        let mut padded = Vec::new();
        let mut offset = 0u64;
        for p in 0..tight.len() {
            padded.push((offset, 16u32));
            offset += 16 * rows(&info, p) as u64;
        }
        let frame: Vec<u8> = (0..info.size()).map(|i| (i * 7 + 3) as u8).collect();
        let mut spread = vec![0xEEu8; offset as usize];
        copy_planes(&frame, &mut spread, &info, &tight, &padded);
        let mut back = vec![0u8; info.size()];
        copy_planes(&spread, &mut back, &info, &padded, &tight);
        for (p, &(offset, stride)) in tight.iter().enumerate() {
            for row in 0..rows(&info, p) {
                let start = offset as usize + row * stride as usize;
                let pixels = start..start + row_bytes(&info, p);
                assert_eq!(back[pixels.clone()], frame[pixels], "plane {p} row {row}");
            }
        }
        // Padding is not pixel data: it stays as it was.
        assert_eq!(spread[6..16], [0xEE; 10]);
    }
}
