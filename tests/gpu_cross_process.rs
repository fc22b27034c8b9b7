// The cross-process tests on the cuda transport: run where a GPU is (they
// print SKIPPED elsewhere, and fail with CUDAIPC_REQUIRE_GPU=1).

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use gst::prelude::*;

const LIMIT: Duration = Duration::from_secs(120);
const SOURCE_4K: &str = "videotestsrc num-buffers=24 pattern=ball ! video/x-raw,format=RGB,width=3840,height=2160,framerate=30/1";

/// 4K RGB over the cuda transport with `sink_props`, read by one consumer
/// that keeps CUDA memory (checksumsink maps it, which downloads) and one
/// that asks for system memory (the source downloads).
fn frames_arrive_intact(sink_props: &str) {
    let expected = reference_checksums(SOURCE_4K);
    let channel = unique_channel("gpu");
    let in_cuda = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=60000 ! checksumsink"
    ));
    let in_system = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=60000 ! videoconvert ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 2, LIMIT);
    let producer = launch(&format!(
        "{SOURCE_4K} ! rscudaipcsink channel={channel} transport=cuda sync=false {sink_props}"
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
        "videotestsrc num-buffers=40 ! video/x-raw,format=RGB,width=3840,height=2160,framerate=30/1 ! rscudaipcsink channel={channel} transport=cuda slots=3 sync=false"
    ));
    let pipeline = gst::parse::launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=60000 ! appsink name=out sync=false"
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
            .expect("buffers from rscudaipcsrc hold CUDA memory");
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

/// A consumer on GPU 1 reads the slots of a producer on GPU 0 through peer
/// access (`cuda-device-id=1`): its buffers are GPU 1 memory, and every
/// counter frame arrives intact (checked on GPU 1 by `cudaprocess verify`).
#[test]
fn a_consumer_on_another_gpu_reads_every_frame_through_peer_access() {
    const TEST: &str = "a_consumer_on_another_gpu_reads_every_frame_through_peer_access";
    const FRAMES: u64 = 240;
    let Some(gpu0) = gpu_or_skip(TEST) else {
        return;
    };
    // CUDAIPC_REQUIRE_GPU=1 asks for one GPU, not two: skipped, not failed.
    let skip = match cudaipc_transport::cuda::Device::get(1) {
        Err(e) => Some(format!("needs two CUDA devices ({e})")),
        Ok(gpu1) if !gpu1.can_access_peer(&gpu0).unwrap_or(false) => {
            Some("needs two CUDA devices with peer access (GPU 1 cannot map GPU 0's memory)".into())
        }
        Ok(_) => None,
    };
    if let Some(why) = skip {
        // Past the harness's capture, as gpu_or_skip prints.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED: {why} ({TEST})");
        return;
    }
    init();
    let channel = unique_channel("peer");
    let pipeline = gst::parse::launch(&format!(
        "rscudaipcsrc channel={channel} cuda-device-id=1 connect-timeout=60000 ! cudaprocess name=check verify=true ! fakesink sync=false"
    ))
    .unwrap()
    .downcast::<gst::Pipeline>()
    .unwrap();
    let check = pipeline.by_name("check").unwrap();
    let devices = std::sync::Arc::new(std::sync::Mutex::new(HashSet::new()));
    let seen = devices.clone();
    check
        .static_pad("sink")
        .unwrap()
        .add_probe(gst::PadProbeType::BUFFER, move |_, info| {
            if let Some(buffer) = info.buffer() {
                let device = gstcudaipc::memory::buffer_device_memory(buffer)
                    .map_or(-1, |m| m.device.ordinal());
                seen.lock().unwrap().insert(device);
            }
            gst::PadProbeReturn::Ok
        });
    pipeline.set_state(gst::State::Playing).unwrap();
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let producer = launch(&format!(
        "cudatestsrc num-buffers={FRAMES} pattern=counter ! video/x-raw(memory:CUDAMemory),format=RGB,width=3840,height=2160,framerate=0/1 ! rscudaipcsink channel={channel} sync=false"
    ));
    producer.finish(LIMIT).assert_success("producer");
    let end = pipeline
        .bus()
        .unwrap()
        .timed_pop_filtered(
            gst::ClockTime::from_seconds(LIMIT.as_secs()),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        )
        .expect("the consumer on GPU 1 reaches EOS");
    if let gst::MessageView::Error(e) = end.view() {
        panic!("consumer on GPU 1: {} ({:?})", e.error(), e.debug());
    }
    let stats = check.property::<gst::Structure>("stats");
    pipeline.set_state(gst::State::Null).unwrap();
    let count = |field: &str| stats.get::<u64>(field).unwrap();
    assert_eq!(count("frames"), FRAMES, "{stats}");
    assert_eq!(count("verified"), FRAMES, "{stats}");
    assert_eq!(count("corrupt"), 0, "{stats}");
    assert_eq!(count("missing"), 0, "{stats}");
    assert_eq!(
        *devices.lock().unwrap(),
        HashSet::from([1]),
        "the consumer reads on GPU 1"
    );
}
