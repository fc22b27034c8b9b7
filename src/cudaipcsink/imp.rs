// SPDX-License-Identifier: MPL-2.0

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::subclass::prelude::*;

use super::pool::SlotPool;
use crate::cuda::{self, AllocationKey, Device};
use crate::enums::{Sync, Transport, Wait, WhenFullMode};
use crate::gstcuda;
use crate::ipc::layout::{GPU_SYNC_EVENT, GPU_SYNC_HOST, MAX_SLOTS};
use crate::ipc::{ChannelError, FrameMeta, Producer, ProducerConfig, WhenFull};
use crate::memory::{self, CudaAllocator};
use crate::transport::{
    self, CudaProducerSlots, GpuSync, LentSlots, ProducerSlots, SlotMemory, SlotRequest,
    TransportKind,
};
use crate::video;

pub(super) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "cudaipcsink",
        gst::DebugColorFlags::empty(),
        Some("CUDA IPC sink"),
    )
});

const DEFAULT_CHANNEL: &str = "default";
/// 0: chosen by the transport (see `auto_slots`).
const DEFAULT_SLOTS: u32 = 0;
const DEFAULT_DEVICE_ID: i32 = 0;
const DEFAULT_PERMISSIONS: u32 = 0o600;
/// How long `stop` lets consumers finish reading before slots are freed.
const RELEASE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, Clone)]
struct Settings {
    channel: String,
    slots: u32,
    transport: Transport,
    device_id: i32,
    when_full: WhenFullMode,
    wait_mode: Wait,
    gpu_sync: Sync,
    permissions: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            channel: DEFAULT_CHANNEL.into(),
            slots: DEFAULT_SLOTS,
            transport: Transport::default(),
            device_id: DEFAULT_DEVICE_ID,
            when_full: WhenFullMode::default(),
            wait_mode: Wait::default(),
            gpu_sync: Sync::default(),
            permissions: DEFAULT_PERMISSIONS,
        }
    }
}

/// One generation of slots.
pub(super) struct SlotSet {
    pub slots: Box<dyn ProducerSlots>,
    /// Set when the slots are buffers of upstream's `GstCudaBufferPool`.
    pub lent: Option<LentSlots<AllocationKey, gst::Buffer>>,
}

/// The `GstCudaBufferPool` proposed upstream, and the buffers of it that
/// went through so far: once all of them did, they become the slots.
#[derive(Default)]
struct Lending {
    pool: Option<gst::BufferPool>,
    seen: Vec<PoolFrame>,
}

/// A frame in a buffer of the proposed `GstCudaBufferPool`, whose memory
/// CUDA IPC can export.
#[derive(Debug, Clone)]
struct PoolFrame {
    key: AllocationKey,
    ptr: u64,
    size: usize,
    planes: Vec<(u64, u32)>,
}

/// The open channel, shared with the slot pool (which upstream may keep
/// after the sink stopped).
pub(super) struct Channel {
    pub producer: Producer,
    pub kind: TransportKind,
    pub device: Option<Arc<Device>>,
    /// Set while the sink is unlocked (flushing or stopping).
    pub interrupt: AtomicBool,
    pub current: Mutex<Option<Arc<SlotSet>>>,
    /// Replaced slot sets that consumers still read, with the consumers
    /// (bits per slot record) that held them at the switch.
    retired: Mutex<Vec<(Arc<SlotSet>, [u64; MAX_SLOTS])>>,
    /// Per slot: token of the pool buffer that reserved it (0: none) and
    /// the address of that buffer's GstMemory, to recognise it in render.
    pub tokens: [AtomicU64; MAX_SLOTS],
    pub memory_addr: [AtomicUsize; MAX_SLOTS],
    next_token: AtomicU64,
    lending: Mutex<Lending>,
    pub zero_copy: AtomicU64,
    pub copied: AtomicU64,
}

impl Channel {
    pub fn current_set(&self) -> Option<Arc<SlotSet>> {
        self.current.lock().unwrap().clone()
    }

    /// Frees the retired slot sets that no consumer reads any more. A bit
    /// once seen clear stays clear: a consumer that released a frame of a
    /// retired set cannot take another one from it.
    fn reap_retired(&self) {
        let mut retired = self.retired.lock().unwrap();
        if retired.is_empty() {
            return;
        }
        let held = self.producer.held_slots();
        retired.retain_mut(|(_, readers)| {
            for (r, h) in readers.iter_mut().zip(held) {
                *r &= h;
            }
            readers.iter().any(|&r| r != 0)
        });
    }

