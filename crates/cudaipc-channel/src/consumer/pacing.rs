// The rhythm of a paced stream, which hybrid waiting spins across.

use std::time::{Duration, Instant};

use super::shm;

/// Follows the rhythm of a paced stream (a phase-locked estimate of when
/// the next frame is published and how much it jitters), so that hybrid
/// waiting can spin just across the expected publication.
#[derive(Debug, Default)]
pub(super) struct Pacing {
    last_ns: u64,
    next_ns: u64,
    period_ns: u64,
    jitter_ns: u64,
}

impl Pacing {
    /// Below this period a stream is not "paced": frames follow each other
    /// closely enough for the plain short spin.
    const MIN_PERIOD_NS: u64 = 1_000_000;

    pub(super) fn note(&mut self, publish_ns: u64) {
        if self.last_ns != 0 && publish_ns > self.last_ns {
            let dt = publish_ns - self.last_ns;
            let residual = publish_ns as i64 - self.next_ns as i64;
            if self.period_ns == 0 || residual.unsigned_abs() > self.period_ns / 2 {
                // (Re)start: a new stream, a pause or a rate change.
                self.period_ns = dt;
                self.next_ns = publish_ns + dt;
                self.jitter_ns = dt / 16;
            } else {
                self.period_ns = (self.period_ns as i64 + residual / 64) as u64;
                self.jitter_ns = (self.jitter_ns * 7 + residual.unsigned_abs()) / 8;
                self.next_ns = (self.next_ns as i64 + self.period_ns as i64 + residual / 4) as u64;
            }
        }
        self.last_ns = publish_ns;
    }

    /// The window to spin in, around the next expected publication.
    pub(super) fn spin_window(&self) -> Option<(Instant, Instant)> {
        if self.period_ns < Self::MIN_PERIOD_NS || self.next_ns == 0 {
            return None;
        }
        let half = (2 * self.jitter_ns + 30_000).clamp(100_000, 400_000);
        let now = shm::monotonic_ns();
        let close = self.next_ns + half;
        if close <= now {
            return None;
        }
        let at = |ns: u64| Instant::now() + Duration::from_nanos(ns.saturating_sub(now));
        Some((at(self.next_ns.saturating_sub(half)), at(close)))
    }
}

#[cfg(test)]
mod tests {
    use super::Pacing;

    #[test]
    fn pacing_locks_onto_a_jittery_periodic_stream() {
        let mut p = Pacing::default();
        // 60 FPS whose frames alternate 270 us early and late, as basesrc's
        // clock waits do.
        let mut t = 1_000_000_000u64;
        let mut within = 0;
        for i in 0..200u64 {
            t += if i % 2 == 0 { 16_937_000 } else { 16_397_000 };
            if i > 20 {
                let half = (2 * p.jitter_ns + 30_000).clamp(100_000, 400_000);
                if t + half >= p.next_ns && t <= p.next_ns + half {
                    within += 1;
                }
            }
            p.note(t);
        }
        assert!(
            (16_600_000..16_700_000).contains(&p.period_ns),
            "{}",
            p.period_ns
        );
        assert!(
            within >= 170,
            "only {within} of 179 frames in the spin window"
        );
    }

    #[test]
    fn fast_streams_get_no_window_and_pauses_resynchronise() {
        let mut p = Pacing::default();
        for i in 0..10u64 {
            p.note(1_000_000 + i * 20_000);
        }
        assert!(
            p.spin_window().is_none(),
            "50 kHz frames need no prediction"
        );
        let mut p = Pacing::default();
        for i in 0..10u64 {
            p.note(1_000_000_000 + i * 10_000_000);
        }
        // A pause of a second: the estimate restarts from the new rhythm.
        p.note(3_000_000_000);
        p.note(3_010_000_000);
        assert_eq!(p.period_ns, 10_000_000);
        assert_eq!(p.next_ns, 3_020_000_000);
    }
}
