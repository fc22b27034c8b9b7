// SPDX-License-Identifier: MPL-2.0

//! An application that reads the frames of a channel with
//! `rscudaipcsrc ! appsink` and gets at each frame:
//!
//! - CUDA memory (cuda transport): the device pointer, size and device
//!   through `gstcudaipc::memory::buffer_device_memory`, the row pitch
//!   through the `CudaIpcMeta` meta. The frame is the producer's slot (or,
//!   when downstream holds too many buffers, a copy the source made: `copied`
//!   in the summary). Run your kernels on it on the plugin's stream
//!   (`device.stream()` of what `buffer_device_memory` returns), which orders
//!   them after the producer's work, and the slot's release after them.
//!   Mapping such a buffer for reading downloads it: done here for the
//!   checksum, skipped with `--pointers-only`.
//! - system memory (host transport, or `--system-memory`): the bytes,
//!   through a readable map (with the host transport, a view of the shared
//!   memory: no copy either).
//!
//! ```text
//! cargo run --example reader -- --channel demo
//! cargo run --example publisher -- --channel demo --wait-consumers 1
//! ```
//!
//! Options: `--channel NAME` (default `demo`), `--timeout-ms MS` (wait that
//! long for a producer; 10000), `--system-memory` (ask for system memory
//! even on the cuda transport: the source downloads), `--latest` (only the
//! newest frames, never holding the producer back), `--pointers-only` (leave
//! CUDA frames on the GPU: no checksum), `--quiet` (no line per frame).
//!
//! It prints a line per frame (`frame=N pts=… memory=cuda device-ptr=… pitch=…`
//! or `memory=system`, and `sha1=…`) and, at the end of the stream, a
//! `summary` line: frames, frame numbers missing in the sequence, and the
//! checksum of the stream (the same as the publisher's when every frame
//! arrived intact). It exits with 1 if the pipeline fails (no producer within
//! the timeout, producer lost).

mod common;

use gst::prelude::*;
use gstcudaipc::memory::{self, CudaIpcMeta};

use common::{Args, StreamChecksum};

const USAGE: &str = "usage: reader [--channel NAME] [--timeout-ms MS] [--system-memory] [--latest] [--pointers-only] [--quiet]";

struct Options {
    channel: String,
    timeout_ms: i64,
    system_memory: bool,
    latest: bool,
    pointers_only: bool,
    quiet: bool,
}

fn main() {
    let mut args = Args::from_env(USAGE);
    let options = Options {
        channel: args.value("--channel", "demo".to_string()),
        timeout_ms: args.value("--timeout-ms", 10_000),
        system_memory: args.flag("--system-memory"),
        latest: args.flag("--latest"),
        pointers_only: args.flag("--pointers-only"),
        quiet: args.flag("--quiet"),
    };
    args.finish();

    gst::init().unwrap();
    gstcudaipc::plugin_register_static().unwrap();

    if let Err(e) = read(&options) {
        eprintln!("reader: {e}");
        std::process::exit(1);
    }
}

/// What the frames so far add up to.
#[derive(Default)]
struct Tally {
    frames: u64,
    first: Option<u32>,
    next: Option<u32>,
    missing: u64,
    /// Frames whose bytes went into the checksum (not `--pointers-only` ones).
    hashed: u64,
    checksum: StreamChecksum,
}

fn read(o: &Options) -> Result<(), String> {
    // Without caps the source offers CUDA memory when the channel has it;
    // `video/x-raw` (no memory feature) makes it download.
    let caps = if o.system_memory {
        " ! video/x-raw"
    } else {
        ""
    };
    let pipeline = gst::parse::launch(&format!(
        "rscudaipcsrc name=src channel={} connect-timeout={} frames={}{caps} \
         ! appsink name=sink sync=false max-buffers=2",
        o.channel,
        o.timeout_ms,
        if o.latest { "latest" } else { "every" },
    ))
    .map_err(|e| e.to_string())?
    .downcast::<gst::Pipeline>()
    .unwrap();
    let appsink = pipeline
        .by_name("sink")
        .unwrap()
        .downcast::<gst_app::AppSink>()
        .unwrap();
    let bus = pipeline.bus().unwrap();
    pipeline
        .set_state(gst::State::Playing)
        .map_err(|_| "cannot start the pipeline".to_string())?;

    let mut tally = Tally::default();
    let result = loop {
        if let Some(sample) = appsink.try_pull_sample(gst::ClockTime::from_mseconds(100)) {
            let line = inspect(&sample, o, &mut tally)?;
            if !o.quiet {
                println!("{line}");
            }
            continue;
        }
        // No frame for a while: did the pipeline fail? (A failing source
        // also sends EOS, after posting its error.)
        if let Some(msg) = bus.pop_filtered(&[gst::MessageType::Error])
            && let gst::MessageView::Error(e) = msg.view()
        {
            break Err(common::error_text(e));
        }
        if appsink.is_eos() {
            break Ok(());
        }
    };
    let stats = pipeline
        .by_name("src")
        .unwrap()
        .property::<gst::Structure>("stats");
    pipeline.set_state(gst::State::Null).unwrap();
    result?;

    println!(
        "summary frames={} first={} missing={} checksum={} copied={} latency-p50-us={:.1}",
        tally.frames,
        tally.first.map_or("none".into(), |f| f.to_string()),
        tally.missing,
        if tally.hashed == tally.frames {
            tally.checksum.hex()
        } else {
            "none".into()
        },
        stats.get::<u64>("copied").unwrap_or_default(),
        stats.get::<u64>("latency-p50-ns").unwrap_or_default() as f64 / 1000.0,
    );
    Ok(())
}

/// Looks at one frame; returns its line.
fn inspect(sample: &gst::Sample, o: &Options, tally: &mut Tally) -> Result<String, String> {
    let buffer = sample.buffer().ok_or("a sample without a buffer")?;
    let mut line = format!("pts={}", buffer.pts().display());
    tally.frames += 1;

    if let Some(device_memory) = memory::buffer_device_memory(buffer) {
        // The frame is in GPU memory: here is where it lives.
        line += &format!(
            " memory=cuda device-ptr={:#x} size={} device={}",
            device_memory.ptr,
            device_memory.size,
            device_memory.device.ordinal()
        );
        // The same, and the row pitch, for any language: the custom meta.
        if let Some(meta) = CudaIpcMeta::get(buffer) {
            line += &format!(" pitch={}", meta.pitch);
        }
        if o.pointers_only {
            return Ok(line);
        }
    } else {
        line += &format!(" memory=system size={}", buffer.size());
    }

    // The bytes on the CPU: a view of shared memory on the host transport, a
    // download for CUDA memory.
    let map = buffer
        .map_readable()
        .map_err(|_| "cannot map a frame for reading")?;
    let sha1 = common::sha1_hex(&map);
    tally.checksum.add(&sha1);
    tally.hashed += 1;
    if let Some(n) = common::frame_number(&map) {
        if let Some(next) = tally.next
            && n > next
        {
            tally.missing += u64::from(n - next);
        }
        tally.first.get_or_insert(n);
        tally.next = Some(n.wrapping_add(1));
        line = format!("frame={n} {line}");
    }
    Ok(format!("{line} sha1={sha1}"))
}
