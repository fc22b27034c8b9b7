// SPDX-License-Identifier: MPL-2.0

//! The buffer pool `cudaipcsink` proposes upstream: every buffer it hands
//! out wraps a free slot, so upstream writes the frame straight into shared
//! memory and the sink publishes it without a copy.

use std::sync::Arc;

use gst::glib;

use super::SinkPublisher;

glib::wrapper! {
    pub struct SlotPool(ObjectSubclass<imp::SlotPool>) @extends gst::BufferPool, gst::Object;
}

impl SlotPool {
    /// A pool of `publisher`'s slots; its failures are posted as errors of
    /// `sink`, since upstream only sees a flow error.
    pub(super) fn new(publisher: Arc<SinkPublisher>, sink: &gst::Element) -> Self {
        let pool: Self = glib::Object::new();
        use glib::object::ObjectExt;
        use gst::subclass::prelude::ObjectSubclassIsExt;
        *pool.imp().publisher.lock().unwrap() = Some(publisher);
        *pool.imp().sink.lock().unwrap() = sink.downgrade();
        pool
    }
}

mod imp {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use gst::glib;
    use gst::subclass::prelude::*;

    use super::super::{CAT, SinkPublisher};
    use crate::memory::CudaAllocator;
    use cudaipc_transport::{HostRegion, ReserveError, SlotMemory, WriterReservation};

    /// A reserved host slot as writable buffer memory, `len` bytes of it.
    struct HostSlot {
        region: HostRegion,
        len: usize,
        _reservation: WriterReservation<gst::Buffer>,
    }

    impl AsRef<[u8]> for HostSlot {
        fn as_ref(&self) -> &[u8] {
            &self.region.as_slice()[..self.len]
        }
    }

    impl AsMut<[u8]> for HostSlot {
        fn as_mut(&mut self) -> &mut [u8] {
            // SAFETY: the reserved slot is ours alone until it is published,
            // and `&mut self` makes this the only view of it in this process.
            let bytes = unsafe { self.region.as_mut_slice() };
            &mut bytes.expect("a producer's slot is writable")[..self.len]
        }
    }

    /// Lock order: `publisher`, `sink` and `info` are leaves (each is cloned out
    /// and released before anything waits).
    #[derive(Default)]
    pub struct SlotPool {
        pub(super) publisher: Mutex<Option<Arc<SinkPublisher>>>,
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
            // Buffers are made per acquisition; nothing to preallocate.
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
            if publisher.is_closed() {
                return Err(gst::FlowError::Flushing);
            }
            if publisher.is_lent() {
                // The slots are buffers of the GstCudaBufferPool proposed
                // with this one; upstream may use only one of the two.
                gst::warning!(CAT, imp = self, "the slots are lent by the other pool");
                return Err(gst::FlowError::NotNegotiated);
            }
            let reservation = publisher
                .reserve_for_writer(info.size(), &self.flushing)
                .map_err(|e| match e {
                    ReserveError::Flushing => gst::FlowError::Flushing,
                    ReserveError::TooSmall => gst::FlowError::NotNegotiated,
                    ReserveError::Channel(e) => {
                        self.post_error(&format!("cannot reserve a slot for upstream: {e}"))
                    }
                    ReserveError::Transport(e) => self
                        .post_error(&format!("cannot prepare a slot for upstream to write: {e}")),
                })?;
            let (slot, token) = (reservation.slot(), reservation.token());
            let memory = match reservation.memory().clone() {
                SlotMemory::Device(slot) => {
                    let device = slot.device().clone();
                    // The slot size was checked against the caps above.
                    let Some(frame) = slot.sub(0, info.size()) else {
                        return Err(gst::FlowError::NotNegotiated);
                    };
                    CudaAllocator::for_device(&device).wrap(frame, Box::new(reservation), false)
                }
                SlotMemory::Host(region) if region.is_writable() && region.len() >= info.size() => {
                    gst::Memory::from_mut_slice(HostSlot {
                        region,
                        len: info.size(),
                        _reservation: reservation,
                    })
                }
                SlotMemory::Host(_) => return Err(gst::FlowError::NotNegotiated),
            };
            // Render recognises the frame by its memory.
            publisher.register_reservation(slot, memory.as_ptr() as usize);
            gst::trace!(
                CAT,
                imp = self,
                "slot {} reserved for upstream (token {})",
                slot,
                token
            );
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
