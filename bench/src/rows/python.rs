// SPDX-License-Identifier: MPL-2.0

//! Rows 15 of the benchmark: the Python package's consumer and producer
//! (examples/python).
//!
//! Rows 15 and 15p (only when `--rows` names them) measure the Python
//! package: a consumer taking every frame through DLPack (CuPy on its own
//! stream) next to `rscudaipcsrc ! fakesink` on the same producer, the ratio
//! in the row's note, and a Python producer of CuPy arrays into
//! `rscudaipcsrc ! fakesink` (examples/python/bench_consumer.py and
//! bench_producer.py, run by `CUDAIPC_BENCH_PYTHON`, default python3, which
//! must import cudaipc and CuPy). With `--smoke` they run on the host
//! transport with NumPy.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::measure::{Child, Row, pair_row, result_of, spawn, two_process};
use crate::options::{Options, ROWS, left_out};
use crate::rows::{channel, frame_geometry};
use crate::{HEIGHT, WIDTH};

/// Rows 15: measured only when `--rows` names them.
const PYTHON_IDS: [&str; 2] = ["15", "15p"];

/// Whether rows 15 were asked for.
pub fn python_wanted() -> bool {
    ROWS.get()
        .is_some_and(|rows| rows.iter().any(|r| PYTHON_IDS.contains(&r.as_str())))
}

