// SPDX-License-Identifier: MPL-2.0

//! The `cudaipc` Python package's native module (`cudaipc._native`):
//! frames of a cudaipc channel as DLPack and CUDA Array Interface objects,
//! and a publisher of DLPack arrays. docs/python.md has the guide.

mod dlpack;
mod errors;
mod frame;
mod frame_data;
mod publisher;
mod streams;
mod subscriber;

use pyo3::prelude::*;

#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<subscriber::Subscriber>()?;
    m.add_class::<publisher::Publisher>()?;
    m.add_class::<frame::Frame>()?;
    m.add_class::<frame::FramePlane>()?;
    m.add_function(wrap_pyfunction!(frame::gst_buffer_frame, m)?)?;
    m.add(
        "FORMATS",
        cudaipc::VideoFormat::ALL
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>(),
    )?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
