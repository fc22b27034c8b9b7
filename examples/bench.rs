//! The benchmark: 4K RGB through the plugin's pipelines, producer and
//! consumer in two real processes, every configuration measured in one run.
//!
//! ```text
//! cargo run --release --example bench -- [--frames N] [--mps off|on|both] [--out DIR]
//! cargo run --release --example bench -- --smoke      # a few frames on the host transport (CI)
//! cargo run --release --example bench -- --rows 5,5t,5v   # only these rows (ids: the first word)
//! cargo run --release --example bench -- --consumer-device 1   # every consumer reads from GPU 1
//! cargo run --release --example bench -- --two-gpu     # consumer on GPU 0 and on GPU 1, side by side
//! cargo run --release --example bench -- --gst-cuda    # only rows 13a-13e (GStreamer 1.24+, nvcodec)
//! cargo run --release --example bench -- --rows 9      # a slow latest-frame viewer (9a, 9b)
//! cargo run --release --example bench -- --rows 14,14u --max-streams 64   # streams per GPU
//! cargo run --release --example bench -- --rows 15,15p  # the Python package's rows
//! cargo run --release --example bench -- --rows 16     # consumers at their own pace (16a, 16b, 16r, 16c)
//! ```
//!
//! Each row reports frames per second, GB/s of frame data (frame bytes times
//! frames per second), the publish-to-receive latency the source measured
//! (median, p99, max: the sink stamps CLOCK_MONOTONIC into the slot), the CPU
//! time of each process per second of wall time, and the `cudaprocess
//! verify` counts. Results go to stdout (a table), DIR/bench.csv and
//! DIR/bench.png. With `--mps` the benchmark starts and stops its own MPS
//! daemon with a private pipe directory.
//!
//! The producer always runs on GPU 0. `--consumer-device N` sets
//! `cuda-device-id=N` on every consumer's `cudaipcsrc` (another GPU reads the
//! slots through peer access) and copies row 2's frame to GPU N. `--two-gpu`
//! runs only the copy and the default configuration (2 slots under MPS),
//! once with the consumer on GPU 0 and once on GPU 1; with fewer than two
//! devices it prints SKIPPED and exits 0. Rows name the consumer's GPU.
//!
//! `--gst-cuda` (or `--rows 13a,13b,...`; rows 13 run only when asked)
//! measures this pair next to GStreamer's own CUDA elements: nvcodec
//! producers (`cudaupload`, `imagefreeze`, `cudaconvert`, hardware decoders)
//! into this pair, into upstream's `cudaipcsink`/`cudaipcsrc io-mode=import`,
//! and into `fakesink` in one process, each with a consumer that drops frames
//! and one that feeds `cudaconvert`. These rows run for a time
//! (`--gst-cuda-seconds`, from the producer's first frame) rather than a
//! number of frames: upstream's sink drops frames its consumer has not taken,
//! so its consumer's rate only means something over a fixed time.
//! `CUDAIPC_BENCH_SINK_PROPS` adds properties to our sink in these rows,
//! the two-process rows 3-12 and rows 9 and 14 (e.g. `gpu-sync=event
//! slots=16`), to compare settings; `CUDAIPC_BENCH_SRC_PROPS` adds
//! properties to our source in rows 13 and 14 (e.g. `frames=latest`).
//!
//! Rows 9 and 14 (issue 25) also run only when `--rows` names them.
//! `--rows 9`: the producer's own rate (frames into its sink from the
//! warm-up to the last) with four consumers that invert and verify every
//! frame (9a), and with a fifth, `frames=latest ! identity sleep-time=20000`,
//! a viewer that takes 20 ms a frame (9b, its note: its cost against 9a);
//! the sink waits for every consumer (`wait-for-connection`), corrupt and
//! missing are summed over the four. `--rows 14,14u`: streams per GPU, N
//! pairs of a live 4K@30 producer and a consumer that processes every frame
//! (ours: `cudaprocess operation=invert verify=true`; upstream's
//! `cudaipcsink`/`cudaipcsrc io-mode=import`, GStreamer 1.24+: `cudaconvert`
//! to BGRx, as cudaprocess takes only this plugin's memory), all started
//! together; once every consumer has its first frame they run
//! `--streams-seconds` (6), the first 2 not counted. A pair is late below
//! 98% of the frames its producer should have made in that window, at a
//! frame received over a frame period (33 ms) after it was published (ours
//! only), at a corrupt or missing frame, or when its processes fail. N
//! doubles from 1 until a pair is late, then bisects; the row gives the
//! largest N without a late pair (its frames column; FPS: all its streams
//! together), capped by `--max-streams` (64) and the device memory a pair
//! took in the first trials (`nvidia-smi`). Without a GPU both rows run on
//! the host transport (320x240, no GPU work); 14u says why it cannot run.
//!
//! Rows 15 and 15p (only when `--rows` names them) measure the Python
//! package: a consumer taking every frame through DLPack (CuPy on its own
//! stream) next to `rscudaipcsrc ! fakesink` on the same producer, the ratio
//! in the row's note, and a Python producer of CuPy arrays into
//! `rscudaipcsrc ! fakesink` (examples/python/bench_consumer.py and
//! bench_producer.py, run by `CUDAIPC_BENCH_PYTHON`, default python3, which
//! must import cudaipc and CuPy). With `--smoke` they run on the host
//! transport with NumPy.
//!
//! Rows 16 (issue 37; only when `--rows` names them, `--rows 16` all four;
//! examples/common/bench_pace.rs) measure consumers at their own pace. 16a:
//! a live producer at 60 FPS (`cudatestsrc is-live=true`,
//! `--live-frames` (600) after a warm-up of 60) and one consumer with
//! `frames=every` that inverts and verifies every frame; the row is its
//! rate, the note the producer's. 16b: 16a plus a consumer that takes 20 ms
//! a frame (`identity sleep-time=20000`, `frames=auto`); its note gives
//! both rates against 16a's (target: 95% or more) and the frames the slow
//! consumer got and missed. 16c: the Python consumer at full rate keeping
//! batches of 8 frames (`bench_consumer.py --batch 8`, `hold=7`) before it
//! releases them, against 16r, the same consumer one frame at a time (or
//! row 15's, when 16r does not run), on row 15's producer with `slots=16`
//! (a batch needs 9). On the host transport the live rows count the frames
//! the first consumer missed instead of verifying them; `--smoke` runs 16a
//! and 16b with 30 frames.
//!
//! Every process is this program run again with `--role`: the parent only
//! starts children and collects their `RESULT` lines, so it never holds a CUDA
//! context itself (which matters for MPS).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gst::prelude::*;

