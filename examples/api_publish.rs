// SPDX-License-Identifier: MPL-2.0

//! Publishes frames on a channel with the `cudaipc` crate's Rust API, no
//! GStreamer: what `rscudaipcsink` does in a pipeline. `rscudaipcsrc` reads
//! them (`gst-launch-1.0 rscudaipcsrc channel=NAME ! ...`), and so does the
//! `api_read` example.
//!
//! ```text
//! cargo run --example api_publish -- --channel demo --frames 100 --wait-consumers 1
//! gst-launch-1.0 rscudaipcsrc channel=demo ! video/x-raw ! checksumsink
//! ```
//!
//! Options: `--channel NAME` (default `demo`), `--frames N` (100), `--size
//! WIDTHxHEIGHT` (320x240), `--format NAME` (RGB; any format the elements
//! take), `--transport auto|cuda|host` (auto), `--ipc-mode legacy|fd`
//! (legacy), `--wait-consumers N` (0: publish at once), `--loan` (write each
//! frame in place into a loaned slot instead of copying it; host
//! transport), `--fps F` (0: as fast as consumers take them), `--padding B`
//! (rows B bytes longer than their pixels: strides other than GStreamer's
//! default, which travel with each frame).
//!
//! Each frame is a counter pattern (byte i of frame n is `i + 3n`, modulo
//! 256) in the format's default layout (or the padded one); the program prints
//! `frame=N pts=NS sha1=…` per frame, the SHA-1 of its bytes, which is what
//! `checksumsink` prints for the buffer `rscudaipcsrc` makes of it.

use std::time::{Duration, Instant};

use cudaipc::{
    IpcMode, Published, Publisher, PublisherOptions, Transport, VideoFormat, VideoLayout,
};

const USAGE: &str = "usage: api_publish [--channel NAME] [--frames N] [--size WxH] [--format NAME] [--transport auto|cuda|host] [--ipc-mode legacy|fd] [--wait-consumers N] [--loan] [--fps F] [--padding B]";

struct Options {
    channel: String,
    frames: u32,
    layout: VideoLayout,
    publisher: PublisherOptions,
    loan: bool,
    fps: u32,
}

fn main() {
    let options = match parse(std::env::args().skip(1).collect()) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(options) {
        eprintln!("api_publish: {e}");
        std::process::exit(1);
    }
}

fn run(options: Options) -> Result<(), cudaipc::Error> {
    let layout = options.layout.clone();
    let publisher = Publisher::create(&options.channel, layout.clone(), options.publisher)?;
    if options.loan && publisher.is_cuda() {
        eprintln!(
            "api_publish: --loan writes host memory; on the cuda transport the slot is written by your GPU work"
        );
        std::process::exit(2);
    }
    let frame_time = (options.fps > 0).then(|| Duration::from_secs(1) / options.fps);
    let start = Instant::now();
    let mut frame = vec![0u8; layout.frame_size()];
    for n in 0..options.frames {
        let pts = frame_time.map_or(Duration::ZERO, |t| t * n);
        if let Some(t) = frame_time {
            std::thread::sleep((start + t * n).saturating_duration_since(Instant::now()));
        }
        let sha1 = if options.loan {
            let mut loan = publisher.loan()?;
            let bytes = loan
                .host_bytes_mut()
                .expect("a loan of the host transport has host bytes");
            counter_pattern(n, bytes);
            let sha1 = sha1_hex(bytes);
            loan.publish(Some(pts))?;
            sha1
        } else {
            counter_pattern(n, &mut frame);
            if publisher.publish(&frame, Some(pts))? == Published::Dropped {
                println!("frame={n} dropped");
                continue;
            }
            sha1_hex(&frame)
        };
        println!("frame={n} pts={} sha1={sha1}", pts.as_nanos());
    }
    publisher.eos();
    println!(
        "summary frames={} channel={} caps={}",
        options.frames,
        options.channel,
        layout.caps()
    );
    Ok(())
}

/// Byte i of frame n: `i + 3n`, modulo 256.
fn counter_pattern(n: u32, bytes: &mut [u8]) {
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = (i as u32).wrapping_add(n.wrapping_mul(3)) as u8;
    }
}

fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}

fn parse(args: Vec<String>) -> Result<Options, String> {
    let (mut channel, mut frames, mut size) = ("demo".to_string(), 100, (320, 240));
    let (mut format, mut loan, mut fps, mut padding) = (VideoFormat::Rgb, false, 0, 0);
    let mut publisher = PublisherOptions::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--loan" {
            loan = true;
            continue;
        }
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        let number = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| format!("{arg}: '{v}' is not a number"))
        };
        match arg.as_str() {
            "--channel" => channel = value,
            "--frames" => frames = number(&value)?,
            "--fps" => fps = number(&value)?,
            "--padding" => padding = number(&value)?,
            "--wait-consumers" => publisher.wait_for_consumers = number(&value)?,
            "--size" => {
                let (w, h) = value.split_once('x').ok_or("--size: WIDTHxHEIGHT")?;
                size = (number(w)?, number(h)?);
            }
            "--format" => format = value.parse().map_err(|e| format!("--format: {e}"))?,
            "--transport" => {
                publisher.transport = match value.as_str() {
                    "auto" => Transport::Auto,
                    "cuda" => Transport::Cuda,
                    "host" => Transport::Host,
                    _ => return Err(format!("--transport: '{value}'")),
                }
            }
            "--ipc-mode" => {
                publisher.ipc_mode = match value.as_str() {
                    "legacy" => IpcMode::Legacy,
                    "fd" => IpcMode::Fd,
                    _ => return Err(format!("--ipc-mode: '{value}'")),
                }
            }
            _ => return Err(format!("unknown option {arg}")),
        }
    }
    // With padding: each plane's rows that many bytes longer than its
    // pixels, a layout other than GStreamer's default.
    let layout = match padding {
        0 => VideoLayout::new(format, size.0, size.1),
        padding => {
            let strides: Vec<u32> = (0..format.plane_count())
                .map(|p| (format.row_bytes(p, size.0) as u32).saturating_add(padding))
                .collect();
            VideoLayout::with_strides(format, size.0, size.1, &strides)
        }
    }
    .and_then(|layout| layout.with_framerate(fps, 1))
    .map_err(|e| e.to_string())?;
    Ok(Options {
        channel,
        frames,
        layout,
        publisher,
        loan,
        fps,
    })
}
