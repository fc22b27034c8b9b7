// A consumer that would wait on itself: it holds more frames than it
// declared, or every slot of the ring, while no new frame is there.

use super::*;

impl Consumer {
    /// With `refuse_self_wait`, before waiting for a frame: fails if this
    /// consumer holds more frames than it declared, or every slot of the
    /// ring, while no new frame is there to take. Within a declared hold,
    /// every slot of a ring that is to grow for it (`ring_grows_to`) is
    /// allowed for `RING_GROWTH_GRACE`, until when it returns (the producer
    /// grows the ring when it finds every slot held).
    pub(super) fn check_not_waiting_on_itself(&mut self) -> Result<Option<Instant>, ChannelError> {
        if !self.config.refuse_self_wait
            || self.slot_count == 0
            || protocol::load_published(&self.header().published) > self.cursor
        {
            self.every_slot_held_since = None;
            return Ok(None);
        }
        let held = self.held_count();
        let every_slot = held >= self.slot_count;
        let grace_end = every_slot.then(|| {
            *self.every_slot_held_since.get_or_insert_with(Instant::now) + RING_GROWTH_GRACE
        });
        if !every_slot {
            self.every_slot_held_since = None;
        }
        let over = match self.config.hold {
            Some(hold) => {
                held > hold as usize || grace_end.is_some_and(|end| Instant::now() >= end)
            }
            None => every_slot,
        };
        if over {
            return Err(ChannelError::HoldsEverySlot {
                channel: self.config.channel.clone(),
                held,
                slots: self.slot_count,
                hold: self.config.hold,
            });
        }
        Ok(grace_end)
    }

    /// Fails if the declared `hold` does not fit the ring of `slots`
    /// (`slots_for_hold`). A ring that is to grow to fit it
    /// (`ring_grows_to`) fits.
    pub(super) fn check_hold_fits(&self, slots: usize) -> Result<(), ChannelError> {
        let grows_to = self.header().ring_grows_to.load(Ordering::SeqCst) as usize;
        match self.config.hold {
            Some(hold) if slots < slots_for_hold(hold) && grows_to < slots_for_hold(hold) => {
                Err(ChannelError::HoldExceedsRing {
                    channel: self.config.channel.clone(),
                    hold,
                    slots,
                })
            }
            _ => Ok(()),
        }
    }
}
