// SPDX-License-Identifier: MPL-2.0

//! `cudaipc-channels watch`: one line per channel and per consumer,
//! refreshed every interval, read from the control blocks this user may
//! read and never written to. `--once` prints one snapshot (rates over one
//! interval) and ends; `--json` prints JSON (one object per line).

use std::io::{IsTerminal, Write};
use std::time::Duration;

use crate::channels::watch::{self, ChannelView, ConsumerView};
use crate::channels::{self as directory, ChannelState};

use crate::interrupt::{end_on_interrupt, sleep_unless_interrupted};

pub const USAGE: &str =
    "cudaipc-channels watch [--once] [--json] [--interval SECONDS] [CHANNEL...]";

struct Options {
    once: bool,
    json: bool,
    interval: Duration,
    channels: Vec<String>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        once: false,
        json: false,
        interval: Duration::from_secs(1),
        channels: Vec::new(),
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--once" => options.once = true,
            "--json" => options.json = true,
            "--interval" => {
                let value = args.next().ok_or("--interval needs a number of seconds")?;
                let seconds: f64 = value
                    .parse()
                    .ok()
                    .filter(|s: &f64| (0.1..=3600.0).contains(s))
                    .ok_or_else(|| format!("--interval {value:?}: seconds from 0.1 to 3600"))?;
                options.interval = Duration::from_secs_f64(seconds);
            }
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag:?}")),
            name => {
                directory::validate_channel_name(name).map_err(|e| format!("{name:?}: {e}"))?;
                options.channels.push(name.to_owned());
            }
        }
    }
    Ok(options)
}

pub fn run(args: &[String]) -> i32 {
    let options = match parse(args) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("{e}\nusage: {USAGE}");
            return 2;
        }
    };
    end_on_interrupt();
    let clear = !options.once && !options.json && std::io::stdout().is_terminal();
    let mut before = watch::sample(&options.channels);
    while sleep_unless_interrupted(options.interval) {
        let after = watch::sample(&options.channels);
        let views = watch::compare(&before, &after);
        let text = match options.json {
            true => json(&views) + "\n",
            false => table(&views, options.interval, options.once),
        };
        let mut out = std::io::stdout().lock();
        let shown = match clear {
            // Home and clear: the view stays in place.
            true => write!(out, "\x1b[H\x1b[2J{text}"),
            false => write!(
                out,
                "{text}{}",
                if options.once || options.json {
                    ""
                } else {
                    "\n"
                }
            ),
        };
        // A closed pipe (`| head`) ends the watch.
        if shown.and_then(|_| out.flush()).is_err() || options.once {
            break;
        }
        before = after;
    }
    0
}

fn rate(rate: Option<f64>) -> String {
    rate.map_or_else(|| "-".into(), |r| format!("{r:.1}"))
}

fn state(state: &ChannelState) -> &'static str {
    match state {
        ChannelState::Live => "live",
        ChannelState::Stale => "stale",
        ChannelState::Unreadable(_) => "?",
    }
}

/// What the consumer does to the producer, in a word or two.
fn pace(c: &ConsumerView) -> &'static str {
    match (c.holds_producer_back, c.now.starting, c.now.producer_waits) {
        (true, _, _) => "HOLDS BACK",
        (false, true, _) => "starting",
        (false, false, true) => "waited for",
        (false, false, false) => "own pace",
    }
}

