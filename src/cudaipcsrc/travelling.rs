// SPDX-License-Identifier: MPL-2.0

//! What arrives beside the pixels: the frame's data back onto its buffer
//! (metas, application data as a `CudaIpcFrameData` meta), and the
//! producer's events pushed downstream between the same frames. Everything
//! is another process's bytes: what is refused is counted, never fatal.

use super::CAT;
use super::TimestampMode;
use crate::frame_data::{self, MetaReport};

/// What to do with an event from the producer.
pub(super) enum Arrived {
    /// Push it downstream.
    Push(gst::Event),
    /// Nothing to push (a segment of rate 1: this source's own stands).
    Nothing,
}

/// The counts for `stats`.
#[derive(Default)]
pub(super) struct Travelling {
    pub(super) report: MetaReport,
    /// Events refused as malformed.
    pub(super) events_refused: u64,
    pub(super) events: u64,
    warned_event: bool,
}

impl Travelling {
    /// Adds what `data` carries to `buffer`.
    pub(super) fn apply(&mut self, data: &[u8], buffer: &mut gst::BufferRef) {
        frame_data::apply_frame_data(data, buffer, &mut self.report);
    }

    /// The event to push for the producer's event `bytes`; a segment keeps
    /// this source's own timeline (`segment`), taking the producer's rate
    /// as its applied rate, and a gap is retimed to this pipeline's
    /// running time (`now`) unless the producer's timestamps are used.
    pub(super) fn arrived(
        &mut self,
        src: &super::CudaIpcSrc,
        bytes: &[u8],
        segment: &gst::Segment,
        mode: TimestampMode,
        now: Option<gst::ClockTime>,
    ) -> Arrived {
        let event = match frame_data::decode_event(bytes) {
            Ok(event) => event,
            Err(e) => {
                self.events_refused += 1;
                if !std::mem::replace(&mut self.warned_event, true) {
                    gst::warning!(CAT, obj = src, "refused an event from the producer: {e}");
                }
                return Arrived::Nothing;
            }
        };
        self.events += 1;
        match event.view() {
            gst::EventView::Segment(s) => {
                let theirs = s.segment();
                let rate = theirs.rate() * theirs.applied_rate();
                if rate == 1.0 {
                    return Arrived::Nothing;
                }
                let mut ours = segment.clone();
                ours.set_applied_rate(rate);
                Arrived::Push(gst::event::Segment::new(&ours))
            }
            gst::EventView::Gap(g) if mode == TimestampMode::Pipeline => {
                let (_, duration) = g.get();
                Arrived::Push(
                    gst::event::Gap::builder(now.unwrap_or_default())
                        .duration(duration)
                        .build(),
                )
            }
            _ => Arrived::Push(event),
        }
    }

    /// Adds the `frame-data-*` and event counts to `stats`.
    pub(super) fn write_stats(
        &self,
        stats: &mut gst::StructureRef,
        channel: cudaipc_channel::TravellingCounts,
    ) {
        self.report.stats().write_to(stats);
        stats.set("events", self.events);
        stats.set("events-refused", self.events_refused);
        stats.set("events-lost", channel.events_lost);
        stats.set("frame-data-refused", channel.frame_data_refused);
    }
}
