// SPDX-License-Identifier: MPL-2.0

//! The `stats` property of cudaipcsrc.

use crate::ipc::stats::LatencyHistogram;

#[derive(Default)]
pub(super) struct Stats {
    pub frames: u64,
    /// Frames copied out of their slot instead of wrapped.
    pub copied: u64,
    pub missed: u64,
    pub waits: u64,
    pub reconnects: u64,
    pub producer_pid: u32,
    /// Publish to receive.
    pub latency: LatencyHistogram,
}

impl Stats {
    /// Afresh (the `reset-stats` signal), keeping who produces.
    pub fn reset(&mut self) {
        *self = Stats {
            producer_pid: self.producer_pid,
            ..Stats::default()
        };
    }

    pub fn structure(&self) -> gst::Structure {
        gst::Structure::builder("cudaipcsrc-stats")
            .field("frames", self.frames)
            .field("copied", self.copied)
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
            .build()
    }
}
