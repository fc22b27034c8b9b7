// Waiting for a condition on shared memory: spin, sleep, or spin briefly and
// then sleep on a futex in the shared mapping (hybrid).

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::ChannelError;

/// Runs `f`, adding the time it took to `clock` (nanoseconds): the waits
/// that the statistics report.
pub fn timed<R>(clock: &AtomicU64, f: impl FnOnce() -> R) -> R {
    let started = Instant::now();
    let result = f();
    clock.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    result
}

/// How a side waits for the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitMode {
    /// Busy-poll: lowest latency, one core busy while waiting.
    Spin,
    /// Spin for `HYBRID_SPIN`, then sleep on a futex woken by the peer.
    #[default]
    Hybrid,
    /// Poll every `SLEEP_INTERVAL` (the seed project's way).
    Sleep,
}

impl FromStr for WaitMode {
    type Err = crate::ChannelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "spin" => Ok(Self::Spin),
            "hybrid" => Ok(Self::Hybrid),
            "sleep" => Ok(Self::Sleep),
            other => Err(crate::ChannelError::UnknownWaitMode(other.to_owned())),
        }
    }
}

/// How long hybrid waiting spins before it sleeps.
pub const HYBRID_SPIN: Duration = Duration::from_micros(20);
/// Poll period of sleep waiting.
pub const SLEEP_INTERVAL: Duration = Duration::from_micros(100);
/// Longest single futex sleep: bounds how late interruption, deadlines and
/// liveness checks are noticed.
const FUTEX_SLICE: Duration = Duration::from_millis(50);
/// How often a waiter runs its liveness check.
pub const LIVENESS_PERIOD: Duration = Duration::from_millis(100);

pub use super::platform::futex_wait;

/// Wakes every process sleeping on `word` (closing and stopping, where the
/// sleepers are not counted).
pub fn futex_wake_all(word: &AtomicU32) {
    super::platform::futex_wake(word, u32::MAX);
}

/// Where a waiter sleeps and how it announces itself.
pub struct WakeSource<'a> {
    /// The futex word the other side bumps after a change.
    pub futex: &'a AtomicU32,
    /// Count of sleepers, so the other side only makes the wake syscall
    /// when someone sleeps.
    pub sleepers: &'a AtomicU32,
    /// When the change is expected (paced streams): hybrid waiting sleeps
    /// until this window opens and spins across it, so that a periodic frame
    /// costs little CPU and no wake-up latency.
    pub spin_window: Option<(Instant, Instant)>,
}

/// Counts how often a side had to wait.
#[derive(Debug, Default)]
pub struct WaitOutcome {
    pub waited: bool,
}

/// Waits until `poll` yields a value.
///
/// `check` runs about every LIVENESS_PERIOD and may abort the wait (peer
/// death, corruption). `interrupt` aborts it with `ChannelError::Interrupted`
/// (flushing elements); `deadline` with `ChannelError::Timeout`.
pub fn wait_for<T>(
    mode: WaitMode,
    wake: &WakeSource<'_>,
    interrupt: &AtomicBool,
    deadline: Option<Instant>,
    outcome: &mut WaitOutcome,
    mut poll: impl FnMut() -> Result<Option<T>, ChannelError>,
    mut check: impl FnMut() -> Result<(), ChannelError>,
) -> Result<T, ChannelError> {
    if let Some(value) = poll()? {
        return Ok(value);
    }
    outcome.waited = true;
    let start = Instant::now();
    let mut last_check = start;
    let mut iterations: u32 = 0;
    loop {
        iterations = iterations.wrapping_add(1);
        // Time is read every few iterations only, to keep spinning cheap.
        if mode == WaitMode::Spin && iterations % 64 != 0 {
            std::hint::spin_loop();
            if let Some(value) = poll()? {
                return Ok(value);
            }
            continue;
        }
        let now = Instant::now();
        if interrupt.load(Ordering::Acquire) {
            return Err(ChannelError::Interrupted);
        }
        if deadline.is_some_and(|d| now >= d) {
            return Err(ChannelError::Timeout);
        }
        if now.duration_since(last_check) >= LIVENESS_PERIOD {
            last_check = now;
            if let Err(e) = check() {
                // What the peer did before it went (closed, died) still
                // counts: poll once more, after seeing it gone.
                return match poll()? {
                    Some(value) => Ok(value),
                    None => Err(e),
                };
            }
        }
        match mode {
            WaitMode::Spin => std::hint::spin_loop(),
            WaitMode::Sleep => std::thread::sleep(SLEEP_INTERVAL),
            WaitMode::Hybrid
                if now.duration_since(start) < HYBRID_SPIN
                    || wake
                        .spin_window
                        .is_some_and(|(open, close)| now >= open && now < close) =>
            {
                std::hint::spin_loop()
            }
            WaitMode::Hybrid => {
                wake.sleepers.fetch_add(1, Ordering::SeqCst);
                let seen = wake.futex.load(Ordering::SeqCst);
                // Re-check after announcing ourselves: the other side either
                // sees the sleeper count or we see its change here.
                let ready = poll();
                if !matches!(ready, Ok(None)) {
                    wake.sleepers.fetch_sub(1, Ordering::SeqCst);
                    if let Some(value) = ready? {
                        return Ok(value);
                    }
                    continue;
                }
                let mut slice = FUTEX_SLICE.min(LIVENESS_PERIOD);
                if let Some(d) = deadline {
                    slice = slice.min(d.saturating_duration_since(now));
                }
                if let Some((open, _)) = wake.spin_window
                    && open > now
                {
                    // Wake up in time to spin across the expected change.
                    slice = slice.min(open - now);
                }
                futex_wait(wake.futex, seen, slice.max(Duration::from_micros(1)));
                wake.sleepers.fetch_sub(1, Ordering::SeqCst);
            }
        }
        if let Some(value) = poll()? {
            return Ok(value);
        }
    }
}

