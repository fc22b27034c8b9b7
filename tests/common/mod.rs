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

/// Like `launch`, with `gst-launch-1.0` run through a `wrapper` command
/// (e.g. `setpriv ...` or `unshare ...`) and with extra environment.
pub fn launch_with(wrapper: &[&str], env: &[(&str, &str)], pipeline: &str) -> Launch {
    // -v (print caps) only works without -q.
    let quiet = if pipeline.starts_with("-v") {
        None
    } else {
        Some("-q")
    };
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg("gst-launch-1.0");
            c
        }
        None => Command::new("gst-launch-1.0"),
    };
    let child = command
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
}

impl Drop for Launch {
    fn drop(&mut self) {
        // A failed test must not leave pipelines running.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
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

/// Reproducible pseudo-random bytes.
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Every sample of the in-process pipeline `description` (ending in
/// `appsink name=sink`), in order; fails the test on a pipeline error.
pub fn samples(description: &str) -> Vec<gst::Sample> {
    samples_probed(description, |_| {})
}

/// Like `samples`; `inspect` sees every buffer that leaves the element named
/// `probe`, if there is one.
pub fn samples_probed(
    description: &str,
    inspect: impl Fn(&gst::BufferRef) + Send + Sync + 'static,
) -> Vec<gst::Sample> {
    use gst::prelude::*;
    let pipeline = gst::parse::launch(description)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    if let Some(probed) = pipeline.by_name("probe") {
        probed
            .static_pad("src")
            .unwrap()
            .add_probe(gst::PadProbeType::BUFFER, move |_, info| {
                if let Some(buffer) = info.buffer() {
                    inspect(buffer);
                }
                gst::PadProbeReturn::Ok
            });
    }
    let sink = pipeline
        .by_name("sink")
        .unwrap()
        .downcast::<gst_app::AppSink>()
        .unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let mut out = Vec::new();
    while let Ok(sample) = sink.pull_sample() {
        out.push(sample);
    }
    let bus = pipeline.bus().unwrap();
    let error = bus.pop_filtered(&[gst::MessageType::Error]);
    pipeline.set_state(gst::State::Null).unwrap();
    if let Some(message) = error
        && let gst::MessageView::Error(e) = message.view()
    {
        panic!("{description}: {} ({:?})", e.error(), e.debug());
    }
    out
}

/// Waits until `cond` holds, failing the test with `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what} (waited {limit:?})");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What each thread of a process is doing (state and kernel wait channel),
/// for the message of a test that found it stuck.
pub fn proc_threads(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("process {pid} is gone");
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let dir = task.path();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        let comm = read("comm");
        let state = read("stat")
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next().map(str::to_string))
            .unwrap_or_default();
        out.push(format!(
            "{}:{} {} {}",
            task.file_name().to_string_lossy(),
            comm.trim(),
            state,
            read("wchan")
        ));
    }
    out.join("; ")
}

/// Open file descriptors of a process.
pub fn proc_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Resident memory of a process, in KiB.
pub fn proc_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The memory mappings of a process (/proc/PID/maps).
pub fn proc_maps(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default()
}

/// Names of the host data files of `channel` in the shm folder.
pub fn data_files(channel: &str) -> Vec<String> {
    let prefix = format!("cudaipc-{channel}.");
    let mut names: Vec<String> = std::fs::read_dir(gstcudaipc::ipc::shm::shm_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    names.sort();
    names
}

/// One line of flat JSON (`{"key": number | "string" | bool, ...}`), as the
/// child pipelines print their statistics.
#[derive(Debug, Clone, Default)]
pub struct Report(pub std::collections::BTreeMap<String, String>);

impl Report {
    pub fn parse(line: &str) -> Option<Self> {
        let body = line.trim().strip_prefix('{')?.strip_suffix('}')?;
        let mut map = std::collections::BTreeMap::new();
        let mut chars = body.chars().peekable();
        let read_string = |chars: &mut std::iter::Peekable<std::str::Chars>| {
            let mut out = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '"' => return Some(out),
                    '\\' => match chars.next()? {
                        'n' => out.push('\n'),
                        c => out.push(c),
                    },
                    c => out.push(c),
                }
            }
            None
        };
        loop {
            while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
                chars.next();
            }
            match chars.next() {
                None => break,
                Some('"') => {}
                Some(_) => return None,
            }
            let key = read_string(&mut chars)?;
            while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ':') {
                chars.next();
            }
            let value = if chars.peek() == Some(&'"') {
                chars.next();
                read_string(&mut chars)?
            } else {
                let mut v = String::new();
                while let Some(&c) = chars.peek() {
                    if c == ',' {
                        break;
                    }
                    v.push(c);
                    chars.next();
                }
                v.trim().to_string()
            };
            map.insert(key, value);
        }
        Some(Self(map))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// A numeric field; panics with the whole report when it is missing.
    pub fn num(&self, key: &str) -> u64 {
        self.get(key)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no numeric {key:?} in {:?}", self.0)) as u64
    }
}

