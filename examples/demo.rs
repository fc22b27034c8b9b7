//! The two-process demo (what `scripts/demo.sh` runs).
//!
//! A producer process publishes frames on a channel and this process reads
//! them. With a GPU: 4K RGB generated on the GPU by `cudatestsrc`, shared
//! through CUDA IPC, and in this process inverted and checked frame by frame
//! by `cudaprocess verify=true`; then the same work in one process
//! (`cudatestsrc ! cudaprocess ! fakesink`) for comparison. Without a GPU:
//! 720p frames over shared host memory, the same counter pattern written
//! and checked on the CPU. Prints the rate, the publish-to-receive latency
//! and the frame check, saves the last frame received as `demo-frame.png`,
//! and ends with one summary line:
//!
//! ```text
//! demo: 600 frames 3840x2160 RGB over CUDA IPC, 0 corrupt, 0 missing, 12,345 FPS = 31% of one process (39,600 FPS), latency p50 14 us, 600/600 zero-copy
//! ```
//!
//! FPS: frames received over the time from the first to the last (start-up
//! left out). Missing: frames asked for that did not arrive checked.
//! Zero-copy: frames received minus those copied in the sink (into a slot)
//! or in the source (out of one), from the elements' `stats`: exact when
//! every published frame is received, as here, and never an overcount.
//!
//! ```text
//! cargo run --release --example demo [frames]
//! ```
//!
//! `demo --next-steps PLUGIN_DIR` prints what to try next (what
//! `scripts/demo.sh` ends with): a producer and a consumer for two
//! terminals, the consumer a window where there is a display and one that
//! prints its frame rate where there is none (`autovideosink` crashes
//! without a display), and the channel tool.

use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use gst::prelude::*;
use gstcudaipc::pattern::{self, Pattern};

#[path = "common/numbers.rs"]
mod numbers;

/// What the producer process prints for this one to read: its sink's stats.
const PRODUCER_STATS: &str = "PRODUCER_STATS ";

/// The frames of each transport.
struct Format {
    width: u32,
    height: u32,
    transport: &'static str,
}

const CUDA: Format = Format {
    width: 3840,
    height: 2160,
    transport: "cuda",
};
const HOST: Format = Format {
    width: 1280,
    height: 720,
    transport: "host",
};

fn main() {
    gst::init().unwrap();
    gstcudaipc::plugin_register_static().unwrap();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--producer") {
        let (Some(channel), Some(frames), Some(transport)) = (
            args.get(2),
            args.get(3).and_then(|f| f.parse().ok()),
            args.get(4),
        ) else {
            eprintln!("usage: demo --producer CHANNEL FRAMES cuda|host");
            std::process::exit(2);
        };
        std::process::exit(producer(channel, frames, transport == "cuda"));
    }
    if args.get(1).map(String::as_str) == Some("--next-steps") {
        let Some(plugin_dir) = args.get(2) else {
            eprintln!("usage: demo --next-steps PLUGIN_DIR");
            std::process::exit(2);
        };
        print!(
            "{}",
            next_steps(
                plugin_dir,
                cudaipc_transport::cuda::is_available(),
                has_display()
            )
        );
        return;
    }
    let frames: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(600);
    let cuda = cudaipc_transport::cuda::is_available();
    let format = if cuda { &CUDA } else { &HOST };
    let channel = format!("demo-{}", std::process::id());
    println!(
        "gst-cudaipc demo: {frames} frames over the {} transport",
        format.transport
    );
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--producer",
            &channel,
            &frames.to_string(),
            format.transport,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("cannot start the producer process");
    let received = consumer(&channel, format, cuda);
    let out = child.wait_with_output().unwrap();
    let mut published = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        match line.strip_prefix(PRODUCER_STATS) {
            Some(stats) => published = gst::Structure::from_str(stats).ok(),
            None => println!("{line}"),
        }
    }
    let (Some(received), Some(published), true) = (received, published, out.status.success())
    else {
        eprintln!("the demo failed");
        std::process::exit(1);
    };
    let one_process = if cuda { one_process_fps(frames) } else { None };
    println!(
        "{}",
        summary(frames, format, &received, &published, one_process)
    );
    if received.corrupt > 0 || received.verified < frames {
        eprintln!("the demo failed: frames corrupt or missing");
        std::process::exit(1);
    }
}

/// Whether windows can open here: an X11 or Wayland display is named.
fn has_display() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty()))
}

/// The consumer that shows the channel without a window: its frame rate,
/// printed twice a second.
const HEADLESS_CONSUMER: &str =
    "-v rscudaipcsrc channel=cam0 ! fpsdisplaysink video-sink=fakesink text-overlay=false";
