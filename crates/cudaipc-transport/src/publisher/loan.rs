// SPDX-License-Identifier: MPL-2.0

//! Slots lent to writers that fill them in place: `Publisher::loan` and
//! the `SlotLoan` it hands out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::slot_sets::SlotSet;
use super::{PublishError, Publisher, ReserveError};
use crate::SlotMemory;
use crate::reservation::Reservation;
use cudaipc_channel::wait::timed;
use cudaipc_channel::{ChannelError, FrameMeta};

impl<T: Send + 'static> Publisher<T> {
    /// Lends a free slot to a writer that fills it in place (waiting
    /// unless `interrupt` is set), for a frame of `frame_size` bytes; the
    /// writer's later writes are ordered after the consumers' reads of the
    /// slot's previous frame.
    pub fn loan(
        self: &Arc<Self>,
        frame_size: usize,
        interrupt: &AtomicBool,
    ) -> Result<SlotLoan<T>, ReserveError> {
        let slot = match self.reserve(interrupt) {
            Ok(Some(slot)) => slot,
            Ok(None) | Err(ChannelError::Interrupted) => return Err(ReserveError::Flushing),
            Err(e) => return Err(ReserveError::Channel(e)),
        };
        // From here on an early return gives the slot back.
        let reservation = Reservation::new(&self.producer, slot);
        // The writer's memory may itself be a noted source (a slot of ours
        // that a downstream element holds and pushes again): forget all.
        self.forget_all_content();
        let Some(set) = self.current_set() else {
            return Err(ReserveError::Flushing);
        };
        if set.slots.slot_size() < frame_size {
            return Err(ReserveError::TooSmall);
        }
        timed(&self.read_wait_ns, || {
            set.slots.before_write(slot, &self.producer)
        })
        .map_err(ReserveError::Transport)?;
        Ok(SlotLoan {
            memory: set.slots.slot_memory(slot),
            publisher: self.clone(),
            set,
            slot,
            generation: reservation.keep(),
            published: false,
        })
    }
}

/// A free slot lent to a writer that fills it in place (see
/// [`Publisher::loan`]). Owned: it may travel with the writer's buffer to
/// another thread. [`publish`](Self::publish) consumes it; dropped
/// unpublished (the buffer was never rendered, an error), it gives the slot
/// back. Keeps the slot's memory alive.
pub struct SlotLoan<T: Send + 'static> {
    publisher: Arc<Publisher<T>>,
    set: Arc<SlotSet<T>>,
    memory: SlotMemory,
    slot: usize,
    /// The pool generation the slot was reserved in.
    generation: u64,
    /// Set once `publish` took the slot over.
    published: bool,
}

impl<T: Send + 'static> SlotLoan<T> {
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Where the slot's bytes are; valid while the loan or a clone of the
    /// memory lives.
    pub fn memory(&self) -> &SlotMemory {
        &self.memory
    }

    /// Whether this loan is a slot of `publisher`.
    pub fn is_of(&self, publisher: &Arc<Publisher<T>>) -> bool {
        Arc::ptr_eq(&self.publisher, publisher)
    }

    /// Publishes the frame written into the slot with `meta`; returns the
    /// slot. On an error the slot goes back to the ring.
    pub fn publish(mut self, meta: &FrameMeta) -> Result<usize, PublishError> {
        self.published = true;
        let publisher = &self.publisher;
        publisher.reap_retired();
        let reservation =
            Reservation::of_generation(&publisher.producer, self.slot, self.generation);
        if !publisher.is_current(&self.set) {
            // Closed (a new set waits for every loan to end).
            return Err(PublishError::Channel(ChannelError::Interrupted));
        }
        reservation
            .publish(Some(&*self.set.slots), meta)
            .map_err(PublishError::from)?;
        publisher.zero_copy.fetch_add(1, Ordering::Relaxed);
        Ok(self.slot)
    }
}

impl<T: Send + 'static> Drop for SlotLoan<T> {
    fn drop(&mut self) {
        if !self.published {
            drop(Reservation::of_generation(
                &self.publisher.producer,
                self.slot,
                self.generation,
            ));
        }
    }
}
