// SPDX-License-Identifier: MPL-2.0

// Slow gst-launch-1.0 consumers beside a live producer, each round: one that
// posts its stats on the bus (`-m`, stats-interval) while it misses frames,
// one that declares a hold its queue keeps (the ring grows for it), one that
// joins late, and the producer ending under them all. Each consumer ends
// with the end of stream, by no signal, with no CRITICAL, having received
// and missed frames. Rounds: CUDAIPC_STRESS_ROUNDS (default 3).

use std::time::Duration;

use crate::common::{CUDA, HOST, Transport};
use crate::common::{launch_unquiet, unique_channel, wait_for_waiting_consumers};

/// The last `name=(guint64)N` of the stats a consumer posted.
fn last_stat(stdout: &str, name: &str) -> Option<u64> {
    let key = format!("{name}=(guint64)");
    stdout.lines().rev().find_map(|line| {
        let at = line.find(&key)? + key.len();
        let digits: String = line[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

fn round(transport: Transport, round: u64) {
    let channel = unique_channel(&format!("slow-held-{round}"));
    let source = format!("rscudaipcsrc channel={channel} connect-timeout=60000 stats-interval=200");
    let consumers = [
        // The pair of the crash report: its own pace, 5 frames a second.
        (
            "bus stats",
            format!("-m {source} ! identity sleep-time=200000 ! fakesink"),
        ),
        // Six frames in its queue: the live ring grows to hold them.
        (
            "hold=6",
            format!(
                "-m {source} hold=6 ! queue max-size-buffers=6 max-size-time=0 max-size-bytes=0 ! identity sleep-time=120000 ! fakesink"
            ),
        ),
        (
            "queue",
            format!("-m {source} ! queue ! identity sleep-time=90000 ! fakesink"),
        ),
    ];
    let mut children: Vec<_> = consumers
        .iter()
        .take(2)
        .map(|(what, pipeline)| (*what, launch_unquiet(pipeline)))
        .collect();
    wait_for_waiting_consumers(&channel, 2, transport.limit);
    let producer = launch_unquiet(&format!(
        "videotestsrc is-live=true num-buffers=120 ! {} ! rscudaipcsink {} channel={channel}",
        transport.caps, transport.sink
    ));
    // Joins while the others hold frames and the ring has grown.
    std::thread::sleep(Duration::from_millis(1500));
    let (what, late) = &consumers[2];
    children.push((what, launch_unquiet(late)));
    producer
        .finish(transport.limit)
        .assert_success("the live producer");
    for (what, child) in children {
        let done = child.finish(transport.limit);
        assert!(
            done.code.is_some(),
            "round {round}: the '{what}' consumer died by a signal\n{}\n{}",
            done.stdout,
            done.stderr
        );
        done.assert_success(&format!("round {round}: the '{what}' consumer"));
        let frames = last_stat(&done.stdout, "frames").unwrap_or(0);
        let missed = last_stat(&done.stdout, "missed").unwrap_or(0);
        // The one without a queue is slower than the producer; those with
        // a queue may keep up where frames are copied into it (a consumer
        // copies rather than hold every slot).
        let must_miss = what == "bus stats";
        assert!(
            frames > 0 && (missed > 0 || !must_miss),
            "round {round}: the '{what}' consumer took {frames} frames and missed {missed}:\n{}",
            done.stdout
        );
    }
}

fn rounds(transport: Transport, test: &str) {
    if !transport.runs_here(test) {
        return;
    }
    let rounds = std::env::var("CUDAIPC_STRESS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    for r in 0..rounds {
        round(transport, r);
    }
}

#[test]
fn host_slow_consumers_holding_frames_end_cleanly_as_the_ring_grows_and_the_producer_ends() {
    rounds(HOST, "host_slow_consumers");
}

#[test]
fn cuda_slow_consumers_holding_frames_end_cleanly_as_the_ring_grows_and_the_producer_ends() {
    rounds(CUDA, "cuda_slow_consumers");
}
