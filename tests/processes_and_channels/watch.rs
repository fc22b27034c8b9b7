// `cudaipc-channels watch` against real processes on the host transport: a
// live producer with three consumers of different speeds, and a producer
// that a slow every-frame consumer holds back. Rates, misses and lag are
// checked within tolerances wide enough for a busy CI machine.

use crate::channels_binary;
use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);

/// A producer of small RGB frames at 30 FPS on the host transport:
/// `source_props` on its videotestsrc, `sink_props` on its sink.
pub(crate) fn producer(
    dir: &ShmDir,
    channel: &str,
    source_props: &str,
    sink_props: &str,
) -> Launch {
    launch_with(
        &[],
        &dir.env(),
        &format!(
            "videotestsrc {source_props} ! video/x-raw,format=RGB,width=64,height=48,framerate=30/1 ! rscudaipcsink transport=host {sink_props} channel={channel}"
        ),
    )
}

/// One `watch --once --json` snapshot, rates over `interval_s`: the
/// channel's object.
fn snapshot(dir: &ShmDir, channel: &str, interval_s: &str) -> Value {
    let out = checked(&mut Command::new(channels_binary()))
        .args([
            "watch",
            "--once",
            "--json",
            "--interval",
            interval_s,
            channel,
        ])
        .envs(dir.env())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let all: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    let channels = all["channels"].as_array().unwrap();
    assert!(channels.len() <= 1, "only the channel asked for: {text}");
    channels.first().cloned().unwrap_or(Value::Null)
}

fn consumer_of(channel: &Value, pid: u32) -> &Value {
    channel["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["pid"] == pid)
        .unwrap_or_else(|| panic!("consumer {pid} listed: {channel}"))
}

fn fps(v: &Value) -> f64 {
    v["fps"].as_f64().unwrap_or_else(|| panic!("a rate: {v}"))
}

/// Waits until `n` consumers of `channel` have each taken frames.
fn wait_for_consumers(dir: &ShmDir, channel: &str, n: usize) {
    let start = Instant::now();
    loop {
        let c = snapshot(dir, channel, "0.2");
        let taking = c["consumers"].as_array().map_or(0, |all| {
            all.iter()
                .filter(|c| c["frames"].as_u64() > Some(10))
                .count()
        });
        if taking == n {
            return;
        }
        assert!(start.elapsed() < LIMIT, "{n} consumers taking frames: {c}");
    }
}

#[test]
fn watch_shows_each_consumers_rate_misses_and_lag_on_a_live_channel() {
    let dir = ShmDir::new("watch");
    let channel = unique_channel("watch");
    let env = dir.env();
    let producer = producer(&dir, &channel, "is-live=true", "");
    let source = format!("rscudaipcsrc channel={channel}");
    let fast = launch_with(&[], &env, &format!("{source} ! fakesink"));
    // At most 10 frames a second: a third of the producer's.
    let slow = launch_with(
        &[],
        &env,
        &format!("{source} ! identity sleep-time=100000 ! fakesink"),
    );
    // Every frame, with time to spare: the producer waits for it, and it
    // never makes it wait.
    let every = launch_with(&[], &env, &format!("{source} frames=every ! fakesink"));
    wait_for_consumers(&dir, &channel, 3);

    let interval = 3.0;
    let c = snapshot(&dir, &channel, "3");
    assert_eq!(c["state"], "live", "{c}");
    assert_eq!(c["producer_pid"], producer.pid(), "{c}");
    assert_eq!(c["transport"], "host", "{c}");
    assert_eq!(c["live"], true, "{c}");
    let produced = fps(&c);
    assert!(
        (20.0..=33.0).contains(&produced),
        "the producer's rate near 30: {c}"
    );

    let f = consumer_of(&c, fast.pid());
    assert_eq!(f["mode"], "auto", "{f}");
    assert!(fps(f) >= 0.85 * produced, "the fast consumer keeps up: {f}");
    assert_eq!(f["missed_in_interval"], 0, "{f}");
    assert!(f["behind"].as_u64().unwrap() <= 2, "{f}");
    assert_eq!(
        f["producer_waits"], false,
        "own pace on a live channel: {f}"
    );
    assert_eq!(f["holds_producer_back"], false, "{f}");

    let s = consumer_of(&c, slow.pid());
    assert!(
        (4.0..=10.5).contains(&fps(s)),
        "the slow consumer's rate near 10: {s}"
    );
    let missed = s["missed_in_interval"].as_u64().unwrap() as f64;
    let expected = (produced - fps(s)) * interval;
    assert!(
        missed >= 0.6 * expected && missed <= 1.3 * expected + 3.0,
        "it misses what it cannot take ({expected:.0} in {interval} s): {s}"
    );
    assert!(
        s["missed"].as_u64() >= s["missed_in_interval"].as_u64(),
        "{s}"
    );
    assert!(
        s["behind"].as_u64().unwrap() <= c["slots"].as_u64().unwrap(),
        "{s}"
    );
    assert_eq!(
        s["holds_producer_back"], false,
        "a slow consumer at its own pace: {s}"
    );

    let e = consumer_of(&c, every.pid());
    assert_eq!(e["mode"], "every", "{e}");
    assert!(fps(e) >= 0.85 * produced, "{e}");
    assert_eq!(e["missed_in_interval"], 0, "{e}");
    assert_eq!(
        e["producer_waits"], true,
        "the producer waits for every-frame consumers: {e}"
    );
    assert_eq!(e["holds_producer_back"], false, "it keeps up: {e}");

    // The same in the table, one line per consumer.
    let out = checked(&mut Command::new(channels_binary()))
        .args(["watch", "--once", "--interval", "0.5"])
        .envs(dir.env())
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && table.contains(&channel), "{table}");
    for (pid, pace) in [
        (fast.pid(), "own pace"),
        (slow.pid(), "own pace"),
        (every.pid(), "waited for"),
    ] {
        let line = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&pid.to_string()))
            .unwrap_or_else(|| panic!("a line for {pid}:\n{table}"));
        assert!(line.ends_with(pace), "{pace}: {line}");
    }
    drop((fast, slow, every, producer));
}

