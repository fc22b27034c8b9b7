// SPDX-License-Identifier: MPL-2.0

//! Lending: the buffers of an upstream pool become the slots, for zero copy
//! with writers that only write into buffers of their own kind (GStreamer's
//! CUDA elements write only into a `GstCudaBufferPool`).
//!
//! A publisher on the cuda transport has a [`Lender`] ([`Lender::new`]),
//! which the caller asks about each buffer of that pool when it
//! [can lend](Lender::can_lend):
//! - [`Lender::publish`]: once the slots are the pool's buffers, publishes
//!   the frame upstream wrote into one (`Lent::Published`); else the caller
//!   copies it as any other frame;
//! - [`Lender::learn`]: notes a copied frame of the pool; once every buffer
//!   of the pool went through, they become the slots.
//!
//! The lent slot set itself (which buffer each slot is, which ones upstream
//! has, when they go back) is [`LentSlots`](crate::LentSlots), in
//! `lent_slots.rs`. Of the publisher the lending takes its terms once, when
//! it is made, and then asks it for three things only: the ring depth they
//! share (`ring_policy.rs`), to lend a pool's buffers, and to publish a frame
//! from a lent slot.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::publisher::Publisher;
use crate::{LendableFrame, Lent, MemoryKind, TransportError, WriterStream};
use cudaipc_channel::FrameMeta;
use cudaipc_channel::WhenFull;

/// What [`Lender::learn`] made of a copied frame of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    /// A buffer not seen before; that many seen so far.
    New(usize),
    Known,
    /// Every buffer of the pool went through: that many are the slots now
    /// (zero copy from then on).
    Lent(usize),
    /// Every buffer went through, but they cannot be the slots (see
    /// [`Lender::can_lend`]; too many slot records).
    NotLendable,
}

/// The lending of a publisher whose slots may be buffers of an upstream
/// pool: it learns the pool's buffers from copied frames, and once it knows
/// them all, asks the publisher to make them the slots and publishes frames
/// from them.
pub struct Lender<T> {
    publisher: Arc<Publisher<T>>,
    /// The publisher's terms allow lending (see [`Lender::can_lend`]).
    can_lend: bool,
    /// The buffers of the lendable pool seen so far (a leaf lock, as the
    /// publisher's).
    seen: Mutex<Vec<LendableFrame>>,
    /// Upstream took the publisher's own slots to write into: nothing will
    /// be lent, however often a lendable pool is proposed again.
    writes_in_place: AtomicBool,
}

impl<T: Send + 'static> Lender<T> {
    /// The lending of `publisher`, on the cuda transport (`None` on the host
    /// one).
    pub fn new(publisher: Arc<Publisher<T>>) -> Option<Self> {
        let config = publisher.config();
        config.device.as_ref()?;
        Some(Self {
            can_lend: config.ipc_mode == MemoryKind::Lent.ipc_mode()
                && config.when_full == WhenFull::Block
                && config.slots != 1,
            publisher,
            seen: Mutex::new(Vec::new()),
            writes_in_place: AtomicBool::new(false),
        })
    }

    /// Whether buffers of another allocator can become the slots: on a
    /// legacy channel in block mode. Lent memory has only legacy IPC
    /// handles, which a descriptor channel does not hand out; and upstream
    /// gets a lent buffer back only once consumers release it, so with
    /// consumers holding every one the sink would wait, which
    /// `when-full=drop` promises never to do (it copies). And at least two
    /// slots: upstream keeps one buffer to write into while another is
    /// published.
    pub fn can_lend(&self) -> bool {
        self.can_lend
    }

    /// How many buffers a pool whose buffers may be lent as slots should
    /// have (see `RingPolicy::lent`).
    pub fn pool_buffers(&self, frame_size: usize) -> usize {
        self.publisher.ring_policy().lent(frame_size)
    }

    /// A new pool was proposed upstream, `lendable` or not: forgets the
    /// buffers seen so far, and sizes the publisher's own ring at its next
    /// `configure`: as deep as a ring goes where nothing may be lent, half
    /// as deep where a lent ring must fit beside it.
    pub fn restart(&self, lendable: bool) {
        self.seen.lock().unwrap().clear();
        let in_place = self.writes_in_place.load(Ordering::Relaxed);
        self.publisher
            .ring_policy()
            .set_may_lend(lendable && !in_place);
    }

    /// Upstream took the publisher's own slots to write into, not the
    /// lendable pool proposed beside them: nothing will be lent, and the
    /// publisher's own ring may be as deep as a ring goes at its next
    /// `configure`. Returns whether that changed anything.
    pub fn writes_in_place(&self) -> bool {
        let first = !self.writes_in_place.swap(true, Ordering::Relaxed);
        self.publisher.ring_policy().set_may_lend(false);
        first
    }

    /// Publishes the frame upstream wrote into the lent buffer `frame`
    /// (`None`: not a buffer of the lendable pool), keeping `buffer` while
    /// it is published, then takes back the buffers consumers are done
    /// with. Before publishing, `order_after_writer` orders our stream after
    /// upstream's writes. `writer_stream` names, per buffer, the stream of
    /// the device's primary context upstream writes it on next, if any:
    /// that stream waits for the consumers' reads on the GPU; other buffers
    /// come back once the reads are done.
    pub fn publish(
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
        self.publisher
            .publish_lent(frame, buffer, meta, order_after_writer, writer_stream)
    }

    /// Notes a copied frame of the lendable pool, of `pool_buffers` buffers
    /// (`None`: not a pool whose buffers can all be known); once every one
    /// went through, they become the slots.
    ///
    /// # Safety
    /// Each frame's `ptr` must start a device allocation of at least its
    /// `size` bytes on the publisher's device that stays allocated while
    /// the publisher exists (an upstream pool keeps its buffers allocated,
    /// and the lent set holds the published ones).
    pub unsafe fn learn(
        &self,
        frame: LendableFrame,
        pool_buffers: Option<usize>,
    ) -> Result<Learned, TransportError> {
        let frames = {
            let mut seen = self.seen.lock().unwrap();
            let new = !seen.iter().any(|f| f.key == frame.key);
            if new {
                seen.push(frame);
            }
            let Some(count) = pool_buffers.filter(|&n| seen.len() >= n) else {
                return Ok(if new {
                    Learned::New(seen.len())
                } else {
                    Learned::Known
                });
            };
            let frames = std::mem::take(&mut *seen);
            if frames.len() > count {
                // More buffers than the pool holds: it was reallocated
                // since. Learn it again.
                return Ok(Learned::Known);
            }
            frames
        };
        let count = frames.len();
        // A consumer's declared hold needs more slots than upstream's pool
        // has (a lent ring does not grow): we keep copying into our own.
        if !self.can_lend() || !self.publisher.fits_declared_holds(count) {
            return Ok(Learned::NotLendable);
        }
        let size = frames.iter().map(|f| f.size).min().unwrap_or(0);
        let ptrs = frames.iter().map(|f| f.ptr).collect();
        let keys = frames.iter().map(|f| f.key).collect();
        // SAFETY: the caller's contract.
        Ok(match unsafe { self.publisher.lend(ptrs, keys, size) }? {
            true => Learned::Lent(count),
            false => Learned::NotLendable,
        })
    }
}
