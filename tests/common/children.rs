// SPDX-License-Identifier: MPL-2.0

// Child processes: `gst-launch-1.0` pipelines (`Launch`) and pipelines run
// by the test binary itself (`PipelineChild`, whose protocol is in
// protocol.rs). Every child is killed when its handle drops, so a failed
// test leaves none running.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::protocol::{CHILD_ENTRY, Report};

/// A Rust example: in target/<profile>/examples/ as `cargo test` builds it,
/// or beside this binary where the GPU host's staging puts both.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let here = exe.parent().unwrap();
    let candidates = [
        here.parent().unwrap().join("examples").join(name),
        here.join(name),
    ];
    candidates
        .iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "{} is missing: `cargo test` builds the examples (or run `cargo build --examples`)",
                candidates[0].display()
            )
        })
        .clone()
}

/// Every child process a test starts runs through this: GLib aborts it on
/// a critical (GStreamer's failed `g_return_if_fail` checks included), so
/// a CRITICAL fails the test whatever else it checks. Criticals and
/// warnings that do not abort are caught in the child's stderr
/// (`assert_no_glib_complaints`).
pub fn checked(command: &mut Command) -> &mut Command {
    let g_debug = match std::env::var("G_DEBUG") {
        Ok(flags) if !flags.is_empty() => format!("{flags},fatal-criticals"),
        _ => "fatal-criticals".to_string(),
    };
    command.env("G_DEBUG", g_debug)
}

/// The lines of `stderr` where GLib or GStreamer logged a critical or a
/// warning (`GStreamer-CRITICAL **`, `GLib-GObject-WARNING **`, ...).
pub fn glib_complaints(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|line| {
            ["-CRITICAL **", "-WARNING **"].iter().any(|level| {
                line.find(level).is_some_and(|at| {
                    let domain = line[..at]
                        .rsplit([' ', ')', ':'])
                        .next()
                        .unwrap_or_default();
                    domain.starts_with("GStreamer") || domain.starts_with("GLib")
                })
            })
        })
        .collect()
}

/// Fails the test when `what`'s `stderr` holds a critical or a warning of
/// GLib or GStreamer: a bug of ours or of how we use them, even where the
/// process ended well.
pub fn assert_no_glib_complaints(what: &str, stderr: &str) {
    let complaints = glib_complaints(stderr);
    assert!(
        complaints.is_empty(),
        "{what}: GLib or GStreamer complained:\n{}\n--- stderr\n{stderr}",
        complaints.join("\n")
    );
}

/// Folder holding libgstcudaipc.so: `$CUDAIPC_PLUGIN_DIR`, else
/// `$GST_PLUGIN_PATH` (as the GPU host's env.sh sets it), else the cargo
/// target folder this test binary was built in.
pub fn plugin_dir() -> PathBuf {
    for var in ["CUDAIPC_PLUGIN_DIR", "GST_PLUGIN_PATH"] {
        if let Some(dir) = std::env::var_os(var).filter(|d| !d.is_empty()) {
            return PathBuf::from(dir);
        }
    }
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        // target/<profile>/deps/<test> -> target/<profile>
        let deps = exe.parent().unwrap();
        let profile = deps.parent().unwrap();
        // `cargo test` rebuilds the plugin in deps/ but copies it up only on
        // `cargo build`; deps/ holds other libraries GStreamer must not
        // scan. So the children get a folder holding a link to the fresh one.
        let built = deps.join("libgstcudaipc.so");
        if !built.exists() {
            return profile.to_path_buf();
        }
        let dir = profile.join("plugin-under-test");
        let link = dir.join("libgstcudaipc.so");
        if std::fs::read_link(&link).ok().as_deref() != Some(built.as_path()) {
            std::fs::create_dir_all(&dir).unwrap();
            let temp = dir.join(format!(".link-{}", std::process::id()));
            let _ = std::fs::remove_file(&temp);
            std::os::unix::fs::symlink(&built, &temp).unwrap();
            std::fs::rename(&temp, &link).unwrap();
        }
        dir
    })
    .clone()
}

/// A `gst-launch-1.0` child whose output is collected.
pub struct Launch {
    pub child: Child,
    pub description: String,
}

