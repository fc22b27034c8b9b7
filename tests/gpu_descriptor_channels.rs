// SPDX-License-Identifier: MPL-2.0

// Descriptor channels (`ipc-mode=fd`) on the cuda transport, with real
// processes: the slots are device allocations handed over the channel's
// socket as file descriptors, ordered by the timeline (or events), so that
// 4K frames cross users and PID namespaces zero copy. Run where a GPU is
// (they print SKIPPED elsewhere, and fail with CUDAIPC_REQUIRE_GPU=1).

mod common;

use std::time::Duration;

use common::{
    Launch, OTHER_USER, OtherNamespaces, ShmDir, gpu, launch_with, other_user_or_skip,
    reference_checksums, unique_channel, wait_until,
};

const LIMIT: Duration = Duration::from_secs(120);
const SOURCE_4K: &str = "videotestsrc num-buffers=24 pattern=ball ! video/x-raw,format=RGB,width=3840,height=2160,framerate=30/1";

fn nobody_uid() -> u32 {
    let out = std::process::Command::new("id")
        .args(["-u", "nobody"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// A 4K producer on the cuda transport over a descriptor channel, waiting
/// for one consumer; its debug log says which ordering it chose.
fn producer(dir: &ShmDir, channel: &str, extra: &str) -> Launch {
    let env = [dir.env()[0], ("GST_DEBUG", "cudaipcsink:4")];
    launch_with(
        &[],
        &env,
        &format!(
            "{SOURCE_4K} ! rscudaipcsink channel={channel} transport=cuda ipc-mode=fd sync=false wait-for-connection=1 {extra}"
        ),
    )
}

/// A consumer that keeps CUDA memory (checksumsink downloads what it
/// reads).
fn consumer_pipeline(channel: &str, extra: &str) -> String {
    format!(
        "rscudaipcsrc channel={channel} ipc-mode=fd connect-timeout=60000 {extra} ! checksumsink"
    )
}

fn frames_cross_intact(gpu_sync: &str, expected_log: &str) {
    let dir = ShmDir::new("gpufd");
    let channel = unique_channel("gpufd");
    let expected = reference_checksums(SOURCE_4K);
    let consumer = launch_with(&[], &dir.env(), &consumer_pipeline(&channel, ""));
    let producer = producer(&dir, &channel, gpu_sync);
    let socket = format!("cudaipc-{channel}@socket");
    wait_until(LIMIT, "the channel's socket", || {
        dir.names().contains(&socket)
    });
    let named: Vec<String> = dir
        .names()
        .into_iter()
        .filter(|n| !n.contains("@waiter."))
        .collect();
    assert_eq!(named, vec![socket], "nothing but the socket has a name");
    // The consumer first: a producer waits for it for good.
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer");
    assert_eq!(done.checksums(), expected, "{gpu_sync}");
    let produced = producer.finish(LIMIT);
    produced.assert_success("producer");
    assert!(
        produced.stderr.contains(expected_log),
        "the sink says '{expected_log}':\n{}",
        produced.stderr
    );
}

#[test]
fn cuda_frames_cross_a_descriptor_channel_on_the_timeline_by_default() {
    if gpu("cuda_frames_cross_a_descriptor_channel_on_the_timeline_by_default") {
        frames_cross_intact("", "gpu-sync Timeline");
    }
}

#[test]
fn cuda_frames_cross_a_descriptor_channel_with_events() {
    if gpu("cuda_frames_cross_a_descriptor_channel_with_events") {
        frames_cross_intact("gpu-sync=event", "gpu-sync Event");
    }
}

/// Another user's consumer reads every 4K frame on the timeline: no event
/// file is involved, the allocations come as descriptors.
#[test]
fn another_users_consumer_reads_cuda_frames_on_the_timeline() {
    const TEST: &str = "another_users_consumer_reads_cuda_frames_on_the_timeline";
    if !gpu(TEST) || !other_user_or_skip(TEST) {
        return;
    }
    let dir = ShmDir::new("gpufdcred");
    let channel = unique_channel("gpufdcred");
    let me = cudaipc_channel::shm::effective_uid();
    let expected = reference_checksums(SOURCE_4K);
    let consumer = launch_with(
        &OTHER_USER,
        &dir.env(),
        &consumer_pipeline(&channel, &format!("allowed-producers={me}")),
    );
    let producer = producer(
        &dir,
        &channel,
        &format!("permissions=0666 allowed-uids={}", nobody_uid()),
    );
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer of another user");
    assert_eq!(done.checksums(), expected);
    producer.finish(LIMIT).assert_success("producer");
}

/// A consumer in other PID and mount namespaces (a container, as far as
/// `unshare` makes one), sharing only the socket's folder and the GPU's
/// device nodes, reads every 4K frame zero copy.
#[test]
fn a_consumer_in_other_namespaces_reads_cuda_frames() {
    const TEST: &str = "a_consumer_in_other_namespaces_reads_cuda_frames";
    if !gpu(TEST) {
        return;
    }
    let dir = ShmDir::new("gpufdns");
    let Some(namespaces) = OtherNamespaces::new(TEST, &dir.0) else {
        return;
    };
    let channel = unique_channel("gpufdns");
    let expected = reference_checksums(SOURCE_4K);
    let consumer = launch_with(
        &namespaces.wrapper(),
        &namespaces.env(),
        &consumer_pipeline(&channel, ""),
    );
    let producer = producer(&dir, &channel, "");
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer in other namespaces");
    assert_eq!(done.checksums(), expected);
    producer.finish(LIMIT).assert_success("producer");
}

/// Bytes of GPU memory in use on device 0, as the driver reports them.
fn gpu_memory_used_mib() -> u64 {
    let out = std::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=memory.used",
            "--format=csv,noheader,nounits",
            "--id=0",
        ])
        .output()
        .expect("nvidia-smi");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a number of MiB")
}

/// Consumers killed at any moment (connecting, receiving the slots,
/// mapping them, reading) leave nothing behind: the GPU's memory in use
/// and the producer's descriptors come back to where they were, and a last
/// consumer still reads. `CUDAIPC_KILL_CYCLES` sets the number of cycles.
#[test]
fn consumers_killed_at_any_moment_leave_no_gpu_memory_behind() {
    if !gpu("consumers_killed_at_any_moment_leave_no_gpu_memory_behind") {
        return;
    }
    let cycles: u64 = std::env::var("CUDAIPC_KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let dir = ShmDir::new("gpufdkill");
    let channel = unique_channel("gpufdkill");
    let ((fds, used), (fds_after, used_after)) = common::KillCycles {
        dir: &dir,
        channel: &channel,
        producer: format!(
            "videotestsrc is-live=true pattern=ball ! video/x-raw,format=RGB,width=3840,height=2160,framerate=60/1 ! rscudaipcsink channel={channel} transport=cuda ipc-mode=fd when-full=drop"
        ),
        cycles,
        warm_ms: 1500,
        first_kill_ms: 20,
        step_ms: 53,
        spread_ms: 700,
    }
    .run(|pid| (common::proc_fds(pid), gpu_memory_used_mib()));
    eprintln!(
        "{cycles} kill cycles: GPU memory {used} -> {used_after} MiB, producer descriptors {fds} -> {fds_after}"
    );
    assert!(fds_after <= fds + 2, "descriptors {fds} -> {fds_after}");
    assert!(
        used_after <= used + 64,
        "GPU memory in use {used} -> {used_after} MiB"
    );
}
