// SPDX-License-Identifier: MPL-2.0

//! The examples, run as a user runs them: real processes, on the host
//! transport (and on the GPU where there is one). `cargo test` builds the
//! Rust examples into target/<profile>/examples/ before running this.
//!
//! Every frame's SHA-1 is checked against the examples' test pattern rendered
//! here, independently of the programs' own reports.

use crate::common;

// The examples' pattern and checksums (it allows its own dead code).
#[path = "../../examples/common/mod.rs"]
mod pattern;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Finished, Launch, example, plugin_dir, repo_file, start_program, unique_channel};

const LIMIT: Duration = Duration::from_secs(60);
const SIZE: (u32, u32) = (160, 120);

fn start(program: impl Into<PathBuf>, args: &[&str]) -> Launch {
    // For the Python reader; the Rust examples link the plugin in.
    let plugins = plugin_dir();
    let plugins = plugins.to_str().expect("a UTF-8 plugin folder");
    start_program(&program.into(), args, &[("GST_PLUGIN_PATH", plugins)])
}

fn run(program: impl Into<PathBuf>, args: &[&str]) -> Finished {
    start(program, args).finish(LIMIT)
}

/// The publisher, rendering `frames` frames on the CPU as fast as it can
/// once one consumer waits on `channel`.
fn publish_on_cpu(channel: &str, frames: u32) -> Finished {
    run(
        example("publisher"),
        &[
            "--channel",
            channel,
            "--frames",
            &frames.to_string(),
            "--size",
            &size_arg(),
            "--unpaced",
            "--cpu",
            "--wait-consumers",
            "1",
        ],
    )
}

/// The `frame=N … sha1=…` lines of a program's output: (N, SHA-1, line).
fn frames(out: &Finished) -> Vec<(u32, String, String)> {
    out.stdout
        .lines()
        .filter_map(|line| {
            let n = field(line, "frame")?.parse().ok()?;
            Some((n, field(line, "sha1")?.to_string(), line.to_string()))
        })
        .collect()
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// The line starting with `prefix`; fails the test when there is none.
fn line<'a>(out: &'a Finished, prefix: &str) -> &'a str {
    out.stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| {
            panic!(
                "no '{prefix}' line in\n{}\n--- stderr\n{}",
                out.stdout, out.stderr
            )
        })
}

/// SHA-1 of each frame of the pattern, and the stream checksum.
fn expected(count: u32) -> (Vec<String>, String) {
    let (w, h) = SIZE;
    let mut bytes = vec![0; w as usize * h as usize * pattern::PIXEL_BYTES];
    let mut checksum = pattern::StreamChecksum::default();
    let sums = (0..count)
        .map(|n| {
            pattern::render_cpu(n, w, h, &mut bytes);
            let sha1 = pattern::sha1_hex(&bytes);
            checksum.add(&sha1);
            sha1
        })
        .collect();
    (sums, checksum.hex())
}

/// Asserts that a reader got exactly frames 0..count of the pattern.
fn assert_every_frame(reader: &Finished, count: u32, memory: &str, what: &str) {
    let (sums, checksum) = expected(count);
    let got = frames(reader);
    let numbers: Vec<u32> = got.iter().map(|f| f.0).collect();
    assert_eq!(
        numbers,
        (0..count).collect::<Vec<_>>(),
        "{what}: frame numbers"
    );
    for ((n, sha1, line), want) in got.iter().zip(&sums) {
        assert_eq!(sha1, want, "{what}: frame {n} damaged: {line}");
        assert_eq!(field(line, "memory"), Some(memory), "{what}: {line}");
    }
    let summary = line(reader, "summary ");
    assert_eq!(
        field(summary, "frames"),
        Some(&*count.to_string()),
        "{what}: {summary}"
    );
    assert_eq!(field(summary, "missing"), Some("0"), "{what}: {summary}");
    assert_eq!(
        field(summary, "checksum"),
        Some(&*checksum),
        "{what}: {summary}"
    );
}

/// Asserts that the publisher published frames 0..count of the pattern.
fn assert_published(publisher: &Finished, count: u32, transport: &str) {
    let (sums, checksum) = expected(count);
    let got: Vec<String> = frames(publisher).into_iter().map(|f| f.1).collect();
    assert_eq!(got, sums, "the publisher's frames");
    let summary = line(publisher, "summary ");
    assert_eq!(field(summary, "checksum"), Some(&*checksum), "{summary}");
    assert_eq!(field(summary, "transport"), Some(transport), "{summary}");
    assert_eq!(
        field(summary, "sink-frames"),
        Some(&*count.to_string()),
        "{summary}"
    );
    assert_eq!(field(summary, "sink-dropped"), Some("0"), "{summary}");
}

fn size_arg() -> String {
    format!("{}x{}", SIZE.0, SIZE.1)
}

#[test]
fn publisher_and_reader_agree_on_every_frame() {
    let channel = unique_channel("ex-pair");
    let reader = start(
        example("reader"),
        &["--channel", &channel, "--timeout-ms", "30000"],
    );
    let publisher = publish_on_cpu(&channel, 30);
    let reader = reader.finish(LIMIT);
    publisher.assert_success("publisher");
    reader.assert_success("reader");
    assert_published(&publisher, 30, "host");
    assert_every_frame(&reader, 30, "system", "reader");
}

