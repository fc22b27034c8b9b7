// SPDX-License-Identifier: MPL-2.0

//! The buffer pool `cudaipcsink` proposes upstream: every buffer it hands
//! out wraps a free slot, so upstream writes the frame straight into shared
//! memory and the sink publishes it without a copy.
//!
//! The buffer's memory carries the slot's loan (as qdata, which copies of
//! the buffer share with their memory): `render` takes it from the buffer
//! it gets and publishes it; memory freed unrendered gives the slot back
//! through the loan's `Drop`.

use std::sync::{Arc, LazyLock};

use gst::glib;
use gst::glib::translate::IntoGlib;

use super::state::{SinkLender, SinkPublisher};

/// A slot lent to upstream through a buffer of the pool.
type SinkLoan = cudaipc_transport::SlotLoan<gst::Buffer>;

// The qdata's destroy notify runs on whatever thread frees the memory.
const _: () = {
    const fn send<T: Send>() {}
    send::<SinkLoan>()
};

static LOAN_QUARK: LazyLock<glib::Quark> =
    LazyLock::new(|| glib::Quark::from_str("GstRsCudaIpcSlotLoan"));

unsafe extern "C" fn drop_loan(data: glib::ffi::gpointer) {
    // SAFETY: `data` is a boxed SinkLoan set by `attach_loan` or
    // `take_loan`; GStreamer calls this once, when it drops the qdata.
    drop(unsafe { Box::from_raw(data as *mut SinkLoan) });
}

/// Lets `memory` carry `loan` until `take_loan` takes it or the memory is
/// freed (which gives the slot back).
fn attach_loan(memory: &gst::MemoryRef, loan: Box<SinkLoan>) {
    // SAFETY: the memory is valid (borrowed); GstMiniObject's qdata is
    // guarded by GStreamer's own lock, so setting it on a memory others
    // hold too is sound; `drop_loan` frees exactly what is set here.
    unsafe {
        gst::ffi::gst_mini_object_set_qdata(
            memory.as_ptr() as *mut gst::ffi::GstMiniObject,
            LOAN_QUARK.into_glib(),
            Box::into_raw(loan) as glib::ffi::gpointer,
            Some(drop_loan),
        );
    }
}

/// The loan of `publisher`'s slot that the only memory of `buffer` wraps,
/// unless it was published already (a buffer pushed again). The memory no
/// longer carries it.
pub(super) fn take_loan(
    buffer: &gst::BufferRef,
    publisher: &Arc<SinkPublisher>,
) -> Option<SinkLoan> {
    if buffer.n_memory() != 1 {
        return None;
    }
    let memory = buffer.peek_memory(0);
    // SAFETY: as in `attach_loan`; stealing leaves the destroy notify
    // uncalled, so the loan is ours alone from here.
    let data = unsafe {
        gst::ffi::gst_mini_object_steal_qdata(
            memory.as_ptr() as *mut gst::ffi::GstMiniObject,
            LOAN_QUARK.into_glib(),
        )
    };
    if data.is_null() {
        return None;
    }
    // SAFETY: only `attach_loan` sets this quark, with a boxed SinkLoan.
    let loan = unsafe { Box::from_raw(data as *mut SinkLoan) };
    if loan.is_of(publisher) {
        return Some(*loan);
    }
    // Another sink's slot (one buffer rendered by two sinks): left to it.
    attach_loan(memory, loan);
    None
}

glib::wrapper! {
    pub struct SlotPool(ObjectSubclass<imp::SlotPool>) @extends gst::BufferPool, gst::Object;
}

