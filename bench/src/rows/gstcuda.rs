// SPDX-License-Identifier: MPL-2.0

//! Rows 13 of the benchmark: this pair next to GStreamer's CUDA elements
//! (nvcodec) and upstream's cudaipcsink/cudaipcsrc.
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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gst::prelude::*;

use crate::measure::{
    Child, QUEUED_FRAMES, Row, failed_row, queue_of_frames, result_of, row_from, spawn,
};
use crate::names::{PAIR_ALONE, PAIR_ALONE_QUEUED, PAIR_OURS, PAIR_UPSTREAM};
use crate::options::{GST_CUDA_IDS, Options, left_out};
use crate::rows::channel;
use crate::{HEIGHT, WIDTH};

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
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name),
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
pub fn gst_cuda_rows(o: &Options, env: &[(String, String)]) -> Vec<Row> {
    let upstream_missing = upstream_missing();
    // The bare names are always upstream's in these rows.
    let mut env = env.to_vec();
    env.push(("CUDAIPC_ELEMENT_NAMES".into(), "rs".into()));
    let wanted = |id: &str| !left_out(id);
    let producers: Vec<GstCudaProducer> = if GST_CUDA_IDS.iter().any(|id| wanted(id)) {
        gst_cuda_producers(o)
    } else {
        Vec::new()
    };
    let pairs = [
        (PAIR_ALONE, "alone"),
        (PAIR_ALONE_QUEUED, "queued"),
        (PAIR_OURS, "ours"),
        (PAIR_UPSTREAM, "upstream"),
    ]
    .into_iter()
    .filter(|(_, short)| o.pairs.iter().any(|p| p == short))
    .map(|(pair, _)| pair);
    let pairs: Vec<&str> = pairs.collect();
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
        for &pair in &pairs {
            for (consumer, convert) in &consumers {
                let config = format!("{} {} > {pair} > {consumer}", p.id, p.what);
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
                    let (row, killed) = run_pair(o, p, pair, convert, &tag, &config, &env);
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

/// Why upstream's pair cannot run here, if it cannot.
fn upstream_missing() -> Option<String> {
    ["cudaipcsink", "cudaipcsrc"]
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
        })
}

/// Runs producer `p` into `pair` (on channel `tag`) and a consumer that
/// drops frames or `convert`s them; the row, and whether it was killed.
fn run_pair(
    o: &Options,
    p: &GstCudaProducer,
    pair: &str,
    convert: &str,
    tag: &str,
    config: &str,
    env: &[(String, String)],
) -> (Row, bool) {
    let sink = "fakesink name=sink sync=false enable-last-sample=false";
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
    let measured = timed_run(
        config,
        &producer,
        consumer.as_deref(),
        p.warmup,
        env,
        p.loop_file.as_deref(),
        o.gst_cuda_seconds,
    );
    let _ = std::fs::remove_file(&address);
    measured
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
    let done = Arc::new(AtomicBool::new(false));
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