#[test]
fn fanout_delivers_every_frame_to_three_consumers() {
    let out = run(
        example("fanout"),
        &[
            "--consumers",
            "3",
            "--frames",
            "40",
            "--size",
            &size_arg(),
            "--cpu",
        ],
    );
    out.assert_success("fanout");
    let (_, checksum) = expected(40);
    for i in 1..=3 {
        let consumer = line(&out, &format!("consumer={i} "));
        for (key, want) in [
            ("frames", "40"),
            ("intact", "40"),
            ("lost", "0"),
            ("corrupt", "0"),
            ("in-order", "true"),
            ("checksum", &checksum),
            ("exit", "0"),
        ] {
            assert_eq!(field(consumer, key), Some(want), "{key} in: {consumer}");
        }
    }
    assert!(!out.stdout.contains("consumer=4 "), "{}", out.stdout);
    let producer = line(&out, "producer ");
    assert_eq!(field(producer, "checksum"), Some(&*checksum), "{producer}");
    assert!(line(&out, "fanout ").ends_with("result=ok"));
}

#[test]
fn reader_fails_clearly_without_a_producer() {
    let channel = unique_channel("ex-none");
    let out = run(
        example("reader"),
        &["--channel", &channel, "--timeout-ms", "200"],
    );
    assert!(!out.success, "the reader succeeded without a producer");
    assert!(
        out.stderr
            .contains(&format!("no producer appeared on channel '{channel}'")),
        "{}",
        out.stderr
    );
}

// ----------------------------------------------------------------- Python

/// A Python with PyGObject and GStreamer's introspection data, or `None`
/// after a loud SKIPPED line (a failure with `CUDAIPC_REQUIRE_PYTHON_GI=1`).
/// `python3` may be one without Debian's python3-gi (pyenv, a venv), so the
/// system one is tried too.
fn python_with_gi(test: &str) -> Option<String> {
    let check = "import gi; gi.require_version('Gst', '1.0'); \
                 gi.require_version('GstApp', '1.0'); from gi.repository import Gst, GstApp";
    let candidates = std::env::var("CUDAIPC_PYTHON")
        .into_iter()
        .chain(["python3".to_string(), "/usr/bin/python3".to_string()]);
    for python in candidates {
        let ok = Command::new(&python)
            .args(["-c", check])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(python);
        }
    }
    if std::env::var("CUDAIPC_REQUIRE_PYTHON_GI").is_ok_and(|v| v == "1") {
        panic!("{test}: CUDAIPC_REQUIRE_PYTHON_GI=1 but no python3 imports gi with Gst 1.0");
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: no python3 with PyGObject and Gst 1.0 (install python3-gi, gir1.2-gst-plugins-base-1.0) ({test})"
    );
    None
}

/// examples/python/reader.py of the source tree.
fn python_reader() -> String {
    repo_file("examples/python/reader.py")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn python_reader_gets_every_frame_the_publisher_sent() {
    let Some(python) = python_with_gi("python_reader_gets_every_frame_the_publisher_sent") else {
        return;
    };
    let channel = unique_channel("ex-py");
    let reader = start(
        &python,
        &[
            &python_reader(),
            "--channel",
            &channel,
            "--timeout-ms",
            "30000",
        ],
    );
    let publisher = publish_on_cpu(&channel, 30);
    let reader = reader.finish(LIMIT);
    publisher.assert_success("publisher");
    reader.assert_success("python reader");
    assert_published(&publisher, 30, "host");
    assert_every_frame(&reader, 30, "system", "python reader");
}

#[test]
fn python_reader_fails_clearly_without_a_producer() {
    let Some(python) = python_with_gi("python_reader_fails_clearly_without_a_producer") else {
        return;
    };
    let channel = unique_channel("ex-pynone");
    let out = run(
        &python,
        &[
            &python_reader(),
            "--channel",
            &channel,
            "--timeout-ms",
            "200",
        ],
    );
    assert!(!out.success, "the reader succeeded without a producer");
    assert!(
        out.stderr
            .contains(&format!("no producer appeared on channel '{channel}'")),
        "{}",
        out.stderr
    );
}

/// The host transport carries no CUDA meta, so this puts one on a buffer as
/// cudaipcsrc does (the fields through the C API: PyGObject hands out copies
/// of the meta's structure) and reads it with reader.py's own function.
const META_CHECK: &str = r#"
import ctypes, importlib.util, sys
spec = importlib.util.spec_from_file_location("reader", sys.argv[1])
reader = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reader)
Gst = reader.Gst
Gst.init(None)
reader.plugin_or_exit()  # loading the plugin registers the meta
buffer = Gst.Buffer.new()
print("without", reader.cuda_meta(buffer))
buffer.add_custom_meta("CudaIpcMeta")
gst = ctypes.CDLL("libgstreamer-1.0.so.0")
gst.gst_buffer_get_custom_meta.restype = ctypes.c_void_p
gst.gst_buffer_get_custom_meta.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
gst.gst_custom_meta_get_structure.restype = ctypes.c_void_p
gst.gst_custom_meta_get_structure.argtypes = [ctypes.c_void_p]
meta = gst.gst_buffer_get_custom_meta(hash(buffer), b"CudaIpcMeta")  # hash: the GstBuffer*
structure = gst.gst_custom_meta_get_structure(meta)
G_TYPE_INT, G_TYPE_UINT64 = ctypes.c_size_t(6 << 2), ctypes.c_size_t(11 << 2)
gst.gst_structure_set(ctypes.c_void_p(structure),
    b"device-ptr", G_TYPE_UINT64, ctypes.c_uint64(0x7f0000201000),
    b"pitch", G_TYPE_INT, ctypes.c_int(11520),
    b"size", G_TYPE_UINT64, ctypes.c_uint64(24883200),
    b"device-id", G_TYPE_INT, ctypes.c_int(1), None)