/// The consumer that shows the channel in a window (needs a display).
const WINDOW_CONSUMER: &str = "rscudaipcsrc channel=cam0 ! videoconvert ! autovideosink";

/// What to try next, with the plugin in `plugin_dir`: a pair of
/// gst-launch-1.0 lines (with `cuda`, 4K frames made on the GPU; else a
/// live 720p source on the host transport) and the channel tool.
fn next_steps(plugin_dir: &str, cuda: bool, display: bool) -> String {
    // The rs names: the bare ones are GStreamer's own elements on 1.24+
    // with nvcodec and a GPU. -e: Ctrl-C ends the producer's stream with
    // an end of stream, which ends the consumer cleanly too.
    let producer = if cuda {
        "cudatestsrc ! \"video/x-raw(memory:CUDAMemory),format=RGB,width=3840,height=2160\" ! rscudaipcsink channel=cam0"
    } else {
        "videotestsrc is-live=true ! video/x-raw,format=RGB,width=1280,height=720 ! rscudaipcsink channel=cam0 transport=host"
    };
    let (consumer, note) = if display {
        (
            WINDOW_CONSUMER,
            format!(
                "  (without a display, print the frame rate instead: gst-launch-1.0 {HEADLESS_CONSUMER})\n"
            ),
        )
    } else {
        (
            HEADLESS_CONSUMER,
            format!(
                "  (no display here: neither DISPLAY nor WAYLAND_DISPLAY is set, and autovideosink would crash,\n   so the consumer prints its frame rate; on a desktop: gst-launch-1.0 {WINDOW_CONSUMER})\n"
            ),
        )
    };
    let path = format!("GST_PLUGIN_PATH={plugin_dir}");
    format!(
        "\nThe plugin is built: {plugin_dir}/libgstcudaipc.so\n\
         Next, in two terminals (-e: Ctrl-C ends the producer's stream, and the consumer with it):\n\
         \x20 {path} gst-launch-1.0 -e {producer}\n\
         \x20 {path} gst-launch-1.0 {consumer}\n\
         {note}\
         List channels: {path} gst-device-monitor-1.0 Video/Source/CudaIpc\n\
         \x20          or: {plugin_dir}/cudaipc-channels   (remove-stale --all: what your own dead processes left)\n\
         Watch each consumer's rate, misses and lag: {plugin_dir}/cudaipc-channels watch\n"
    )
}

/// The producer process: generates `frames` frames and publishes them.
fn producer(channel: &str, frames: u64, cuda: bool) -> i32 {
    let source = if cuda {
        format!(
            "cudatestsrc num-buffers={frames} pattern=counter ! video/x-raw(memory:CUDAMemory),format=RGB,width={},height={},framerate=0/1",
            CUDA.width, CUDA.height
        )
    } else {
        // The counter pattern is written on the CPU (`write_counter`).
        format!(
            "videotestsrc num-buffers={frames} pattern=black ! video/x-raw,format=RGB,width={},height={},framerate=30/1",
            HOST.width, HOST.height
        )
    };
    let transport = if cuda { "cuda" } else { "host" };
    let pipeline = gst::parse::launch(&format!(
        "{source} ! rscudaipcsink name=sink channel={channel} transport={transport} sync=false"
    ))
    .unwrap();
    let sink = pipeline
        .downcast_ref::<gst::Bin>()
        .unwrap()
        .by_name("sink")
        .unwrap();
    if !cuda {
        write_counter(&sink.static_pad("sink").unwrap());
    }
    let ok = run(&pipeline);
    let stats = sink.property::<gst::Structure>("stats");
    println!(
        "producer (pid {}): published {} frames, {} without a copy, {} slots",
        std::process::id(),
        stats.get::<u64>("frames").unwrap_or(0),
        stats.get::<u64>("zero-copy").unwrap_or(0),
        stats.get::<u32>("slots").unwrap_or(0),
    );
    println!("{PRODUCER_STATS}{stats}");
    pipeline.set_state(gst::State::Null).unwrap();
    if ok { 0 } else { 1 }
}

/// Writes frame n of the counter pattern into the n-th buffer reaching
/// `pad` (system memory; on the GPU `cudatestsrc` draws it).
fn write_counter(pad: &gst::Pad) {
    let next = std::sync::atomic::AtomicU32::new(0);
    pad.add_probe(gst::PadProbeType::BUFFER, move |pad, info| {
        let (Some(caps), Some(buffer)) = (pad.current_caps(), info.buffer_mut()) else {
            return gst::PadProbeReturn::Ok;
        };
        let Ok(video) = gst_video::VideoInfo::from_caps(&caps) else {
            return gst::PadProbeReturn::Ok;
        };
        let frame = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let buffer = buffer.make_mut();
        let written = pattern::buffer_planes(&video, buffer).and_then(|planes| {
            let mut map = buffer
                .map_writable()
                .map_err(|_| "cannot map the frame".to_string())?;
            pattern::fill_frame(Pattern::Counter, frame, &video, &planes, &mut map)
        });
        if let Err(e) = written {
            eprintln!("producer: cannot write frame {frame}: {e}");
        }
        gst::PadProbeReturn::Ok
    });
}

