// SPDX-License-Identifier: MPL-2.0

//! The command line: what each command takes, checked before anything
//! starts, and the exit codes (0 stopped, 1 failed, 2 a wrong command).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cudaipc_channel::ConsumerMode;
use cudaipc_transport::TransportKind;

use crate::auth::{Admission, Secret};
use crate::receive::{self, ReceiveOptions};
use crate::send::{self, SendOptions};

const USAGE: &str = "usage: cudaipc-bridge receive --listen ADDRESS:PORT --channel NAME (--allow IP[,IP...] | --secret-file FILE)\n\
\x20                             [--transport auto|cuda|host] [--device N] [--patience SECONDS]\n\
\x20                             [--frame-data-size BYTES] [--wait-for-connection N]\n\
\x20      cudaipc-bridge send --to ADDRESS:PORT --channel NAME [--frames auto|every|latest] [--secret-file FILE] [--patience SECONDS]\n\
\x20      cudaipc-bridge version\n\
The receiver accepts only the senders it is told: addresses (--allow) and/or those that prove the\n\
shared secret in FILE (mode 600). UCX picks the network: UCX_TLS narrows it (docs/scaling.md).";

/// Raised by SIGINT and SIGTERM: the bridge closes its channel and ends.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

pub fn main(args: Vec<String>) -> i32 {
    let result = match args.first().map(String::as_str) {
        Some("receive") => parse_receive(&args[1..]).map(Command::Receive),
        Some("send") => parse_send(&args[1..]).map(Command::Send),
        Some("version") => Ok(Command::Version),
        Some("-h" | "--help") => {
            println!("{USAGE}");
            return 0;
        }
        Some(other) => Err(format!("unknown command {other:?}")),
        None => Err("no command".into()),
    };
    let command = match result {
        Ok(command) => command,
        Err(why) => {
            eprintln!("cudaipc-bridge: {why}\n{USAGE}");
            return 2;
        }
    };
    if let Err(e) = cudaipc_ucx::version() {
        eprintln!("cudaipc-bridge: {e}");
        return 1;
    }
    if std::env::var_os("UCX_TCP_CM_REUSEADDR").is_none() {
        // A receiver started again on its port must not wait a minute for
        // the former connections' TIME_WAIT.
        // SAFETY: set before any thread is started (single-threaded here).
        unsafe { std::env::set_var("UCX_TCP_CM_REUSEADDR", "y") };
    }
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe.
        unsafe { libc::signal(signal, on_signal as *const () as libc::sighandler_t) };
    }
    let outcome = match command {
        Command::Version => {
            println!(
                "cudaipc-bridge {} on UCX {}",
                env!("CARGO_PKG_VERSION"),
                cudaipc_ucx::version().unwrap_or_default()
            );
            Ok(())
        }
        Command::Receive(options) => receive::run(&options, &STOP),
        Command::Send(options) => send::run(&options, &STOP),
    };
    match outcome {
        Ok(()) => 0,
        Err(why) => {
            eprintln!("cudaipc-bridge: {why}");
            1
        }
    }
}

enum Command {
    Receive(ReceiveOptions),
    Send(SendOptions),
    Version,
}

/// `--name value` pairs; a flag given twice or without a value is an error.
fn pairs(args: &[String], known: &[&str]) -> Result<Vec<(String, String)>, String> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut it = args.iter();
    while let Some(name) = it.next() {
        if !known.contains(&name.as_str()) {
            return Err(format!("unknown option {name:?}"));
        }
        let value = it.next().ok_or_else(|| format!("{name} needs a value"))?;
        if pairs.iter().any(|(n, _)| n == name) {
            return Err(format!("{name} given twice"));
        }
        pairs.push((name.clone(), value.clone()));
    }
    Ok(pairs)
}

fn get<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn address(value: &str, what: &str) -> Result<SocketAddr, String> {
    value
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("{what} {value:?} is not ADDRESS:PORT"))
}

