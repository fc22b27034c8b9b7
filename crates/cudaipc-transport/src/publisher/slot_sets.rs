// SPDX-License-Identifier: MPL-2.0

//! The slot sets: the current one and the retired ones consumers still
//! read; configuring, allocating and installing a set, growing the ring.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{ConfigureError, Publisher};
use crate::cuda::AllocationKey;
use crate::ring_policy::slots_consumers_need;
use crate::{LentSlots, ProducerSlots, SlotRequest, TransportError};
use cudaipc_channel::layout::MAX_SLOTS;

/// One generation of slots.
pub(super) struct SlotSet<T> {
    pub(super) slots: Box<dyn ProducerSlots>,
    /// The channel's pool generation these slots were published as.
    pub(super) generation: u64,
    /// Set when the slots are buffers lent by an upstream pool.
    pub(super) lent: Option<LentSlots<AllocationKey, T>>,
}

/// A replaced slot set that consumers still read, with the consumers (bits
/// per slot record) that held it at the switch.
pub(super) type Retired<T> = (Arc<SlotSet<T>>, [u64; MAX_SLOTS]);

/// Slots allocated by [`Publisher::configure`].
#[derive(Debug, Clone, Copy)]
pub struct Allocated {
    pub count: usize,
    pub size: usize,
}

impl<T: Send + 'static> Publisher<T> {
    pub(super) fn current_set(&self) -> Option<Arc<SlotSet<T>>> {
        self.current.lock().unwrap().clone()
    }

    /// Makes sure slots of our own of at least `frame_size` bytes are the
    /// current ones, and the ones the channel describes (allocating them if
    /// the current ones are too small, lent, not as many as `slots=0`
    /// stands for now, or not what the channel describes since a lending
    /// failed half way). `Some` if it allocated.
    pub fn configure(&self, frame_size: usize) -> Result<Option<Allocated>, ConfigureError> {
        if let Some(current) = self.current_set()
            && current.slots.slot_size() >= frame_size
            && current.lent.is_none()
            && current.generation == self.producer.pool_generation()
            && current.slots.slot_count() == self.own_depth(frame_size)
        {
            return Ok(None);
        }
        self.allocate(frame_size).map(Some)
    }

    /// Says whether frames come paced (synchronised to a clock, or from a
    /// live source) rather than as fast as the pipeline runs: `slots=0`
    /// then keeps the shallow ring, since a consumer catches up between
    /// frames. Takes effect at the next allocation.
    pub fn set_paced(&self, paced: bool) {
        self.depth.set_paced(paced);
        // A paced channel is live: consumers keep their own pace on it.
        self.producer.set_live(paced);
    }

    /// Says at what rate paced frames come (frames a second; 0: not known):
    /// with `slots=0` a live ring holds a tenth of a second of them and
    /// more (see `ring_policy.rs`). Takes effect at the next allocation.
    pub fn set_frame_rate(&self, fps: f64) {
        self.depth.set_frame_rate(fps);
    }

    /// The depth of a ring of our own now: `slots`, or the automatic depth,
    /// deeper where the attached consumers need it (declared holds, their
    /// number on a live channel).
    fn own_depth(&self, frame_size: usize) -> usize {
        let need =
            slots_consumers_need(&mut self.producer.declared_holds(), self.producer.is_live());
        self.depth.own_for_consumers(frame_size, need)
    }

    /// Allocates and publishes a new set of slots of our own.
    fn allocate(&self, frame_size: usize) -> Result<Allocated, ConfigureError> {
        let count = self.own_depth(frame_size);
        let request = SlotRequest {
            channel: self.config.channel.clone(),
            session: self.producer.session(),
            generation: self.producer.pool_generation() + 1,
            count,
            size: frame_size,
            permissions: self.config.permissions,
            gpu_sync: self.config.gpu_sync,
            ipc_mode: self.config.ipc_mode,
        };
        let slots =
            crate::create_producer_slots(self.config.kind, &request, self.config.device.as_ref())
                .map_err(|error| ConfigureError::Allocate {
                count,
                size: frame_size,
                error,
            })?;
        self.install(slots, None).map_err(ConfigureError::Install)?;
        // An automatic ring grows for the holds consumers declare.
        match self.depth.grows_to(frame_size) {
            0 => self.producer.stop_ring_growth(),
            slots => self.producer.set_ring_grows_to(slots, slots_consumers_need),
        }
        Ok(Allocated {
            count,
            size: frame_size,
        })
    }

    /// Publishes `slots` as the channel's new slot pool (lent ones with the
    /// key of each slot's memory) and makes it the current set.
    pub(super) fn install(
        &self,
        slots: Box<dyn ProducerSlots>,
        lent_keys: Option<(usize, Vec<AllocationKey>)>,
    ) -> Result<(), TransportError> {
        if let Some(old) = self.current_set()
            && let Some(lent) = &old.lent
        {
            // The new pool waits for no reserved slot.
            lent.cancel_reservations(&self.producer);
        }
        // Before the pool is published: consumers ask for its memory then.
        let memory = slots.shareables()?;
        if !memory.is_empty() {
            self.producer
                .offer_pool(self.producer.pool_generation() + 1, memory);
        }
        // Waits until consumers are done with the old slots.
        let generation = self.producer.configure_pool(
            slots.slot_size() as u64,
            &slots.slot_descriptors(),
            &slots.pool_descriptor(),
            &self.interrupt,
        )?;
        let lent = lent_keys
            .map(|(placeholders, keys)| LentSlots::new(placeholders, keys, &self.producer))
            .transpose()?;
        // Consumers holding frames of the old set keep it alive.
        let readers = self.producer.held_slots();
        let old = self.current.lock().unwrap().replace(Arc::new(SlotSet {
            slots,
            generation,
            lent,
        }));
        // The new slots hold nothing yet.
        self.forget_all_content();
        if let Some(old) = old
            && readers.iter().any(|&r| r != 0)
        {
            let mut retired = self.retired.lock().unwrap();
            retired.push((old, readers));
            self.any_retired.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Frees the retired slot sets that no consumer reads any more (each
    /// publish path does, once per frame). A bit once seen clear stays
    /// clear: a consumer that released a frame of a retired set cannot take
    /// another one from it.
    pub(super) fn reap_retired(&self) {
        if !self.any_retired.load(Ordering::Acquire) {
            return;
        }
        let mut retired = self.retired.lock().unwrap();
        if retired.is_empty() {
            self.any_retired.store(false, Ordering::Release);
            return;
        }
        let held = self.producer.held_slots();
        retired.retain_mut(|(_, readers)| {
            for (r, h) in readers.iter_mut().zip(held) {
                *r &= h;
            }
            readers.iter().any(|&r| r != 0)
        });
        self.any_retired
            .store(!retired.is_empty(), Ordering::Release);
    }

    /// A consumer declared a hold that our ring is too shallow for, and
    /// nothing is reserved: a deeper ring of our own replaces it (consumers
    /// keep the frames they hold of the old one). Where it cannot (lent
    /// slots, or the allocation failed), the ring stops growing, and the
    /// consumer is told once it holds every slot.
    pub(super) fn grow(&self) {
        let grown = match self.current_set() {
            Some(set) if set.lent.is_none() => self.allocate(set.slots.slot_size()).is_ok(),
            _ => false,
        };
        if !grown {
            self.producer.stop_ring_growth();
        }
    }

    /// Whether `set` is the current slot set (not closed, not replaced).
    pub(super) fn is_current(&self, set: &Arc<SlotSet<T>>) -> bool {
        self.current
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, set))
    }
}
