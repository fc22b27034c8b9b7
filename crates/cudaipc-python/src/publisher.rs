// SPDX-License-Identifier: MPL-2.0

//! `cudaipc.Publisher`: creates a channel and publishes DLPack arrays
//! (NumPy, PyTorch, CuPy) into it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use cudaipc::{
    FrameLoan, Published, PublisherOptions, Setting, Transport, VideoFormat, VideoLayout, WhenFull,
};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::dlpack::{self, Consumed, DLDataType};
use crate::errors::{raise, setting_arg, to_py};
use crate::frame::plane_view;
use crate::streams;

/// How long one wait for a slot lasts between checks for Ctrl-C.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// One plane's source array, taken through DLPack.
struct Source {
    /// Keeps the array until the copy is queued (device) or done (host).
    _tensor: Consumed,
    address: u64,
    /// Bytes from one row to the next.
    pitch: usize,
    /// The CUDA device holding it (None: host memory).
    cuda_device: Option<i32>,
}

/// The producer end of a channel, what `rscudaipcsink` is to a pipeline:
/// `rscudaipcsrc` and `cudaipc.Subscriber` read it.
///
/// `Publisher(channel, format, width, height, transport='auto', ...)`:
/// creates the channel for frames of that format and size ('auto': the
/// cuda transport where a CUDA device is usable, else host). `live=True`:
/// frames come at a fixed rate (a camera): consumers keep their own pace
/// (the publisher waits only for `frames='every'` subscribers). `slots`: 0
/// to 64 (0: chosen as rscudaipcsink does); `permissions`: the file mode of
/// the channel's files, 0 to 0o777 (default 0o600); `wait_for_consumers`:
/// 0 to 32; `frame_data_bound`: the bytes of data each frame may carry
/// (`publish(..., data=)`), 0 to 1048576 (default 16384; 0: none); anything
/// else raises InvalidArgumentError (a ValueError) naming it. `close()`, from any thread, wakes a `publish` waiting for a
/// slot, which raises ClosedError.
// Frozen, with its own lock: a thread blocked in `publish` borrows nothing
// that `close()` from another thread needs.
#[pyclass(module = "cudaipc", frozen)]
pub struct Publisher {
    /// None once closed. Locked only to clone or take the publisher, never
    /// across a wait: a `publish` holds its own reference meanwhile.
    inner: Mutex<Option<Arc<cudaipc::Publisher>>>,
    /// Closes it and wakes the waits without the lock.
    closer: cudaipc::Closer,
    is_cuda: bool,
    live: bool,
    layout: VideoLayout,
    channel: String,
}

fn dtype_name(dtype: DLDataType) -> String {
    let kind = match dtype.code {
        0 => "int",
        1 => "uint",
        2 => "float",
        4 => "bfloat",
        5 => "complex",
        6 => "bool",
        _ => "type",
    };
    match dtype.lanes {
        1 => format!("{kind}{}", dtype.bits),
        lanes => format!("{kind}{}x{lanes}", dtype.bits),
    }
}

fn shape_text(shape: &[i64]) -> String {
    let items: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    match items.len() {
        1 => format!("({},)", items[0]),
        _ => format!("({})", items.join(", ")),
    }
}

/// A DLPack capsule of `array`, for reading on `stream` (CUDA arrays).
fn dlpack_capsule<'py>(
    array: &Bound<'py, PyAny>,
    stream: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = array.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item("stream", stream)?;
    kwargs.set_item("max_version", (1, 0))?;
    match array.call_method("__dlpack__", (), Some(&kwargs)) {
        Err(e) if e.is_instance_of::<PyTypeError>(py) => {
            // A producer older than DLPack 1.0 takes no max_version.
            kwargs.del_item("max_version")?;
            array.call_method("__dlpack__", (), Some(&kwargs))
        }
        other => other,
    }
}

impl Publisher {
    fn inner(&self, py: Python<'_>) -> PyResult<Arc<cudaipc::Publisher>> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| self.closed_error(py))
    }

    fn closed_error(&self, py: Python<'_>) -> PyErr {
        raise(
            py,
            "ClosedError",
            format!("the publisher of '{}' was closed", self.channel),
        )
    }