#[path = "common/bench_gstcuda.rs"]
mod bench_gstcuda;
#[path = "common/bench_pace.rs"]
mod bench_pace;
#[path = "common/bench_plot.rs"]
mod bench_plot;
#[path = "common/bench_python.rs"]
mod bench_python;
use bench_gstcuda::{PAIR_ALONE, PAIR_OURS, PAIR_UPSTREAM, gst_cuda_rows, host_rows};
use bench_python::{python_pair, python_producer, python_rows, python_wanted, spawn_python};
#[path = "common/bench_roles.rs"]
mod bench_roles;
use bench_roles::*;
#[path = "common/bench_viewer.rs"]
mod bench_viewer;
use bench_viewer::*;
#[path = "common/bench_output.rs"]
mod bench_output;
use bench_output::*;
#[path = "common/bench_measure.rs"]
mod bench_measure;
use bench_measure::*;
#[path = "common/bench_streams.rs"]
mod bench_streams;
use bench_streams::{STREAMS_SETTLE_S, streams_rows};
#[path = "common/numbers.rs"]
mod numbers;

const WIDTH: u32 = 3840;
const HEIGHT: u32 = 2160;
const FRAME_BYTES: f64 = (WIDTH * HEIGHT * 3) as f64;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--role") {
        std::process::exit(run_role(&args[2..]));
    }
    if args.get(1).map(String::as_str) == Some("--replot") {
        std::process::exit(replot(&args[2..]));
    }
    let options = Options::parse(&args[1..]);
    std::process::exit(run_benchmark(&options));
}

