// Latency statistics with a fixed memory footprint.

use hdrhistogram::Histogram;

/// Lowest latency told apart: 1 us (a smaller one counts as 1 us).
const LOWEST_NS: u64 = 1_000;
/// Highest latency recorded as it is: an hour (a larger one counts as an
/// hour; the maximum is kept exactly).
const HIGHEST_NS: u64 = 3_600_000_000_000;
/// Significant decimal digits kept: every quantile is within 1% of the
/// latency it stands for, from microseconds to minutes (about 25 KiB).
const SIGNIFICANT_DIGITS: u8 = 2;

/// Durations in nanoseconds, kept by an HDR histogram: quantiles at a
/// fixed relative precision (1%) over the whole range, so a consumer whose
/// latencies are seconds gets percentiles as right as one whose latencies
/// are microseconds. Mean, minimum and maximum are exact.
#[derive(Clone)]
pub struct LatencyHistogram {
    histogram: Histogram<u64>,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            histogram: Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)
                .expect("constant, valid histogram bounds"),
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count())
            .field("p50_ns", &self.quantile_ns(0.5))
            .field("max_ns", &self.max_ns)
            .finish()
    }
}

impl LatencyHistogram {
    pub fn record(&mut self, ns: u64) {
        self.histogram
            .saturating_record(ns.clamp(LOWEST_NS, HIGHEST_NS));
        self.sum_ns += ns as u128;
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    pub fn mean_ns(&self) -> u64 {
        match self.count() {
            0 => 0,
            n => (self.sum_ns / n as u128) as u64,
        }
    }

    pub fn min_ns(&self) -> u64 {
        if self.count() == 0 { 0 } else { self.min_ns }
    }

    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// The latency at quantile `q` (0..=1), within 1% (the middle of the
    /// values the histogram does not tell apart), never beyond the range
    /// of what was seen: 0 and 1 give the exact minimum and maximum; 0 when
    /// empty.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        match self.count() {
            0 => 0,
            _ if q <= 0.0 => self.min_ns,
            _ if q >= 1.0 => self.max_ns,
            _ => self
                .histogram
                .median_equivalent(self.histogram.value_at_quantile(q))
                .clamp(self.min_ns, self.max_ns),
        }
    }

    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within 1% of `expected`.
    fn near(found: u64, expected: u64) -> bool {
        found.abs_diff(expected) * 100 <= expected
    }

    #[test]
    fn quantiles_follow_the_data() {
        let mut h = LatencyHistogram::default();
        assert_eq!(h.quantile_ns(0.5), 0);
        for us in 1..=100u64 {
            h.record(us * 1_000 - 500);
        }
        assert_eq!(h.count(), 100);
        assert!(near(h.quantile_ns(0.5), 49_500), "{}", h.quantile_ns(0.5));
        assert!(near(h.quantile_ns(0.99), 98_500), "{}", h.quantile_ns(0.99));
        assert_eq!(h.max_ns(), 99_500);
        assert_eq!(h.min_ns(), 500);
        assert_eq!(h.mean_ns(), 50_000);
        h.record(5_000_000_000);
        assert_eq!(h.quantile_ns(1.0), 5_000_000_000);
    }

    #[test]
    fn quantiles_of_latencies_of_seconds_are_right() {
        // A consumer slower than its producer: latencies spread evenly from
        // 0.1 s to 2.1 s (the hand-made histogram put all of them in one
        // overflow bucket, and reported p50 = p99 = max).
        let mut h = LatencyHistogram::default();
        for i in 0..2_000u64 {
            h.record(100_000_000 + i * 1_000_000);
        }
        assert!(near(h.quantile_ns(0.5), 1_099_000_000), "{h:?}");
        assert!(
            near(h.quantile_ns(0.99), 2_079_000_000),
            "{}",
            h.quantile_ns(0.99)
        );
        assert!(
            near(h.quantile_ns(0.01), 119_000_000),
            "{}",
            h.quantile_ns(0.01)
        );
        assert_eq!(h.max_ns(), 2_099_000_000);
        assert_eq!(h.mean_ns(), 1_099_500_000);
        // Microseconds beside them keep their own precision.
        let mut mixed = LatencyHistogram::default();
        for _ in 0..98 {
            mixed.record(40_000);
        }
        mixed.record(3_000_000_000);
        mixed.record(3_000_000_000);
        assert!(near(mixed.quantile_ns(0.5), 40_000), "{mixed:?}");
        assert!(near(mixed.quantile_ns(0.99), 3_000_000_000), "{mixed:?}");
    }

    #[test]
    fn latencies_beyond_the_range_count_at_its_ends() {
        let mut h = LatencyHistogram::default();
        h.record(10);
        h.record(u64::MAX / 2);
        assert_eq!(h.count(), 2);
        assert_eq!(h.min_ns(), 10);
        assert_eq!(h.max_ns(), u64::MAX / 2);
        assert_eq!(h.quantile_ns(0.0), 10);
        assert_eq!(h.quantile_ns(1.0), u64::MAX / 2);
    }
}