    /// Records that a pool buffer reserved `slot`; returns its token.
    pub fn begin_reservation(&self, slot: usize) -> u64 {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed) + 1;
        self.tokens[slot].store(token, Ordering::SeqCst);
        token
    }

    /// Cancels a pool buffer's reservation unless it was published.
    pub fn end_reservation(&self, slot: usize, token: u64) {
        if self.tokens[slot]
            .compare_exchange(token, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            gst::trace!(CAT, "slot {} returned unpublished (token {})", slot, token);
            self.memory_addr[slot].store(0, Ordering::SeqCst);
            self.producer.cancel(slot);
        }
    }

    /// The slot `buffer` was acquired for from the slot pool, if it still
    /// holds that reservation; the reservation then passes to the caller.
    fn take_pool_reservation(&self, buffer: &gst::BufferRef) -> Option<usize> {
        if buffer.n_memory() != 1 {
            return None;
        }
        // Memory addresses are reused once freed, so only live reservations
        // (non-zero token) count.
        let addr = buffer.peek_memory(0).as_ptr() as usize;
        let slot = (0..MAX_SLOTS).find(|&s| {
            self.memory_addr[s].load(Ordering::SeqCst) == addr
                && self.tokens[s].load(Ordering::SeqCst) != 0
        })?;
        if self.tokens[slot].swap(0, Ordering::SeqCst) == 0 {
            return None;
        }
        self.memory_addr[slot].store(0, Ordering::SeqCst);
        Some(slot)
    }
}

struct State {
    channel: Arc<Channel>,
    info: Option<gst_video::VideoInfo>,
}

#[derive(Default)]
pub struct CudaIpcSink {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    ticker: crate::periodic::StatsTicker,
    /// Shared with GStreamer's CUDA elements (`gst.cuda.context`).
    cuda_context: gstcuda::ContextShare,
}

impl CudaIpcSink {
    fn snapshot(&self) -> Result<(Arc<Channel>, gst_video::VideoInfo), gst::FlowError> {
        let state = self.state.lock().unwrap();
        let Some(state) = state.as_ref() else {
            return Err(gst::FlowError::Flushing);
        };
        let Some(info) = state.info.clone() else {
            gst::element_imp_error!(
                self,
                gst::CoreError::Negotiation,
                ("received a buffer before caps")
            );
            return Err(gst::FlowError::NotNegotiated);
        };
        Ok((state.channel.clone(), info))
    }

    fn channel_error(&self, e: ChannelError) -> gst::FlowError {
        match e {
            ChannelError::Interrupted => gst::FlowError::Flushing,
            e => {
                gst::element_imp_error!(self, gst::ResourceError::Write, ("{}", e));
                gst::FlowError::Error
            }
        }
    }

    fn transport_error(&self, e: transport::TransportError) -> gst::FlowError {
        gst::element_imp_error!(self, gst::ResourceError::Write, ("{}", e));
        gst::FlowError::Error
    }

    fn frame_meta(buffer: &gst::BufferRef, info: &gst_video::VideoInfo) -> FrameMeta {
        FrameMeta {
            size: info.size() as u64,
            pts: buffer.pts().map(|t| t.nseconds()),
            dts: buffer.dts().map(|t| t.nseconds()),
            duration: buffer.duration().map(|t| t.nseconds()),
            offset: buffer.offset(),
            offset_end: buffer.offset_end(),
            flags: buffer.flags().bits(),
            planes: video::planes(info),
        }
    }

    /// Allocates a slot set big enough for `info` if the current one is not
    /// (or is lent).
    fn ensure_slots(
        &self,
        channel: &Channel,
        info: &gst_video::VideoInfo,
    ) -> Result<(), gst::LoggableError> {
        if let Some(current) = channel.current_set()
            && current.slots.slot_size() >= info.size()
            && current.lent.is_none()
        {
            return Ok(());
        }
        self.allocate_slots(channel, info)
    }

    /// Allocates and publishes a new set of slots of our own for `info`.
    fn allocate_slots(
        &self,
        channel: &Channel,
        info: &gst_video::VideoInfo,
    ) -> Result<(), gst::LoggableError> {
        let settings = self.settings.lock().unwrap().clone();
        let size = info.size();
        let count = match settings.slots {
            0 => auto_slots(channel.kind, channel.device.as_deref()),
            n => n as usize,
        };
        let request = SlotRequest {
            channel: settings.channel.clone(),
            session: channel.producer.session(),
            generation: channel.producer.pool_generation() + 1,
            count,
            size,
            permissions: settings.permissions,
            gpu_sync: settings.gpu_sync.into(),
        };
        let slots =
            transport::create_producer_slots(channel.kind, &request, channel.device.as_ref())
                .map_err(|e| {
                    gst::element_imp_error!(
                        self,
                        gst::ResourceError::NoSpaceLeft,
                        (
                            "cannot allocate {} slots of {} bytes: {}",
                            request.count,
                            size,
                            e
                        )
                    );
                    gst::loggable_error!(CAT, "slot allocation failed")
                })?;
        self.install_slots(channel, slots, None)
            .map_err(|e| gst::loggable_error!(CAT, "cannot publish the slot pool: {}", e))?;
        gst::info!(
            CAT,
            imp = self,
            "{} {:?} slots of {} bytes on channel '{}'",
            request.count,
            channel.kind,
            size,
            settings.channel
        );
        Ok(())
    }

