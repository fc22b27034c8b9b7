// SPDX-License-Identifier: MPL-2.0

//! The GStreamer runtime the suite runs on: scripts/test-gst-runtime.sh
//! runs every test binary again on GStreamer 1.26 and 1.28 and sets
//! `CUDAIPC_EXPECT_GST`, so a staging mistake that left them on the build
//! machine's 1.22 fails here instead of passing unnoticed.

use gst::prelude::*;

#[test]
fn runs_on_the_expected_gstreamer() {
    gst::init().unwrap();
    let (major, minor, micro, _) = gst::version();
    let running = format!("{major}.{minor}");
    eprintln!("GStreamer {major}.{minor}.{micro}");
    if let Ok(expected) = std::env::var("CUDAIPC_EXPECT_GST") {
        assert_eq!(running, expected, "the suite runs on the wrong GStreamer");
    }
    // The plugin loads on this runtime; its rs names always work, and the
    // bare names are its own exactly where the installation says so (never
    // by registry scan order).
    gstcudaipc::plugin_register_static().unwrap();
    let bare_are_ours = gstcudaipc::element_names::register_bare_names();
    for (bare, rs) in [
        ("cudaipcsink", "rscudaipcsink"),
        ("cudaipcsrc", "rscudaipcsrc"),
    ] {
        let plugin_of = |name: &str| {
            gst::ElementFactory::find(name).and_then(|f| f.plugin_name().map(|n| n.to_string()))
        };
        assert_eq!(
            plugin_of(rs).as_deref(),
            Some("cudaipc"),
            "{rs} on GStreamer {running}"
        );
        let bare_plugin = plugin_of(bare);
        eprintln!("{bare}: {bare_plugin:?}");
        if bare_are_ours {
            assert_eq!(
                bare_plugin.as_deref(),
                Some("cudaipc"),
                "{bare} on GStreamer {running}"
            );
        } else {
            assert_ne!(
                bare_plugin.as_deref(),
                Some("cudaipc"),
                "{bare} on GStreamer {running}"
            );
        }
    }
}

use crate::common;

const LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// A folder of its own for one test, removed at the end: an empty shm
/// folder, and the address nvcodec's `cudaipcsink` would listen at.
struct Beside(std::path::PathBuf);

impl Beside {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "cudaipc-{tag}-{:x}",
            cudaipc_channel::shm::random_u64()
        ));
        std::fs::create_dir_all(dir.join("shm")).unwrap();
        Self(dir)
    }

    fn address(&self) -> std::path::PathBuf {
        self.0.join("gst.cuda.ipc")
    }

    /// A unix socket listening at the address, standing in for nvcodec's
    /// sink while it lives.
    fn nvcodec_sink(&self) -> std::os::unix::net::UnixListener {
        std::os::unix::net::UnixListener::bind(self.address()).unwrap()
    }

    /// `pipeline` run to its end in a `gst-launch-1.0` child; its failure
    /// and what it printed. Live sources: gst-launch-1.0 1.22 can hang
    /// after an error while it waits for a non-live pipeline to preroll
    /// (docs/reliability.md).
    fn run_failing(&self, pipeline: &str) -> String {
        let (address, shm) = (self.address(), self.0.join("shm"));
        let done = common::launch_with(
            &[],
            &[
                ("CUDAIPC_UPSTREAM_ADDRESS", address.to_str().unwrap()),
                ("CUDAIPC_SHM_DIR", shm.to_str().unwrap()),
            ],
            pipeline,
        )
        .finish(LIMIT);
        assert!(!done.success, "{pipeline} succeeded");
        format!("{}{}", done.stdout, done.stderr)
    }
}

impl Drop for Beside {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Both plugins installed and the names mixed up: GStreamer's own
/// `cudaipcsink` (nvcodec, stood in for by a unix socket listening where it
/// listens by default) and this plugin's source left at its default
/// channel. Waiting would never end; the source fails at once and says what
/// runs and what to use instead.
#[test]
fn a_source_beside_nvcodecs_sink_at_its_default_address_fails_at_once() {
    let beside = Beside::new("mixed");
    let _nvcodec_sink = beside.nvcodec_sink();
    let started = std::time::Instant::now();
    let text = beside.run_failing("rscudaipcsrc is-live=true connect-timeout=120000 ! fakesink");
    assert!(
        text.contains("GStreamer's own cudaipcsink (nvcodec) listens at")
            && text.contains(&format!("address={}", beside.address().display()))
            && text.contains("rscudaipcsink"),
        "{text}"
    );
    // Not after its 120 s connect-timeout (a generous bound).
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
}

/// A channel the user named is waited for as always (its producer may
/// start later), and the timeout's error also names nvcodec's sink; with no
/// such sink the error does not mention it.
#[test]
fn a_named_channel_is_waited_for_and_its_timeout_names_nvcodecs_sink() {
    let beside = Beside::new("mixednamed");
    let pipeline = "rscudaipcsrc channel=cam0 is-live=true connect-timeout=300 ! fakesink";
    let without = beside.run_failing(pipeline);
    assert!(
        without.contains("no producer appeared on channel"),
        "{without}"
    );
    assert!(!without.contains("nvcodec"), "{without}");
    let _nvcodec_sink = beside.nvcodec_sink();
    let with = beside.run_failing(pipeline);
    assert!(with.contains("no producer appeared on channel"), "{with}");
    assert!(
        with.contains("GStreamer's own cudaipcsink (nvcodec) listens at"),
        "{with}"
    );
}
