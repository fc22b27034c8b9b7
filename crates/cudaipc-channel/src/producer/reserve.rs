// Reserving a slot for the next frame: which slot is free, the ring's
// depth against the consumers' holds, and waiting for slots.

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

impl Producer {
    /// Reserves a slot to write the next frame into. `Ok(None)`: no slot is
    /// free and the policy is `Drop` (the frame is counted as dropped).
    pub fn reserve(&self, interrupt: &AtomicBool) -> Result<Option<usize>, ChannelError> {
        self.check_intact()?;
        if self.slot_count() == 0 {
            return Err(ChannelError::NoSlotPool);
        }
        if !self.gate_open.load(Ordering::Acquire) {
            self.wait_for_early_consumers(interrupt)?;
        }
        self.check_ring_fits_holds()?;
        if let Some(slot) = self.try_reserve() {
            return Ok(Some(slot));
        }
        if self.config.when_full == WhenFull::Drop {
            self.header().frames_dropped.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        self.waits.fetch_add(1, Ordering::Relaxed);
        *self.last_blockers.lock().unwrap() = self.blockers_now();
        wait::timed(&self.wait_ns, || {
            self.wait_producer_side(interrupt, || {
                // A consumer that declared a deeper hold may have attached
                // while we wait: it may hold every slot until the ring grows.
                self.check_ring_fits_holds()?;
                Ok(self.try_reserve())
            })
        })
        .map(Some)
    }

    /// Says how deep the ring may grow for the holds consumers declare
    /// (`ControlHeader::ring_grows_to`), and how many slots which holds
    /// need (the caller's policy; the transport's `slots_consumers_need`):
    /// a reservation then fails with `RingTooShallow` while the attached
    /// consumers need more slots than the ring has, for the caller to grow
    /// it.
    pub fn set_ring_grows_to(&self, slots: usize, needed: SlotsNeeded) {
        *self.slots_needed.lock().unwrap() = Some(needed);
        let slots = slots.min(MAX_SLOTS) as u32;
        self.header().ring_grows_to.store(slots, Ordering::SeqCst);
    }

    /// The ring does not grow any more (a fixed or lent depth, or a growth
    /// that failed): `ring_grows_to` 0.
    pub fn stop_ring_growth(&self) {
        self.header().ring_grows_to.store(0, Ordering::SeqCst);
    }

    /// The `hold` each attached consumer declared (`None`: not declared).
    pub fn declared_holds(&self) -> impl Iterator<Item = Option<u32>> + '_ {
        self.header()
            .consumers
            .iter()
            .filter(|c| c.state.load(Ordering::SeqCst) == CONSUMER_ACTIVE)
            .map(|c| c.hold.load(Ordering::Relaxed))
            .map(|hold| (hold != u32::MAX).then_some(hold))
    }

    /// `RingTooShallow` when the ring may grow (`set_ring_grows_to`), the
    /// attached consumers need more slots than it has (as its
    /// `SlotsNeeded` counts them), and nothing is reserved (a new pool
    /// waits for reservations to end).
    fn check_ring_fits_holds(&self) -> Result<(), ChannelError> {
        let grows_to = self.header().ring_grows_to.load(Ordering::SeqCst) as usize;
        if grows_to <= self.slot_count() || self.reserved.load(Ordering::SeqCst) != 0 {
            return Ok(());
        }
        let Some(needed) = *self.slots_needed.lock().unwrap() else {
            return Ok(());
        };
        match needed(&mut self.declared_holds(), self.is_live()) {
            Some(wanted) if wanted > self.slot_count() => Err(ChannelError::RingTooShallow {
                wanted: wanted.min(grows_to),
            }),
            _ => Ok(()),
        }
    }

    /// Reserves a free slot if there is one, without waiting and without
    /// overwriting a frame a consumer has not taken.
    pub fn reserve_now(&self) -> Option<usize> {
        if self.slot_count() == 0 || self.config.when_full == WhenFull::Drop {
            return None;
        }
        self.try_reserve()
    }