    /// Publishes `slots` as the channel's new slot pool (lent ones with the
    /// key of each slot's memory) and makes it the current set.
    fn install_slots(
        &self,
        channel: &Channel,
        slots: Box<dyn ProducerSlots>,
        lent_keys: Option<(usize, Vec<AllocationKey>)>,
    ) -> Result<(), String> {
        if let Some(old) = channel.current_set()
            && let Some(lent) = &old.lent
        {
            // The new pool waits for no reserved slot.
            lent.cancel_reservations(&channel.producer);
        }
        // Waits until consumers are done with the old slots.
        channel
            .producer
            .configure_pool(
                slots.slot_size() as u64,
                &slots.slot_descriptors(),
                &slots.pool_descriptor(),
                &channel.interrupt,
            )
            .map_err(|e| e.to_string())?;
        let lent = lent_keys
            .map(|(placeholders, keys)| LentSlots::new(placeholders, keys, &channel.producer))
            .transpose()
            .map_err(|e| e.to_string())?;
        // Consumers holding frames of the old set keep it alive.
        let readers = channel.producer.held_slots();
        let old = channel
            .current
            .lock()
            .unwrap()
            .replace(Arc::new(SlotSet { slots, lent }));
        if let Some(old) = old
            && readers.iter().any(|&r| r != 0)
        {
            channel.retired.lock().unwrap().push((old, readers));
        }
        Ok(())
    }

    /// The frame in `buffer` if it is a buffer of the `GstCudaBufferPool`
    /// proposed upstream.
    fn pool_frame(
        channel: &Channel,
        buffer: &gst::BufferRef,
        info: &gst_video::VideoInfo,
    ) -> Option<PoolFrame> {
        let device = channel.device.as_ref()?;
        let pool = channel.lending.lock().unwrap().pool.clone()?;
        // SAFETY: `pool` is a public field of GstBuffer, set when the buffer
        // was acquired from a pool; we hold a reference to the buffer.
        let buffer_pool = unsafe { (*buffer.as_ptr()).pool };
        if buffer_pool != pool.as_ptr() {
            gst::trace!(CAT, "buffer not of {}: copied", pool.name());
            return None;
        }
        let mapped = gstcuda::MappedCudaMemory::of_buffer(buffer, false)?;
        let (key, allocated) = cuda::exportable_allocation(device, mapped.ptr).ok()??;
        let planes = video::meta_planes(buffer).unwrap_or_else(|| mapped.planes.clone());
        let size = mapped.size.min(allocated);
        video::layout_fits(info, &planes, size as u64).ok()?;
        Some(PoolFrame {
            key,
            ptr: mapped.ptr,
            size,
            planes,
        })
    }

    /// Publishes a frame upstream wrote into lent `slot`, then gives back
    /// the buffers consumers are done with.
    fn publish_lent(
        &self,
        channel: &Channel,
        set: &SlotSet,
        slot: usize,
        buffer: &gst::Buffer,
        frame: &PoolFrame,
        info: &gst_video::VideoInfo,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        let Some(lent) = &set.lent else {
            return Err(gst::FlowError::Error);
        };
        let mut meta = Self::frame_meta(buffer, info);
        meta.size = frame.size as u64;
        meta.planes = frame.planes.clone();
        lent.publish(slot, buffer.clone(), &meta, &*set.slots, &channel.producer)
            .map_err(|e| self.transport_error(e))?;
        channel.zero_copy.fetch_add(1, Ordering::Relaxed);
        gst::trace!(CAT, imp = self, "published lent slot {}", slot);
        let released = lent
            .take_released(&*set.slots, &channel.producer, &channel.interrupt)
            .map_err(|e| match e {
                transport::TransportError::Channel(e) => self.channel_error(e),
                e => self.transport_error(e),
            })?;
        // Dropping them gives them back to upstream's pool.
        drop(released);
        Ok(gst::FlowSuccess::Ok)
    }

    /// Notes a copied frame of the proposed pool; once every buffer of the
    /// pool went through, they become the slots (zero copy from then on).
    fn discover_pool_buffer(
        &self,
        channel: &Channel,
        frame: PoolFrame,
        info: &gst_video::VideoInfo,
    ) {
        let mut lending = channel.lending.lock().unwrap();
        let Some(pool) = lending.pool.clone() else {
            return;
        };
        if !lending.seen.iter().any(|f| f.key == frame.key) {
            lending.seen.push(frame);
            gst::debug!(
                CAT,
                imp = self,
                "{} buffers of {} seen",
                lending.seen.len(),
                pool.name()
            );
        }
        // A pool of a fixed number of buffers, all allocated at activation,
        // hands each of them out in turn.
        let Some((_, _, min, max)) = pool.config().params() else {
            return;
        };
        let count = max as usize;
        if min != max || !(1..=MAX_SLOTS).contains(&count) || lending.seen.len() < count {
            return;
        }
        let seen = std::mem::take(&mut lending.seen);
        drop(lending);
        if seen.len() > count {
            // More buffers than the pool holds: it was reallocated since.
            // Learn it again.
            return;
        }
        let Some(device) = channel.device.as_ref() else {
            return;
        };
        // The records of the current pool, which consumers may still hold,
        // become placeholders.
        let placeholders = channel.producer.slot_count();
        if placeholders + count > MAX_SLOTS {
            return;
        }
        let size = seen.iter().map(|f| f.size).min().unwrap_or(0);
        let ptrs = seen.iter().map(|f| f.ptr).collect();
        let keys = seen.iter().map(|f| f.key).collect();
        let sync = self.settings.lock().unwrap().gpu_sync.into();
        // SAFETY: each pointer starts an allocation of at least `size` bytes
        // of a buffer of the proposed pool (`pool_frame` checked), which
        // keeps its buffers allocated while the lent set, holding published
        // ones, is in use.
        let installed = unsafe { CudaProducerSlots::lend(device, placeholders, ptrs, size, sync) }
            .map_err(|e| e.to_string())
            .and_then(|slots| {
                self.install_slots(channel, Box::new(slots), Some((placeholders, keys)))
            });
        match installed {
            Ok(()) => gst::info!(
                CAT,
                imp = self,
                "zero copy from now: the {} buffers of {} are the slots",
                count,
                pool.name()
            ),
            Err(e) => {
                gst::warning!(
                    CAT,
                    imp = self,
                    "cannot share the buffers of {}, copying: {}",
                    pool.name(),
                    e
                );
                // The channel may already describe the lent buffers.
                if let Err(e) = self.allocate_slots(channel, info) {
                    e.log_with_imp(self);
                }
            }
        }
    }

