// SPDX-License-Identifier: MPL-2.0

//! `cudaipc.Subscriber`: attaches to a channel and iterates its frames.

use std::time::{Duration, Instant};

use cudaipc::{Frames, IpcMode, SubscriberOptions};
use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::{raise, to_py};
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
/// (a batch of 8: 7); the ring must have `hold + 2` slots.
/// Iterating gives frames until the producer's end of stream, each within
/// `timeout` (WaitTimeoutError otherwise).
#[pyclass(module = "cudaipc")]
pub struct Subscriber {
    inner: Option<cudaipc::Subscriber>,
    channel: String,
    timeout: Option<Duration>,
    ended: bool,
}

impl Subscriber {
    fn inner(&mut self) -> PyResult<&mut cudaipc::Subscriber> {
        self.inner.as_mut().ok_or_else(|| {
            PyRuntimeError::new_err(format!("subscriber of '{}' is closed", self.channel))
        })
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
        hold: Option<u32>,
        ipc_mode: Option<&str>,
        allowed_producers: Vec<u32>,
        allowed_groups: Vec<u32>,
        device: Option<i32>,
    ) -> PyResult<Self> {
        let timeout = seconds(timeout)?;
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
        let deadline = timeout.map(|t| Instant::now() + t);
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
                        inner: Some(inner),
                        channel: channel.to_owned(),
                        timeout,
                        ended: false,
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
    /// forever) for the next frame. None at the end of the stream;
    /// WaitTimeoutError when none came in time; ProducerGoneError when the
    /// producer closed the channel without an end of stream, or died.
    #[pyo3(signature = (timeout=-1.0))]
    fn next_frame(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Frame>> {
        let timeout = match timeout {
            Some(t) if t < 0.0 => self.timeout,
            t => seconds(t)?,
        };
        if self.ended {
            return Ok(None);
        }
        // What is left of the timeout, counted down by the waits that ran
        // out: no clock is read for a frame that comes within the first.
        let mut left = timeout;
        loop {
            let wait = left.map_or(SIGNAL_CHECK, |left| left.min(SIGNAL_CHECK));
            let inner = self.inner()?;
            match py.allow_threads(|| inner.next_frame(Some(wait))) {
                Ok(Some(frame)) => return Ok(Some(Frame::new(frame))),
                Ok(None) => {
                    self.ended = true;
                    return Ok(None);
                }
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

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Frame> {
        match self.next_frame(py, Some(-1.0))? {
            Some(frame) => Ok(frame),
            None => Err(PyStopIteration::new_err(())),
        }
    }

    /// Detaches from the channel. Frames still held keep their slots until
    /// released.
    fn close(&mut self, py: Python<'_>) {
        if let Some(inner) = self.inner.take() {
            py.allow_threads(|| drop(inner));
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&mut self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }

    #[getter]
    fn channel(&self) -> &str {
        &self.channel
    }

    /// 'cuda' or 'host': where the channel's frames are.
    #[getter]
    fn transport(&mut self) -> PyResult<&'static str> {
        Ok(match self.inner()?.is_cuda() {
            true => "cuda",
            false => "host",
        })
    }

    /// (format, width, height) the producer announced last (None before
    /// the first frame).
    #[getter]
    fn caps(&mut self) -> PyResult<Option<(&'static str, u32, u32)>> {
        Ok(self
            .inner()?
            .layout()
            .map(|l| (l.format().name(), l.width(), l.height())))
    }

    fn __repr__(&self) -> String {
        format!("<cudaipc.Subscriber channel={:?}>", self.channel)
    }
}
