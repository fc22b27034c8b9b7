// SPDX-License-Identifier: MPL-2.0

//! One trial of rows 14: N pairs started together, stepped through one
//! counted window (`roles::clocks::Control`), then judged pair by pair.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use super::{
    STREAM_FPS, STREAM_FRAMES_NEEDED, STREAMS_START_LIMIT, StreamPair, StreamsTrial, gpu_memory_mib,
};
use crate::measure::{Child, number, row_from};
use crate::names::STREAMS_SETTLE_S;
use crate::options::Options;
use crate::procs::{ChildResult, Proc, ProcEvent, finish_all};
use crate::report::opt;
use crate::roles::monotonic_ns;
use crate::rows::channel;

/// `n` pairs started together; once every consumer has its first frame,
/// `--streams-seconds` more, the first `STREAMS_SETTLE_S` not counted.
/// Every process is started and ended here.
pub(super) fn streams_trial(
    pair: &StreamPair,
    n: u32,
    o: &Options,
    env: &[(String, String)],
    gpu: bool,
) -> StreamsTrial {
    let mut env = env.to_vec();
    env.push(("CUDAIPC_BENCH_CONTROL".into(), "1".into()));
    let (events, heard) = std::sync::mpsc::channel();
    let tags: Vec<String> = (0..n)
        .map(|i| channel(&format!("streams-{n}-{i}")))
        .collect();
    let (mut consumers, mut producers, mut failure) = match &pair.one_consumer {
        None => start_pairs(pair, &tags, &env, &events),
        Some(branch) => start_one_consumer(pair, branch, &tags, &env, &events),
    };
    if failure.is_none() {
        failure = wait_until_running(&heard, consumers.len() as u32).err();
    }
    let memory_used_mib = match failure {
        None => run_window(&mut consumers, o, gpu),
        Some(_) => None,
    };
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
    let consumed = match pair.one_consumer {
        None => consumed,
        // Its branches, judged as row 14's consumers.
        Some(_) => split_branches(&consumed[0], tags.len()),
    };
    judge(&mut trial, pair, o, &consumed, &produced);
    trial
}

/// Row 14m: one consumer process with a branch per channel (started
/// first: each branch waits for its producer), then the producers.
fn start_one_consumer(
    pair: &StreamPair,
    branch: &super::BranchOf,
    tags: &[String],
    env: &[(String, String)],
    events: &Sender<ProcEvent>,
) -> (Vec<Proc>, Vec<Proc>, Option<String>) {
    let child = |pipeline: String| Child {
        role: "pipeline",
        warmup: 0,
        pipeline,
    };
    let branches: Vec<String> = tags.iter().enumerate().map(|(i, t)| branch(t, i)).collect();
    let consumer = match Proc::start(
        "consumer".into(),
        &child(branches.join(" ")),
        env,
        0,
        events,
    ) {
        Ok(consumer) => consumer,
        Err(e) => return (Vec::new(), Vec::new(), Some(e)),
    };
    let mut producers = Vec::new();
    for (i, tag) in tags.iter().enumerate() {
        let (producer, _) = (pair.make)(tag);
        match Proc::start(
            format!("producer {i}"),
            &child(producer),
            env,
            2 * i + 1,
            events,
        ) {
            Ok(p) => producers.push(p),
            Err(e) => return (vec![consumer], producers, Some(e)),
        }
    }
    (vec![consumer], producers, None)
}

/// The figures of each of `n` branches of one consumer process: its
/// `b{i}.`-prefixed fields without the prefix, beside the process's own
/// (its CPU time, shared by all).
fn split_branches(consumer: &ChildResult, n: usize) -> Vec<ChildResult> {
    (0..n)
        .map(|i| {
            let fields = consumer.as_ref().map_err(Clone::clone)?;
            let prefix = format!("b{i}.");
            let mut branch: BTreeMap<String, String> = fields
                .iter()
                .filter(|(k, _)| {
                    !k.starts_with('b') || !k[1..].starts_with(|c: char| c.is_ascii_digit())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            branch.extend(
                fields
                    .iter()
                    .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), v.clone()))),
            );
            Ok(branch)
        })
        .collect()
}

/// Starts a consumer and a producer on each of `tags`, consumers first:
/// each producer waits for its consumer (ours), or its consumer waits for
/// it (upstream's). The consumers, the producers, and why starting stopped.
fn start_pairs(
    pair: &StreamPair,
    tags: &[String],
    env: &[(String, String)],
    events: &Sender<ProcEvent>,
) -> (Vec<Proc>, Vec<Proc>, Option<String>) {
    let mut consumers: Vec<Proc> = Vec::new();
    let mut producers: Vec<Proc> = Vec::new();
    let child = |pipeline: String| Child {
        role: "pipeline",
        warmup: 0,
        pipeline,
    };
    for (i, tag) in tags.iter().enumerate() {
        let (producer, consumer) = (pair.make)(tag);
        let started = Proc::start(
            format!("consumer {i}"),
            &child(consumer),
            env,
            2 * i,
            events,
        )
        .and_then(|c| {
            consumers.push(c);
            let what = format!("producer {i}");
            Proc::start(what, &child(producer), env, 2 * i + 1, events)
        });
        match started {
            Ok(p) => producers.push(p),
            Err(e) => return (consumers, producers, Some(e)),
        }
    }
    (consumers, producers, None)
}