pub struct Finished {
    pub success: bool,
    /// Exit code; `None` when a signal ended the process.
    pub code: Option<i32>,
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

    /// "PTS SHA-1" lines printed by checksumsink, in order.
    pub fn checksum_lines(&self) -> Vec<String> {
        self.stdout
            .lines()
            .filter(|l| l.split_whitespace().nth(1).is_some_and(|s| s.len() == 40))
            .map(|l| l.trim().to_string())
            .collect()
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
    launch_with(&[], &[], pipeline)
}

/// Starts `gst-launch-1.0 <pipeline>` without `-q`, which also hides the
/// warnings the elements post.
pub fn launch_unquiet(pipeline: &str) -> Launch {
    spawn_launch(&[], &[], false, pipeline)
}

/// Like `launch`, with `gst-launch-1.0` run through a `wrapper` command
/// (e.g. `setpriv ...` or `unshare ...`) and with extra environment.
pub fn launch_with(wrapper: &[&str], env: &[(&str, &str)], pipeline: &str) -> Launch {
    // -v (print caps) only works without -q.
    spawn_launch(wrapper, env, !pipeline.starts_with("-v"), pipeline)
}

fn spawn_launch(wrapper: &[&str], env: &[(&str, &str)], quiet: bool, pipeline: &str) -> Launch {
    let quiet = quiet.then_some("-q");
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg("gst-launch-1.0");
            c
        }
        None => Command::new("gst-launch-1.0"),
    };
    let child = checked(&mut command)
        .args(quiet)
        .args(pipeline.split_whitespace())
        .env("GST_PLUGIN_PATH", plugin_dir())
        .envs(env.iter().copied())
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

