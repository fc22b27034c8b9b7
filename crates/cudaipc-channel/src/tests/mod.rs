// Channel tests with real threads, by concern: frames (`frames.rs`),
// consumers attaching (`attach.rs`), a producer's life (`lifecycle.rs`);
// the helpers they share here. tests/channel_processes.rs covers
// processes.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::layout::*;
use super::*;

mod attach;
mod frames;
mod lifecycle;

pub(crate) fn unique_channel(tag: &str) -> String {
    format!("t-{tag}-{:x}", shm::random_u64())
}

fn producer(channel: &str, when_full: WhenFull) -> Producer {
    let p = Producer::create(ProducerConfig {
        channel: channel.into(),
        when_full,
        ..Default::default()
    })
    .unwrap();
    let no = AtomicBool::new(false);
    p.configure_pool(64, &[[0u8; SLOT_DESCRIPTOR_BYTES]; 4], b"pool", &no)
        .unwrap();
    p.set_caps("video/x-raw, format=(string)RGB", &no).unwrap();
    p
}

fn consumer(channel: &str, mode: ConsumerMode) -> Consumer {
    consumer_waiting(channel, mode, WaitMode::Hybrid)
}

fn consumer_waiting(channel: &str, mode: ConsumerMode, wait_mode: WaitMode) -> Consumer {
    Consumer::attach(
        ConsumerConfig {
            channel: channel.into(),
            mode,
            wait_mode,
            connect_timeout: Some(Duration::from_secs(5)),
            ipc_mode: None,
            producers: Default::default(),
            hold: None,
            refuse_self_wait: false,
        },
        &AtomicBool::new(false),
    )
    .unwrap()
}

fn meta(size: u64, pts: u64) -> FrameMeta {
    FrameMeta {
        size,
        pts: Some(pts),
        planes: vec![(0, 8)],
        ..Default::default()
    }
}
