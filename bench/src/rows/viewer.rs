// SPDX-License-Identifier: MPL-2.0

//! Rows 9 of the benchmark: four verifying consumers, and a slow viewer of
//! the latest frame beside them.
//!
//! Rows 9 run only when `--rows` names them. `--rows 9`: the producer's own rate (frames into its sink from the
//! warm-up to the last) with four consumers that invert and verify every
//! frame (9a), and with a fifth, `frames=latest ! identity sleep-time=20000`,
//! a viewer that takes 20 ms a frame (9b, its note: its cost against 9a);
//! the sink waits for every consumer (`wait-for-connection`), corrupt and
//! missing are summed over the four.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::measure::{Child, Row, measured_rate, number, paths_taken, row_from};
use crate::options::{Options, asked_for};
use crate::procs::run_together;
use crate::report::print_row;
use crate::rows::{channel, frame_geometry};

/// Rows 9: the producer with four consumers that invert and verify every
/// frame (9a), and the same with a fifth consumer of the latest frame that
/// takes 20 ms a frame (9b); the producer's own rate makes each row. Every
/// consumer is attached before the first frame (`wait-for-connection`).
pub fn viewer_rows(o: &Options, env: &[(String, String)], gpu: bool) -> Vec<Row> {
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
pub const VERIFYING_CONSUMERS: usize = 4;

fn viewer_row(
    config: &str,
    with_viewer: bool,
    o: &Options,
    env: &[(String, String)],
    gpu: bool,
) -> Row {
    let (width, height) = frame_geometry(gpu);
    let total = o.frames + o.warmup;
    let children = viewer_children(with_viewer, o, gpu);
    // A consumer that never attaches leaves the producer waiting: bounded
    // by a generous time for the frames (200 FPS at least) and start-up.
    let limit = Duration::from_secs(60 + total / 200);
    let results = match run_together(children, env, limit) {
        Ok(results) => results,
        Err(error) => {
            return Row {
                config: config.into(),
                error,
                ..Default::default()
            };
        }
    };
    let fields: Vec<&BTreeMap<String, String>> = results.iter().collect();
    let (verifiers, rest) = fields.split_at(VERIFYING_CONSUMERS);
    let producer = rest[rest.len() - 1];
    let viewer = with_viewer.then(|| rest[0]);
    let mut row = combined_row(config, o, verifiers, producer, viewer);
    row.frame_bytes = (width * height * 3) as f64;
    row
}

/// The processes of row 9a (9b: `with_viewer`): the verifying consumers,
/// the viewer, then the producer, which waits for every one of them.
fn viewer_children(with_viewer: bool, o: &Options, gpu: bool) -> Vec<(String, Child)> {
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
    let child = |what: String, warmup: u64, pipeline: &String| {
        let pipeline = pipeline.clone();
        let role = "pipeline";
        (
            what,
            Child {
                role,
                warmup,
                pipeline,
            },
        )
    };
    let mut children: Vec<(String, Child)> = (1..=VERIFYING_CONSUMERS)
        .map(|i| child(format!("consumer {i}"), o.warmup, &verifying))
        .collect();
    if with_viewer {
        children.push(child("viewer".into(), 0, &viewer));
    }
    children.push(child("producer".into(), o.warmup, &producer));
    children
}

/// The row of rows 9: the producer's own rate, the verifying consumers'
/// worst latency, their corrupt and missing frames summed.
fn combined_row(
    config: &str,
    o: &Options,
    verifiers: &[&BTreeMap<String, String>],
    producer: &BTreeMap<String, String>,
    viewer: Option<&BTreeMap<String, String>>,
) -> Row {
    let (measured, seconds, producer_fps) = measured_rate(producer, "produced.");
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
        fps: producer_fps,
        consumer_cpu: verified.iter().map(|r| r.consumer_cpu).sum::<f64>() / verified.len() as f64,
        producer_cpu: verified[0].producer_cpu,
        latency_p50_us: most(|r| r.latency_p50_us),
        latency_p99_us: most(|r| r.latency_p99_us),
        latency_max_us: most(|r| r.latency_max_us),
        corrupt: sum(|r| r.corrupt),
        missing: sum(|r| r.missing),
        frames: measured as u64,
        note,
        ..Default::default()
    }
}
