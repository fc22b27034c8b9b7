// SPDX-License-Identifier: MPL-2.0

//! A frame read from a channel, as DLPack and CUDA Array Interface
//! objects: the whole frame (packed formats) and each plane.

use std::sync::{Arc, Mutex};

use cudaipc::VideoLayout;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::dlpack::{self, DLDevice};
use crate::streams;

mod export;
mod gst_buffer;
mod shared;

pub use export::{FramePlane, plane_view};
pub use gst_buffer::gst_buffer_frame;
use shared::{FrameShared, Source};

/// A frame read from a channel. It holds its slot (the producer does not
/// write it again) until it is released: `release()`, the end of a `with`
/// block, or its last reference gone; DLPack exports hold the slot too,
/// until the consumer frees them.
///
/// Packed formats (RGB, RGBA, BGRA, RGBx, BGRx, GRAY8) export the whole
/// frame: `np.from_dlpack(frame)`, `torch.from_dlpack(frame)`,
/// `cupy.from_dlpack(frame)`. NV12 and I420 export each plane:
/// `frame.planes`. To keep a frame, keep a copy, which holds no slot:
/// `np.from_dlpack(frame, copy=True)` or `frame.copy()`.
#[pyclass(module = "cudaipc", frozen)]
pub struct Frame {
    shared: Mutex<Option<Arc<FrameShared>>>,
    layout: VideoLayout,
    seq: u64,
    pts: Option<u64>,
    missed_before: u64,
    /// The host address of the frame's bytes, or its device address.
    address: u64,
    /// The CUDA device (cuda transport).
    device_ordinal: Option<i32>,
    /// The subscriber's stream (cuda transport; None for a copy, complete
    /// when made).
    stream: Option<usize>,
    /// The data published with it, taken out of its slot when it was
    /// handed out (shared with its copies).
    data: Option<Arc<cudaipc::AppData>>,
}

impl Frame {
    pub fn new(frame: cudaipc::Frame) -> Self {
        let address = match frame.device_ptr() {
            Some(ptr) => ptr,
            None => frame.host_bytes().map_or(0, |bytes| bytes.as_ptr() as u64),
        };
        Self {
            layout: frame.layout().clone(),
            seq: frame.seq(),
            pts: frame
                .pts()
                .map(|pts| u64::try_from(pts.as_nanos()).unwrap_or(u64::MAX)),
            missed_before: frame.missed_before(),
            address,
            device_ordinal: frame.device_ordinal(),
            stream: frame.cuda_stream().map(|s| s as usize),
            data: frame.data().map(Arc::new),
            shared: Mutex::new(Some(Arc::new(FrameShared {
                source: Source::Channel(frame),
                streams: Mutex::new(Vec::new()),
            }))),
        }
    }

    /// A frame over `owned`, a copy of `self`.
    fn of_owned(&self, owned: cudaipc::OwnedFrame) -> Self {
        Self {
            layout: self.layout.clone(),
            seq: self.seq,
            pts: self.pts,
            missed_before: self.missed_before,
            address: owned_address(&owned),
            device_ordinal: owned.device_ordinal(),
            stream: None,
            data: self.data.clone(),
            shared: Mutex::new(Some(Arc::new(FrameShared {
                source: Source::Owned(owned),
                streams: Mutex::new(Vec::new()),
            }))),
        }
    }

    fn shared(&self) -> Option<Arc<FrameShared>> {
        self.shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn live(&self) -> PyResult<Arc<FrameShared>> {
        self.shared().ok_or_else(|| {
            PyBufferError::new_err(format!(
                "frame {} was released: its slot went back to the producer",
                self.seq
            ))
        })
    }

    fn dl_device(&self) -> DLDevice {
        match self.device_ordinal {
            Some(ordinal) => DLDevice {
                device_type: dlpack::DEVICE_CUDA,
                device_id: ordinal,
            },
            None => DLDevice {
                device_type: dlpack::DEVICE_CPU,
                device_id: 0,
            },
        }
    }

    fn device_name(&self) -> &'static str {
        match self.device_ordinal {
            Some(_) => "cuda",
            None => "cpu",
        }
    }
}