meta = reader.cuda_meta(buffer)
print("with", " ".join(f"{k}={v}" for k, v in sorted(meta.items())))
"#;

#[test]
fn python_reader_reads_the_cuda_meta_through_introspection() {
    let Some(python) = python_with_gi("python_reader_reads_the_cuda_meta_through_introspection")
    else {
        return;
    };
    let out = run(&python, &["-c", META_CHECK, &python_reader()]);
    out.assert_success("the meta check");
    assert!(out.stdout.contains("without None"), "{}", out.stdout);
    assert!(
        out.stdout.contains(&format!(
            "with device-id=1 device-ptr={} pitch=11520 size=24883200",
            0x7f00_0020_1000u64
        )),
        "{}",
        out.stdout
    );
}

// -------------------------------------------------------------------- GPU

#[test]
fn publisher_kernel_compiles_with_nvrtc() {
    use cudaipc_transport::cuda::nvrtc::{self, Image, Target};
    if let Err(e) = nvrtc::describe() {
        if std::env::var("CUDAIPC_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
            panic!("CUDAIPC_REQUIRE_NVRTC=1 but NVRTC is not usable: {e}");
        }
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: NVRTC not found (publisher_kernel_compiles_with_nvrtc: {e})"
        );
        return;
    }
    let Image::Ptx(ptx) = nvrtc::compile(pattern::KERNEL, "examples-render", Target::Ptx(7, 5))
        .unwrap_or_else(|e| panic!("the examples' kernel does not compile:\n{e}"))
    else {
        panic!("asked for PTX");
    };
    assert!(String::from_utf8_lossy(&ptx).contains(".entry render("));
}

/// On a GPU host: the publisher renders on the GPU into CUDA memory, the
/// readers get the producer's device memory (pointer and pitch) and, once
/// downloaded, exactly the pattern.
#[test]
fn gpu_publisher_and_readers_share_device_memory() {
    if !common::gpu("gpu_publisher_and_readers_share_device_memory") {
        return;
    }
    let channel = unique_channel("ex-gpu");
    let python = python_with_gi("gpu_publisher_and_readers_share_device_memory (python)");
    let reader = start(
        example("reader"),
        &["--channel", &channel, "--timeout-ms", "30000"],
    );
    let py_reader = python.as_ref().map(|python| {
        start(
            python,
            &[
                &python_reader(),
                "--channel",
                &channel,
                "--timeout-ms",
                "30000",
            ],
        )
    });
    let consumers = 1 + py_reader.is_some() as usize;
    let publisher = run(
        example("publisher"),
        &[
            "--channel",
            &channel,
            "--frames",
            "30",
            "--size",
            &size_arg(),
            "--unpaced",
            "--wait-consumers",
            &consumers.to_string(),
        ],
    );
    publisher.assert_success("publisher");
    assert!(
        publisher.stderr.contains("rendered on the GPU"),
        "{}",
        publisher.stderr
    );
    assert_published(&publisher, 30, "cuda");
    let mut readers = vec![("reader", reader.finish(LIMIT))];
    if let Some(py) = py_reader {
        readers.push(("python reader", py.finish(LIMIT)));
    }
    let pitch = (SIZE.0 * 4).to_string();
    for (what, out) in &readers {
        out.assert_success(what);
        assert_every_frame(out, 30, "cuda", what);
        let lines = frames(out);
        // The Rust reader has the device pointer of every frame; the meta
        // (and with it, Python's view) is on the frames that wrap the
        // producer's memory, the first one at least.
        for (n, _, line) in &lines {
            if *what == "reader" || *n == 0 {
                assert!(
                    field(line, "device-ptr").is_some_and(|p| p.starts_with("0x") && p != "0x0"),
                    "{what}: {line}"
                );
            }
            if field(line, "device-ptr").is_some() {
                assert_eq!(
                    field(line, "size"),
                    Some(&*(SIZE.0 * SIZE.1 * 4).to_string())
                );
            }
            if let Some(p) = field(line, "pitch") {
                assert_eq!(p, pitch, "{what}: {line}");
            }
        }
    }
}
