// SPDX-License-Identifier: MPL-2.0

//! One run of the benchmark: the rows asked for, MPS off and on (with a GPU)
//! or on the host transport (without one, or with `--smoke`), then the
//! table, the CSV and the plot.

use crate::measure::{Mps, Row};
use crate::options::{Options, gst_cuda_wanted};
use crate::report::{self, machine_description, print_row, print_table, write_csv};
use crate::rows::{
    bridge, gstcuda, native, own_pace, python, streams, two_process, viewer, wait_modes,
};

pub fn run_benchmark(o: &Options) -> i32 {
    gst::init().unwrap();
    let devices = cudaipc_transport::cuda::device_count();
    if o.two_gpu && devices < 2 {
        eprintln!("SKIPPED: needs two CUDA devices ({devices} visible): no --two-gpu rows");
        return 0;
    }
    let gpu = !o.smoke && devices > 0;
    std::fs::create_dir_all(&o.out).expect("cannot create the output folder");
    let rows = if gpu { gpu_run(o) } else { host_run(o) };
    println!();
    print_table(&rows, gpu);
    let machine = machine_description(gpu);
    write_csv(&o.out.join("bench.csv"), &rows, &machine);
    match report::plot(&o.out.join("bench.png"), &rows, Some(&machine)) {
        Ok(()) => println!("wrote {}", o.out.join("bench.png").display()),
        Err(e) => println!("no plot: {e}"),
    }
    println!("wrote {}", o.out.join("bench.csv").display());
    let failures = rows
        .iter()
        .filter(|r| !r.error.is_empty() || r.corrupt.unwrap_or(0) > 0 || r.missing.unwrap_or(0) > 0)
        .count();
    if failures > 0 {
        eprintln!("{failures} configuration(s) failed or lost frames");
        1
    } else {
        0
    }
}

/// Adds `measured` to `rows` (those `--rows` left out dropped) with the
/// MPS setting they ran under, printing each as it comes when `print`.
fn keep(rows: &mut Vec<Row>, measured: Vec<Row>, mps: bool, print: bool) {
    for mut row in measured.into_iter().filter(|r| !r.left_out) {
        row.mps = mps;
        if print {
            print_row(&row);
        }
        rows.push(row);
    }
}

/// Every row on the GPU, once per MPS setting asked for.
fn gpu_run(o: &Options) -> Vec<Row> {
    let mut rows = Vec::new();
    for &mps in &o.mps {
        let daemon = if mps {
            match Mps::start() {
                Ok(d) => Some(d),
                Err(e) => {
                    eprintln!("MPS not available, skipping the MPS rows: {e}");
                    continue;
                }
            }
        } else {
            None
        };
        let env = daemon.as_ref().map(|d| d.env.clone()).unwrap_or_default();
        gpu_rows_under(o, &env, mps, &mut rows);
    }
    rows
}

/// The GPU rows under one MPS setting (`env` points at its daemon).
fn gpu_rows_under(o: &Options, env: &[(String, String)], mps: bool, rows: &mut Vec<Row>) {
    // --two-gpu: the same rows with the consumer on GPU 0, then on 1.
    let consumers = if o.two_gpu {
        vec![Some(0), Some(1)]
    } else {
        vec![o.consumer_device]
    };
    for consumer_device in consumers {
        let o = Options {
            consumer_device,
            ..o.clone()
        };
        keep(rows, two_process::rows(&o, env), mps, true);
    }
    if o.two_gpu {
        return;
    }
    if gst_cuda_wanted() {
        keep(rows, gstcuda::gst_cuda_rows(o, env), mps, true);
    }
    if python::python_wanted() {
        keep(rows, python::python_rows(o, env, true), mps, true);
    }
    if native::native_wanted() {
        keep(rows, native::native_rows(o, env), mps, true);
    }
    // Rows 9 and 14 print their own progress.
    keep(rows, viewer::viewer_rows(o, env, true), mps, false);
    keep(rows, streams::streams_rows(o, env, true), mps, false);
    let python_every = python_consumer_fps(rows, mps);
    keep(
        rows,
        own_pace::pace_rows(o, env, true, python_every),
        mps,
        true,
    );
    keep(rows, wait_modes::paced_rows(o, true, env), mps, true);
}

/// The rows on the host transport (320x240, no GPU work).
fn host_run(o: &Options) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut measured = two_process::host_rows(o);
    measured.extend(wait_modes::paced_rows(o, false, &[]));
    for row in &mut measured {
        row.frame_bytes = (320 * 240 * 3) as f64;
    }
    keep(&mut rows, measured, false, true);
    if python::python_wanted() {
        keep(&mut rows, python::python_rows(o, &[], false), false, true);
    }
    if native::native_wanted() {
        keep(&mut rows, vec![native::without_gpu()], false, true);
    }
    // Without a CUDA device their elements are missing: rows of notes.
    if gst_cuda_wanted() {
        keep(&mut rows, gstcuda::gst_cuda_rows(o, &[]), false, true);
    }
    keep(&mut rows, viewer::viewer_rows(o, &[], false), false, false);
    keep(
        &mut rows,
        streams::streams_rows(o, &[], false),
        false,
        false,
    );
    let python_every = python_consumer_fps(&rows, false);
    keep(
        &mut rows,
        own_pace::pace_rows(o, &[], false, python_every),
        false,
        true,
    );
    keep(&mut rows, bridge::bridge_rows(o), false, true);
    rows
}

/// The rate of row 15's Python consumer among `rows` (MPS `mps`), if it ran.
fn python_consumer_fps(rows: &[Row], mps: bool) -> Option<f64> {
    rows.iter()
        .find(|r| r.mps == mps && r.config.starts_with("15 Python consumer") && r.fps > 0.0)
        .map(|r| r.fps)
}
