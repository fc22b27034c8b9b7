// SPDX-License-Identifier: MPL-2.0

//! DLPack and CUDA Array Interface exports: the views of a frame and its
//! planes (`plane_view`), `__dlpack__`'s rules, and `FramePlane`.

use cudaipc::{VideoFormat, VideoLayout};
use pyo3::exceptions::{PyAttributeError, PyBufferError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use super::{Frame, owned_address};
use crate::dlpack::{self, Dims, View};
use crate::streams;

/// The shape and strides (bytes) of plane `plane` of a frame of `layout`,
/// as an array: (height, width, channels) for packed formats, (height,
/// width) for GRAY8, I420's planes and NV12's luma, (height / 2, width / 2,
/// 2) for NV12's interleaved chroma.
pub fn plane_view(layout: &VideoLayout, plane: usize) -> Option<(u64, Dims, Dims)> {
    let format = layout.format();
    let placed = layout.planes().get(plane)?;
    let rows = format.rows(plane, layout.height()) as i64;
    let stride = i64::from(placed.stride);
    let width = i64::from(layout.width());
    let (shape, strides) = match (format, plane) {
        (VideoFormat::Rgb, _) => (Dims::new([rows, width, 3]), Dims::new([stride, 3, 1])),
        (VideoFormat::Rgba | VideoFormat::Bgra | VideoFormat::Rgbx | VideoFormat::Bgrx, _) => {
            (Dims::new([rows, width, 4]), Dims::new([stride, 4, 1]))
        }
        (VideoFormat::Nv12, 1) => (
            Dims::new([rows, format.row_bytes(1, layout.width()) as i64 / 2, 2]),
            Dims::new([stride, 2, 1]),
        ),
        _ => (
            Dims::new([rows, format.row_bytes(plane, layout.width()) as i64]),
            Dims::new([stride, 1]),
        ),
    };
    Some((placed.offset, shape, strides))
}

impl Frame {
    pub(super) fn view(&self, plane: usize) -> PyResult<View> {
        let (offset, shape, strides) = plane_view(&self.layout, plane)
            .ok_or_else(|| PyBufferError::new_err(format!("no plane {plane}")))?;
        Ok(View {
            data: self.address + offset,
            device: self.dl_device(),
            shape,
            strides,
        })
    }

    /// The whole frame's view: packed formats only.
    pub(super) fn frame_view(&self) -> PyResult<View> {
        let format = self.layout.format();
        if format.plane_count() > 1 {
            return Err(PyBufferError::new_err(format!(
                "a {format} frame has {} planes: export each of frame.planes (e.g. y, uv = (np.from_dlpack(p) for p in frame.planes))",
                format.plane_count()
            )));
        }
        self.view(0)
    }

    /// `__dlpack__` of `view`: the rules in docs/python.md.
    pub(super) fn export(
        &self,
        py: Python<'_>,
        view: View,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let shared = self.live()?;
        let ours = self.dl_device();
        if let Some((device_type, device_id)) = dl_device
            && (device_type, device_id) != (ours.device_type, ours.device_id)
        {
            return Err(PyBufferError::new_err(format!(
                "dl_device=({device_type}, {device_id}) asked for, but the frame is on {} device ({}, {}) and is exported on it only",
                self.device_name(),
                ours.device_type,
                ours.device_id
            )));
        }
        // DLPack: None is the legacy default stream, -1 asks for no
        // synchronisation.
        let handle = match (self.device_ordinal, stream.map(|s| (s, s.extract::<i64>()))) {
            (None, _) => None,
            (Some(_), None) => Some(streams::LEGACY_DEFAULT),
            (Some(_), Some((_, Ok(-1)))) => None,
            (Some(_), Some((_, Ok(raw)))) if raw >= 0 => Some(raw as usize),
            (Some(_), Some((s, _))) => Some(streams::handle(s)?),
        };
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        if copy == Some(true) {
            // A copy that holds no slot, made on the consumer's stream
            // (waited for on the host with -1) and freed by the deleter.
            let (layout, address) = (&self.layout, self.address);
            let owned = py
                .allow_threads(|| shared.copy(layout, address, handle))
                .map_err(|e| crate::errors::to_py(py, e))?;
            let view = View {
                data: owned_address(&owned) + (view.data - self.address),
                ..view
            };
            return dlpack::capsule(py, &view, owned, versioned, true);
        }
        if let Some(handle) = handle {
            // SAFETY: the consumer's stream, live while it exports.
            unsafe { shared.wait_on_stream(handle) }.map_err(|e| crate::errors::to_py(py, e))?;
            shared.add_streams(&[handle]);
        }
        dlpack::capsule(py, &view, shared, versioned, false)
    }

    /// The CUDA Array Interface of `view` (the frame's or one plane's).
    /// AttributeError on the host transport, so that `hasattr` says no and
    /// NumPy and CuPy choose DLPack.
    pub(super) fn array_interface(
        &self,
        py: Python<'_>,
        view: impl FnOnce() -> PyResult<View>,
    ) -> PyResult<Py<PyAny>> {
        if self.device_ordinal.is_none() {
            return Err(PyAttributeError::new_err(
                "__cuda_array_interface__: the frame is in host memory (host transport); use DLPack (np.from_dlpack(frame))",
            ));
        }
        self.live()?;
        let view = view()?;
        let dict = PyDict::new(py);
        dict.set_item("shape", PyTuple::new(py, view.shape.iter())?)?;
        dict.set_item("strides", PyTuple::new(py, view.strides.iter())?)?;
        dict.set_item("typestr", "|u1")?;
        dict.set_item("data", (view.data, true))?;
        dict.set_item("version", 3)?;
        // None (a copy, complete): no key, no synchronisation.
        if let Some(stream) = self.stream {
            dict.set_item("stream", stream)?;
        }
        Ok(dict.into_any().unbind())
    }
}

/// One plane of a frame, as its own array: (height, width) for luma and
/// I420's chroma, (height / 2, width / 2, 2) for NV12's chroma, the frame's
/// array for packed formats. Exported while its frame is not released.
#[pyclass(module = "cudaipc", frozen)]
pub struct FramePlane {
    pub(super) frame: Py<Frame>,
    pub(super) index: usize,
}

#[pymethods]
impl FramePlane {
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let frame = self.frame.get();
        let view = frame.view(self.index)?;
        frame.export(py, view, stream, max_version, dl_device, copy)
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        self.frame.get().__dlpack_device__()
    }

    #[getter]
    fn __cuda_array_interface__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let frame = self.frame.get();
        frame.array_interface(py, || frame.view(self.index))
    }

    /// The plane's index in the frame.
    #[getter]
    fn index(&self) -> usize {
        self.index
    }

    /// The array's shape.
    #[getter]
    fn shape(&self) -> PyResult<Vec<i64>> {
        Ok(self.frame.get().view(self.index)?.shape.to_vec())
    }

    /// The frame this plane belongs to.
    #[getter]
    fn frame(&self, py: Python<'_>) -> Py<Frame> {
        self.frame.clone_ref(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "<cudaipc.FramePlane {} of frame {}>",
            self.index,
            self.frame.get().seq
        )
    }
}
