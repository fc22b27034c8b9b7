// SPDX-License-Identifier: MPL-2.0

//! Rows 14 of the benchmark: streams per GPU, this pair's and upstream's,
//! found by starting N pairs at once.
//!
//! Rows 14 run only when `--rows` names them. `--rows 14,14m,14u`: streams per GPU, N
//! pairs of a live 4K@30 producer and a consumer that processes every frame
//! (ours: `cudaprocess operation=invert verify=true`; upstream's
//! `cudaipcsink`/`cudaipcsrc io-mode=import`, GStreamer 1.24+: `cudaconvert`
//! to BGRx, as cudaprocess takes only this plugin's memory), all started
//! together; once every consumer has its first frame they run
//! `--streams-seconds` (6), the first 2 not counted. A pair is late below
//! 98% of the frames its producer should have made in that window, at a
//! frame received over a frame period (33 ms) after it was published (ours
//! only), at a corrupt or missing frame, or when its processes fail. N
//! doubles from 1 (`--min-streams`) until a pair is late, then bisects; the row gives the
//! largest N without a late pair (its frames column; FPS: all its streams
//! together), capped by `--max-streams` (64) and the device memory a pair
//! took in the first trials (`nvidia-smi`). Without a GPU both rows run on
//! the host transport (320x240, no GPU work); 14u says why it cannot run.
//!
//! Row 14m runs row 14's producers with one consumer process for all of
//! them, a branch per channel (`src{i} ! check{i} ! sink{i}`), judged
//! branch by branch as row 14 judges pairs.
//!
//! `search` finds N; `trial` runs N pairs once.

mod search;
mod trial;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use gst::prelude::*;

use crate::measure::Row;
use crate::options::{Options, asked_for};
use crate::report::print_row;
use crate::rows::frame_geometry;
use search::streams_row;

/// The frame rate of rows 14's producers.
pub(super) const STREAM_FPS: f64 = 30.0;
/// A pair is late below this share of the frames its producer should make.
pub(super) const STREAM_FRAMES_NEEDED: f64 = 0.98;
/// How long the consumers of a trial may take to get their first frame.
pub(super) const STREAMS_START_LIMIT: Duration = Duration::from_secs(90);
/// Share of the device's memory the pairs may fill (rows 14's cap).
pub(super) const STREAMS_MEMORY_SHARE: f64 = 0.9;

/// The producer's and the consumer's pipeline of a pair on a channel.
pub(super) type PairPipelines = Box<dyn Fn(&str) -> (String, String)>;
/// The file of a channel (upstream's socket).
pub(super) type AddressOf = Box<dyn Fn(&str) -> PathBuf>;
/// Branch `i` of one consumer process that reads every channel (row 14m):
/// its pipeline fragment on a channel, its elements named `src{i}`,
/// `check{i}` and `sink{i}`.
pub(super) type BranchOf = Box<dyn Fn(&str, usize) -> String>;

/// One of rows 14's pairs: the pipelines of its producer and consumer on a
/// channel (or address), and what its consumer does.
pub(super) struct StreamPair {
    pub(super) config: String,
    pub(super) make: PairPipelines,
    pub(super) consumer_does: &'static str,
    /// Whether its consumer reports publish-to-receive latency (ours).
    pub(super) latency_known: bool,
    /// Files to remove after a trial, by channel tag (upstream's sockets).
    pub(super) address_of: Option<AddressOf>,
    /// One consumer process for every pair's channel, with a branch each
    /// (row 14m), instead of a consumer per pair.
    pub(super) one_consumer: Option<BranchOf>,
}

/// How one trial of N pairs went.
#[derive(Default)]
pub(super) struct StreamsTrial {
    pub(super) pairs: u32,
    /// Why it is late (the first reason found); `None`: no late frame.
    pub(super) late: Option<String>,
    /// Over all pairs: the fewest frames a consumer got in the window,
    /// and how many the producer should have made.
    pub(super) fewest_frames: u64,
    pub(super) expected_frames: f64,
    pub(super) latency_p50_us: f64,
    pub(super) latency_p99_us: f64,
    pub(super) latency_max_us: f64,
    pub(super) corrupt: Option<u64>,
    pub(super) missing: Option<u64>,
    pub(super) consumer_cpu: f64,
    pub(super) producer_cpu: f64,
    /// Device memory in use during the window (MiB), if readable.
    pub(super) memory_used_mib: Option<u64>,
}

