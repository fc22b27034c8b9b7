// SPDX-License-Identifier: MPL-2.0

//! What the API's integration tests share.

use cudaipc::{
    Publisher, PublisherOptions, Subscriber, SubscriberOptions, Transport, VideoLayout, WhenFull,
};

/// A host publisher of two slots that waits when they are full, on a channel
/// of its own (`tag` in its name), and a subscriber of it with the
/// defaults, attached before the first frame.
pub fn blocking_host_pair(tag: &str, layout: VideoLayout) -> (Publisher, Subscriber) {
    let channel = format!("t-{tag}-{:x}", cudaipc_channel::shm::random_u64());
    let options = PublisherOptions {
        transport: Transport::Host,
        slots: 2,
        when_full: WhenFull::Block,
        ..Default::default()
    };
    let publisher = Publisher::create(&channel, layout, options).unwrap();
    let subscriber = Subscriber::attach(&channel, SubscriberOptions::default()).unwrap();
    (publisher, subscriber)
}
