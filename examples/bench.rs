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

#[path = "common/bench_pace.rs"]
mod bench_pace;
#[path = "common/bench_plot.rs"]
mod bench_plot;
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

// ------------------------------------------------------------------ roles

/// Runs one pipeline in this process and prints a `RESULT key=value ...`
/// line. args: role, warmup, pipeline description.
fn run_role(args: &[String]) -> i32 {
    gst::init().unwrap();
    gstcudaipc::plugin_register_static().unwrap();
    match args[0].as_str() {
        "copy" => run_copy(
            args[1].parse().unwrap(),
            args[2].parse().unwrap(),
            args[3].parse().unwrap(),
        ),
        "pipeline" => run_pipeline(args[1].parse().unwrap(), &args[2]),
        other => {
            eprintln!("unknown role {other}");
            2
        }
    }
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

fn run_pipeline(warmup: u64, description: &str) -> i32 {
    let wall_start = Instant::now();
    let cpu_start = cpu_seconds();
    let pipeline = match gst::parse::launch(description) {
        Ok(p) => p.downcast::<gst::Pipeline>().unwrap(),
        Err(e) => {
            eprintln!("cannot build {description}: {e}");
            return 1;
        }
    };
    // Frames reaching the sink; the clock starts at the warm-up's last frame.
    let counted = Arc::new(AtomicU64::new(0));
    let started: Arc<Mutex<Option<(Instant, f64)>>> = Arc::new(Mutex::new(None));
    if let Some(sink) = pipeline.by_name("sink") {
        let counted = counted.clone();
        let started = started.clone();
        let source = pipeline.by_name("src");
        sink.static_pad("sink")
            .unwrap()
            .add_probe(gst::PadProbeType::BUFFER, move |_, _| {
                if counted.fetch_add(1, Ordering::Relaxed) + 1 == warmup {
                    *started.lock().unwrap() = Some((Instant::now(), cpu_seconds()));
                    // Latency figures leave the warm-up (start-up) out.
                    if let Some(source) = source.as_ref() {
                        source.emit_by_name::<()>("reset-stats", &[]);
                    }
                }
                gst::PadProbeReturn::Ok
            });
    }
    let produced = pipeline
        .by_name("ipcsink")
        .map(|sink| ProducerClock::attach(&sink, warmup));
    // CUDAIPC_BENCH_CONTROL (rows 14): the parent steps the process through
    // its standard input (see `Control`).
    let control = std::env::var_os("CUDAIPC_BENCH_CONTROL").map(|_| Control::start(&pipeline));
    if let Ok(path) = std::env::var("CUDAIPC_BENCH_LOOP") {
        loop_file(&pipeline, &path);
    }
    // CUDAIPC_BENCH_SECONDS (rows 13): the stream ends that long after its
    // first frame, with an EOS into the producer's last element.
    let deadline = std::env::var("CUDAIPC_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map(Duration::from_secs_f64);
    let end_pad = (deadline.is_some() || control.is_some())
        .then(|| {
            pipeline
                .by_name("ipcsink")
                .or_else(|| pipeline.by_name("sink"))
        })
        .flatten()
        .and_then(|e| e.static_pad("sink"));
    let first_frame: Arc<std::sync::OnceLock<Instant>> = Arc::default();
    if let Some(pad) = &end_pad {
        let first_frame = first_frame.clone();
        pad.add_probe(gst::PadProbeType::BUFFER, move |_, _| {
            first_frame.get_or_init(Instant::now);
            gst::PadProbeReturn::Ok
        });
    }
    pipeline.set_state(gst::State::Playing).unwrap();
    let bus = pipeline.bus().unwrap();
    let mut ok = true;
    let mut ended: Option<Instant> = None;
    let poll = end_pad.as_ref().map(|_| gst::ClockTime::from_mseconds(50));
    loop {
        if let Some(msg) = bus.timed_pop(poll) {
            match msg.view() {
                gst::MessageView::Eos(_) => break,
                gst::MessageView::Error(e) => {
                    eprintln!("error: {} ({:?})", e.error(), e.debug());
                    ok = false;
                    break;
                }
                _ => {}
            }
        }
        if let Some(pad) = &end_pad {
            let due = deadline
                .is_some_and(|deadline| first_frame.get().is_some_and(|t| t.elapsed() >= deadline))
                || control.as_ref().is_some_and(Control::stop_asked);
            match ended {
                None if due => {
                    // Serialised with the streaming thread (the pad's stream
                    // lock); upstream then gets FLOW_EOS and stops.
                    pad.send_event(gst::event::Eos::new());
                    ended = Some(Instant::now());
                }
                Some(t) if t.elapsed() > Duration::from_secs(30) => {
                    eprintln!("error: no EOS 30 s after ending the stream");
                    ok = false;
                    break;
                }
                _ => {}
            }
        }
    }
    // The CPU runs ahead of the GPU: the clock stops once the GPU is done
    // (a consumer's: the one its source reads on; -1 is the producer's, 0).
    // Only where this plugin's elements run: elsewhere (rows 13's upstream
    // and one-process pipelines) it would create a CUDA context inside the
    // measured time, and GStreamer's elements keep only a few frames queued.
    let ordinal = pipeline
        .by_name("src")
        .filter(|s| s.find_property("cuda-device-id").is_some())
        .map_or(0, |s| s.property::<i32>("cuda-device-id").max(0));
    if cudaipc_transport::cuda::is_available()
        && has_own_elements(&pipeline)
        && let Ok(device) = cudaipc_transport::cuda::Device::get(ordinal)
    {
        let _ = device.stream().synchronize();
    }
    let end = Instant::now();
    let cpu_end = cpu_seconds();
    let mut fields: BTreeMap<String, String> = BTreeMap::new();
    let frames = counted.load(Ordering::Relaxed);
    if let Some((t0, cpu0)) = *started.lock().unwrap() {
        let measured = frames.saturating_sub(warmup);
        let seconds = end.duration_since(t0).as_secs_f64();
        fields.insert("measured".into(), measured.to_string());
        fields.insert("seconds".into(), format!("{seconds:.6}"));
        fields.insert("cpu_s".into(), format!("{:.6}", cpu_end - cpu0));
    } else {
        fields.insert("cpu_s".into(), format!("{:.6}", cpu_end - cpu_start));
        fields.insert(
            "seconds".into(),
            format!("{:.6}", end.duration_since(wall_start).as_secs_f64()),
        );
    }
    fields.insert("frames".into(), frames.to_string());
    if let Some(produced) = &produced {
        produced.report(&mut fields);
    }
    if let Some(control) = &control {
        control.report(&mut fields);
    }
    for (name, prefix) in [("src", "src"), ("check", "check"), ("ipcsink", "ipcsink")] {
        if let Some(element) = pipeline.by_name(name)
            && element.find_property("stats").is_some()
        {
            let stats = element.property::<gst::Structure>("stats");
            for (field, value) in stats.iter() {
                let text = value.serialize().map(|s| s.to_string()).unwrap_or_default();
                fields.insert(format!("{prefix}.{field}"), text);
            }
        }
    }
    let _ = pipeline.set_state(gst::State::Null);
    let line: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("RESULT {}", line.join(" "));
    if ok { 0 } else { 1 }
}

/// Whether `pipeline` holds an element of this plugin.
fn has_own_elements(pipeline: &gst::Pipeline) -> bool {
    pipeline.iterate_recurse().into_iter().flatten().any(|e| {
        e.factory()
            .and_then(|f| f.plugin_name())
            .is_some_and(|p| p == "cudaipc")
    })
}

/// The producer's own clock: frames into the sink named `ipcsink`, timed
/// from the arrival of the first frame after the warm-up to the arrival of
/// the last one (the sink renders one frame at a time, so each arrival
/// means the frame before it is published).
struct ProducerClock {
    warmup: u64,
    times: Arc<Mutex<ProducerTimes>>,
}

#[derive(Default)]
struct ProducerTimes {
    arrived: u64,
    from: Option<Instant>,
    last: Option<Instant>,
}

impl ProducerClock {
    fn attach(sink: &gst::Element, warmup: u64) -> ProducerClock {
        let times: Arc<Mutex<ProducerTimes>> = Arc::default();
        if let Some(pad) = sink.static_pad("sink") {
            let times = times.clone();
            pad.add_probe(gst::PadProbeType::BUFFER, move |_, _| {
                let now = Instant::now();
                let mut times = times.lock().unwrap();
                times.arrived += 1;
                if times.arrived == warmup + 1 {
                    times.from = Some(now);
                }
                times.last = Some(now);
                gst::PadProbeReturn::Ok
            });
        }
        ProducerClock { warmup, times }
    }

    /// `produced.measured` frames in `produced.seconds`.
    fn report(&self, fields: &mut BTreeMap<String, String>) {
        let times = self.times.lock().unwrap();
        if let (Some(from), Some(last)) = (times.from, times.last) {
            let measured = times.arrived - (self.warmup + 1);
            let seconds = last.duration_since(from).as_secs_f64();
            fields.insert("produced.measured".into(), measured.to_string());
            fields.insert("produced.seconds".into(), format!("{seconds:.6}"));
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for the parent and every child.
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// A child that rows 14 run in step with others, through its standard
/// input and output: a consumer says `READY` at its first frame; the parent
/// then sends every consumer `WINDOW <start> <end>` (CLOCK_MONOTONIC
/// nanoseconds: the counted time) and each producer `STOP` (or closes its
/// input) to end its stream.
struct Control {
    state: Arc<ControlState>,
}

#[derive(Default)]
struct ControlState {
    stop: AtomicBool,
    /// `READY` was said (at the first frame).
    ready: AtomicBool,
    /// A frame came in the window.
    in_window: AtomicBool,
    window_start: AtomicU64,
    window_end: AtomicU64,
    window_frames: AtomicU64,
    /// The source's (`src`) stats at the first frame after the window.
    window_stats: Mutex<Option<gst::Structure>>,
}

impl Control {
    fn start(pipeline: &gst::Pipeline) -> Control {
        let state: Arc<ControlState> = Arc::default();
        {
            let state = state.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::stdin().lock().lines() {
                    let Ok(line) = line else { break };
                    let words: Vec<&str> = line.split_whitespace().collect();
                    match words.as_slice() {
                        ["WINDOW", start, end] => {
                            let (Ok(start), Ok(end)) = (start.parse(), end.parse()) else {
                                eprintln!("bad control line: {line}");
                                continue;
                            };
                            state.window_end.store(end, Ordering::SeqCst);
                            state.window_start.store(start, Ordering::SeqCst);
                        }
                        ["STOP"] => break,
                        _ => eprintln!("bad control line: {line}"),
                    }
                }
                state.stop.store(true, Ordering::SeqCst);
            });
        }
        let source = pipeline
            .by_name("src")
            .filter(|s| s.find_property("stats").is_some());
        if let Some(pad) = pipeline.by_name("sink").and_then(|s| s.static_pad("sink")) {
            let state = state.clone();
            pad.add_probe(gst::PadProbeType::BUFFER, move |_, _| {
                if !state.ready.swap(true, Ordering::Relaxed) {
                    println!("READY");
                }
                let start = state.window_start.load(Ordering::SeqCst);
                if start == 0 {
                    return gst::PadProbeReturn::Ok;
                }
                let now = monotonic_ns();
                let end = state.window_end.load(Ordering::SeqCst);
                if now >= end {
                    let mut stats = state.window_stats.lock().unwrap();
                    if stats.is_none() {
                        *stats = Some(
                            source
                                .as_ref()
                                .map(|s| s.property::<gst::Structure>("stats"))
                                .unwrap_or_else(|| gst::Structure::new_empty("none")),
                        );
                    }
                } else if now >= start {
                    if !state.in_window.swap(true, Ordering::Relaxed)
                        && let Some(source) = &source
                    {
                        // The latency figures cover the window only.
                        source.emit_by_name::<()>("reset-stats", &[]);
                    }
                    state.window_frames.fetch_add(1, Ordering::Relaxed);
                }
                gst::PadProbeReturn::Ok
            });
        }
        Control { state }
    }

    fn stop_asked(&self) -> bool {
        self.state.stop.load(Ordering::SeqCst)
    }

    /// `window.frames` and `window.seconds`, and the source's stats over
    /// the window (`window.<stat>`) when a frame came after it.
    fn report(&self, fields: &mut BTreeMap<String, String>) {
        let start = self.state.window_start.load(Ordering::SeqCst);
        if start == 0 {
            return;
        }
        let end = self.state.window_end.load(Ordering::SeqCst);
        let frames = self.state.window_frames.load(Ordering::Relaxed);
        fields.insert("window.frames".into(), frames.to_string());
        fields.insert(
            "window.seconds".into(),
            format!("{:.6}", end.saturating_sub(start) as f64 / 1e9),
        );
        if let Some(stats) = self.state.window_stats.lock().unwrap().as_ref() {
            for (field, value) in stats.iter() {
                let text = value.serialize().map(|s| s.to_string()).unwrap_or_default();
                fields.insert(format!("window.{field}"), text);
            }
        }
    }
}

/// Feeds the appsrc named `loop` with the bytes of `path` again and again
/// (one buffer per round: a whole H.264 clip or one JPEG image), until the
/// stream ends. GStreamer 1.26's staged runtime has no multifilesrc.
fn loop_file(pipeline: &gst::Pipeline, path: &str) {
    use gst_app::prelude::*;
    let Some(appsrc) = pipeline
        .by_name("loop")
        .and_then(|e| e.downcast::<gst_app::AppSrc>().ok())
    else {
        return;
    };
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    let buffer = gst::Buffer::from_slice(bytes);
    appsrc.set_callbacks(
        gst_app::AppSrcCallbacks::builder()
            .need_data(move |appsrc, _| {
                // A new reference each round: the memory is shared, not copied.
                let _ = appsrc.push_buffer(buffer.clone());
            })
            .build(),
    );
}

/// Device-to-device copies of one 4K RGB frame between rotating buffers,
/// from GPU 0 to GPU `to` (on `to`'s stream; another GPU through unified
/// addressing): the memory (or link) limit for moving these bytes.
fn run_copy(bytes: usize, iterations: u64, to: i32) -> i32 {
    use cudaipc_transport::cuda::{Device, DeviceBuffer, DeviceRegion};
    let (Ok(from), Ok(device)) = (Device::get(0), Device::get(to)) else {
        println!("RESULT measured=0 seconds=0");
        return 0;
    };
    let peer = to != 0 && device.enable_peer_access(&from).is_ok();
    let buffers: Vec<DeviceRegion> = (0..8)
        .map(|i| {
            DeviceBuffer::new(if i < 4 { &from } else { &device }, bytes)
                .unwrap()
                .into_region()
        })
        .collect();
    for b in &buffers {
        b.memset(0x5a).unwrap();
    }
    from.stream().synchronize().unwrap();
    let stream = device.stream();
    let copy = |i: u64| {
        let src = &buffers[(i % 4) as usize];
        let dst = &buffers[4 + (i % 4) as usize];
        // On `to`'s stream: the destination's device.
        dst.copy_from(src).unwrap();
    };
    for i in 0..iterations / 10 {
        copy(i);
    }
    stream.synchronize().unwrap();
    let start = Instant::now();
    for i in 0..iterations {
        copy(i);
    }
    stream.synchronize().unwrap();
    let seconds = start.elapsed().as_secs_f64();
    let peer = peer as u8;
    println!("RESULT measured={iterations} seconds={seconds:.6} cpu_s=0 peer={peer}");
    0
}

// ------------------------------------------------------------ benchmark

#[derive(Debug, Clone, Default)]
struct Row {
    config: String,
    /// Not measured: `--rows` leaves it out.
    left_out: bool,
    mps: bool,
    fps: f64,
    consumer_cpu: f64,
    producer_cpu: f64,
    latency_p50_us: f64,
    latency_p99_us: f64,
    latency_max_us: f64,
    corrupt: Option<u64>,
    missing: Option<u64>,
    frames: u64,
    /// Bytes of one frame of this row.
    frame_bytes: f64,
    note: String,
    /// Why the configuration could not be measured, if it could not.
    error: String,
}

impl Row {
    fn left_out(config: &str) -> Row {
        Row {
            config: config.to_string(),
            left_out: true,
            ..Row::default()
        }
    }

    fn gbps(&self) -> f64 {
        self.fps * self.frame_bytes / 1e9
    }
}

struct Child {
    role: &'static str,
    warmup: u64,
    pipeline: String,
}

fn spawn(child: &Child, env: &[(String, String)]) -> std::process::Child {
    spawn_as(child, env, &[])
}

/// `spawn` under `wrapper` (e.g. `setpriv` to run as another user).
fn spawn_as(child: &Child, env: &[(String, String)], wrapper: &[&str]) -> std::process::Child {
    let exe = std::env::current_exe().unwrap();
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(exe);
            command
        }
        None => Command::new(exe),
    };
    command
        .args([
            "--role",
            child.role,
            &child.warmup.to_string(),
            &child.pipeline,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    command.spawn().expect("cannot start a benchmark process")
}

fn result_of(child: std::process::Child, what: &str) -> Result<BTreeMap<String, String>, String> {
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    parse_result(
        what,
        out.status.success(),
        &out.status.to_string(),
        &String::from_utf8_lossy(&out.stdout),
        &String::from_utf8_lossy(&out.stderr),
    )
}

/// The fields of a child's `RESULT` line, or why it has none.
fn parse_result(
    what: &str,
    success: bool,
    status: &str,
    stdout: &str,
    stderr: &str,
) -> Result<BTreeMap<String, String>, String> {
    let line = stdout.lines().find(|l| l.starts_with("RESULT "));
    match (success, line) {
        (true, Some(line)) => Ok(line[7..]
            .split_whitespace()
            .filter_map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect()),
        _ => Err(format!(
            "{what} failed: {status}\n{}",
            stderr.lines().take(12).collect::<Vec<_>>().join("\n")
        )),
    }
}

fn number(fields: &BTreeMap<String, String>, key: &str) -> Option<f64> {
    fields
        .get(key)
        .and_then(|v| v.trim_matches('"').parse().ok())
}

/// Runs a producer and a consumer process; the consumer's clock makes the
/// row. `consumer_device`: `cuda-device-id` of the consumer's `cudaipcsrc`,
/// named in the row.
fn two_process(
    config: &str,
    producer: &str,
    consumer: &str,
    warmup: u64,
    env: &[(String, String)],
    consumer_device: Option<i32>,
) -> Row {
    two_process_as(
        config,
        producer,
        consumer,
        warmup,
        env,
        consumer_device,
        (&[], &[]),
    )
}

/// The consumer process runs as another user (nobody, through `setpriv`),
/// with its own registry; `None` where that is impossible (not root).
/// Environment variables of a child process.
type Env = Vec<(String, String)>;

fn other_user() -> Option<(Vec<&'static str>, Env)> {
    if cudaipc_channel::shm::effective_uid() != 0 {
        return None;
    }
    let wrapper = vec![
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
    ];
    let env = vec![
        ("HOME".to_string(), "/tmp".to_string()),
        (
            "GST_REGISTRY".to_string(),
            "/tmp/cudaipc-bench-other-user-registry.bin".to_string(),
        ),
    ];
    Some((wrapper, env))
}

fn nobody_uid() -> Option<u32> {
    let out = Command::new("id").args(["-u", "nobody"]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn two_process_as(
    config: &str,
    producer: &str,
    consumer: &str,
    warmup: u64,
    env: &[(String, String)],
    consumer_device: Option<i32>,
    (consumer_wrapper, consumer_env): (&[&str], &[(String, String)]),
) -> Row {
    if left_out(config) {
        return Row::left_out(config);
    }
    let (config, consumer) = match consumer_device {
        Some(d) => (
            format!("{config} [consumer GPU {d}]"),
            consumer.replacen(
                "rscudaipcsrc ",
                &format!("rscudaipcsrc cuda-device-id={d} "),
                1,
            ),
        ),
        None => (config.to_string(), consumer.to_string()),
    };
    let config = config.as_str();
    let consumer_child = spawn_as(
        &Child {
            role: "pipeline",
            warmup,
            pipeline: consumer,
        },
        &[env, consumer_env].concat(),
        consumer_wrapper,
    );
    // The consumer registers as waiting first; the producer then lets it
    // attach before its first frame.
    std::thread::sleep(Duration::from_millis(300));
    let producer_child = spawn(
        &Child {
            role: "pipeline",
            warmup: 0,
            pipeline: producer.to_string(),
        },
        env,
    );
    let producer_result = result_of(producer_child, "producer");
    let consumer_result = result_of(consumer_child, "consumer");
    pair_row(config, producer_result, consumer_result)
}

/// The row of a producer and a consumer that ran together, measured by the
/// consumer; or their errors.
fn pair_row(
    config: &str,
    producer: Result<BTreeMap<String, String>, String>,
    consumer: Result<BTreeMap<String, String>, String>,
) -> Row {
    match (producer, consumer) {
        (Ok(p), Ok(c)) => row_from(config, &c, Some(&p)),
        (p, c) => failed_row(config, [p.err(), c.err()]),
    }
}

/// The row of a measurement that failed: its errors, one after another.
fn failed_row(config: &str, errors: impl IntoIterator<Item = Option<String>>) -> Row {
    Row {
        config: config.into(),
        error: errors.into_iter().flatten().collect::<Vec<_>>().join(" / "),
        ..Default::default()
    }
}

fn row_from(
    config: &str,
    c: &BTreeMap<String, String>,
    p: Option<&BTreeMap<String, String>>,
) -> Row {
    let measured = number(c, "measured").unwrap_or(0.0);
    let seconds = number(c, "seconds").unwrap_or(0.0);
    let fps = if seconds > 0.0 {
        measured / seconds
    } else {
        0.0
    };
    let per_second = |fields: &BTreeMap<String, String>| {
        let cpu = number(fields, "cpu_s").unwrap_or(0.0);
        let wall = number(fields, "seconds").unwrap_or(0.0);
        if wall > 0.0 { cpu / wall } else { 0.0 }
    };
    Row {
        config: config.into(),
        fps,
        consumer_cpu: per_second(c),
        producer_cpu: p.map(per_second).unwrap_or(0.0),
        latency_p50_us: number(c, "src.latency-p50-ns").unwrap_or(0.0) / 1e3,
        latency_p99_us: number(c, "src.latency-p99-ns").unwrap_or(0.0) / 1e3,
        latency_max_us: number(c, "src.latency-max-ns").unwrap_or(0.0) / 1e3,
        corrupt: number(c, "check.corrupt").map(|v| v as u64),
        missing: number(c, "check.missing").map(|v| v as u64),
        frames: number(c, "frames").unwrap_or(0.0) as u64,
        frame_bytes: FRAME_BYTES,
        note: paths_taken(c, p),
        ..Default::default()
    }
}

/// How this plugin's elements moved the frames, from their final stats:
/// the sink's copies, frames published in place or lent, frames published
/// again; the source's slots wrapped as GstCudaMemory or copied into it.
fn paths_taken(c: &BTreeMap<String, String>, p: Option<&BTreeMap<String, String>>) -> String {
    let count =
        |fields: &BTreeMap<String, String>, key: &str| number(fields, key).map(|v| v as u64);
    let mut parts = Vec::new();
    if let Some(p) = p
        && let Some(copied) = count(p, "ipcsink.copied")
    {
        parts.push(format!(
            "sink: {} slots, {} in place or lent, {copied} copied, {} again",
            count(p, "ipcsink.slots").unwrap_or(0),
            count(p, "ipcsink.zero-copy").unwrap_or(0),
            count(p, "ipcsink.repeated").unwrap_or(0)
        ));
        // Where the producer's time per frame goes: a render near the
        // frame period bounds the pair at the sink; its waits, at the
        // consumers.
        let frames = number(p, "ipcsink.frames").unwrap_or(0.0).max(1.0);
        let per_frame_us = |key: &str| number(p, key).unwrap_or(0.0) / frames / 1e3;
        parts.push(format!(
            "sink per frame: {:.1} us in render, {:.1} waiting for a free slot, {:.1} for consumers' GPU reads",
            per_frame_us("ipcsink.render-time"),
            per_frame_us("ipcsink.slot-wait-time"),
            per_frame_us("ipcsink.read-wait-time")
        ));
    }
    if let Some(wrapped) = count(c, "src.gstcuda-wrapped") {
        let copied = count(c, "src.gstcuda-copied").unwrap_or(0);
        if wrapped + copied > 0 {
            parts.push(format!(
                "src: {wrapped} wrapped, {copied} copied as GstCudaMemory"
            ));
        }
    }
    parts.join("; ")
}

/// Two processes running `pipeline` side by side, each its own CUDA
/// context and no dependency between them: what time slicing (or MPS)
/// gives two processes, the limit of a two-process pair. The row's rate is
/// the sum of the two.
fn two_independent(config: &str, pipeline: &str, warmup: u64, env: &[(String, String)]) -> Row {
    if left_out(config) {
        return Row::left_out(config);
    }
    let child = || {
        spawn(
            &Child {
                role: "pipeline",
                warmup,
                pipeline: pipeline.to_string(),
            },
            env,
        )
    };
    let (first, second) = (child(), child());
    match (result_of(first, "first"), result_of(second, "second")) {
        (Ok(a), Ok(b)) => {
            let mut row = row_from(config, &a, None);
            let other = row_from(config, &b, None);
            row.fps += other.fps;
            row.frames += other.frames;
            row.consumer_cpu += other.consumer_cpu;
            row.corrupt = Some(row.corrupt.unwrap_or(0) + other.corrupt.unwrap_or(0));
            row.missing = Some(row.missing.unwrap_or(0) + other.missing.unwrap_or(0));
            row
        }
        (a, b) => failed_row(config, [a.err(), b.err()]),
    }
}

/// How far apart rows 1q and 13 "queued" put a producer's and a consumer's
/// half in one process: the depth of the default ring without MPS.
const QUEUED_FRAMES: u32 = 32;

/// A queue that holds `frames` frames between two halves of one pipeline.
fn queue_of_frames(frames: u32) -> String {
    format!("queue max-size-buffers={frames} max-size-bytes=0 max-size-time=0")
}

fn single(config: &str, pipeline: &str, warmup: u64, env: &[(String, String)]) -> Row {
    if left_out(config) {
        return Row::left_out(config);
    }
    let child = spawn(
        &Child {
            role: "pipeline",
            warmup,
            pipeline: pipeline.to_string(),
        },
        env,
    );
    match result_of(child, config) {
        Ok(c) => row_from(config, &c, None),
        Err(e) => Row {
            config: config.into(),
            error: e,
            ..Default::default()
        },
    }
}

struct Mps {
    env: Vec<(String, String)>,
    dir: PathBuf,
}

impl Mps {
    fn start() -> Result<Mps, String> {
        let dir = std::env::temp_dir().join(format!("cudaipc-bench-mps-{}", std::process::id()));
        let pipe = dir.join("pipe");
        let log = dir.join("log");
        std::fs::create_dir_all(&pipe).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(&log).map_err(|e| e.to_string())?;
        let env = vec![
            (
                "CUDA_MPS_PIPE_DIRECTORY".to_string(),
                pipe.display().to_string(),
            ),
            (
                "CUDA_MPS_LOG_DIRECTORY".to_string(),
                log.display().to_string(),
            ),
        ];
        let status = Command::new("nvidia-cuda-mps-control")
            .arg("-d")
            .envs(env.iter().cloned())
            .status()
            .map_err(|e| format!("cannot start nvidia-cuda-mps-control: {e}"))?;
        if !status.success() {
            return Err(format!("nvidia-cuda-mps-control -d failed: {status}"));
        }
        std::thread::sleep(Duration::from_millis(500));
        Ok(Mps { env, dir })
    }
}

impl Drop for Mps {
    fn drop(&mut self) {
        use std::io::Write;
        if let Ok(mut child) = Command::new("nvidia-cuda-mps-control")
            .envs(self.env.iter().cloned())
            .stdin(Stdio::piped())
            .spawn()
        {
            if let Some(stdin) = child.stdin.as_mut() {
                let _ = stdin.write_all(b"quit\n");
            }
            let _ = child.wait();
        }
        std::thread::sleep(Duration::from_millis(300));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

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

// --------------------------------------- rows 13: GStreamer's CUDA elements

/// The three ways rows 13 take a producer's frames (the middle of a config).
const PAIR_ALONE: &str = "alone";
const PAIR_ALONE_QUEUED: &str = "alone, halves queued apart";
const PAIR_OURS: &str = "rscudaipc pair";
const PAIR_UPSTREAM: &str = "upstream import";

/// A producer of rows 13: GStreamer's CUDA elements up to the sink.
struct GstCudaProducer {
    id: &'static str,
    what: &'static str,
    pipeline: String,
    /// The format of its frames; the consumers' cudaconvert writes another.
    format: &'static str,
    frame_bytes: f64,
    warmup: u64,
    /// A file its `appsrc name=loop` plays again and again.
    loop_file: Option<PathBuf>,
    /// Why it cannot run here.
    missing: Option<String>,
}

/// `None` when every element is registered, else a note naming the others.
fn missing_elements(names: &[&str]) -> Option<String> {
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| gst::ElementFactory::find(n).is_none())
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "not measured: {} not registered here ({})",
            missing.join(", "),
            gst::version_string()
        )
    })
}

/// The 4K H.264 clip of row 13d (30 frames, openh264enc; in the repository).
fn h264_clip() -> Option<PathBuf> {
    let name = "tests/data/ball-3840x2160.h264";
    [
        PathBuf::from(name),
        Path::new(env!("CARGO_MANIFEST_DIR")).join(name),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Encodes one 4K frame with jpegenc (CPU) for row 13e.
fn make_jpeg(path: &Path) -> Result<(), String> {
    let description = format!(
        "videotestsrc num-buffers=1 pattern=smpte ! video/x-raw,format=I420,width={WIDTH},height={HEIGHT} ! jpegenc quality=85 ! filesink location=\"{}\"",
        path.display()
    );
    let pipeline = gst::parse::launch(&description).map_err(|e| e.to_string())?;
    pipeline
        .set_state(gst::State::Playing)
        .map_err(|e| e.to_string())?;
    let bus = pipeline.bus().unwrap();
    let result = match bus.timed_pop_filtered(
        gst::ClockTime::from_seconds(30),
        &[gst::MessageType::Eos, gst::MessageType::Error],
    ) {
        Some(msg) => match msg.view() {
            gst::MessageView::Error(e) => Err(e.error().to_string()),
            _ => Ok(()),
        },
        None => Err("jpegenc took over 30 s".into()),
    };
    let _ = pipeline.set_state(gst::State::Null);
    result
}

fn gst_cuda_producers(o: &Options) -> Vec<GstCudaProducer> {
    let rgba = format!("video/x-raw,format=RGBA,width={WIDTH},height={HEIGHT},framerate=0/1");
    let cuda = "video/x-raw(memory:CUDAMemory)";
    let rgba_bytes = (WIDTH * HEIGHT * 4) as f64;
    // NV12 (the decoders' output): 12 bits a pixel.
    let nv12_bytes = (WIDTH * HEIGHT * 3 / 2) as f64;
    let base = missing_elements(&["videotestsrc", "imagefreeze", "cudaupload", "cudaconvert"]);
    let upload = format!("videotestsrc num-buffers=1 pattern=smpte ! {rgba} ! cudaupload ! {cuda}");
    let clip = h264_clip();
    let h264_missing = base
        .clone()
        .or_else(|| missing_elements(&["appsrc", "h264parse", "nvh264dec"]))
        .or_else(|| {
            clip.is_none()
                .then(|| "not measured: tests/data/ball-3840x2160.h264 not found".to_string())
        });
    let jpeg = o.out.join("bench-3840x2160.jpg");
    let jpeg_missing = base
        .clone()
        .or_else(|| missing_elements(&["appsrc", "jpegenc", "nvjpegdec"]))
        .or_else(|| {
            make_jpeg(&jpeg)
                .err()
                .map(|e| format!("not measured: cannot make the JPEG: {e}"))
        });
    vec![
        GstCudaProducer {
            id: "13a",
            what: "same buffer re-sent",
            pipeline: format!("{upload} ! imagefreeze"),
            format: "RGBA",
            frame_bytes: rgba_bytes,
            warmup: 200,
            loop_file: None,
            missing: base.clone(),
        },
        GstCudaProducer {
            id: "13b",
            what: "cudaconvert output",
            pipeline: format!("{upload} ! imagefreeze ! cudaconvert ! {cuda},format=BGRx"),
            format: "BGRx",
            frame_bytes: rgba_bytes,
            warmup: 200,
            loop_file: None,
            missing: base.clone(),
        },
        GstCudaProducer {
            id: "13c",
            what: "cudaupload of sysmem",
            pipeline: format!(
                "videotestsrc num-buffers=1 pattern=smpte ! {rgba} ! imagefreeze ! cudaupload ! {cuda}"
            ),
            format: "RGBA",
            frame_bytes: rgba_bytes,
            warmup: 30,
            loop_file: None,
            missing: base.clone(),
        },
        GstCudaProducer {
            id: "13d",
            what: "nvh264dec output",
            pipeline: format!(
                "appsrc name=loop caps=\"video/x-h264,stream-format=byte-stream\" ! h264parse ! nvh264dec ! {cuda}"
            ),
            format: "NV12",
            frame_bytes: nv12_bytes,
            warmup: 30,
            loop_file: clip,
            missing: h264_missing,
        },
        GstCudaProducer {
            id: "13e",
            what: "nvjpegdec output",
            pipeline: format!(
                "appsrc name=loop caps=\"image/jpeg,width={WIDTH},height={HEIGHT},framerate=30/1\" ! nvjpegdec ! {cuda}"
            ),
            format: "NV12",
            frame_bytes: nv12_bytes,
            warmup: 30,
            loop_file: Some(jpeg),
            missing: jpeg_missing,
        },
    ]
}

/// Rows 13: each producer into this pair, into upstream's pair and alone,
/// each with a consumer that drops frames and one that feeds cudaconvert.
fn gst_cuda_rows(o: &Options, env: &[(String, String)]) -> Vec<Row> {
    let upstream_missing = ["cudaipcsink", "cudaipcsrc"]
        .iter()
        .any(|name| {
            gst::ElementFactory::find(name)
                .and_then(|f| f.plugin_name())
                .is_none_or(|p| p != "nvcodec")
        })
        .then(|| {
            format!(
                "not measured: upstream's cudaipcsink/cudaipcsrc need GStreamer 1.24+ with nvcodec and a CUDA device ({} here)",
                gst::version_string()
            )
        });
    // The bare names are always upstream's in these rows.
    let mut env = env.to_vec();
    env.push(("CUDAIPC_ELEMENT_NAMES".into(), "rs".into()));
    let wanted = |id: &str| !left_out(id);
    let producers: Vec<GstCudaProducer> = if GST_CUDA_IDS.iter().any(|id| wanted(id)) {
        gst_cuda_producers(o)
    } else {
        Vec::new()
    };
    let mut hung: BTreeMap<&str, String> = BTreeMap::new();
    let mut rows = Vec::new();
    for p in producers.iter().filter(|p| wanted(p.id)) {
        // One row says why a producer cannot run, rather than six.
        if let Some(note) = &p.missing {
            rows.push(Row {
                config: format!("{} {}", p.id, p.what),
                note: note.clone(),
                ..Default::default()
            });
            continue;
        }
        let to = if p.format == "BGRx" { "RGBA" } else { "BGRx" };
        let consumers = [
            ("drops".to_string(), String::new()),
            (
                format!("cudaconvert to {to}"),
                format!("! cudaconvert ! video/x-raw(memory:CUDAMemory),format={to} "),
            ),
        ];
        let pairs = [
            (PAIR_ALONE, "alone"),
            (PAIR_ALONE_QUEUED, "queued"),
            (PAIR_OURS, "ours"),
            (PAIR_UPSTREAM, "upstream"),
        ];
        for (pair, _) in pairs
            .into_iter()
            .filter(|(_, short)| o.pairs.iter().any(|p| p == short))
        {
            for (consumer, convert) in &consumers {
                let config = format!("{} {} > {pair} > {consumer}", p.id, p.what);
                let sink = "fakesink name=sink sync=false enable-last-sample=false";
                let missing = hung.get(pair).cloned().or_else(|| {
                    (pair == PAIR_UPSTREAM)
                        .then(|| upstream_missing.clone())
                        .flatten()
                });
                let mut row = if let Some(note) = missing {
                    Row {
                        config,
                        note,
                        ..Default::default()
                    }
                } else {
                    let tag = channel(&format!("{}-{}", p.id, rows.len()));
                    let address = std::env::temp_dir().join(format!("cudaipc-{tag}"));
                    let (producer, consumer) = match pair {
                        PAIR_ALONE => (format!("{} {convert}! {sink}", p.pipeline), None),
                        PAIR_ALONE_QUEUED => (
                            format!(
                                "{} ! {} {convert}! {sink}",
                                p.pipeline,
                                queue_of_frames(QUEUED_FRAMES)
                            ),
                            None,
                        ),
                        PAIR_OURS => (
                            format!(
                                "{} ! rscudaipcsink name=ipcsink channel={tag} sync=false {}",
                                p.pipeline,
                                std::env::var("CUDAIPC_BENCH_SINK_PROPS").unwrap_or_default()
                            ),
                            Some(format!(
                                "rscudaipcsrc name=src channel={tag} connect-timeout=60000 {} {convert}! {sink}",
                                std::env::var("CUDAIPC_BENCH_SRC_PROPS").unwrap_or_default()
                            )),
                        ),
                        _ => (
                            format!(
                                "{} ! cudaipcsink name=ipcsink address={} sync=false",
                                p.pipeline,
                                address.display()
                            ),
                            // Not named src: the rows' `src` has our stats.
                            Some(format!(
                                "cudaipcsrc address={} io-mode=import connection-timeout=60 {convert}! {sink}",
                                address.display()
                            )),
                        ),
                    };
                    let (row, killed) = timed_run(
                        &config,
                        &producer,
                        consumer.as_deref(),
                        p.warmup,
                        &env,
                        p.loop_file.as_deref(),
                        o.gst_cuda_seconds,
                    );
                    let _ = std::fs::remove_file(&address);
                    if killed {
                        // Within the run's time: the pair's later rows would
                        // likely hang too.
                        hung.insert(
                            pair,
                            format!("not measured: an earlier row of this pair hung ({})", p.id),
                        );
                    }
                    row
                };
                row.frame_bytes = p.frame_bytes;
                rows.push(row);
            }
        }
    }
    rows
}

/// How long past `--gst-cuda-seconds` a row of rows 13 may take.
const TIMED_RUN_SLACK_S: f64 = 25.0;

/// Runs one row of rows 13: `producer` (with a consumer process, or alone)
/// for `seconds` from its first frame; the consumer's (or the one process's)
/// frames after `warmup` make the row. Processes still running well past
/// that are killed (the bool says so), so that one hung row cannot stop the
/// run.
fn timed_run(
    config: &str,
    producer: &str,
    consumer: Option<&str>,
    warmup: u64,
    env: &[(String, String)],
    loop_file: Option<&Path>,
    seconds: f64,
) -> (Row, bool) {
    let mut producer_env = env.to_vec();
    producer_env.push(("CUDAIPC_BENCH_SECONDS".into(), seconds.to_string()));
    if let Some(file) = loop_file {
        producer_env.push(("CUDAIPC_BENCH_LOOP".into(), file.display().to_string()));
    }
    let consumer_child = consumer.map(|pipeline| {
        let child = spawn(
            &Child {
                role: "pipeline",
                warmup,
                pipeline: pipeline.to_string(),
            },
            env,
        );
        // As in two_process: the consumer is there before the first frame.
        std::thread::sleep(Duration::from_millis(300));
        child
    });
    let producer_child = spawn(
        &Child {
            role: "pipeline",
            warmup: if consumer.is_some() { 0 } else { warmup },
            pipeline: producer.to_string(),
        },
        &producer_env,
    );
    let pids: Vec<u32> = [
        Some(producer_child.id()),
        consumer_child.as_ref().map(|c| c.id()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Start-up (CUDA contexts, kernel compilation) takes seconds, not tens.
    let limit = Duration::from_secs_f64(seconds + TIMED_RUN_SLACK_S);
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while !done.load(Ordering::Relaxed) {
                if start.elapsed() > limit {
                    for &pid in &pids {
                        // SAFETY: kill has no memory effects; the children are
                        // not reaped yet (done is set after both waits).
                        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                    }
                    return true;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            false
        })
    };
    let producer_result = result_of(producer_child, "producer");
    let consumer_result = consumer_child.map(|c| result_of(c, "consumer"));
    done.store(true, Ordering::Relaxed);
    let killed = watchdog.join().unwrap_or(false);
    let row = match (producer_result, consumer_result) {
        (Ok(p), Some(Ok(c))) => row_from(config, &c, Some(&p)),
        (Ok(p), None) => row_from(config, &p, None),
        (p, c) => failed_row(
            config,
            [
                killed.then(|| format!("killed after {} s", limit.as_secs())),
                p.err(),
                c.and_then(Result::err),
            ],
        ),
    };
    (row, killed)
}

/// Without a GPU (CI): the same pipelines on the host transport, small
/// frames, so that the benchmark cannot rot. Figures are not asserted.
fn host_rows(o: &Options) -> Vec<Row> {
    let mut rows = Vec::new();
    let total = o.frames + o.warmup;
    let source = format!(
        "videotestsrc num-buffers=1 ! video/x-raw,format=RGB,width=320,height=240,framerate=0/1 ! imagefreeze num-buffers={total}"
    );
    let configs = [
        (
            "3 seed: slots=1 spin (host transport)",
            "slots=1 wait-mode=spin",
            "wait-mode=spin",
        ),
        (
            "4 seed with sleep wait (host transport)",
            "slots=1 wait-mode=sleep",
            "wait-mode=sleep",
        ),
        ("5 default (host transport)", "", ""),
        // The same over a descriptor channel: only the attach differs.
        (
            "5d descriptor channel, ipc-mode=fd (host transport)",
            "ipc-mode=fd",
            "",
        ),
    ];
    for (config, sink_props, src_props) in configs {
        let ch = channel(&format!("host{}", rows.len()));
        rows.push(two_process(
            config,
            &format!("{source} ! rscudaipcsink name=ipcsink channel={ch} transport=host sync=false {sink_props}"),
            &format!("rscudaipcsrc name=src channel={ch} connect-timeout=60000 {src_props} ! fakesink name=sink sync=false"),
            o.warmup,
            &[],
            None,
        ));
    }
    rows
}

// ------------------------- rows 9 and 14: consumers side by side, streams

/// A child process of rows 9 and 14, its output read as it comes (a
/// consumer's `READY` is passed on at once) and its input kept to step it
/// (`Control`).
struct Proc {
    what: String,
    process: std::process::Child,
    input: Option<std::process::ChildStdin>,
    output: std::thread::JoinHandle<String>,
    errors: std::thread::JoinHandle<String>,
}

/// A child's `RESULT` fields, or why it has none.
type ChildResult = Result<BTreeMap<String, String>, String>;

/// What the output of a `Proc` (its index) said.
enum ProcEvent {
    Ready(usize),
    Gone(usize),
}

impl Proc {
    fn start(
        what: String,
        child: &Child,
        env: &[(String, String)],
        index: usize,
        events: &std::sync::mpsc::Sender<ProcEvent>,
    ) -> Result<Proc, String> {
        use std::io::{BufRead, Read};
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut process = Command::new(exe)
            .args([
                "--role",
                child.role,
                &child.warmup.to_string(),
                &child.pipeline,
            ])
            .envs(env.iter().cloned())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {what}: {e}"))?;
        let (Some(stdout), Some(mut stderr)) = (process.stdout.take(), process.stderr.take())
        else {
            let _ = process.kill();
            let _ = process.wait();
            return Err(format!("{what}: no output pipes"));
        };
        let events = events.clone();
        let output = std::thread::spawn(move || {
            let mut text = String::new();
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line == "READY" {
                    let _ = events.send(ProcEvent::Ready(index));
                }
                text.push_str(&line);
                text.push('\n');
            }
            let _ = events.send(ProcEvent::Gone(index));
            text
        });
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Ok(Proc {
            what,
            input: process.stdin.take(),
            process,
            output,
            errors,
        })
    }

    fn say(&mut self, line: &str) {
        use std::io::Write;
        if let Some(input) = self.input.as_mut() {
            // A process that has ended already reads nothing: no matter.
            let _ = writeln!(input, "{line}");
        }
    }

    /// The end of its input: a stepped process ends its stream.
    fn close_input(&mut self) {
        self.input = None;
    }
}

/// Waits for each process until `limit` from now, kills those still
/// running then (through their handles: by their own pid, not yet reaped),
/// and reads their `RESULT` lines. The bool says whether any was killed.
fn finish_all(mut procs: Vec<Proc>, limit: Duration) -> (Vec<ChildResult>, bool) {
    let deadline = Instant::now() + limit;
    let mut statuses: Vec<Option<std::process::ExitStatus>> = vec![None; procs.len()];
    let mut killed = false;
    loop {
        for (proc, status) in procs.iter_mut().zip(statuses.iter_mut()) {
            if status.is_none()
                && let Ok(Some(exited)) = proc.process.try_wait()
            {
                *status = Some(exited);
            }
        }
        if statuses.iter().all(Option::is_some) {
            break;
        }
        if Instant::now() > deadline {
            for (proc, status) in procs.iter_mut().zip(statuses.iter_mut()) {
                if status.is_none() {
                    let _ = proc.process.kill();
                    *status = proc.process.wait().ok();
                    killed = true;
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let results = procs
        .into_iter()
        .zip(statuses)
        .map(|(proc, status)| {
            let stdout = proc.output.join().unwrap_or_default();
            let stderr = proc.errors.join().unwrap_or_default();
            let success = status.is_some_and(|s| s.success());
            let status = status.map_or("not waited for".to_string(), |s| s.to_string());
            parse_result(&proc.what, success, &status, &stdout, &stderr)
        })
        .collect();
    (results, killed)
}

/// The frame of rows 9 and 14: 4K RGB on a GPU, 320x240 on the host
/// transport.
fn frame_geometry(gpu: bool) -> (u32, u32) {
    if gpu { (WIDTH, HEIGHT) } else { (320, 240) }
}

/// Rows 9: the producer with four consumers that invert and verify every
/// frame (9a), and the same with a fifth consumer of the latest frame that
/// takes 20 ms a frame (9b); the producer's own rate makes each row. Every
/// consumer is attached before the first frame (`wait-for-connection`).
fn viewer_rows(o: &Options, env: &[(String, String)], gpu: bool) -> Vec<Row> {
    let mut rows = Vec::new();
    let transport = if gpu { "" } else { " (host transport)" };
    let configs = [
        (
            "9a",
            format!("9a four verifying consumers{transport}"),
            false,
        ),
        (
            "9b",
            format!("9b four verifying consumers + slow latest-frame viewer{transport}"),
            true,
        ),
    ];
    for (id, config, with_viewer) in configs {
        if !asked_for("9") && !asked_for(id) {
            continue;
        }
        let mut row = viewer_row(&config, with_viewer, o, env, gpu);
        if with_viewer
            && let Some(alone) = rows.iter().find(|r: &&Row| r.config.starts_with("9a"))
            && alone.fps > 0.0
            && row.fps > 0.0
        {
            row.note = format!(
                "the viewer costs the producer {:.1}% ({:.0} -> {:.0} FPS); {}",
                100.0 * (1.0 - row.fps / alone.fps),
                alone.fps,
                row.fps,
                row.note
            );
        }
        print_row(&row);
        rows.push(row);
    }
    rows
}

/// Verifying consumers in rows 9.
const VERIFYING_CONSUMERS: usize = 4;

fn viewer_row(
    config: &str,
    with_viewer: bool,
    o: &Options,
    env: &[(String, String)],
    gpu: bool,
) -> Row {
    let (width, height) = frame_geometry(gpu);
    let total = o.frames + o.warmup;
    let ch = channel(if with_viewer {
        "viewer-9b"
    } else {
        "viewer-9a"
    });
    let consumers = VERIFYING_CONSUMERS + with_viewer as usize;
    let (generate, transport, process) = if gpu {
        (
            format!(
                "cudatestsrc num-buffers={total} pattern=counter ! video/x-raw(memory:CUDAMemory),format=RGB,width={width},height={height},framerate=0/1"
            ),
            "",
            "! cudaprocess name=check operation=invert verify=true ",
        )
    } else {
        (
            format!(
                "videotestsrc num-buffers=1 ! video/x-raw,format=RGB,width={width},height={height},framerate=0/1 ! imagefreeze num-buffers={total}"
            ),
            "transport=host",
            "",
        )
    };
    let producer = format!(
        "{generate} ! rscudaipcsink name=ipcsink channel={ch} sync=false {transport} wait-for-connection={consumers} {}",
        std::env::var("CUDAIPC_BENCH_SINK_PROPS").unwrap_or_default()
    );
    let verifying = format!(
        "rscudaipcsrc name=src channel={ch} connect-timeout=60000 {process}! fakesink name=sink sync=false"
    );
    let viewer = format!(
        "rscudaipcsrc name=src channel={ch} connect-timeout=60000 frames=latest ! identity sleep-time=20000 ! fakesink name=sink sync=false"
    );
    let (events, _) = std::sync::mpsc::channel();
    let mut procs = Vec::new();
    let mut errors = Vec::new();
    let pipelines = std::iter::repeat_n(&verifying, VERIFYING_CONSUMERS)
        .chain(with_viewer.then_some(&viewer))
        .chain([&producer]);
    for (index, pipeline) in pipelines.enumerate() {
        let (what, warmup) = match index {
            i if i < VERIFYING_CONSUMERS => (format!("consumer {}", i + 1), o.warmup),
            i if i < consumers => ("viewer".to_string(), 0),
            _ => ("producer".to_string(), o.warmup),
        };
        let child = Child {
            role: "pipeline",
            warmup,
            pipeline: pipeline.clone(),
        };
        match Proc::start(what, &child, env, index, &events) {
            Ok(proc) => procs.push(proc),
            Err(e) => {
                errors.push(e);
                break;
            }
        }
    }
    // A consumer that never attaches leaves the producer waiting: bounded
    // by a generous time for the frames (200 FPS at least) and start-up.
    let limit = if errors.is_empty() {
        Duration::from_secs(60 + total / 200)
    } else {
        Duration::ZERO
    };
    let (results, killed) = finish_all(procs, limit);
    if killed {
        errors.push(format!("killed after {} s", limit.as_secs()));
    }
    errors.extend(results.iter().filter_map(|r| r.as_ref().err().cloned()));
    if !errors.is_empty() || results.len() != consumers + 1 {
        return Row {
            config: config.into(),
            error: errors.join(" / "),
            ..Default::default()
        };
    }
    let fields: Vec<&BTreeMap<String, String>> = results.iter().flatten().collect();
    let (verifiers, rest) = fields.split_at(VERIFYING_CONSUMERS);
    let producer = rest[rest.len() - 1];
    let viewer = with_viewer.then(|| rest[0]);
    let measured = number(producer, "produced.measured").unwrap_or(0.0);
    let seconds = number(producer, "produced.seconds").unwrap_or(0.0);
    let verified: Vec<Row> = verifiers
        .iter()
        .map(|c| row_from(config, c, Some(producer)))
        .collect();
    let most = |f: fn(&Row) -> f64| verified.iter().map(f).fold(0.0, f64::max);
    let sum = |f: fn(&Row) -> Option<u64>| {
        verified
            .iter()
            .map(f)
            .try_fold(0, |total, v| v.map(|v| total + v))
    };
    let consumer_frames: Vec<String> = verified.iter().map(|r| r.frames.to_string()).collect();
    let mut note = format!(
        "producer: {measured:.0} frames in {seconds:.2} s after {} of warm-up; verifying consumers got {} frames",
        o.warmup,
        consumer_frames.join(" / ")
    );
    if let Some(viewer) = viewer {
        note.push_str(&format!(
            ", the viewer {}",
            number(viewer, "frames").unwrap_or(0.0)
        ));
    }
    if let Some(paths) = Some(paths_taken(verifiers[0], Some(producer))).filter(|p| !p.is_empty()) {
        note.push_str(&format!("; {paths}"));
    }
    Row {
        config: config.into(),
        fps: if seconds > 0.0 {
            measured / seconds
        } else {
            0.0
        },
        consumer_cpu: verified.iter().map(|r| r.consumer_cpu).sum::<f64>() / verified.len() as f64,
        producer_cpu: verified[0].producer_cpu,
        latency_p50_us: most(|r| r.latency_p50_us),
        latency_p99_us: most(|r| r.latency_p99_us),
        latency_max_us: most(|r| r.latency_max_us),
        corrupt: sum(|r| r.corrupt),
        missing: sum(|r| r.missing),
        frames: measured as u64,
        frame_bytes: (width * height * 3) as f64,
        note,
        ..Default::default()
    }
}

/// Rows 14: seconds of a trial (after every consumer's first frame) that
/// are not counted.
const STREAMS_SETTLE_S: f64 = 2.0;
/// The frame rate of rows 14's producers.
const STREAM_FPS: f64 = 30.0;
/// A pair is late below this share of the frames its producer should make.
const STREAM_FRAMES_NEEDED: f64 = 0.98;
/// How long the consumers of a trial may take to get their first frame.
const STREAMS_START_LIMIT: Duration = Duration::from_secs(90);
/// Share of the device's memory the pairs may fill (rows 14's cap).
const STREAMS_MEMORY_SHARE: f64 = 0.9;

/// The producer's and the consumer's pipeline of a pair on a channel.
type PairPipelines = Box<dyn Fn(&str) -> (String, String)>;
/// The file of a channel (upstream's socket).
type AddressOf = Box<dyn Fn(&str) -> PathBuf>;

/// One of rows 14's pairs: the pipelines of its producer and consumer on a
/// channel (or address), and what its consumer does.
struct StreamPair {
    config: String,
    make: PairPipelines,
    consumer_does: &'static str,
    /// Whether its consumer reports publish-to-receive latency (ours).
    latency_known: bool,
    /// Files to remove after a trial, by channel tag (upstream's sockets).
    address_of: Option<AddressOf>,
}

/// How one trial of N pairs went.
#[derive(Default)]
struct StreamsTrial {
    pairs: u32,
    /// Why it is late (the first reason found); `None`: no late frame.
    late: Option<String>,
    /// Over all pairs: the fewest frames a consumer got in the window,
    /// and how many the producer should have made.
    fewest_frames: u64,
    expected_frames: f64,
    latency_p50_us: f64,
    latency_p99_us: f64,
    latency_max_us: f64,
    corrupt: Option<u64>,
    missing: Option<u64>,
    consumer_cpu: f64,
    producer_cpu: f64,
    /// Device memory in use during the window (MiB), if readable.
    memory_used_mib: Option<u64>,
}

/// Total and used memory of GPU 0 in MiB (from `nvidia-smi`: the parent
/// holds no CUDA context).
fn gpu_memory_mib() -> Option<(u64, u64)> {
    let out = Command::new("nvidia-smi")
        .args([
            "--query-gpu=memory.total,memory.used",
            "--format=csv,noheader,nounits",
            "-i",
            "0",
        ])
        .output()
        .ok()
        .filter(|out| out.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (total, used) = text.trim().split_once(',')?;
    Some((total.trim().parse().ok()?, used.trim().parse().ok()?))
}

fn streams_rows(o: &Options, env: &[(String, String)], gpu: bool) -> Vec<Row> {
    let (width, height) = frame_geometry(gpu);
    let frame_bytes = (width * height * 3) as f64;
    let caps = |memory: &str| {
        format!(
            "video/x-raw{memory},format=RGB,width={width},height={height},framerate={STREAM_FPS}/1"
        )
    };
    // The bare names are always upstream's in these rows (as in rows 13).
    let mut env = env.to_vec();
    env.push(("CUDAIPC_ELEMENT_NAMES".into(), "rs".into()));
    let mut rows: Vec<Row> = Vec::new();
    if asked_for("14") {
        let transport = if gpu { "" } else { " (host transport)" };
        let (generate, sink_props, consumer, consumer_does) = if gpu {
            (
                format!(
                    "cudatestsrc is-live=true pattern=counter ! {}",
                    caps("(memory:CUDAMemory)")
                ),
                "",
                "! cudaprocess name=check operation=invert verify=true ",
                "inverts + verifies every frame",
            )
        } else {
            (
                format!("videotestsrc is-live=true ! {}", caps("")),
                "transport=host",
                "",
                "takes every frame",
            )
        };
        let pair = StreamPair {
            config: format!("14 streams per GPU, this pair{transport}"),
            make: Box::new(move |ch: &str| {
                (
                    format!(
                        "{generate} ! rscudaipcsink name=ipcsink channel={ch} sync=false wait-for-connection=1 {sink_props} {}",
                        std::env::var("CUDAIPC_BENCH_SINK_PROPS").unwrap_or_default()
                    ),
                    format!(
                        // Every frame on time is what a pair must deliver:
                        // the consumer asks for every frame of the live
                        // channel (else one slow to start misses the first).
                        "rscudaipcsrc name=src channel={ch} connect-timeout=60000 frames=every {} {consumer}! fakesink name=sink sync=false",
                        std::env::var("CUDAIPC_BENCH_SRC_PROPS").unwrap_or_default()
                    ),
                )
            }),
            consumer_does,
            latency_known: true,
            address_of: None,
        };
        let row = streams_row(&pair, o, &env, gpu, frame_bytes);
        print_row(&row);
        rows.push(row);
    }
    if asked_for("14u") {
        let config = "14u streams per GPU, upstream pair (cudaipcsink/cudaipcsrc io-mode=import)";
        let upstream_missing = ["cudaipcsink", "cudaipcsrc", "cudaconvert"]
            .iter()
            .any(|name| {
                gst::ElementFactory::find(name)
                    .and_then(|f| f.plugin_name())
                    .is_none_or(|p| p != "nvcodec")
            });
        let row = if upstream_missing || !gpu {
            Row {
                config: config.into(),
                note: format!(
                    "not available: upstream's cudaipcsink/cudaipcsrc and cudaconvert need GStreamer 1.24+ with nvcodec and a CUDA device ({} here)",
                    gst::version_string()
                ),
                ..Default::default()
            }
        } else {
            // RGBA: upstream's pair and cudaconvert as rows 13 run them
            // (cudaconvert refused RGB input here).
            let generate = format!(
                "cudatestsrc is-live=true pattern=counter output-memory=gstcuda ! {}",
                caps("(memory:CUDAMemory)").replacen("format=RGB,", "format=RGBA,", 1)
            );
            let address = |tag: &str| std::env::temp_dir().join(format!("cudaipc-{tag}"));
            let pair = StreamPair {
                config: config.into(),
                make: Box::new(move |tag: &str| {
                    let address = address(tag);
                    (
                        format!(
                            "{generate} ! cudaipcsink name=ipcsink address={} sync=false",
                            address.display()
                        ),
                        format!(
                            "cudaipcsrc address={} io-mode=import connection-timeout=60 ! cudaconvert ! video/x-raw(memory:CUDAMemory),format=BGRx ! fakesink name=sink sync=false enable-last-sample=false",
                            address.display()
                        ),
                    )
                }),
                // cudaprocess takes only this plugin's memory.
                consumer_does: "converts every frame to BGRx (cudaconvert); no check, no latency figure",
                latency_known: false,
                address_of: Some(Box::new(address)),
            };
            streams_row(&pair, o, &env, gpu, frame_bytes)
        };
        if let Some(ours) = rows.iter_mut().find(|r| r.config.starts_with("14 "))
            && row.frames > 0
            && ours.error.is_empty()
        {
            ours.note = format!(
                "{:.1}x the streams of upstream's pair; {}",
                ours.frames as f64 / row.frames as f64,
                ours.note
            );
        }
        print_row(&row);
        rows.push(row);
    }
    rows
}

/// Rows 14's search: N pairs at once, N doubling from 1 until a pair is
/// late, then halving the step between the last good N and the first late
/// one; the largest N with no late pair makes the row (its `frames` column;
/// `fps`: the frames per second all its pairs carry).
fn streams_row(
    pair: &StreamPair,
    o: &Options,
    env: &[(String, String)],
    gpu: bool,
    frame_bytes: f64,
) -> Row {
    let baseline = gpu.then(gpu_memory_mib).flatten();
    let mut cap = o.max_streams.max(1);
    let mut capped_by = "--max-streams";
    let mut trials: Vec<StreamsTrial> = Vec::new();
    let mut good: Option<usize> = None;
    let mut bad: Option<u32> = None;
    let mut n = 1;
    loop {
        let trial = streams_trial(pair, n, o, env, gpu);
        eprintln!(
            "  {} N={n}: {}; fewest frames {} of {:.0}, latency max {:.0} us",
            pair.config,
            trial.late.as_deref().unwrap_or("no late frame"),
            trial.fewest_frames,
            trial.expected_frames,
            trial.latency_max_us
        );
        // Per pair: what the trial's processes added to the device's use.
        if let (Some((total, before)), Some(during)) = (baseline, trial.memory_used_mib) {
            let per_pair = during.saturating_sub(before) / u64::from(n);
            let room = (total as f64 * STREAMS_MEMORY_SHARE) as u64;
            if let Some(fits) = room.saturating_sub(before).checked_div(per_pair) {
                let fits = u32::try_from(fits.max(1)).unwrap_or(u32::MAX);
                if fits < cap {
                    cap = fits;
                    capped_by = "device memory";
                }
            }
        }
        if trial.late.is_none() {
            good = Some(trials.len());
        } else {
            bad = Some(n);
        }
        trials.push(trial);
        let good_n = good.map_or(0, |g| trials[g].pairs);
        n = match bad {
            None if n >= cap => break,
            None => (n * 2).min(cap),
            Some(bad) if bad - good_n <= 1 => break,
            Some(bad) => (good_n + bad) / 2,
        };
    }
    let history: Vec<String> = trials
        .iter()
        .map(|t| {
            format!(
                "{} {}",
                t.pairs,
                if t.late.is_some() { "late" } else { "ok" }
            )
        })
        .collect();
    let sum = |f: fn(&StreamsTrial) -> Option<u64>| {
        trials
            .iter()
            .map(f)
            .try_fold(0, |total, v| v.map(|v| total + v))
    };
    let first_late = trials.iter().find(|t| t.late.is_some());
    let mut note = match (good.map(|g| &trials[g]), first_late) {
        (Some(best), Some(late)) => format!(
            "N = {} (largest with no late frame; N = {} late: {})",
            best.pairs,
            late.pairs,
            late.late.as_deref().unwrap_or_default()
        ),
        (Some(best), None) => format!(
            "N >= {} (no late frame up to the cap, {capped_by})",
            best.pairs
        ),
        (None, late) => format!(
            "N = 0: one pair is late ({})",
            late.and_then(|t| t.late.as_deref()).unwrap_or_default()
        ),
    };
    note.push_str(&format!(
        "; trials: {}; consumer {}; {:.0} s a trial, the first {STREAMS_SETTLE_S:.0} not counted",
        history.join(", "),
        pair.consumer_does,
        o.streams_seconds
    ));
    if let (Some((_, before)), Some(best)) = (baseline, good.map(|g| &trials[g]))
        && let Some(during) = best.memory_used_mib
    {
        note.push_str(&format!(
            "; about {} MiB of GPU memory a pair",
            during.saturating_sub(before) / u64::from(best.pairs)
        ));
    }
    let Some(best) = good.map(|g| &trials[g]) else {
        return Row {
            config: pair.config.clone(),
            corrupt: sum(|t| t.corrupt),
            missing: sum(|t| t.missing),
            frame_bytes,
            note,
            ..Default::default()
        };
    };
    Row {
        config: pair.config.clone(),
        fps: f64::from(best.pairs) * STREAM_FPS,
        consumer_cpu: best.consumer_cpu,
        producer_cpu: best.producer_cpu,
        latency_p50_us: best.latency_p50_us,
        latency_p99_us: best.latency_p99_us,
        latency_max_us: best.latency_max_us,
        // Every trial's frames were checked: a bad frame in any counts.
        corrupt: sum(|t| t.corrupt),
        missing: sum(|t| t.missing),
        frames: u64::from(best.pairs),
        frame_bytes,
        note,
        ..Default::default()
    }
}

/// One trial of rows 14: `n` pairs started together; once every consumer
/// has its first frame, `--streams-seconds` more, the first
/// `STREAMS_SETTLE_S` not counted. Every process is started and ended here.
fn streams_trial(
    pair: &StreamPair,
    n: u32,
    o: &Options,
    env: &[(String, String)],
    gpu: bool,
) -> StreamsTrial {
    let mut env = env.to_vec();
    env.push(("CUDAIPC_BENCH_CONTROL".into(), "1".into()));
    let (events, heard) = std::sync::mpsc::channel();
    let mut consumers: Vec<Proc> = Vec::new();
    let mut producers: Vec<Proc> = Vec::new();
    let mut failure: Option<String> = None;
    let tags: Vec<String> = (0..n)
        .map(|i| channel(&format!("streams-{n}-{i}")))
        .collect();
    // Consumers first: each producer waits for its consumer (ours), or
    // its consumer waits for it (upstream's).
    for (i, tag) in tags.iter().enumerate() {
        let (producer, consumer) = (pair.make)(tag);
        let started = Proc::start(
            format!("consumer {i}"),
            &Child {
                role: "pipeline",
                warmup: 0,
                pipeline: consumer,
            },
            &env,
            2 * i,
            &events,
        )
        .and_then(|c| {
            consumers.push(c);
            Proc::start(
                format!("producer {i}"),
                &Child {
                    role: "pipeline",
                    warmup: 0,
                    pipeline: producer,
                },
                &env,
                2 * i + 1,
                &events,
            )
        });
        match started {
            Ok(p) => producers.push(p),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    // Every consumer's first frame: the pairs run.
    let mut ready = std::collections::BTreeSet::new();
    let start_by = Instant::now() + STREAMS_START_LIMIT;
    while failure.is_none() && ready.len() < n as usize {
        match heard.recv_timeout(start_by.saturating_duration_since(Instant::now())) {
            Ok(ProcEvent::Ready(index)) => {
                ready.insert(index);
            }
            Ok(ProcEvent::Gone(index)) => {
                let role = if index % 2 == 0 {
                    "consumer"
                } else {
                    "producer"
                };
                failure = Some(format!("{role} {} ended before every pair ran", index / 2));
            }
            Err(_) => {
                failure = Some(format!(
                    "{} of {n} consumers had a frame within {} s",
                    ready.len(),
                    STREAMS_START_LIMIT.as_secs()
                ))
            }
        }
    }
    let mut memory_used_mib = None;
    if failure.is_none() {
        let start = monotonic_ns() + (STREAMS_SETTLE_S * 1e9) as u64;
        let end = start + ((o.streams_seconds - STREAMS_SETTLE_S) * 1e9) as u64;
        for consumer in &mut consumers {
            consumer.say(&format!("WINDOW {start} {end}"));
        }
        // Memory in the middle of the counted time.
        let middle = start + (end - start) / 2;
        std::thread::sleep(Duration::from_nanos(middle.saturating_sub(monotonic_ns())));
        if gpu {
            memory_used_mib = gpu_memory_mib().map(|(_, used)| used);
        }
        std::thread::sleep(Duration::from_nanos(end.saturating_sub(monotonic_ns())));
    }
    // Producers end their streams; consumers end at their EOS (or at the
    // end of their input, if they never attached).
    for producer in &mut producers {
        producer.say("STOP");
        producer.close_input();
    }
    let limit = Duration::from_secs(30);
    let (produced, producers_killed) = finish_all(producers, limit);
    for consumer in &mut consumers {
        consumer.close_input();
    }
    let (consumed, consumers_killed) = finish_all(consumers, limit);
    if let Some(address_of) = &pair.address_of {
        for tag in &tags {
            let _ = std::fs::remove_file(address_of(tag));
        }
    }
    let mut trial = StreamsTrial {
        pairs: n,
        memory_used_mib,
        ..Default::default()
    };
    if let Some(failure) = failure {
        // With the first error a process gave, if any.
        let error = produced
            .iter()
            .chain(&consumed)
            .find_map(|r| r.as_ref().err())
            .map(|e| format!(": {}", e.replace('\n', " ")))
            .unwrap_or_default();
        trial.late = Some(format!("{failure}{error}"));
        return trial;
    }
    if producers_killed || consumers_killed {
        trial.late = Some(format!(
            "processes killed {} s after the end",
            limit.as_secs()
        ));
    }
    let mut late = Vec::new();
    let mut corrupt = Some(0);
    let mut missing = Some(0);
    let mut consumer_cpu = 0.0;
    let mut producer_cpu = 0.0;
    trial.fewest_frames = u64::MAX;
    for (i, (c, p)) in consumed.iter().zip(&produced).enumerate() {
        let (c, p) = match (c, p) {
            (Ok(c), Ok(p)) => (c, p),
            (c, p) => {
                let errors: Vec<&String> = [c.as_ref().err(), p.as_ref().err()]
                    .into_iter()
                    .flatten()
                    .collect();
                late.push(format!(
                    "pair {i}: {}",
                    errors
                        .iter()
                        .map(|e| e.replace('\n', " "))
                        .collect::<Vec<_>>()
                        .join(" / ")
                ));
                continue;
            }
        };
        let row = row_from(&pair.config, c, Some(p));
        consumer_cpu += row.consumer_cpu / f64::from(n);
        producer_cpu += row.producer_cpu / f64::from(n);
        let frames = number(c, "window.frames").unwrap_or(0.0) as u64;
        // The parent's window: a consumer that never heard of it is late.
        let expected = STREAM_FPS * (o.streams_seconds - STREAMS_SETTLE_S);
        trial.expected_frames = expected;
        trial.fewest_frames = trial.fewest_frames.min(frames);
        if (frames as f64) < STREAM_FRAMES_NEEDED * expected {
            late.push(format!("pair {i}: {frames} of {expected:.0} frames"));
        }
        if pair.latency_known {
            // Over the window when a frame came after it, else to the end.
            let latency_us = |stat: &str| {
                number(c, &format!("window.latency-{stat}-ns"))
                    .or_else(|| number(c, &format!("src.latency-{stat}-ns")))
                    .unwrap_or(0.0)
                    / 1e3
            };
            let worst = latency_us("max");
            trial.latency_p50_us = trial.latency_p50_us.max(latency_us("p50"));
            trial.latency_p99_us = trial.latency_p99_us.max(latency_us("p99"));
            trial.latency_max_us = trial.latency_max_us.max(worst);
            if worst > 1e6 / STREAM_FPS {
                late.push(format!(
                    "pair {i}: a frame {:.1} ms after it was published",
                    worst / 1e3
                ));
            }
        }
        let add = |total: Option<u64>, v: Option<u64>| total.zip(v).map(|(t, v)| t + v);
        corrupt = add(corrupt, row.corrupt);
        missing = add(missing, row.missing);
        if row.corrupt.unwrap_or(0) + row.missing.unwrap_or(0) > 0 {
            late.push(format!(
                "pair {i}: {} corrupt, {} missing",
                opt(row.corrupt),
                opt(row.missing)
            ));
        }
    }
    trial.corrupt = corrupt;
    trial.missing = missing;
    trial.consumer_cpu = consumer_cpu;
    trial.producer_cpu = producer_cpu;
    if trial.late.is_none() && !late.is_empty() {
        let more = late.len() - 1;
        trial.late = Some(if more > 0 {
            format!("{} (and {more} more)", late[0])
        } else {
            late[0].clone()
        });
    }
    trial
}

// ------------------------------------ rows 15: the Python package (cudaipc)

/// Rows 15: measured only when `--rows` names them.
const PYTHON_IDS: [&str; 2] = ["15", "15p"];

/// Whether rows 15 were asked for.
fn python_wanted() -> bool {
    ROWS.get()
        .is_some_and(|rows| rows.iter().any(|r| PYTHON_IDS.contains(&r.as_str())))
}

/// Starts `examples/python/<program>` with `CUDAIPC_BENCH_PYTHON` (default
/// python3), which must import the cudaipc package (and CuPy with a GPU).
fn spawn_python(program: &str, args: &[String], env: &[(String, String)]) -> std::process::Child {
    let python = std::env::var("CUDAIPC_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    // The repository the benchmark was built in, or (a build carried to
    // another machine) the one it runs in.
    let built_in = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python");
    let folder = match built_in.exists() {
        true => built_in,
        false => PathBuf::from("examples/python"),
    };
    let script = folder.join(program);
    Command::new(python)
        .arg(script)
        .args(args)
        .envs(env.iter().cloned())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start the Python interpreter (CUDAIPC_BENCH_PYTHON)")
}

/// A row of a pair with a Python process (started first, when it is the
/// consumer) and one of this program's pipelines.
fn python_pair(
    config: &str,
    python: std::process::Child,
    pipeline: Child,
    python_is_consumer: bool,
    env: &[(String, String)],
) -> Row {
    // The consumer is there before the first frame, as in two_process.
    std::thread::sleep(Duration::from_millis(300));
    let other = spawn(&pipeline, env);
    let (python, other) = (result_of(python, "python"), result_of(other, "pipeline"));
    let (consumer, producer) = match python_is_consumer {
        true => (python, other),
        false => (other, python),
    };
    pair_row(config, producer, consumer)
}

/// The producer of rows 15, 16r and 16c: `total` frames as fast as its
/// consumer takes them (4K RGB on a GPU, 320x240 on the host transport),
/// published once one consumer is attached; `sink_props` adds properties
/// to the sink.
fn python_producer(ch: &str, gpu: bool, total: u64, sink_props: &str) -> String {
    let (width, height) = frame_geometry(gpu);
    let (generate, transport) = match gpu {
        true => (
            format!(
                "cudatestsrc num-buffers={total} pattern=counter ! video/x-raw(memory:CUDAMemory),format=RGB,width={width},height={height},framerate=0/1"
            ),
            "",
        ),
        false => (
            format!(
                "videotestsrc num-buffers=1 ! video/x-raw,format=RGB,width={width},height={height},framerate=0/1 ! imagefreeze num-buffers={total}"
            ),
            "transport=host ",
        ),
    };
    format!(
        "{generate} ! rscudaipcsink name=ipcsink channel={ch} {transport}sync=false wait-for-connection=1 {sink_props}"
    )
}

/// Rows 15: a Python consumer taking every frame through DLPack (CuPy on a
/// stream of its own; NumPy on the host transport) next to `rscudaipcsrc !
/// fakesink` on the same producer, and a Python producer (CuPy arrays
/// filled on the GPU, published with `stream=`) into `rscudaipcsrc !
/// fakesink`. 4K RGB with a GPU, 320x240 on the host transport.
fn python_rows(o: &Options, env: &[(String, String)], gpu: bool) -> Vec<Row> {
    let total = o.frames + o.warmup;
    let (width, height) = if gpu { (WIDTH, HEIGHT) } else { (320, 240) };
    let producer = |ch: &str| python_producer(ch, gpu, total, "");
    let fakesink = |ch: &str| {
        format!(
            "rscudaipcsrc name=src channel={ch} connect-timeout=60000 ! fakesink name=sink sync=false"
        )
    };
    let host_only: &[&str] = if gpu { &[] } else { &["--numpy"] };
    let mut rows = Vec::new();
    let reference = "15 reference: rscudaipcsrc ! fakesink";
    let python_consumer = if gpu {
        "15 Python consumer: every frame through DLPack (cupy.from_dlpack on its own stream), released"
    } else {
        "15 Python consumer: every frame through DLPack (np.from_dlpack), released"
    };
    let ch = channel("py-reference");
    rows.push(two_process(
        reference,
        &producer(&ch),
        &fakesink(&ch),
        o.warmup,
        env,
        None,
    ));
    if left_out(python_consumer) {
        rows.push(Row::left_out(python_consumer));
    } else {
        let ch = channel("py-consumer");
        let mut args = vec![
            "--channel".to_string(),
            ch.clone(),
            "--warmup".to_string(),
            o.warmup.to_string(),
        ];
        args.extend(host_only.iter().map(|a| a.to_string()));
        let python = spawn_python("bench_consumer.py", &args, env);
        let pipeline = Child {
            role: "pipeline",
            warmup: 0,
            pipeline: producer(&ch),
        };
        let mut row = python_pair(python_consumer, python, pipeline, true, env);
        if let Some(reference) = rows.first().filter(|r| r.fps > 0.0 && row.fps > 0.0) {
            let ratio = format!(
                "{:.1}% of the reference's rate (row 15 reference, same producer)",
                100.0 * row.fps / reference.fps
            );
            row.note = [row.note.clone(), ratio]
                .into_iter()
                .filter(|n| !n.is_empty())
                .collect::<Vec<_>>()
                .join("; ");
        }
        rows.push(row);
    }
    let python_producer = if gpu {
        "15p Python producer (CuPy arrays filled on the GPU, publish(stream=)) > rscudaipcsrc ! fakesink"
    } else {
        "15p Python producer (NumPy arrays, host transport) > rscudaipcsrc ! fakesink"
    };
    if left_out(python_producer) {
        rows.push(Row::left_out(python_producer));
    } else {
        let ch = channel("py-producer");
        let pipeline = Child {
            role: "pipeline",
            warmup: o.warmup,
            pipeline: fakesink(&ch),
        };
        let consumer = spawn(&pipeline, env);
        std::thread::sleep(Duration::from_millis(300));
        let mut args = vec![
            "--channel".to_string(),
            ch,
            "--frames".to_string(),
            total.to_string(),
            "--width".to_string(),
            width.to_string(),
            "--height".to_string(),
            height.to_string(),
        ];
        args.extend(host_only.iter().map(|a| a.to_string()));
        let python = spawn_python("bench_producer.py", &args, env);
        let row = pair_row(
            python_producer,
            result_of(python, "Python producer"),
            result_of(consumer, "consumer"),
        );
        rows.push(row);
    }
    let frame_bytes = f64::from(width * height * 3);
    for row in &mut rows {
        row.frame_bytes = frame_bytes;
    }
    rows
}

// ---------------------------------------------------------------- output

fn opt(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn print_row(r: &Row) {
    eprintln!(
        "{:<44} mps={:<5} {:>9.0} FPS  {}",
        r.config,
        r.mps,
        r.fps,
        if r.error.is_empty() {
            &r.note
        } else {
            &r.error
        }
    );
}

fn print_table(rows: &[Row], gpu: bool) {
    println!(
        "| configuration | MPS | FPS | GB/s | latency p50 / p99 / max (us) | CPU consumer / producer (cores) | corrupt / missing | note |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {:.0} | {:.1} | {:.0} / {:.0} / {:.0} | {:.2} / {:.2} | {} / {} | {}{} |",
            r.config,
            if r.mps { "on" } else { "off" },
            r.fps,
            r.gbps(),
            r.latency_p50_us,
            r.latency_p99_us,
            r.latency_max_us,
            r.consumer_cpu,
            r.producer_cpu,
            opt(r.corrupt),
            opt(r.missing),
            r.note,
            r.error
        );
    }
    if gpu {
        let find = |prefix: &str, mps: bool| {
            rows.iter()
                .find(|r| r.config.starts_with(prefix) && r.mps == mps)
                .map(|r| r.fps)
        };
        for mps in [false, true] {
            if let (Some(one), Some(default), Some(seed)) =
                (find("1b", mps), find("5 default", mps), find("3 seed", mps))
            {
                println!(
                    "\nMPS {}: default two-process = {:.0}% of one process (invert + verify), {:.1}x the seed configuration",
                    if mps { "on" } else { "off" },
                    100.0 * default / one.max(1.0),
                    default / seed.max(1.0)
                );
            }
            if let (Some(one), Some(two)) = (find("1c", mps), find("5v", mps)) {
                println!(
                    "MPS {}: verify-only consumer = {:.0}% of one process (verify only)",
                    if mps { "on" } else { "off" },
                    100.0 * two / one.max(1.0)
                );
            }
        }
        gst_cuda_summary(rows);
    }
}

/// Rows 13: this pair against upstream's pair and the producer alone (same
/// producer, consumer and MPS setting), and the cudaconvert consumer against
/// the one that drops frames.
fn gst_cuda_summary(rows: &[Row]) {
    // A config of rows 13: "<id> <producer> > <pair> > <consumer>".
    let parts = |r: &Row| -> Option<(String, String, String)> {
        let mut p = r.config.split(" > ");
        let (producer, pair, consumer) = (p.next()?, p.next()?, p.next()?);
        let id = producer.split_whitespace().next()?;
        id.starts_with("13")
            .then(|| (id.to_string(), pair.to_string(), consumer.to_string()))
    };
    let fps = |id: &str, pair: &str, consumer: &str, mps: bool| {
        rows.iter()
            .filter(|r| r.mps == mps && r.fps > 0.0)
            .find(|r| parts(r).is_some_and(|(i, p, c)| i == id && p == pair && c == consumer))
            .map(|r| r.fps)
    };
    for r in rows.iter().filter(|r| r.fps > 0.0) {
        let Some((id, pair, consumer)) = parts(r) else {
            continue;
        };
        if pair != PAIR_OURS {
            continue;
        }
        let mut found = Vec::new();
        if let Some(up) = fps(&id, PAIR_UPSTREAM, &consumer, r.mps) {
            found.push(format!("{:.2}x upstream import", r.fps / up));
        }
        if let Some(alone) = fps(&id, PAIR_ALONE, &consumer, r.mps) {
            found.push(format!(
                "{:.0}% of the producer alone",
                100.0 * r.fps / alone
            ));
        }
        if consumer != "drops"
            && let Some(drops) = fps(&id, PAIR_OURS, "drops", r.mps)
        {
            found.push(format!(
                "{:.0}% of the consumer that drops",
                100.0 * r.fps / drops
            ));
        }
        println!(
            "{id} MPS {}, consumer {consumer}: this pair {:.0} FPS = {}",
            if r.mps { "on" } else { "off" },
            r.fps,
            if found.is_empty() {
                "nothing to compare with".to_string()
            } else {
                found.join(", ")
            }
        );
    }
}

/// The GPU (from `nvidia-smi`: the parent holds no CUDA context) and the
/// GStreamer runtime, for the CSV and the plot's title.
fn machine_description(gpu: bool) -> String {
    let gstreamer = format!(
        "GStreamer {}",
        gst::version_string().replace("GStreamer ", "")
    );
    if !gpu {
        return format!("no GPU (host transport), {gstreamer}");
    }
    let name = Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,driver_version",
            "--format=csv,noheader",
            "-i",
            "0",
        ])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| {
            let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let (name, driver) = text.split_once(", ")?;
            Some(format!("{name} (driver {driver})"))
        });
    format!("{}, {gstreamer}", name.unwrap_or_else(|| "GPU 0".into()))
}

/// The line of a CSV that names the machine (`read_csv` knows it).
const MACHINE_LINE: &str = "# machine: ";

fn write_csv(path: &Path, rows: &[Row], machine: &str) {
    let mut out = format!("{MACHINE_LINE}{machine}\n");
    out.push_str(
        "configuration,mps,fps,gb_per_s,latency_p50_us,latency_p99_us,latency_max_us,cpu_consumer,cpu_producer,corrupt,missing,frames,note\n",
    );
    for r in rows {
        out.push_str(&format!(
            "\"{}\",{},{:.1},{:.3},{:.1},{:.1},{:.1},{:.3},{:.3},{},{},{},\"{}\"\n",
            r.config,
            r.mps,
            r.fps,
            r.gbps(),
            r.latency_p50_us,
            r.latency_p99_us,
            r.latency_max_us,
            r.consumer_cpu,
            r.producer_cpu,
            opt(r.corrupt),
            opt(r.missing),
            r.frames,
            format!("{}{}", r.note, r.error)
                .replace('"', "'")
                .replace('\n', " ")
        ));
    }
    std::fs::write(path, out).expect("cannot write the CSV");
}

/// Reads a CSV written by `write_csv`: its rows and the machine it names
/// (CSVs written before that line have none).
fn read_csv(path: &Path) -> Result<(Vec<Row>, Option<String>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let machine = text
        .lines()
        .find_map(|l| l.strip_prefix(MACHINE_LINE))
        .map(str::to_string);
    let rows = text
        .lines()
        .filter(|l| l.starts_with('"'))
        .map(|line| {
            // The configuration and the note are quoted; the rest are plain.
            let (config, rest) = line[1..]
                .split_once("\",")
                .ok_or_else(|| format!("no quoted configuration in: {line}"))?;
            let (numbers, note) = rest.split_once(",\"").unwrap_or((rest, "\""));
            let f: Vec<&str> = numbers.split(',').collect();
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            let count = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
            Ok(Row {
                config: config.to_string(),
                mps: f.first() == Some(&"true"),
                fps: num(1),
                latency_p50_us: num(3),
                latency_p99_us: num(4),
                latency_max_us: num(5),
                consumer_cpu: num(6),
                producer_cpu: num(7),
                corrupt: count(8),
                missing: count(9),
                frames: count(10).unwrap_or(0),
                frame_bytes: if num(1) > 0.0 {
                    num(2) * 1e9 / num(1)
                } else {
                    FRAME_BYTES
                },
                note: note.trim_end_matches('"').to_string(),
                ..Row::default()
            })
        })
        .collect::<Result<_, String>>()?;
    Ok((rows, machine))
}