/// `--replot CSV PNG [--machine TEXT]`: draws the plot (and prints the
/// table) of a CSV an earlier run wrote, e.g. one fetched from a GPU host
/// without fonts. `--machine` names the GPU and GStreamer version for the
/// title when the CSV does not (those written before it recorded them).
fn replot(args: &[String]) -> i32 {
    let [csv, png, rest @ ..] = args else {
        eprintln!("usage: bench --replot CSV PNG [--machine TEXT]");
        return 2;
    };
    let machine_arg = match rest {
        [] => None,
        [flag, text] if flag == "--machine" => Some(text.clone()),
        _ => {
            eprintln!("usage: bench --replot CSV PNG [--machine TEXT]");
            return 2;
        }
    };
    let (rows, recorded) = match read_csv(Path::new(csv)) {
        Ok(read) => read,
        Err(e) => {
            eprintln!("cannot read {csv}: {e}");
            return 1;
        }
    };
    print_table(&rows, true);
    match bench_plot::plot(Path::new(png), &rows, machine_arg.or(recorded).as_deref()) {
        Ok(()) => {
            println!("wrote {png}");
            0
        }
        Err(e) => {
            eprintln!("no plot: {e}");
            1
        }
    }
}

// ---------------------------------------------------------------- options

#[derive(Debug, Clone)]
struct Options {
    frames: u64,
    warmup: u64,
    mps: Vec<bool>,
    smoke: bool,
    out: PathBuf,
    slots: Vec<u32>,
    paced_seconds: u64,
    /// `cuda-device-id` of the consumers' `cudaipcsrc`; `None`: the
    /// producer's GPU (0).
    consumer_device: Option<i32>,
    two_gpu: bool,
    /// Rows 13 (`--gst-cuda`): how long each producer runs.
    gst_cuda_seconds: f64,
    /// Rows 13 (`--pairs`): which of alone, ours, upstream to run.
    pairs: Vec<String>,
    /// Rows 14 (`--max-streams`): the most pairs a trial starts.
    max_streams: u32,
    /// Rows 14 (`--streams-seconds`): how long each trial runs once every
    /// consumer has its first frame; the first `STREAMS_SETTLE_S` are not
    /// counted.
    streams_seconds: f64,
    /// Rows 16a/16b (`--live-frames`): frames of the live producer after
    /// its warm-up.
    live_frames: u64,
}

/// `--rows`: the row ids (the first word of a configuration: 5, 5t, ...)
/// to measure; empty: all.
static ROWS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Rows 13: measured only when `--rows` or `--gst-cuda` names them.
const GST_CUDA_IDS: [&str; 5] = ["13a", "13b", "13c", "13d", "13e"];

/// Whether rows 13 were asked for.
fn gst_cuda_wanted() -> bool {
    ROWS.get()
        .is_some_and(|rows| rows.iter().any(|r| GST_CUDA_IDS.contains(&r.as_str())))
}

/// Whether `--rows` names `id`: rows 9 and 14 run only then.
fn asked_for(id: &str) -> bool {
    ROWS.get().is_some_and(|rows| rows.iter().any(|r| r == id))
}

/// Whether `--rows` leaves out the row of `config`.
fn left_out(config: &str) -> bool {
    let id = config.split_whitespace().next().unwrap_or_default();
    ROWS.get()
        .is_some_and(|rows| !rows.is_empty() && !rows.iter().any(|r| r == id))
}

