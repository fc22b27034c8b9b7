// SPDX-License-Identifier: MPL-2.0

//! One producer, several consumer processes on one channel, and a check
//! that every consumer received every frame intact and in order.
//!
//! The producer (this process) renders the examples' pattern (on the GPU
//! with CUDA, else on the CPU: see the `publisher` example) and publishes it
//! through `appsrc ! rscudaipcsink` with the default `when-full=block`: the
//! producer waits for the slowest consumer, so none misses a frame. Each
//! consumer is this program run again (`--consumer CHANNEL`), reading with
//! `rscudaipcsrc ! appsink` and printing the SHA-1 of every frame; the
//! producer compares them with what it published.
//!
//! ```text
//! cargo run --example fanout -- --consumers 3 --frames 300
//! ```
//!
//! Options: `--consumers N` (3), `--frames N` (300), `--size WIDTHxHEIGHT`
//! (320x240), `--cpu` (render on the CPU and use the host transport).
//!
//! It prints one line per consumer (`frames`, `intact`, `lost`, `corrupt`,
//! `checksum`), the producer's checksum, and `result=ok` or
//! `result=FAILED`; it exits with 1 on any lost or damaged frame or failed
//! process.

mod common;

use std::collections::BTreeSet;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gst::prelude::*;

use common::{Args, Renderer, StreamChecksum};

const USAGE: &str = "usage: fanout [--consumers N] [--frames N] [--size WxH] [--cpu]";
const LIMIT: Duration = Duration::from_secs(60);

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("--consumer") {
        std::process::exit(consume(&argv[2]));
    }
    let mut args = Args::from_env(USAGE);
    let consumers: usize = args.value("--consumers", 3);
    let frames: u32 = args.value("--frames", 300);
    let size = args.size((320, 240));
    let cpu = args.flag("--cpu");
    args.finish();
    std::process::exit(run(consumers, frames, size, cpu));
}

// ------------------------------------------------------------- consumer

/// A consumer process: every frame's number and SHA-1 on stdout.
fn consume(channel: &str) -> i32 {
    gst::init().unwrap();
    gstcudaipc::plugin_register_static().unwrap();
    let pipeline = gst::parse::launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout={} ! appsink name=sink sync=false max-buffers=2",
        LIMIT.as_millis()
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    let appsink = pipeline
        .by_name("sink")
        .unwrap()
        .downcast::<gst_app::AppSink>()
        .unwrap();
    let bus = pipeline.bus().unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let mut status = 0;
    loop {
        if let Some(sample) = appsink.try_pull_sample(gst::ClockTime::from_mseconds(100)) {
            let buffer = sample.buffer().unwrap();
            // Downloads CUDA memory; a view of shared memory on the host.
            let map = buffer.map_readable().unwrap();
            let n = common::frame_number(&map).unwrap_or(u32::MAX);
            println!("frame={n} sha1={}", common::sha1_hex(&map));
            continue;
        }
        // A failing source posts its error, then sends EOS.
        if let Some(msg) = bus.pop_filtered(&[gst::MessageType::Error])
            && let gst::MessageView::Error(e) = msg.view()
        {
            eprintln!("consumer: {}", common::error_text(e));
            status = 1;
            break;
        }
        if appsink.is_eos() {
            break;
        }
    }
    pipeline.set_state(gst::State::Null).unwrap();
    status
}

// ------------------------------------------------------------- producer

/// A consumer process and its stdout, read on a thread so that a full pipe
/// never stalls it (and through it, the producer).
struct Consumer {
    child: Child,
    stdout: std::thread::JoinHandle<String>,
}

