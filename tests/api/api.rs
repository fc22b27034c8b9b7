// SPDX-License-Identifier: MPL-2.0

//! The `cudaipc` crate's Rust API against the elements, in real processes:
//! the `api_publish` example to `gst-launch-1.0 rscudaipcsrc`, and
//! `gst-launch-1.0 ... rscudaipcsink` to the `api_read` example, on the
//! host transport (and on CUDA where there is a GPU). Every frame's SHA-1
//! must match on both ends. Also: the errors of an unknown channel and of
//! another user's channel, as `api_read` reports them. `cargo test` builds the examples into
//! target/<profile>/examples/ before running this.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::{
    Finished, Launch, OTHER_USER, ShmDir, example, gpu, launch, launch_with, other_user_or_skip,
    reference_checksums, start_program, unique_channel,
};
use cudaipc::{VideoFormat, VideoLayout};

const LIMIT: Duration = Duration::from_secs(60);
const FRAMES: u32 = 12;

fn start(name: &str, args: &[&str]) -> Launch {
    start_with(name, args, &[])
}

fn start_with(name: &str, args: &[&str], env: &[(&str, &str)]) -> Launch {
    start_program(&example(name), args, env)
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// The `frame=N … sha1=…` lines of an example's output, in order.
fn frame_lines(out: &Finished) -> Vec<&str> {
    out.stdout
        .lines()
        .filter(|line| line.starts_with("frame=") && field(line, "sha1").is_some())
        .collect()
}

fn sha1s(out: &Finished) -> Vec<String> {
    frame_lines(out)
        .iter()
        .filter_map(|line| field(line, "sha1").map(str::to_owned))
        .collect()
}

/// What a case of the api_publish -> cudaipcsrc test varies.
struct PublishCase {
    format: &'static str,
    size: (u32, u32),
    transport: &'static str,
    ipc_mode: &'static str,
    loan: bool,
    /// Bytes added to each row: a layout other than GStreamer's default.
    padding: u32,
}

/// `api_publish` publishes; `rscudaipcsrc ! checksumsink` must print the
/// SHA-1 the publisher printed for every frame, in order.
fn api_publish_to_cudaipcsrc(case: PublishCase) {
    let channel = unique_channel("api-publish");
    let what = format!(
        "{} {}x{} transport={} ipc-mode={} loan={} padding={}",
        case.format,
        case.size.0,
        case.size.1,
        case.transport,
        case.ipc_mode,
        case.loan,
        case.padding
    );
    let consumer = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=120000 num-buffers={FRAMES} ! video/x-raw ! checksumsink"
    ));
    let size = format!("{}x{}", case.size.0, case.size.1);
    let frames = FRAMES.to_string();
    let mut args = vec![
        "--channel",
        &channel,
        "--frames",
        &frames,
        "--size",
        &size,
        "--format",
        case.format,
        "--transport",
        case.transport,
        "--ipc-mode",
        case.ipc_mode,
        "--wait-consumers",
        "1",
    ];
    if case.loan {
        args.push("--loan");
    }
    let padding = case.padding.to_string();
    args.extend(["--padding", &padding]);
    let published = start("api_publish", &args).finish(LIMIT);
    published.assert_success(&format!("api_publish ({what})"));
    let read = consumer.finish(LIMIT);
    read.assert_success(&format!("rscudaipcsrc ({what})"));
    let sent = sha1s(&published);
    assert_eq!(sent.len(), FRAMES as usize, "{what}: frames published");
    assert_eq!(read.checksums(), sent, "{what}: checksums");
    // Frames differ, so a stale or repeated frame would show.
    assert_ne!(sent[0], sent[1], "{what}: the pattern changes per frame");
}

