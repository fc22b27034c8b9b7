// SPDX-License-Identifier: MPL-2.0

//! Frames over buffers of `rscudaipcsrc` (`cudaipc.from_gst_buffer`): the
//! buffer's layout, and the frame that holds the buffer.

use std::sync::{Arc, Mutex, OnceLock};

use cudaipc::VideoLayout;
use pyo3::prelude::*;

use super::Frame;
use super::shared::{BufferStream, FrameShared, Source};

impl Frame {
    /// A frame over a buffer of `rscudaipcsrc` (see `gst_buffer_frame`).
    fn of_buffer(
        holder: Py<PyAny>,
        layout: VideoLayout,
        address: u64,
        cuda: Option<BufferStream>,
        pts: Option<u64>,
        offset: Option<u64>,
        data: Option<cudaipc::AppData>,
    ) -> Self {
        Self {
            data: data.map(Arc::new),
            layout,
            seq: offset.unwrap_or(0),
            pts,
            missed_before: 0,
            address,
            device_ordinal: cuda.as_ref().map(|c| c.device_ordinal),
            stream: cuda.as_ref().map(|c| c.stream),
            shared: Mutex::new(Some(Arc::new(FrameShared {
                source: Source::Buffer {
                    holder: Some(holder),
                    cuda,
                },
                streams: Mutex::new(Vec::new()),
            }))),
        }
    }
}

/// The layout of a `size`-byte frame of `caps`: GStreamer's default one,
/// or the planes a buffer's `GstVideoMeta` gives (offsets, strides); every
/// row must lie inside the `size` bytes.
fn buffer_layout(
    py: Python<'_>,
    caps: &str,
    planes: Option<(Vec<u64>, Vec<u32>)>,
    size: u64,
) -> PyResult<VideoLayout> {
    let to_py = |e| crate::errors::to_py(py, e);
    let default = VideoLayout::from_caps(caps).map_err(to_py)?;
    let format = default.format();
    let planes = match planes {
        Some((offsets, strides)) => offsets
            .iter()
            .zip(&strides)
            .take(format.plane_count())
            .map(|(&offset, &stride)| cudaipc::Plane { offset, stride })
            .collect(),
        None => default.planes().to_vec(),
    };
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    VideoLayout::with_planes(format, default.width(), default.height(), &planes, size)
        .map_err(to_py)
}

/// The frame of a buffer of `rscudaipcsrc`: what `cudaipc.from_gst_buffer`
/// (cudaipc/_gst.py) read from it with PyGObject. `holder` keeps the
/// buffer (and its slot) until the frame is released and its exports are
/// gone: the `Gst.Buffer` (CUDA memory: `address` is its `CudaIpcMeta`'s
/// `device-ptr`, ordered on `cuda_stream` of `device_id`) or a read map of
/// it (system memory: `address` is the mapped bytes). `app_bytes` and
/// `app_json`: the fields of its `CudaIpcFrameData` meta (the bytes first,
/// as the Rust API reads a frame's data).
#[pyfunction]
#[pyo3(signature = (holder, caps, planes, address, size, device_id, cuda_stream, pts, offset,
                    app_bytes=None, app_json=None))]
#[allow(clippy::too_many_arguments)]
pub fn gst_buffer_frame(
    py: Python<'_>,
    holder: Py<PyAny>,
    caps: &str,
    planes: Option<(Vec<u64>, Vec<u32>)>,
    address: u64,
    size: u64,
    device_id: Option<i32>,
    cuda_stream: Option<u64>,
    pts: Option<u64>,
    offset: Option<u64>,
    app_bytes: Option<Vec<u8>>,
    app_json: Option<String>,
) -> PyResult<Frame> {
    let layout = buffer_layout(py, caps, planes, size)?;
    if address == 0 {
        return Err(crate::errors::raise(
            py,
            "InvalidArgumentError",
            "the buffer's frame is at address 0".into(),
        ));
    }
    let cuda = match (device_id, cuda_stream) {
        (Some(device_ordinal), Some(stream)) => Some(BufferStream {
            device_ordinal,
            stream: stream as usize,
            device: OnceLock::new(),
        }),
        (None, None) => None,
        _ => {
            return Err(crate::errors::raise(
                py,
                "InvalidArgumentError",
                "a frame in CUDA memory needs both its device and its stream".into(),
            ));
        }
    };
    let data = app_bytes
        .map(cudaipc::AppData::Bytes)
        .or(app_json.map(cudaipc::AppData::Json));
    Ok(Frame::of_buffer(
        holder, layout, address, cuda, pts, offset, data,
    ))
}
