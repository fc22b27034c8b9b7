// SPDX-License-Identifier: MPL-2.0

//! Slow subscribers that hold frames while a live ring grows, frames are
//! skipped and the producer ends: every frame a subscriber holds keeps its
//! bytes until it lets go, every subscriber ends cleanly, and nothing is
//! left held. `CUDAIPC_STRESS_ROUNDS` sets the rounds (scripts/valgrind.sh
//! runs a few under memcheck).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cudaipc::{
    Error, Frame, Frames, Publisher, PublisherOptions, Subscriber, SubscriberOptions, Transport,
    VideoFormat, VideoLayout,
};

const FRAMES: u64 = 240;
const FRAME_INTERVAL: Duration = Duration::from_millis(2);

fn layout() -> VideoLayout {
    VideoLayout::new(VideoFormat::Rgba, 32, 16).unwrap()
}

/// Frame `n`: its number in the first 8 bytes, its low byte in the rest.
fn stamped(n: u64, size: usize) -> Vec<u8> {
    let mut bytes = vec![n as u8; size];
    bytes[..8].copy_from_slice(&n.to_le_bytes());
    bytes
}

/// The frame's number if its bytes are whole (as the producer wrote them).
fn stamp_of(frame: &Frame) -> Result<u64, String> {
    let copied;
    let bytes = match frame.host_bytes() {
        Some(bytes) => bytes,
        None => {
            let mut bytes = vec![0u8; frame.layout().frame_size()];
            frame
                .copy_to_host(&mut bytes)
                .map_err(|e| format!("cannot copy the frame out: {e}"))?;
            copied = bytes;
            &copied
        }
    };
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    match bytes[8..].iter().position(|&b| b != n as u8) {
        None => Ok(n),
        Some(at) => Err(format!("frame {n}: byte {} is {}", at + 8, bytes[at + 8])),
    }
}

/// How one subscriber behaves.
#[derive(Clone, Copy, Debug)]
struct Reader {
    frames: Frames,
    /// Declared to the producer (`None`: undeclared, as a GStreamer sink
    /// keeping its last buffer is).
    hold: Option<u32>,
    /// Frames it keeps while it asks for the next (its hold, or the one
    /// a sink keeps).
    keeps: usize,
    /// Its time per frame.
    pace: Duration,
    /// When it attaches after the producer started.
    joins_after: Duration,
}

/// What a subscriber saw.
#[derive(Debug)]
struct Seen {
    taken: u64,
    ended_by: String,
}

fn read(channel: String, reader: Reader, round: u64) -> Result<Seen, String> {
    std::thread::sleep(reader.joins_after);
    let options = SubscriberOptions {
        timeout: Some(Duration::from_secs(5)),
        frames: reader.frames,
        hold: reader.hold,
        ..Default::default()
    };
    let mut subscriber = match Subscriber::attach(&channel, options) {
        Ok(s) => s,
        // A late one may come after the end: nothing to read then.
        Err(Error::NoProducer { .. }) if !reader.joins_after.is_zero() => {
            return Ok(Seen {
                taken: 0,
                ended_by: "no producer".into(),
            });
        }
        Err(e) => return Err(format!("attach: {e}")),
    };
    let mut kept: VecDeque<(u64, Frame)> = VecDeque::new();
    let mut taken = 0u64;
    let mut last = None;
    let ended_by = loop {
        match subscriber.next_frame(Some(Duration::from_secs(5))) {
            Ok(Some(frame)) => {
                let n = stamp_of(&frame)?;
                if last.is_some_and(|l| n <= l) {
                    return Err(format!("frame {n} after frame {}", last.unwrap()));
                }
                last = Some(n);
                taken += 1;
                kept.push_back((n, frame));
                while kept.len() > reader.keeps {
                    // Out of order now and then, as a pipeline's threads do.
                    let (n, frame) = match (taken + round) % 3 {
                        0 => kept.pop_back().unwrap(),
                        _ => kept.pop_front().unwrap(),
                    };
                    let still = stamp_of(&frame)?;
                    if still != n {
                        return Err(format!("frame {n} became frame {still} while held"));
                    }
                }
                std::thread::sleep(reader.pace);
            }
            Ok(None) => break "end of stream".to_owned(),
            Err(Error::ProducerGone { .. }) => break "producer gone".to_owned(),
            Err(e) => return Err(format!("after {taken} frames: {e}")),
        }
    };
    for (n, frame) in kept {
        let still = stamp_of(&frame)?;
        if still != n {
            return Err(format!("frame {n} became frame {still} while held"));
        }
    }
    Ok(Seen { taken, ended_by })
}