#[test]
fn api_publish_frames_are_read_by_cudaipcsrc_on_the_host_transport() {
    let cases = [
        ("RGB", (64, 48), "legacy", false, 0),
        ("I420", (62, 46), "legacy", true, 0),
        ("NV12", (64, 48), "fd", false, 0),
        ("BGRx", (30, 20), "fd", true, 0),
        // Strides other than GStreamer's travel with the frames.
        ("RGB", (30, 20), "legacy", false, 6),
        ("NV12", (62, 46), "fd", true, 10),
    ];
    for (format, size, ipc_mode, loan, padding) in cases {
        api_publish_to_cudaipcsrc(PublishCase {
            format,
            size,
            transport: "host",
            ipc_mode,
            loan,
            padding,
        });
    }
}

#[test]
fn api_publish_frames_are_read_by_cudaipcsrc_on_cuda() {
    if !gpu("api_publish_frames_are_read_by_cudaipcsrc_on_cuda") {
        return;
    }
    for ipc_mode in ["legacy", "fd"] {
        api_publish_to_cudaipcsrc(PublishCase {
            format: "NV12",
            size: (1920, 1080),
            transport: "cuda",
            ipc_mode,
            loan: false,
            padding: 0,
        });
    }
}

/// `videotestsrc ! caps ! rscudaipcsink` publishes; `api_read` must print
/// the SHA-1 `checksumsink` gives for the same pipeline's frames, and the
/// layout GStreamer gave them must be `VideoLayout::new`'s.
fn cudaipcsink_to_api_read(
    format: VideoFormat,
    (width, height): (u32, u32),
    sink_options: &str,
    reader_options: &[&str],
) {
    // GStreamer leaves the padding of rows (and of a luma plane of an odd
    // height) uninitialised, so frames with padding differ from run to run
    // there: only their count and layout are compared.
    let layout = VideoLayout::new(format, width, height).unwrap();
    let padded = (0..format.plane_count())
        .any(|p| u64::from(layout.planes()[p].stride) != format.row_bytes(p, width))
        || (format.plane_count() > 1 && height % 2 == 1);
    let channel = unique_channel("api-read");
    let what = format!("{format} {width}x{height} {sink_options}");
    let source = format!(
        "videotestsrc num-buffers={FRAMES} pattern=ball ! video/x-raw,format={format},width={width},height={height}"
    );
    let reference = reference_checksums(&source);
    assert_eq!(reference.len(), FRAMES as usize, "{what}: reference frames");
    let mut args = vec!["--channel", &channel, "--timeout-ms", "30000"];
    args.extend_from_slice(reader_options);
    let reader = start("api_read", &args);
    let producer = launch(&format!(
        "{source} ! rscudaipcsink channel={channel} wait-for-connection=1 {sink_options}"
    ))
    .finish(LIMIT);
    producer.assert_success(&format!("rscudaipcsink ({what})"));
    let read = reader.finish(LIMIT);
    read.assert_success(&format!("api_read ({what})"));
    let read_sums = sha1s(&read);
    assert_eq!(read_sums.len(), FRAMES as usize, "{what}: frames read");
    if !padded {
        assert_eq!(read_sums, reference, "{what}: checksums");
    }
    let planes: Vec<String> = layout
        .planes()
        .iter()
        .map(|p| format!("{}:{}", p.offset, p.stride))
        .collect();
    for line in frame_lines(&read) {
        assert_eq!(field(line, "format"), Some(format.name()), "{what}: {line}");
        assert_eq!(
            field(line, "planes"),
            Some(planes.join(",").as_str()),
            "{what}: GStreamer's layout is VideoLayout::new's: {line}"
        );
    }
}

#[test]
fn cudaipcsink_frames_are_read_by_api_read_on_the_host_transport() {
    let cases = [
        (VideoFormat::Rgb, (64, 48), "transport=host", &[][..]),
        (
            VideoFormat::Nv12,
            (64, 48),
            "transport=host ipc-mode=fd",
            &[][..],
        ),
        (
            VideoFormat::I420,
            (64, 48),
            "transport=host",
            &["--ipc-mode", "legacy"][..],
        ),
        (
            VideoFormat::Gray8,
            (32, 20),
            "transport=host ipc-mode=fd",
            &["--ipc-mode", "fd"][..],
        ),
        (VideoFormat::Rgba, (31, 7), "transport=host", &[][..]),
        // Padded rows, and a luma plane of an odd height.
        (VideoFormat::Rgb, (30, 20), "transport=host", &[][..]),
        (VideoFormat::Nv12, (62, 46), "transport=host", &[][..]),
        (VideoFormat::I420, (30, 21), "transport=host", &[][..]),
    ];
    for (format, size, sink_options, reader_options) in cases {
        cudaipcsink_to_api_read(format, size, sink_options, reader_options);
    }
}