    fn describe(&self) -> String {
        format!(
            "a {}x{} {} frame",
            self.layout.width(),
            self.layout.height(),
            self.layout.format()
        )
    }

    /// Plane `plane`'s array taken through DLPack and checked against the
    /// layout: uint8, the plane's shape, rows contiguous inside.
    fn source(
        &self,
        plane: usize,
        array: &Bound<'_, PyAny>,
        stream: Option<usize>,
    ) -> PyResult<Source> {
        let py = array.py();
        if !array.hasattr("__dlpack__")? {
            return Err(PyTypeError::new_err(format!(
                "publish takes DLPack arrays (NumPy, PyTorch, CuPy), not {}",
                array.get_type().name()?
            )));
        }
        let (device_type, device_id): (i32, i32) =
            array.call_method0("__dlpack_device__")?.extract()?;
        let cuda_device = match device_type {
            dlpack::DEVICE_CPU | dlpack::DEVICE_CUDA_HOST => None,
            dlpack::DEVICE_CUDA => Some(device_id),
            other => {
                return Err(PyValueError::new_err(format!(
                    "{}: expected an array in host or CUDA memory, got DLPack device type {other}",
                    self.describe()
                )));
            }
        };
        let stream = cuda_device.map(|_| stream.unwrap_or(streams::LEGACY_DEFAULT));
        let tensor = Consumed::take(&dlpack_capsule(array, stream)?)?;
        let (_, expected_shape, expected_strides) = plane_view(&self.layout, plane)
            .ok_or_else(|| PyValueError::new_err(format!("no plane {plane}")))?;
        let (shape, strides) = tensor.shape_and_strides();
        let dtype = tensor.tensor().dtype;
        let what = match self.layout.format().plane_count() {
            1 => self.describe(),
            _ => format!("plane {plane} of {}", self.describe()),
        };
        if shape[..] != expected_shape[..] || dtype != DLDataType::U8 {
            let err = PyValueError::new_err(format!(
                "{what}: expected shape {} dtype uint8, got shape {} dtype {}",
                shape_text(&expected_shape),
                shape_text(&shape),
                dtype_name(dtype)
            ));
            drop(tensor);
            return Err(err);
        }
        let row_bytes = self.layout.format().row_bytes(plane, self.layout.width()) as i64;
        let pitch = strides[0];
        // Rows may be padded; inside a row the elements must be contiguous.
        let rows_contiguous = strides[1..] == expected_strides[1..];
        if !rows_contiguous || (pitch < row_bytes && shape[0] > 1) {
            return Err(PyValueError::new_err(format!(
                "{what}: rows must be contiguous (strides (pitch, {})), got strides {} in elements",
                expected_strides[1..]
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                shape_text(&strides)
            )));
        }
        let _ = py;
        Ok(Source {
            address: tensor.address(),
            _tensor: tensor,
            pitch: usize::try_from(pitch.max(row_bytes)).unwrap_or(0),
            cuda_device,
        })
    }

    /// A free slot, waiting for one with the GIL released and Ctrl-C and
    /// `close()` seen (a helper thread waits; this one checks). None when
    /// `when_full='drop'` and none is free.
    fn loan(&self, py: Python<'_>, publisher: &cudaipc::Publisher) -> PyResult<Option<FrameLoan>> {
        let now_only = AtomicBool::new(true);
        let first = py.allow_threads(|| publisher.loan_interruptible(&now_only));
        let result = match first {
            Err(cudaipc::Error::Interrupted) => {
                let stop = AtomicBool::new(false);
                std::thread::scope(|scope| {
                    let (sender, mut receiver) = mpsc::channel();
                    let stop = &stop;
                    scope.spawn(move || {
                        let _ = sender.send(publisher.loan_interruptible(stop));
                    });
                    loop {
                        let received;
                        (receiver, received) = py.allow_threads(move || {
                            let received = receiver.recv_timeout(SIGNAL_CHECK);
                            (receiver, received)
                        });
                        match received {
                            Ok(result) => return Ok(result),
                            Err(mpsc::RecvTimeoutError::Timeout) => {}
                            Err(mpsc::RecvTimeoutError::Disconnected) => {
                                return Err(PyRuntimeError::new_err("the wait for a slot ended"));
                            }
                        }
                        // Closed: the wait would end by itself only once the
                        // channel is, after an eos() grace.
                        let closed = self.closer.is_closed();
                        let signal = match closed {
                            true => Ok(()),
                            false => py.check_signals(),
                        };
                        if closed || signal.is_err() {
                            stop.store(true, Ordering::SeqCst);
                            // A loan made meanwhile goes back when dropped.
                            let _ = py.allow_threads(move || receiver.recv());
                            return signal.map(|()| Err(cudaipc::Error::Closed));
                        }
                    }
                })?
            }
            other => other,
        };
        match result {
            Ok(loan) => Ok(Some(loan)),
            Err(cudaipc::Error::NoFreeSlot) => Ok(None),
            Err(cudaipc::Error::Closed) => Err(self.closed_error(py)),
            Err(e) => Err(to_py(py, e)),
        }
    }
}

