// The main job (scripts/demo.sh runs examples/demo.rs): two processes, every
// frame received and checked (on the GPU with one, on the CPU without), and
// the summary line a user compares.

use crate::common;

use std::process::Command;

use common::{assert_no_glib_complaints, checked};

#[test]
fn the_two_process_demo_delivers_every_frame() {
    // target/<profile>/examples/demo as cargo builds it for `cargo test`, or
    // beside this binary where the GPU host's staging puts both.
    let exe = std::env::current_exe().unwrap();
    let here = exe.parent().unwrap();
    let demo = [
        here.parent().unwrap().join("examples/demo"),
        here.join("demo"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("the demo example is built (cargo test builds every example)");
    let dir = std::env::temp_dir().join(format!("cudaipc-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = checked(&mut Command::new(&demo))
        .arg("40")
        .current_dir(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_no_glib_complaints("the demo", &String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("received 40 frames"), "{stdout}");
    assert!(stdout.contains("published 40 frames"), "{stdout}");
    // The summary line, last: what a user compares between runs.
    let summary = stdout.lines().last().unwrap_or_default();
    let (size, transport) = if cudaipc_transport::cuda::is_available() {
        ("3840x2160", "CUDA IPC")
    } else {
        ("1280x720", "host shared memory (no GPU: host transport)")
    };
    let head = format!("demo: 40 frames {size} RGB over {transport}, 0 corrupt, 0 missing, ");
    let rest = summary
        .strip_prefix(&head)
        .unwrap_or_else(|| panic!("the summary starts with {head:?}: {stdout}"));
    let (fps, rest) = rest
        .split_once(" FPS")
        .unwrap_or_else(|| panic!("the summary gives FPS: {summary}"));
    let fps: f64 = fps.replace(',', "").parse().unwrap_or(0.0);
    assert!(fps > 0.0, "{summary}");
    if cudaipc_transport::cuda::is_available() {
        assert!(
            rest.starts_with(" = ") && rest.contains("% of one process ("),
            "{summary}"
        );
    }
    let (_, latency) = rest
        .split_once(", latency p50 ")
        .unwrap_or_else(|| panic!("the summary gives the latency: {summary}"));
    let (micros, zero_copy) = latency
        .split_once(" us, ")
        .unwrap_or_else(|| panic!("the latency is in us: {summary}"));
    assert!(micros.parse::<u64>().is_ok(), "{summary}");
    let (without_copy, of) = zero_copy
        .strip_suffix(" zero-copy")
        .and_then(|counts| counts.split_once('/'))
        .unwrap_or_else(|| panic!("the summary ends with N/M zero-copy: {summary}"));
    assert_eq!(of, "40", "{summary}");
    let without_copy: u64 = without_copy.parse().unwrap_or(u64::MAX);
    assert!(without_copy <= 40, "{summary}");
    if !cudaipc_transport::cuda::is_available() {
        // On the host transport videotestsrc writes into the sink's slots
        // and the source wraps them: no frame is copied.
        assert_eq!(without_copy, 40, "{summary}");
    }
    let png = std::fs::read(dir.join("demo-frame.png")).expect("the demo saves a frame");
    assert_eq!(&png[1..4], b"PNG");
    let _ = std::fs::remove_dir_all(&dir);
}
