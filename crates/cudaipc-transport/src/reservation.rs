// SPDX-License-Identifier: MPL-2.0

//! A slot this producer reserved, as a value: publishing it consumes it, and
//! dropping it unpublished gives the slot back. Every way a frame reaches a
//! slot (copied, written in place through a [`SlotLoan`](crate::SlotLoan),
//! published again, lent) ends in [`Reservation::publish`], and this `Drop`
//! is the one place a reserved slot goes back to the ring.

use cudaipc_channel::{FrameMeta, Producer};

use crate::{ProducerSlots, TransportError};

/// Slot `slot` of the pool of generation `generation`, reserved on
/// `producer`.
pub(crate) struct Reservation<'a> {
    producer: &'a Producer,
    slot: usize,
    generation: u64,
}

impl<'a> Reservation<'a> {
    /// Takes over `slot`, which the caller just reserved on `producer`.
    pub(crate) fn new(producer: &'a Producer, slot: usize) -> Self {
        Self {
            producer,
            slot,
            generation: producer.pool_generation(),
        }
    }

    /// Takes over a slot reserved earlier in the pool of `generation`.
    pub(crate) fn of_generation(producer: &'a Producer, slot: usize, generation: u64) -> Self {
        Self {
            producer,
            slot,
            generation,
        }
    }

    pub(crate) fn slot(&self) -> usize {
        self.slot
    }

    /// Publishes the frame in the slot with `meta`; `written`: the slots
    /// whose `after_write` makes the writes issued so far the frame (`None`
    /// when nothing was written: the slot still holds it). On an error the
    /// slot goes back.
    pub(crate) fn publish(
        self,
        written: Option<&dyn ProducerSlots>,
        meta: &FrameMeta,
    ) -> Result<u64, TransportError> {
        if let Some(slots) = written {
            slots.after_write(self.slot)?;
        }
        let seq = self.producer.publish(self.slot, meta)?;
        // Published: the slot is the consumers' now, not ours to give back.
        std::mem::forget(self);
        Ok(seq)
    }

    /// Keeps the slot reserved without this value: the caller's own
    /// bookkeeping holds it from now on (a `SlotLoan`, lent slots), and
    /// takes it over again with [`of_generation`](Self::of_generation) and
    /// the generation returned.
    pub(crate) fn keep(self) -> u64 {
        let generation = self.generation;
        std::mem::forget(self);
        generation
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        // A slot index of a replaced pool names another slot now (a new
        // pool starts with no slot reserved).
        if self.producer.pool_generation() == self.generation {
            self.producer.cancel(self.slot);
        }
    }
}