    /// A `GstCudaBufferPool` of our context with as many buffers as slots,
    /// for GStreamer's CUDA elements upstream to write into.
    fn lendable_pool(
        &self,
        channel: &Channel,
        caps: &gst::Caps,
        info: &gst_video::VideoInfo,
    ) -> Option<gst::BufferPool> {
        let device = channel.device.as_ref()?;
        // CUDAIPC_LEND=0: copy instead (to compare, or to rule lending out).
        if !gstcuda::available() || std::env::var_os("CUDAIPC_LEND").is_some_and(|v| v == "0") {
            return None;
        }
        let context = self
            .cuda_context
            .get()
            .filter(|c| c.is_primary_of(device))?;
        let pool = context.new_buffer_pool()?;
        let count = channel.producer.slot_count() as u32;
        if !video::configure_pool(&pool, caps, info.size() as u32, count, count) {
            gst::debug!(CAT, imp = self, "{} refused {}", pool.name(), caps);
            return None;
        }
        Some(pool)
    }

    /// The device whose context to share with GStreamer's CUDA elements:
    /// ours, when that library is there and we use the cuda transport.
    fn cuda_context_device(&self) -> Option<Arc<Device>> {
        if !gstcuda::available() {
            return None;
        }
        let settings = self.settings.lock().unwrap().clone();
        if TransportKind::resolve(settings.transport.into()) != TransportKind::Cuda {
            return None;
        }
        Device::get(settings.device_id).ok()
    }

    /// Copies (or uploads, or downloads) `buffer` into a free slot.
    fn copy_into_slot(
        &self,
        buffer: &gst::Buffer,
        info: &gst_video::VideoInfo,
        memory: &SlotMemory,
    ) -> Result<(), String> {
        let dst_planes = video::planes(info);
        // GstCudaMemory of GStreamer's CUDA elements, mapped on the device
        // when our slots are on one too.
        let gst_cuda = match memory {
            SlotMemory::Device { .. } => gstcuda::MappedCudaMemory::of_buffer(buffer, false),
            SlotMemory::Host { .. } => None,
        };
        let src_planes = video::meta_planes(buffer)
            .or_else(|| gst_cuda.as_ref().map(|mapped| mapped.planes.clone()))
            .unwrap_or_else(|| dst_planes.clone());
        video::layout_fits(info, &src_planes, buffer.size() as u64)?;
        if let (SlotMemory::Device(slot), Some(src)) = (memory, &gst_cuda) {
            let stream = slot.device().stream();
            // SAFETY: the slot holds a frame of `info` in `dst_planes`; the
            // mapped input holds `src_planes`, checked by `layout_fits`.
            unsafe {
                video::copy_planes_device(
                    &stream,
                    slot.ptr(),
                    &dst_planes,
                    src.ptr,
                    &src_planes,
                    info,
                )
            }
            .map_err(|e| e.to_string())?;
            // Upstream rewrites its memory on its own stream once we return
            // the buffer: the copy must be done by then.
            return stream.synchronize().map_err(|e| e.to_string());
        }
        let source_device = memory::buffer_device_memory(buffer);
        match (memory, source_device) {
            (SlotMemory::Device(slot), Some(src)) => {
                // SAFETY: as above; the input is a single CudaIpcMemory of
                // `src.size` bytes, checked by `layout_fits`.
                unsafe {
                    video::copy_planes_device(
                        &slot.device().stream(),
                        slot.ptr(),
                        &dst_planes,
                        src.ptr,
                        &src_planes,
                        info,
                    )
                }
                .map_err(|e| e.to_string())?;
            }
            (SlotMemory::Device(slot), None) => {
                let map = buffer
                    .map_readable()
                    .map_err(|_| "cannot map the input buffer".to_string())?;
                let staging = relayout(&map, info, &src_planes, &dst_planes);
                slot.upload(staging.as_deref().unwrap_or(&map[..info.size()]))
                    .map_err(|e| e.to_string())?;
            }
            (SlotMemory::Host { ptr, len }, source) => {
                // SAFETY: the slot is reserved by us, `len` bytes long, and no
                // consumer reads it until it is published.
                let dst = unsafe { std::slice::from_raw_parts_mut(*ptr, *len) };
                match source {
                    Some(_) => {
                        // CUDA memory into a host slot: download whole, then
                        // lay out.
                        let mut whole = vec![0u8; buffer.size()];
                        memory::buffer_device_region(buffer)
                            .ok_or("the input CUDA memory went away")?
                            .download(&mut whole)
                            .map_err(|e| e.to_string())?;
                        video::copy_planes(&whole, dst, info, &src_planes, &dst_planes);
                    }
                    None => {
                        let map = buffer
                            .map_readable()
                            .map_err(|_| "cannot map the input buffer".to_string())?;
                        video::copy_planes(&map, dst, info, &src_planes, &dst_planes);
                    }
                }
            }
        }
        Ok(())
    }

