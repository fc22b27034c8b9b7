// SPDX-License-Identifier: MPL-2.0

//! The benchmark's processes: every one is this program run again with
//! `--role`, running one pipeline (a producer, a consumer, or one process
//! with both halves) or the frame copy of row 2, and printing a `RESULT
//! key=value ...` line the parent reads (`measure`).

mod clocks;
mod copy;
mod metas;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use gst::prelude::*;

pub use clocks::monotonic_ns;
use clocks::{Control, ProducerClock};

/// Runs one pipeline in this process and prints a `RESULT key=value ...`
/// line. args: role, warmup, pipeline description.
pub fn run_role(args: &[String]) -> i32 {
    gst::init().unwrap();
    gstcudaipc::plugin_register_static().unwrap();
    match args[0].as_str() {
        "copy" => copy::run_copy(
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

pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

/// Runs the pipeline `description` to its end and prints its `RESULT`
/// line: the frames its sink counted after `warmup`, their time and CPU,
/// the producer's own clock, a stepped window (rows 14), and the stats of
/// the elements named `src`, `check` and `ipcsink`.
pub fn run_pipeline(warmup: u64, description: &str) -> i32 {
    let wall_start = Instant::now();
    let cpu_start = cpu_seconds();
    let pipeline = match gst::parse::launch(description) {
        Ok(p) => p.downcast::<gst::Pipeline>().unwrap(),
        Err(e) => {
            eprintln!("cannot build {description}: {e}");
            return 1;
        }
    };
    let counter = SinkCounter::attach(&pipeline, warmup);
    metas::attach_if_asked(&pipeline);
    let produced = pipeline
        .by_name("ipcsink")
        .map(|sink| ProducerClock::attach(&sink, warmup));
    // CUDAIPC_BENCH_CONTROL (rows 14): the parent steps the process through
    // its standard input (see `Control`).
    let control = std::env::var_os("CUDAIPC_BENCH_CONTROL").map(|_| Control::start(&pipeline));
    if let Ok(path) = std::env::var("CUDAIPC_BENCH_LOOP") {
        loop_file(&pipeline, &path);
    }
    let ending = StreamEnd::attach(&pipeline, control.as_ref());
    pipeline.set_state(gst::State::Playing).unwrap();
    let ok = run_to_end(&pipeline, ending.as_ref());
    wait_for_gpu(&pipeline);
    let mut fields = counter.report(wall_start, cpu_start);
    if let Some(produced) = &produced {
        produced.report(&mut fields);
    }
    if let Some(control) = &control {
        control.report(&mut fields);
    }
    // One consumer of several channels (row 14m): each branch's too.
    let mut named: Vec<(String, String)> = ["src", "check", "ipcsink"]
        .iter()
        .map(|n| (n.to_string(), n.to_string()))
        .collect();
    for (i, (prefix, _, _)) in clocks::branches(&pipeline).iter().enumerate() {
        if !prefix.is_empty() {
            named.push((format!("src{i}"), format!("{prefix}src")));
            named.push((format!("check{i}"), format!("{prefix}check")));
        }
    }
    for (name, prefix) in &named {
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

/// Frames reaching the element named `sink`; the clock starts at the
/// warm-up's last frame.
struct SinkCounter {
    warmup: u64,
    counted: Arc<AtomicU64>,
    started: Arc<Mutex<Option<(Instant, f64)>>>,
}

impl SinkCounter {
    fn attach(pipeline: &gst::Pipeline, warmup: u64) -> SinkCounter {
        let counter = SinkCounter {
            warmup,
            counted: Arc::default(),
            started: Arc::default(),
        };
        if let Some(sink) = pipeline.by_name("sink") {
            let counted = counter.counted.clone();
            let started = counter.started.clone();
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
        counter
    }

    /// `frames`, and `measured` frames in `seconds` with `cpu_s` from the
    /// warm-up on (without one: the whole run's time and CPU).
    fn report(&self, wall_start: Instant, cpu_start: f64) -> BTreeMap<String, String> {
        let end = Instant::now();
        let cpu_end = cpu_seconds();
        let mut fields: BTreeMap<String, String> = BTreeMap::new();
        let frames = self.counted.load(Ordering::Relaxed);
        if let Some((t0, cpu0)) = *self.started.lock().unwrap() {
            let measured = frames.saturating_sub(self.warmup);
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
        fields
    }
}

/// How a stream that the process ends itself ends: an EOS into the
/// producer's last element (or the sink) at `CUDAIPC_BENCH_SECONDS` (rows
/// 13) after its first frame, or when the parent says `STOP` (rows 14).
struct StreamEnd<'a> {
    pad: gst::Pad,
    deadline: Option<Duration>,
    control: Option<&'a Control>,
    first_frame: Arc<OnceLock<Instant>>,
}

impl<'a> StreamEnd<'a> {
    fn attach(pipeline: &gst::Pipeline, control: Option<&'a Control>) -> Option<StreamEnd<'a>> {
        let deadline = std::env::var("CUDAIPC_BENCH_SECONDS")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .map(Duration::from_secs_f64);
        if deadline.is_none() && control.is_none() {
            return None;
        }
        let pad = pipeline
            .by_name("ipcsink")
            .or_else(|| pipeline.by_name("sink"))?
            .static_pad("sink")?;
        let first_frame: Arc<OnceLock<Instant>> = Arc::default();
        let first = first_frame.clone();
        pad.add_probe(gst::PadProbeType::BUFFER, move |_, _| {
            first.get_or_init(Instant::now);
            gst::PadProbeReturn::Ok
        });
        Some(StreamEnd {
            pad,
            deadline,
            control,
            first_frame,
        })
    }

    fn due(&self) -> bool {
        self.deadline.is_some_and(|deadline| {
            (self.first_frame.get()).is_some_and(|t| t.elapsed() >= deadline)
        }) || self.control.is_some_and(Control::stop_asked)
    }
}

/// Runs `pipeline` until its EOS or error, ending its stream when `ending`
/// is due. Whether it ended without an error.
fn run_to_end(pipeline: &gst::Pipeline, ending: Option<&StreamEnd>) -> bool {
    let bus = pipeline.bus().unwrap();
    let mut ended: Option<Instant> = None;
    let poll = ending.map(|_| gst::ClockTime::from_mseconds(50));
    loop {
        if let Some(msg) = bus.timed_pop(poll) {
            match msg.view() {
                gst::MessageView::Eos(_) => return true,
                gst::MessageView::Error(e) => {
                    eprintln!("error: {} ({:?})", e.error(), e.debug());
                    return false;
                }
                _ => {}
            }
        }
        let Some(ending) = ending else { continue };
        match ended {
            None if ending.due() => {
                // Serialised with the streaming thread (the pad's stream
                // lock); upstream then gets FLOW_EOS and stops.
                ending.pad.send_event(gst::event::Eos::new());
                ended = Some(Instant::now());
            }
            Some(t) if t.elapsed() > Duration::from_secs(30) => {
                eprintln!("error: no EOS 30 s after ending the stream");
                return false;
            }
            _ => {}
        }
    }
}

/// The CPU runs ahead of the GPU: the clock stops once the GPU is done (a
/// consumer's: the one its source reads on; -1 is the producer's, 0). Only
/// where this plugin's elements run: elsewhere (rows 13's upstream and
/// one-process pipelines) it would create a CUDA context inside the
/// measured time, and GStreamer's elements keep only a few frames queued.
fn wait_for_gpu(pipeline: &gst::Pipeline) {
    let ordinal = pipeline
        .by_name("src")
        .or_else(|| pipeline.by_name("src0"))
        .filter(|s| s.find_property("cuda-device-id").is_some())
        .map_or(0, |s| s.property::<i32>("cuda-device-id").max(0));
    if cudaipc_transport::cuda::is_available()
        && has_own_elements(pipeline)
        && let Ok(device) = cudaipc_transport::cuda::Device::get(ordinal)
    {
        let _ = device.stream().synchronize();
    }
}

/// Whether `pipeline` holds an element of this plugin.
pub fn has_own_elements(pipeline: &gst::Pipeline) -> bool {
    pipeline.iterate_recurse().into_iter().flatten().any(|e| {
        e.factory()
            .and_then(|f| f.plugin_name())
            .is_some_and(|p| p == "cudaipc")
    })
}

/// Feeds the appsrc named `loop` with the bytes of `path` again and again
/// (one buffer per round: a whole H.264 clip or one JPEG image), until the
/// stream ends. GStreamer 1.26's staged runtime has no multifilesrc.
pub fn loop_file(pipeline: &gst::Pipeline, path: &str) {
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
