// SPDX-License-Identifier: MPL-2.0

//! The descriptor channel end to end, and against hostile or broken peers.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::client::exchange;
use super::messages::{read_line, send_line, send_with_fds};
use super::*;
use crate::ChannelError;
use crate::tests::unique_channel;
use crate::{
    Consumer, ConsumerConfig, IpcMode, Item, Producer, ProducerConfig, layout::control_size,
};

/// The error of something that must fail.
fn refused<T>(result: Result<T, ChannelError>) -> ChannelError {
    match result {
        Ok(_) => panic!("accepted"),
        Err(e) => e,
    }
}

fn producer(channel: &str) -> Producer {
    Producer::create(ProducerConfig {
        channel: channel.into(),
        ipc_mode: IpcMode::Fd,
        ..Default::default()
    })
    .unwrap()
}

fn consumer(channel: &str) -> Result<Consumer, ChannelError> {
    Consumer::attach(
        ConsumerConfig {
            channel: channel.into(),
            connect_timeout: Some(Duration::from_secs(5)),
            ipc_mode: Some(IpcMode::Fd),
            ..Default::default()
        },
        &AtomicBool::new(false),
    )
}

#[test]
fn the_control_block_is_handed_over_sealed_and_nothing_else_has_a_name() {
    let channel = unique_channel("fdctl");
    let p = producer(&channel);
    assert!(!shm::control_path(&channel).exists());
    assert!(socket_path(&channel).exists());
    let fds = request(&channel, Request::Control, &Peers::default()).unwrap();
    assert_eq!(fds.len(), 1);
    check_sealed(&fds[0], control_size() as u64).unwrap();
    // Nobody can shrink or grow it.
    let file = File::from(fds.into_iter().next().unwrap());
    let err = file.set_len(0).unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(rustix::io::Errno::PERM.raw_os_error())
    );
    assert!(file.set_len(control_size() as u64 * 2).is_err());
    // A consumer attaches through the socket.
    let c = consumer(&channel).unwrap();
    assert!(c.info().descriptor_channel.is_some());
    drop(c);
    drop(p);
    assert!(
        !socket_path(&channel).exists(),
        "the socket goes with the producer"
    );
}

#[test]
fn frames_flow_over_a_descriptor_channel() {
    let channel = unique_channel("fdframes");
    let no = AtomicBool::new(false);
    let p = producer(&channel);
    p.configure_pool(
        64,
        &[[0u8; crate::layout::SLOT_DESCRIPTOR_BYTES]; 2],
        b"pool",
        &no,
    )
    .unwrap();
    p.set_caps("video/x-raw", &no).unwrap();
    let mut c = consumer(&channel).unwrap();
    for pts in 0..5u64 {
        let slot = p.reserve(&no).unwrap().unwrap();
        p.publish(
            slot,
            &crate::FrameMeta {
                size: 8,
                pts: Some(pts),
                planes: vec![(0, 8)],
                ..Default::default()
            },
        )
        .unwrap();
        let Item::Frame(f) = c.next(&no, Some(Duration::from_secs(5))).unwrap() else {
            panic!("expected a frame");
        };
        assert_eq!(f.pts, Some(pts));
        c.release(f.slot);
    }
}

/// A producer that refuses a consumer answers before it reads the
/// request, and hangs up: the consumer's request then meets a closed
/// socket, and it must still report the producer's reason, not
/// "Broken pipe".
#[test]
fn a_refusal_sent_before_the_request_is_read_is_reported() {
    let (consumer_end, producer_end) = UnixStream::pair().unwrap();
    send_line(
        &producer_end,
        "DENIED uid 65534 (gid 65534) is not allowed on this channel\n",
    )
    .unwrap();
    drop(producer_end);
    let result = exchange(
        "refused-early",
        Path::new("/nonexistent"),
        &consumer_end,
        Request::Control,
        &Peers::default(),
    );
    match result {
        Err(RequestError::Channel(ChannelError::Refused { reason, .. })) => {
            assert!(
                reason.contains("uid 65534") && reason.contains("not allowed"),
                "{reason}"
            )
        }
        other => panic!("expected the producer's refusal, got {other:?}"),
    }
}

/// Hostile or broken peers on the producer's socket: garbage, a cut
/// line, an endless line, a pool nobody published, and a peer that
/// connects and never speaks. None gets descriptors, and a real consumer
/// still attaches at once meanwhile.
#[test]
fn hostile_peers_get_nothing_and_hold_nobody_up() {
    let channel = unique_channel("fdhostile");
    let p = producer(&channel);
    let path = socket_path(&channel);
    let silent: Vec<UnixStream> = (0..4)
        .map(|_| UnixStream::connect(&path).unwrap())
        .collect();
    for garbage in [
        &b"hello\n"[..],
        b"CUDAIPC1 CONTROL extra\n",
        b"CUDAIPC1 POOL x\n",
        b"CUDAIPC1 CONT",
        &[b'A'; 4096],
        &[0xff, 0xfe, b'\n'],
    ] {
        let mut peer = UnixStream::connect(&path).unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = peer.write_all(garbage);
        let _ = peer.shutdown(std::net::Shutdown::Write);
        let mut reply = Vec::new();
        let _ = peer.read_to_end(&mut reply);
        assert!(reply.is_empty(), "{garbage:?} got {reply:?}");
    }
    assert!(matches!(
        request(&channel, Request::Pool(7), &Peers::default()),
        Err(RequestError::Gone)
    ));
    let start = Instant::now();
    let c = consumer(&channel).unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    drop((c, silent, p));
}

