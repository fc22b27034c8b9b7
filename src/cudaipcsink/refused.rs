// SPDX-License-Identifier: MPL-2.0

//! What the sink says when upstream sends it caps it cannot take, instead
//! of GStreamer's bare not-negotiated: which formats and memories it takes,
//! and the element that converts (as `rscudaipcsrc` names the converter its
//! downstream needs).

use crate::memory::CAPS_FEATURE_CUDA_MEMORY;
use crate::video::FORMATS;

/// The formats the sink takes, as caps write them: "RGB, RGBA, ... and I420".
pub(super) fn formats() -> String {
    let names: Vec<&str> = FORMATS.iter().map(|f| f.to_str().as_str()).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// Why the sink refuses `caps`, and what to put before it.
pub(super) fn why(caps: &gst::Caps) -> String {
    let Some(structure) = caps.structure(0) else {
        return format!(
            "rscudaipcsink cannot take empty caps; it takes video/x-raw in {}",
            formats()
        );
    };
    let features = caps.features(0).map(|f| f.to_string()).unwrap_or_default();
    if structure.name() != "video/x-raw" {
        return format!(
            "rscudaipcsink takes raw video (video/x-raw in {}), not {}: decode it first (e.g. ... ! decodebin ! videoconvert ! rscudaipcsink)",
            formats(),
            structure.name()
        );
    }
    let memory = features.split(',').map(str::trim).find(|f| {
        f.starts_with("memory:") && *f != CAPS_FEATURE_CUDA_MEMORY && *f != "memory:SystemMemory"
    });
    if let Some(memory) = memory {
        return format!(
            "rscudaipcsink takes frames in system memory or in CUDA memory ({CAPS_FEATURE_CUDA_MEMORY}), not in {memory}: put an element that brings them into system memory before it (gldownload for GL memory, nvvidconv for NVMM, videoconvert after it)"
        );
    }
    let format = structure.get::<&str>("format").ok();
    let converter = if features.contains(CAPS_FEATURE_CUDA_MEMORY) {
        "cudaconvert (CUDA memory) or cudadownload ! videoconvert"
    } else {
        "videoconvert"
    };
    match format {
        Some(format) if !FORMATS.contains(&gst_video::VideoFormat::from_string(format)) => {
            format!(
                "rscudaipcsink does not take format {format}: it takes {}; put {converter} before it (... ! {} ! rscudaipcsink)",
                formats(),
                converter.split(' ').next().unwrap_or("videoconvert")
            )
        }
        _ => format!(
            "rscudaipcsink cannot take caps {caps}: it takes video/x-raw in {}, in system or CUDA memory; put {converter} before it",
            formats()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsupported_format_names_the_formats_and_videoconvert() {
        gst::init().unwrap();
        let caps: gst::Caps = "video/x-raw,format=YUY2,width=64,height=48"
            .parse()
            .unwrap();
        assert_eq!(
            why(&caps),
            "rscudaipcsink does not take format YUY2: it takes RGB, RGBA, BGRA, RGBx, BGRx, GRAY8, NV12 and I420; put videoconvert before it (... ! videoconvert ! rscudaipcsink)"
        );
        let cuda: gst::Caps = "video/x-raw(memory:CUDAMemory),format=P010_10LE"
            .parse()
            .unwrap();
        assert!(
            why(&cuda)
                .contains("put cudaconvert (CUDA memory) or cudadownload ! videoconvert before it")
        );
        let encoded: gst::Caps = "video/x-h264".parse().unwrap();
        assert!(why(&encoded).contains("not video/x-h264: decode it first"));
        let gl: gst::Caps = "video/x-raw(memory:GLMemory),format=RGBA".parse().unwrap();
        assert!(why(&gl).contains("not in memory:GLMemory"));
    }
}
