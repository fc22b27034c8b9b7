// SPDX-License-Identifier: MPL-2.0

//! `cudaipc.Subscriber`: attaches to a channel and iterates its frames.

use std::ffi::CString;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cudaipc::{Frames, IpcMode, Setting, SubscriberOptions};
use pyo3::exceptions::{PyRuntimeWarning, PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::{raise, setting_arg, to_py};
use crate::frame::Frame;

/// How long one wait lasts between checks for Ctrl-C (signals): longer
/// than the channel's liveness period (100 ms), which a wait must outlast
/// to check that the producer still lives.
const SIGNAL_CHECK: Duration = Duration::from_millis(250);

pub fn seconds(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    timeout
        .map(|t| {
            Duration::try_from_secs_f64(t)
                .map_err(|_| PyValueError::new_err(format!("a timeout of {t} s")))
        })
        .transpose()
}

pub fn parse_ipc_mode(name: Option<&str>) -> PyResult<Option<IpcMode>> {
    match name {
        None => Ok(None),
        Some("fd") => Ok(Some(IpcMode::Fd)),
        Some("legacy") => Ok(Some(IpcMode::Legacy)),
        Some(other) => Err(PyValueError::new_err(format!(
            "ipc_mode={other:?}: 'fd' or 'legacy'"
        ))),
    }
}

/// The consumer end of a channel, what `rscudaipcsrc` is to a pipeline:
/// reads what `rscudaipcsink` or a `cudaipc.Publisher` publishes.
///
/// `Subscriber(channel, timeout=10.0, frames='auto', hold=None,
/// ipc_mode=None, allowed_producers=(), allowed_groups=(), device=None)`:
/// attaches, waiting up to `timeout` seconds (None: forever) for a producer.
/// `frames`: 'auto' (every frame, at this subscriber's own pace on a live
/// channel), 'every' (every frame; the producer waits for this subscriber)
/// or 'latest'. `hold`: how many frames it keeps while asking for the next
/// (a batch of 8: 7), 0 to 62 (InvalidArgumentError, a ValueError,
/// otherwise); the ring needs `hold + 2` slots (a ring whose depth
/// the producer left to the transport grows to them; one it set raises
/// HoldError at the first frame), and asking for a frame while holding more (or,
/// undeclared, every slot) raises HoldError at once.
/// Iterating gives frames until the producer's end of stream, each within
/// `timeout` (WaitTimeoutError otherwise); iterating again after it ends at
/// once, until the producer starts a new stream. The first frames it misses
/// (`frames_missed`) give one RuntimeWarning. `close()`, from any thread,
/// wakes a wait for a frame, which raises ClosedError.
// Frozen, with its own locks: a thread blocked in a wait borrows nothing
// that `close()` from another thread needs.
#[pyclass(module = "cudaipc", frozen)]
pub struct Subscriber {
    /// None once closed. Locked only with the GIL released: a wait for a
    /// frame holds it.
    inner: Mutex<Option<cudaipc::Subscriber>>,
    /// Wakes that wait without the lock.
    closer: cudaipc::Closer,
    is_cuda: bool,
    /// (format, width, height) of the last frame.
    caps: Mutex<Option<(&'static str, u32, u32)>>,
    channel: String,
    timeout: Option<Duration>,
    frames: Frames,
    /// The Rust subscriber's counts, as of the last frame (they change
    /// only when one is read): read without the lock a wait holds.
    missed: AtomicU64,
    live: AtomicBool,
    /// Whether the missed frames' warning was given.
    warned: AtomicBool,
}

impl Subscriber {
    fn closed_error(&self, py: Python<'_>) -> PyErr {
        raise(
            py,
            "ClosedError",
            format!("the subscriber of '{}' was closed", self.channel),
        )
    }

    /// The warning for the first frames missed: why, and how to get every
    /// frame.
    fn missed_warning(&self) -> String {
        let missed = self.missed.load(Ordering::SeqCst);
        let channel = &self.channel;
        let why = match (self.frames, self.live.load(Ordering::SeqCst)) {
            (Frames::Auto, true) => format!(
                "it fell behind the live producer, which does not wait for frames='auto' subscribers. To get every frame, use cudaipc.Subscriber('{channel}', frames='every'), which makes the producer wait for this subscriber"
            ),
            _ => format!(
                "its producer drops frames when its slots are full (when_full='drop', when-full=drop). To get every frame, give the producer when_full='block' and use cudaipc.Subscriber('{channel}', frames='every')"
            ),
        };
        format!(
            "the subscriber of channel '{channel}' missed {missed} frame{}: {why}. subscriber.frames_missed counts the frames missed; this warning is given once",
            if missed == 1 { "" } else { "s" }
        )
    }
}

#[pymethods]
impl Subscriber {
    #[new]
    #[pyo3(signature = (channel, *, timeout=Some(10.0), frames="auto", hold=None, ipc_mode=None,
                        allowed_producers=Vec::new(), allowed_groups=Vec::new(), device=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        channel: &str,
        timeout: Option<f64>,
        frames: &str,
        hold: Option<i64>,
        ipc_mode: Option<&str>,
        allowed_producers: Vec<u32>,
        allowed_groups: Vec<u32>,
        device: Option<i32>,
    ) -> PyResult<Self> {
        let timeout = seconds(timeout)?;
        let hold = hold
            .map(|hold| setting_arg(py, Setting::Hold, hold))
            .transpose()?;
        let frames = match frames {
            "auto" => Frames::Auto,
            "every" => Frames::Every,
            "latest" => Frames::Latest,
            other => {
                return Err(PyValueError::new_err(format!(
                    "frames={other:?}: 'auto', 'every' or 'latest'"
                )));
            }
        };
        // A deadline beyond what an instant can be is none: forever.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        // Short attaches in a row, to see Ctrl-C between them.
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let options = SubscriberOptions {
                timeout: Some(left.map_or(SIGNAL_CHECK, |left| left.min(SIGNAL_CHECK))),
                frames,
                hold,
                ipc_mode: parse_ipc_mode(ipc_mode)?,
                allowed_producer_uids: allowed_producers.clone(),
                allowed_producer_gids: allowed_groups.clone(),
                device,
            };
            match py.allow_threads(|| cudaipc::Subscriber::attach(channel, options)) {
                Ok(inner) => {
                    return Ok(Self {
                        closer: inner.closer(),
                        is_cuda: inner.is_cuda(),
                        frames,
                        missed: AtomicU64::new(inner.frames_missed()),
                        live: AtomicBool::new(inner.is_live()),
                        warned: AtomicBool::new(false),
                        inner: Mutex::new(Some(inner)),
                        caps: Mutex::new(None),
                        channel: channel.to_owned(),
                        timeout,
                    });
                }
                Err(cudaipc::Error::NoProducer { .. })
                    if left.is_none_or(|left| left > SIGNAL_CHECK) =>
                {
                    py.check_signals()?;
                }
                Err(cudaipc::Error::NoProducer { .. }) => {
                    return Err(raise(
                        py,
                        "NoProducerError",
                        format!(
                            "no producer on channel '{channel}' within {} s (is the channel's name right, and its producer running?); {}",
                            timeout.unwrap_or_default().as_secs_f64(),
                            cudaipc::live_channels_note()
                        ),
                    ));
                }
                Err(e @ cudaipc::Error::PermissionDenied { .. }) => {
                    return Err(raise(
                        py,
                        "ChannelPermissionError",
                        format!(
                            "{e} (allowed_producers={allowed_producers:?}: add the producer's uid to trust it)"
                        ),
                    ));
                }
                Err(e) => return Err(to_py(py, e)),
            }
        }
    }

    /// Waits up to `timeout` seconds (default: the subscriber's; None:
    /// forever) for the next frame. None at the end of the stream, and
    /// again at once, without waiting, at every later call until the
    /// producer starts a new stream (publishes a frame again): that call
    /// returns its first frame. WaitTimeoutError when none came in time;
    /// ProducerGoneError when the producer closed the channel without an
    /// end of stream, or died (its close after an end of stream is None);
    /// ClosedError once the subscriber was closed (also by `close()` from
    /// another thread while this waits).
    #[pyo3(signature = (timeout=-1.0))]
    fn next_frame(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Frame>> {
        let timeout = match timeout {
            Some(t) if t < 0.0 => self.timeout,
            t => seconds(t)?,
        };
        if self.closer.is_closed() {
            return Err(self.closed_error(py));
        }
        // What is left of the timeout, counted down by the waits that ran
        // out: no clock is read for a frame that comes within the first.
        let mut left = timeout;
        loop {
            let wait = left.map_or(SIGNAL_CHECK, |left| left.min(SIGNAL_CHECK));
            let next = py.allow_threads(|| {
                let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
                match inner.as_mut() {
                    Some(inner) => {
                        let next = inner.next_frame(Some(wait));
                        self.missed.store(inner.frames_missed(), Ordering::SeqCst);
                        self.live.store(inner.is_live(), Ordering::SeqCst);
                        next
                    }
                    None => Err(cudaipc::Error::Closed),
                }
            });
            match next {
                Ok(Some(frame)) => {
                    let layout = frame.layout();
                    *self.caps.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some((layout.format().name(), layout.width(), layout.height()));
                    let first_missed =
                        frame.missed_before() > 0 && !self.warned.swap(true, Ordering::SeqCst);
                    let frame = Frame::new(frame);
                    if first_missed {
                        let message = CString::new(self.missed_warning())
                            .unwrap_or_else(|_| c"frames were missed".to_owned());
                        // An error only where warnings are errors (-W error):
                        // the frame then goes back with its slot.
                        PyErr::warn(py, &py.get_type::<PyRuntimeWarning>(), &message, 1)?;
                    }
                    return Ok(Some(frame));
                }
                // After it, the Rust subscriber says so again at once until
                // a new stream starts.
                Ok(None) => return Ok(None),
                Err(cudaipc::Error::Closed) => return Err(self.closed_error(py)),
                Err(cudaipc::Error::Timeout(_)) if left.is_none_or(|left| left > wait) => {
                    left = left.map(|left| left - wait);
                    py.check_signals()?;
                }
                Err(cudaipc::Error::Timeout(_)) => {
                    return Err(raise(
                        py,
                        "WaitTimeoutError",
                        format!(
                            "no frame on channel '{}' within {} s",
                            self.channel,
                            timeout.unwrap_or_default().as_secs_f64()
                        ),
                    ));
                }
                Err(e) => return Err(to_py(py, e)),
            }
        }
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Frame> {
        match self.next_frame(py, Some(-1.0))? {
            Some(frame) => Ok(frame),
            None => Err(PyStopIteration::new_err(())),
        }
    }

    /// Detaches from the channel. Frames still held keep their slots until
    /// released. From any thread: a wait for a frame in another thread
    /// ends with ClosedError. Idempotent.
    fn close(&self, py: Python<'_>) {
        self.closer.close();
        // The wait woken above gives the lock back at once.
        py.allow_threads(|| {
            let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
            drop(inner);
        });
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }

    #[getter]
    fn channel(&self) -> &str {
        &self.channel
    }

    /// 'cuda' or 'host': where the channel's frames are.
    #[getter]
    fn transport(&self) -> &'static str {
        match self.is_cuda {
            true => "cuda",
            false => "host",
        }
    }

    /// (format, width, height) of the last frame (None before the first).
    #[getter]
    fn caps(&self) -> Option<(&'static str, u32, u32)> {
        *self.caps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.closer.is_closed()
    }

    /// Frames this subscriber missed so far: on a live channel, those it
    /// fell too far behind to take (`frames='auto'`); with a producer that
    /// drops (`when_full='drop'`), those overwritten before it took them.
    /// Each frame's `missed_before` says how many came right before it.
    /// `frames='every'` gets every frame (the producer then waits).
    #[getter]
    fn frames_missed(&self) -> u64 {
        self.missed.load(Ordering::SeqCst)
    }

    /// Whether the channel is live: its producer is paced (a camera, a
    /// clock, `Publisher(..., live=True)`), and `frames='auto'` subscribers
    /// keep their own pace, missing the frames they fall behind on. While
    /// another thread waits for a frame: as of the last frame read.
    #[getter]
    fn live(&self) -> bool {
        if let Ok(inner) = self.inner.try_lock()
            && let Some(inner) = inner.as_ref()
        {
            self.live.store(inner.is_live(), Ordering::SeqCst);
        }
        self.live.load(Ordering::SeqCst)
    }

    fn __repr__(&self) -> String {
        format!("<cudaipc.Subscriber channel={:?}>", self.channel)
    }
}