/// The view; `once`: a single snapshot (no "Ctrl-C ends": it ends by
/// itself).
fn table(views: &[ChannelView], interval: Duration, once: bool) -> String {
    let mut out = format!(
        "channels in {}, rates over {:.1} s{}\n",
        directory::shm_dir().display(),
        interval.as_secs_f64(),
        if once { "" } else { " (Ctrl-C ends)" }
    );
    if views.is_empty() {
        out += "no channels\n";
        return out;
    }
    out += &format!(
        "{:<24} {:<6} {:>8} {:<9} {:<4} {:>8} {:>10} {:>8} {:>10}\n",
        "CHANNEL", "STATE", "PID", "TRANSPORT", "LIVE", "FPS", "FRAMES", "DROPPED", "SLOTS-HELD"
    );
    for v in views {
        let c = &v.now;
        out += &format!(
            "{:<24} {:<6} {:>8} {:<9} {:<4} {:>8} {:>10} {:>8} {:>10}\n",
            c.entry.name,
            state(&c.entry.state),
            c.entry.producer_pid,
            c.entry.transport,
            if c.live { "yes" } else { "no" },
            rate(v.rate),
            c.frames_published,
            c.frames_dropped,
            format!("{}/{}", c.slots_held, c.entry.slot_count),
        );
        if let ChannelState::Unreadable(why) = &c.entry.state {
            out += &format!("  {why}\n");
        }
        if !v.consumers.is_empty() {
            out += &format!(
                "  {:>8} {:<6} {:>4} {:>8} {:>10} {:>8} {:>6} {:>4}  {}\n",
                "CONSUMER", "MODE", "HOLD", "FPS", "FRAMES", "MISSED", "BEHIND", "HELD", "PRODUCER"
            );
        }
        for consumer in &v.consumers {
            let n = &consumer.now;
            out += &format!(
                "  {:>8} {:<6} {:>4} {:>8} {:>10} {:>8} {:>6} {:>4}  {}\n",
                n.pid,
                n.mode,
                n.hold.map_or_else(|| "-".into(), |h| h.to_string()),
                rate(consumer.rate),
                n.frames_received,
                n.frames_missed,
                n.behind,
                n.slots_held,
                pace(consumer),
            );
        }
    }
    out
}

/// `s` as a JSON string.
fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out += "\\\"",
            '\\' => out += "\\\\",
            c if (c as u32) < 0x20 => out += &format!("\\u{:04x}", c as u32),
            c => out.push(c),
        }
    }
    out + "\""
}

fn number(value: Option<f64>) -> String {
    value.map_or_else(|| "null".into(), |v| format!("{v:.3}"))
}

fn json(views: &[ChannelView]) -> String {
    let channels: Vec<String> = views
        .iter()
        .map(|v| {
            let c = &v.now;
            let consumers: Vec<String> = v
                .consumers
                .iter()
                .map(|consumer| {
                    let n = &consumer.now;
                    format!(
                        "{{\"pid\":{},\"mode\":{},\"hold\":{},\"fps\":{},\"frames\":{},\"missed\":{},\"missed_in_interval\":{},\"behind\":{},\"slots_held\":{},\"starting\":{},\"producer_waits\":{},\"holds_producer_back\":{}}}",
                        n.pid,
                        quoted(n.mode),
                        n.hold.map_or_else(|| "null".into(), |h| h.to_string()),
                        number(consumer.rate),
                        n.frames_received,
                        n.frames_missed,
                        consumer.missed.map_or_else(|| "null".into(), |m| m.to_string()),
                        n.behind,
                        n.slots_held,
                        n.starting,
                        n.producer_waits,
                        consumer.holds_producer_back,
                    )
                })
                .collect();
            let unreadable = match &c.entry.state {
                ChannelState::Unreadable(why) => quoted(why),
                _ => "null".into(),
            };
            format!(
                "{{\"channel\":{},\"state\":{},\"unreadable\":{},\"producer_pid\":{},\"transport\":{},\"live\":{},\"fps\":{},\"frames\":{},\"dropped\":{},\"slots\":{},\"slots_held\":{},\"consumers\":[{}]}}",
                quoted(&c.entry.name),
                quoted(state(&c.entry.state)),
                unreadable,
                c.entry.producer_pid,
                quoted(c.entry.transport),
                c.live,
                number(v.rate),
                c.frames_published,
                c.frames_dropped,
                c.entry.slot_count,
                c.slots_held,
                consumers.join(","),
            )
        })
        .collect();
    format!(
        "{{\"shm_dir\":{},\"channels\":[{}]}}",
        quoted(&directory::shm_dir().to_string_lossy()),
        channels.join(",")
    )
}
