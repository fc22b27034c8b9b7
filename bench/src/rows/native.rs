// SPDX-License-Identifier: MPL-2.0

//! Row 15c of the benchmark: the C API's consumer (docs/c-api.md).
//!
//! Measured only when `--rows` names it: a C++ consumer taking every frame
//! through cudaipc.hpp on a CUDA stream of its own (examples/cpp/
//! bench_consumer.cu, built by scripts/gpu-host/c-api.sh; its path in
//! `CUDAIPC_BENCH_CPP_CONSUMER`) next to `rscudaipcsrc ! fakesink` on the
//! same producer, the ratio in the row's note. Without the program the row
//! says so and measures nothing.

use std::process::{Command, Stdio};

use crate::measure::{Child, Row, two_process};
use crate::options::ROWS;
use crate::rows::channel;
use crate::rows::python::{note_share_of, python_pair, python_producer};
use crate::{HEIGHT, WIDTH};

const ROW: &str = "15c C++ consumer: every frame through cudaipc.hpp (stream_wait, release_after on its own stream)";
const REFERENCE: &str = "15c reference: rscudaipcsrc ! fakesink";

/// Whether row 15c was asked for.
pub fn native_wanted() -> bool {
    ROWS.get()
        .is_some_and(|rows| rows.iter().any(|r| r == "15c"))
}

/// Row 15c and its reference, on the cuda transport at 4K RGB.
pub fn native_rows(o: &crate::options::Options, env: &[(String, String)]) -> Vec<Row> {
    let Some(program) = std::env::var_os("CUDAIPC_BENCH_CPP_CONSUMER") else {
        return vec![not_measured(
            "CUDAIPC_BENCH_CPP_CONSUMER names no program (scripts/gpu-host/c-api.sh --bench builds it)",
        )];
    };
    let total = o.frames + o.warmup;
    let producer = |ch: &str| python_producer(ch, true, total, "");
    let ch = channel("cpp-reference");
    let reference = two_process(
        REFERENCE,
        &producer(&ch),
        &format!(
            "rscudaipcsrc name=src channel={ch} connect-timeout=60000 ! fakesink name=sink sync=false"
        ),
        o.warmup,
        env,
        None,
    );
    let ch = channel("cpp-consumer");
    let consumer = Command::new(&program)
        .args(["--channel", &ch, "--warmup", &o.warmup.to_string()])
        .envs(env.iter().cloned())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut row = match consumer {
        Ok(consumer) => {
            let pipeline = Child {
                role: "pipeline",
                warmup: 0,
                pipeline: producer(&ch),
            };
            python_pair(ROW, consumer, pipeline, true, env)
        }
        Err(e) => not_measured(&format!("cannot start {}: {e}", program.to_string_lossy())),
    };
    note_share_of(&mut row, &reference, "row 15c reference");
    let mut rows = vec![reference, row];
    for row in &mut rows {
        row.frame_bytes = f64::from(WIDTH * HEIGHT * 3);
    }
    rows
}

/// Row 15c where there is no GPU: its consumer reads device memory.
pub fn without_gpu() -> Row {
    not_measured("the C++ consumer reads frames on the GPU (cuda transport)")
}

fn not_measured(why: &str) -> Row {
    Row {
        config: ROW.to_string(),
        note: format!("not measured: {why}"),
        ..Default::default()
    }
}
