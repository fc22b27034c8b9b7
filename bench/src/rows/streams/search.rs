// SPDX-License-Identifier: MPL-2.0

//! Rows 14's search for the most pairs a GPU carries with no late frame.

use super::trial::streams_trial;
use super::{STREAM_FPS, STREAMS_MEMORY_SHARE, StreamPair, StreamsTrial, gpu_memory_mib};
use crate::measure::Row;
use crate::names::STREAMS_SETTLE_S;
use crate::options::Options;

/// The trials of a search, in the order they ran.
struct Search {
    trials: Vec<StreamsTrial>,
    /// The index of the largest trial with no late frame.
    good: Option<usize>,
    /// What capped N: `--max-streams` or the device memory.
    capped_by: &'static str,
    /// GPU 0's total and used memory (MiB) before the first trial.
    baseline: Option<(u64, u64)>,
}

/// Rows 14's search: N pairs at once, N doubling from 1 until a pair is
/// late, then halving the step between the last good N and the first late
/// one; the largest N with no late pair makes the row (its `frames` column;
/// `fps`: the frames per second all its pairs carry).
pub(super) fn streams_row(
    pair: &StreamPair,
    o: &Options,
    env: &[(String, String)],
    gpu: bool,
    frame_bytes: f64,
) -> Row {
    let search = search(pair, o, env, gpu);
    let trials = &search.trials;
    let sum = |f: fn(&StreamsTrial) -> Option<u64>| {
        trials
            .iter()
            .map(f)
            .try_fold(0, |total, v| v.map(|v| total + v))
    };
    let note = search_note(pair, o, &search);
    let Some(best) = search.good.map(|g| &trials[g]) else {
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

/// Runs trials of N pairs until the largest good N is found (or capped).
fn search(pair: &StreamPair, o: &Options, env: &[(String, String)], gpu: bool) -> Search {
    let baseline = gpu.then(gpu_memory_mib).flatten();
    let mut cap = o.max_streams.max(1);
    let mut capped_by = "--max-streams";
    let mut trials: Vec<StreamsTrial> = Vec::new();
    let mut good: Option<usize> = None;
    let mut bad: Option<u32> = None;
    let mut n = o.min_streams.clamp(1, cap);
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
    Search {
        trials,
        good,
        capped_by,
        baseline,
    }
}

/// The row's note: N and why, the trials, what a pair's consumer does, and
/// the GPU memory a pair took.
fn search_note(pair: &StreamPair, o: &Options, search: &Search) -> String {
    let trials = &search.trials;
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
    let first_late = trials.iter().find(|t| t.late.is_some());
    let best = search.good.map(|g| &trials[g]);
    let mut note = match (best, first_late) {
        (Some(best), Some(late)) => format!(
            "N = {} (largest with no late frame; N = {} late: {})",
            best.pairs,
            late.pairs,
            late.late.as_deref().unwrap_or_default()
        ),
        (Some(best), None) => format!(
            "N >= {} (no late frame up to the cap, {})",
            best.pairs, search.capped_by
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
    if let (Some((_, before)), Some(best)) = (search.baseline, best)
        && let Some(during) = best.memory_used_mib
    {
        note.push_str(&format!(
            "; about {} MiB of GPU memory a pair",
            during.saturating_sub(before) / u64::from(best.pairs)
        ));
    }
    note
}
