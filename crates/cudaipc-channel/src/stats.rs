// Latency statistics with a fixed memory footprint.

/// Histogram of durations in nanoseconds: 1 us buckets up to 1 ms, then
/// 100 us buckets up to 100 ms, then one overflow bucket. Quantiles are
/// exact to the bucket width, which is all a latency report needs.
#[derive(Clone)]
pub struct LatencyHistogram {
    fine: Vec<u64>,
    coarse: Vec<u64>,
    overflow: u64,
    count: u64,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
}

const FINE_STEP: u64 = 1_000;
const FINE_BUCKETS: usize = 1_000;
const COARSE_STEP: u64 = 100_000;
const COARSE_BUCKETS: usize = 1_000;

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            fine: vec![0; FINE_BUCKETS],
            coarse: vec![0; COARSE_BUCKETS],
            overflow: 0,
            count: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count)
            .field("p50_ns", &self.quantile_ns(0.5))
            .field("max_ns", &self.max_ns)
            .finish()
    }
}

impl LatencyHistogram {
    pub fn record(&mut self, ns: u64) {
        let fine_limit = FINE_STEP * FINE_BUCKETS as u64;
        if ns < fine_limit {
            self.fine[(ns / FINE_STEP) as usize] += 1;
        } else if ns < COARSE_STEP * COARSE_BUCKETS as u64 {
            self.coarse[(ns / COARSE_STEP) as usize] += 1;
        } else {
            self.overflow += 1;
        }
        self.count += 1;
        self.sum_ns += ns as u128;
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn mean_ns(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            (self.sum_ns / self.count as u128) as u64
        }
    }

    pub fn min_ns(&self) -> u64 {
        if self.count == 0 { 0 } else { self.min_ns }
    }

    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// Upper edge of the bucket holding quantile `q` (0..=1), clamped to the
    /// largest value seen; 0 when empty.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.fine.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return ((i as u64 + 1) * FINE_STEP).min(self.max_ns);
            }
        }
        for (i, n) in self.coarse.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return ((i as u64 + 1) * COARSE_STEP).min(self.max_ns);
            }
        }
        self.max_ns
    }

    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_follow_the_data() {
        let mut h = LatencyHistogram::default();
        assert_eq!(h.quantile_ns(0.5), 0);
        for us in 1..=100u64 {
            h.record(us * 1_000 - 500);
        }
        assert_eq!(h.count(), 100);
        assert_eq!(h.quantile_ns(0.5), 50_000);
        assert_eq!(h.quantile_ns(0.99), 99_000);
        assert_eq!(h.max_ns(), 99_500);
        assert_eq!(h.min_ns(), 500);
        assert_eq!(h.mean_ns(), 50_000);
        h.record(5_000_000_000);
        assert_eq!(h.quantile_ns(1.0), 5_000_000_000);
        h.record(2_500_000);
        assert_eq!(h.quantile_ns(1.0), 5_000_000_000);
    }
}