impl Options {
    fn parse(args: &[String]) -> Self {
        let mut o = Options {
            frames: 20_000,
            warmup: 2_000,
            mps: vec![false],
            smoke: false,
            out: PathBuf::from("bench-results"),
            slots: vec![1, 2, 4, 8, 16],
            paced_seconds: 5,
            consumer_device: None,
            two_gpu: false,
            gst_cuda_seconds: 2.5,
            pairs: ["alone", "ours", "upstream"].map(String::from).to_vec(),
            max_streams: 64,
            streams_seconds: 6.0,
            live_frames: 600,
        };
        let mut rows: Option<Vec<String>> = None;
        let mut gst_cuda = false;
        let mut i = 0;
        while i < args.len() {
            let value = args.get(i + 1).cloned().unwrap_or_default();
            match args[i].as_str() {
                "--frames" => o.frames = value.parse().expect("--frames N"),
                "--warmup" => o.warmup = value.parse().expect("--warmup N"),
                "--out" => o.out = PathBuf::from(value),
                "--rows" => rows = Some(value.split(',').map(str::to_string).collect()),
                "--gst-cuda-seconds" => {
                    o.gst_cuda_seconds = value.parse().expect("--gst-cuda-seconds S")
                }
                "--pairs" => o.pairs = value.split(',').map(str::to_string).collect(),
                "--max-streams" => o.max_streams = value.parse().expect("--max-streams N"),
                "--streams-seconds" => {
                    o.streams_seconds = value.parse().expect("--streams-seconds S")
                }
                "--live-frames" => o.live_frames = value.parse().expect("--live-frames N"),
                "--paced-seconds" => o.paced_seconds = value.parse().expect("--paced-seconds N"),
                "--consumer-device" => {
                    o.consumer_device = Some(value.parse().expect("--consumer-device N"))
                }
                "--slots" => {
                    o.slots = value
                        .split(',')
                        .map(|s| s.parse().expect("--slots 1,2,4"))
                        .collect()
                }
                "--mps" => {
                    o.mps = match value.as_str() {
                        "off" => vec![false],
                        "on" => vec![true],
                        "both" => vec![false, true],
                        _ => panic!("--mps off|on|both"),
                    }
                }
                "--smoke" | "--two-gpu" | "--gst-cuda" => {
                    o.smoke |= args[i] == "--smoke";
                    o.two_gpu |= args[i] == "--two-gpu";
                    gst_cuda |= args[i] == "--gst-cuda";
                    i += 1;
                    continue;
                }
                "--help" | "-h" => {
                    println!(
                        "usage: bench [--frames N] [--warmup N] [--mps off|on|both] [--slots 1,2,4] [--paced-seconds N] [--consumer-device N] [--two-gpu] [--rows 5,5t,5v] [--gst-cuda] [--gst-cuda-seconds S] [--pairs alone,queued,ours,upstream] [--max-streams N] [--streams-seconds S] [--live-frames N] [--out DIR] [--smoke]\n\
                         --gst-cuda: only rows 13a-13e, this pair next to GStreamer's CUDA elements and upstream's cudaipcsink/cudaipcsrc (GStreamer 1.24+ with nvcodec); with --rows, those rows too\n\
                         --pairs: in rows 13, only the producer alone, alone with a queue of 32 frames before the consumer's half (queued, not run by default), our pair or upstream's\n\
                         --rows 9: a slow latest-frame viewer beside four verifying consumers (9a without, 9b with)\n\
                         --rows 14,14u: streams per GPU, this pair and upstream's; --max-streams caps the pairs (64), --streams-seconds the time of a trial (6, the first 2 not counted)\n\
                         --rows 16: consumers at their own pace: 16a a live 60 FPS producer and a frames=every consumer, 16b the same and a consumer taking 20 ms a frame, 16r/16c the Python consumer one frame at a time and in batches of 8 (hold=7); --live-frames: frames of 16a/16b after their warm-up of 60 (600)"
                    );
                    std::process::exit(0);
                }
                other => panic!("unknown option {other}"),
            }
            i += 2;
        }
        // --gst-cuda: rows 13 (alone, or added to --rows).
        if gst_cuda {
            rows.get_or_insert_with(Vec::new)
                .extend(GST_CUDA_IDS.iter().map(|id| id.to_string()));
        }
        if let Some(rows) = rows {
            let _ = ROWS.set(rows);
        }
        if o.streams_seconds <= STREAMS_SETTLE_S {
            panic!("--streams-seconds must be more than {STREAMS_SETTLE_S}");
        }
        if o.smoke {
            o.frames = 60;
            o.warmup = 10;
            o.slots = vec![1, 2];
            o.paced_seconds = 1;
            o.gst_cuda_seconds = 0.5;
            o.live_frames = 30;
        }
        o
    }
}

// ------------------------------------------------------------ benchmark

fn channel(tag: &str) -> String {
    format!("bench-{tag}-{}", std::process::id())
}

