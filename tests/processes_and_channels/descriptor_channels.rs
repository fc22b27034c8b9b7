// Descriptor channels (`ipc-mode=fd`) with real processes, on each
// transport: frames cross with nothing but the channel's socket named in the
// shm folder, and both sides check the other's credentials (another user
// played by `setpriv`; SKIPPED where that is impossible). On the cuda
// transport the slots are device allocations handed over the socket as file
// descriptors, ordered by the timeline (or events), so that 4K frames cross
// users and PID namespaces zero copy (where a GPU is: SKIPPED elsewhere,
// failing with CUDAIPC_REQUIRE_GPU=1). The socket protocol's hostile peers
// are unit tests (`ipc::socket::tests`).

use crate::common;

use std::time::Duration;

use common::{
    CUDA, HOST, Launch, OTHER_USER, OtherNamespaces, ShmDir, Transport, gpu, launch_with,
    other_user_or_skip, reference_checksums, unique_channel, wait_until,
};

const LIMIT: Duration = HOST.limit;
const SOURCE: &str = "videotestsrc num-buffers=30 pattern=ball ! video/x-raw,format=RGB,width=64,height=48,framerate=30/1";
const SOURCE_4K: &str = "videotestsrc num-buffers=24 pattern=ball ! video/x-raw,format=RGB,width=3840,height=2160,framerate=30/1";

