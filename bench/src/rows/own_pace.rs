//! Rows 16 of the benchmark: consumers at their own pace.
//!
//! 16a: a live producer at 60 FPS with one consumer that asks for every
//! frame (`frames=every`; on a GPU it inverts and verifies each one). 16b:
//! the same plus a consumer that takes 20 ms a frame at its own pace
//! (`frames=auto`): the producer must not wait for it, so the first
//! consumer and the producer keep 16a's rate, and the slow one misses
//! frames. 16c: the Python consumer at full rate (not live) keeping batches
//! of 8 frames (`hold=7`) before it works on them and releases them, beside
//! 16r, the same consumer taking one frame at a time, on the same producer
//! with `slots=16` (a batch needs `hold+2` slots). Run only when `--rows`
//! names them (`--rows 16`: all four); `--smoke` runs 16a and 16b with a
//! few frames.

use std::time::Duration;

use crate::measure::{Child, Row, failed_row, measured_rate, number, row_from};
use crate::options::{Options, ROWS, asked_for};
use crate::procs::run_together;
use crate::rows::frame_geometry;
use crate::rows::python::{python_pair, python_producer, spawn_python};

/// The live rows: they need no Python, so `--smoke` runs them.
const LIVE_IDS: [&str; 2] = ["16a", "16b"];
/// The live producer's frame rate.
const LIVE_FPS: u64 = 60;
/// Frames of a live row before its clocks start: a second at `LIVE_FPS`.
const LIVE_WARMUP: u64 = 60;
/// Frames a batch of 16c keeps at once.
const BATCH: u32 = 8;
/// The ring of 16r and 16c: at least `BATCH + 1` (`hold + 2`), given to the
/// sink, since its default on the host transport is smaller.
const BATCH_SLOTS: u32 = 16;
/// 16b and 16c keep this share of their reference's rate.
const TARGET_PERCENT: f64 = 95.0;

/// Whether row `id` runs: named by `--rows` (`--rows 16`: 16a, 16b, 16r,
/// 16c), or a live row of a smoke run without `--rows`.
fn wanted(o: &Options, id: &str) -> bool {
    asked_for("16") || asked_for(id) || (o.smoke && ROWS.get().is_none() && LIVE_IDS.contains(&id))
}

/// Rows 16 that are wanted, in order. `python_every`: the rate of row 15's
/// Python consumer in this run, if it ran: 16c's reference when 16r does
/// not run.
pub fn pace_rows(
    o: &Options,
    env: &[(String, String)],
    gpu: bool,
    python_every: Option<f64>,
) -> Vec<Row> {
    let mut rows = live_rows(o, env, gpu);
    rows.extend(batch_rows(o, env, gpu, python_every));
    let (width, height) = frame_geometry(gpu);
    for row in &mut rows {
        row.frame_bytes = f64::from(width * height * 3);
    }
    rows
}

/// The note's text for `part` in percent of `whole` ("97.5% of ...").
fn share(part: f64, whole: f64, of: &str) -> String {
    match part > 0.0 && whole > 0.0 {
        true => format!("{:.1}% of {of}", 100.0 * part / whole),
        false => format!("no ratio to {of}"),
    }
}

