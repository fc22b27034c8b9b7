// Descriptor channels (`ipc-mode=fd`) with real processes on the host
// transport: frames cross with nothing but the channel's socket named in the
// shm folder, and both sides check the other's credentials (another user
// played by `setpriv`; SKIPPED where that is impossible). The socket
// protocol's hostile peers are unit tests (`ipc::socket::tests`).

mod common;

use std::time::Duration;

use common::{
    Launch, OTHER_USER, OtherNamespaces, ShmDir, launch_with, other_user_or_skip,
    reference_checksums, unique_channel, wait_until,
};

const LIMIT: Duration = Duration::from_secs(60);
const SOURCE: &str = "videotestsrc num-buffers=30 pattern=ball ! video/x-raw,format=RGB,width=64,height=48,framerate=30/1";

fn nobody_uid() -> u32 {
    let out = std::process::Command::new("id")
        .args(["-u", "nobody"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn producer(dir: &ShmDir, channel: &str, extra: &str) -> Launch {
    launch_with(
        &[],
        &dir.env(),
        &format!(
            "{SOURCE} ! rscudaipcsink channel={channel} transport=host ipc-mode=fd sync=false wait-for-connection=1 {extra}"
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
        &format!("rscudaipcsrc channel={channel} connect-timeout=20000 ! checksumsink"),
    );
    let producer = producer(&dir, &channel, "");
    let socket = format!("cudaipc-{channel}@socket");
    wait_until(LIMIT, "the channel's socket", || {
        dir.names().contains(&socket)
    });
    let named: Vec<String> = dir
        .names()
        .into_iter()
        // Waiting consumers' markers, and a marker's name for the moment
        // before it is linked to its final one (shm.rs WaiterMarker::create).
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
        let producer = producer(&dir, &channel, &format!("permissions=0666 {allowed}"));
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
            "rscudaipcsrc channel={channel} ipc-mode=fd connect-timeout=20000 allowed-producers={me} ! checksumsink"
        ),
    );
    let producer = producer(
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
        &format!("rscudaipcsrc channel={channel} ipc-mode=fd connect-timeout=20000 ! checksumsink"),
    );
    let producer = producer(&dir, &channel, "");
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
    let producer = producer(&dir, &channel, "");
    let socket = dir.0.join(format!("cudaipc-{channel}@socket"));
    wait_until(LIMIT, "the channel's socket", || socket.exists());
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
        &format!("rscudaipcsrc channel={channel} ipc-mode=fd connect-timeout=20000 ! checksumsink"),
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
