// Helpers for tests that run pipelines in separate processes.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Folder holding libgstcudaipc.so: `$CUDAIPC_PLUGIN_DIR`, else
/// `$GST_PLUGIN_PATH` (as the GPU host's env.sh sets it), else the cargo
/// target folder this test binary was built in.
pub fn plugin_dir() -> PathBuf {
    for var in ["CUDAIPC_PLUGIN_DIR", "GST_PLUGIN_PATH"] {
        if let Some(dir) = std::env::var_os(var).filter(|d| !d.is_empty()) {
            return PathBuf::from(dir);
        }
    }
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> -> target/<profile>
    exe.parent().and_then(|p| p.parent()).unwrap().to_path_buf()
}

pub fn unique_channel(tag: &str) -> String {
    gstcudaipc::test_support::unique_channel(tag)
}

/// A `gst-launch-1.0` child whose output is collected.
pub struct Launch {
    pub child: Child,
    pub description: String,
}

pub struct Finished {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn assert_success(&self, what: &str) {
        assert!(
            self.success,
            "{what} failed\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
    }

    /// SHA-1 sums printed by checksumsink, in order.
    pub fn checksums(&self) -> Vec<String> {
        self.stdout
            .lines()
            .filter_map(|l| {
                let mut parts = l.split_whitespace();
                let time = parts.next()?;
                let sum = parts.next()?;
                (time.contains(':') && sum.len() == 40).then(|| sum.to_string())
            })
            .collect()
    }
}

/// Starts `gst-launch-1.0 -q <pipeline>` with the plugin on its path.
pub fn launch(pipeline: &str) -> Launch {
    // -v (print caps) only works without -q.
    let quiet = if pipeline.starts_with("-v") {
        None
    } else {
        Some("-q")
    };
    let child = Command::new("gst-launch-1.0")
        .args(quiet)
        .args(pipeline.split_whitespace())
        .env("GST_PLUGIN_PATH", plugin_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gst-launch-1.0 must be installed (gstreamer1.0-tools)");
    Launch {
        child,
        description: pipeline.to_string(),
    }
}

impl Launch {
    /// Waits for the child to end, killing it after `limit` (a generous
    /// bound, not a speed claim).
    pub fn finish(mut self, limit: Duration) -> Finished {
        let start = Instant::now();
        let mut killed = false;
        loop {
            if self.child.try_wait().unwrap().is_some() {
                break;
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                killed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = self.child.wait_with_output().unwrap();
        let mut stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if killed {
            stderr.push_str(&format!("\n[killed after {limit:?}: {}]", self.description));
        }
        Finished {
            success: out.status.success() && !killed,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }
}

/// Checksums of the frames a pipeline fragment produces, run in-process
/// order through `checksumsink` in a child, for comparison.
pub fn reference_checksums(source: &str) -> Vec<String> {
    let done = launch(&format!("{source} ! checksumsink")).finish(Duration::from_secs(60));
    done.assert_success("reference pipeline");
    done.checksums()
}

/// Waits until the channel's control file exists.
pub fn wait_for_channel(channel: &str, limit: Duration) -> bool {
    let path = gstcudaipc::ipc::shm::control_path(channel);
    let start = Instant::now();
    while start.elapsed() < limit {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Waits until `n` consumers wait for a producer on `channel` (they have
/// started and announced themselves), so a producer started now owes them
/// every frame from the first.
pub fn wait_for_waiting_consumers(channel: &str, n: usize, limit: Duration) {
    let start = Instant::now();
    while gstcudaipc::ipc::shm::count_live_waiters(channel) < n {
        assert!(
            start.elapsed() < limit,
            "{n} consumers did not start waiting on '{channel}' within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
