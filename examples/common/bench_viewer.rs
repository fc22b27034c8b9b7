// SPDX-License-Identifier: MPL-2.0

//! Rows 9 of the benchmark (examples/bench.rs): four verifying consumers, and
//! a slow viewer of the latest frame beside them.

use super::*;

/// Rows 9: the producer with four consumers that invert and verify every
/// frame (9a), and the same with a fifth consumer of the latest frame that
/// takes 20 ms a frame (9b); the producer's own rate makes each row. Every
/// consumer is attached before the first frame (`wait-for-connection`).
pub(crate) fn viewer_rows(o: &Options, env: &[(String, String)], gpu: bool) -> Vec<Row> {
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
pub(crate) const VERIFYING_CONSUMERS: usize = 4;

pub(crate) fn viewer_row(
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
        frame_bytes: (width * height * 3) as f64,
        note,
        ..Default::default()
    }
}