fn nobody_uid() -> u32 {
    let out = std::process::Command::new("id")
        .args(["-u", "nobody"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// A producer on transport `t` over a descriptor channel, waiting for one
/// consumer: small frames on the host transport; 4K on the cuda one, whose
/// debug log says which ordering it chose.
fn producer(t: Transport, dir: &ShmDir, channel: &str, extra: &str) -> Launch {
    let (source, debug) = if t == CUDA {
        (SOURCE_4K, "cudaipcsink:4")
    } else {
        (SOURCE, "")
    };
    let mut env = dir.env().to_vec();
    if !debug.is_empty() {
        env.push(("GST_DEBUG", debug));
    }
    let sink = t.sink;
    launch_with(
        &[],
        &env,
        &format!(
            "{source} ! rscudaipcsink channel={channel} {sink} ipc-mode=fd sync=false wait-for-connection=1 {extra}"
        ),
    )
}

/// A frame source that a consumer, attached first, reads to the end: the
/// socket is the channel's only name while it runs.
#[test]
fn frames_cross_a_descriptor_channel_that_names_nothing_but_its_socket() {
    let dir = ShmDir::new("fd");
    let channel = unique_channel("fd");
    let expected = reference_checksums(SOURCE);
    let consumer = launch_with(
        &[],
        &dir.env(),
        &format!("rscudaipcsrc channel={channel} connect-timeout=120000 ! checksumsink"),
    );
    let producer = producer(HOST, &dir, &channel, "");
    let socket = format!("cudaipc-{channel}@socket");
    wait_until(LIMIT, "the channel's socket", || {
        dir.names().contains(&socket)
    });
    let named: Vec<String> = dir
        .names()
        .into_iter()
        // Waiting consumers' markers, and a marker's name for the moment
        // before it is linked to its final one (directory.rs WaiterMarker::create).
        .filter(|n| !n.contains("@waiter.") && !n.starts_with(".cudaipc-waiter-"))
        .collect();
    assert_eq!(
        named,
        vec![socket],
        "no control block or data file has a name"
    );
    producer.finish(LIMIT).assert_success("producer");
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer");
    assert_eq!(done.checksums(), expected);
    assert_eq!(
        dir.names(),
        Vec::<String>::new(),
        "the socket goes with the producer"
    );
}

/// Another user's consumer: refused by the producer until its uid is
/// allowed, and it refuses the producer (of another user) until that one's
/// uid is trusted; with both, it reads every frame.
#[test]
fn both_sides_check_the_others_credentials() {
    const TEST: &str = "both_sides_check_the_others_credentials";
    if !other_user_or_skip(TEST) {
        return;
    }
    let dir = ShmDir::new("fdcred");
    let nobody = nobody_uid();
    let me = cudaipc_channel::shm::effective_uid();
    let expected = reference_checksums(SOURCE);
    // The socket's mode lets every user connect: the credentials decide.
    let run = |tag: &str, allowed: &str, trusted: &str| {
        let channel = unique_channel(tag);
        let producer = producer(HOST, &dir, &channel, &format!("permissions=0666 {allowed}"));
        wait_until(LIMIT, "the channel's socket", || {
            dir.names().contains(&format!("cudaipc-{channel}@socket"))
        });
        let consumer = launch_with(
            &OTHER_USER,
            &dir.env(),
            &format!(
                "rscudaipcsrc channel={channel} ipc-mode=fd is-live=true connect-timeout=5000 {trusted} ! checksumsink"
            ),
        )
        .finish(LIMIT);
        producer.signal(libc::SIGINT);
        let _ = producer.finish(LIMIT);
        consumer
    };
    let denied = run("fddenied", "", &format!("allowed-producers={me}"));
    assert!(!denied.success);
    assert!(
        denied.stderr.contains(&format!("uid {nobody}")) && denied.stderr.contains("not allowed"),
        "{}",
        denied.stderr
    );
    let distrusted = run("fddistrust", &format!("allowed-uids={nobody}"), "");
    assert!(!distrusted.success);
    assert!(
        distrusted.stderr.contains("does not trust")
            && distrusted.stderr.contains("allowed-producers"),
        "{}",
        distrusted.stderr
    );
    let channel = unique_channel("fdboth");
    let consumer = launch_with(
        &OTHER_USER,
        &dir.env(),
        &format!(
            "rscudaipcsrc channel={channel} ipc-mode=fd connect-timeout=120000 allowed-producers={me} ! checksumsink"
        ),
    );
    let producer = producer(
        HOST,
        &dir,
        &channel,
        &format!("permissions=0666 allowed-uids={nobody}"),
    );
    producer.finish(LIMIT).assert_success("producer");
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer of another user");
    assert_eq!(done.checksums(), expected);
}

/// A consumer that insists on a descriptor channel never reads a control
/// block under the channel's name (another user may have planted one).
#[test]
fn a_consumer_in_fd_mode_ignores_a_named_control_block() {
    let dir = ShmDir::new("fdonly");
    let channel = unique_channel("fdonly");
    let legacy = launch_with(
        &[],
        &dir.env(),
        &format!(
            "videotestsrc is-live=true ! video/x-raw,format=RGB,width=64,height=48 ! rscudaipcsink channel={channel} transport=host"
        ),
    );
    wait_until(LIMIT, "the legacy channel", || {
        dir.names().contains(&format!("cudaipc-{channel}"))
    });
    let done = launch_with(
        &[],
        &dir.env(),
        &format!(
            "rscudaipcsrc channel={channel} ipc-mode=fd is-live=true connect-timeout=500 ! fakesink"
        ),
    )
    .finish(LIMIT);
    legacy.signal(libc::SIGINT);
    let _ = legacy.finish(LIMIT);
    assert!(!done.success);
    assert!(
        done.stderr.contains("no producer appeared on channel"),
        "{}",
        done.stderr
    );
}

/// A consumer in other PID and mount namespaces (a container, as far as
/// `unshare` makes one) that sees nothing of the producer's /dev/shm but
/// the channel's folder (bind-mounted, an empty tmpfs over /dev/shm) reads
/// every frame of a descriptor channel on the host transport; legacy
/// channels refuse another PID namespace (`faults.rs`).
#[test]
fn a_consumer_that_shares_only_the_sockets_folder_reads_a_descriptor_channel() {
    const TEST: &str = "a_consumer_that_shares_only_the_sockets_folder_reads_a_descriptor_channel";
    let dir = ShmDir::new("fdns");
    let Some(namespaces) = OtherNamespaces::new(TEST, &dir.0) else {
        return;
    };
    let channel = unique_channel("fdns");
    let expected = reference_checksums(SOURCE);
    let consumer = launch_with(
        &namespaces.wrapper(),
        &namespaces.env(),
        &format!(
            "rscudaipcsrc channel={channel} ipc-mode=fd connect-timeout=120000 ! checksumsink"
        ),
    );
    let producer = producer(HOST, &dir, &channel, "");
    producer.finish(LIMIT).assert_success("producer");
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer in other namespaces");
    assert_eq!(done.checksums(), expected);
}

/// Hostile peers on a real producer's socket (another process): garbage, a
/// cut request, an endless line, garbage with descriptors attached, and
/// peers that connect and never speak. The producer goes on, and a real
/// consumer process reads every frame meanwhile.
#[test]
fn hostile_peers_on_a_producers_socket_hold_nothing_up() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let dir = ShmDir::new("fdhostile");
    let channel = unique_channel("fdhostile");
    let expected = reference_checksums(SOURCE);
    let producer = producer(HOST, &dir, &channel, "");
    let socket = dir.0.join(format!("cudaipc-{channel}@socket"));
    // Listening, not only named: the name can come a moment before.
    wait_until(LIMIT, "the channel's socket accepts", || {
        UnixStream::connect(&socket).is_ok()
    });
    let silent: Vec<UnixStream> = (0..6)
        .map(|_| UnixStream::connect(&socket).unwrap())
        .collect();
    let memfd = rustix::fs::memfd_create("hostile", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    for garbage in [
        &b"GET / HTTP/1.0\r\n\r\n"[..],
        b"CUDAIPC1 CONT",
        &[b'x'; 8192],
        b"CUDAIPC1 POOL 18446744073709551616\n",
    ] {
        let mut peer = UnixStream::connect(&socket).unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let _ = peer.write_all(garbage);
        let _ = peer.shutdown(std::net::Shutdown::Write);
        let mut reply = Vec::new();
        let _ = peer.read_to_end(&mut reply);
        assert!(reply.is_empty(), "{garbage:?} got {reply:?}");
    }
    // Garbage with a descriptor attached: dropped with the message.
    {
        use std::mem::MaybeUninit;
        let peer = UnixStream::connect(&socket).unwrap();
        let fds = [std::os::fd::AsFd::as_fd(&memfd)];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
        assert!(control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
        let _ = rustix::net::sendmsg(
            &peer,
            &[std::io::IoSlice::new(b"take this\n")],
            &mut control,
            rustix::net::SendFlags::NOSIGNAL,
        );
    }
    let consumer = launch_with(
        &[],
        &dir.env(),
        &format!(
            "rscudaipcsrc channel={channel} ipc-mode=fd connect-timeout=120000 ! checksumsink"
        ),
    );
    producer.finish(LIMIT).assert_success("producer");
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer");
    assert_eq!(done.checksums(), expected);
    drop(silent);
}

/// Consumers killed at any moment (while connecting, receiving, attached,
/// reading) leave nothing behind in the producer: its descriptors and
/// memory stay flat over many kill cycles, and a last consumer still reads
/// its frames.
#[test]
fn consumers_killed_at_any_moment_leave_nothing_in_the_producer() {
    let dir = ShmDir::new("fdkill");
    let channel = unique_channel("fdkill");
    let ((fds, rss), (fds_after, rss_after)) = common::KillCycles {
        dir: &dir,
        channel: &channel,
        producer: format!(
            "videotestsrc is-live=true pattern=ball ! video/x-raw,format=RGB,width=64,height=48,framerate=200/1 ! rscudaipcsink channel={channel} transport=host ipc-mode=fd when-full=drop"
        ),
        cycles: 40,
        warm_ms: 500,
        first_kill_ms: 5,
        step_ms: 37,
        spread_ms: 400,
    }
    .run(|pid| (common::proc_fds(pid), common::proc_rss_kb(pid)));
    assert!(fds_after <= fds + 2, "descriptors {fds} -> {fds_after}");
    assert!(rss_after <= rss + 8 * 1024, "RSS {rss} -> {rss_after} KiB");
}

// The cuda transport.

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
    let producer = producer(CUDA, &dir, &channel, gpu_sync);
    let socket = format!("cudaipc-{channel}@socket");
    wait_until(CUDA.limit, "the channel's socket", || {
        dir.names().contains(&socket)
    });
    let named: Vec<String> = dir
        .names()
        .into_iter()
        .filter(|n| !n.contains("@waiter."))
        .collect();
    assert_eq!(named, vec![socket], "nothing but the socket has a name");
    // The consumer first: a producer waits for it for good.
    let done = consumer.finish(CUDA.limit);
    done.assert_success("consumer");
    assert_eq!(done.checksums(), expected, "{gpu_sync}");
    let produced = producer.finish(CUDA.limit);
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
        CUDA,
        &dir,
        &channel,
        &format!("permissions=0666 allowed-uids={}", nobody_uid()),
    );
    let done = consumer.finish(CUDA.limit);
    done.assert_success("consumer of another user");
    assert_eq!(done.checksums(), expected);
    producer.finish(CUDA.limit).assert_success("producer");
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
    let producer = producer(CUDA, &dir, &channel, "");
    let done = consumer.finish(CUDA.limit);
    done.assert_success("consumer in other namespaces");
    assert_eq!(done.checksums(), expected);
    producer.finish(CUDA.limit).assert_success("producer");
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
