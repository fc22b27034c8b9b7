// SPDX-License-Identifier: MPL-2.0

//! How the benchmark measures a row: its processes (one, a pair, a pair as
//! another user), the `RESULT` fields they print, and rows made of them;
//! MPS started and stopped around the rows that use it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::FRAME_BYTES;
use crate::options::left_out;

#[derive(Debug, Clone, Default)]
pub struct Row {
    pub config: String,
    /// Not measured: `--rows` leaves it out.
    pub left_out: bool,
    pub mps: bool,
    pub fps: f64,
    pub consumer_cpu: f64,
    pub producer_cpu: f64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    pub latency_max_us: f64,
    pub corrupt: Option<u64>,
    pub missing: Option<u64>,
    pub frames: u64,
    /// Bytes of one frame of this row.
    pub frame_bytes: f64,
    pub note: String,
    /// Why the configuration could not be measured, if it could not.
    pub error: String,
}

impl Row {
    pub fn left_out(config: &str) -> Row {
        Row {
            config: config.to_string(),
            left_out: true,
            ..Row::default()
        }
    }

    pub fn gbps(&self) -> f64 {
        self.fps * self.frame_bytes / 1e9
    }
}

pub struct Child {
    pub role: &'static str,
    pub warmup: u64,
    pub pipeline: String,
}

pub fn spawn(child: &Child, env: &[(String, String)]) -> std::process::Child {
    spawn_as(child, env, &[])
}