/// Bumps `futex` and wakes its sleepers, if any.
pub fn notify(futex: &AtomicU32, sleepers: &AtomicU32) {
    futex.fetch_add(1, Ordering::SeqCst);
    let sleeping = sleepers.load(Ordering::SeqCst);
    if sleeping != 0 {
        super::platform::futex_wake(futex, sleeping);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    struct Shared {
        value: AtomicU64,
        futex: AtomicU32,
        sleepers: AtomicU32,
        interrupt: AtomicBool,
    }

    fn shared() -> Arc<Shared> {
        Arc::new(Shared {
            value: AtomicU64::new(0),
            futex: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            interrupt: AtomicBool::new(false),
        })
    }

    fn wait_value(
        s: &Shared,
        mode: WaitMode,
        want: u64,
        deadline: Option<Instant>,
    ) -> Result<u64, ChannelError> {
        let wake = WakeSource {
            futex: &s.futex,
            sleepers: &s.sleepers,
            spin_window: None,
        };
        let mut outcome = WaitOutcome::default();
        wait_for(
            mode,
            &wake,
            &s.interrupt,
            deadline,
            &mut outcome,
            || {
                let v = s.value.load(Ordering::Acquire);
                Ok((v >= want).then_some(v))
            },
            || Ok(()),
        )
    }

    #[test]
    fn every_mode_sees_a_change_from_another_thread() {
        for mode in [WaitMode::Spin, WaitMode::Hybrid, WaitMode::Sleep] {
            let s = shared();
            let s2 = s.clone();
            let writer = std::thread::spawn(move || {
                for i in 1..=200 {
                    s2.value.store(i, Ordering::Release);
                    notify(&s2.futex, &s2.sleepers);
                    if i % 50 == 0 {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            });
            for want in [1, 50, 120, 200] {
                let got = wait_value(
                    &s,
                    mode,
                    want,
                    Some(Instant::now() + Duration::from_secs(10)),
                )
                .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
                assert!(got >= want);
            }
            writer.join().unwrap();
        }
    }

    #[test]
    fn deadline_and_interrupt_end_a_wait() {
        let s = shared();
        let start = Instant::now();
        let r = wait_value(
            &s,
            WaitMode::Hybrid,
            1,
            Some(start + Duration::from_millis(30)),
        );
        assert!(matches!(r, Err(ChannelError::Timeout)), "{r:?}");
        assert!(start.elapsed() >= Duration::from_millis(30));

        let s2 = s.clone();
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            s2.interrupt.store(true, Ordering::Release);
        });
        let r = wait_value(&s, WaitMode::Hybrid, 1, None);
        assert!(matches!(r, Err(ChannelError::Interrupted)), "{r:?}");
        stopper.join().unwrap();
    }

    #[test]
    fn what_a_peer_did_before_it_went_is_still_seen() {
        // The peer publishes and closes between a poll and the liveness
        // check: the value comes first, the loss after it.
        let s = shared();
        let wake = WakeSource {
            futex: &s.futex,
            sleepers: &s.sleepers,
            spin_window: None,
        };
        let gone = std::cell::Cell::new(false);
        let got = wait_for(
            WaitMode::Hybrid,
            &wake,
            &s.interrupt,
            Some(Instant::now() + Duration::from_secs(5)),
            &mut WaitOutcome::default(),
            || Ok(gone.get().then_some(7)),
            || {
                gone.set(true);
                Err(ChannelError::Timeout)
            },
        );
        assert!(matches!(got, Ok(7)), "{got:?}");
        let got: Result<u32, _> = wait_for(
            WaitMode::Hybrid,
            &wake,
            &s.interrupt,
            Some(Instant::now() + Duration::from_secs(5)),
            &mut WaitOutcome::default(),
            || Ok(None),
            || Err(ChannelError::Timeout),
        );
        assert!(matches!(got, Err(ChannelError::Timeout)), "{got:?}");
    }

    #[test]
    fn wait_modes_parse() {
        assert!(matches!("spin".parse::<WaitMode>(), Ok(WaitMode::Spin)));
        assert!(matches!("hybrid".parse::<WaitMode>(), Ok(WaitMode::Hybrid)));
        assert!(matches!("sleep".parse::<WaitMode>(), Ok(WaitMode::Sleep)));
        assert!(matches!(
            "nap".parse::<WaitMode>(),
            Err(ChannelError::UnknownWaitMode(name)) if name == "nap"
        ));
    }
}
