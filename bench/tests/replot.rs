// SPDX-License-Identifier: MPL-2.0

//! `bench --replot` redraws the plot and the table of a committed run from
//! its CSV alone.

use std::path::PathBuf;
use std::process::{Command, Output};

/// The bench binary beside this test's folder (`cargo test`: target/<profile>/bench)
/// or in it (a staged build on the GPU host).
fn bench() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let here = exe.parent().unwrap();
    [here.parent().unwrap().join("bench"), here.join("bench")]
        .into_iter()
        .find(|p| p.exists())
        .expect("the bench binary is missing: `cargo build -p cudaipc-bench`")
}

/// A file of the repository: from its root (the GPU host), from this
/// crate's folder (`cargo test`), or under `$CUDAIPC_REPO_DIR`.
fn repo_file(rel: &str) -> PathBuf {
    let cwd = std::env::current_dir().unwrap();
    [
        Some(cwd.clone()),
        Some(cwd.join("..")),
        std::env::var_os("CUDAIPC_REPO_DIR").map(Into::into),
    ]
    .into_iter()
    .flatten()
    .map(|root| root.join(rel))
    .find(|p| p.exists())
    .unwrap_or_else(|| panic!("{rel} not found (run from the repository)"))
}

/// Runs the bench with `args`, GLib's criticals fatal; none may be logged.
fn run_bench(args: &[&str]) -> Output {
    let out = Command::new(bench())
        .args(args)
        .env("G_DEBUG", "fatal-criticals")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("-CRITICAL **") && !stderr.contains("-WARNING **"),
        "GLib or GStreamer complained:\n{stderr}"
    );
    out
}

/// The plot of a run of rows 13, titled with the machine given; its table
/// names each row (13b: nvcodec-cudaconvert) and compares the pairs.
#[test]
fn replot_draws_a_committed_run_and_names_its_rows() {
    let csv = repo_file("docs/perf/bench-h100-gst126-rows13-run9.csv");
    let png = std::env::temp_dir().join(format!("cudaipc-replot-{}.png", std::process::id()));
    let (csv, png_arg) = (csv.to_str().unwrap(), png.to_str().unwrap());
    let out = run_bench(&[
        "--replot",
        csv,
        png_arg,
        "--machine",
        "H100, GStreamer 1.26.2",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("13b MPS on, consumer drops: this pair 19981 FPS = 12.47x upstream import"),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("| 13b cudaconvert output > rscudaipc pair > drops | nvcodec-cudaconvert |"),
        "{stdout}"
    );
    if stderr.contains("no TrueType font found") {
        eprintln!("SKIPPED (the plot): no font to draw with");
        return;
    }
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let image = std::fs::read(&png).expect("the plot is written");
    assert_eq!(&image[1..4], b"PNG");
    let _ = std::fs::remove_file(&png);
}

/// A CSV that is not there is an error that names it, not a panic.
#[test]
fn replot_of_a_missing_csv_says_so() {
    let out = run_bench(&["--replot", "/nonexistent/bench.csv", "/tmp/unused.png"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot read /nonexistent/bench.csv"),
        "{stderr}"
    );
}