/// What this process received and checked.
#[derive(Default)]
struct Received {
    /// When the first and the last frame reached the end of the pipeline.
    first: Option<Instant>,
    last: Option<Instant>,
    frames: u64,
    verified: u64,
    corrupt: u64,
    /// The frame number due next (frames are numbered from 0).
    next: u64,
    /// The source's stats.
    stats: Option<gst::Structure>,
}

impl Received {
    /// Frames per second between the first frame and the last.
    fn fps(&self) -> f64 {
        match (self.first, self.last) {
            (Some(first), Some(last)) if self.frames > 1 => {
                (self.frames - 1) as f64 / last.duration_since(first).as_secs_f64().max(1e-9)
            }
            _ => 0.0,
        }
    }
}

/// Counts (and with `check`, checks the counter pattern of) the buffers
/// reaching `pad`.
fn watch(pad: &gst::Pad, check: bool) -> Arc<Mutex<Received>> {
    let received = Arc::new(Mutex::new(Received::default()));
    let seen = received.clone();
    pad.add_probe(gst::PadProbeType::BUFFER, move |pad, info| {
        let now = Instant::now();
        let mut r = seen.lock().unwrap();
        r.first.get_or_insert(now);
        r.last = Some(now);
        r.frames += 1;
        if check && let Some(buffer) = info.buffer() {
            // A frame after a gap is good (the gap counts as missing); one
            // seen before, or of a number already passed, is not.
            let due = r.next;
            match check_counter(pad, buffer).and_then(|frame| {
                (frame >= due)
                    .then_some(frame)
                    .ok_or_else(|| format!("frame {frame} where {due} was due"))
            }) {
                Ok(frame) => {
                    r.verified += 1;
                    r.next = frame + 1;
                }
                Err(e) => {
                    if r.corrupt == 0 {
                        eprintln!("frame check: {e}");
                    }
                    r.corrupt += 1;
                }
            }
        }
        gst::PadProbeReturn::Ok
    });
    received
}

/// The number of the counter-pattern frame `buffer` holds, if it holds one
/// intact.
fn check_counter(pad: &gst::Pad, buffer: &gst::BufferRef) -> Result<u64, String> {
    let caps = pad.current_caps().ok_or("no caps")?;
    let video = gst_video::VideoInfo::from_caps(&caps).map_err(|e| e.to_string())?;
    let planes = pattern::buffer_planes(&video, buffer)?;
    let map = buffer.map_readable().map_err(|_| "cannot map the frame")?;
    pattern::verify_frame(&video, &planes, &map).map(u64::from)
}

/// This process: reads the channel, checks and reports.
fn consumer(channel: &str, format: &Format, cuda: bool) -> Option<Received> {
    let processing = if cuda {
        "cudaprocess name=check operation=invert verify=true ! "
    } else {
        ""
    };
    let pipeline = gst::parse::launch(&format!(
        "rscudaipcsrc name=src channel={channel} connect-timeout=30000 ! {processing}fakesink name=sink sync=false"
    ))
    .unwrap();
    let bin = pipeline.downcast_ref::<gst::Bin>().unwrap();
    let sink = bin.by_name("sink").unwrap();
    // Without a GPU the frames are checked here, on the CPU.
    let watched = watch(&sink.static_pad("sink").unwrap(), !cuda);
    let ok = run(&pipeline);
    let src = bin.by_name("src").unwrap();
    let stats = src.property::<gst::Structure>("stats");
    let mut received = std::mem::take(&mut *watched.lock().unwrap());
    println!(
        "consumer (pid {}): received {} frames of {}x{} ({} frames/s from the first to the last), missed {}",
        std::process::id(),
        stats.get::<u64>("frames").unwrap_or(0),
        format.width,
        format.height,
        numbers::thousands(received.fps()),
        stats.get::<u64>("missed").unwrap_or(0)
    );
    println!(
        "publish-to-receive latency: median {:.0} us, p99 {:.0} us",
        stats.get::<u64>("latency-p50-ns").unwrap_or(0) as f64 / 1e3,
        stats.get::<u64>("latency-p99-ns").unwrap_or(0) as f64 / 1e3
    );
    if let Some(check) = bin.by_name("check") {
        let s = check.property::<gst::Structure>("stats");
        received.verified = s.get::<u64>("verified").unwrap_or(0);
        received.corrupt = s.get::<u64>("corrupt").unwrap_or(u64::MAX);
    }
    println!(
        "frame check on the {}: {} verified, {} corrupt",
        if cuda { "GPU" } else { "CPU" },
        received.verified,
        received.corrupt
    );
    received.stats = Some(stats);
    if let Some(sample) = sink.property::<Option<gst::Sample>>("last-sample") {
        match save_png(&sample, "demo-frame.png") {
            Ok(()) => println!("saved the last frame received as demo-frame.png"),
            Err(e) => println!("could not save a PNG: {e}"),
        }
    }
    pipeline.set_state(gst::State::Null).unwrap();
    (ok && received.frames > 0).then_some(received)
}

