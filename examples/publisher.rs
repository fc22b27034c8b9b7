// SPDX-License-Identifier: MPL-2.0

//! An application that renders frames itself and publishes them on a
//! channel through `appsrc ! rscudaipcsink`, for `rscudaipcsrc` in other
//! processes (the `reader` example, `python/reader.py`, `gst-launch-1.0`).
//!
//! With CUDA, each frame is rendered on the GPU by a tiny NVRTC kernel
//! (examples/common/render.cu) into device memory from the crate's
//! `CudaAllocator` and pushed with `video/x-raw(memory:CUDAMemory)` caps:
//! the sink copies it into a slot on the GPU, and no byte goes through the
//! CPU. Without CUDA (or with `--cpu`) it renders on the CPU into system
//! memory and publishes with `transport=host`.
//!
//! ```text
//! # terminal 1: wait for one reader, then publish 300 frames at 30 fps
//! cargo run --example publisher -- --channel demo --frames 300 --wait-consumers 1
//! # terminal 2
//! cargo run --example reader -- --channel demo
//! ```
//!
//! Options: `--channel NAME` (default `demo`), `--frames N` (300), `--size
//! WIDTHxHEIGHT` (640x360), `--fps F` (30: frame rate and pace),
//! `--unpaced` (as fast as the readers take the frames), `--cpu` (render on
//! the CPU, host transport), `--wait-consumers N` (start once N readers wait
//! on the channel, so that they get every frame), `--quiet` (no line per
//! frame).
//!
//! It prints `frame=N pts=… sha1=…` per frame (the SHA-1 of its bytes) and a
//! `summary` line whose checksum (the SHA-1 of the frames' SHA-1s) a reader
//! that got every frame intact prints too.
//!
//! The plugin is linked in and registered statically; no `GST_PLUGIN_PATH`
//! is needed.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gst::prelude::*;

use common::{Args, Renderer, StreamChecksum};

const USAGE: &str = "usage: publisher [--channel NAME] [--frames N] [--size WxH] [--fps F] [--unpaced] [--cpu] [--wait-consumers N] [--quiet]";

fn main() {
    let mut args = Args::from_env(USAGE);
    let channel: String = args.value("--channel", "demo".to_string());
    let frames: u32 = args.value("--frames", 300);
    let (width, height) = args.size((640, 360));
    let fps: u32 = args.value("--fps", 30);
    let paced = !args.flag("--unpaced");
    let cpu = args.flag("--cpu");
    let wait_consumers: usize = args.value("--wait-consumers", 0);
    let quiet = args.flag("--quiet");
    args.finish();

    gst::init().unwrap();
    gstcudaipc::plugin_register_static().unwrap();

    if fps == 0 {
        eprintln!("--fps must be at least 1\n{USAGE}");
        std::process::exit(2);
    }
    if let Err(e) = wait_for_consumers(&channel, wait_consumers, Duration::from_secs(30)) {
        eprintln!("{e}");
        std::process::exit(1);
    }
    if let Err(e) = publish(&channel, frames, (width, height), (fps, paced), cpu, quiet) {
        eprintln!("publisher: {e}");
        std::process::exit(1);
    }
}