#[pymethods]
impl Frame {
    /// A DLPack capsule of the frame (packed formats): a read-only uint8
    /// array (height, width, channels), or (height, width) for GRAY8, in
    /// place. `copy=True`: of a copy that holds no slot, the consumer's to
    /// keep and write, freed with the array (on the cuda transport made on
    /// `stream`).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let view = self.frame_view()?;
        self.export(py, view, stream, max_version, dl_device, copy)
    }

    /// (1, 0) on the host transport, (2, ordinal) on the cuda transport.
    fn __dlpack_device__(&self) -> (i32, i32) {
        let device = self.dl_device();
        (device.device_type, device.device_id)
    }

    /// The CUDA Array Interface (v3) of a frame on the cuda transport; its
    /// `stream` is the subscriber's. AttributeError on the host transport.
    #[getter]
    fn __cuda_array_interface__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.array_interface(py, || self.frame_view())
    }

    /// Each plane as its own array object: one for packed formats, (y, uv)
    /// for NV12, (y, u, v) for I420.
    #[getter]
    fn planes(slf: &Bound<'_, Self>) -> PyResult<Py<PyTuple>> {
        let count = slf.get().layout.format().plane_count();
        let planes = (0..count)
            .map(|index| {
                Py::new(
                    slf.py(),
                    FramePlane {
                        frame: slf.clone().unbind(),
                        index,
                    },
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyTuple::new(slf.py(), planes)?.unbind())
    }

    /// The way to keep a frame: a copy of it in memory of this process (host
    /// memory, or a device allocation on the cuda transport), as a Frame
    /// that holds no slot; release this one and the producer may write the
    /// slot again. On the cuda transport the copy is waited for on the
    /// host; `np.from_dlpack(frame, copy=True)` (or `__dlpack__(stream=s,
    /// copy=True)`) copies on the consumer's stream instead.
    fn copy(&self, py: Python<'_>) -> PyResult<Frame> {
        let shared = self.live()?;
        let (layout, address) = (&self.layout, self.address);
        let owned = py
            .allow_threads(|| shared.copy(layout, address, None))
            .map_err(|e| crate::errors::to_py(py, e))?;
        Ok(self.of_owned(owned))
    }

    /// Gives the slot back as soon as no DLPack export of the frame lives,
    /// after the work queued so far on the streams it was exported to and
    /// on `stream` (a stream or a list of them: where CUDA Array Interface
    /// consumers read it). Further exports raise BufferError. Idempotent.
    #[pyo3(signature = (stream=None))]
    fn release(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let handles = match stream {
            Some(stream) => streams::handles(stream)?,
            None => Vec::new(),
        };
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(shared) = shared
            && self.device_ordinal.is_some()
        {
            shared.add_streams(&handles);
            shared
                .order_release()
                .map_err(|e| crate::errors::to_py(py, e))?;
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.release(py, None)?;
        Ok(false)
    }

    /// Whether `release()` was called.
    #[getter]
    fn released(&self) -> bool {
        self.shared().is_none()
    }

    /// The format's caps name: 'RGB', 'RGBA', 'BGRA', 'RGBx', 'BGRx',
    /// 'GRAY8', 'NV12' or 'I420'.
    #[getter]
    fn format(&self) -> &'static str {
        self.layout.format().name()
    }

    #[getter]
    fn width(&self) -> u32 {
        self.layout.width()
    }

    #[getter]
    fn height(&self) -> u32 {
        self.layout.height()
    }

    /// Bytes from one row to the next, per plane.
    #[getter]
    fn strides(&self) -> Vec<u32> {
        self.layout.planes().iter().map(|p| p.stride).collect()
    }

    /// Byte offset of each plane from the start of the frame.
    #[getter]
    fn offsets(&self) -> Vec<u64> {
        self.layout.planes().iter().map(|p| p.offset).collect()
    }

    /// Bytes of the frame in its slot.
    #[getter]
    fn nbytes(&self) -> usize {
        self.layout.frame_size()
    }

    /// Its time in the stream in nanoseconds, as stamped by the producer
    /// (None: none).
    #[getter]
    fn pts(&self) -> Option<u64> {
        self.pts
    }

    /// Its sequence number in the channel.
    #[getter]
    fn seq(&self) -> u64 {
        self.seq
    }

    /// Frames an every-frame subscriber lost right before this one.
    #[getter]
    fn missed_before(&self) -> u64 {
        self.missed_before
    }

    /// The data published with the frame: None (none), bytes, or the dict
    /// a Python producer gave (`publish(..., data=)`; JSON text parsed with
    /// `json.loads`, a new object at each read). A GStreamer producer's
    /// `CudaIpcFrameData` meta arrives here too. Kept with the frame, not
    /// in its slot: readable after `release()`, and copies (`copy()`) have
    /// it.
    #[getter]
    fn data(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.data
            .as_deref()
            .map(|data| crate::frame_data::to_python(py, data, self.seq))
            .transpose()
    }

    /// 'cuda' (cuda transport) or 'cpu' (host transport).
    #[getter]
    fn device(&self) -> &'static str {
        self.device_name()
    }

    /// The CUDA device ordinal (None on the host transport).
    #[getter]
    fn device_id(&self) -> Option<i32> {
        self.device_ordinal
    }

    /// The frame's first byte: a host address in the channel's shared
    /// memory, or a device address.
    #[getter]
    fn address(&self) -> u64 {
        self.address
    }

    /// The subscriber's `CUstream`, ordered after the producer's writes
    /// (None on the host transport, and for a copy: `copy()`).
    #[getter]
    fn stream(&self) -> Option<usize> {
        self.stream
    }

    fn __repr__(&self) -> String {
        format!(
            "<cudaipc.Frame seq={} {} {}x{} on {}{}>",
            self.seq,
            self.layout.format(),
            self.layout.width(),
            self.layout.height(),
            self.device_name(),
            if self.shared().is_none() {
                " released"
            } else {
                ""
            }
        )
    }
}

/// Where an owned copy's bytes start.
fn owned_address(owned: &cudaipc::OwnedFrame) -> u64 {
    match owned.device_ptr() {
        Some(ptr) => ptr,
        None => owned.host_bytes().map_or(0, |bytes| bytes.as_ptr() as u64),
    }
}
