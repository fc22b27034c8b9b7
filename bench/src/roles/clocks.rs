// SPDX-License-Identifier: MPL-2.0

//! What a role's process times besides its sink's frames: the producer's
//! own rate (`ProducerClock`) and the window a parent steps it through
//! (`Control`, rows 14), on one clock for every process (`monotonic_ns`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use gst::prelude::*;

/// CLOCK_MONOTONIC in nanoseconds: one clock for the parent and every child.
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// The producer's own clock: frames into the sink named `ipcsink`, timed
/// from the arrival of the first frame after the warm-up to the arrival of
/// the last one (the sink renders one frame at a time, so each arrival
/// means the frame before it is published).
pub struct ProducerClock {
    warmup: u64,
    times: Arc<Mutex<ProducerTimes>>,
}

#[derive(Default)]
pub struct ProducerTimes {
    arrived: u64,
    from: Option<Instant>,
    last: Option<Instant>,
}

impl ProducerClock {
    pub fn attach(sink: &gst::Element, warmup: u64) -> ProducerClock {
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
    pub fn report(&self, fields: &mut BTreeMap<String, String>) {
        let times = self.times.lock().unwrap();
        if let (Some(from), Some(last)) = (times.from, times.last) {
            let measured = times.arrived - (self.warmup + 1);
            let seconds = last.duration_since(from).as_secs_f64();
            fields.insert("produced.measured".into(), measured.to_string());
            fields.insert("produced.seconds".into(), format!("{seconds:.6}"));
        }
    }
}

/// A child that rows 14 run in step with others, through its standard
/// input and output: a consumer says `READY` once each of its branches had
/// its first frame; the parent then sends every consumer `WINDOW <start>
/// <end>` (CLOCK_MONOTONIC nanoseconds: the counted time) and each producer
/// `STOP` (or closes its input) to end its stream. A consumer of one
/// channel has one branch, its elements named `src` and `sink`; one
/// consumer of several (row 14m) names branch `i`'s `src{i}` and `sink{i}`,
/// and reports its figures prefixed `b{i}.`.
pub struct Control {
    state: Arc<ControlState>,
    branches: Vec<(String, Arc<BranchWindow>)>,
}

#[derive(Default)]
pub struct ControlState {
    stop: AtomicBool,
    window_start: AtomicU64,
    window_end: AtomicU64,
    /// Branches that had their first frame.
    ready: AtomicUsize,
}

/// One branch's frames in the window.
#[derive(Default)]
struct BranchWindow {
    /// It had its first frame.
    ready: AtomicBool,
    /// A frame came in the window.
    in_window: AtomicBool,
    window_frames: AtomicU64,
    /// Its source's stats at the first frame after the window.
    window_stats: Mutex<Option<gst::Structure>>,
}

/// The branches of `pipeline`: (prefix of its figures, source, sink).
pub fn branches(pipeline: &gst::Pipeline) -> Vec<(String, String, String)> {
    if pipeline.by_name("sink").is_some() {
        return vec![(String::new(), "src".into(), "sink".into())];
    }
    (0..)
        .map_while(|i| {
            let sink = format!("sink{i}");
            pipeline
                .by_name(&sink)
                .map(|_| (format!("b{i}."), format!("src{i}"), sink))
        })
        .collect()
}

impl Control {
    pub fn start(pipeline: &gst::Pipeline) -> Control {
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
        let all = branches(pipeline);
        let count = all.len();
        let branches = all
            .into_iter()
            .map(|(prefix, source, sink)| {
                let branch: Arc<BranchWindow> = Arc::default();
                let source = pipeline
                    .by_name(&source)
                    .filter(|s| s.find_property("stats").is_some());
                if let Some(pad) = pipeline.by_name(&sink).and_then(|s| s.static_pad("sink")) {
                    let (state, branch) = (state.clone(), branch.clone());
                    pad.add_probe(gst::PadProbeType::BUFFER, move |_, _| {
                        count_frame(&state, &branch, source.as_ref(), count);
                        gst::PadProbeReturn::Ok
                    });
                }
                (prefix, branch)
            })
            .collect();
        Control { state, branches }
    }

    pub fn stop_asked(&self) -> bool {
        self.state.stop.load(Ordering::SeqCst)
    }

    /// Per branch, `window.frames` and `window.seconds`, and the source's
    /// stats over the window (`window.<stat>`) when a frame came after it.
    pub fn report(&self, fields: &mut BTreeMap<String, String>) {
        let start = self.state.window_start.load(Ordering::SeqCst);
        if start == 0 {
            return;
        }
        let end = self.state.window_end.load(Ordering::SeqCst);
        for (prefix, branch) in &self.branches {
            let frames = branch.window_frames.load(Ordering::Relaxed);
            fields.insert(format!("{prefix}window.frames"), frames.to_string());
            fields.insert(
                format!("{prefix}window.seconds"),
                format!("{:.6}", end.saturating_sub(start) as f64 / 1e9),
            );
            if let Some(stats) = branch.window_stats.lock().unwrap().as_ref() {
                for (field, value) in stats.iter() {
                    let text = value.serialize().map(|s| s.to_string()).unwrap_or_default();
                    fields.insert(format!("{prefix}window.{field}"), text);
                }
            }
        }
    }
}

/// A frame at a branch's sink: `READY` once every one of the `branches`
/// had one; counted when it comes in the window.
fn count_frame(
    state: &ControlState,
    branch: &BranchWindow,
    source: Option<&gst::Element>,
    branches: usize,
) {
    if !branch.ready.swap(true, Ordering::Relaxed)
        && state.ready.fetch_add(1, Ordering::SeqCst) + 1 == branches
    {
        println!("READY");
    }
    let start = state.window_start.load(Ordering::SeqCst);
    if start == 0 {
        return;
    }
    let now = monotonic_ns();
    let end = state.window_end.load(Ordering::SeqCst);
    if now >= end {
        let mut stats = branch.window_stats.lock().unwrap();
        if stats.is_none() {
            *stats = Some(
                source
                    .map(|s| s.property::<gst::Structure>("stats"))
                    .unwrap_or_else(|| gst::Structure::new_empty("none")),
            );
        }
    } else if now >= start {
        if !branch.in_window.swap(true, Ordering::Relaxed)
            && let Some(source) = source
        {
            // The latency figures cover the window only.
            source.emit_by_name::<()>("reset-stats", &[]);
        }
        branch.window_frames.fetch_add(1, Ordering::Relaxed);
    }
}
