// SPDX-License-Identifier: MPL-2.0
#![cfg(unix)]

//! A listener and a client in one thread over TCP on loopback: a
//! connection accepted, tag messages both ways, a refused client.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cudaipc_ucx::{Context, Endpoint, Listener, Worker};

fn ucx_or_skip() -> bool {
    match cudaipc_ucx::version() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            false
        }
    }
}

/// Progresses both workers until `done` or 10 s.
fn progress_until(workers: &[&Worker], what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        for w in workers {
            w.progress();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_client_and_a_listener_exchange_tag_messages_and_a_refused_client_fails() {
    if !ucx_or_skip() {
        return;
    }
    // SAFETY: the binary's one test, before any thread reads the
    // environment (UCX reads it in Context::new, below).
    unsafe { std::env::set_var("UCX_TLS", "tcp") };
    let context = Context::new("loopback-test").unwrap();
    let server = Worker::new(&context).unwrap();
    let client = Worker::new(&context).unwrap();
    let listener = Listener::bind(&server, "127.0.0.1:0".parse().unwrap()).unwrap();
    let address: SocketAddr = listener.local_address().unwrap();
    assert_ne!(address.port(), 0);

    let to_server = Endpoint::connect(&client, address).unwrap();
    let mut request = None;
    progress_until(&[&server, &client], "a connection request", || {
        request = listener.next_request();
        request.is_some()
    });
    let request = request.unwrap();
    assert_eq!(request.client.map(|c| c.ip()), Some(address.ip()));
    let to_client = Endpoint::accept(&server, request).unwrap();

    let message = vec![0x5au8; 300_000];
    let mut sent = to_server.send(7, &message).unwrap();
    let mut buffer = vec![0u8; 400_000];
    let mut received = server.receive(7, u64::MAX, &mut buffer).unwrap();
    let mut got = None;
    progress_until(&[&server, &client], "the message", || {
        sent.poll();
        got = received.poll();
        got.is_some()
    });
    let got = got.unwrap().unwrap();
    assert_eq!((got.tag, got.length), (7, message.len()));
    drop(received);
    assert!(buffer[..message.len()].iter().all(|&b| b == 0x5a));

    let reply = *b"ok";
    let mut back = to_client.send(8, &reply).unwrap();
    let mut small = [0u8; 16];
    let mut reply_in = client.receive(8, u64::MAX, &mut small).unwrap();
    let mut got = None;
    progress_until(&[&server, &client], "the reply", || {
        back.poll();
        got = reply_in.poll();
        got.is_some()
    });
    assert_eq!(got.unwrap().unwrap().length, 2);
    drop(reply_in);
    assert_eq!(&small[..2], b"ok");

    // A message that arrived before its receive was posted: the receive
    // finishes at once, with the message's tag and length.
    let early = *b"early bird";
    let mut sent = to_server.send(9, &early).unwrap();
    progress_until(&[&server, &client], "the early message is sent", || {
        sent.poll().is_some()
    });
    for _ in 0..100 {
        server.progress();
    }
    let mut buffer = [0u8; 64];
    let mut received = server.receive(9, u64::MAX, &mut buffer).unwrap();
    let mut got = None;
    progress_until(&[&server, &client], "the early message", || {
        got = received.poll();
        got.is_some()
    });
    let got = got.unwrap().unwrap();
    assert_eq!((got.tag, got.length), (9, early.len()));
    drop(received);
    assert_eq!(&buffer[..early.len()], &early);

    // A second client, refused: its endpoint fails.
    let refused = Endpoint::connect(&client, address).unwrap();
    progress_until(&[&server, &client], "the second request", || {
        if let Some(r) = listener.next_request() {
            listener.reject(r).unwrap();
        }
        refused.failure().is_some()
    });
}
