// SPDX-License-Identifier: MPL-2.0

//! The warning a live producer posts when consumers hold it back: those
//! that asked for every frame (`frames=every`) and fall behind, or that
//! hold every slot. At most once per [`INTERVAL`], naming them.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::state::SinkPublisher;

/// At most one warning in this time.
const INTERVAL: Duration = Duration::from_secs(5);

#[derive(Debug, Default)]
pub(super) struct HeldBack {
    /// The producer's wait count when last looked at, and when the last
    /// warning was posted.
    seen: Mutex<(u64, Option<Instant>)>,
}

impl HeldBack {
    pub fn reset(&self) {
        *self.seen.lock().unwrap() = (0, None);
    }

    /// After a frame: if the producer of a live channel had to wait for a
    /// slot since the last look and no warning was posted lately, posts one.
    pub fn check(
        &self,
        sink: &gst::Element,
        publisher: &SinkPublisher,
        channel: impl FnOnce() -> String,
    ) {
        if !publisher.status().paced {
            return;
        }
        let stats = publisher.stats();
        let waits = stats.producer.waits;
        let mut seen = self.seen.lock().unwrap();
        let (last_waits, last_warned) = *seen;
        if waits == last_waits {
            return;
        }
        seen.0 = waits;
        if last_warned.is_some_and(|at| at.elapsed() < INTERVAL) {
            return;
        }
        let blockers = &stats.last_blockers;
        if blockers.is_empty() {
            return;
        }
        seen.1 = Some(Instant::now());
        drop(seen);
        let slots = stats.slots;
        let channel = channel();
        let who: Vec<String> = blockers
            .iter()
            .map(|b| {
                let mut what = format!("pid {}", b.pid);
                if b.starting {
                    what += &format!(
                        " (starting: getting ready to take frames, or taking those published meanwhile; a live producer waits up to {} s for a consumer to start)",
                        cudaipc_channel::START_LIMIT.as_secs()
                    );
                }
                if b.every_frame && b.behind > 0 {
                    what += &format!(
                        " (frames=every, {} behind; its stats: missed, waits)",
                        crate::hints::count(b.behind, "frame")
                    );
                }
                if b.held > 0 {
                    what += &format!(" holds {} of the {slots} slots", b.held);
                }
                what
            })
            .collect();
        let any_every = blockers.iter().any(|b| b.every_frame && b.behind > 0);
        let fix = if blockers.iter().all(|b| b.starting) {
            "a consumer that keeps up gets every frame from the one published after it attached; one not ready within that time misses frames like a slow one (frames=every on it makes the producer wait for it always)"
        } else if any_every {
            "a consumer with frames=every gets every frame and may hold a live producer back; use frames=auto (the default) on consumers that may miss frames"
        } else {
            "consumers hold every slot: raise slots on rscudaipcsink, or have consumers copy frames they keep (hold on rscudaipcsrc, copy=True in Python)"
        };
        gst::element_warning!(
            sink,
            gst::ResourceError::Busy,
            (
                "rscudaipcsink on live channel '{}' waited for consumers: {}",
                channel,
                who.join("; ")
            ),
            ["{fix}; this sink's stats: waits, slot-wait-time"]
        );
    }
}