fn run_benchmark(o: &Options) -> i32 {
    gst::init().unwrap();
    let devices = cudaipc_transport::cuda::device_count();
    if o.two_gpu && devices < 2 {
        eprintln!("SKIPPED: needs two CUDA devices ({devices} visible): no --two-gpu rows");
        return 0;
    }
    let gpu = !o.smoke && devices > 0;
    std::fs::create_dir_all(&o.out).expect("cannot create the output folder");
    let mut rows = Vec::new();
    if gpu {
        for &mps in &o.mps {
            let _daemon = if mps {
                match Mps::start() {
                    Ok(d) => Some(d),
                    Err(e) => {
                        eprintln!("MPS not available, skipping the MPS rows: {e}");
                        continue;
                    }
                }
            } else {
                None
            };
            let env = _daemon.as_ref().map(|d| d.env.clone()).unwrap_or_default();
            // --two-gpu: the same rows with the consumer on GPU 0, then on 1.
            let consumers = if o.two_gpu {
                vec![Some(0), Some(1)]
            } else {
                vec![o.consumer_device]
            };
            for consumer_device in consumers {
                let o = Options {
                    consumer_device,
                    ..o.clone()
                };
                for mut row in gpu_rows(&o, &env).into_iter().filter(|r| !r.left_out) {
                    row.mps = mps;
                    print_row(&row);
                    rows.push(row);
                }
            }
            if gst_cuda_wanted() && !o.two_gpu {
                for mut row in gst_cuda_rows(o, &env) {
                    row.mps = mps;
                    print_row(&row);
                    rows.push(row);
                }
            }
            if python_wanted() && !o.two_gpu {
                for mut row in python_rows(o, &env, true)
                    .into_iter()
                    .filter(|r| !r.left_out)
                {
                    row.mps = mps;
                    print_row(&row);
                    rows.push(row);
                }
            }
            if !o.two_gpu {
                for mut row in viewer_rows(o, &env, true)
                    .into_iter()
                    .chain(streams_rows(o, &env, true))
                {
                    row.mps = mps;
                    rows.push(row);
                }
                let python_every = python_consumer_fps(&rows, mps);
                for mut row in bench_pace::pace_rows(o, &env, true, python_every) {
                    row.mps = mps;
                    print_row(&row);
                    rows.push(row);
                }
                for mut row in paced_rows(o, true, &env)
                    .into_iter()
                    .filter(|r| !r.left_out)
                {
                    row.mps = mps;
                    print_row(&row);
                    rows.push(row);
                }
            }
        }
    } else {
        let measured = host_rows(o).into_iter().chain(paced_rows(o, false, &[]));
        for mut row in measured.filter(|r| !r.left_out) {
            row.frame_bytes = (320 * 240 * 3) as f64;
            print_row(&row);
            rows.push(row);
        }
        if python_wanted() {
            for row in python_rows(o, &[], false)
                .into_iter()
                .filter(|r| !r.left_out)
            {
                print_row(&row);
                rows.push(row);
            }
        }
        // Without a CUDA device their elements are missing: rows of notes.
        if gst_cuda_wanted() {
            for row in gst_cuda_rows(o, &[]) {
                print_row(&row);
                rows.push(row);
            }
        }
        rows.extend(viewer_rows(o, &[], false));
        rows.extend(streams_rows(o, &[], false));
        let python_every = python_consumer_fps(&rows, false);
        for row in bench_pace::pace_rows(o, &[], false, python_every) {
            print_row(&row);
            rows.push(row);
        }
    }
    println!();
    print_table(&rows, gpu);
    let machine = machine_description(gpu);
    write_csv(&o.out.join("bench.csv"), &rows, &machine);
    match bench_plot::plot(&o.out.join("bench.png"), &rows, Some(&machine)) {
        Ok(()) => println!("wrote {}", o.out.join("bench.png").display()),
        Err(e) => println!("no plot: {e}"),
    }
    println!("wrote {}", o.out.join("bench.csv").display());
    let failures = rows
        .iter()
        .filter(|r| !r.error.is_empty() || r.corrupt.unwrap_or(0) > 0 || r.missing.unwrap_or(0) > 0)
        .count();
    if failures > 0 {
        eprintln!("{failures} configuration(s) failed or lost frames");
        1
    } else {
        0
    }
}

/// The rate of row 15's Python consumer among `rows` (MPS `mps`), if it ran.
fn python_consumer_fps(rows: &[Row], mps: bool) -> Option<f64> {
    rows.iter()
        .find(|r| r.mps == mps && r.config.starts_with("15 Python consumer") && r.fps > 0.0)
        .map(|r| r.fps)
}

