// SPDX-License-Identifier: MPL-2.0

//! `cudaipc.Error` and its subclasses (defined in `cudaipc/_errors.py`,
//! each also a built-in exception: `except FileNotFoundError` catches an
//! unknown channel) for the API's errors.

use cudaipc::Setting;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// An exception of class `class` (in `cudaipc._errors`) with `message`.
pub fn raise(py: Python<'_>, class: &str, message: String) -> PyErr {
    let class = py
        .import("cudaipc._errors")
        .and_then(|module| module.getattr(class))
        .and_then(|class| Ok(class.downcast_into::<PyType>()?));
    match class {
        Ok(class) => PyErr::from_type(class, message),
        Err(e) => PyRuntimeError::new_err(format!("{message} (cudaipc._errors: {e})")),
    }
}

/// An InvalidArgumentError (a ValueError) for the keyword argument of
/// `setting` given `value`: its name, the value, and the range it takes.
pub fn out_of_range(py: Python<'_>, setting: Setting, value: i128) -> PyErr {
    let why = setting.why();
    let max = setting.max();
    let message = match setting {
        Setting::Permissions => {
            let sign = if value < 0 { "-" } else { "" };
            format!(
                "permissions={sign}{:#o}: {why}, so it takes 0 to {max:#o} (0o600: this user only; 0o660: its group too)",
                value.unsigned_abs()
            )
        }
        Setting::Slots => format!(
            "slots={value}: {why}, so it takes 0 to {max} (0: chosen as rscudaipcsink does)"
        ),
        Setting::WaitForConsumers => {
            format!("wait_for_consumers={value}: {why}, so it takes 0 to {max}")
        }
        Setting::Hold => {
            format!("hold={value}: {why}, so it takes 0 to {max}, or None (not declared)")
        }
        Setting::FrameDataBound => {
            format!("frame_data_bound={value}: {why}, so it takes 0 to {max}")
        }
    };
    raise(py, "InvalidArgumentError", message)
}

/// `value` of the keyword argument of `setting` as the Rust API's type
/// `T`, which checks its range; a negative value, or one beyond `T`, never
/// reaches it and is refused here in the same words (not an OverflowError).
pub fn setting_arg<T: TryFrom<i64>>(py: Python<'_>, setting: Setting, value: i64) -> PyResult<T> {
    T::try_from(value).map_err(|_| out_of_range(py, setting, i128::from(value)))
}

/// The Python exception for `e`.
pub fn to_py(py: Python<'_>, e: cudaipc::Error) -> PyErr {
    use cudaipc::Error as E;
    if let E::OutOfRange { setting, value } = e {
        return out_of_range(py, setting, i128::from(value));
    }
    let class = match &e {
        E::NoProducer { .. } => "NoProducerError",
        E::ProducerGone { .. } => "ProducerGoneError",
        E::PermissionDenied { .. } => "ChannelPermissionError",
        E::Timeout(_) => "WaitTimeoutError",
        E::ChannelInUse { .. } => "ChannelInUseError",
        E::UnsupportedFormat(_) => "UnsupportedFormatError",
        E::InvalidLayout(_) | E::InvalidCaps { .. } | E::FrameSize { .. } => "InvalidArgumentError",
        E::FrameDataTooLarge { .. } => "InvalidArgumentError",
        E::InvalidChannelName(_) => "InvalidArgumentError",
        E::Device(_) => "DeviceError",
        E::Closed => "ClosedError",
        E::Holds(_) => "HoldError",
        _ => "Error",
    };
    let message = match &e {
        E::ProducerGone { channel, died } => producer_gone(channel, *died),
        // The channel's text names `hold=`; where it does not name Python's
        // copies (a ring too small, also the element's error), it says so.
        E::FrameDataTooLarge { len, bound } => format!(
            "data= has {len} bytes (a dict: as JSON text), more than this channel's frames carry: at most {bound} (the publisher's frame_data_bound less 16 bytes of framing; Publisher(..., frame_data_bound=N) sets it, 16384 by default, at most {})",
            Setting::FrameDataBound.max()
        ),
        E::Holds(_) if !e.to_string().contains("copy=True") => format!(
            "{e}; frame.copy() and np.from_dlpack(frame, copy=True) keep a frame without holding its slot"
        ),
        e => e.to_string(),
    };
    raise(py, class, message)
}

/// What the elements say for a lost producer (`on-producer-lost`), in the
/// Python API's terms: a new Subscriber waits for the next producer.
fn producer_gone(channel: &str, died: bool) -> String {
    let wait = format!(
        "to wait for a new producer, make a new cudaipc.Subscriber('{channel}', timeout=None)"
    );
    if died {
        format!("the producer of channel '{channel}' died ({wait})")
    } else {
        format!(
            "the producer of channel '{channel}' closed the channel without an end of stream ({wait}; run the producer's gst-launch-1.0 with -e so that Ctrl-C sends an end of stream)"
        )
    }
}
