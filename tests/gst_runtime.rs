// SPDX-License-Identifier: MPL-2.0

//! The GStreamer runtime the suite runs on: scripts/test-gst126.sh runs
//! every test binary again on GStreamer 1.26 and sets `CUDAIPC_EXPECT_GST`,
//! so a staging mistake that left them on the build machine's 1.22 fails
//! here instead of passing unnoticed.

#[test]
fn runs_on_the_expected_gstreamer() {
    gst::init().unwrap();
    let (major, minor, micro, _) = gst::version();
    let running = format!("{major}.{minor}");
    eprintln!("GStreamer {major}.{minor}.{micro}");
    if let Ok(expected) = std::env::var("CUDAIPC_EXPECT_GST") {
        assert_eq!(running, expected, "the suite runs on the wrong GStreamer");
    }
    // The plugin loads on this runtime and registers its elements under
    // both names.
    gstcudaipc::plugin_register_static().unwrap();
    for name in ["cudaipcsink", "rscudaipcsink", "cudaipcsrc", "rscudaipcsrc"] {
        assert!(
            gst::ElementFactory::find(name).is_some(),
            "{name} missing on GStreamer {running}"
        );
    }
}