fn gpu_rows(o: &Options, env: &[(String, String)]) -> Vec<Row> {
    let caps = format!(
        "video/x-raw(memory:CUDAMemory),format=RGB,width={WIDTH},height={HEIGHT},framerate=0/1"
    );
    let total = o.frames + o.warmup;
    let generate_with = |frames: u64, props: &str| {
        format!("cudatestsrc num-buffers={frames} pattern=counter {props} ! {caps}")
    };
    let generate = |frames: u64| generate_with(frames, "");
    let mut rows = Vec::new();
    // --two-gpu: only rows 2 and 5 default.
    if !o.two_gpu {
        rows.push(single(
            "1a one process: generate + invert",
            &format!(
                "{} ! cudaprocess operation=invert ! fakesink name=sink sync=false",
                generate(total)
            ),
            o.warmup,
            env,
        ));
        rows.push(single(
            "1b one process: generate + invert + verify",
            &format!(
                "{} ! cudaprocess name=check operation=invert verify=true ! fakesink name=sink sync=false",
                generate(total)
            ),
            o.warmup,
            env,
        ));
        rows.push(single(
            "1c one process: generate + verify (read only)",
            &format!(
                "{} ! cudaprocess name=check verify=true ! fakesink name=sink sync=false enable-last-sample=false",
                generate(total)
            ),
            o.warmup,
            env,
        ));
        // The halves as far apart as the deep ring puts them across two
        // processes: each frame is inverted long after it was written, no
        // longer in the L2 cache.
        rows.push(single(
            &format!(
                "1q one process, the halves {QUEUED_FRAMES} frames apart: generate ! queue ! invert + verify"
            ),
            &format!(
                "{} ! {} ! cudaprocess name=check operation=invert verify=true ! fakesink name=sink sync=false",
                generate(total),
                queue_of_frames(QUEUED_FRAMES)
            ),
            o.warmup,
            env,
        ));
        rows.push(two_independent(
            "1t two independent processes: each generate + invert + verify, half the frames",
            &format!(
                "{} ! cudaprocess name=check operation=invert verify=true ! fakesink name=sink sync=false",
                generate(total / 2 + o.warmup / 2)
            ),
            o.warmup / 2,
            env,
        ));
    }
    rows.push(spawn_copy(total, env, o.consumer_device));
    // The rows below: `generate` (with `source_props`) into cudaipcsink with
    // `sink_props`, and a consumer `cudaipcsrc` followed by `consumer` (its
    // own properties first).
    let rows_made = std::cell::Cell::new(0);
    let two_from = |env: &[(String, String)],
                    config: &str,
                    frames: u64,
                    warmup: u64,
                    source_props: &str,
                    sink_props: &str,
                    consumer: &str| {
        rows_made.set(rows_made.get() + 1);
        let ch = channel(&rows_made.get().to_string());
        two_process(
            config,
            &format!(
                "{} ! rscudaipcsink name=ipcsink channel={ch} sync=false {sink_props} {}",
                generate_with(frames + warmup, source_props),
                std::env::var("CUDAIPC_BENCH_SINK_PROPS").unwrap_or_default()
            ),
            &format!("rscudaipcsrc name=src channel={ch} connect-timeout=60000 {consumer}"),
            warmup,
            env,
            o.consumer_device,
        )
    };
    let two = |config: &str, frames: u64, warmup: u64, sink_props: &str, consumer: &str| {
        two_from(env, config, frames, warmup, "", sink_props, consumer)
    };
    let verifying = |src_props: &str| {
        format!(
            "{src_props} ! cudaprocess name=check operation=invert verify=true ! fakesink name=sink sync=false"
        )
    };
    let slow = (o.frames / 4).max(50);
    if !o.two_gpu {
        rows.push(two(
            "3 seed: slots=1 gpu-sync=host spin",
            slow,
            o.warmup / 4,
            "slots=1 gpu-sync=host wait-mode=spin",
            &verifying("wait-mode=spin"),
        ));
        rows.push(two(
            "4 seed with sleep wait",
            slow,
            o.warmup / 4,
            "slots=1 gpu-sync=host wait-mode=sleep",
            &verifying("wait-mode=sleep"),
        ));
    }
    rows.push(two(
        "5 default: slots=auto gpu-sync=auto hybrid",
        o.frames,
        o.warmup,
        "",
        &verifying(""),
    ));
    if o.two_gpu {
        return rows;
    }
    for &slots in &o.slots {
        rows.push(two(
            &format!("5 slots={slots} gpu-sync=auto hybrid"),
            o.frames,
            o.warmup,
            &format!("slots={slots}"),
            &verifying(""),
        ));
    }
    // The consumer only checks (reads) the frames: no second buffer to
    // write, so the frame can stay in the L2 cache between the processes.
    rows.push(two(
        "5v default, consumer verifies only (read only)",
        o.frames,
        o.warmup,
        "",
        "! cudaprocess name=check verify=true ! fakesink name=sink sync=false enable-last-sample=false",
    ));
    // Row 5 over a descriptor channel (ipc-mode=fd): the control block
    // handed over the channel's socket; the slots as in row 5.
    rows.push(two(
        "5d default over a descriptor channel (ipc-mode=fd)",
        o.frames,
        o.warmup,
        "ipc-mode=fd",
        &verifying(""),
    ));
    // The same ordered by interprocess events instead of the timeline, and
    // the descriptor channel's transport alone (to compare with 5t).
    rows.push(two(
        "5de descriptor channel with events (ipc-mode=fd gpu-sync=event)",
        o.frames,
        o.warmup,
        "ipc-mode=fd gpu-sync=event",
        &verifying(""),
    ));
    rows.push(two(
        "5dt descriptor channel, transport only (consumer drops frames)",
        o.frames,
        o.warmup,
        "ipc-mode=fd",
        "! fakesink name=sink sync=false",
    ));
    // A consumer of another user (nobody): on a named channel only host
    // synchronisation crosses users (events live in files of their
    // creator's user); a descriptor channel orders by the timeline.
    // The producer waits for it to attach: it starts slower than the
    // producer runs, and another user's waiting consumer is not counted.
    let me = cudaipc_channel::shm::effective_uid();
    for (config, sink_props, src_props) in [
        (
            "5u consumer of another user, named channel (permissions=0666 gpu-sync=host)",
            "permissions=438 gpu-sync=host wait-for-connection=1".to_string(),
            format!("allowed-producers={me}"),
        ),
        (
            "5du consumer of another user, descriptor channel (timeline)",
            format!(
                "ipc-mode=fd permissions=438 allowed-uids={} wait-for-connection=1",
                nobody_uid().unwrap_or(65534)
            ),
            format!("allowed-producers={me}"),
        ),
    ] {
        let under_mps = env.iter().any(|(k, _)| k == "CUDA_MPS_PIPE_DIRECTORY");
        let other = other_user();
        let (wrapper, user_env) = match other {
            _ if left_out(config) => {
                rows.push(Row::left_out(config));
                continue;
            }
            // An MPS server serves one user: another user's client waits
            // until it ends.
            _ if under_mps => {
                rows.push(Row {
                    config: config.into(),
                    error: "not run under MPS: an MPS server serves one user at a time".into(),
                    ..Default::default()
                });
                continue;
            }
            Some(other) => other,
            None => {
                rows.push(Row {
                    config: config.into(),
                    error: "needs root (setpriv) to run the consumer as another user".into(),
                    ..Default::default()
                });
                continue;
            }
        };
        rows_made.set(rows_made.get() + 1);
        let ch = channel(&rows_made.get().to_string());
        rows.push(two_process_as(
            config,
            &format!(
                "{} ! rscudaipcsink name=ipcsink channel={ch} sync=false {sink_props}",
                generate_with(o.frames + o.warmup, "")
            ),
            &format!(
                "rscudaipcsrc name=src channel={ch} connect-timeout=60000 {}",
                verifying(&src_props)
            ),
            o.warmup,
            env,
            o.consumer_device,
            (&wrapper, &user_env),
        ));
    }
    // The transport alone: the consumer takes frames and drops them (no GPU
    // work of its own), which bounds what the channel itself costs.
    rows.push(two(
        "5t default, transport only (consumer drops frames)",
        o.frames,
        o.warmup,
        "",
        "! fakesink name=sink sync=false",
    ));
    // For GStreamer's CUDA elements (nvcodec): the consumer copies every
    // frame into GstCudaMemory (GStreamer 1.22 cannot wrap the slots); to
    // compare with 5t.
    if gstcudaipc::gstcuda::available() {
        rows.push(two(
            "5g default, consumer outputs GstCudaMemory (one copy)",
            o.frames,
            o.warmup,
            "",
            "output-memory=gstcuda ! fakesink name=sink sync=false",
        ));
        // The producer writes GstCudaMemory, as nvcodec's elements do, into
        // the GstCudaBufferPool the sink proposes: its buffers are lent as
        // slots (no copy); to compare with 5t.
        rows.push(two_from(
            env,
            "5l producer writes GstCudaMemory (lent slots), transport only",
            o.frames,
            o.warmup,
            "output-memory=gstcuda",
            "",
            "! fakesink name=sink sync=false",
        ));
        // The same producer with lending off (CUDAIPC_LEND=0): the sink
        // copies each frame into a slot of its own.
        let mut no_lending = env.to_vec();
        no_lending.push(("CUDAIPC_LEND".into(), "0".into()));
        rows.push(two_from(
            &no_lending,
            "5c producer writes GstCudaMemory, copied (CUDAIPC_LEND=0), transport only",
            o.frames,
            o.warmup,
            "output-memory=gstcuda",
            "",
            "! fakesink name=sink sync=false",
        ));
        rows.push(two_from(
            env,
            "5lv lent slots, consumer inverts + verifies",
            o.frames,
            o.warmup,
            "output-memory=gstcuda",
            "",
            &verifying(""),
        ));
    }
    // System memory at the ends: one frame uploaded again and again (no CPU
    // generation cost in the figure), and a download into system memory.
    let few = (o.frames / 40).max(30);
    let ch = channel("upload");
    rows.push(two_process(
        "6a system-memory producer (upload)",
        &format!(
            "videotestsrc num-buffers=1 pattern=smpte ! video/x-raw,format=RGB,width={WIDTH},height={HEIGHT},framerate=0/1 ! imagefreeze num-buffers={} ! rscudaipcsink name=ipcsink channel={ch} sync=false",
            few + 10
        ),
        &format!(
            "rscudaipcsrc name=src channel={ch} connect-timeout=60000 ! cudaprocess operation=invert ! fakesink name=sink sync=false"
        ),
        10,
        env,
        o.consumer_device,
    ));
    rows.push(two(
        "6b system-memory consumer (download)",
        few,
        10,
        "",
        "! video/x-raw,format=RGB ! fakesink name=sink sync=false",
    ));
    rows
}