    /// Publishes one frame: without a copy when upstream wrote it into a
    /// slot of our pool, else copied into a free slot.
    fn render_frame(&self, buffer: &gst::Buffer) -> Result<gst::FlowSuccess, gst::FlowError> {
        let (channel, info) = self.snapshot()?;
        channel.reap_retired();
        let pool_frame = Self::pool_frame(&channel, buffer, &info);
        let mut set = channel.current_set().ok_or(gst::FlowError::Flushing)?;
        if let Some(lent) = &set.lent {
            let slot = pool_frame
                .as_ref()
                .and_then(|frame| lent.slot_of(&frame.key))
                .filter(|&slot| channel.producer.is_reserved(slot));
            if let (Some(slot), Some(frame)) = (slot, &pool_frame) {
                return self.publish_lent(&channel, &set, slot, buffer, frame, &info);
            }
            // Upstream writes elsewhere now: slots of our own again.
            gst::info!(
                CAT,
                imp = self,
                "frame outside the lent slots; copying again"
            );
            self.ensure_slots(&channel, &info).map_err(|e| {
                e.log_with_imp(self);
                if channel.interrupt.load(Ordering::SeqCst) {
                    gst::FlowError::Flushing
                } else {
                    gst::FlowError::Error
                }
            })?;
            set = channel.current_set().ok_or(gst::FlowError::Flushing)?;
        }
        let meta = Self::frame_meta(buffer, &info);
        if let Some(slot) = channel.take_pool_reservation(buffer) {
            // Upstream wrote into the slot itself.
            if let Err(e) = set.slots.after_write(slot) {
                channel.producer.cancel(slot);
                return Err(self.transport_error(e));
            }
            channel
                .producer
                .publish(slot, &meta)
                .map_err(|e| self.channel_error(e))?;
            channel.zero_copy.fetch_add(1, Ordering::Relaxed);
            gst::trace!(CAT, imp = self, "published slot {} without a copy", slot);
            return Ok(gst::FlowSuccess::Ok);
        }
        let Some(slot) = channel
            .producer
            .reserve(&channel.interrupt)
            .map_err(|e| self.channel_error(e))?
        else {
            gst::trace!(
                CAT,
                imp = self,
                "all slots busy: dropped {:?}",
                buffer.pts()
            );
            return Ok(gst::FlowSuccess::Ok);
        };
        let copied = set
            .slots
            .before_write(slot, &channel.producer)
            .map_err(|e| e.to_string())
            .and_then(|()| self.copy_into_slot(buffer, &info, &set.slots.slot_memory(slot)))
            .and_then(|()| set.slots.after_write(slot).map_err(|e| e.to_string()));
        if let Err(e) = copied {
            channel.producer.cancel(slot);
            gst::element_imp_error!(
                self,
                gst::ResourceError::Write,
                ("cannot copy the frame into slot {}: {}", slot, e)
            );
            return Err(gst::FlowError::Error);
        }
        channel
            .producer
            .publish(slot, &meta)
            .map_err(|e| self.channel_error(e))?;
        channel.copied.fetch_add(1, Ordering::Relaxed);
        gst::trace!(CAT, imp = self, "copied into slot {} and published", slot);
        if let Some(frame) = pool_frame {
            self.discover_pool_buffer(&channel, frame, &info);
        }
        Ok(gst::FlowSuccess::Ok)
    }

    fn stats(&self) -> gst::Structure {
        let state = self.state.lock().unwrap();
        let mut s = gst::Structure::builder("cudaipcsink-stats");
        if let Some(state) = state.as_ref() {
            let c = &state.channel;
            let p = c.producer.stats();
            s = s
                .field("frames", p.frames)
                .field("dropped", p.dropped)
                .field("overwritten", p.overwritten)
                .field("waits", p.waits)
                .field("zero-copy", c.zero_copy.load(Ordering::Relaxed))
                .field("copied", c.copied.load(Ordering::Relaxed))
                .field("slots", c.producer.slot_count() as u32)
                .field("consumers", p.consumers)
                .field("reclaimed-consumers", p.reclaimed_consumers)
                .field(
                    "transport",
                    match c.kind {
                        TransportKind::Cuda => "cuda",
                        TransportKind::Host => "host",
                    },
                );
        } else {
            s = s
                .field("frames", 0u64)
                .field("dropped", 0u64)
                .field("overwritten", 0u64)
                .field("waits", 0u64)
                .field("zero-copy", 0u64)
                .field("copied", 0u64)
                .field("slots", 0u32)
                .field("consumers", 0u32)
                .field("reclaimed-consumers", 0u64)
                .field("transport", "none");
        }
        s.build()
    }
}