/// Name of the ignored test that every test binary using `PipelineChild`
/// defines as `fn child_pipeline() { common::child_pipeline_main() }`.
pub const CHILD_ENTRY: &str = "child_pipeline";

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
        let mut child = Command::new(std::env::current_exe().unwrap())
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

/// The child side of `PipelineChild`: call from the ignored test
/// `CHILD_ENTRY` of the test binary.
pub fn child_pipeline_main() {
    use gst::prelude::*;
    use std::io::Write;
    let Ok(description) = std::env::var("CUDAIPC_CHILD_PIPELINE") else {
        panic!("entry point of PipelineChild; run through it");
    };
    let stats: Vec<String> = std::env::var("CUDAIPC_CHILD_STATS")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let period = std::env::var("CUDAIPC_CHILD_REPORT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100u64);
    // The test harness has printed "test NAME ... " without a newline.
    println!();
    gst::init().unwrap();
    gstcudaipc::plugin_register_static().unwrap();
    let pipeline = gst::parse::launch(&description)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    let (tx, commands) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line.trim().to_string()).is_err() {
                return;
            }
        }
        let _ = tx.send("quit".into());
    });
    let report = |state: &str, error: &str| {
        let mut fields = vec![
            format!("\"state\":{}", json_string(state)),
            format!("\"error\":{}", json_string(error)),
            format!("\"pid\":{}", std::process::id()),
            format!("\"fds\":{}", proc_fds(std::process::id())),
            format!("\"rss_kb\":{}", proc_rss_kb(std::process::id())),
        ];
        for name in &stats {
            let Some(element) = pipeline.by_name(name) else {
                continue;
            };
            let s = element.property::<gst::Structure>("stats");
            for (field, value) in s.iter() {
                let v = if let Ok(v) = value.get::<u64>() {
                    v.to_string()
                } else if let Ok(v) = value.get::<u32>() {
                    v.to_string()
                } else if let Ok(v) = value.get::<i64>() {
                    v.to_string()
                } else if let Ok(v) = value.get::<i32>() {
                    v.to_string()
                } else if let Ok(v) = value.get::<f64>() {
                    v.to_string()
                } else if let Ok(v) = value.get::<bool>() {
                    v.to_string()
                } else if let Ok(v) = value.get::<String>() {
                    json_string(&v)
                } else {
                    json_string(&format!("{value:?}"))
                };
                fields.push(format!("{}:{v}", json_string(&format!("{name}.{field}"))));
            }
        }
        format!("{{{}}}", fields.join(","))
    };
    let bus = pipeline.bus().unwrap();
    let (state, error) = match pipeline.set_state(gst::State::Playing) {
        Err(_) => match bus
            .timed_pop_filtered(gst::ClockTime::from_seconds(1), &[gst::MessageType::Error])
        {
            Some(msg) => match msg.view() {
                gst::MessageView::Error(e) => ("error", e.error().to_string()),
                _ => unreachable!(),
            },
            None => ("error", "cannot start the pipeline".to_string()),
        },
        Ok(_) => loop {
            let msg = bus.timed_pop_filtered(
                gst::ClockTime::from_mseconds(period),
                &[gst::MessageType::Eos, gst::MessageType::Error],
            );
            match msg.as_ref().map(|m| m.view()) {
                Some(gst::MessageView::Eos(_)) => break ("eos", String::new()),
                Some(gst::MessageView::Error(e)) => {
                    let text = format!("{} ({:?})", e.error(), e.debug());
                    eprintln!("ERROR: {text}");
                    break ("error", text);
                }
                _ => {}
            }
            println!("REPORT {}", report("running", ""));
            let mut quit = false;
            while let Ok(command) = commands.try_recv() {
                match command.as_str() {
                    "eos" => {
                        pipeline.send_event(gst::event::Eos::new());
                    }
                    "seek" => {
                        let _ = pipeline.seek_simple(
                            gst::SeekFlags::FLUSH | gst::SeekFlags::ACCURATE,
                            gst::ClockTime::ZERO,
                        );
                    }
                    "quit" => quit = true,
                    other => eprintln!("unknown command {other:?}"),
                }
            }
            if quit {
                break ("stopped", String::new());
            }
        },
    };
    if state == "stopped" {
        // Paused, the sinks render nothing more: the report is the last word.
        let _ = pipeline.set_state(gst::State::Paused);
    }
    let last = report(state, &error);
    pipeline.set_state(gst::State::Null).unwrap();
    println!("FINAL {last}");
    std::io::stdout().flush().unwrap();
    std::process::exit(if state == "error" { 1 } else { 0 });
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