/// Row 2: copies of a frame from GPU 0 to the consumer's GPU (`None`: 0).
fn spawn_copy(iterations: u64, env: &[(String, String)], to: Option<i32>) -> Row {
    let config = match to {
        Some(to) => format!("2 device-to-device copy of a frame [GPU 0 -> GPU {to}]"),
        None => "2 device-to-device copy of a frame".to_string(),
    };
    if left_out(&config) {
        return Row::left_out(&config);
    }
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([
            "--role",
            "copy",
            &(FRAME_BYTES as u64).to_string(),
            &iterations.to_string(),
            &to.unwrap_or(0).to_string(),
        ])
        .envs(env.iter().cloned())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    match result_of(child, "copy") {
        Ok(c) => {
            let mut row = row_from(&config, &c, None);
            row.note = if to.unwrap_or(0) == 0 {
                format!("{:.0} GB/s read+write", 2.0 * row.gbps())
            } else {
                format!(
                    "GPU to GPU, {:.0} GB/s; peer access {}",
                    row.gbps(),
                    if number(&c, "peer") == Some(1.0) {
                        "enabled"
                    } else {
                        "unavailable (staged through the host)"
                    }
                )
            };
            row
        }
        Err(e) => Row {
            config,
            error: e,
            ..Default::default()
        },
    }
}

