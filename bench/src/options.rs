// SPDX-License-Identifier: MPL-2.0

//! The command line, and which rows it asks for (`--rows`).

use std::path::PathBuf;

use crate::names;
use crate::rows::streams::STREAMS_SETTLE_S;

#[derive(Debug, Clone)]
pub struct Options {
    pub frames: u64,
    pub warmup: u64,
    pub mps: Vec<bool>,
    pub smoke: bool,
    pub out: PathBuf,
    pub slots: Vec<u32>,
    pub paced_seconds: u64,
    /// `cuda-device-id` of the consumers' `cudaipcsrc`; `None`: the
    /// producer's GPU (0).
    pub consumer_device: Option<i32>,
    pub two_gpu: bool,
    /// Rows 13 (`--gst-cuda`): how long each producer runs.
    pub gst_cuda_seconds: f64,
    /// Rows 13 (`--pairs`): which of alone, ours, upstream to run.
    pub pairs: Vec<String>,
    /// Rows 14 (`--max-streams`): the most pairs a trial starts.
    pub max_streams: u32,
    /// Rows 14 (`--streams-seconds`): how long each trial runs once every
    /// consumer has its first frame; the first `STREAMS_SETTLE_S` are not
    /// counted.
    pub streams_seconds: f64,
    /// Rows 16a/16b (`--live-frames`): frames of the live producer after
    /// its warm-up.
    pub live_frames: u64,
}

/// `--rows`: the row ids (the first word of a configuration: 5, 5t, ...)
/// to measure; empty: all.
pub static ROWS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Rows 13: measured only when `--rows` or `--gst-cuda` names them.
pub const GST_CUDA_IDS: [&str; 5] = ["13a", "13b", "13c", "13d", "13e"];

/// Whether rows 13 were asked for.
pub fn gst_cuda_wanted() -> bool {
    ROWS.get()
        .is_some_and(|rows| rows.iter().any(|r| GST_CUDA_IDS.contains(&r.as_str())))
}

/// Whether `--rows` names `id`: rows 9 and 14 run only then.
pub fn asked_for(id: &str) -> bool {
    ROWS.get().is_some_and(|rows| rows.iter().any(|r| r == id))
}

/// Whether `--rows` leaves out the row of `config`.
pub fn left_out(config: &str) -> bool {
    let id = config.split_whitespace().next().unwrap_or_default();
    ROWS.get()
        .is_some_and(|rows| !rows.is_empty() && !rows.iter().any(|r| r == id))
}

impl Options {
    pub fn parse(args: &[String]) -> Self {
        let mut o = Options {
            frames: 20_000,
            warmup: 2_000,
            mps: vec![false],
            smoke: false,
            out: PathBuf::from("bench-results"),
            slots: vec![1, 2, 4, 8, 16],
            paced_seconds: 5,
            consumer_device: None,
            two_gpu: false,
            gst_cuda_seconds: 2.5,
            pairs: ["alone", "ours", "upstream"].map(String::from).to_vec(),
            max_streams: 64,
            streams_seconds: 6.0,
            live_frames: 600,
        };
        let mut rows: Option<Vec<String>> = None;
        let mut gst_cuda = false;
        let mut i = 0;
        while i < args.len() {
            let value = args.get(i + 1).cloned().unwrap_or_default();
            match args[i].as_str() {
                "--frames" => o.frames = value.parse().expect("--frames N"),
                "--warmup" => o.warmup = value.parse().expect("--warmup N"),
                "--out" => o.out = PathBuf::from(value),
                "--rows" => rows = Some(value.split(',').map(names::as_id).collect()),
                "--gst-cuda-seconds" => {
                    o.gst_cuda_seconds = value.parse().expect("--gst-cuda-seconds S")
                }
                "--pairs" => o.pairs = value.split(',').map(str::to_string).collect(),
                "--max-streams" => o.max_streams = value.parse().expect("--max-streams N"),
                "--streams-seconds" => {
                    o.streams_seconds = value.parse().expect("--streams-seconds S")
                }
                "--live-frames" => o.live_frames = value.parse().expect("--live-frames N"),
                "--paced-seconds" => o.paced_seconds = value.parse().expect("--paced-seconds N"),
                "--consumer-device" => {
                    o.consumer_device = Some(value.parse().expect("--consumer-device N"))
                }
                "--slots" => {
                    o.slots = value
                        .split(',')
                        .map(|s| s.parse().expect("--slots 1,2,4"))
                        .collect()
                }
                "--mps" => {
                    o.mps = match value.as_str() {
                        "off" => vec![false],
                        "on" => vec![true],
                        "both" => vec![false, true],
                        _ => panic!("--mps off|on|both"),
                    }
                }
                "--smoke" | "--two-gpu" | "--gst-cuda" => {
                    o.smoke |= args[i] == "--smoke";
                    o.two_gpu |= args[i] == "--two-gpu";
                    gst_cuda |= args[i] == "--gst-cuda";
                    i += 1;
                    continue;
                }
                "--help" | "-h" => {
                    println!(
                        "usage: bench [--frames N] [--warmup N] [--mps off|on|both] [--slots 1,2,4] [--paced-seconds N] [--consumer-device N] [--two-gpu] [--rows 5,5t,5v|NAME,...] [--gst-cuda] [--gst-cuda-seconds S] [--pairs alone,queued,ours,upstream] [--max-streams N] [--streams-seconds S] [--live-frames N] [--out DIR] [--smoke]\n\
                         --rows: row ids or names (bench/src/names.rs, docs/performance.md)\n\
                         --gst-cuda: only rows 13a-13e, this pair next to GStreamer's CUDA elements and upstream's cudaipcsink/cudaipcsrc (GStreamer 1.24+ with nvcodec); with --rows, those rows too\n\
                         --pairs: in rows 13, only the producer alone, alone with a queue of 32 frames before the consumer's half (queued, not run by default), our pair or upstream's\n\
                         --rows 9: a slow latest-frame viewer beside four verifying consumers (9a without, 9b with)\n\
                         --rows 14,14u: streams per GPU, this pair and upstream's; --max-streams caps the pairs (64), --streams-seconds the time of a trial (6, the first 2 not counted)\n\
                         --rows 16: consumers at their own pace: 16a a live 60 FPS producer and a frames=every consumer, 16b the same and a consumer taking 20 ms a frame, 16r/16c the Python consumer one frame at a time and in batches of 8 (hold=7); --live-frames: frames of 16a/16b after their warm-up of 60 (600)"
                    );
                    std::process::exit(0);
                }
                other => panic!("unknown option {other}"),
            }
            i += 2;
        }
        // --gst-cuda: rows 13 (alone, or added to --rows).
        if gst_cuda {
            rows.get_or_insert_with(Vec::new)
                .extend(GST_CUDA_IDS.iter().map(|id| id.to_string()));
        }
        if let Some(rows) = rows {
            let _ = ROWS.set(rows);
        }
        if o.streams_seconds <= STREAMS_SETTLE_S {
            panic!("--streams-seconds must be more than {STREAMS_SETTLE_S}");
        }
        if o.smoke {
            o.frames = 60;
            o.warmup = 10;
            o.slots = vec![1, 2];
            o.paced_seconds = 1;
            o.gst_cuda_seconds = 0.5;
            o.live_frames = 30;
        }
        o
    }
}
