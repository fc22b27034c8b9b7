//! The two-process demo (what `scripts/demo.sh` runs).
//!
//! A producer process publishes frames on a channel and this process reads
//! them. With a GPU: 4K RGB generated on the GPU by `cudatestsrc`, shared
//! through CUDA IPC, and in this process inverted and checked frame by frame
//! by `cudaprocess verify=true`. Without a GPU: `videotestsrc` frames over
//! shared host memory. Prints the rate, the publish-to-receive latency and
//! the frame check, and saves the last frame received as `demo-frame.png`.
//!
//! ```text
//! cargo run --release --example demo [frames]
//! ```

use std::process::{Command, Stdio};
use std::time::Instant;

use gst::prelude::*;

fn main() {
    gst::init().unwrap();
    gstcudaipc::plugin_register_static().unwrap();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--producer") {
        std::process::exit(producer(
            &args[2],
            args[3].parse().unwrap(),
            args[4] == "cuda",
        ));
    }
    let frames: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(600);
    let cuda = gstcudaipc::cuda::is_available();
    let channel = format!("demo-{}", std::process::id());
    println!(
        "gst-cudaipc demo: {frames} frames over the {} transport",
        if cuda { "cuda" } else { "host" }
    );
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--producer",
            &channel,
            &frames.to_string(),
            if cuda { "cuda" } else { "host" },
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("cannot start the producer process");
    let ok = consumer(&channel, cuda);
    let out = child.wait_with_output().unwrap();
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !ok || !out.status.success() {
        eprintln!("the demo failed");
        std::process::exit(1);
    }
}

/// The producer process: generates `frames` frames and publishes them.
fn producer(channel: &str, frames: u64, cuda: bool) -> i32 {
    let source = if cuda {
        format!(
            "cudatestsrc num-buffers={frames} pattern=counter ! video/x-raw(memory:CUDAMemory),format=RGB,width=3840,height=2160,framerate=0/1"
        )
    } else {
        format!(
            "videotestsrc num-buffers={frames} pattern=ball ! video/x-raw,format=RGB,width=1280,height=720,framerate=30/1"
        )
    };
    let transport = if cuda { "cuda" } else { "host" };
    let pipeline = gst::parse::launch(&format!(
        "{source} ! rscudaipcsink name=sink channel={channel} transport={transport} sync=false"
    ))
    .unwrap();
    let sink = pipeline
        .downcast_ref::<gst::Bin>()
        .unwrap()
        .by_name("sink")
        .unwrap();
    let ok = run(&pipeline);
    let stats = sink.property::<gst::Structure>("stats");
    println!(
        "producer (pid {}): published {} frames, {} without a copy, {} slots",
        std::process::id(),
        stats.get::<u64>("frames").unwrap_or(0),
        stats.get::<u64>("zero-copy").unwrap_or(0),
        stats.get::<u32>("slots").unwrap_or(0),
    );
    pipeline.set_state(gst::State::Null).unwrap();
    if ok { 0 } else { 1 }
}

/// This process: reads the channel, checks and reports.
fn consumer(channel: &str, cuda: bool) -> bool {
    let processing = if cuda {
        "cudaprocess name=check operation=invert verify=true ! "
    } else {
        ""
    };
    let pipeline = gst::parse::launch(&format!(
        "rscudaipcsrc name=src channel={channel} connect-timeout=30000 ! {processing}fakesink name=sink sync=false"
    ))
    .unwrap();
    let bin = pipeline.downcast_ref::<gst::Bin>().unwrap();
    let start = Instant::now();
    let ok = run(&pipeline);
    let seconds = start.elapsed().as_secs_f64();
    let src = bin.by_name("src").unwrap();
    let stats = src.property::<gst::Structure>("stats");
    let frames = stats.get::<u64>("frames").unwrap_or(0);
    println!(
        "consumer (pid {}): received {frames} frames in {seconds:.2} s ({:.0} frames/s, start-up included), missed {}",
        std::process::id(),
        frames as f64 / seconds,
        stats.get::<u64>("missed").unwrap_or(0)
    );
    println!(
        "publish-to-receive latency: median {:.0} us, p99 {:.0} us",
        stats.get::<u64>("latency-p50-ns").unwrap_or(0) as f64 / 1e3,
        stats.get::<u64>("latency-p99-ns").unwrap_or(0) as f64 / 1e3
    );
    let mut good = ok && frames > 0;
    if let Some(check) = bin.by_name("check") {
        let s = check.property::<gst::Structure>("stats");
        let corrupt = s.get::<u64>("corrupt").unwrap_or(u64::MAX);
        let missing = s.get::<u64>("missing").unwrap_or(u64::MAX);
        println!(
            "frame check on the GPU: {} verified, {corrupt} corrupt, {missing} missing",
            s.get::<u64>("verified").unwrap_or(0)
        );
        good &= corrupt == 0 && missing == 0;
    }
    let sink = bin.by_name("sink").unwrap();
    if let Some(sample) = sink.property::<Option<gst::Sample>>("last-sample") {
        match save_png(&sample, "demo-frame.png") {
            Ok(()) => println!("saved the last frame received as demo-frame.png"),
            Err(e) => println!("could not save a PNG: {e}"),
        }
    }
    pipeline.set_state(gst::State::Null).unwrap();
    good
}

fn run(pipeline: &gst::Element) -> bool {
    pipeline.set_state(gst::State::Playing).unwrap();
    let bus = pipeline.bus().unwrap();
    for msg in bus.iter_timed(gst::ClockTime::NONE) {
        match msg.view() {
            gst::MessageView::Eos(_) => return true,
            gst::MessageView::Error(e) => {
                eprintln!("error: {} ({:?})", e.error(), e.debug());
                return false;
            }
            _ => {}
        }
    }
    false
}

/// Writes a sample as PNG; CUDA memory is downloaded by mapping it.
fn save_png(sample: &gst::Sample, path: &str) -> Result<(), String> {
    let caps = sample.caps().ok_or("no caps")?;
    let buffer = sample.buffer().ok_or("no buffer")?;
    let map = buffer.map_readable().map_err(|_| "cannot map the frame")?;
    let mut plain_caps = caps.to_owned();
    plain_caps.make_mut().set_features(0, None);
    let plain = gst::Buffer::from_mut_slice(map.to_vec());
    let sample = gst::Sample::builder()
        .buffer(&plain)
        .caps(&plain_caps)
        .build();
    let png = gst_video::convert_sample(
        &sample,
        &gst::Caps::builder("image/png").build(),
        Some(gst::ClockTime::from_seconds(10)),
    )
    .map_err(|e| e.to_string())?;
    let png = png
        .buffer()
        .ok_or("no PNG")?
        .map_readable()
        .map_err(|_| "cannot map the PNG")?;
    std::fs::write(path, &png[..]).map_err(|e| e.to_string())
}