fn round(transport: Transport, round: u64) {
    let channel = format!(
        "t-stress-held-{round}-{:x}",
        cudaipc_channel::shm::random_u64()
    );
    // CUDA opens IPC memory handles only in another process: the cuda
    // round's producer is this test binary again (`stress_producer`).
    let (publisher, child) = match transport {
        Transport::Cuda => (None, Some(spawn_producer(&channel))),
        _ => (Some(create_publisher(&channel, transport)), None),
    };
    let ms = Duration::from_millis;
    let readers = [
        // Slow, declared holds: the ring grows for them.
        Reader {
            frames: Frames::Auto,
            hold: Some(3),
            keeps: 3,
            pace: ms(5),
            joins_after: ms(0),
        },
        Reader {
            frames: Frames::Auto,
            hold: Some(6),
            keeps: 6,
            pace: ms(9),
            joins_after: ms(60),
        },
        // A sink's last buffer, undeclared.
        Reader {
            frames: Frames::Auto,
            hold: None,
            keeps: 1,
            pace: ms(7),
            joins_after: ms(0),
        },
        Reader {
            frames: Frames::Auto,
            hold: None,
            keeps: 1,
            pace: ms(3),
            joins_after: ms(200),
        },
        // Every frame, holding a few: the producer waits for it.
        Reader {
            frames: Frames::Every,
            hold: Some(2),
            keeps: 2,
            pace: ms(1),
            joins_after: ms(0),
        },
        Reader {
            frames: Frames::Latest,
            hold: None,
            keeps: 1,
            pace: ms(4),
            joins_after: ms(30),
        },
        // Comes near the end, while the others skip to it.
        Reader {
            frames: Frames::Auto,
            hold: Some(1),
            keeps: 1,
            pace: ms(11),
            joins_after: ms(430),
        },
    ];
    let failed = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = readers
        .iter()
        .map(|&reader| {
            let channel = channel.clone();
            let failed = failed.clone();
            std::thread::spawn(move || {
                let seen = read(channel, reader, round);
                if seen.is_err() {
                    failed.store(true, Ordering::SeqCst);
                }
                (reader, seen)
            })
        })
        .collect();
    if let Some(publisher) = publisher {
        publish_stream(publisher, &failed);
    }
    if let Some(child) = child {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "round {round}: the producer process failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for thread in threads {
        let (reader, seen) = thread.join().unwrap();
        match seen {
            Ok(seen) => assert!(
                seen.ended_by == "end of stream" || seen.ended_by == "no producer",
                "round {round}, {reader:?}: ended by {} after {} frames",
                seen.ended_by,
                seen.taken
            ),
            Err(e) => panic!("round {round}, {reader:?}: {e}"),
        }
    }
}

fn create_publisher(channel: &str, transport: Transport) -> Publisher {
    let options = PublisherOptions {
        transport,
        live: true,
        ..Default::default()
    };
    Publisher::create(channel, layout(), options).unwrap()
}

/// Publishes the round's frames at the round's pace (until a reader
/// failed), then the end of stream.
fn publish_stream(publisher: Publisher, failed: &AtomicBool) {
    let size = layout().frame_size();
    let started = Instant::now();
    for n in 0..FRAMES {
        if failed.load(Ordering::SeqCst) {
            break;
        }
        publisher.publish(&stamped(n, size), None).unwrap();
        let due = started + FRAME_INTERVAL * (n as u32 + 1);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
    publisher.eos();
}

const PRODUCER_CHANNEL: &str = "CUDAIPC_STRESS_PRODUCER_CHANNEL";

fn spawn_producer(channel: &str) -> std::process::Child {
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["stress_producer", "--exact", "--ignored", "--nocapture"])
        .env(PRODUCER_CHANNEL, channel)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The readers that join at once find the channel there.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cudaipc_channel::directory::list_channels()
        .iter()
        .any(|c| c.name == channel && c.state == cudaipc_channel::directory::ChannelState::Live)
    {
        assert!(
            Instant::now() < deadline,
            "the producer process made no channel"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

/// The cuda rounds' producer, run by `spawn_producer` in a process of its own.
#[test]
#[ignore = "a producer process of the cuda rounds"]
fn stress_producer() {
    let Ok(channel) = std::env::var(PRODUCER_CHANNEL) else {
        return;
    };
    let publisher = create_publisher(&channel, Transport::Cuda);
    publish_stream(publisher, &AtomicBool::new(false));
}

fn rounds(transport: Transport) {
    let rounds = std::env::var("CUDAIPC_STRESS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(6);
    for r in 0..rounds {
        round(transport, r);
    }
}

#[test]
fn held_frames_stay_intact_while_the_ring_grows_frames_are_skipped_and_the_producer_ends() {
    rounds(Transport::Host);
}

#[test]
fn held_device_frames_stay_intact_while_the_ring_grows_frames_are_skipped_and_the_producer_ends() {
    if cudaipc_transport::cuda::gpu_or_skip("held_device_frames_stay_intact").is_none() {
        return;
    }
    rounds(Transport::Cuda);
}
