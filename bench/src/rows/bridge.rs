// SPDX-License-Identifier: MPL-2.0

//! Row 17: the UCX bridge between two hosts, played by two network
//! namespaces joined by a veth pair, with UCX restricted to TCP so that the
//! frames cross the veth. A producer and `cudaipc-bridge send` on host A,
//! `cudaipc-bridge receive` and the measuring consumer on host B, every
//! frame (`--frames every`, both channels lossless). Beside it, the limit
//! of the same link: `ucx_perftest -t tag_bw` for a message of one frame,
//! in the same namespaces, in the same run.

use std::process::{Command, Stdio};
use std::time::Duration;

#[path = "../../../tests/common/netns.rs"]
mod netns;
use netns::NamespacePair;

use crate::measure::{Child, Row, failed_row, result_of, row_from, spawn_as};
use crate::options::{Options, left_out};

const ADDRESS_A: &str = "10.214.0.1";
const ADDRESS_B: &str = "10.214.0.2";
const PORT: &str = "13338";
const PERFTEST_PORT: &str = "13339";
/// The share of `ucx_perftest`'s rate the bridge aims for.
const TARGET_PERCENT: f64 = 90.0;

/// Rows 17: 1080p and 4K RGB frames over the bridge (host transport).
pub fn bridge_rows(o: &Options) -> Vec<Row> {
    [
        ("17 bridge over UCX, 1080p RGB", 1920, 1080),
        ("17k bridge over UCX, 4K RGB", 3840, 2160),
    ]
    .into_iter()
    .map(|(config, width, height)| {
        let config = format!("{config} (host transport, TCP between namespaces)");
        if left_out(&config) {
            return Row::left_out(&config);
        }
        match two_hosts() {
            Ok(hosts) => bridge_row(o, &hosts, &config, width, height),
            // A note, not a failure: the rest of the run is measured.
            Err(why) => Row {
                config,
                note: format!("not measured: {why}"),
                ..Row::default()
            },
        }
    })
    .collect()
}

