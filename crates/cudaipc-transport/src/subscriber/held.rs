// SPDX-License-Identifier: MPL-2.0

//! What a subscriber hands out: events, and frames whose slot this process
//! holds until they are dropped.

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{ConsumerSlots, SlotMemory, TransportError};
use cudaipc_channel::{Frame, ProducerGone, ReleaseHandle};

/// Called when the end of a GPU read cannot be marked (slot, error): the
/// slot is released all the same.
pub type FinishReadError = Arc<dyn Fn(usize, &TransportError) + Send + Sync>;

/// What [`Subscriber::next`](super::Subscriber::next) yields.
// A frame is moved out at once, once per frame: boxing it would cost an
// allocation per frame for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Event {
    /// The frames that follow have these caps (the producer's string).
    Caps(String),
    Frame(HeldFrame),
    /// A serialized event, between the frames it came between.
    StreamEvent(Vec<u8>),
    Eos,
    ProducerGone(ProducerGone),
}

/// A frame whose slot this process holds: its metadata (through `Deref`) and
/// its memory. Dropping it ends the read (after the GPU work queued on the
/// slot so far) and gives the slot back to the producer.
pub struct HeldFrame {
    pub(super) frame: Frame,
    /// Set once the read is ordered after the producer's writes
    /// (`before_read`); every frame handed out has them.
    pub(super) slots: Option<Arc<dyn ConsumerSlots>>,
    /// See [`HeldFrame::is_written`].
    pub(super) written: bool,
    pub(super) release: ReleaseHandle,
    pub(super) held: Arc<AtomicUsize>,
    pub(super) on_finish_read_error: FinishReadError,
}

impl HeldFrame {
    /// Where the frame's bytes are.
    pub fn memory(&self) -> SlotMemory {
        self.slots().slot_memory(self.frame.slot)
    }

    fn slots(&self) -> &Arc<dyn ConsumerSlots> {
        self.slots
            .as_ref()
            .expect("a frame is handed out only once its read is ordered")
    }

    /// The frame's bytes, for the host transport.
    pub fn host_bytes(&self) -> Option<&[u8]> {
        // The producer does not write a held slot; the size was checked
        // against the slot size before the frame was handed out.
        self.slots()
            .host_region(self.frame.slot)
            .and_then(|region| region.as_slice().get(..self.frame.size as usize))
    }

    /// Whether the producer's writes of the frame were done on the GPU when
    /// it was handed out, not only ordered before this process's later
    /// reads on its stream.
    pub fn is_written(&self) -> bool {
        self.written
    }

    /// Frames of its subscriber being read, this one included.
    pub fn frames_held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Slots in the producer's pool.
    pub fn slot_count(&self) -> usize {
        self.slots().slot_count()
    }
}

impl Deref for HeldFrame {
    type Target = Frame;
    fn deref(&self) -> &Frame {
        &self.frame
    }
}

impl Drop for HeldFrame {
    fn drop(&mut self) {
        if let Some(slots) = &self.slots {
            self.held.fetch_sub(1, Ordering::SeqCst);
            if let Err(e) = slots.finish_read(self.frame.slot) {
                (self.on_finish_read_error)(self.frame.slot, &e);
            }
        }
        self.release.release(self.frame.slot);
    }
}
