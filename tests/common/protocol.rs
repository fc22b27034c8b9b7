// SPDX-License-Identifier: MPL-2.0

// The protocol between a test and its `PipelineChild`: the entry point the
// child runs, its `REPORT`/`FINAL` lines of flat JSON, and the commands it
// takes on stdin.

use super::proc::{proc_fds, proc_rss_kb};

/// Name of the ignored test that every test binary using `PipelineChild`
/// defines as `fn child_pipeline() { common::child_pipeline_main() }`.
pub const CHILD_ENTRY: &str = "child_pipeline";

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
    super::init();
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
                &[
                    gst::MessageType::Eos,
                    gst::MessageType::Error,
                    gst::MessageType::Warning,
                ],
            );
            match msg.as_ref().map(|m| m.view()) {
                Some(gst::MessageView::Eos(_)) => break ("eos", String::new()),
                Some(gst::MessageView::Warning(w)) => {
                    eprintln!("WARNING: {} ({:?})", w.error(), w.debug());
                }
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
