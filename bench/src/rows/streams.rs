// SPDX-License-Identifier: MPL-2.0

//! Rows 14 of the benchmark: streams per GPU, this pair's and upstream's,
//! found by starting N pairs at once.
//!
//! Rows 14 run only when `--rows` names them. `--rows 14,14u`: streams per GPU, N
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

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use gst::prelude::*;

use crate::measure::{Child, Row, number, row_from};
use crate::options::{Options, asked_for};
use crate::procs::{Proc, ProcEvent, finish_all};
use crate::report::{opt, print_row};
use crate::roles::monotonic_ns;
use crate::rows::{channel, frame_geometry};

/// Rows 14: seconds of a trial (after every consumer's first frame) that
/// are not counted.
pub const STREAMS_SETTLE_S: f64 = 2.0;
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

pub fn streams_rows(o: &Options, env: &[(String, String)], gpu: bool) -> Vec<Row> {
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