/// The ring depth `slots=0` stands for. Without MPS the two processes'
/// contexts take turns on the GPU, and a deep ring keeps each turn busy;
/// with MPS their kernels run side by side, and a shallow ring keeps the
/// frame in flight inside the L2 cache (and the latency low). Figures in
/// docs/performance.md.
fn auto_slots(kind: TransportKind, device: Option<&Device>) -> usize {
    match (kind, device) {
        (TransportKind::Cuda, Some(device)) if device.mps_enabled() => 2,
        (TransportKind::Cuda, _) => 8,
        (TransportKind::Host, _) => 4,
    }
}

/// The frame in the default layout when `src_planes` differ from it.
fn relayout(
    src: &[u8],
    info: &gst_video::VideoInfo,
    src_planes: &[(u64, u32)],
    dst_planes: &[(u64, u32)],
) -> Option<Vec<u8>> {
    if src_planes == dst_planes {
        return None;
    }
    let mut out = vec![0u8; info.size()];
    video::copy_planes(src, &mut out, info, src_planes, dst_planes);
    Some(out)
}

#[glib::object_subclass]
impl ObjectSubclass for CudaIpcSink {
    const NAME: &'static str = "GstRsCudaIpcSink";
    type Type = super::CudaIpcSink;
    type ParentType = gst_base::BaseSink;
}

impl ObjectImpl for CudaIpcSink {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPERTIES: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            vec![
                glib::ParamSpecString::builder("channel")
                    .nick("Channel")
                    .blurb("Name of the channel (a control block in /dev/shm is named after it)")
                    .default_value(Some(DEFAULT_CHANNEL))
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("slots")
                    .nick("Slots")
                    .blurb("Frames in the ring of shared buffers (0: automatic, 2 with NVIDIA MPS, 8 without, 4 on host memory)")
                    .minimum(0)
                    .maximum(MAX_SLOTS as u32)
                    .default_value(DEFAULT_SLOTS)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("transport", Transport::default())
                    .nick("Transport")
                    .blurb("Where the slots live")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecInt::builder("cuda-device-id")
                    .nick("CUDA device")
                    .blurb("CUDA device ordinal of the slots")
                    .minimum(0)
                    .default_value(DEFAULT_DEVICE_ID)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("when-full", WhenFullMode::default())
                    .nick("When full")
                    .blurb("What to do with a frame when every slot is in use")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("wait-mode", Wait::default())
                    .nick("Wait mode")
                    .blurb("How to wait for a free slot")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("gpu-sync", Sync::default())
                    .nick("GPU sync")
                    .blurb("How GPU work is ordered between the processes")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("permissions")
                    .nick("Permissions")
                    .blurb("File mode of the channel's shared files (e.g. 0o660 = 432 to share with the group)")
                    .maximum(0o777)
                    .default_value(DEFAULT_PERMISSIONS)
                    .mutable_ready()
                    .build(),
                crate::periodic::interval_property(),
                glib::ParamSpecBoxed::builder::<gst::Structure>("stats")
                    .nick("Statistics")
                    .blurb("frames, dropped (lost to when-full=drop, overwritten ones included), overwritten (published, then overwritten before a lagging consumer took them), waits, zero-copy (published where upstream wrote them: the slot pool or lent GstCudaMemory), copied, consumers, reclaimed-consumers, transport")
                    .read_only()
                    .build(),
            ]
        });
        PROPERTIES.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut settings = self.settings.lock().unwrap();
        match pspec.name() {
            "channel" => {
                settings.channel = value
                    .get::<Option<String>>()
                    .unwrap()
                    .unwrap_or_else(|| DEFAULT_CHANNEL.into())
            }
            "slots" => settings.slots = value.get().unwrap(),
            "transport" => settings.transport = value.get().unwrap(),
            "cuda-device-id" => settings.device_id = value.get().unwrap(),
            "when-full" => settings.when_full = value.get().unwrap(),
            "wait-mode" => settings.wait_mode = value.get().unwrap(),
            "gpu-sync" => settings.gpu_sync = value.get().unwrap(),
            "permissions" => settings.permissions = value.get().unwrap(),
            "stats-interval" => self.ticker.set_interval_ms(value.get().unwrap()),
            _ => unimplemented!(),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        let settings = self.settings.lock().unwrap();
        match pspec.name() {
            "channel" => settings.channel.to_value(),
            "slots" => settings.slots.to_value(),
            "transport" => settings.transport.to_value(),
            "cuda-device-id" => settings.device_id.to_value(),
            "when-full" => settings.when_full.to_value(),
            "wait-mode" => settings.wait_mode.to_value(),
            "gpu-sync" => settings.gpu_sync.to_value(),
            "permissions" => settings.permissions.to_value(),
            "stats-interval" => self.ticker.interval_ms().to_value(),
            "stats" => {
                drop(settings);
                self.stats().to_value()
            }
            _ => unimplemented!(),
        }
    }
}

impl GstObjectImpl for CudaIpcSink {}

