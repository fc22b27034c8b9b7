// SPDX-License-Identifier: MPL-2.0

//! The GStreamer runtime the suite runs on: scripts/test-gst126.sh runs
//! every test binary again on GStreamer 1.26 and sets `CUDAIPC_EXPECT_GST`,
//! so a staging mistake that left them on the build machine's 1.22 fails
//! here instead of passing unnoticed.

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
