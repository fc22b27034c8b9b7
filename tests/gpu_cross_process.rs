// The cross-process tests on the cuda transport: run where a GPU is (they
// print SKIPPED elsewhere, and fail with CUDAIPC_REQUIRE_GPU=1).

mod common;

use std::collections::HashSet;
use std::sync::Once;
use std::time::Duration;

use common::*;
use gst::prelude::*;

const LIMIT: Duration = Duration::from_secs(120);
const SOURCE_4K: &str = "videotestsrc num-buffers=24 pattern=ball ! video/x-raw,format=RGB,width=3840,height=2160,framerate=30/1";

fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        gst::init().unwrap();
        gstcudaipc::plugin_register_static().unwrap();
    });
}

fn gpu(test: &str) -> bool {
    gstcudaipc::test_support::gpu_or_skip(test).is_some()
}

/// 4K RGB over the cuda transport with `sink_props`, read by one consumer
/// that keeps CUDA memory (checksumsink maps it, which downloads) and one
/// that asks for system memory (the source downloads).
fn frames_arrive_intact(sink_props: &str) {
    let expected = reference_checksums(SOURCE_4K);
    let channel = unique_channel("gpu");
    let in_cuda = launch(&format!(
        "cudaipcsrc channel={channel} connect-timeout=60000 ! checksumsink"
    ));
    let in_system = launch(&format!(
        "cudaipcsrc channel={channel} connect-timeout=60000 ! videoconvert ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 2, LIMIT);
    let producer = launch(&format!(
        "{SOURCE_4K} ! cudaipcsink channel={channel} transport=cuda sync=false {sink_props}"
    ));
    producer.finish(LIMIT).assert_success("producer");
    for consumer in [in_cuda, in_system] {
        let done = consumer.finish(LIMIT);
        done.assert_success("consumer");
        assert_eq!(done.checksums(), expected, "{sink_props}");
    }
}

#[test]
fn cuda_transport_default_configuration_delivers_4k_frames_intact() {
    if gpu("cuda_transport_default_configuration_delivers_4k_frames_intact") {
        frames_arrive_intact("");
    }
}

#[test]
fn cuda_transport_seed_configuration_delivers_4k_frames_intact() {
    if gpu("cuda_transport_seed_configuration_delivers_4k_frames_intact") {
        frames_arrive_intact("slots=1 gpu-sync=host wait-mode=spin");
    }
}

/// The source wraps the producer's slots: its buffers are CUDA memory whose
/// device pointers are exactly the `slots` slot addresses, reused in turn.
#[test]
fn the_source_wraps_the_slots_without_copying() {
    if !gpu("the_source_wraps_the_slots_without_copying") {
        return;
    }
    init();
    let channel = unique_channel("wrap");
    let producer = launch(&format!(
        "videotestsrc num-buffers=40 ! video/x-raw,format=RGB,width=3840,height=2160,framerate=30/1 ! cudaipcsink channel={channel} transport=cuda slots=3 sync=false"
    ));
    let pipeline = gst::parse::launch(&format!(
        "cudaipcsrc channel={channel} connect-timeout=60000 ! appsink name=out sync=false"
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    let appsink = pipeline
        .by_name("out")
        .unwrap()
        .downcast::<gst_app::AppSink>()
        .unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let mut pointers = HashSet::new();
    let mut frames = 0;
    while let Ok(sample) = appsink.pull_sample() {
        let buffer = sample.buffer().unwrap();
        let memory = gstcudaipc::memory::buffer_device_memory(buffer)
            .expect("buffers from cudaipcsrc hold CUDA memory");
        let meta = gstcudaipc::memory::CudaIpcMeta::get(buffer).expect("CudaIpcMeta");
        assert_eq!(meta.device_ptr, memory.ptr);
        assert_eq!(meta.pitch, 3840 * 3);
        assert_eq!(meta.size, 3840 * 2160 * 3);
        assert!(
            buffer
                .peek_memory(0)
                .flags()
                .contains(gst::MemoryFlags::READONLY),
            "shared frames are read-only"
        );
        pointers.insert(memory.ptr);
        frames += 1;
    }
    pipeline.set_state(gst::State::Null).unwrap();
    producer.finish(LIMIT).assert_success("producer");
    assert_eq!(frames, 40);
    assert_eq!(pointers.len(), 3, "every frame must be one of the 3 slots");
}