/// A fake producer on the channel's socket: replies the consumer must
/// refuse without a panic or a hang.
#[test]
fn a_consumer_refuses_what_a_broken_producer_sends() {
    let channel = unique_channel("fdfake");
    let path = socket_path(&channel);
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let memfd = |sealed: bool, len: u64| {
        let fd = rustix::fs::memfd_create(
            "fake",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )
        .unwrap();
        File::from(fd.try_clone().unwrap()).set_len(len).unwrap();
        if sealed {
            rustix::fs::fcntl_add_seals(
                &fd,
                rustix::fs::SealFlags::SHRINK | rustix::fs::SealFlags::GROW,
            )
            .unwrap();
        }
        fd
    };
    let replies: Vec<(&str, Vec<OwnedFd>)> = vec![
        ("garbage\n", vec![]),
        ("OK 2\n", vec![memfd(true, 64)]),
        ("OK 1\n", vec![memfd(true, 64), memfd(true, 64)]),
        ("OK 1\n", vec![memfd(false, control_size() as u64)]),
        ("OK 1\n", vec![memfd(true, 64)]),
        ("OK 1 and more\n", vec![]),
    ];
    // Each reply to every connection while its scenario runs (other
    // tests list channels, and so connect to this socket too).
    listener.set_nonblocking(true).unwrap();
    for (line, fds) in &replies {
        let stop = AtomicBool::new(false);
        let err = std::thread::scope(|scope| {
            scope.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            stream.set_nonblocking(false).unwrap();
                            let _ = read_line(&stream);
                            let _ = send_with_fds(&stream, line, fds);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(2)),
                    }
                }
            });
            let err = refused(consumer(&channel));
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            err
        });
        assert!(matches!(err, ChannelError::Corrupt(_)), "{line:?}: {err}");
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_second_producer_of_the_name_is_refused_and_a_dead_ones_socket_replaced() {
    let channel = unique_channel("fdtwice");
    let p = producer(&channel);
    let err = refused(Producer::create(ProducerConfig {
        channel: channel.clone(),
        ipc_mode: IpcMode::Fd,
        ..Default::default()
    }));
    assert!(
        matches!(err, ChannelError::InUse { pid, .. } if pid == std::process::id()),
        "{err}"
    );
    // A legacy producer of the name is refused too.
    let err = refused(Producer::create(ProducerConfig {
        channel: channel.clone(),
        ..Default::default()
    }));
    assert!(matches!(err, ChannelError::InUse { .. }), "{err}");
    drop(p);
    // The socket of a producer that died without removing it.
    let stale = std::os::unix::net::UnixListener::bind(socket_path(&channel)).unwrap();
    drop(stale);
    assert!(socket_path(&channel).exists());
    let p = producer(&channel);
    drop(p);
}

#[test]
fn ids_parse_and_the_own_user_is_always_allowed() {
    assert_eq!(Peers::parse_ids("1000, 1001,").unwrap(), vec![1000, 1001]);
    assert!(matches!(
        Peers::parse_ids("bob"),
        Err(ChannelError::NotAnId(id)) if id == "bob"
    ));
    let peers = Peers {
        uids: vec![1000],
        gids: vec![20],
    };
    assert!(peers.allows(shm::effective_uid(), 999_999));
    assert!(peers.allows(1000, 999_999));
    assert!(peers.allows(999_998, 20));
    assert!(!Peers::default().allows(shm::effective_uid().wrapping_add(1), 999_999));
    for request in [Request::Control, Request::Pool(3)] {
        assert_eq!(Request::parse(request.line().trim_end()), Some(request));
    }
}

/// A listener that never accepts and whose backlog is full (another
/// user can make one at a channel's name): nobody blocks on it.
#[test]
fn a_listener_that_never_accepts_blocks_nobody() {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketType};
    let channel = unique_channel("fdstuck");
    let path = socket_path(&channel);
    let fd = rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None).unwrap();
    rustix::net::bind(&fd, &SocketAddrUnix::new(&path).unwrap()).unwrap();
    rustix::net::listen(&fd, 0).unwrap();
    // Fill the backlog.
    let queued: Vec<UnixStream> = std::iter::from_fn(|| connect(&path).ok()).take(8).collect();
    assert!(!queued.is_empty());
    assert_eq!(
        connect(&path).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    let start = Instant::now();
    assert!(matches!(
        request(&channel, Request::Control, &Peers::default()),
        Err(RequestError::NoProducer)
    ));
    assert_eq!(live_producer(&channel), None);
    let waited = Consumer::attach(
        ConsumerConfig {
            channel: channel.clone(),
            connect_timeout: Some(Duration::from_millis(300)),
            ipc_mode: Some(IpcMode::Fd),
            ..Default::default()
        },
        &AtomicBool::new(false),
    );
    assert!(matches!(waited, Err(ChannelError::NoProducer { .. })));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let _ = std::fs::remove_file(&path);
}

/// A peer that trickles its request a byte at a time is cut off after
/// the timeout for the whole line, not one per byte.
#[test]
fn a_trickling_peer_is_cut_off() {
    let channel = unique_channel("fdtrickle");
    let p = producer(&channel);
    let mut peer = UnixStream::connect(socket_path(&channel)).unwrap();
    let start = Instant::now();
    let cut = loop {
        if peer.write_all(b"C").is_err() {
            break start.elapsed();
        }
        assert!(start.elapsed() < Duration::from_secs(10), "never cut off");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(cut >= PEER_TIMEOUT && cut < PEER_TIMEOUT * 3, "{cut:?}");
    drop(p);
}