/// The same work in one process, to compare with: `frames` frames (at
/// least 2,000, so that the rate is measured over more than a blink).
fn one_process_fps(frames: u64) -> Option<f64> {
    let pipeline = gst::parse::launch(&format!(
        "cudatestsrc num-buffers={} pattern=counter ! video/x-raw(memory:CUDAMemory),format=RGB,width={},height={},framerate=0/1 ! cudaprocess operation=invert verify=true ! fakesink name=sink sync=false",
        frames.max(2_000),
        CUDA.width,
        CUDA.height
    ))
    .ok()?;
    let sink = pipeline.downcast_ref::<gst::Bin>()?.by_name("sink")?;
    let watched = watch(&sink.static_pad("sink")?, false);
    let ok = run(&pipeline);
    pipeline.set_state(gst::State::Null).ok()?;
    let fps = watched.lock().unwrap().fps();
    (ok && fps > 0.0).then_some(fps)
}

/// The line to compare runs by.
fn summary(
    frames: u64,
    format: &Format,
    received: &Received,
    published: &gst::Structure,
    one_process: Option<f64>,
) -> String {
    let source = received.stats.as_ref();
    let count = |s: Option<&gst::Structure>, field: &str| {
        s.and_then(|s| s.get::<u64>(field).ok()).unwrap_or(0)
    };
    let copies = count(source, "copied") + count(Some(published), "copied");
    let zero_copy = count(source, "frames").saturating_sub(copies);
    let missing = frames.saturating_sub(received.verified.saturating_add(received.corrupt));
    let fps = received.fps();
    let transport = if format.transport == "cuda" {
        "CUDA IPC".to_string()
    } else {
        "host shared memory (no GPU: host transport)".to_string()
    };
    let against = one_process
        .map(|one| {
            format!(
                " = {:.0}% of one process ({} FPS)",
                100.0 * fps / one,
                numbers::thousands(one)
            )
        })
        .unwrap_or_default();
    format!(
        "demo: {} frames {}x{} RGB over {transport}, {} corrupt, {missing} missing, {} FPS{against}, latency p50 {:.0} us, {zero_copy}/{} zero-copy",
        received.frames,
        format.width,
        format.height,
        received.corrupt,
        numbers::thousands(fps),
        count(source, "latency-p50-ns") as f64 / 1e3,
        received.frames,
    )
}

fn run(pipeline: &gst::Element) -> bool {
    pipeline.set_state(gst::State::Playing).unwrap();
    let bus = pipeline.bus().unwrap();
    for msg in bus.iter_timed(gst::ClockTime::NONE) {
        match msg.view() {
            gst::MessageView::Eos(_) => return true,
            gst::MessageView::Error(e) => {
                eprintln!("error: {} ({:?})", e.error(), e.debug());
                return false;
            }
            _ => {}
        }
    }
    false
}

/// Writes a sample as PNG; CUDA memory is downloaded by mapping it.
fn save_png(sample: &gst::Sample, path: &str) -> Result<(), String> {
    let caps = sample.caps().ok_or("no caps")?;
    let buffer = sample.buffer().ok_or("no buffer")?;
    let map = buffer.map_readable().map_err(|_| "cannot map the frame")?;
    let mut plain_caps = caps.to_owned();
    plain_caps.make_mut().set_features(0, None);
    let plain = gst::Buffer::from_mut_slice(map.to_vec());
    let sample = gst::Sample::builder()
        .buffer(&plain)
        .caps(&plain_caps)
        .build();
    let png = gst_video::convert_sample(
        &sample,
        &gst::Caps::builder("image/png").build(),
        Some(gst::ClockTime::from_seconds(10)),
    )
    .map_err(|e| e.to_string())?;
    let png = png
        .buffer()
        .ok_or("no PNG")?
        .map_readable()
        .map_err(|_| "cannot map the PNG")?;
    std::fs::write(path, &png[..]).map_err(|e| e.to_string())
}
