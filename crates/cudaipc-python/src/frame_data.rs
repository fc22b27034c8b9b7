// SPDX-License-Identifier: MPL-2.0

//! An application's data per frame in Python: `publish(..., data=)` takes
//! bytes (bytes, bytearray, memoryview) or a dict (its JSON text), and
//! `frame.data` gives them back (bytes, or the dict parsed again).

use cudaipc::AppData;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyMemoryView};

/// What `data` of `publish` becomes: `None` for None; bytes as they are; a
/// dict as `json.dumps` writes it, compact and strict (no NaN or
/// infinity, which other languages' JSON parsers refuse). A dict that JSON
/// cannot hold raises json's TypeError or ValueError, naming `data`.
pub fn from_python(data: Option<&Bound<'_, PyAny>>) -> PyResult<Option<AppData>> {
    let Some(data) = data.filter(|data| !data.is_none()) else {
        return Ok(None);
    };
    if let Ok(bytes) = data.downcast::<PyBytes>() {
        return Ok(Some(AppData::Bytes(bytes.as_bytes().to_vec())));
    }
    if let Ok(bytes) = data.downcast::<PyByteArray>() {
        return Ok(Some(AppData::Bytes(bytes.to_vec())));
    }
    if data.is_instance_of::<PyMemoryView>() {
        // tobytes(): the viewed bytes in C order, whatever their strides.
        let bytes = data.call_method0("tobytes")?;
        return Ok(Some(AppData::Bytes(
            bytes.downcast::<PyBytes>()?.as_bytes().to_vec(),
        )));
    }
    if data.is_instance_of::<PyDict>() {
        return json_text(data).map(|text| Some(AppData::Json(text)));
    }
    Err(PyTypeError::new_err(format!(
        "data= takes bytes, a bytearray, a memoryview or a dict (sent as JSON), not {}",
        data.get_type().name()?
    )))
}

/// `dict` as compact, strict JSON text.
fn json_text(dict: &Bound<'_, PyAny>) -> PyResult<String> {
    let py = dict.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item("separators", (",", ":"))?;
    kwargs.set_item("allow_nan", false)?;
    let written = py
        .import("json")?
        .call_method("dumps", (dict,), Some(&kwargs));
    match written {
        Ok(text) => text.extract(),
        Err(e) => {
            let hint = "data= takes a dict that json.dumps can write (str keys; str, int, float, bool, None, list and dict values; no NaN or infinity): convert NumPy values with .tolist() or float()";
            let renamed = if e.is_instance_of::<PyTypeError>(py) {
                PyTypeError::new_err(format!("data: {}; {hint}", e.value(py)))
            } else if e.is_instance_of::<PyValueError>(py) {
                PyValueError::new_err(format!("data: {}; {hint}", e.value(py)))
            } else {
                return Err(e);
            };
            renamed.set_cause(py, Some(e));
            Err(renamed)
        }
    }
}

/// `data` as `frame.data` gives it: bytes, or the JSON text parsed
/// (`json.loads`: the dict a Python producer sent). JSON text that does
/// not parse (a C producer's) raises ValueError naming frame `seq`.
pub fn to_python(py: Python<'_>, data: &AppData, seq: u64) -> PyResult<Py<PyAny>> {
    match data {
        AppData::Bytes(bytes) => Ok(PyBytes::new(py, bytes).into_any().unbind()),
        AppData::Json(text) => match py.import("json")?.call_method1("loads", (text,)) {
            Ok(value) => Ok(value.unbind()),
            Err(e) if e.is_instance_of::<PyValueError>(py) => {
                let err = PyValueError::new_err(format!(
                    "the data of frame {seq} is JSON text that does not parse: {}",
                    e.value(py)
                ));
                err.set_cause(py, Some(e));
                Err(err)
            }
            Err(e) => Err(e),
        },
    }
}
