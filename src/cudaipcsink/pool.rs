// SPDX-License-Identifier: MPL-2.0

//! The buffer pool `cudaipcsink` proposes upstream: every buffer it hands
//! out wraps a free slot, so upstream writes the frame straight into shared
//! memory and the sink publishes it without a copy.

use std::sync::Arc;

use gst::glib;

use super::imp::Channel;

glib::wrapper! {
    pub struct SlotPool(ObjectSubclass<imp::SlotPool>) @extends gst::BufferPool, gst::Object;
}

impl SlotPool {
    pub(super) fn new(channel: Arc<Channel>) -> Self {
        let pool: Self = glib::Object::new();
        use gst::subclass::prelude::ObjectSubclassIsExt;
        *pool.imp().channel.lock().unwrap() = Some(channel);
        pool
    }
}

mod imp {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use gst::glib;
    use gst::subclass::prelude::*;

    use super::super::imp::{CAT, Channel, SlotSet};
    use crate::ipc::ChannelError;
    use crate::memory::CudaAllocator;
    use crate::transport::SlotMemory;

    /// Keeps a reservation while upstream holds the buffer; gives the slot
    /// back if the buffer dies unpublished.
    struct Reservation {
        channel: Arc<Channel>,
        // The slot memory must outlive the buffer that wraps it.
        _set: Arc<SlotSet>,
        slot: usize,
        token: u64,
    }

    impl Drop for Reservation {
        fn drop(&mut self) {
            self.channel.end_reservation(self.slot, self.token);
        }
    }

    /// A host slot as writable buffer memory.
    struct HostSlot {
        ptr: *mut u8,
        len: usize,
        _reservation: Reservation,
    }

    // SAFETY: the pointer is into a shared mapping kept alive by the
    // reservation's slot set; the reserved slot is ours alone until it is
    // published.
    unsafe impl Send for HostSlot {}

    impl AsRef<[u8]> for HostSlot {
        fn as_ref(&self) -> &[u8] {
            // SAFETY: see the Send impl; `len` is within the slot.
            unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
        }
    }

    impl AsMut<[u8]> for HostSlot {
        fn as_mut(&mut self) -> &mut [u8] {
            // SAFETY: see the Send impl; `len` is within the slot.
            unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
        }
    }

    #[derive(Default)]
    pub struct SlotPool {
        pub(super) channel: Mutex<Option<Arc<Channel>>>,
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
            let channel = self
                .channel
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
            if channel.producer.is_closed() {
                return Err(gst::FlowError::Flushing);
            }
            if channel.current_set().is_some_and(|set| set.lent.is_some()) {
                // The slots are buffers of the GstCudaBufferPool proposed
                // with this one; upstream may use only one of the two.
                gst::warning!(CAT, imp = self, "the slots are lent by the other pool");
                return Err(gst::FlowError::NotNegotiated);
            }
            let slot = match channel.producer.reserve(&self.flushing) {
                Ok(Some(slot)) => slot,
                Ok(None) | Err(ChannelError::Interrupted) => return Err(gst::FlowError::Flushing),
                Err(e) => {
                    gst::error!(CAT, imp = self, "cannot reserve a slot: {}", e);
                    return Err(gst::FlowError::Error);
                }
            };
            let Some(set) = channel.current_set() else {
                channel.producer.cancel(slot);
                return Err(gst::FlowError::Flushing);
            };
            if set.slots.slot_size() < info.size() {
                // The caps changed and the slots are not resized yet.
                channel.producer.cancel(slot);
                return Err(gst::FlowError::NotNegotiated);
            }
            if let Err(e) = set.slots.before_write(slot, &channel.producer) {
                channel.producer.cancel(slot);
                gst::error!(CAT, imp = self, "cannot order slot {}: {}", slot, e);
                return Err(gst::FlowError::Error);
            }
            let token = channel.begin_reservation(slot);
            let memory_kind = set.slots.slot_memory(slot);
            let reservation = Reservation {
                channel: channel.clone(),
                _set: set,
                slot,
                token,
            };
            let memory = match memory_kind {
                SlotMemory::Device(slot) => {
                    let device = slot.device().clone();
                    // The slot size was checked against the caps above.
                    let Some(frame) = slot.sub(0, info.size()) else {
                        return Err(gst::FlowError::NotNegotiated);
                    };
                    CudaAllocator::for_device(&device).wrap(frame, Box::new(reservation), false)
                }
                SlotMemory::Host { ptr, .. } => gst::Memory::from_mut_slice(HostSlot {
                    ptr,
                    len: info.size(),
                    _reservation: reservation,
                }),
            };
            channel.memory_addr[slot].store(memory.as_ptr() as usize, Ordering::SeqCst);
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
                gst_video::VideoMeta::add_full(
                    buffer,
                    gst_video::VideoFrameFlags::empty(),
                    info.format(),
                    info.width(),
                    info.height(),
                    info.offset(),
                    info.stride(),
                )
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
            if let Some(channel) = self.channel.lock().unwrap().as_ref() {
                channel.producer.wake();
            }
        }

        fn flush_stop(&self) {
            self.flushing.store(false, Ordering::SeqCst);
        }
    }
}
