// SPDX-License-Identifier: MPL-2.0

//! What the sink sends beside the pixels: each buffer's metas and
//! application data as the frame's data (bounded by `frame-data-size`), and
//! the downstream serialized events (tags, stream-start, custom events,
//! gaps, segments) into the channel's event queue, between the frames they
//! came between. What could not cross is counted in `stats`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::CAT;
use super::state::SinkPublisher;
use crate::frame_data::{self, MetaReport};

#[derive(Default)]
pub(super) struct Travelling {
    report: Mutex<MetaReport>,
    /// Events that could not be queued (too large, the channel closing).
    events_lost: std::sync::atomic::AtomicU64,
    warned_event: AtomicBool,
}

impl Travelling {
    /// The frame data of `buffer`, within what the channel's frames carry.
    pub(super) fn frame_data_of(
        &self,
        buffer: &gst::BufferRef,
        publisher: &SinkPublisher,
    ) -> Vec<u8> {
        let bound = publisher.frame_data_bound();
        if bound == 0 {
            return Vec::new();
        }
        let mut report = self.report.lock().unwrap();
        frame_data::frame_data_of(buffer, bound, &mut report)
    }

    /// Queues `event` for the consumers if it is one that crosses.
    pub(super) fn forward_event(
        &self,
        sink: &gst::Element,
        event: &gst::Event,
        publisher: &SinkPublisher,
    ) {
        let Some(bytes) = frame_data::encode_event(event) else {
            return;
        };
        if let Err(e) = publisher.publish_event(&bytes) {
            self.events_lost.fetch_add(1, Ordering::Relaxed);
            if !self.warned_event.swap(true, Ordering::Relaxed) {
                gst::warning!(
                    CAT,
                    obj = sink,
                    "a {:?} event did not reach the consumers: {e}",
                    event.type_()
                );
            }
        }
    }

    /// Adds the `frame-data-*` counts and `events-lost` to `stats`.
    pub(super) fn write_stats(&self, stats: &mut gst::StructureRef) {
        self.report.lock().unwrap().stats().write_to(stats);
        stats.set("events-lost", self.events_lost.load(Ordering::Relaxed));
    }

    /// Afresh, at `start`.
    pub(super) fn reset(&self) {
        self.report.lock().unwrap().reset();
        self.events_lost.store(0, Ordering::Relaxed);
        self.warned_event.store(false, Ordering::Relaxed);
    }
}