/// `spawn` under `wrapper` (e.g. `setpriv` to run as another user).
pub fn spawn_as(child: &Child, env: &[(String, String)], wrapper: &[&str]) -> std::process::Child {
    let exe = std::env::current_exe().unwrap();
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(exe);
            command
        }
        None => Command::new(exe),
    };
    command
        .args([
            "--role",
            child.role,
            &child.warmup.to_string(),
            &child.pipeline,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    command.spawn().expect("cannot start a benchmark process")
}

pub fn result_of(
    child: std::process::Child,
    what: &str,
) -> Result<BTreeMap<String, String>, String> {
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    parse_result(
        what,
        out.status.success(),
        &out.status.to_string(),
        &String::from_utf8_lossy(&out.stdout),
        &String::from_utf8_lossy(&out.stderr),
    )
}

/// The fields of a child's `RESULT` line, or why it has none.
pub fn parse_result(
    what: &str,
    success: bool,
    status: &str,
    stdout: &str,
    stderr: &str,
) -> Result<BTreeMap<String, String>, String> {
    let line = stdout.lines().find(|l| l.starts_with("RESULT "));
    match (success, line) {
        (true, Some(line)) => Ok(line[7..]
            .split_whitespace()
            .filter_map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect()),
        _ => Err(format!(
            "{what} failed: {status}\n{}",
            stderr.lines().take(12).collect::<Vec<_>>().join("\n")
        )),
    }
}

pub fn number(fields: &BTreeMap<String, String>, key: &str) -> Option<f64> {
    fields
        .get(key)
        .and_then(|v| v.trim_matches('"').parse().ok())
}

/// Runs a producer and a consumer process; the consumer's clock makes the
/// row. `consumer_device`: `cuda-device-id` of the consumer's `cudaipcsrc`,
/// named in the row.
pub fn two_process(
    config: &str,
    producer: &str,
    consumer: &str,
    warmup: u64,
    env: &[(String, String)],
    consumer_device: Option<i32>,
) -> Row {
    two_process_as(
        config,
        producer,
        consumer,
        warmup,
        env,
        consumer_device,
        (&[], &[]),
    )
}

/// The consumer process runs as another user (nobody, through `setpriv`),
/// with its own registry; `None` where that is impossible (not root).
/// Environment variables of a child process.
pub type Env = Vec<(String, String)>;

pub fn other_user() -> Option<(Vec<&'static str>, Env)> {
    if cudaipc_channel::shm::effective_uid() != 0 {
        return None;
    }
    let wrapper = vec![
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
    ];
    let env = vec![
        ("HOME".to_string(), "/tmp".to_string()),
        (
            "GST_REGISTRY".to_string(),
            "/tmp/cudaipc-bench-other-user-registry.bin".to_string(),
        ),
    ];
    Some((wrapper, env))
}

pub fn nobody_uid() -> Option<u32> {
    let out = Command::new("id").args(["-u", "nobody"]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

pub fn two_process_as(
    config: &str,
    producer: &str,
    consumer: &str,
    warmup: u64,
    env: &[(String, String)],
    consumer_device: Option<i32>,
    (consumer_wrapper, consumer_env): (&[&str], &[(String, String)]),
) -> Row {
    if left_out(config) {
        return Row::left_out(config);
    }
    let (config, consumer) = match consumer_device {
        Some(d) => (
            format!("{config} [consumer GPU {d}]"),
            consumer.replacen(
                "rscudaipcsrc ",
                &format!("rscudaipcsrc cuda-device-id={d} "),
                1,
            ),
        ),
        None => (config.to_string(), consumer.to_string()),
    };
    let config = config.as_str();
    let consumer_child = spawn_as(
        &Child {
            role: "pipeline",
            warmup,
            pipeline: consumer,
        },
        &[env, consumer_env].concat(),
        consumer_wrapper,
    );
    // The consumer registers as waiting first; the producer then lets it
    // attach before its first frame.
    std::thread::sleep(Duration::from_millis(300));
    let producer_child = spawn(
        &Child {
            role: "pipeline",
            warmup: 0,
            pipeline: producer.to_string(),
        },
        env,
    );
    let producer_result = result_of(producer_child, "producer");
    let consumer_result = result_of(consumer_child, "consumer");
    pair_row(config, producer_result, consumer_result)
}

/// The row of a producer and a consumer that ran together, measured by the
/// consumer; or their errors.
pub fn pair_row(
    config: &str,
    producer: Result<BTreeMap<String, String>, String>,
    consumer: Result<BTreeMap<String, String>, String>,
) -> Row {
    match (producer, consumer) {
        (Ok(p), Ok(c)) => row_from(config, &c, Some(&p)),
        (p, c) => failed_row(config, [p.err(), c.err()]),
    }
}

/// The row of a measurement that failed: its errors, one after another.
pub fn failed_row(config: &str, errors: impl IntoIterator<Item = Option<String>>) -> Row {
    Row {
        config: config.into(),
        error: errors.into_iter().flatten().collect::<Vec<_>>().join(" / "),
        ..Default::default()
    }
}

/// A process's `{prefix}measured` frames in `{prefix}seconds`, and their
/// rate (0 without a time).
pub fn measured_rate(fields: &BTreeMap<String, String>, prefix: &str) -> (f64, f64, f64) {
    let measured = number(fields, &format!("{prefix}measured")).unwrap_or(0.0);
    let seconds = number(fields, &format!("{prefix}seconds")).unwrap_or(0.0);
    let rate = if seconds > 0.0 {
        measured / seconds
    } else {
        0.0
    };
    (measured, seconds, rate)
}

pub fn row_from(
    config: &str,
    c: &BTreeMap<String, String>,
    p: Option<&BTreeMap<String, String>>,
) -> Row {
    let (_, _, fps) = measured_rate(c, "");
    let per_second = |fields: &BTreeMap<String, String>| {
        let cpu = number(fields, "cpu_s").unwrap_or(0.0);
        let wall = number(fields, "seconds").unwrap_or(0.0);
        if wall > 0.0 { cpu / wall } else { 0.0 }
    };
    Row {
        config: config.into(),
        fps,
        consumer_cpu: per_second(c),
        producer_cpu: p.map(per_second).unwrap_or(0.0),
        latency_p50_us: number(c, "src.latency-p50-ns").unwrap_or(0.0) / 1e3,
        latency_p99_us: number(c, "src.latency-p99-ns").unwrap_or(0.0) / 1e3,
        latency_max_us: number(c, "src.latency-max-ns").unwrap_or(0.0) / 1e3,
        corrupt: number(c, "check.corrupt").map(|v| v as u64),
        missing: number(c, "check.missing").map(|v| v as u64),
        frames: number(c, "frames").unwrap_or(0.0) as u64,
        frame_bytes: FRAME_BYTES,
        note: paths_taken(c, p),
        ..Default::default()
    }
}

/// How this plugin's elements moved the frames, from their final stats:
/// the sink's copies, frames published in place or lent, frames published
/// again; the source's slots wrapped as GstCudaMemory or copied into it.
pub fn paths_taken(c: &BTreeMap<String, String>, p: Option<&BTreeMap<String, String>>) -> String {
    let count =
        |fields: &BTreeMap<String, String>, key: &str| number(fields, key).map(|v| v as u64);
    let mut parts = Vec::new();
    if let Some(p) = p
        && let Some(copied) = count(p, "ipcsink.copied")
    {
        parts.push(format!(
            "sink: {} slots, {} in place or lent, {copied} copied, {} again",
            count(p, "ipcsink.slots").unwrap_or(0),
            count(p, "ipcsink.zero-copy").unwrap_or(0),
            count(p, "ipcsink.repeated").unwrap_or(0)
        ));
        // Where the producer's time per frame goes: a render near the
        // frame period bounds the pair at the sink; its waits, at the
        // consumers.
        let frames = number(p, "ipcsink.frames").unwrap_or(0.0).max(1.0);
        let per_frame_us = |key: &str| number(p, key).unwrap_or(0.0) / frames / 1e3;
        parts.push(format!(
            "sink per frame: {:.1} us in render, {:.1} waiting for a free slot, {:.1} for consumers' GPU reads",
            per_frame_us("ipcsink.render-time"),
            per_frame_us("ipcsink.slot-wait-time"),
            per_frame_us("ipcsink.read-wait-time")
        ));
    }
    let metas = count(c, "src.frame-data-metas").unwrap_or(0);
    let app_entries = count(c, "src.frame-data-app-entries").unwrap_or(0);
    if metas + app_entries > 0 {
        parts.push(format!(
            "src: {metas} metas and {app_entries} data entries arrived"
        ));
    }
    if let Some(wrapped) = count(c, "src.gstcuda-wrapped") {
        let copied = count(c, "src.gstcuda-copied").unwrap_or(0);
        if wrapped + copied > 0 {
            parts.push(format!(
                "src: {wrapped} wrapped, {copied} copied as GstCudaMemory"
            ));
        }
    }
    parts.join("; ")
}

/// Two processes running `pipeline` side by side, each its own CUDA
/// context and no dependency between them: what time slicing (or MPS)
/// gives two processes, the limit of a two-process pair. The row's rate is
/// the sum of the two.
pub fn two_independent(config: &str, pipeline: &str, warmup: u64, env: &[(String, String)]) -> Row {
    if left_out(config) {
        return Row::left_out(config);
    }
    let child = || {
        spawn(
            &Child {
                role: "pipeline",
                warmup,
                pipeline: pipeline.to_string(),
            },
            env,
        )
    };
    let (first, second) = (child(), child());
    match (result_of(first, "first"), result_of(second, "second")) {
        (Ok(a), Ok(b)) => {
            let mut row = row_from(config, &a, None);
            let other = row_from(config, &b, None);
            row.fps += other.fps;
            row.frames += other.frames;
            row.consumer_cpu += other.consumer_cpu;
            row.corrupt = Some(row.corrupt.unwrap_or(0) + other.corrupt.unwrap_or(0));
            row.missing = Some(row.missing.unwrap_or(0) + other.missing.unwrap_or(0));
            row
        }
        (a, b) => failed_row(config, [a.err(), b.err()]),
    }
}

/// How far apart rows 1q and 13 "queued" put a producer's and a consumer's
/// half in one process: the depth of the default ring without MPS.
pub const QUEUED_FRAMES: u32 = 32;

/// A queue that holds `frames` frames between two halves of one pipeline.
pub fn queue_of_frames(frames: u32) -> String {
    format!("queue max-size-buffers={frames} max-size-bytes=0 max-size-time=0")
}

pub fn single(config: &str, pipeline: &str, warmup: u64, env: &[(String, String)]) -> Row {
    if left_out(config) {
        return Row::left_out(config);
    }
    let child = spawn(
        &Child {
            role: "pipeline",
            warmup,
            pipeline: pipeline.to_string(),
        },
        env,
    );
    match result_of(child, config) {
        Ok(c) => row_from(config, &c, None),
        Err(e) => Row {
            config: config.into(),
            error: e,
            ..Default::default()
        },
    }
}

pub struct Mps {
    pub env: Vec<(String, String)>,
    pub dir: PathBuf,
}

impl Mps {
    pub fn start() -> Result<Mps, String> {
        let dir = std::env::temp_dir().join(format!("cudaipc-bench-mps-{}", std::process::id()));
        let pipe = dir.join("pipe");
        let log = dir.join("log");
        std::fs::create_dir_all(&pipe).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(&log).map_err(|e| e.to_string())?;
        let env = vec![
            (
                "CUDA_MPS_PIPE_DIRECTORY".to_string(),
                pipe.display().to_string(),
            ),
            (
                "CUDA_MPS_LOG_DIRECTORY".to_string(),
                log.display().to_string(),
            ),
        ];
        let status = Command::new("nvidia-cuda-mps-control")
            .arg("-d")
            .envs(env.iter().cloned())
            .status()
            .map_err(|e| format!("cannot start nvidia-cuda-mps-control: {e}"))?;
        if !status.success() {
            return Err(format!("nvidia-cuda-mps-control -d failed: {status}"));
        }
        std::thread::sleep(Duration::from_millis(500));
        Ok(Mps { env, dir })
    }
}

impl Drop for Mps {
    fn drop(&mut self) {
        use std::io::Write;
        if let Ok(mut child) = Command::new("nvidia-cuda-mps-control")
            .envs(self.env.iter().cloned())
            .stdin(Stdio::piped())
            .spawn()
        {
            if let Some(stdin) = child.stdin.as_mut() {
                let _ = stdin.write_all(b"quit\n");
            }
            let _ = child.wait();
        }
        std::thread::sleep(Duration::from_millis(300));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
