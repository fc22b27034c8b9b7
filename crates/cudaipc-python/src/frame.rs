// SPDX-License-Identifier: MPL-2.0

//! A frame read from a channel, as DLPack and CUDA Array Interface
//! objects: the whole frame (packed formats) and each plane.

use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use cudaipc::{VideoFormat, VideoLayout};
use pyo3::exceptions::{PyAttributeError, PyBufferError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::dlpack::{self, DLDevice, Dims, View};
use crate::streams;

/// The frame's slot, held while the Python frame is not released or a
/// DLPack export of it lives. Dropping the last holder gives the slot back,
/// after the work queued so far on the streams the frame was exported to.
pub struct FrameShared {
    source: Source,
    /// `CUstream`s to order the release after.
    streams: Mutex<Vec<usize>>,
}

/// Where a frame's bytes are and who gives them back.
// Inline: it lives in the frame's one `Arc` allocation, and a box would
// add one per frame.
#[allow(clippy::large_enum_variant)]
enum Source {
    /// A frame of a subscriber: its slot goes back when it is dropped.
    Channel(cudaipc::Frame),
    /// A buffer of `rscudaipcsrc` (GStreamer): held through its Python object
    /// (a `Gst.Buffer`, or a read map of one on the host transport); the
    /// source gives the slot back once the buffer's last reference goes,
    /// ordered on `cuda`'s stream.
    Buffer {
        holder: Option<Py<PyAny>>,
        cuda: Option<BufferStream>,
    },
    /// A copy that holds no slot (`Frame.copy()`): complete when made, so
    /// nothing orders its reads or its release.
    Owned(cudaipc::OwnedFrame),
}

/// The stream an `rscudaipcsrc` buffer's frame is read on (its `CudaIpcMeta`).
struct BufferStream {
    device_ordinal: i32,
    stream: usize,
    /// The device, looked up at the first use and kept for the next ones.
    device: OnceLock<cudaipc::CudaDevice>,
}

impl BufferStream {
    fn device(&self) -> Result<&cudaipc::CudaDevice, cudaipc::Error> {
        if let Some(device) = self.device.get() {
            return Ok(device);
        }
        let device = cudaipc::CudaDevice::open(self.device_ordinal)?;
        Ok(self.device.get_or_init(|| device))
    }
}

impl FrameShared {
    fn add_streams(&self, handles: &[usize]) {
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        for &handle in handles {
            if !streams.contains(&handle) {
                streams.push(handle);
            }
        }
    }

    /// Makes `stream` wait on the GPU for the frame's writes.
    ///
    /// # Safety
    /// `stream` is a live `CUstream` of the frame's device.
    unsafe fn wait_on_stream(&self, stream: usize) -> Result<(), cudaipc::Error> {
        let stream = stream as *mut std::ffi::c_void;
        match &self.source {
            // SAFETY: the caller's contract.
            Source::Channel(frame) => unsafe { frame.wait_on_stream(stream) },
            Source::Buffer {
                cuda: Some(ours), ..
            } => unsafe {
                // SAFETY: the caller's; the source's stream lives as long as
                // the buffer, which we hold.
                ours.device()?
                    .order_streams(stream, ours.stream as *mut std::ffi::c_void)
            },
            Source::Buffer { cuda: None, .. } | Source::Owned(_) => Ok(()),
        }
    }

    /// Orders the frame's release after the work queued so far on `stream`.
    ///
    /// # Safety
    /// As for `wait_on_stream`.
    unsafe fn release_after_stream(&self, stream: usize) -> Result<(), cudaipc::Error> {
        let stream = stream as *mut std::ffi::c_void;
        match &self.source {
            // SAFETY: the caller's contract.
            Source::Channel(frame) => unsafe { frame.release_after_stream(stream) },
            // The source's release of the slot (when the buffer goes) is
            // queued on its stream after this wait.
            Source::Buffer {
                cuda: Some(ours), ..
            } => unsafe {
                // SAFETY: as above.
                ours.device()?
                    .order_streams(ours.stream as *mut std::ffi::c_void, stream)
            },
            Source::Buffer { cuda: None, .. } | Source::Owned(_) => Ok(()),
        }
    }

    /// The CUDA device of a frame in device memory.
    fn cuda_device(&self) -> Result<Option<cudaipc::CudaDevice>, cudaipc::Error> {
        match &self.source {
            Source::Channel(frame) => frame.device_ordinal(),
            Source::Buffer { cuda, .. } => cuda.as_ref().map(|ours| ours.device_ordinal),
            Source::Owned(owned) => owned.device_ordinal(),
        }
        .map(cudaipc::CudaDevice::open)
        .transpose()
    }

    /// A copy of the frame (the `layout.frame_size()` bytes at `address`)
    /// that holds no slot. In device memory it is made on `stream` (a
    /// consumer's, live now), which first waits for the frame's writes and
    /// which the release waits for; without one it is waited for on the
    /// host.
    fn copy(
        &self,
        layout: &VideoLayout,
        address: u64,
        stream: Option<usize>,
    ) -> Result<cudaipc::OwnedFrame, cudaipc::Error> {
        if let Source::Channel(frame) = &self.source {
            return match stream {
                None => frame.to_owned_copy(),
                // SAFETY: the consumer's stream, live while it exports.
                Some(stream) => unsafe { frame.to_owned_copy_on_stream(stream as *mut c_void) },
            };
        }
        let Some(device) = self.cuda_device()? else {
            // SAFETY: a frame of `layout` lies at `address` (checked against
            // the buffer's size when the frame was made), in memory that
            // `self` keeps mapped: the read-mapped buffer, or the copy.
            let bytes =
                unsafe { std::slice::from_raw_parts(address as *const u8, layout.frame_size()) };
            return cudaipc::OwnedFrame::from_host(layout.clone(), bytes);
        };
        let on = stream.unwrap_or(streams::LEGACY_DEFAULT);
        // SAFETY: `on` is the consumer's stream, live now, or the legacy
        // default stream; the frame lies at `address` on `device` and stays
        // held until the copy has run: `on` waits for its writes, and its
        // release for `on`.
        let owned = unsafe {
            self.wait_on_stream(on)?;
            let owned = cudaipc::OwnedFrame::copy_of_device(
                &device,
                layout.clone(),
                address,
                on as *mut c_void,
            )?;
            self.release_after_stream(on)?;
            owned
        };
        if stream.is_none() {
            device.synchronize()?;
        }
        Ok(owned)
    }
}

impl FrameShared {
    /// Waits on the host for the work queued on the frame's device, if it
    /// is in device memory.
    fn synchronize_device(&self) -> Result<(), cudaipc::Error> {
        match &self.source {
            Source::Channel(frame) => match frame.device_ordinal() {
                Some(ordinal) => cudaipc::synchronize_device(ordinal),
                None => Ok(()),
            },
            Source::Buffer {
                cuda: Some(ours), ..
            } => ours.device()?.synchronize(),
            // Its memory's drop waits for the device itself.
            Source::Buffer { cuda: None, .. } | Source::Owned(_) => Ok(()),
        }
    }

    /// Orders the release after the work queued so far on the streams the
    /// frame was exported to (and given to `release`), and forgets them:
    /// called at `release()`, while the caller's streams are alive.
    fn order_release(&self) -> Result<(), cudaipc::Error> {
        let streams = std::mem::take(&mut *self.streams.lock().unwrap_or_else(|e| e.into_inner()));
        for stream in streams {
            // SAFETY: a stream a consumer handed to __dlpack__ or release(),
            // in use by its caller at release() (docs/python.md).
            unsafe { self.release_after_stream(stream) }?;
        }
        Ok(())
    }
}

impl Drop for FrameShared {
    fn drop(&mut self) {
        // Streams still listed were never ordered by release(): they may be
        // gone by now (Python frees a stream object and an array in any
        // order), so none is touched; the release waits for the whole
        // context's work instead, on the host. A failure leaves the release
        // ordered after our own stream only: nothing better is left to do in
        // a drop.
        let unordered = !self
            .streams
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty();
        if unordered {
            let _ = self.synchronize_device();
        }
        // The buffer goes now, not at pyo3's next call: a DLPack deleter
        // runs outside pyo3's knowledge of the GIL, which would defer it.
        if let Source::Buffer { holder, .. } = &mut self.source
            && let Some(holder) = holder.take()
        {
            // SAFETY: asks only whether an interpreter is running.
            match unsafe { pyo3::ffi::Py_IsInitialized() } != 0 {
                true => Python::with_gil(|_| drop(holder)),
                // The process is ending: nothing to give back to.
                false => std::mem::forget(holder),
            }
        }
    }
}

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

    fn view(&self, plane: usize) -> PyResult<View> {
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
    fn frame_view(&self) -> PyResult<View> {
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
    fn export(
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
    fn array_interface(
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

/// One plane of a frame, as its own array: (height, width) for luma and
/// I420's chroma, (height / 2, width / 2, 2) for NV12's chroma, the frame's
/// array for packed formats. Exported while its frame is not released.
#[pyclass(module = "cudaipc", frozen)]
pub struct FramePlane {
    frame: Py<Frame>,
    index: usize,
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
