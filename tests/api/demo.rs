// The main job (scripts/demo.sh runs examples/demo.rs): two processes, every
// frame received and checked (on the GPU with one, on the CPU without), and
// the summary line a user compares.

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ShmDir, assert_no_glib_complaints, checked, plugin_dir};

/// target/<profile>/examples/demo as cargo builds it for `cargo test`, or
/// beside this binary where the GPU host's staging puts both.
fn demo_example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let here = exe.parent().unwrap();
    [
        here.parent().unwrap().join("examples/demo"),
        here.join("demo"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("the demo example is built (cargo test builds every example)")
}

#[test]
fn the_two_process_demo_delivers_every_frame() {
    let demo = demo_example();
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

/// What `demo --next-steps` (the end of scripts/demo.sh) prints, with
/// DISPLAY set to `display` (and WAYLAND_DISPLAY unset): the text, and its
/// two gst-launch-1.0 lines for the two terminals.
fn next_steps(display: Option<&str>) -> (String, Vec<String>) {
    let mut command = Command::new(demo_example());
    command
        .arg("--next-steps")
        .arg(plugin_dir())
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY");
    if let Some(display) = display {
        command.env("DISPLAY", display);
    }
    let out = checked(&mut command).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{out:?}");
    let pair: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("GST_PLUGIN_PATH=") && l.contains(" gst-launch-1.0 "))
        .map(String::from)
        .collect();
    assert_eq!(pair.len(), 2, "a producer and a consumer:\n{text}");
    (text, pair)
}

/// `line` run by bash, in its own process group, in `cwd`.
fn start_line(line: &str, dir: &ShmDir, cwd: &std::path::Path) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    checked(Command::new("bash").arg("-c").arg(line))
        .envs(dir.env())
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap()
}

/// Waits for `child` at most `limit`; its output, or `None` (then killed,
/// with its group) if it did not end in time.
fn finish_within(mut child: std::process::Child, limit: Duration) -> Option<std::process::Output> {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            // SAFETY: the group of our own child, not yet waited for.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(child.wait_with_output().unwrap())
}

/// The demo's next step works where there is no display, as on a server or
/// in CI: the consumer printed then needs none (autovideosink crashes
/// there), says why, and the pair runs as printed, the producer with -e so
/// that Ctrl-C ends it cleanly. With a display, a window.
#[test]
fn the_demos_next_step_runs_without_a_display() {
    let (windowed, pair) = next_steps(Some(":0"));
    assert!(
        pair[1].ends_with("! videoconvert ! autovideosink"),
        "{windowed}"
    );

    let (text, pair) = next_steps(None);
    assert!(
        !pair.iter().any(|l| l.contains("autovideosink")),
        "no window without a display:\n{text}"
    );
    assert!(
        text.contains("neither DISPLAY nor WAYLAND_DISPLAY is set"),
        "says why:\n{text}"
    );
    let (producer, consumer) = (&pair[0], &pair[1]);
    assert!(producer.contains(" gst-launch-1.0 -e "), "{producer}");
    assert!(consumer.contains(" rscudaipcsrc "), "{consumer}");
    // The channel (cam0) in a folder of its own; the consumer bounded.
    let dir = ShmDir::new("next-step");
    let cwd = std::env::temp_dir().join(format!("cudaipc-next-step-{}", std::process::id()));
    std::fs::create_dir_all(&cwd).unwrap();
    let producer = start_line(producer, &dir, &cwd);
    let consumer = start_line(
        &consumer.replacen(" rscudaipcsrc ", " rscudaipcsrc num-buffers=45 ", 1),
        &dir,
        &cwd,
    );
    let consumed = finish_within(consumer, Duration::from_secs(60));
    // Ctrl-C on the producer: with -e it sends an end of stream and exits 0.
    // SAFETY: the group of our own child, not yet waited for.
    unsafe { libc::kill(-(producer.id() as i32), libc::SIGINT) };
    let produced = finish_within(producer, Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&cwd);
    let consumed = consumed.expect("the printed consumer ends (45 frames)");
    let produced = produced.expect("the printed producer ends on Ctrl-C");
    for (what, out) in [("the consumer", &consumed), ("the producer", &produced)] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_no_glib_complaints(what, &stderr);
        assert!(
            out.status.success(),
            "{what}: {:?}\n{}\n{stderr}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
    }
    if !cudaipc_transport::cuda::is_available() {
        // 45 frames of a live 30 FPS source: 1.5 s, rates printed twice a
        // second.
        let stdout = String::from_utf8_lossy(&consumed.stdout);
        assert!(stdout.contains("last-message = rendered: "), "{stdout}");
    }
    assert_eq!(dir.names(), Vec::<String>::new(), "the channel is gone");
}
