// SPDX-License-Identifier: MPL-2.0

//! The command line, and which rows it asks for (`--rows`).

use std::path::PathBuf;

use crate::names;
use crate::names::STREAMS_SETTLE_S;

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
    /// Rows 14 (`--min-streams`): the pairs of the first trial (1); the
    /// search doubles from there while no pair is late.
    pub min_streams: u32,
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
    /// The options of `args`, or what is wrong with them (the caller prints
    /// it with the usage).
    pub fn parse(args: &[String]) -> Result<Self, String> {
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
            min_streams: 1,
            streams_seconds: 6.0,
            live_frames: 600,
        };
        let mut rows: Option<Vec<String>> = None;
        let mut gst_cuda = false;
        let mut i = 0;
        while i < args.len() {
            let value = args.get(i + 1).cloned().unwrap_or_default();
            match args[i].as_str() {
                "--frames" => o.frames = number("--frames", &value)?,
                "--warmup" => o.warmup = number("--warmup", &value)?,
                "--out" => o.out = PathBuf::from(value),
                "--rows" => rows = Some(row_ids(&value)?),
                "--gst-cuda-seconds" => o.gst_cuda_seconds = number("--gst-cuda-seconds", &value)?,
                "--pairs" => o.pairs = value.split(',').map(str::to_string).collect(),
                "--max-streams" => o.max_streams = number("--max-streams", &value)?,
                "--min-streams" => o.min_streams = number("--min-streams", &value)?,
                "--streams-seconds" => o.streams_seconds = number("--streams-seconds", &value)?,
                "--live-frames" => o.live_frames = number("--live-frames", &value)?,
                "--paced-seconds" => o.paced_seconds = number("--paced-seconds", &value)?,
                "--consumer-device" => {
                    o.consumer_device = Some(number("--consumer-device", &value)?)
                }
                "--slots" => {
                    o.slots = value
                        .split(',')
                        .map(|s| number("--slots", s))
                        .collect::<Result<_, _>>()?
                }
                "--mps" => {
                    o.mps = match value.as_str() {
                        "off" => vec![false],
                        "on" => vec![true],
                        "both" => vec![false, true],
                        _ => return Err(format!("--mps {value}: off, on or both")),
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
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => return Err(format!("unknown option {other}")),
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
            return Err(format!(
                "--streams-seconds must be more than {STREAMS_SETTLE_S}"
            ));
        }
        if o.smoke {
            o.frames = 60;
            o.warmup = 10;
            o.slots = vec![1, 2];
            o.paced_seconds = 1;
            o.gst_cuda_seconds = 0.5;
            o.live_frames = 30;
        }
        Ok(o)
    }
}

/// A number option's value, or an error naming the option.
fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{flag} {value:?}: not a number"))
}

/// Ids that name a family of rows: `--rows 9` runs 9a and 9b.
const ROW_FAMILIES: [&str; 2] = ["9", "16"];

/// `--rows`: each an id or a name of `names::ROW_NAMES`, or a family.
fn row_ids(value: &str) -> Result<Vec<String>, String> {
    value
        .split(',')
        .map(|row| {
            let id = names::as_id(row);
            let known = ROW_FAMILIES.contains(&id.as_str())
                || names::ROW_NAMES.iter().any(|(known, _)| *known == id);
            match known {
                true => Ok(id),
                false => Err(format!(
                    "--rows: no row {row:?} (the ids and names: docs/performance.md)"
                )),
            }
        })
        .collect()
}

pub const USAGE: &str = "usage: bench [--frames N] [--warmup N] [--mps off|on|both] [--slots 1,2,4] [--paced-seconds N] [--consumer-device N] [--two-gpu] [--rows 5,5t,5v|NAME,...] [--gst-cuda] [--gst-cuda-seconds S] [--pairs alone,queued,ours,upstream] [--max-streams N] [--min-streams N] [--streams-seconds S] [--live-frames N] [--out DIR] [--smoke]\n\
                         --rows: row ids or names (bench/src/names.rs, docs/performance.md)\n\
                         --gst-cuda: only rows 13a-13e, this pair next to GStreamer's CUDA elements and upstream's cudaipcsink/cudaipcsrc (GStreamer 1.24+ with nvcodec); with --rows, those rows too\n\
                         --pairs: in rows 13, only the producer alone, alone with a queue of 32 frames before the consumer's half (queued, not run by default), our pair or upstream's\n\
                         --rows 9: a slow latest-frame viewer beside four verifying consumers (9a without, 9b with)\n\
                         --rows 14,14u: streams per GPU, this pair and upstream's; --max-streams caps the pairs (64), --min-streams starts the search there (1), --streams-seconds the time of a trial (6, the first 2 not counted)\n\
                         --rows 16: consumers at their own pace: 16a a live 60 FPS producer and a frames=every consumer, 16b the same and a consumer taking 20 ms a frame, 16r/16c the Python consumer one frame at a time and in batches of 8 (hold=7); --live-frames: frames of 16a/16b after their warm-up of 60 (600)";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &str) -> Result<Options, String> {
        let args: Vec<String> = args.split_whitespace().map(String::from).collect();
        Options::parse(&args)
    }

    #[test]
    fn bad_options_are_named_not_panicked_on() {
        for (args, named) in [
            ("--frames many", "--frames \"many\""),
            ("--slots 2,x", "--slots \"x\""),
            ("--mps sometimes", "--mps sometimes"),
            ("--rows 5,nonesuch", "no row \"nonesuch\""),
            ("--fast", "unknown option --fast"),
        ] {
            match parse(args) {
                Err(problem) => assert!(problem.contains(named), "{args}: {problem}"),
                Ok(_) => panic!("{args} was accepted"),
            }
        }
    }

    #[test]
    fn rows_are_taken_by_id_name_or_family() {
        let o = parse("--rows 5,9,16,1q --slots 2,64 --mps both").unwrap();
        assert_eq!(o.slots, vec![2, 64]);
        assert_eq!(o.mps, vec![false, true]);
        let (id, name) = names::ROW_NAMES[0];
        assert_eq!(row_ids(name).unwrap(), vec![id.to_string()]);
    }
}
