// SPDX-License-Identifier: MPL-2.0

//! The benchmark's processes and what each one runs (a producer, a
//! consumer, one process with both halves), and how their results come back.

use super::*;

/// Runs one pipeline in this process and prints a `RESULT key=value ...`
/// line. args: role, warmup, pipeline description.
pub(crate) fn run_role(args: &[String]) -> i32 {
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

pub(crate) fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

pub(crate) fn run_pipeline(warmup: u64, description: &str) -> i32 {
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
pub(crate) fn has_own_elements(pipeline: &gst::Pipeline) -> bool {
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
pub(crate) struct ProducerClock {
    warmup: u64,
    times: Arc<Mutex<ProducerTimes>>,
}

#[derive(Default)]
pub(crate) struct ProducerTimes {
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
pub(crate) fn monotonic_ns() -> u64 {
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
pub(crate) struct Control {
    state: Arc<ControlState>,
}

#[derive(Default)]
pub(crate) struct ControlState {
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
pub(crate) fn loop_file(pipeline: &gst::Pipeline, path: &str) {
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
pub(crate) fn run_copy(bytes: usize, iterations: u64, to: i32) -> i32 {
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

/// A child process of rows 9 and 14, its output read as it comes (a
/// consumer's `READY` is passed on at once) and its input kept to step it
/// (`Control`).
pub(crate) struct Proc {
    what: String,
    process: std::process::Child,
    input: Option<std::process::ChildStdin>,
    output: std::thread::JoinHandle<String>,
    errors: std::thread::JoinHandle<String>,
}

/// A child's `RESULT` fields, or why it has none.
pub(crate) type ChildResult = Result<BTreeMap<String, String>, String>;

/// What the output of a `Proc` (its index) said.
pub(crate) enum ProcEvent {
    Ready(usize),
    Gone(usize),
}

impl Proc {
    pub(crate) fn start(
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

    pub(crate) fn say(&mut self, line: &str) {
        use std::io::Write;
        if let Some(input) = self.input.as_mut() {
            // A process that has ended already reads nothing: no matter.
            let _ = writeln!(input, "{line}");
        }
    }

    /// The end of its input: a stepped process ends its stream.
    pub(crate) fn close_input(&mut self) {
        self.input = None;
    }
}

/// Waits for each process until `limit` from now, kills those still
/// running then (through their handles: by their own pid, not yet reaped),
/// and reads their `RESULT` lines. The bool says whether any was killed.
pub(crate) fn finish_all(mut procs: Vec<Proc>, limit: Duration) -> (Vec<ChildResult>, bool) {
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
pub(crate) fn frame_geometry(gpu: bool) -> (u32, u32) {
    if gpu { (WIDTH, HEIGHT) } else { (320, 240) }
}