fn run(consumers: usize, frames: u32, size: (u32, u32), cpu: bool) -> i32 {
    gst::init().unwrap();
    gstcudaipc::plugin_register_static().unwrap();
    let channel = format!(
        "fanout-{}-{:x}",
        std::process::id(),
        cudaipc_channel::shm::random_u64() & 0xffff_ffff
    );

    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<Consumer> = (0..consumers)
        .map(|_| {
            let mut child = Command::new(&exe)
                .args(["--consumer", &channel])
                .stdout(Stdio::piped())
                .spawn()
                .expect("cannot start a consumer process");
            let mut stdout = child.stdout.take().unwrap();
            let stdout = std::thread::spawn(move || {
                let mut text = String::new();
                let _ = stdout.read_to_string(&mut text);
                text
            });
            Consumer { child, stdout }
        })
        .collect();

    // Consumers that wait for the producer get every frame from the first.
    let start = Instant::now();
    while cudaipc_channel::shm::count_live_waiters(&channel) < consumers {
        let exited = children
            .iter_mut()
            .any(|c| c.child.try_wait().ok().flatten().is_some());
        if exited || start.elapsed() > LIMIT {
            eprintln!("the consumers did not all start");
            for c in &mut children {
                let _ = c.child.kill();
                let _ = c.child.wait();
            }
            return 1;
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    let published = match produce(&channel, frames, size, cpu) {
        Ok(published) => published,
        Err(e) => {
            eprintln!("producer: {e}");
            Vec::new()
        }
    };
    let mut producer_checksum = StreamChecksum::default();
    published.iter().for_each(|s| producer_checksum.add(s));

    let mut ok = published.len() == frames as usize;
    for (i, c) in children.into_iter().enumerate() {
        let Consumer { mut child, stdout } = c;
        let status = child.wait().unwrap();
        let report = check(&published, &stdout.join().unwrap());
        let good = status.success()
            && report.lost == 0
            && report.corrupt == 0
            && report.in_order
            && report.received == published.len();
        ok &= good;
        println!(
            "consumer={} pid={} frames={} intact={} lost={} corrupt={} in-order={} checksum={} exit={}",
            i + 1,
            child.id(),
            report.received,
            report.intact,
            report.lost,
            report.corrupt,
            report.in_order,
            report.checksum,
            status.code().unwrap_or(-1),
        );
    }
    println!(
        "producer frames={} checksum={}",
        published.len(),
        producer_checksum.hex()
    );
    println!(
        "fanout consumers={consumers} frames={frames} result={}",
        if ok { "ok" } else { "FAILED" }
    );
    if ok { 0 } else { 1 }
}

/// Publishes `frames` frames as the `publisher` example does; returns the
/// SHA-1 of each, by frame number.
fn produce(
    channel: &str,
    frames: u32,
    (width, height): (u32, u32),
    cpu: bool,
) -> Result<Vec<String>, String> {
    let mut renderer = Renderer::new(width, height, cpu);
    let gpu = renderer.is_gpu();
    let pipeline = gst::parse::launch(&format!(
        "appsrc name=src format=time max-buffers=2 \
         ! rscudaipcsink channel={channel} transport={} when-full=block sync=false",
        if gpu { "auto" } else { "host" }
    ))
    .map_err(|e| e.to_string())?
    .downcast::<gst::Pipeline>()
    .unwrap();
    let appsrc = pipeline
        .by_name("src")
        .unwrap()
        .downcast::<gst_app::AppSrc>()
        .unwrap();
    appsrc.set_caps(Some(&common::caps(width, height, 30, gpu)));
    let duration = gst::ClockTime::SECOND / 30;
    let published = Arc::new(Mutex::new(Vec::new()));
    let callbacks = gst_app::AppSrcCallbacks::builder()
        .need_data({
            let published = published.clone();
            move |appsrc, _| {
                let mut published = published.lock().unwrap();
                let n = published.len() as u32;
                if n == frames {
                    let _ = appsrc.end_of_stream();
                    return;
                }
                match renderer.render(n, duration * u64::from(n), duration) {
                    Ok((buffer, sha1)) => {
                        published.push(sha1);
                        let _ = appsrc.push_buffer(buffer);
                    }
                    Err(e) => gst::element_error!(
                        appsrc,
                        gst::LibraryError::Failed,
                        ("cannot render frame {}: {}", n, e)
                    ),
                }
            }
        })
        .build();
    appsrc.set_callbacks(callbacks);
    let bus = pipeline.bus().unwrap();
    let _ = pipeline.set_state(gst::State::Playing);
    let msg = bus.timed_pop_filtered(
        gst::ClockTime::from_seconds(LIMIT.as_secs()),
        &[gst::MessageType::Eos, gst::MessageType::Error],
    );
    pipeline.set_state(gst::State::Null).unwrap();
    match msg.as_ref().map(|m| m.view()) {
        Some(gst::MessageView::Eos(_)) => Ok(std::mem::take(&mut *published.lock().unwrap())),
        Some(gst::MessageView::Error(e)) => Err(common::error_text(e)),
        _ => Err(format!("not finished within {LIMIT:?}")),
    }
}

// ------------------------------------------------------------ the check

struct Report {
    received: usize,
    /// Frames whose bytes equal what the producer published as that frame.
    intact: usize,
    /// Published frames never received intact.
    lost: usize,
    corrupt: usize,
    in_order: bool,
    checksum: String,
}

/// Compares a consumer's `frame=N sha1=…` lines with the published SHA-1s.
fn check(published: &[String], output: &str) -> Report {
    let mut checksum = StreamChecksum::default();
    let mut seen = BTreeSet::new();
    let (mut received, mut intact, mut last, mut in_order) = (0, 0, None, true);
    for line in output.lines() {
        let field = |key: &str| {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        };
        let (Some(n), Some(sha1)) = (field("frame"), field("sha1")) else {
            continue;
        };
        let n: u32 = n.parse().unwrap_or(u32::MAX);
        received += 1;
        checksum.add(sha1);
        in_order &= last.is_none_or(|last| n > last);
        last = Some(n);
        if published.get(n as usize).is_some_and(|p| p == sha1) {
            intact += 1;
            seen.insert(n);
        }
    }
    Report {
        received,
        intact,
        lost: published.len() - seen.len(),
        corrupt: received - intact,
        in_order,
        checksum: checksum.hex(),
    }
}