/// A note followed by `more`, either of them possibly empty.
fn join_notes(first: &str, more: &str) -> String {
    [first, more]
        .into_iter()
        .filter(|n| !n.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

// ------------------------------------------------------------- 16a, 16b

fn live_rows(o: &Options, env: &[(String, String)], gpu: bool) -> Vec<Row> {
    let (consumer, transport) = match gpu {
        true => ("one frames=every consumer that inverts + verifies", ""),
        false => ("one frames=every consumer", " (host transport)"),
    };
    let mut rows = Vec::new();
    // 16a's consumer and producer rates: 16b's reference.
    let mut alone: Option<(f64, f64)> = None;
    for (id, with_slow) in [("16a", false), ("16b", true)] {
        if !wanted(o, id) {
            continue;
        }
        let config = match with_slow {
            false => format!("16a live {LIVE_FPS} FPS producer, {consumer}{transport}"),
            true => format!(
                "16b 16a + a consumer taking 20 ms a frame at its own pace (frames=auto){transport}"
            ),
        };
        let (mut row, producer_fps) = live_row(&config, with_slow, o, env, gpu);
        match (with_slow, alone) {
            (false, _) if row.error.is_empty() => alone = Some((row.fps, producer_fps)),
            (true, Some((consumer_fps, alone_producer_fps))) => {
                let against = format!(
                    "frames=every consumer {}, producer {} (target >= {TARGET_PERCENT:.0}%)",
                    share(row.fps, consumer_fps, "16a's"),
                    share(producer_fps, alone_producer_fps, "16a's")
                );
                row.note = join_notes(&against, &row.note);
            }
            _ => {}
        }
        rows.push(row);
    }
    rows
}

/// The pipelines of a live row: the producer of `total` frames (waiting
/// for `consumers`), the consumer that takes every frame, the slow one.
fn live_pipelines(ch: &str, gpu: bool, consumers: usize, total: u64) -> [String; 3] {
    let (width, height) = frame_geometry(gpu);
    let caps = format!("format=RGB,width={width},height={height},framerate={LIVE_FPS}/1");
    let (generate, transport, process) = match gpu {
        true => (
            format!(
                "cudatestsrc is-live=true pattern=counter num-buffers={total} ! video/x-raw(memory:CUDAMemory),{caps}"
            ),
            "",
            "! cudaprocess name=check operation=invert verify=true ",
        ),
        false => (
            format!("videotestsrc is-live=true num-buffers={total} ! video/x-raw,{caps}"),
            "transport=host ",
            "",
        ),
    };
    [
        format!(
            "{generate} ! rscudaipcsink name=ipcsink channel={ch} {transport}sync=false wait-for-connection={consumers}"
        ),
        format!(
            "rscudaipcsrc name=src channel={ch} connect-timeout=60000 frames=every {process}! fakesink name=sink sync=false"
        ),
        format!(
            "rscudaipcsrc name=src channel={ch} connect-timeout=60000 ! identity sleep-time=20000 ! fakesink name=sink sync=false"
        ),
    ]
}

/// One live row, made by the consumer that takes every frame, and the
/// producer's own rate.
fn live_row(
    config: &str,
    with_slow: bool,
    o: &Options,
    env: &[(String, String)],
    gpu: bool,
) -> (Row, f64) {
    let total = o.live_frames + LIVE_WARMUP;
    let ch = super::channel(if with_slow { "pace-16b" } else { "pace-16a" });
    let consumers = 1 + usize::from(with_slow);
    let [producer, every, slow] = live_pipelines(&ch, gpu, consumers, total);
    // Consumers first: the producer publishes once they are attached.
    let child = |what: &str, warmup: u64, pipeline: String| {
        let role = "pipeline";
        (
            what.to_string(),
            Child {
                role,
                warmup,
                pipeline,
            },
        )
    };
    let mut children = vec![child("consumer", LIVE_WARMUP, every)];
    if with_slow {
        children.push(child("slow consumer", 0, slow));
    }
    children.push(child("producer", LIVE_WARMUP, producer));
    // Twice the stream's time, and start-up.
    let limit = Duration::from_secs(60 + 2 * total / LIVE_FPS);
    let results = match run_together(children, env, limit) {
        Ok(results) => results,
        Err(error) => return (failed_row(config, [Some(error)]), 0.0),
    };
    let [every, slow @ .., producer] = results.as_slice() else {
        return (failed_row(config, [Some("no results".to_string())]), 0.0);
    };
    let mut row = row_from(config, every, Some(producer));
    // No cudaprocess on the host transport: the frames it did not get.
    if row.missing.is_none() {
        let published = number(producer, "ipcsink.frames").unwrap_or(0.0) as u64;
        row.missing = Some(published.saturating_sub(row.frames));
    }
    let (measured, seconds, producer_fps) = measured_rate(producer, "produced.");
    let mut note = format!(
        "producer {producer_fps:.2} FPS ({measured:.0} frames in {seconds:.2} s after {LIVE_WARMUP} of warm-up); frames=every consumer got {}",
        row.frames
    );
    if let Some(slow) = slow.first() {
        note.push_str(&format!(
            "; slow consumer got {:.0}, missed {:.0}",
            number(slow, "frames").unwrap_or(0.0),
            number(slow, "src.missed").unwrap_or(0.0)
        ));
    }
    row.note = join_notes(&note, &row.note);
    (row, producer_fps)
}

// ------------------------------------------------------------- 16r, 16c

fn batch_rows(
    o: &Options,
    env: &[(String, String)],
    gpu: bool,
    python_every: Option<f64>,
) -> Vec<Row> {
    let import = if gpu {
        "cupy.from_dlpack on its own stream"
    } else {
        "np.from_dlpack, host transport"
    };
    let mut rows = Vec::new();
    if wanted(o, "16r") {
        rows.push(python_consumer_row(
            &format!("16r Python consumer, one frame at a time through DLPack ({import}), producer slots={BATCH_SLOTS}"),
            1,
            o,
            env,
            gpu,
        ));
    }
    if !wanted(o, "16c") {
        return rows;
    }
    let mut row = python_consumer_row(
        &format!(
            "16c Python consumer, batches of {BATCH} kept through DLPack (hold={}, {import}), producer slots={BATCH_SLOTS}",
            BATCH - 1
        ),
        BATCH,
        o,
        env,
        gpu,
    );
    // 16r runs on the same ring as 16c; row 15's on the default one.
    let reference = match rows.first().filter(|r| r.fps > 0.0) {
        Some(every) => Some((every.fps, "16r's (one frame at a time, same producer)")),
        None => python_every.map(|fps| (fps, "row 15's Python consumer (default slots)")),
    };
    if let Some((fps, of)) = reference {
        let against = format!(
            "{} (target >= {TARGET_PERCENT:.0}%)",
            share(row.fps, fps, of)
        );
        row.note = join_notes(&against, &row.note);
    }
    rows.push(row);
    rows
}

/// examples/python/bench_consumer.py taking `batch` frames at a time from
/// the producer of rows 15 with `BATCH_SLOTS` slots, at full rate.
fn python_consumer_row(
    config: &str,
    batch: u32,
    o: &Options,
    env: &[(String, String)],
    gpu: bool,
) -> Row {
    let ch = super::channel(&format!("pace-batch{batch}"));
    let mut args = vec![
        "--channel".to_string(),
        ch.clone(),
        "--warmup".to_string(),
        o.warmup.to_string(),
        "--batch".to_string(),
        batch.to_string(),
    ];
    if !gpu {
        args.push("--numpy".to_string());
    }
    let python = spawn_python("bench_consumer.py", &args, env);
    let total = o.frames + o.warmup;
    let producer = Child {
        role: "pipeline",
        warmup: 0,
        pipeline: python_producer(&ch, gpu, total, &format!("slots={BATCH_SLOTS}")),
    };
    python_pair(config, python, producer, true, env)
}
