// SPDX-License-Identifier: MPL-2.0

//! Reads the frames of a channel with the `cudaipc` crate's Rust API, no
//! GStreamer: what `rscudaipcsrc` does in a pipeline. It reads what
//! `rscudaipcsink` publishes, and what the `api_publish` example publishes.
//!
//! ```text
//! cargo run --example api_read -- --channel demo --frames 100
//! gst-launch-1.0 videotestsrc num-buffers=100 ! video/x-raw,format=RGB,width=320,height=240 \
//!     ! rscudaipcsink channel=demo transport=host wait-for-connection=1
//! ```
//!
//! Options: `--channel NAME` (default `demo`), `--frames N` (stop after N
//! frames; 0, the default: at the end of the stream), `--timeout-ms MS`
//! (wait that long for the producer, and for each frame; 10000), `--latest`
//! (only the newest frames), `--ipc-mode legacy|fd` (default: the
//! channel's own), `--allowed-producers UID,...` (users trusted as the
//! channel's owner beside this one), `--start-delay-ms MS` (wait that long
//! after attaching before the first frame, as an application that loads a
//! model after it attached: a live producer keeps the frames published
//! meanwhile for it, up to `cudaipc_channel::START_LIMIT`).
//!
//! It prints `frame=N seq=S pts=NS format=F size=WxH planes=OFFSET:STRIDE,…
//! sha1=…` per frame (the SHA-1 of its bytes: the same as `checksumsink`
//! prints for the buffer the producer published) and `summary frames=N` at
//! the end. It exits with
//! 1 on an error (no producer, producer gone, a frame that did not come in
//! time).

use std::time::Duration;

use cudaipc::{Frames, IpcMode, Subscriber, SubscriberOptions};

const USAGE: &str = "usage: api_read [--channel NAME] [--frames N] [--timeout-ms MS] [--latest] [--ipc-mode legacy|fd] [--allowed-producers UID,...] [--start-delay-ms MS]";

/// What the command line asks for.
struct Args {
    channel: String,
    frames: u32,
    start_delay: Duration,
    options: SubscriberOptions,
}

fn main() {
    let args = match parse(std::env::args().skip(1).collect()) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args) {
        eprintln!("api_read: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), cudaipc::Error> {
    let Args {
        channel,
        frames,
        start_delay,
        options,
    } = args;
    let timeout = options.timeout;
    let mut subscriber = Subscriber::attach(&channel, options)?;
    std::thread::sleep(start_delay);
    let mut bytes = Vec::new();
    let mut read = 0;
    while frames == 0 || read < frames {
        let Some(frame) = subscriber.next_frame(timeout)? else {
            break;
        };
        let layout = frame.layout();
        // Host frames are read in place; CUDA frames are downloaded.
        let sha1 = match frame.host_bytes() {
            Some(host) => sha1_hex(host),
            None => {
                bytes.resize(layout.frame_size(), 0);
                frame.copy_to_host(&mut bytes)?;
                sha1_hex(&bytes)
            }
        };
        let planes: Vec<String> = layout
            .planes()
            .iter()
            .map(|p| format!("{}:{}", p.offset, p.stride))
            .collect();
        let pts = frame
            .pts()
            .map_or("none".to_string(), |t| t.as_nanos().to_string());
        println!(
            "frame={read} seq={} pts={pts} format={} size={}x{} planes={} sha1={sha1}",
            frame.seq(),
            layout.format(),
            layout.width(),
            layout.height(),
            planes.join(","),
        );
        read += 1;
    }
    println!("summary frames={read}");
    Ok(())
}

fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}

fn parse(args: Vec<String>) -> Result<Args, String> {
    let (mut channel, mut frames, mut start_delay) = ("demo".to_string(), 0, Duration::ZERO);
    let mut options = SubscriberOptions {
        timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--latest" {
            options.frames = Frames::Latest;
            continue;
        }
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{arg}: '{v}' is not a number"))
        };
        match arg.as_str() {
            "--channel" => channel = value,
            "--frames" => frames = number(&value)? as u32,
            "--start-delay-ms" => start_delay = Duration::from_millis(number(&value)?),
            "--timeout-ms" => options.timeout = Some(Duration::from_millis(number(&value)?)),
            "--allowed-producers" => {
                options.allowed_producer_uids = value
                    .split(',')
                    .map(|uid| number(uid).map(|uid| uid as u32))
                    .collect::<Result<_, _>>()?
            }
            "--ipc-mode" => {
                options.ipc_mode = Some(match value.as_str() {
                    "legacy" => IpcMode::Legacy,
                    "fd" => IpcMode::Fd,
                    _ => return Err(format!("--ipc-mode: '{value}'")),
                })
            }
            _ => return Err(format!("unknown option {arg}")),
        }
    }
    Ok(Args {
        channel,
        frames,
        start_delay,
        options,
    })
}
