// SPDX-License-Identifier: MPL-2.0

//! The benchmark: 4K RGB through the plugin's pipelines, producer and
//! consumer in two real processes, every configuration measured in one run.
//!
//! ```text
//! cargo run --release -p cudaipc-bench -- [--frames N] [--mps off|on|both] [--out DIR]
//! cargo run --release -p cudaipc-bench -- --smoke      # a few frames on the host transport (CI)
//! cargo run --release -p cudaipc-bench -- --rows 5,5t,5v   # only these rows (ids or names: src/names.rs)
//! cargo run --release -p cudaipc-bench -- --consumer-device 1   # every consumer reads from GPU 1
//! cargo run --release -p cudaipc-bench -- --two-gpu     # consumer on GPU 0 and on GPU 1, side by side
//! cargo run --release -p cudaipc-bench -- --gst-cuda    # only rows 13a-13e (GStreamer 1.24+, nvcodec)
//! cargo run --release -p cudaipc-bench -- --rows 9      # a slow latest-frame viewer (9a, 9b)
//! cargo run --release -p cudaipc-bench -- --rows 14,14u --max-streams 64   # streams per GPU
//! cargo run --release -p cudaipc-bench -- --rows 15,15p  # the Python package's rows
//! cargo run --release -p cudaipc-bench -- --rows 16     # consumers at their own pace (16a, 16b, 16r, 16c)
//! ```
//!
//! Each row reports frames per second, GB/s of frame data (frame bytes times
//! frames per second), the publish-to-receive latency the source measured
//! (median, p99, max: the sink stamps CLOCK_MONOTONIC into the slot), the CPU
//! time of each process per second of wall time, and the `cudaprocess
//! verify` counts. Results go to stdout (a table), DIR/bench.csv and
//! DIR/bench.png. With `--mps` the benchmark starts and stops its own MPS
//! daemon with a private pipe directory.
//!
//! The producer always runs on GPU 0. `--consumer-device N` sets
//! `cuda-device-id=N` on every consumer's `cudaipcsrc` (another GPU reads the
//! slots through peer access) and copies row 2's frame to GPU N. `--two-gpu`
//! runs only the copy and the default configuration (2 slots under MPS),
//! once with the consumer on GPU 0 and once on GPU 1; with fewer than two
//! devices it prints SKIPPED and exits 0. Rows name the consumer's GPU.
//!
//! The code, by concern: `options` (the command line), `run` (the rows of
//! a run, MPS off and on), `roles` and `procs` (the child processes and
//! what each runs), `measure` (a row from its processes' `RESULT` lines),
//! `rows/` (one module per family: `two_process` rows 1-6, `wait_modes` row 8,
//! `viewer` rows 9, `gstcuda` rows 13, `streams` rows 14, `python` rows 15,
//! `native` row 15c (the C API), `own_pace` rows 16), `names` (each row id's descriptive name) and `report/`
//! (the table, the CSV and the plot; `--replot`). docs/performance.md says
//! what each row measures and what to expect.
//!
//! Every process is this program run again with `--role`: the parent only
//! starts children and collects their `RESULT` lines, so it never holds a CUDA
//! context itself (which matters for MPS).

mod measure;
mod names;
mod options;
mod procs;
mod report;
mod roles;
mod rows;
mod run;

/// The frame every GPU row moves: 4K RGB.
const WIDTH: u32 = 3840;
const HEIGHT: u32 = 2160;
const FRAME_BYTES: f64 = (WIDTH * HEIGHT * 3) as f64;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let code = match args.get(1).map(String::as_str) {
        Some("--role") => roles::run_role(&args[2..]),
        Some("--replot") => report::replot(&args[2..]),
        _ => match options::Options::parse(&args[1..]) {
            Ok(options) => run::run_benchmark(&options),
            Err(problem) => {
                eprintln!("bench: {problem}\n{}", options::USAGE);
                2
            }
        },
    };
    std::process::exit(code);
}
