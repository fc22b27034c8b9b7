// SPDX-License-Identifier: MPL-2.0

// Consumers of a descriptor channel killed at any moment, over many cycles,
// for the tests that check that a producer keeps nothing of them (host
// transport in CI, cuda on the GPU host).

use std::time::Duration;

use super::children::{Launch, launch_with};
use super::users::ShmDir;

const LIMIT: Duration = Duration::from_secs(60);

/// How the cycles run: the producer's pipeline (a descriptor channel named
/// `channel` in `dir`), how long the warm-up consumer lives, and when each
/// consumer is killed: `first_kill_ms + (cycle * step_ms) % spread_ms`
/// after its start, from before it connects to well after it attached.
pub struct KillCycles<'a> {
    pub dir: &'a ShmDir,
    pub channel: &'a str,
    pub producer: String,
    pub cycles: u64,
    pub warm_ms: u64,
    pub first_kill_ms: u64,
    pub step_ms: u64,
    pub spread_ms: u64,
}

impl KillCycles<'_> {
    /// Starts the producer, kills one warm-up consumer (so that what is made
    /// lazily exists), takes `measure` of the producer's process, runs the
    /// cycles, waits for the producer's connection threads to end (their
    /// timeout is 2 s) and takes `measure` again: (before, after). Then a
    /// last consumer must still read 20 frames.
    pub fn run<M>(&self, measure: impl Fn(u32) -> M) -> (M, M) {
        let producer = launch_with(&[], &self.dir.env(), &self.producer);
        let socket = self.dir.0.join(format!("cudaipc-{}@socket", self.channel));
        super::wait_until(LIMIT, "the channel's socket", || socket.exists());
        let consumer = |extra: &str| {
            launch_with(
                &[],
                &self.dir.env(),
                &format!(
                    "rscudaipcsrc channel={} ipc-mode=fd is-live=true connect-timeout=5000 {extra} ! fakesink",
                    self.channel
                ),
            )
        };
        let kill = |c: Launch, after: u64| {
            std::thread::sleep(Duration::from_millis(after));
            c.signal(libc::SIGKILL);
        };
        kill(consumer(""), self.warm_ms);
        std::thread::sleep(Duration::from_millis(self.warm_ms.min(1000)));
        let before = measure(producer.pid());
        for cycle in 0..self.cycles {
            kill(
                consumer(""),
                self.first_kill_ms + (cycle * self.step_ms) % self.spread_ms,
            );
        }
        std::thread::sleep(Duration::from_secs(3));
        let after = measure(producer.pid());
        let last = consumer("num-buffers=20").finish(LIMIT);
        producer.signal(libc::SIGINT);
        let _ = producer.finish(LIMIT);
        assert!(last.success, "{}", last.stderr);
        (before, after)
    }
}