#[test]
fn cudaipcsink_frames_are_read_by_api_read_on_cuda() {
    if !gpu("cudaipcsink_frames_are_read_by_api_read_on_cuda") {
        return;
    }
    for sink_options in ["transport=cuda", "transport=cuda ipc-mode=fd"] {
        cudaipcsink_to_api_read(VideoFormat::Nv12, (1920, 1080), sink_options, &[]);
    }
}

#[test]
fn api_read_of_an_unknown_channel_fails_with_the_no_producer_error() {
    let channel = unique_channel("api-none");
    let read = start("api_read", &["--channel", &channel, "--timeout-ms", "200"]).finish(LIMIT);
    assert_eq!(read.code, Some(1), "{}\n{}", read.stdout, read.stderr);
    assert!(
        read.stderr
            .contains(&format!("no producer on channel '{channel}' within 200 ms")),
        "{}",
        read.stderr
    );
}

/// Another user's channel is refused (another user may have taken the
/// name), and read once that user is allowed.
#[test]
fn api_read_refuses_another_users_channel_unless_that_user_is_allowed() {
    const TEST: &str = "api_read_refuses_another_users_channel_unless_that_user_is_allowed";
    if !other_user_or_skip(TEST) {
        return;
    }
    let dir = ShmDir::new("api-owner");
    let channel = unique_channel("api-owner");
    let source = "videotestsrc num-buffers=5 ! video/x-raw,format=RGB,width=64,height=48";
    let reference = reference_checksums(source);
    // nobody's producer, whose files every user may open.
    let producer = launch_with(
        &OTHER_USER,
        &dir.env(),
        &format!(
            "{source} ! rscudaipcsink channel={channel} transport=host permissions=0666 wait-for-connection=1"
        ),
    );
    let timeout = ["--timeout-ms", "20000"];
    let args = [&["--channel", &channel][..], &timeout].concat();
    let refused = start_with("api_read", &args, &dir.env()).finish(LIMIT);
    assert_eq!(
        refused.code,
        Some(1),
        "{}\n{}",
        refused.stdout,
        refused.stderr
    );
    assert!(
        refused
            .stderr
            .contains(&format!("channel '{channel}' may not be used"))
            && refused.stderr.contains("does not trust"),
        "{}",
        refused.stderr
    );
    // The API names its own option, not the element's property.
    assert!(
        refused
            .stderr
            .contains("SubscriberOptions::allowed_producer_uids")
            && !refused.stderr.contains("'allowed-producers'"),
        "{}",
        refused.stderr
    );
    assert_eq!(sha1s(&refused), Vec::<String>::new());
    let nobody = Command::new("id").args(["-u", "nobody"]).output().unwrap();
    let nobody = String::from_utf8_lossy(&nobody.stdout).trim().to_owned();
    let args = [&args[..], &["--allowed-producers", &nobody]].concat();
    let read = start_with("api_read", &args, &dir.env()).finish(LIMIT);
    read.assert_success("api_read allowing nobody");
    assert_eq!(sha1s(&read), reference);
    producer.finish(LIMIT).assert_success("nobody's producer");
}

/// The elements take the API crate's list of formats (`VideoFormat::ALL`,
/// GStreamer-free): the caps they announce name the same ones, in order.
#[test]
fn the_api_speaks_every_format_of_the_elements() {
    let api: Vec<&str> = VideoFormat::ALL.iter().map(|f| f.name()).collect();
    let elements: Vec<&str> = gstcudaipc::FORMATS
        .iter()
        .map(|f| f.to_str().as_str())
        .collect();
    assert_eq!(api, elements);
}
