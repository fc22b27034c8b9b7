// Periodic statistics messages on the bus (the `stats-interval` property).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use gst::prelude::*;

/// Says when the next statistics message is due.
#[derive(Debug, Default)]
pub struct StatsTicker {
    interval_ms: AtomicU32,
    last: Mutex<Option<Instant>>,
}

impl StatsTicker {
    pub fn interval_ms(&self) -> u32 {
        self.interval_ms.load(Ordering::Relaxed)
    }

    pub fn set_interval_ms(&self, ms: u32) {
        self.interval_ms.store(ms, Ordering::Relaxed);
    }

    /// Whether a message is due now (0 ms: never); the first call only
    /// starts the clock.
    pub fn due(&self) -> bool {
        let ms = self.interval_ms();
        if ms == 0 {
            return false;
        }
        let now = Instant::now();
        let mut last = self.last.lock().unwrap();
        match *last {
            Some(t) if now.duration_since(t) < Duration::from_millis(ms as u64) => false,
            Some(_) => {
                *last = Some(now);
                true
            }
            None => {
                *last = Some(now);
                false
            }
        }
    }
}

/// The `stats-interval` property.
pub fn interval_property() -> gst::glib::ParamSpec {
    gst::glib::ParamSpecUInt::builder("stats-interval")
        .nick("Statistics interval")
        .blurb("Post the stats as an element message every this many milliseconds while frames flow (0: never)")
        .default_value(0)
        .mutable_playing()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_at_the_interval_and_never_at_zero() {
        let t = StatsTicker::default();
        assert!(!t.due());
        t.set_interval_ms(20);
        assert!(!t.due(), "the first call starts the clock");
        assert!(!t.due());
        std::thread::sleep(Duration::from_millis(25));
        assert!(t.due());
        assert!(!t.due());
    }
}