impl ElementImpl for CudaIpcSink {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static ELEMENT_METADATA: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "CUDA IPC sink",
                "Sink/Video/Hardware",
                "Shares video frames with other processes through CUDA IPC or shared memory",
                "gst-cudaipc developers",
            )
        });
        Some(&*ELEMENT_METADATA)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static PAD_TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            vec![
                gst::PadTemplate::new(
                    "sink",
                    gst::PadDirection::Sink,
                    gst::PadPresence::Always,
                    &video::any_memory_caps(),
                )
                .unwrap(),
            ]
        });
        PAD_TEMPLATES.as_ref()
    }

    fn set_context(&self, context: &gst::Context) {
        let device_id = self.settings.lock().unwrap().device_id;
        self.cuda_context
            .set_context(self.obj().upcast_ref(), context, device_id);
        self.parent_set_context(context)
    }

    fn change_state(
        &self,
        transition: gst::StateChange,
    ) -> Result<gst::StateChangeSuccess, gst::StateChangeError> {
        // Before upstream CUDA elements (they go to READY after us) look for
        // a context: they then share ours.
        let device_id = self.settings.lock().unwrap().device_id;
        let device = self.cuda_context_device();
        self.cuda_context.before_change_state(
            self.obj().upcast_ref(),
            transition,
            device_id,
            device.as_ref(),
        );
        let success = self.parent_change_state(transition)?;
        self.cuda_context.after_change_state(transition);
        Ok(success)
    }
}