/// Waits until `n` readers wait for a producer on `channel`: readers that
/// start before the producer get every frame from the first.
fn wait_for_consumers(channel: &str, n: usize, limit: Duration) -> Result<(), String> {
    let start = Instant::now();
    while cudaipc_channel::shm::count_live_waiters(channel) < n {
        if start.elapsed() > limit {
            return Err(format!(
                "{n} reader(s) did not come to channel '{channel}' within {limit:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// How far the publishing got.
#[derive(Default)]
struct Progress {
    published: u32,
    checksum: StreamChecksum,
}

fn publish(
    channel: &str,
    frames: u32,
    (width, height): (u32, u32),
    (fps, paced): (u32, bool),
    cpu: bool,
    quiet: bool,
) -> Result<(), String> {
    let mut renderer = Renderer::new(width, height, cpu);
    let gpu = renderer.is_gpu();
    // CUDA memory goes into CUDA slots (transport=auto picks cuda); system
    // memory into shared host memory, which works on any machine.
    let transport = if gpu { "auto" } else { "host" };
    let pipeline = gst::parse::launch(&format!(
        "appsrc name=src format=time max-buffers=2 \
         ! rscudaipcsink name=sink channel={channel} transport={transport} sync={paced}"
    ))
    .map_err(|e| e.to_string())?
    .downcast::<gst::Pipeline>()
    .unwrap();
    let appsrc = pipeline
        .by_name("src")
        .unwrap()
        .downcast::<gst_app::AppSrc>()
        .unwrap();
    appsrc.set_caps(Some(&common::caps(width, height, fps, gpu)));

    // appsrc asks for each frame when it has room for it (need-data), on its
    // streaming thread; with the sink's default `when-full=block`, that is
    // when the slowest reader lets it.
    let duration = gst::ClockTime::SECOND / u64::from(fps);
    let progress = Arc::new(Mutex::new(Progress::default()));
    let callbacks = gst_app::AppSrcCallbacks::builder()
        .need_data({
            let progress = progress.clone();
            move |appsrc, _| {
                let mut progress = progress.lock().unwrap();
                let n = progress.published;
                if n == frames {
                    let _ = appsrc.end_of_stream();
                    return;
                }
                let pts = duration * u64::from(n);
                match renderer.render(n, pts, duration) {
                    Ok((buffer, sha1)) => {
                        if !quiet {
                            println!("frame={n} pts={pts} sha1={sha1}");
                        }
                        progress.checksum.add(&sha1);
                        progress.published += 1;
                        // Fails only when the pipeline stops; its error is
                        // on the bus.
                        let _ = appsrc.push_buffer(buffer);
                    }
                    Err(e) => gst::element_error!(
                        appsrc,
                        gst::LibraryError::Failed,
                        ("cannot render frame {}: {}", n, e)
                    ),
                }
            }
        })
        .build();
    appsrc.set_callbacks(callbacks);

    let bus = pipeline.bus().unwrap();
    if pipeline.set_state(gst::State::Playing).is_err() {
        let msg = bus.pop_filtered(&[gst::MessageType::Error]);
        return Err(match msg.as_ref().map(|m| m.view()) {
            Some(gst::MessageView::Error(e)) => common::error_text(e),
            _ => "cannot start the pipeline".into(),
        });
    }
    eprintln!(
        "publishing {frames} frames of {width}x{height} RGBA on channel '{channel}' ({})",
        if gpu {
            "rendered on the GPU, CUDA memory"
        } else {
            "rendered on the CPU, host transport"
        },
    );

    // EOS reaches the sink once every frame is published.
    let limit = 60 + u64::from(frames / fps);
    let result = match bus.timed_pop_filtered(
        gst::ClockTime::from_seconds(limit),
        &[gst::MessageType::Eos, gst::MessageType::Error],
    ) {
        Some(msg) => match msg.view() {
            gst::MessageView::Eos(_) => Ok(()),
            gst::MessageView::Error(e) => Err(common::error_text(e)),
            _ => unreachable!(),
        },
        None => Err(format!("the pipeline did not finish within {limit} s")),
    };
    let stats = pipeline
        .by_name("sink")
        .unwrap()
        .property::<gst::Structure>("stats");
    pipeline.set_state(gst::State::Null).unwrap();
    result?;

    let progress = progress.lock().unwrap();
    println!(
        "summary frames={} checksum={} transport={} sink-frames={} sink-dropped={}",
        progress.published,
        progress.checksum.hex(),
        stats.get::<String>("transport").unwrap_or_default(),
        stats.get::<u64>("frames").unwrap_or_default(),
        stats.get::<u64>("dropped").unwrap_or_default(),
    );
    Ok(())
}