impl SlotPool {
    /// A pool of `publisher`'s slots, which tells `lender` when upstream
    /// takes it; its failures are posted as errors of `sink`, since
    /// upstream only sees a flow error.
    pub(super) fn new(
        publisher: Arc<SinkPublisher>,
        lender: Option<Arc<SinkLender>>,
        sink: &gst::Element,
    ) -> Self {
        let pool: Self = glib::Object::new();
        use glib::object::ObjectExt;
        use gst::subclass::prelude::ObjectSubclassIsExt;
        *pool.imp().publisher.lock().unwrap() = Some(publisher);
        *pool.imp().lender.lock().unwrap() = lender;
        *pool.imp().sink.lock().unwrap() = sink.downgrade();
        pool
    }
}

mod imp {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use gst::glib;
    use gst::subclass::prelude::*;

    use super::super::state::{CAT, SinkLender, SinkPublisher, report_slots};
    use crate::memory::CudaAllocator;
    use cudaipc_transport::{HostRegion, ReserveError, SlotMemory};

    /// A lent host slot as writable buffer memory, `len` bytes of it; the
    /// region keeps the slot's mapping.
    struct HostSlot {
        region: HostRegion,
        len: usize,
    }

    impl AsRef<[u8]> for HostSlot {
        fn as_ref(&self) -> &[u8] {
            &self.region.as_slice()[..self.len]
        }
    }

    impl AsMut<[u8]> for HostSlot {
        fn as_mut(&mut self) -> &mut [u8] {
            // SAFETY: the lent slot is ours alone until it is published,
            // and `&mut self` makes this the only view of it in this process.
            let bytes = unsafe { self.region.as_mut_slice() };
            &mut bytes.expect("a producer's slot is writable")[..self.len]
        }
    }

    /// Lock order: `publisher`, `lender`, `sink` and `info` are leaves (each
    /// is cloned out and released before anything waits).
    #[derive(Default)]
    pub struct SlotPool {
        pub(super) publisher: Mutex<Option<Arc<SinkPublisher>>>,
        /// The publisher's lending: upstream taking this pool rules it out.
        pub(super) lender: Mutex<Option<Arc<SinkLender>>>,
        /// Weak: the sink owns the publisher, upstream owns this pool.
        pub(super) sink: Mutex<glib::WeakRef<gst::Element>>,
        info: Mutex<Option<gst_video::VideoInfo>>,
        /// This pool's own flushing state: upstream flushes or drops a pool
        /// without touching the sink, which may go on with another pool.
        flushing: AtomicBool,
    }
    #[glib::object_subclass]
    impl ObjectSubclass for SlotPool {
        const NAME: &'static str = crate::memory::SLOT_POOL_TYPE_NAME;
        type Type = super::SlotPool;
        type ParentType = gst::BufferPool;
    }

    impl ObjectImpl for SlotPool {}
    impl GstObjectImpl for SlotPool {}

    impl SlotPool {
        /// Posts `what` as the sink's error: upstream, which gets only the
        /// flow error, would post a bare "Internal data stream error".
        fn post_error(&self, what: &str) -> gst::FlowError {
            gst::error!(CAT, imp = self, "{what}");
            if let Some(sink) = self.sink.lock().unwrap().upgrade() {
                gst::element_error!(sink, gst::ResourceError::Write, ("{}", what));
            }
            gst::FlowError::Error
        }
    }

    impl BufferPoolImpl for SlotPool {
        fn options() -> &'static [&'static str] {
            static OPTIONS: [&str; 1] = ["GstBufferPoolOptionVideoMeta"];
            &OPTIONS
        }

        fn set_config(&self, config: &mut gst::BufferPoolConfigRef) -> bool {
            let Some((Some(caps), _size, _min, _max)) = config.params() else {
                return false;
            };
            let Ok(info) = gst_video::VideoInfo::from_caps(&caps) else {
                return false;
            };
            *self.info.lock().unwrap() = Some(info);
            self.parent_set_config(config)
        }

