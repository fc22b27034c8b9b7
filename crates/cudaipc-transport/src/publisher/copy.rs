// SPDX-License-Identifier: MPL-2.0

//! Publishing a copy (`publish_copy_of`), and the slots that still hold a
//! copy of the same source, published again without one.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::slot_sets::SlotSet;
use super::{PublishError, Publisher};
use crate::SlotMemory;
use crate::reservation::Reservation;
use cudaipc_channel::wait::timed;
use cudaipc_channel::{ChannelError, FrameMeta};

/// Slots of one slot set that hold a copy of one source, whose content the
/// caller guarantees unchanged while `keeper` lives.
pub(super) struct Repeatable<T> {
    /// The slot set (its address while it is current).
    set: usize,
    source: usize,
    /// One bit per slot.
    slots: u64,
    _keeper: T,
}

impl<T: Send + 'static> Publisher<T> {
    /// Copies a frame into a free slot with `fill` and publishes it with
    /// `meta`. `Ok(None)`: every slot was busy and the policy drops.
    ///
    /// With a `source`: an identity (e.g. the address of the memory it is read from) and a
    /// `keeper` that guarantees its content does not change while it lives
    /// (e.g. a reference to the buffer: GStreamer lets nobody write memory
    /// that others hold). Where a free slot still holds a copy of the same
    /// source, made while a keeper of it lived, that slot is published again
    /// with `meta` and nothing is copied (a frame pushed again: imagefreeze,
    /// videorate duplicates, a tee). The publisher keeps the last source's
    /// keeper. `Ok(Some((slot, copied)))`.
    pub fn publish_copy_of<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
        &self,
        source: Option<(usize, T)>,
        meta: &FrameMeta,
        fill: impl FnOnce(&SlotMemory) -> Result<(), E>,
    ) -> Result<Option<(usize, bool)>, PublishError> {
        self.reap_retired();
        let key = source.as_ref().map(|(key, _)| *key);
        // A free slot that holds the frame already, else any free slot.
        let reserved =
            match key.and_then(|key| self.producer.reserve_one_of(self.slots_holding(key))) {
                Some(slot) => Some(slot),
                None => self
                    .reserve(&self.interrupt)
                    .map_err(PublishError::Channel)?,
            };
        let Some(slot) = reserved else {
            return Ok(None);
        };
        // From here on an early return gives the slot back.
        let reservation = Reservation::new(&self.producer, slot);
        let Some(set) = self.current_set() else {
            return Err(PublishError::Channel(ChannelError::Interrupted));
        };
        let holds = key.is_some_and(|key| self.slots_holding(key) & (1 << slot) != 0);
        // Holding it, there is nothing to write, nor to signal: the slot's
        // ready event was last recorded after its copy (consumers' waits on
        // it pass at once), and no GPU work of ours means no turn on the
        // GPU for this process without MPS.
        if !holds {
            self.forget_content(slot);
            timed(&self.read_wait_ns, || {
                set.slots.before_write(slot, &self.producer)
            })
            .map_err(Into::into)
            .and_then(|()| fill(&set.slots.slot_memory(slot)).map_err(Into::into))
            .map_err(|error| PublishError::Copy { slot, error })?;
        }
        let written = (!holds).then_some(&*set.slots);
        reservation
            .publish(written, meta)
            .map_err(PublishError::from)?;
        let counter = if holds { &self.repeated } else { &self.copied };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some((key, keeper)) = source {
            self.keep_content(key, keeper, &set, slot);
        }
        Ok(Some((slot, !holds)))
    }

    /// The slots of the current set that hold a copy of `source` (a bit
    /// each).
    fn slots_holding(&self, source: usize) -> u64 {
        let Some(set) = self.current_set() else {
            return 0;
        };
        match self.repeatable.lock().unwrap().as_ref() {
            Some(r) if r.source == source && r.set == Arc::as_ptr(&set) as usize => r.slots,
            _ => 0,
        }
    }

    /// Notes that `slot` of `set` (the current set) holds a copy of
    /// `source`, kept unchanged by `keeper`; another source replaces what was
    /// noted.
    fn keep_content(&self, source: usize, keeper: T, set: &Arc<SlotSet<T>>, slot: usize) {
        let set = Arc::as_ptr(set) as usize;
        let mut repeatable = self.repeatable.lock().unwrap();
        let slots = match repeatable.as_ref() {
            Some(r) if r.source == source && r.set == set => r.slots | 1 << slot,
            _ => 1 << slot,
        };
        // The newer keeper holds the same content; the older one may go.
        let old = repeatable.replace(Repeatable {
            set,
            source,
            slots,
            _keeper: keeper,
        });
        drop(repeatable);
        drop(old);
    }

    /// No slot holds a noted source any more (new slots or caps, a writer
    /// in the slots); the keeper goes (outside the lock).
    pub(super) fn forget_all_content(&self) {
        let forgotten = self.repeatable.lock().unwrap().take();
        drop(forgotten);
    }

    /// `slot` is about to be written: it no longer holds the noted source.
    fn forget_content(&self, slot: usize) {
        if let Some(r) = self.repeatable.lock().unwrap().as_mut() {
            r.slots &= !(1u64 << slot);
        }
    }
}