    /// Reserves one of the slots in `mask` if one is free now, without
    /// waiting and without overwriting a frame a consumer has not taken: for
    /// publishing again the frame a slot still holds.
    pub fn reserve_one_of(&self, mask: u64) -> Option<usize> {
        let h = self.header();
        let min_cursor = self.every_frame_cursors().min().unwrap_or(u64::MAX);
        let reserved = self.reserved.load(Ordering::SeqCst);
        (0..self.slot_count()).find(|&i| {
            let bit = 1u64 << i;
            if mask & bit == 0 || reserved & bit != 0 {
                return false;
            }
            let slot = &h.slots[i];
            if slot.holders.load(Ordering::SeqCst) != 0 {
                return false;
            }
            let seq = slot.seq.load(Ordering::SeqCst);
            let pending = seq & SEQ_WRITING == 0 && seq >= min_cursor;
            !pending && self.claim(i, seq)
        })
    }

    /// Before the first frame: lets consumers that were waiting for this
    /// producer attach, so they get every frame from the first. A waiting
    /// consumer drops its marker only once attached, so the gate opens when
    /// no marker is left (or at the deadline). Comparing counts instead
    /// would let a consumer that attached early stand in for one still
    /// waiting.
    fn wait_for_early_consumers(&self, interrupt: &AtomicBool) -> Result<(), ChannelError> {
        let deadline = *self
            .waiters_gate
            .lock()
            .unwrap()
            .get_or_insert_with(|| std::time::Instant::now() + WAITER_GRACE);
        let other_users = self.config.permissions & 0o066 != 0;
        while shm::count_live_waiters_of(&self.config.channel, other_users) > 0
            && std::time::Instant::now() < deadline
        {
            if interrupt.load(Ordering::Acquire) {
                return Err(ChannelError::Interrupted);
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        self.gate_open.store(true, Ordering::Release);
        Ok(())
    }

    fn try_reserve(&self) -> Option<usize> {
        let h = self.header();
        let count = self.slot_count();
        let min_cursor = self.every_frame_cursors().min().unwrap_or(u64::MAX);
        let hint = self.next_slot_hint.load(Ordering::Relaxed);
        let reserved = self.reserved.load(Ordering::SeqCst);
        // In drop mode a slot that a lagging consumer has not taken yet may be
        // overwritten; the oldest such slot goes first.
        let mut overwrite: Option<(usize, u64)> = None;
        for k in 0..count {
            let i = (hint + k) % count;
            if reserved & (1 << i) != 0 {
                continue;
            }
            let slot = &h.slots[i];
            if slot.holders.load(Ordering::SeqCst) != 0 {
                continue;
            }
            let seq = slot.seq.load(Ordering::SeqCst);
            let pending = seq & SEQ_WRITING == 0 && seq >= min_cursor;
            if pending {
                if self.config.when_full == WhenFull::Drop && overwrite.is_none_or(|(_, s)| seq < s)
                {
                    overwrite = Some((i, seq));
                }
                continue;
            }
            if self.claim(i, seq) {
                return Some(i);
            }
        }
        match overwrite {
            Some((i, seq)) if self.claim(i, seq) => {
                // A lagging consumer loses that frame: a drop too.
                h.frames_dropped.fetch_add(1, Ordering::Relaxed);
                self.overwritten.fetch_add(1, Ordering::Relaxed);
                Some(i)
            }
            _ => None,
        }
    }

    /// Takes slot `i` unless a consumer grabbed it meanwhile.
    fn claim(&self, i: usize, old_seq: u64) -> bool {
        let bit = 1u64 << i;
        if self.reserved.fetch_or(bit, Ordering::SeqCst) & bit != 0 {
            return false;
        }
        let slot = &self.header().slots[i];
        if !protocol::claim_slot(&slot.seq, &slot.holders, old_seq) {
            self.reserved.fetch_and(!bit, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Gives back a reserved slot without publishing it.
    pub fn cancel(&self, slot: usize) {
        if slot < MAX_SLOTS {
            self.reserved.fetch_and(!(1u64 << slot), Ordering::SeqCst);
            let h = self.header();
            wait::notify(&h.release_futex, &h.producer_sleepers);
        }
    }

    /// Whether `slot` is reserved by this producer and not yet published.
    pub fn is_reserved(&self, slot: usize) -> bool {
        slot < MAX_SLOTS && self.reserved.load(Ordering::SeqCst) & (1 << slot) != 0
    }
}