impl BaseSinkImpl for CudaIpcSink {
    fn query(&self, query: &mut gst::QueryRef) -> bool {
        self.cuda_context.query(self.obj().upcast_ref(), query)
            || BaseSinkImplExt::parent_query(self, query)
    }

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let settings = self.settings.lock().unwrap().clone();
        let kind = TransportKind::resolve(settings.transport.into());
        let device = match kind {
            TransportKind::Cuda => Some(Device::get(settings.device_id).map_err(|e| {
                gst::error_msg!(
                    gst::ResourceError::OpenWrite,
                    (
                        "transport=cuda needs CUDA device {}: {}",
                        settings.device_id,
                        e
                    )
                )
            })?),
            TransportKind::Host => None,
        };
        let producer = Producer::create(ProducerConfig {
            channel: settings.channel.clone(),
            permissions: settings.permissions,
            transport: kind.wire_value(),
            gpu_sync: match GpuSync::from(settings.gpu_sync) {
                GpuSync::Event => GPU_SYNC_EVENT,
                GpuSync::Host => GPU_SYNC_HOST,
            },
            device_ordinal: device.as_ref().map(|d| d.ordinal() as u32).unwrap_or(0),
            device_uuid: device.as_ref().map(|d| d.uuid()).unwrap_or_default(),
            when_full: settings.when_full.into(),
            wait_mode: settings.wait_mode.into(),
        })
        .map_err(|e| match e {
            ChannelError::InUse { .. } => gst::error_msg!(gst::ResourceError::Busy, ("{}", e)),
            ChannelError::InvalidName(_) => {
                gst::error_msg!(gst::ResourceError::Settings, ("{}", e))
            }
            e => gst::error_msg!(
                gst::ResourceError::OpenWrite,
                ("cannot create channel '{}': {}", settings.channel, e)
            ),
        })?;
        gst::info!(
            CAT,
            imp = self,
            "channel '{}' open ({:?} transport)",
            settings.channel,
            kind
        );
        *self.state.lock().unwrap() = Some(State {
            channel: Arc::new(Channel {
                producer,
                kind,
                device,
                interrupt: AtomicBool::new(false),
                current: Mutex::new(None),
                retired: Mutex::new(Vec::new()),
                tokens: std::array::from_fn(|_| AtomicU64::new(0)),
                memory_addr: std::array::from_fn(|_| AtomicUsize::new(0)),
                next_token: AtomicU64::new(0),
                lending: Mutex::new(Lending::default()),
                zero_copy: AtomicU64::new(0),
                copied: AtomicU64::new(0),
            }),
            info: None,
        });
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        let Some(state) = self.state.lock().unwrap().take() else {
            return Ok(());
        };
        let channel = state.channel;
        channel.interrupt.store(true, Ordering::SeqCst);
        channel.producer.wake();
        if !channel.producer.wait_released(RELEASE_GRACE) {
            gst::warning!(
                CAT,
                imp = self,
                "consumers still hold frames; freeing the slots anyway"
            );
        }
        // The name goes now; the memory goes once upstream drops the pool.
        channel.producer.close();
        *channel.current.lock().unwrap() = None;
        channel.retired.lock().unwrap().clear();
        Ok(())
    }

    fn set_caps(&self, caps: &gst::Caps) -> Result<(), gst::LoggableError> {
        let info = gst_video::VideoInfo::from_caps(caps)
            .map_err(|_| gst::loggable_error!(CAT, "cannot parse caps {}", caps))?;
        let channel = self
            .state
            .lock()
            .unwrap()
            .as_ref()
            .map(|s| s.channel.clone())
            .ok_or_else(|| gst::loggable_error!(CAT, "caps before start"))?;
        if channel.kind == TransportKind::Host
            && memory::caps_are_cuda(caps)
            && !crate::cuda::is_available()
        {
            return Err(gst::loggable_error!(
                CAT,
                "CUDA memory input needs CUDA to download it"
            ));
        }
        self.ensure_slots(&channel, &info)?;
        // Consumers choose their memory type themselves: publish the plain
        // caps.
        let mut plain = caps.clone();
        plain.make_mut().set_features(0, None);
        channel
            .producer
            .set_caps(&plain.to_string(), &channel.interrupt)
            .map_err(|e| gst::loggable_error!(CAT, "cannot publish caps: {}", e))?;
        gst::debug!(CAT, imp = self, "caps {}", plain);
        if let Some(state) = self.state.lock().unwrap().as_mut() {
            state.info = Some(info);
        }
        Ok(())
    }

    fn propose_allocation(
        &self,
        query: &mut gst::query::Allocation,
    ) -> Result<(), gst::LoggableError> {
        query.add_allocation_meta::<gst_video::VideoMeta>(None);
        let (caps, _need_pool) = query.get_owned();
        let Some(caps) = caps else { return Ok(()) };
        gst::debug!(CAT, imp = self, "allocation query for {}", caps);
        let when_full = self.settings.lock().unwrap().when_full;
        let Some(channel) = self
            .state
            .lock()
            .unwrap()
            .as_ref()
            .map(|s| s.channel.clone())
        else {
            return Ok(());
        };
        let matches = match channel.kind {
            TransportKind::Cuda => memory::caps_are_cuda(&caps),
            TransportKind::Host => !memory::caps_are_cuda(&caps),
        };
        // The slot pool blocks until a slot is free, so it suits only the
        // lossless policy; with drop, frames are copied into free slots.
        if !matches || WhenFull::from(when_full) != WhenFull::Block {
            return Ok(());
        }
        let info = gst_video::VideoInfo::from_caps(&caps)
            .map_err(|_| gst::loggable_error!(CAT, "cannot parse caps {}", caps))?;
        // GStreamer's CUDA elements write only into a GstCudaBufferPool, the
        // first pool proposed: its buffers become the slots. This plugin's
        // elements find the slot pool after it. Upstream may ask again for
        // the same caps (and keep the pool it has): the same pool then.
        let proposed = channel.lending.lock().unwrap().pool.clone().filter(|pool| {
            pool.config()
                .params()
                .and_then(|(pool_caps, ..)| pool_caps)
                .is_some_and(|pool_caps| pool_caps == caps)
        });
        let lent = channel.current_set().is_some_and(|set| set.lent.is_some());
        if proposed.is_none() || !lent {
            // Upstream may ask before the caps event reached us (imagefreeze
            // does): the slots must exist for the pool to hand them out.
            self.ensure_slots(&channel, &info)?;
        }
        let lendable = match proposed {
            Some(pool) => Some(pool),
            None => {
                let pool = self.lendable_pool(&channel, &caps, &info);
                *channel.lending.lock().unwrap() = Lending {
                    pool: pool.clone(),
                    seen: Vec::new(),
                };
                pool
            }
        };
        if let Some(pool) = lendable
            && let Some((_, size, min, max)) = pool.config().params()
        {
            gst::debug!(
                CAT,
                imp = self,
                "proposing {} ({} buffers)",
                pool.name(),
                max
            );
            query.add_allocation_pool(Some(&pool), size, min, max);
        }
        let allocator = channel
            .device
            .as_ref()
            .map(|d| CudaAllocator::for_device(d).upcast::<gst::Allocator>());
        let pool = SlotPool::new(channel);
        let mut config = pool.config();
        config.set_params(Some(&caps), info.size() as u32, 0, 0);
        if let Some(allocator) = allocator.as_ref() {
            // Tells upstream that the pool's buffers are CUDA memory of
            // this plugin, which it may write with its kernels.
            config.set_allocator(Some(allocator), None);
            query.add_allocation_param(Some(allocator), gst::AllocationParams::default());
        }
        pool.set_config(config)
            .map_err(|_| gst::loggable_error!(CAT, "cannot configure the slot pool"))?;
        query.add_allocation_pool(Some(&pool), info.size() as u32, 0, 0);
        Ok(())
    }

    fn render(&self, buffer: &gst::Buffer) -> Result<gst::FlowSuccess, gst::FlowError> {
        let result = self.render_frame(buffer);
        if result.is_ok() && self.ticker.due() {
            let _ = self.obj().post_message(
                gst::message::Element::builder(self.stats())
                    .src(&*self.obj())
                    .build(),
            );
        }
        result
    }

    fn event(&self, event: gst::Event) -> bool {
        if let gst::EventView::Eos(_) = event.view()
            && let Some(state) = self.state.lock().unwrap().as_ref()
        {
            state.channel.producer.publish_eos();
        }
        self.parent_event(event)
    }

    fn unlock(&self) -> Result<(), gst::ErrorMessage> {
        if let Some(state) = self.state.lock().unwrap().as_ref() {
            state.channel.interrupt.store(true, Ordering::SeqCst);
            state.channel.producer.wake();
        }
        Ok(())
    }

    fn unlock_stop(&self) -> Result<(), gst::ErrorMessage> {
        if let Some(state) = self.state.lock().unwrap().as_ref() {
            state.channel.interrupt.store(false, Ordering::SeqCst);
        }
        Ok(())
    }
}
