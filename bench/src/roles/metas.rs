// SPDX-License-Identifier: MPL-2.0

//! Row 5m: a meta on every frame. With `CUDAIPC_BENCH_METAS` set, the
//! producer's `rscudaipcsink` gets on each buffer a capture time
//! (`GstReferenceTimestampMeta`) and 1 KiB of the application's data (the
//! `CudaIpcFrameData` meta), as a camera and an inference process would
//! attach them.

use gst::prelude::*;

/// The application's data on each frame.
const APP_DATA_BYTES: usize = 1024;

/// Adds the probe to the sink pad of the element named `ipcsink`, where
/// the variable is set and the pipeline has one.
pub fn attach_if_asked(pipeline: &gst::Pipeline) {
    if std::env::var_os("CUDAIPC_BENCH_METAS").is_none() {
        return;
    }
    let Some(pad) = pipeline
        .by_name("ipcsink")
        .and_then(|sink| sink.static_pad("sink"))
    else {
        return;
    };
    let reference = gst::Caps::new_empty_simple("timestamp/x-ntp");
    let data = gst::glib::Bytes::from_owned(vec![0xA5u8; APP_DATA_BYTES]);
    pad.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
        if let Some(buffer) = info.buffer_mut() {
            let pts = buffer.pts().unwrap_or(gst::ClockTime::ZERO);
            let buffer = buffer.make_mut();
            gst::ReferenceTimestampMeta::add(buffer, &reference, pts, gst::ClockTime::NONE);
            if let Ok(mut meta) = gst::meta::CustomMeta::add(buffer, "CudaIpcFrameData") {
                meta.mut_structure().set("bytes", &data);
            }
        }
        gst::PadProbeReturn::Ok
    });
}
