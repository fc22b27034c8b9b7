// SPDX-License-Identifier: MPL-2.0

//! CUDA streams given from Python: a raw `CUstream` as an int, or a stream
//! object of PyTorch (`cuda_stream`), CuPy (`ptr`) or any library with the
//! `__cuda_stream__` protocol (cuda.core).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// `CU_STREAM_LEGACY`: the legacy default stream, DLPack's `stream=None`
/// and the default of PyTorch and CuPy.
pub const LEGACY_DEFAULT: usize = 1;

/// The `CUstream` handle of `stream`.
pub fn handle(stream: &Bound<'_, PyAny>) -> PyResult<usize> {
    if let Ok(raw) = stream.extract::<usize>() {
        return Ok(raw);
    }
    if stream.hasattr("__cuda_stream__")? {
        let (_version, raw): (i64, usize) = stream.call_method0("__cuda_stream__")?.extract()?;
        return Ok(raw);
    }
    for attribute in ["cuda_stream", "ptr"] {
        if let Ok(raw) = stream
            .getattr(attribute)
            .and_then(|raw| raw.extract::<usize>())
        {
            return Ok(raw);
        }
    }
    Err(PyTypeError::new_err(format!(
        "a CUDA stream is an int (a CUstream) or a stream object (torch.cuda.Stream, cupy.cuda.Stream, cuda.core Stream), not {}",
        stream.get_type().name()?
    )))
}

/// The handles of one stream or of a list or tuple of them.
pub fn handles(streams: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    if streams.is_instance_of::<PyList>() || streams.is_instance_of::<PyTuple>() {
        return streams.try_iter()?.map(|s| handle(&s?)).collect();
    }
    Ok(vec![handle(streams)?])
}