/// 60 frames per second, live: latency and CPU per process by wait mode.
fn paced_rows(o: &Options, gpu: bool, env: &[(String, String)]) -> Vec<Row> {
    let frames = 60 * o.paced_seconds;
    let mut rows = Vec::new();
    for wait in ["hybrid", "spin", "sleep"] {
        let ch = channel(&format!("paced-{wait}"));
        let (producer, consumer) = if gpu {
            (
                format!(
                    "cudatestsrc is-live=true num-buffers={frames} pattern=counter ! video/x-raw(memory:CUDAMemory),format=RGB,width={WIDTH},height={HEIGHT},framerate=60/1 ! rscudaipcsink name=ipcsink channel={ch} wait-mode={wait}"
                ),
                format!(
                    "rscudaipcsrc name=src channel={ch} connect-timeout=60000 wait-mode={wait} ! cudaprocess name=check verify=true ! fakesink name=sink sync=false"
                ),
            )
        } else {
            (
                format!(
                    "videotestsrc is-live=true num-buffers={frames} ! video/x-raw,format=RGB,width=320,height=240,framerate=60/1 ! rscudaipcsink name=ipcsink channel={ch} transport=host wait-mode={wait}"
                ),
                format!(
                    "rscudaipcsrc name=src channel={ch} connect-timeout=60000 wait-mode={wait} ! fakesink name=sink sync=false"
                ),
            )
        };
        // The first frames wait for the consumer's start-up (kernel
        // compilation): the latency figures begin after 30.
        rows.push(two_process(
            &format!("8 paced 60 FPS, wait-mode={wait}"),
            &producer,
            &consumer,
            30.min(frames / 2),
            env,
            o.consumer_device.filter(|_| gpu),
        ));
    }
    rows
}
