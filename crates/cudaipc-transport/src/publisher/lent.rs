// SPDX-License-Identifier: MPL-2.0

//! What the lending (`lending.rs`) asks of the publisher: the ring depth,
//! lending an upstream pool's buffers as slots, publishing a lent frame.

use std::sync::atomic::Ordering;

use super::Publisher;
use crate::cuda::AllocationKey;
use crate::ring_policy::{self, RingPolicy};
use crate::{CudaProducerSlots, LendableFrame, Lent, SlotRequest, TransportError, WriterStream};
use cudaipc_channel::FrameMeta;
use cudaipc_channel::layout::MAX_SLOTS;

/// What the lending (`lending.rs`, which sits above the publisher) asks of
/// it beyond its terms (`config`): the ring depth, which it shares, to lend
/// a pool's buffers, and to publish a frame from a lent slot. The learning
/// is the lending's own.
impl<T: Send + 'static> Publisher<T> {
    /// How deep the rings are; the lending sizes its pool by it and says
    /// when one may be lent.
    pub(crate) fn ring_policy(&self) -> &RingPolicy {
        &self.depth
    }

    /// Whether a lent ring of `slots` fits every hold attached consumers
    /// declared.
    pub(crate) fn fits_declared_holds(&self, slots: usize) -> bool {
        ring_policy::lent_ring_fits_holds(slots, &mut self.producer.declared_holds())
    }

    /// Makes the buffers at `ptrs` (of `size` bytes at least, keyed by
    /// `keys`) the slots, after a placeholder for each record of the current
    /// pool, which consumers may still hold. `Ok(false)`: that many records
    /// do not fit in a channel.
    ///
    /// # Safety
    /// Each pointer must start a device allocation of at least `size` bytes
    /// on the publisher's device that stays allocated while the publisher
    /// exists (an upstream pool keeps its buffers allocated, and the lent
    /// set holds the published ones).
    pub(crate) unsafe fn lend(
        &self,
        ptrs: Vec<u64>,
        keys: Vec<AllocationKey>,
        size: usize,
    ) -> Result<bool, TransportError> {
        let Some(device) = &self.config.device else {
            return Ok(false);
        };
        let placeholders = self.producer.slot_count();
        if placeholders + ptrs.len() > MAX_SLOTS {
            return Ok(false);
        }
        let config = &self.config;
        let request = SlotRequest {
            channel: config.channel.clone(),
            session: self.producer.session(),
            generation: self.producer.pool_generation() + 1,
            count: placeholders + ptrs.len(),
            size,
            permissions: config.permissions,
            gpu_sync: config.gpu_sync,
            ipc_mode: config.ipc_mode,
        };
        // SAFETY: the caller's contract.
        let slots = unsafe { CudaProducerSlots::lend(device, placeholders, ptrs, size, &request) }?;
        // Upstream's pool is as deep as it is.
        self.producer.stop_ring_growth();
        self.install(Box::new(slots), Some((placeholders, keys)))?;
        Ok(true)
    }

    /// Publishes the frame upstream wrote into the lent buffer `frame`
    /// (`None`: not a buffer of the lendable pool) with `meta` in its own
    /// layout, keeping `buffer` while it is published, then takes back the
    /// buffers consumers are done with (for the caller to give back
    /// upstream). Before publishing, `order_after_writer` orders our stream
    /// after upstream's writes; `writer_stream` as in
    /// [`LentSlots::take_released`].
    pub(crate) fn publish_lent(
        &self,
        frame: Option<&LendableFrame>,
        buffer: &T,
        meta: &FrameMeta,
        order_after_writer: impl FnOnce() -> Result<(), TransportError>,
        writer_stream: &dyn Fn(&T) -> Option<WriterStream>,
    ) -> Result<Lent<T>, TransportError>
    where
        T: Clone,
    {
        let Some(set) = self.current_set().filter(|set| set.lent.is_some()) else {
            return Ok(Lent::NotLent);
        };
        let (Some(lent), Some(frame)) = (&set.lent, frame) else {
            return Ok(Lent::Outside);
        };
        let meta = FrameMeta {
            size: frame.size as u64,
            planes: frame.planes.clone(),
            ..meta.clone()
        };
        self.reap_retired();
        order_after_writer()?;
        let Some(reservation) = lent
            .slot_of(&frame.key)
            .and_then(|slot| lent.waiting_for_frame(slot, &self.producer))
        else {
            return Ok(Lent::Outside);
        };
        let slot = reservation.slot();
        lent.publish(reservation, buffer.clone(), &meta, &*set.slots)?;
        self.zero_copy.fetch_add(1, Ordering::Relaxed);
        lent.take_released(
            &*set.slots,
            &self.producer,
            &self.interrupt,
            writer_stream,
            &self.read_wait_ns,
            Some(slot),
        )
        .map(Lent::Published)
    }
}