        fn start(&self) -> bool {
            // Buffers are made per acquisition; nothing to preallocate. But
            // upstream took this pool, not the lendable one proposed beside
            // it: nothing will be lent, so the ring may be as deep as a ring
            // goes (`slots=0`), before the first slot is handed out.
            let lender = self.lender.lock().unwrap().clone();
            let publisher = self.publisher.lock().unwrap().clone();
            let info = self.info.lock().unwrap().clone();
            let sink = self.sink.lock().unwrap().upgrade();
            if let (Some(lender), Some(publisher), Some(info), Some(sink)) =
                (lender, publisher, info, sink)
                && lender.writes_in_place()
                && let Err(e) = report_slots(&sink, publisher.configure(info.size()))
            {
                e.log_with_object(&sink);
                return false;
            }
            true
        }

        fn stop(&self) -> bool {
            true
        }

        fn alloc_buffer(
            &self,
            _params: Option<&gst::BufferPoolAcquireParams>,
        ) -> Result<gst::Buffer, gst::FlowError> {
            Err(gst::FlowError::NotSupported)
        }

        fn acquire_buffer(
            &self,
            _params: Option<&gst::BufferPoolAcquireParams>,
        ) -> Result<gst::Buffer, gst::FlowError> {
            let publisher = self
                .publisher
                .lock()
                .unwrap()
                .clone()
                .ok_or(gst::FlowError::Flushing)?;
            let info = self
                .info
                .lock()
                .unwrap()
                .clone()
                .ok_or(gst::FlowError::NotNegotiated)?;
            if publisher.status().closed {
                return Err(gst::FlowError::Flushing);
            }
            if publisher.status().lent {
                // The slots are buffers of the GstCudaBufferPool proposed
                // with this one; upstream may use only one of the two.
                gst::warning!(CAT, imp = self, "the slots are lent by the other pool");
                return Err(gst::FlowError::NotNegotiated);
            }
            // Dropped on an error below: the slot goes back.
            let loan = publisher
                .loan(info.size(), &self.flushing)
                .map_err(|e| match e {
                    ReserveError::Flushing => gst::FlowError::Flushing,
                    ReserveError::TooSmall => gst::FlowError::NotNegotiated,
                    ReserveError::Channel(e) => {
                        self.post_error(&format!("cannot reserve a slot for upstream: {e}"))
                    }
                    ReserveError::Transport(e) => self
                        .post_error(&format!("cannot prepare a slot for upstream to write: {e}")),
                })?;
            let slot = loan.slot();
            let memory = match loan.memory().clone() {
                SlotMemory::Device(slot) => {
                    let device = slot.device().clone();
                    // The slot size was checked against the caps above.
                    let Some(frame) = slot.sub(0, info.size()) else {
                        return Err(gst::FlowError::NotNegotiated);
                    };
                    CudaAllocator::for_device(&device).wrap(frame, None, false)
                }
                SlotMemory::Host(region) if region.is_writable() && region.len() >= info.size() => {
                    gst::Memory::from_mut_slice(HostSlot {
                        region,
                        len: info.size(),
                    })
                }
                SlotMemory::Host(_) => return Err(gst::FlowError::NotNegotiated),
            };
            // Render takes the loan from the memory.
            super::attach_loan(&memory, Box::new(loan));
            gst::trace!(CAT, imp = self, "slot {} lent to upstream", slot);
            let mut buffer = gst::Buffer::new();
            {
                let buffer = buffer.get_mut().unwrap();
                buffer.append_memory(memory);
                crate::video::add_meta(buffer, &info, &crate::video::planes(&info))
                    .map_err(|_| gst::FlowError::Error)?;
            }
            Ok(buffer)
        }

        fn release_buffer(&self, buffer: gst::Buffer) {
            // Not kept: the next acquisition wraps whichever slot is free.
            drop(buffer);
        }

        fn flush_start(&self) {
            self.flushing.store(true, Ordering::SeqCst);
            if let Some(publisher) = self.publisher.lock().unwrap().as_ref() {
                publisher.wake();
            }
        }

        fn flush_stop(&self) {
            self.flushing.store(false, Ordering::SeqCst);
        }
    }
}