fn bridge_row(o: &Options, hosts: &NamespacePair, config: &str, width: u32, height: u32) -> Row {
    let bytes = width as u64 * height as u64 * 3;
    let total = o.frames + o.warmup;
    let channel = crate::rows::channel("bridge");
    let (dir_a, dir_b) = (shm_dir("a"), shm_dir("b"));
    let env = |dir: &str| {
        vec![
            ("CUDAIPC_SHM_DIR".to_string(), dir.to_string()),
            ("UCX_TLS".to_string(), "tcp".to_string()),
        ]
    };
    let listen = format!("{ADDRESS_B}:{PORT}");
    let mut receiver = bridge(
        &hosts.b,
        &env(&dir_b),
        &[
            "receive",
            "--listen",
            &listen,
            "--channel",
            &channel,
            "--allow",
            ADDRESS_A,
            "--wait-for-connection",
            "1",
        ],
    );
    let consumer = spawn_as(
        &Child {
            role: "pipeline",
            warmup: o.warmup,
            pipeline: format!(
                "rscudaipcsrc name=src channel={channel} connect-timeout=60000 ! fakesink name=sink sync=false"
            ),
        },
        &env(&dir_b),
        &hosts.on(&hosts.b),
    );
    std::thread::sleep(Duration::from_millis(300));
    let mut sender = bridge(
        &hosts.a,
        &env(&dir_a),
        &[
            "send",
            "--to",
            &listen,
            "--channel",
            &channel,
            "--frames",
            "every",
        ],
    );
    let producer = spawn_as(
        &Child {
            role: "pipeline",
            warmup: 0,
            pipeline: format!(
                "videotestsrc num-buffers=1 ! video/x-raw,format=RGB,width={width},height={height},framerate=0/1 ! imagefreeze num-buffers={total} ! rscudaipcsink name=ipcsink channel={channel} transport=host sync=false wait-for-connection=1"
            ),
        },
        &env(&dir_a),
        &hosts.on(&hosts.a),
    );
    let produced = result_of(producer, "producer");
    let consumed = result_of(consumer, "consumer");
    for process in [&mut sender, &mut receiver] {
        // SAFETY: a signal to our own child: the bridge ends on SIGINT.
        unsafe { libc::kill(process.id() as i32, libc::SIGINT) };
    }
    let sent = sender.wait_with_output().ok();
    let _ = receiver.wait();
    let _ = std::fs::remove_dir_all(&dir_a);
    let _ = std::fs::remove_dir_all(&dir_b);
    let mut row = match (produced, consumed) {
        (Ok(p), Ok(c)) => row_from(config, &c, Some(&p)),
        (p, c) => return failed_row(config, [p.err(), c.err()]),
    };
    row.frame_bytes = bytes as f64;
    let summary = sent
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let send_time = |key: &str| {
        summary
            .split(key)
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    // The bridge's own part of a frame's way: from the sender taking it off
    // host A's channel to the receiver's slot (the local channels' latency
    // is rows 3-5's).
    if let (Some(p50), Some(p99), Some(max)) = (
        send_time("send time p50 "),
        send_time(", p99 "),
        send_time(", max "),
    ) {
        row.latency_p50_us = p50;
        row.latency_p99_us = p99;
        row.latency_max_us = max;
    }
    row.note = match perftest_rate(hosts, bytes, total.max(20)) {
        Ok(limit) => format!(
            "limit: ucx_perftest tag_bw of {bytes}-byte messages over the same veth, {limit:.1} msg/s; the bridge {:.1}% of it (target >= {TARGET_PERCENT:.0}%); latency: the bridge's send of a frame, slot to slot",
            100.0 * row.fps / limit
        ),
        Err(why) => format!("no limit measured: {why}"),
    };
    row
}

/// `ucx_perftest -t tag_bw`'s overall message rate for `bytes`-byte
/// messages from host A to host B.
fn perftest_rate(hosts: &NamespacePair, bytes: u64, iterations: u64) -> Result<f64, String> {
    let args = |client: bool| {
        let mut a: Vec<String> = Vec::new();
        if client {
            a.push(ADDRESS_B.into());
        }
        a.extend(
            [
                "-t",
                "tag_bw",
                "-s",
                &bytes.to_string(),
                "-n",
                &iterations.to_string(),
                "-p",
                PERFTEST_PORT,
            ]
            .map(String::from),
        );
        a
    };
    let run = |ns: &str, client: bool| {
        Command::new("ip")
            .args(["netns", "exec", ns, "ucx_perftest"])
            .args(args(client))
            .env("UCX_TLS", "tcp")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("ucx_perftest (ucx-utils): {e}"))
    };
    let server = run(&hosts.b, false)?;
    std::thread::sleep(Duration::from_millis(500));
    let client = run(&hosts.a, true)?
        .wait_with_output()
        .map_err(|e| e.to_string())?;
    let _ = server.wait_with_output();
    let text = String::from_utf8_lossy(&client.stdout);
    text.lines()
        .find(|l| l.starts_with("Final:"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| format!("no Final line: {}", String::from_utf8_lossy(&client.stderr)))
}

fn bridge(ns: &str, env: &[(String, String)], args: &[&str]) -> std::process::Child {
    let binary = std::env::current_exe()
        .unwrap()
        .with_file_name("cudaipc-bridge");
    Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(binary)
        .args(args)
        .envs(env.iter().cloned())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("ip (iproute2) runs the bridge")
}

fn shm_dir(tag: &str) -> String {
    let dir = format!("/dev/shm/cudaipc-bench-bridge-{tag}-{}", std::process::id());
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// The two hosts: the tests' namespace pair (one file for both), once the
/// bridge binary is found.
fn two_hosts() -> Result<NamespacePair, String> {
    let bridge = std::env::current_exe()
        .unwrap()
        .with_file_name("cudaipc-bridge");
    if !bridge.is_file() {
        return Err(format!(
            "no {} (cargo build --release -p cudaipc-bridge)",
            bridge.display()
        ));
    }
    let id = std::process::id() % 100_000;
    NamespacePair::new("cudaipc-bench", "cb", id, [ADDRESS_A, ADDRESS_B])
}