/// Starts `examples/python/<program>` with `CUDAIPC_BENCH_PYTHON` (default
/// python3), which must import the cudaipc package (and CuPy with a GPU).
pub fn spawn_python(
    program: &str,
    args: &[String],
    env: &[(String, String)],
) -> std::process::Child {
    let python = std::env::var("CUDAIPC_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    // The repository the benchmark was built in, or (a build carried to
    // another machine) the one it runs in.
    let built_in = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python");
    let folder = match built_in.exists() {
        true => built_in,
        false => PathBuf::from("examples/python"),
    };
    let script = folder.join(program);
    Command::new(python)
        .arg(script)
        .args(args)
        .envs(env.iter().cloned())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start the Python interpreter (CUDAIPC_BENCH_PYTHON)")
}

/// A row of a pair with a Python process (started first, when it is the
/// consumer) and one of this program's pipelines.
pub fn python_pair(
    config: &str,
    python: std::process::Child,
    pipeline: Child,
    python_is_consumer: bool,
    env: &[(String, String)],
) -> Row {
    // The consumer is there before the first frame, as in two_process.
    std::thread::sleep(Duration::from_millis(300));
    let other = spawn(&pipeline, env);
    let (python, other) = (result_of(python, "python"), result_of(other, "pipeline"));
    let (consumer, producer) = match python_is_consumer {
        true => (python, other),
        false => (other, python),
    };
    pair_row(config, producer, consumer)
}

/// Adds to `row`'s note its rate as a share of `reference`'s (named
/// `reference_name`, on the same producer), when both were measured.
pub fn note_share_of(row: &mut Row, reference: &Row, reference_name: &str) {
    if reference.fps > 0.0 && row.fps > 0.0 {
        let ratio = format!(
            "{:.1}% of the reference's rate ({reference_name}, same producer)",
            100.0 * row.fps / reference.fps
        );
        row.note = [row.note.clone(), ratio]
            .into_iter()
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
    }
}

/// The producer of rows 15, 16r and 16c: `total` frames as fast as its
/// consumer takes them (4K RGB on a GPU, 320x240 on the host transport),
/// published once one consumer is attached; `sink_props` adds properties
/// to the sink.
pub fn python_producer(ch: &str, gpu: bool, total: u64, sink_props: &str) -> String {
    let (width, height) = frame_geometry(gpu);
    let (generate, transport) = match gpu {
        true => (
            format!(
                "cudatestsrc num-buffers={total} pattern=counter ! video/x-raw(memory:CUDAMemory),format=RGB,width={width},height={height},framerate=0/1"
            ),
            "",
        ),
        false => (
            format!(
                "videotestsrc num-buffers=1 ! video/x-raw,format=RGB,width={width},height={height},framerate=0/1 ! imagefreeze num-buffers={total}"
            ),
            "transport=host ",
        ),
    };
    format!(
        "{generate} ! rscudaipcsink name=ipcsink channel={ch} {transport}sync=false wait-for-connection=1 {sink_props}"
    )
}

/// Rows 15: a Python consumer taking every frame through DLPack (CuPy on a
/// stream of its own; NumPy on the host transport) next to `rscudaipcsrc !
/// fakesink` on the same producer, and a Python producer (CuPy arrays
/// filled on the GPU, published with `stream=`) into `rscudaipcsrc !
/// fakesink`. 4K RGB with a GPU, 320x240 on the host transport.
pub fn python_rows(o: &Options, env: &[(String, String)], gpu: bool) -> Vec<Row> {
    let total = o.frames + o.warmup;
    let (width, height) = if gpu { (WIDTH, HEIGHT) } else { (320, 240) };
    let producer = |ch: &str| python_producer(ch, gpu, total, "");
    let fakesink = |ch: &str| {
        format!(
            "rscudaipcsrc name=src channel={ch} connect-timeout=60000 ! fakesink name=sink sync=false"
        )
    };
    let host_only: &[&str] = if gpu { &[] } else { &["--numpy"] };
    let mut rows = Vec::new();
    let reference = "15 reference: rscudaipcsrc ! fakesink";
    let python_consumer = if gpu {
        "15 Python consumer: every frame through DLPack (cupy.from_dlpack on its own stream), released"
    } else {
        "15 Python consumer: every frame through DLPack (np.from_dlpack), released"
    };
    let ch = channel("py-reference");
    rows.push(two_process(
        reference,
        &producer(&ch),
        &fakesink(&ch),
        o.warmup,
        env,
        None,
    ));
    if left_out(python_consumer) {
        rows.push(Row::left_out(python_consumer));
    } else {
        let ch = channel("py-consumer");
        let mut args = vec![
            "--channel".to_string(),
            ch.clone(),
            "--warmup".to_string(),
            o.warmup.to_string(),
        ];
        args.extend(host_only.iter().map(|a| a.to_string()));
        let python = spawn_python("bench_consumer.py", &args, env);
        let pipeline = Child {
            role: "pipeline",
            warmup: 0,
            pipeline: producer(&ch),
        };
        let mut row = python_pair(python_consumer, python, pipeline, true, env);
        if let Some(reference) = rows.first() {
            note_share_of(&mut row, reference, "row 15 reference");
        }
        rows.push(row);
    }
    let python_producer = if gpu {
        "15p Python producer (CuPy arrays filled on the GPU, publish(stream=)) > rscudaipcsrc ! fakesink"
    } else {
        "15p Python producer (NumPy arrays, host transport) > rscudaipcsrc ! fakesink"
    };
    if left_out(python_producer) {
        rows.push(Row::left_out(python_producer));
    } else {
        let ch = channel("py-producer");
        let pipeline = Child {
            role: "pipeline",
            warmup: o.warmup,
            pipeline: fakesink(&ch),
        };
        let consumer = spawn(&pipeline, env);
        std::thread::sleep(Duration::from_millis(300));
        let mut args = vec![
            "--channel".to_string(),
            ch,
            "--frames".to_string(),
            total.to_string(),
            "--width".to_string(),
            width.to_string(),
            "--height".to_string(),
            height.to_string(),
        ];
        args.extend(host_only.iter().map(|a| a.to_string()));
        let python = spawn_python("bench_producer.py", &args, env);
        let row = pair_row(
            python_producer,
            result_of(python, "Python producer"),
            result_of(consumer, "consumer"),
        );
        rows.push(row);
    }
    let frame_bytes = f64::from(width * height * 3);
    for row in &mut rows {
        row.frame_bytes = frame_bytes;
    }
    rows
}