#[pymethods]
impl Publisher {
    #[new]
    #[pyo3(signature = (channel, format, width, height, *, transport="auto", ipc_mode="legacy",
                        slots=0, when_full="block", permissions=0o600, wait_for_consumers=0,
                        allowed_users=Vec::new(), allowed_groups=Vec::new(), device=0,
                        strides=None, live=false, frame_data_bound=16384))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        channel: &str,
        format: &str,
        width: u32,
        height: u32,
        transport: &str,
        ipc_mode: &str,
        slots: i64,
        when_full: &str,
        permissions: i64,
        wait_for_consumers: i64,
        allowed_users: Vec<u32>,
        allowed_groups: Vec<u32>,
        device: i32,
        strides: Option<Vec<u32>>,
        live: bool,
        frame_data_bound: i64,
    ) -> PyResult<Self> {
        let parsed: VideoFormat = format.parse().map_err(|e| to_py(py, e))?;
        let layout = match strides {
            None => VideoLayout::new(parsed, width, height),
            Some(strides) => VideoLayout::with_strides(parsed, width, height, &strides),
        }
        .map_err(|e| to_py(py, e))?;
        let transport = match transport {
            "auto" => Transport::Auto,
            "cuda" => Transport::Cuda,
            "host" => Transport::Host,
            other => {
                return Err(PyValueError::new_err(format!(
                    "transport={other:?}: 'auto', 'cuda' or 'host'"
                )));
            }
        };
        let when_full = match when_full {
            "block" => WhenFull::Block,
            "drop" => WhenFull::Drop,
            other => {
                return Err(PyValueError::new_err(format!(
                    "when_full={other:?}: 'block' or 'drop'"
                )));
            }
        };
        let options = PublisherOptions {
            transport,
            ipc_mode: crate::subscriber::parse_ipc_mode(Some(ipc_mode))?.unwrap_or_default(),
            slots: setting_arg(py, Setting::Slots, slots)?,
            when_full,
            permissions: setting_arg(py, Setting::Permissions, permissions)?,
            wait_for_consumers: setting_arg(py, Setting::WaitForConsumers, wait_for_consumers)?,
            allowed_uids: allowed_users,
            allowed_gids: allowed_groups,
            device,
            live,
            frame_data_bound: setting_arg(py, Setting::FrameDataBound, frame_data_bound)?,
        };
        let inner = py
            .allow_threads(|| cudaipc::Publisher::create(channel, layout.clone(), options))
            .map_err(|e| to_py(py, e))?;
        Ok(Self {
            closer: inner.closer(),
            is_cuda: inner.is_cuda(),
            live: inner.is_live(),
            inner: Mutex::new(Some(Arc::new(inner))),
            layout,
            channel: channel.to_owned(),
        })
    }

    /// Copies `frame` into a free slot and publishes it. `frame` is a DLPack
    /// array (NumPy, PyTorch, CuPy) of uint8 in the shape of `shapes[0]`
    /// ((height, width, channels); (height, width) for GRAY8), or for NV12
    /// and I420 a tuple of one array per plane. CUDA arrays are copied on
    /// the GPU, after the work queued so far on `stream` (default: the
    /// legacy default stream), and later work on `stream` waits for the
    /// copy, so the array may be reused there at once. `pts`: the frame's
    /// time in nanoseconds. `data`: what travels with the frame
    /// (`frame.data` of a Subscriber, a `CudaIpcFrameData` meta after
    /// `rscudaipcsrc`): bytes (bytes, bytearray, memoryview), or a dict,
    /// sent as its JSON text (`json.dumps`); at most `frame_data_bound`
    /// less 16 bytes of framing (InvalidArgumentError otherwise). Waits
    /// (Ctrl-C ends the wait) while consumers hold every slot; with
    /// `when_full='drop'` returns False instead. ClosedError once the
    /// publisher was closed (also by `close()` from another thread while
    /// this waits).
    #[pyo3(signature = (frame, *, pts=None, stream=None, data=None))]
    fn publish(
        &self,
        py: Python<'_>,
        frame: &Bound<'_, PyAny>,
        pts: Option<u64>,
        stream: Option<&Bound<'_, PyAny>>,
        data: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let publisher = self.inner(py)?;
        // Before any array is taken: a dict that JSON cannot hold is
        // refused with nothing done.
        let data = crate::frame_data::from_python(data)?;
        let stream = stream.map(streams::handle).transpose()?;
        let planes = self.layout.format().plane_count();
        let arrays: Vec<Bound<'_, PyAny>> =
            if frame.is_instance_of::<PyTuple>() || frame.is_instance_of::<PyList>() {
                frame.try_iter()?.collect::<PyResult<_>>()?
            } else {
                vec![frame.clone()]
            };
        if arrays.len() != planes {
            return Err(PyValueError::new_err(format!(
                "{} has {planes} plane(s): give {}, got {} array(s)",
                self.describe(),
                match planes {
                    1 => "one array".to_owned(),
                    n => format!("a tuple of {n} arrays"),
                },
                arrays.len()
            )));
        }
        let sources = arrays
            .iter()
            .enumerate()
            .map(|(plane, array)| self.source(plane, array, stream))
            .collect::<PyResult<Vec<_>>>()?;
        let on_gpu = sources[0].cuda_device.is_some();
        if sources.iter().any(|s| s.cuda_device.is_some() != on_gpu) {
            return Err(PyValueError::new_err(
                "the planes of a frame are all in host memory or all in CUDA memory",
            ));
        }
        let pts = pts.map(Duration::from_nanos);
        let layout = &self.layout;
        if !publisher.is_cuda() && on_gpu {
            return Err(PyValueError::new_err(format!(
                "the publisher of '{}' has the host transport: it takes arrays in host memory, got one on CUDA device {} (copy it with .cpu() or .get())",
                self.channel,
                sources[0].cuda_device.unwrap_or_default()
            )));
        }
        if publisher.is_cuda() && !on_gpu {
            // Host arrays into device slots: the API's upload.
            let mut bytes = vec![0u8; layout.frame_size()];
            copy_rows_to_host(layout, &sources, &mut bytes);
            let published = match py.allow_threads(|| match &data {
                Some(data) => publisher.publish_with_data(&bytes, pts, data),
                None => publisher.publish(&bytes, pts),
            }) {
                Ok(published) => published,
                Err(cudaipc::Error::Closed) => return Err(self.closed_error(py)),
                Err(e) => return Err(to_py(py, e)),
            };
            return Ok(published == Published::Sent);
        }
        let Some(mut loan) = self.loan(py, &publisher)? else {
            return Ok(false);
        };
        if let Some(data) = &data {
            // Refused: the loan goes back unpublished.
            loan.set_data(data).map_err(|e| to_py(py, e))?;
        }
        if on_gpu {
            let ours = loan.device_ordinal();
            if let Some(other) = sources.iter().find(|s| s.cuda_device != ours) {
                return Err(PyValueError::new_err(format!(
                    "the publisher's slots are on CUDA device {}, the array on device {}",
                    ours.unwrap_or_default(),
                    other.cuda_device.unwrap_or_default()
                )));
            }
            let user_stream = stream.unwrap_or(streams::LEGACY_DEFAULT) as *mut std::ffi::c_void;
            // SAFETY: the caller's stream (live while it publishes), and
            // its arrays, which `user_stream` waits for the copy before
            // reusing.
            let queued = unsafe {
                loan.wait_for_stream(user_stream).and_then(|()| {
                    for (plane, source) in sources.iter().enumerate() {
                        loan.copy_plane_from_device(plane, source.address, source.pitch)?;
                    }
                    loan.make_stream_wait(user_stream)
                })
            };
            queued.map_err(|e| to_py(py, e))?;
        } else {
            let bytes = loan
                .host_bytes_mut()
                .ok_or_else(|| PyRuntimeError::new_err("a host slot without bytes"))?;
            py.allow_threads(|| copy_rows_to_host(layout, &sources, bytes));
        }
        match py.allow_threads(|| loan.publish(pts)) {
            Ok(()) => Ok(true),
            Err(cudaipc::Error::Closed) => Err(self.closed_error(py)),
            Err(e) => Err(to_py(py, e)),
        }
    }

    /// Ends the stream: consumers get an end of stream after the frames
    /// published so far.
    fn eos(&self, py: Python<'_>) -> PyResult<()> {
        self.inner(py)?.eos();
        Ok(())
    }

    /// Closes the channel (after an `eos()`, consumers get up to 5 s to take
    /// what was published first). From any thread: a `publish` waiting in
    /// another thread ends with ClosedError at once. Idempotent.
    fn close(&self, py: Python<'_>) {
        let closer = &self.closer;
        py.allow_threads(|| closer.close());
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
        // A `publish` still returning holds the last reference; it drops it.
        py.allow_threads(move || drop(inner));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving a `with` block ends the stream (unless by an exception) and
    /// closes the channel.
    #[pyo3(signature = (exc_type, _exc=None, _traceback=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        if exc_type.is_none_or(|t| t.is_none())
            && let Ok(inner) = self.inner(py)
        {
            inner.eos();
        }
        self.close(py);
        false
    }

    #[getter]
    fn channel(&self) -> &str {
        &self.channel
    }

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

    /// Bytes from one row to the next, per plane, in the slots.
    #[getter]
    fn strides(&self) -> Vec<u32> {
        self.layout.planes().iter().map(|p| p.stride).collect()
    }

    /// The shape `publish` expects of each plane's array.
    #[getter]
    fn shapes(&self) -> Vec<Vec<i64>> {
        (0..self.layout.format().plane_count())
            .filter_map(|plane| plane_view(&self.layout, plane).map(|(_, shape, _)| shape.to_vec()))
            .collect()
    }

    /// 'cuda' or 'host'.
    #[getter]
    fn transport(&self) -> &'static str {
        match self.is_cuda {
            true => "cuda",
            false => "host",
        }
    }

    /// Whether the channel is live (`live=True`): frames come at a fixed
    /// rate, and subscribers keep their own pace.
    #[getter]
    fn live(&self) -> bool {
        self.live
    }

    /// Consumers attached now.
    #[getter]
    fn consumers(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.inner(py)?.consumer_count())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.closer.is_closed()
    }

    fn __repr__(&self) -> String {
        format!(
            "<cudaipc.Publisher channel={:?} {}>",
            self.channel,
            self.describe()
        )
    }
}

/// Copies each plane's rows from host sources into `dst`, a frame of
/// `layout`.
fn copy_rows_to_host(layout: &VideoLayout, sources: &[Source], dst: &mut [u8]) {
    let format = layout.format();
    for (plane, (placed, source)) in layout.planes().iter().zip(sources).enumerate() {
        let row_bytes = format.row_bytes(plane, layout.width()) as usize;
        let rows = format.rows(plane, layout.height()) as usize;
        for row in 0..rows {
            let at = placed.offset as usize + row * placed.stride as usize;
            let src = (source.address as usize + row * source.pitch) as *const u8;
            // SAFETY: `source` was checked to hold `rows` rows of
            // `row_bytes` at its pitch, and lives (its tensor) meanwhile;
            // the layout's rows lie inside the frame.
            let src = unsafe { std::slice::from_raw_parts(src, row_bytes) };
            dst[at..at + row_bytes].copy_from_slice(src);
        }
    }
}