fn channel(pairs: &[(String, String)]) -> Result<String, String> {
    let name = get(pairs, "--channel").ok_or("--channel is needed")?;
    cudaipc_channel::shm::validate_channel_name(name).map_err(|e| e.to_string())?;
    Ok(name.to_owned())
}

fn patience(pairs: &[(String, String)]) -> Result<Duration, String> {
    let Some(value) = get(pairs, "--patience") else {
        return Ok(Duration::from_secs(3));
    };
    match value.parse::<f64>() {
        Ok(s) if (0.5..=3600.0).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("--patience {value:?}: seconds from 0.5 to 3600")),
    }
}

fn secret(pairs: &[(String, String)]) -> Result<Option<Secret>, String> {
    get(pairs, "--secret-file")
        .map(|path| Secret::read(Path::new(path)))
        .transpose()
}

fn parse_receive(args: &[String]) -> Result<ReceiveOptions, String> {
    let known = [
        "--listen",
        "--channel",
        "--allow",
        "--secret-file",
        "--transport",
        "--device",
        "--patience",
        "--frame-data-size",
        "--wait-for-connection",
    ];
    let pairs = pairs(args, &known)?;
    let listen = address(
        get(&pairs, "--listen").ok_or("--listen is needed")?,
        "--listen",
    )?;
    let allow = match get(&pairs, "--allow") {
        None => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|ip| {
                ip.trim()
                    .parse::<IpAddr>()
                    .map_err(|_| format!("--allow: {ip:?} is not an IP address"))
            })
            .collect::<Result<_, _>>()?,
    };
    let admission = Admission {
        allow,
        secret: secret(&pairs)?,
    };
    if admission.allow.is_empty() && admission.secret.is_none() {
        return Err(
            "say which senders to accept: --allow IP[,IP...] and/or --secret-file FILE".into(),
        );
    }
    let transport = match get(&pairs, "--transport") {
        None | Some("auto") => None,
        Some("cuda") => Some(TransportKind::Cuda),
        Some("host") => Some(TransportKind::Host),
        Some(other) => return Err(format!("--transport {other:?}: auto, cuda or host")),
    };
    let device = match get(&pairs, "--device") {
        None => 0,
        Some(v) => v
            .parse::<i32>()
            .ok()
            .filter(|d| *d >= 0)
            .ok_or_else(|| format!("--device {v:?}: a CUDA device number"))?,
    };
    let frame_data_bound = match get(&pairs, "--frame-data-size") {
        None => cudaipc_channel::layout::DEFAULT_FRAME_DATA_BOUND,
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= cudaipc_channel::layout::MAX_FRAME_DATA_BOUND)
            .ok_or_else(|| {
                format!(
                    "--frame-data-size {v:?}: bytes from 0 to {}",
                    cudaipc_channel::layout::MAX_FRAME_DATA_BOUND
                )
            })?,
    };
    let wait_for_consumers = match get(&pairs, "--wait-for-connection") {
        None => 0,
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= 32)
            .ok_or_else(|| format!("--wait-for-connection {v:?}: from 0 to 32"))?,
    };
    Ok(ReceiveOptions {
        wait_for_consumers,
        listen,
        channel: channel(&pairs)?,
        transport,
        device,
        admission,
        patience: patience(&pairs)?,
        frame_data_bound,
    })
}

fn parse_send(args: &[String]) -> Result<SendOptions, String> {
    let known = [
        "--to",
        "--channel",
        "--frames",
        "--secret-file",
        "--patience",
    ];
    let pairs = pairs(args, &known)?;
    let mode = match get(&pairs, "--frames") {
        None | Some("auto") => ConsumerMode::Auto,
        Some("every") => ConsumerMode::EveryFrame,
        Some("latest") => ConsumerMode::Latest,
        Some(other) => return Err(format!("--frames {other:?}: auto, every or latest")),
    };
    Ok(SendOptions {
        channel: channel(&pairs)?,
        to: address(get(&pairs, "--to").ok_or("--to is needed")?, "--to")?,
        mode,
        secret: secret(&pairs)?,
        patience: patience(&pairs)?,
    })
}