#[test]
fn watch_names_the_consumer_that_holds_the_producer_back() {
    let dir = ShmDir::new("watch-back");
    let channel = unique_channel("watch-back");
    let env = dir.env();
    // Not live and not synchronised to the clock: as fast as its
    // consumers let it.
    let producer = producer(&dir, &channel, "", "slots=4 sync=false");
    let slow = launch_with(
        &[],
        &env,
        &format!(
            "rscudaipcsrc channel={channel} frames=every ! identity sleep-time=50000 ! fakesink"
        ),
    );
    wait_for_consumers(&dir, &channel, 1);
    let c = snapshot(&dir, &channel, "2");
    assert_eq!(c["live"], false, "{c}");
    let s = consumer_of(&c, slow.pid());
    assert!(
        (8.0..=20.5).contains(&fps(s)),
        "at most 20 frames a second: {s}"
    );
    assert!(
        fps(&c) <= fps(s) + 2.0,
        "the producer goes at its pace: {c}"
    );
    assert_eq!(s["producer_waits"], true, "{s}");
    assert_eq!(s["holds_producer_back"], true, "{s}");
    assert_eq!(s["missed"], 0, "{s}");
    drop((slow, producer));
}

#[test]
fn watch_refreshes_until_ctrl_c_and_ends_with_status_0() {
    let dir = ShmDir::new("watch-int");
    let mut watch = checked(&mut Command::new(channels_binary()))
        .args(["watch", "--interval", "0.2"])
        .envs(dir.env())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: the pid is that of our own child, not yet waited for.
    assert_eq!(unsafe { libc::kill(watch.id() as i32, libc::SIGINT) }, 0);
    let start = Instant::now();
    while watch.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < LIMIT, "watch ends on Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = watch.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.matches("no channels").count() >= 3,
        "refreshed every 0.2 s:\n{text}"
    );
    assert!(text.contains("(Ctrl-C ends)"), "{text}");
}

/// `--once` prints one snapshot and ends by itself: it does not say that
/// Ctrl-C ends it.
#[test]
fn watch_once_ends_by_itself_and_does_not_mention_ctrl_c() {
    let dir = ShmDir::new("watch-once");
    let out = checked(&mut Command::new(channels_binary()))
        .args(["watch", "--once", "--interval", "0.2"])
        .envs(dir.env())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        text.lines().next(),
        Some(format!("channels in {}, rates over 0.2 s", dir.0.display()).as_str()),
        "{text}"
    );
    assert!(!text.contains("Ctrl-C"), "{text}");
}

#[test]
fn watch_reads_a_consumer_record_a_hostile_peer_scribbled_on() {
    use std::sync::atomic::Ordering::SeqCst;
    let dir = ShmDir::new("watch-hostile");
    let channel = unique_channel("watch-hostile");
    let env = dir.env();
    let producer = producer(&dir, &channel, "is-live=true", "");
    let consumer = launch_with(
        &[],
        &env,
        &format!("rscudaipcsrc channel={channel} ! fakesink"),
    );
    wait_for_consumers(&dir, &channel, 1);
    // Stopped, so that the consumer does not write its own cursor over the
    // scribbled one (it did under qemu, between the scribble and the
    // snapshot).
    consumer.stop();
    // A consumer may write its own record: values no consumer would write.
    let path = dir.path(&format!("cudaipc-{channel}"));
    let block = cudaipc_channel::ControlBlock {
        shared: cudaipc_channel::shm::SharedFile::open(&path).unwrap(),
    };
    let h = block.header();
    let record = h
        .consumers
        .iter()
        .find(|c| c.pid.load(SeqCst) == consumer.pid())
        .expect("the consumer's record");
    record.mode.store(99, SeqCst);
    record.cursor.store(u64::MAX, SeqCst);
    record.frames_missed.store(u64::MAX, SeqCst);
    record.ready_ns.store(1, SeqCst);
    record.attached_ns.store(u64::MAX, SeqCst);
    let c = snapshot(&dir, &channel, "0.2");
    let scribbled = consumer_of(&c, consumer.pid());
    assert_eq!(scribbled["mode"], "?", "{scribbled}");
    assert_eq!(scribbled["behind"], 0, "{scribbled}");
    assert_eq!(scribbled["missed"], u64::MAX, "{scribbled}");
    assert_eq!(c["producer_pid"], producer.pid(), "{c}");
    consumer.signal(libc::SIGCONT);
    drop((consumer, producer));
}