/// Waits for every consumer's first frame (`READY`): then the pairs run.
fn wait_until_running(heard: &Receiver<ProcEvent>, n: u32) -> Result<(), String> {
    let mut ready = BTreeSet::new();
    let start_by = Instant::now() + STREAMS_START_LIMIT;
    while ready.len() < n as usize {
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
                return Err(format!("{role} {} ended before every pair ran", index / 2));
            }
            Err(_) => {
                return Err(format!(
                    "{} of {n} consumers had a frame within {} s",
                    ready.len(),
                    STREAMS_START_LIMIT.as_secs()
                ));
            }
        }
    }
    Ok(())
}

/// Tells every consumer the counted window and waits until it ends; the
/// device memory in use in its middle (with a GPU).
fn run_window(consumers: &mut [Proc], o: &Options, gpu: bool) -> Option<u64> {
    let start = monotonic_ns() + (STREAMS_SETTLE_S * 1e9) as u64;
    let end = start + ((o.streams_seconds - STREAMS_SETTLE_S) * 1e9) as u64;
    for consumer in consumers {
        consumer.say(&format!("WINDOW {start} {end}"));
    }
    // Memory in the middle of the counted time.
    let middle = start + (end - start) / 2;
    std::thread::sleep(Duration::from_nanos(middle.saturating_sub(monotonic_ns())));
    let used = gpu.then(gpu_memory_mib).flatten().map(|(_, used)| used);
    std::thread::sleep(Duration::from_nanos(end.saturating_sub(monotonic_ns())));
    used
}

/// Judges every pair of a trial that ran: late below the frames needed, at
/// a frame over a frame period late (ours), at a corrupt or missing frame,
/// or when its processes failed; the trial's figures over all pairs.
fn judge(
    trial: &mut StreamsTrial,
    pair: &StreamPair,
    o: &Options,
    consumed: &[ChildResult],
    produced: &[ChildResult],
) {
    let n = f64::from(trial.pairs);
    let mut late = Vec::new();
    let (mut corrupt, mut missing) = (Some(0), Some(0));
    trial.fewest_frames = u64::MAX;
    for (i, (c, p)) in consumed.iter().zip(produced).enumerate() {
        let (c, p) = match (c, p) {
            (Ok(c), Ok(p)) => (c, p),
            (c, p) => {
                let errors: Vec<String> = [c.as_ref().err(), p.as_ref().err()]
                    .into_iter()
                    .flatten()
                    .map(|e| e.replace('\n', " "))
                    .collect();
                late.push(format!("pair {i}: {}", errors.join(" / ")));
                continue;
            }
        };
        let row = row_from(&pair.config, c, Some(p));
        trial.consumer_cpu += row.consumer_cpu / n;
        trial.producer_cpu += row.producer_cpu / n;
        let frames = number(c, "window.frames").unwrap_or(0.0) as u64;
        // The parent's window: a consumer that never heard of it is late.
        let expected = STREAM_FPS * (o.streams_seconds - STREAMS_SETTLE_S);
        trial.expected_frames = expected;
        trial.fewest_frames = trial.fewest_frames.min(frames);
        if (frames as f64) < STREAM_FRAMES_NEEDED * expected {
            late.push(format!("pair {i}: {frames} of {expected:.0} frames"));
        }
        if pair.latency_known {
            late.extend(latency_late(trial, i, c));
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
    if trial.late.is_none() && !late.is_empty() {
        let more = late.len() - 1;
        trial.late = Some(if more > 0 {
            format!("{} (and {more} more)", late[0])
        } else {
            late[0].clone()
        });
    }
}

/// Adds pair `i`'s latency to the trial's worst; why it is late, if a frame
/// came over a frame period after it was published.
fn latency_late(
    trial: &mut StreamsTrial,
    i: usize,
    consumer: &BTreeMap<String, String>,
) -> Option<String> {
    // Over the window when a frame came after it, else to the end.
    let latency_us = |stat: &str| {
        number(consumer, &format!("window.latency-{stat}-ns"))
            .or_else(|| number(consumer, &format!("src.latency-{stat}-ns")))
            .unwrap_or(0.0)
            / 1e3
    };
    let worst = latency_us("max");
    trial.latency_p50_us = trial.latency_p50_us.max(latency_us("p50"));
    trial.latency_p99_us = trial.latency_p99_us.max(latency_us("p99"));
    trial.latency_max_us = trial.latency_max_us.max(worst);
    (worst > 1e6 / STREAM_FPS).then(|| {
        format!(
            "pair {i}: a frame {:.1} ms after it was published",
            worst / 1e3
        )
    })
}
