// SPDX-License-Identifier: MPL-2.0

// In-process pipelines and the small helpers their tests share.

use std::time::{Duration, Instant};

/// Every sample of the in-process pipeline `description` (ending in
/// `appsink name=sink`), in order; fails the test on a pipeline error.
pub fn samples(description: &str) -> Vec<gst::Sample> {
    samples_probed(description, |_| {})
}

/// Like `samples`; `inspect` sees every buffer that leaves the element named
/// `probe`, if there is one.
pub fn samples_probed(
    description: &str,
    inspect: impl Fn(&gst::BufferRef) + Send + Sync + 'static,
) -> Vec<gst::Sample> {
    use gst::prelude::*;
    let pipeline = gst::parse::launch(description)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    if let Some(probed) = pipeline.by_name("probe") {
        probed
            .static_pad("src")
            .unwrap()
            .add_probe(gst::PadProbeType::BUFFER, move |_, info| {
                if let Some(buffer) = info.buffer() {
                    inspect(buffer);
                }
                gst::PadProbeReturn::Ok
            });
    }
    let sink = pipeline
        .by_name("sink")
        .unwrap()
        .downcast::<gst_app::AppSink>()
        .unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let mut out = Vec::new();
    while let Ok(sample) = sink.pull_sample() {
        out.push(sample);
    }
    let bus = pipeline.bus().unwrap();
    let error = bus.pop_filtered(&[gst::MessageType::Error]);
    pipeline.set_state(gst::State::Null).unwrap();
    if let Some(message) = error
        && let gst::MessageView::Error(e) = message.view()
    {
        panic!("{description}: {} ({:?})", e.error(), e.debug());
    }
    out
}

/// Waits until `cond` holds, failing the test with `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what} (waited {limit:?})");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reproducible pseudo-random bytes.
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
