// SPDX-License-Identifier: MPL-2.0

//! The `stats` property of cudaipcsrc.

use super::frame::Delivery;
use cudaipc_channel::stats::LatencyHistogram;

#[derive(Default)]
pub(super) struct Stats {
    pub frames: u64,
    /// Frames copied out of their slot instead of wrapped.
    pub copied: u64,
    /// Slots handed to GStreamer's CUDA elements as `GstCudaMemory`
    /// (GStreamer 1.24+).
    pub gstcuda_wrapped: u64,
    /// Frames copied into `GstCudaMemory` (GStreamer 1.22, layouts it cannot
    /// describe, or no slot to spare); also counted in `copied`.
    pub gstcuda_copied: u64,
    pub missed: u64,
    pub waits: u64,
    pub reconnects: u64,
    pub producer_pid: u32,
    /// Publish to receive.
    pub latency: LatencyHistogram,
    /// Whether missed frames were reported (once per start).
    pub warned_behind: bool,
    /// Metas, application data and events that arrived beside the frames.
    pub travelling: super::travelling::Travelling,
    /// What the channel lost or refused of them (the subscriber's counts).
    pub channel_travelling: cudaipc_channel::TravellingCounts,
}

impl Stats {
    /// Afresh (the `reset-stats` signal), keeping who produces.
    pub fn reset(&mut self) {
        *self = Stats {
            producer_pid: self.producer_pid,
            warned_behind: self.warned_behind,
            ..Stats::default()
        };
    }

    pub fn count(&mut self, delivery: Delivery) {
        match delivery {
            Delivery::Slot => {}
            Delivery::GstCudaSlot => self.gstcuda_wrapped += 1,
            Delivery::Copied => self.copied += 1,
            Delivery::GstCudaCopied => {
                self.copied += 1;
                self.gstcuda_copied += 1;
            }
        }
    }

    pub fn structure(&self) -> gst::Structure {
        let mut s = gst::Structure::builder("cudaipcsrc-stats")
            .field("frames", self.frames)
            .field("copied", self.copied)
            .field("gstcuda-wrapped", self.gstcuda_wrapped)
            .field("gstcuda-copied", self.gstcuda_copied)
            .field("missed", self.missed)
            .field("waits", self.waits)
            .field("reconnects", self.reconnects)
            .field("producer-pid", self.producer_pid)
            .field("latency-count", self.latency.count())
            .field("latency-min-ns", self.latency.min_ns())
            .field("latency-mean-ns", self.latency.mean_ns())
            .field("latency-p50-ns", self.latency.quantile_ns(0.5))
            .field("latency-p99-ns", self.latency.quantile_ns(0.99))
            .field("latency-max-ns", self.latency.max_ns())
            .build();
        self.travelling.write_stats(&mut s, self.channel_travelling);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gstcuda_frames_are_counted_by_how_they_left() {
        gst::init().unwrap();
        let mut stats = Stats::default();
        for delivery in [
            Delivery::Slot,
            Delivery::GstCudaSlot,
            Delivery::GstCudaSlot,
            Delivery::Copied,
            Delivery::GstCudaCopied,
        ] {
            stats.count(delivery);
        }
        let s = stats.structure();
        assert_eq!(s.get::<u64>("gstcuda-wrapped").unwrap(), 2, "{s}");
        assert_eq!(s.get::<u64>("gstcuda-copied").unwrap(), 1, "{s}");
        // Every copy, into whichever memory.
        assert_eq!(s.get::<u64>("copied").unwrap(), 2, "{s}");
        stats.reset();
        let s = stats.structure();
        assert_eq!(s.get::<u64>("gstcuda-wrapped").unwrap(), 0, "{s}");
        assert_eq!(s.get::<u64>("gstcuda-copied").unwrap(), 0, "{s}");
    }
}
