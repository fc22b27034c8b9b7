// SPDX-License-Identifier: MPL-2.0

//! Child processes that rows 9 and 14 run many of at once: their output
//! read as it comes, their input kept to step them, all of them waited for
//! with one limit.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::measure::{Child, parse_result};

/// A child process of rows 9 and 14, its output read as it comes (a
/// consumer's `READY` is passed on at once) and its input kept to step it
/// (`Control`).
pub struct Proc {
    what: String,
    process: std::process::Child,
    input: Option<std::process::ChildStdin>,
    output: std::thread::JoinHandle<String>,
    errors: std::thread::JoinHandle<String>,
}

/// A child's `RESULT` fields, or why it has none.
pub type ChildResult = Result<BTreeMap<String, String>, String>;

/// What the output of a `Proc` (its index) said.
pub enum ProcEvent {
    Ready(usize),
    Gone(usize),
}

impl Proc {
    pub fn start(
        what: String,
        child: &Child,
        env: &[(String, String)],
        index: usize,
        events: &std::sync::mpsc::Sender<ProcEvent>,
    ) -> Result<Proc, String> {
        use std::io::{BufRead, Read};
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut process = Command::new(exe)
            .args([
                "--role",
                child.role,
                &child.warmup.to_string(),
                &child.pipeline,
            ])
            .envs(env.iter().cloned())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {what}: {e}"))?;
        let (Some(stdout), Some(mut stderr)) = (process.stdout.take(), process.stderr.take())
        else {
            let _ = process.kill();
            let _ = process.wait();
            return Err(format!("{what}: no output pipes"));
        };
        let events = events.clone();
        let output = std::thread::spawn(move || {
            let mut text = String::new();
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line == "READY" {
                    let _ = events.send(ProcEvent::Ready(index));
                }
                text.push_str(&line);
                text.push('\n');
            }
            let _ = events.send(ProcEvent::Gone(index));
            text
        });
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Ok(Proc {
            what,
            input: process.stdin.take(),
            process,
            output,
            errors,
        })
    }

    pub fn say(&mut self, line: &str) {
        use std::io::Write;
        if let Some(input) = self.input.as_mut() {
            // A process that has ended already reads nothing: no matter.
            let _ = writeln!(input, "{line}");
        }
    }

    /// The end of its input: a stepped process ends its stream.
    pub fn close_input(&mut self) {
        self.input = None;
    }
}

/// Waits for each process until `limit` from now, kills those still
/// running then (through their handles: by their own pid, not yet reaped),
/// and reads their `RESULT` lines. The bool says whether any was killed.
pub fn finish_all(mut procs: Vec<Proc>, limit: Duration) -> (Vec<ChildResult>, bool) {
    let deadline = Instant::now() + limit;
    let mut statuses: Vec<Option<std::process::ExitStatus>> = vec![None; procs.len()];
    let mut killed = false;
    loop {
        for (proc, status) in procs.iter_mut().zip(statuses.iter_mut()) {
            if status.is_none()
                && let Ok(Some(exited)) = proc.process.try_wait()
            {
                *status = Some(exited);
            }
        }
        if statuses.iter().all(Option::is_some) {
            break;
        }
        if Instant::now() > deadline {
            for (proc, status) in procs.iter_mut().zip(statuses.iter_mut()) {
                if status.is_none() {
                    let _ = proc.process.kill();
                    *status = proc.process.wait().ok();
                    killed = true;
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let results = procs
        .into_iter()
        .zip(statuses)
        .map(|(proc, status)| {
            let stdout = proc.output.join().unwrap_or_default();
            let stderr = proc.errors.join().unwrap_or_default();
            let success = status.is_some_and(|s| s.success());
            let status = status.map_or("not waited for".to_string(), |s| s.to_string());
            parse_result(&proc.what, success, &status, &stdout, &stderr)
        })
        .collect();
    (results, killed)
}

/// Starts `children` together and waits for them (at most `limit`): their
/// `RESULT` fields in order, or every error met.
pub fn run_together(
    children: Vec<(String, Child)>,
    env: &[(String, String)],
    limit: Duration,
) -> Result<Vec<BTreeMap<String, String>>, String> {
    let (events, _) = std::sync::mpsc::channel();
    let mut procs = Vec::new();
    let mut errors = Vec::new();
    let count = children.len();
    for (index, (what, child)) in children.into_iter().enumerate() {
        match Proc::start(what, &child, env, index, &events) {
            Ok(proc) => procs.push(proc),
            Err(e) => {
                errors.push(e);
                break;
            }
        }
    }
    let limit = if errors.is_empty() {
        limit
    } else {
        Duration::ZERO
    };
    let (results, killed) = finish_all(procs, limit);
    if killed {
        errors.push(format!("killed after {} s", limit.as_secs()));
    }
    errors.extend(results.iter().filter_map(|r| r.as_ref().err().cloned()));
    if !errors.is_empty() || results.len() != count {
        return Err(errors.join(" / "));
    }
    Ok(results.into_iter().flatten().collect())
}