/// Total and used memory of GPU 0 in MiB (from `nvidia-smi`: the parent
/// holds no CUDA context).
pub(super) fn gpu_memory_mib() -> Option<(u64, u64)> {
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
    // The bare names are always upstream's in these rows (as in rows 13).
    let mut env = env.to_vec();
    env.push(("CUDAIPC_ELEMENT_NAMES".into(), "rs".into()));
    let mut rows: Vec<Row> = Vec::new();
    if asked_for("14") {
        let row = streams_row(&our_pair(gpu), o, &env, gpu, frame_bytes);
        print_row(&row);
        rows.push(row);
    }
    if asked_for("14m") {
        let mut row = streams_row(&one_consumer_process(gpu), o, &env, gpu, frame_bytes);
        if let Some(ours) = rows.iter().find(|r| r.config.starts_with("14 "))
            && ours.frames > 0
            && row.frames > 0
        {
            row.note = format!(
                "{:.2}x the streams of row 14 (a consumer process per pair); {}",
                row.frames as f64 / ours.frames as f64,
                row.note
            );
        }
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
            streams_row(&upstream_pair(config), o, &env, gpu, frame_bytes)
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

/// The caps of rows 14's producers (`memory`: a caps feature in brackets).
fn stream_caps(gpu: bool, memory: &str) -> String {
    let (width, height) = frame_geometry(gpu);
    format!("video/x-raw{memory},format=RGB,width={width},height={height},framerate={STREAM_FPS}/1")
}

/// Row 14's pair: this plugin's, its consumer inverting and verifying
/// every frame (on the host transport: taking it).
fn our_pair(gpu: bool) -> StreamPair {
    let transport = if gpu { "" } else { " (host transport)" };
    let (generate, sink_props, consumer, consumer_does) = if gpu {
        (
            format!(
                "cudatestsrc is-live=true pattern=counter ! {}",
                stream_caps(gpu, "(memory:CUDAMemory)")
            ),
            "",
            "! cudaprocess name=check operation=invert verify=true ",
            "inverts + verifies every frame",
        )
    } else {
        (
            format!("videotestsrc is-live=true ! {}", stream_caps(gpu, "")),
            "transport=host",
            "",
            "takes every frame",
        )
    };
    StreamPair {
        config: format!("14 streams per GPU, this pair{transport}"),
        one_consumer: None,
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
    }
}

/// Row 14u's pair: upstream's `cudaipcsink`/`cudaipcsrc io-mode=import`,
/// its consumer converting every frame (cudaprocess takes only this
/// plugin's memory).
fn upstream_pair(config: &str) -> StreamPair {
    // RGBA: upstream's pair and cudaconvert as rows 13 run them
    // (cudaconvert refused RGB input here).
    let generate = format!(
        "cudatestsrc is-live=true pattern=counter output-memory=gstcuda ! {}",
        stream_caps(true, "(memory:CUDAMemory)").replacen("format=RGB,", "format=RGBA,", 1)
    );
    let address = |tag: &str| std::env::temp_dir().join(format!("cudaipc-{tag}"));
    StreamPair {
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
        consumer_does: "converts every frame to BGRx (cudaconvert); no check, no latency figure",
        latency_known: false,
        address_of: Some(Box::new(address)),
        one_consumer: None,
    }
}

/// Row 14m: row 14's producers, and one consumer process for all of them
/// (a video-analytics application's shape: one CUDA context), a branch per
/// channel doing what row 14's consumer does.
fn one_consumer_process(gpu: bool) -> StreamPair {
    let mut pair = our_pair(gpu);
    let check = if gpu {
        "cudaprocess name=check{i} operation=invert verify=true ! "
    } else {
        ""
    };
    pair.config = pair.config.replacen(
        "14 streams per GPU, this pair",
        "14m streams per GPU, one consumer process for every channel",
        1,
    );
    pair.one_consumer = Some(Box::new(move |ch: &str, i: usize| {
        format!(
            "rscudaipcsrc name=src{i} channel={ch} connect-timeout=60000 frames=every {} ! {}fakesink name=sink{i} sync=false",
            std::env::var("CUDAIPC_BENCH_SRC_PROPS").unwrap_or_default(),
            check.replace("{i}", &i.to_string())
        )
    }));
    pair
}