/// Starts `program` (an example, a script) with `args` and extra
/// environment, its output collected.
pub fn start_program(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Launch {
    let child = checked(&mut Command::new(program))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
    Launch {
        child,
        description: format!("{} {}", program.display(), args.join(" ")),
    }
}

fn read_pipe(pipe: Option<impl std::io::Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

impl Launch {
    /// Waits for the child to end, killing it after `limit` (a generous
    /// bound, not a speed claim).
    pub fn finish(mut self, limit: Duration) -> Finished {
        // Read while waiting, so a chatty child never blocks on a full pipe.
        let stdout = read_pipe(self.child.stdout.take());
        let stderr = read_pipe(self.child.stderr.take());
        let start = Instant::now();
        let mut killed = false;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                killed = true;
                break self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = stderr.join().unwrap_or_default();
        assert_no_glib_complaints(&self.description, &stderr);
        if killed {
            stderr.push_str(&format!("\n[killed after {limit:?}: {}]", self.description));
        }
        Finished {
            success: status.success() && !killed,
            code: status.code(),
            stdout: stdout.join().unwrap_or_default(),
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

    /// Stops the pipeline (SIGSTOP) and returns once it is stopped, so that
    /// it writes nothing more until `signal(libc::SIGCONT)`.
    pub fn stop(&self) {
        self.signal(libc::SIGSTOP);
        super::wait_until(Duration::from_secs(20), "the pipeline stopped", || {
            super::proc_state(self.pid()) == "T"
        });
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        // A failed test must not leave pipelines running. SIGINT first, so
        // that a producer closes its channel (no stale files left in the
        // shm folder); a pipeline that does not stop in 2 s is killed. Its
        // stderr (unread if it was never finished) is checked once it
        // ended, unless the test fails already.
        let stderr = read_pipe(self.child.stderr.take());
        let stdout = read_pipe(self.child.stdout.take());
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal(libc::SIGINT);
            let deadline = Instant::now() + Duration::from_secs(2);
            while self.child.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        // A grandchild may still hold the pipes: never wait on it for long.
        let deadline = Instant::now() + Duration::from_secs(2);
        while !(stdout.is_finished() && stderr.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if stderr.is_finished() && !std::thread::panicking() {
            let stderr = stderr.join().unwrap_or_default();
            assert_no_glib_complaints(&self.description, &stderr);
        }
    }
}

/// Checksums of the frames a pipeline fragment produces, run in-process
/// order through `checksumsink` in a child, for comparison.
pub fn reference_checksums(source: &str) -> Vec<String> {
    let done = launch(&format!("{source} ! checksumsink")).finish(Duration::from_secs(60));
    done.assert_success("reference pipeline");
    done.checksums()
}

/// A pipeline run by this very test binary in a child process (re-executed
/// as `CHILD_ENTRY`), so that the elements' read-only properties (`stats`)
/// and the process's own figures can be reported. The child prints
/// `REPORT <json>` every `CUDAIPC_CHILD_REPORT_MS` and `FINAL <json>` at the
/// end; it obeys the commands `eos`, `seek` and `quit` on its stdin.
pub struct PipelineChild {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    stdout: Vec<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
    pub description: String,
}

pub struct ChildEnd {
    pub success: bool,
    /// The FINAL report, if the child got that far.
    pub report: Option<Report>,
    pub stdout: String,
    pub stderr: String,
}

impl ChildEnd {
    pub fn assert_success(&self, what: &str) {
        assert!(
            self.success,
            "{what} failed\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
    }

    pub fn checksums(&self) -> Vec<String> {
        Finished {
            success: self.success,
            code: None,
            stdout: self.stdout.clone(),
            stderr: String::new(),
        }
        .checksums()
    }
}

impl PipelineChild {
    /// `stats`: names of elements whose `stats` property is reported, as
    /// `<name>.<field>` keys.
    pub fn spawn(pipeline: &str, stats: &[&str]) -> Self {
        Self::spawn_with(pipeline, stats, &[])
    }

    pub fn spawn_with(pipeline: &str, stats: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = checked(&mut Command::new(std::env::current_exe().unwrap()))
            .args([
                CHILD_ENTRY,
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CUDAIPC_CHILD_PIPELINE", pipeline)
            .env("CUDAIPC_CHILD_STATS", stats.join(","))
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Some(read_pipe(child.stderr.take()));
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
            stdout: Vec::new(),
            stderr,
            description: pipeline.to_string(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// Sends a command line (`eos`, `seek`, `quit`).
    pub fn send(&mut self, command: &str) {
        use std::io::Write;
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = writeln!(stdin, "{command}");
            let _ = stdin.flush();
        }
    }

    /// The next REPORT line, waiting up to `limit`.
    pub fn next_report(&mut self, limit: Duration) -> Option<Report> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).ok()?;
            self.stdout.push(line.clone());
            if let Some((_, json)) = line.split_once("REPORT ") {
                return Report::parse(json);
            }
        }
    }

    /// The newest REPORT printed so far, without waiting.
    pub fn latest_report(&mut self) -> Option<Report> {
        let mut latest = None;
        while let Ok(line) = self.lines.try_recv() {
            if let Some(r) = line
                .split_once("REPORT ")
                .and_then(|(_, j)| Report::parse(j))
            {
                latest = Some(r);
            }
            self.stdout.push(line);
        }
        latest
    }

    /// Waits for a report for which `cond` holds; fails the test after
    /// `limit` with `what`.
    pub fn wait_report(
        &mut self,
        limit: Duration,
        what: &str,
        mut cond: impl FnMut(&Report) -> bool,
    ) -> Report {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_report(left) {
                Some(r) if cond(&r) => return r,
                Some(_) => {}
                None => panic!(
                    "{what}: not seen within {limit:?} ({})\n--- stdout so far\n{}",
                    self.description,
                    self.stdout.join("\n")
                ),
            }
        }
    }

    /// Waits for the child to end (killing it after `limit`).
    pub fn finish(mut self, limit: Duration) -> ChildEnd {
        let deadline = Instant::now() + limit;
        let mut killed = false;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                killed = true;
                break self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        drop(self.stdin.take());
        // The reader thread ends with the pipe.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.stdout.push(line);
        }
        let mut stderr = self
            .stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        assert_no_glib_complaints(&self.description, &stderr);
        if killed {
            stderr.push_str(&format!("\n[killed after {limit:?}: {}]", self.description));
        }
        let report = self
            .stdout
            .iter()
            .rev()
            .find_map(|l| l.split_once("FINAL ").map(|(_, j)| j))
            .and_then(Report::parse);
        ChildEnd {
            success: status.success() && !killed,
            report,
            stdout: self.stdout.join("\n"),
            stderr,
        }
    }
}

impl Drop for PipelineChild {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
