// SPDX-License-Identifier: MPL-2.0

// Two network namespaces joined by a veth pair, standing for two hosts for
// the UCX bridge's tests, and the `cudaipc-bridge` processes run in them.
// The tests send only to the two addresses given here, inside namespaces
// made here, and remove the namespaces when done (the veth goes with them).

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::checked;
use super::netns::NamespacePair;

/// Host A's and host B's addresses on the veth pair.
pub const ADDRESS_A: &str = "10.213.0.1";
pub const ADDRESS_B: &str = "10.213.0.2";
/// The receiver's port on host B.
pub const BRIDGE_PORT: u16 = 13337;

/// Host A and host B: namespaces of `netns.rs`, with the bridge's checks.
pub struct TwoHosts(NamespacePair);

impl std::ops::Deref for TwoHosts {
    type Target = NamespacePair;
    fn deref(&self) -> &NamespacePair {
        &self.0
    }
}

impl TwoHosts {
    /// `None`, after a `SKIPPED` line for `test`, where network namespaces
    /// cannot be made (not root, no iproute2) or UCX is missing.
    pub fn new(test: &str) -> Option<Self> {
        if std::env::var_os("CUDAIPC_EXPECT_GST").is_some() {
            // The bridge links no GStreamer: its test runs once, on the
            // system's GStreamer, not again for each runtime.
            eprintln!("SKIPPED: {test}: the bridge runs on the system GStreamer only");
            return None;
        }
        let version = Command::new(bridge_binary()).arg("version").output();
        if !version.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("SKIPPED: {test}: cudaipc-bridge cannot run here: {version:?}");
            return None;
        }
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = std::process::id() % 100_000 * 100 + NEXT.fetch_add(1, Ordering::SeqCst);
        match NamespacePair::new("cudaipc", "ci", n, [ADDRESS_A, ADDRESS_B]) {
            Ok(pair) => Some(Self(pair)),
            Err(why) => {
                eprintln!("SKIPPED: {test}: {why}");
                None
            }
        }
    }
}

/// `cudaipc-bridge`, where this test binary runs (a host where it is not
/// built skips the bridge's tests).
pub fn bridge_binary() -> PathBuf {
    super::workspace_binary_path("cudaipc-bridge")
}

/// A `cudaipc-bridge` process on one host, its output collected as it
/// comes; killed (after SIGINT) when dropped.
pub struct BridgeProcess {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    pub description: String,
}

impl BridgeProcess {
    pub fn start(on: &[&str], env: &[(&str, &str)], args: &[&str]) -> Self {
        let binary = bridge_binary();
        let mut command = Command::new(on[0]);
        command.args(&on[1..]).arg(&binary).args(args);
        let mut child = checked(&mut command)
            .env("UCX_TLS", "tcp")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ip (iproute2) runs the bridge");
        let (tx, lines) = mpsc::channel();
        for pipe in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Self {
            child,
            lines,
            seen: Vec::new(),
            description: format!("cudaipc-bridge {}", args.join(" ")),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits until a line containing `text` was printed; fails the test
    /// after `limit`, showing everything printed so far.
    pub fn wait_for(&mut self, text: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.seen.iter().any(|l| l.contains(text)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!(
                    "{}: {text:?} not printed within {limit:?}:\n{}",
                    self.description,
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// The exit code once it ended within `limit` (`None`: killed by a
    /// signal), and everything it printed.
    pub fn finish(mut self, limit: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not end within {limit:?}:\n{}",
                self.description,
                self.seen.join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(line);
        }
        (status.code(), self.seen.join("\n"))
    }

    /// Everything printed so far.
    pub fn output(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }
}

impl Drop for BridgeProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(3);
            while self.child.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    self.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let output = self.output();
        if !std::thread::panicking() {
            assert!(
                !output.contains("panicked"),
                "{}:\n{output}",
                self.description
            );
        }
    }
}
