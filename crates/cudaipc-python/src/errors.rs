// SPDX-License-Identifier: MPL-2.0

//! `cudaipc.Error` and its subclasses (defined in `cudaipc/_errors.py`,
//! each also a built-in exception: `except FileNotFoundError` catches an
//! unknown channel) for the API's errors.

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

/// The Python exception for `e`.
pub fn to_py(py: Python<'_>, e: cudaipc::Error) -> PyErr {
    use cudaipc::Error as E;
    let class = match &e {
        E::NoProducer { .. } => "NoProducerError",
        E::ProducerGone { .. } => "ProducerGoneError",
        E::PermissionDenied { .. } => "ChannelPermissionError",
        E::Timeout(_) => "WaitTimeoutError",
        E::ChannelInUse { .. } => "ChannelInUseError",
        E::UnsupportedFormat(_) => "UnsupportedFormatError",
        E::InvalidLayout(_) | E::InvalidCaps { .. } | E::FrameSize { .. } => "InvalidArgumentError",
        E::InvalidChannelName(_) => "InvalidArgumentError",
        E::Device(_) => "DeviceError",
        E::Closed => "ClosedError",
        E::Holds(_) => "HoldError",
        _ => "Error",
    };
    raise(py, class, e.to_string())
}
