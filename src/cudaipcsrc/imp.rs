// SPDX-License-Identifier: MPL-2.0

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_src::CreateSuccess;
use gst_base::subclass::prelude::*;

use crate::cuda::Device;
use crate::enums::{Frames, OutputMemory, ProducerLost, Wait};
use crate::gstcuda::{self, MappedCudaMemory};
use crate::ipc::stats::LatencyHistogram;
use crate::ipc::{
    ChannelError, Consumer, ConsumerConfig, ConsumerWaker, Frame, Item, ProducerGone, ReleaseHandle,
};
use crate::memory::{self, CudaAllocator, CudaIpcMeta};
use crate::transport::{self, ConsumerSlots, SlotMemory, TransportKind};
use crate::video;

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "cudaipcsrc",
        gst::DebugColorFlags::empty(),
        Some("CUDA IPC source"),
    )
});

const DEFAULT_CHANNEL: &str = "default";
const DEFAULT_DEVICE_ID: i32 = -1;
const DEFAULT_CONNECT_TIMEOUT_MS: i64 = 10_000;
const DEFAULT_IS_LIVE: bool = false;

#[derive(Debug, Clone)]
struct Settings {
    channel: String,
    device_id: i32,
    wait_mode: Wait,
    connect_timeout_ms: i64,
    on_producer_lost: ProducerLost,
    is_live: bool,
    frames: Frames,
    output_memory: OutputMemory,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            channel: DEFAULT_CHANNEL.into(),
            device_id: DEFAULT_DEVICE_ID,
            wait_mode: Wait::default(),
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            on_producer_lost: ProducerLost::default(),
            is_live: DEFAULT_IS_LIVE,
            frames: Frames::default(),
            output_memory: OutputMemory::default(),
        }
    }
}

/// Holds a slot while a buffer wraps it; gives it back when the buffer dies,
/// after the GPU work queued on the memory so far.
struct SlotHold {
    slots: Arc<dyn ConsumerSlots>,
    release: ReleaseHandle,
    slot: usize,
    /// Slots this element holds in buffers downstream.
    held: Arc<AtomicUsize>,
}

impl Drop for SlotHold {
    fn drop(&mut self) {
        self.held.fetch_sub(1, Ordering::SeqCst);
        if let Err(e) = self.slots.finish_read(self.slot) {
            gst::warning!(
                CAT,
                "cannot mark the end of reading slot {}: {}",
                self.slot,
                e
            );
        }
        self.release.release(self.slot);
    }
}

/// A host slot as read-only buffer memory.
struct HostSlotRead {
    ptr: *const u8,
    len: usize,
    _hold: SlotHold,
}

// SAFETY: the pointer is into a read-only shared mapping kept alive by the
// hold's slot view; the producer does not write the slot while it is held.
unsafe impl Send for HostSlotRead {}

impl AsRef<[u8]> for HostSlotRead {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: see the Send impl; `len` was validated against the slot.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// An attachment to a producer.
struct Connection {
    /// The channel this connection is attached to.
    channel: String,
    consumer: Consumer,
    kind: TransportKind,
    device: Option<Arc<Device>>,
    slots: Option<Arc<dyn ConsumerSlots>>,
    pool_generation: u64,
    caps_generation: u64,
    info: Option<gst_video::VideoInfo>,
    /// Caps as published, without memory feature.
    channel_caps: Option<gst::Caps>,
    output_cuda: bool,
    /// Buffers of the output memory type, for frames that are copied out of
    /// their slot (downloads, and copies when downstream holds many slots).
    copy_pool: Option<gst::BufferPool>,
}

#[derive(Default)]
struct Stats {
    frames: u64,
    /// Frames copied out of their slot instead of wrapped.
    copied: u64,
    missed: u64,
    waits: u64,
    reconnects: u64,
    producer_pid: u32,
    latency: LatencyHistogram,
}

#[derive(Default)]
struct State {
    connection: Option<Connection>,
    /// The next buffer starts a discontinuity.
    discont: bool,
    connected_before: bool,
    /// The producer was found gone while handling a frame.
    gone: Option<ProducerGone>,
}

#[derive(Default)]
pub struct CudaIpcSrc {
    settings: Mutex<Settings>,
    state: Mutex<State>,
    stats: Mutex<Stats>,
    interrupt: AtomicBool,
    waker: Mutex<Option<ConsumerWaker>>,
    /// Slots held by buffers of ours downstream.
    held: Arc<AtomicUsize>,
    ticker: crate::periodic::StatsTicker,
    /// Shared with GStreamer's CUDA elements (`gst.cuda.context`).
    cuda_context: gstcuda::ContextShare,
    /// The active `GstCudaBufferPool` frames are copied into (see
    /// output-memory), chosen when the output caps are set.
    gst_cuda_pool: Mutex<Option<gst::BufferPool>>,
}

enum Lost {
    Eos,
    Reconnect,
}

impl CudaIpcSrc {
    fn connect(&self, state: &mut State) -> Result<(), gst::FlowError> {
        let settings = self.settings.lock().unwrap().clone();
        // A reconnection waits as long as it takes (on-producer-lost=wait).
        let timeout = if state.connected_before || settings.connect_timeout_ms < 0 {
            None
        } else {
            Some(Duration::from_millis(settings.connect_timeout_ms as u64))
        };
        let consumer = Consumer::attach(
            ConsumerConfig {
                channel: settings.channel.clone(),
                mode: settings.frames.into(),
                wait_mode: settings.wait_mode.into(),
                connect_timeout: timeout,
            },
            &self.interrupt,
        )
        .map_err(|e| match e {
            ChannelError::Interrupted => gst::FlowError::Flushing,
            ChannelError::NoProducer { .. } => {
                gst::element_imp_error!(
                    self,
                    gst::ResourceError::NotFound,
                    ("{} (connect-timeout={} ms)", e, settings.connect_timeout_ms)
                );
                gst::FlowError::Error
            }
            e => {
                gst::element_imp_error!(
                    self,
                    gst::ResourceError::OpenRead,
                    ("cannot attach to channel '{}': {}", settings.channel, e)
                );
                gst::FlowError::Error
            }
        })?;
        let info = consumer.info().clone();
        let kind = TransportKind::from_wire(info.transport).ok_or(gst::FlowError::Error)?;
        let device = match kind {
            TransportKind::Host => None,
            TransportKind::Cuda => Some(self.open_device(&settings, &info.device_uuid)?),
        };
        gst::info!(
            CAT,
            imp = self,
            "attached to channel '{}' (producer pid {}, {:?} transport)",
            settings.channel,
            info.producer_pid,
            kind
        );
        *self.waker.lock().unwrap() = Some(consumer.waker());
        self.stats.lock().unwrap().producer_pid = info.producer_pid;
        if state.connected_before {
            self.stats.lock().unwrap().reconnects += 1;
            state.discont = true;
        }
        state.connected_before = true;
        state.connection = Some(Connection {
            channel: settings.channel.clone(),
            consumer,
            kind,
            device,
            slots: None,
            pool_generation: 0,
            caps_generation: 0,
            info: None,
            channel_caps: None,
            output_cuda: false,
            copy_pool: None,
        });
        Ok(())
    }

    fn open_device(
        &self,
        settings: &Settings,
        producer_uuid: &[u8; 16],
    ) -> Result<Arc<Device>, gst::FlowError> {
        let fail = |msg: String| {
            gst::element_imp_error!(self, gst::ResourceError::OpenRead, ("{}", msg));
            gst::FlowError::Error
        };
        if let Err(e) = crate::cuda::driver() {
            return Err(fail(format!(
                "channel '{}' uses the cuda transport, but CUDA is not usable here: {e}",
                settings.channel
            )));
        }
        let ordinal = if settings.device_id >= 0 {
            settings.device_id
        } else {
            match Device::find_by_uuid(producer_uuid) {
                Ok(Some(ordinal)) => ordinal,
                Ok(None) => {
                    return Err(fail(
                        "the producer's GPU is not visible in this process (check CUDA_VISIBLE_DEVICES); set cuda-device-id to read through peer access from another GPU".to_string()));
                }
                Err(e) => return Err(fail(e.to_string())),
            }
        };
        Device::get(ordinal).map_err(|e| fail(format!("cannot open CUDA device {ordinal}: {e}")))
    }

    /// Chooses CUDA or system memory for `caps` and sets them on the pad.
    fn negotiate_output(
        &self,
        connection: &mut Connection,
        caps: &gst::Caps,
    ) -> Result<(), gst::FlowError> {
        let mut candidates = Vec::new();
        if connection.kind == TransportKind::Cuda {
            candidates.push(memory::with_cuda_feature(caps));
        }
        candidates.push(caps.clone());
        let obj = self.obj();
        let peer = obj.src_pad().peer_query_caps(None);
        let Some(chosen) = candidates.into_iter().find(|c| peer.can_intersect(c)) else {
            gst::element_imp_error!(
                self,
                gst::CoreError::Negotiation,
                (
                    "downstream accepts neither CUDA nor system memory for the channel's caps {}",
                    caps
                )
            );
            return Err(gst::FlowError::NotNegotiated);
        };
        connection.output_cuda = memory::caps_are_cuda(&chosen);
        if connection.output_cuda
            && let Some(device) = connection.device.as_ref()
        {
            // Before the allocation query, so that a pool of ours shares it.
            self.cuda_context.ensure(obj.upcast_ref(), device);
        }
        let info = gst_video::VideoInfo::from_caps(caps).map_err(|_| gst::FlowError::Error)?;
        let pool = gst_video::VideoBufferPool::new();
        let mut config = pool.config();
        config.set_params(Some(&chosen), info.size() as u32, 0, 0);
        if connection.output_cuda
            && let Some(device) = connection.device.as_ref()
        {
            let allocator = CudaAllocator::for_device(device);
            config.set_allocator(Some(allocator.upcast_ref::<gst::Allocator>()), None);
        }
        pool.set_config(config).map_err(|_| gst::FlowError::Error)?;
        pool.set_active(true).map_err(|_| gst::FlowError::Error)?;
        connection.copy_pool = Some(pool.upcast());
        gst::debug!(CAT, imp = self, "output caps {}", chosen);
        obj.set_caps(&chosen).map_err(|_| {
            gst::element_imp_error!(
                self,
                gst::CoreError::Negotiation,
                ("downstream refused caps {}", chosen)
            );
            gst::FlowError::NotNegotiated
        })?;
        // BaseSrc queries downstream's allocation only when it negotiates
        // itself; these caps come from the channel, so ask here.
        if let Some(old) = self.gst_cuda_pool.lock().unwrap().take() {
            let _ = old.set_active(false);
        }
        let pool = if connection.output_cuda {
            self.gst_cuda_output_pool(&chosen).map_err(|e| {
                gst::element_imp_error!(self, gst::CoreError::Negotiation, ("{}", e));
                gst::FlowError::NotNegotiated
            })?
        } else {
            None
        };
        *self.gst_cuda_pool.lock().unwrap() = pool;
        Ok(())
    }

    /// The `GstCudaBufferPool` (configured, active) to copy frames into for
    /// `caps` (CUDA memory); `None`: output the slots themselves.
    fn gst_cuda_output_pool(&self, caps: &gst::Caps) -> Result<Option<gst::BufferPool>, String> {
        let output_memory = self.settings.lock().unwrap().output_memory;
        if output_memory == OutputMemory::CudaIpc || !gstcuda::available() {
            return Ok(None);
        }
        let mut query = gst::query::Allocation::new(Some(caps), true);
        let _ = self.obj().src_pad().peer_query(&mut query);
        let size = gst_video::VideoInfo::from_caps(caps)
            .map_err(|_| format!("invalid video caps {caps}"))?
            .size() as u32;
        if output_memory == OutputMemory::Auto && memory::proposed_slot_pool(&query).is_some() {
            // cudaipcsink (a relay): it takes our slots as they are.
            return Ok(None);
        }
        // A GstCudaBufferPool downstream: an element of GStreamer's CUDA
        // library, which needs GstCudaMemory.
        let downstream = query
            .allocation_pools()
            .next()
            .and_then(|(pool, size, min, max)| Some((pool?, size, min, max)))
            .filter(|(pool, ..)| gstcuda::is_cuda_buffer_pool(pool));
        let candidate = match downstream {
            Some(found) => Some(found),
            None if output_memory == OutputMemory::GstCuda => self
                .cuda_context
                .get()
                .and_then(|ctx| ctx.new_buffer_pool())
                .map(|pool| (pool, size, 0, 0)),
            None => None,
        };
        let Some((pool, pool_size, min, max)) = candidate else {
            if output_memory == OutputMemory::GstCuda {
                return Err("output-memory=gstcuda: no GstCudaBufferPool to write into".into());
            }
            return Ok(None);
        };
        if !video::configure_pool(&pool, caps, pool_size.max(size), min, max)
            || pool.set_active(true).is_err()
        {
            return Err(format!("{} refused {caps}", pool.name()));
        }
        gst::info!(
            CAT,
            imp = self,
            "copying frames into GstCudaMemory of {}",
            pool.name()
        );
        Ok(Some(pool))
    }

    fn corrupt(&self, what: String) -> gst::FlowError {
        gst::element_imp_error!(
            self,
            gst::StreamError::Decode,
            ("corrupt control block: {}", what)
        );
        gst::FlowError::Error
    }

    /// An error of a channel read outside `Consumer::next`.
    fn read_error(&self, e: ChannelError) -> gst::FlowError {
        match e {
            ChannelError::Corrupt(what) => self.corrupt(what),
            e => {
                gst::element_imp_error!(self, gst::ResourceError::Read, ["{}", e]);
                gst::FlowError::Error
            }
        }
    }

    /// Turns a taken frame into a buffer; `Ok(None)`: skipped.
    fn frame_to_buffer(
        &self,
        state: &mut State,
        frame: Frame,
    ) -> Result<Option<gst::Buffer>, gst::FlowError> {
        // Per frame: copy the one setting needed, no clone of them all.
        let is_live = self.settings.lock().unwrap().is_live;
        let connection = state.connection.as_mut().unwrap();
        let release = connection.consumer.release_handle();
        // Until a SlotHold owns it, the slot is given back on every early
        // return.
        let give_back = |slot| release.release(slot);

        if connection.slots.is_none() || frame.pool_generation != connection.pool_generation {
            let pool = match connection.consumer.pool() {
                // Replaced since the frame was taken: the frame is stale.
                Ok(pool) if pool.generation > frame.pool_generation => {
                    give_back(frame.slot);
                    self.stats.lock().unwrap().missed += 1;
                    return Ok(None);
                }
                // A pool older than its frame is a lie.
                Ok(pool) if pool.generation < frame.pool_generation => {
                    give_back(frame.slot);
                    return Err(self.corrupt(format!(
                        "frame {} of pool generation {}, but the pool is at {}",
                        frame.seq, frame.pool_generation, pool.generation
                    )));
                }
                Ok(pool) => pool,
                Err(e) => {
                    give_back(frame.slot);
                    return Err(self.read_error(e));
                }
            };
            let slots = match transport::open_consumer_slots(
                &connection.channel,
                connection.consumer.info(),
                &pool,
                connection.device.as_ref(),
            ) {
                Ok(slots) => slots,
                Err(e) => {
                    give_back(frame.slot);
                    // A producer that died meanwhile takes its device memory
                    // with it: that is its death, handled by the policy.
                    if let Some(gone) = connection.consumer.producer_gone() {
                        gst::debug!(CAT, imp = self, "slots gone with the producer: {}", e);
                        state.gone = Some(gone);
                        return Ok(None);
                    }
                    gst::element_imp_error!(
                        self,
                        gst::ResourceError::OpenRead,
                        ("cannot open the channel's slots: {}", e)
                    );
                    return Err(gst::FlowError::Error);
                }
            };
            connection
                .consumer
                .set_release_descriptors(&slots.release_descriptors());
            gst::debug!(
                CAT,
                imp = self,
                "opened {} slots of pool generation {}",
                slots.slot_count(),
                pool.generation
            );
            connection.slots = Some(slots);
            connection.pool_generation = pool.generation;
        }

        if frame.caps_generation != connection.caps_generation {
            let (generation, text) = match connection.consumer.caps() {
                Ok(c) => c,
                Err(e) => {
                    give_back(frame.slot);
                    return Err(self.read_error(e));
                }
            };
            if generation != frame.caps_generation {
                // The caps moved on past this frame: it is stale.
                give_back(frame.slot);
                self.stats.lock().unwrap().missed += 1;
                return Ok(None);
            }
            let parsed = gst::Caps::from_str(&text)
                .ok()
                .filter(|c| c.is_fixed())
                .and_then(|c| gst_video::VideoInfo::from_caps(&c).ok().map(|i| (c, i)));
            let Some((caps, info)) = parsed else {
                give_back(frame.slot);
                return Err(self.corrupt(format!("unusable caps {text:?}")));
            };
            if !video::FORMATS.contains(&info.format()) {
                give_back(frame.slot);
                return Err(self.corrupt(format!("unsupported format in caps {text:?}")));
            }
            if let Err(e) = self.negotiate_output(connection, &caps) {
                give_back(frame.slot);
                return Err(e);
            }
            connection.caps_generation = generation;
            connection.info = Some(info);
            connection.channel_caps = Some(caps);
        }

        let info = connection.info.clone().unwrap();
        if let Err(e) = video::layout_fits(&info, &frame.planes, frame.size) {
            give_back(frame.slot);
            return Err(self.corrupt(format!("frame {} does not match the caps: {e}", frame.seq)));
        }
        let slots = connection.slots.clone().unwrap();
        if frame.slot >= slots.slot_count() || frame.size > slots.slot_size() as u64 {
            give_back(frame.slot);
            return Err(self.corrupt(format!(
                "frame {} (slot {}, {} bytes) lies outside the {} slots of {} bytes",
                frame.seq,
                frame.slot,
                frame.size,
                slots.slot_count(),
                slots.slot_size()
            )));
        }
        if let Err(e) = slots.before_read(frame.slot) {
            give_back(frame.slot);
            gst::element_imp_error!(self, gst::ResourceError::Read, ("{}", e));
            return Err(gst::FlowError::Error);
        }
        self.held.fetch_add(1, Ordering::SeqCst);
        let hold = SlotHold {
            slots: slots.clone(),
            release,
            slot: frame.slot,
            held: self.held.clone(),
        };
        let default_layout = frame.planes == video::planes(&info);
        // Wrapping is zero-copy, but a slot wrapped in a buffer stays with us
        // until downstream drops it. Like v4l2src with its pool, copy instead
        // when we would otherwise leave the producer no slot to write into
        // (a sink keeping its last buffer, a queue, or slots=1).
        let gst_cuda_pool = self.gst_cuda_pool.lock().unwrap().clone();
        let wrap = (connection.output_cuda && gst_cuda_pool.is_none())
            || connection.kind == TransportKind::Host;
        let wrap = wrap && self.held.load(Ordering::SeqCst) < slots.slot_count();
        gst::trace!(
            CAT,
            imp = self,
            "frame {} in slot {}: {} ({} slots held downstream)",
            frame.seq,
            frame.slot,
            if wrap { "wrapped" } else { "copied" },
            self.held.load(Ordering::SeqCst)
        );
        let memory = slots.slot_memory(frame.slot);
        let mut buffer = if wrap {
            wrap_slot(memory, &frame, hold)
        } else {
            let pool = gst_cuda_pool
                .as_ref()
                .unwrap_or_else(|| connection.copy_pool.as_ref().unwrap());
            let mut buffer = pool.acquire_buffer(None)?;
            let copied = if gst_cuda_pool.is_some() {
                copy_slot_to_gst_cuda(&memory, &frame, &info, buffer.get_mut().unwrap())
            } else {
                copy_slot(&memory, &frame, &info, buffer.get_mut().unwrap())
            };
            // Give the slot back once the copy is queued (after it, on the
            // GPU).
            drop(hold);
            if let Err(e) = copied {
                gst::element_imp_error!(
                    self,
                    gst::ResourceError::Read,
                    ("cannot copy the frame out of its slot: {}", e)
                );
                return Err(gst::FlowError::Error);
            }
            if let Some(copy) = memory::buffer_device_memory(&buffer) {
                // A copy in CUDA memory carries the meta as a wrapped slot
                // does, in the default layout of the caps.
                let pitch = video::planes(&info)
                    .first()
                    .map(|p| p.1 as i32)
                    .unwrap_or(0);
                CudaIpcMeta::add(
                    buffer.get_mut().unwrap(),
                    CudaIpcMeta {
                        device_ptr: copy.ptr,
                        pitch,
                        size: copy.size as u64,
                        device_id: copy.device.ordinal(),
                    },
                );
            }
            self.stats.lock().unwrap().copied += 1;
            buffer
        };
        {
            let b = buffer.get_mut().unwrap();
            if wrap && !default_layout {
                let offsets: Vec<usize> = frame.planes.iter().map(|p| p.0 as usize).collect();
                let strides: Vec<i32> = frame.planes.iter().map(|p| p.1 as i32).collect();
                gst_video::VideoMeta::add_full(
                    b,
                    gst_video::VideoFrameFlags::empty(),
                    info.format(),
                    info.width(),
                    info.height(),
                    &offsets,
                    &strides,
                )
                .map_err(|_| gst::FlowError::Error)?;
            }
            if !is_live {
                b.set_pts(frame.pts.map(gst::ClockTime::from_nseconds));
                b.set_dts(frame.dts.map(gst::ClockTime::from_nseconds));
            }
            b.set_duration(frame.duration.map(gst::ClockTime::from_nseconds));
            b.set_offset(frame.offset);
            b.set_offset_end(frame.offset_end);
            let mut flags = gst::BufferFlags::from_bits_truncate(frame.flags)
                & (gst::BufferFlags::DISCONT
                    | gst::BufferFlags::DELTA_UNIT
                    | gst::BufferFlags::HEADER
                    | gst::BufferFlags::GAP
                    | gst::BufferFlags::DROPPABLE
                    | gst::BufferFlags::MARKER
                    | gst::BufferFlags::CORRUPTED
                    | gst::BufferFlags::NON_DROPPABLE);
            if frame.missed_before > 0 || std::mem::take(&mut state.discont) {
                flags |= gst::BufferFlags::DISCONT;
            }
            b.set_flags(flags);
        }
        let mut stats = self.stats.lock().unwrap();
        stats.frames += 1;
        stats.missed += frame.missed_before;
        Ok(Some(buffer))
    }

    fn producer_lost(&self, state: &mut State, gone: ProducerGone) -> Result<Lost, gst::FlowError> {
        let settings = self.settings.lock().unwrap().clone();
        let what = match gone {
            ProducerGone::Closed => "closed the channel",
            ProducerGone::Died => "died",
        };
        gst::info!(
            CAT,
            imp = self,
            "the producer of '{}' {}",
            settings.channel,
            what
        );
        match settings.on_producer_lost {
            ProducerLost::Error => {
                gst::element_imp_error!(
                    self,
                    gst::ResourceError::Read,
                    ("the producer of channel '{}' {}", settings.channel, what)
                );
                Err(gst::FlowError::Error)
            }
            ProducerLost::Eos => Ok(Lost::Eos),
            ProducerLost::Wait => {
                state.connection = None;
                *self.waker.lock().unwrap() = None;
                Ok(Lost::Reconnect)
            }
        }
    }

    fn stats_structure(&self) -> gst::Structure {
        let stats = self.stats.lock().unwrap();
        gst::Structure::builder("cudaipcsrc-stats")
            .field("frames", stats.frames)
            .field("copied", stats.copied)
            .field("missed", stats.missed)
            .field("waits", stats.waits)
            .field("reconnects", stats.reconnects)
            .field("producer-pid", stats.producer_pid)
            .field("latency-count", stats.latency.count())
            .field("latency-min-ns", stats.latency.min_ns())
            .field("latency-mean-ns", stats.latency.mean_ns())
            .field("latency-p50-ns", stats.latency.quantile_ns(0.5))
            .field("latency-p99-ns", stats.latency.quantile_ns(0.99))
            .field("latency-max-ns", stats.latency.max_ns())
            .build()
    }
}

/// A buffer wrapping the slot (zero copy); the hold gives it back when the
/// buffer dies.
fn wrap_slot(memory: SlotMemory, frame: &Frame, hold: SlotHold) -> gst::Buffer {
    let size = frame.size as usize;
    let mut buffer = gst::Buffer::new();
    let b = buffer.get_mut().unwrap();
    match memory {
        SlotMemory::Device(slot) => {
            let device = slot.device().clone();
            let ptr = slot.ptr();
            // A frame larger than the slot's mapping is cut to it (the
            // channel refuses those before they get here).
            let frame_memory = slot.sub(0, size.min(slot.len())).unwrap_or(slot);
            b.append_memory(CudaAllocator::for_device(&device).wrap(
                frame_memory,
                Box::new(hold),
                true,
            ));
            CudaIpcMeta::add(
                b,
                CudaIpcMeta {
                    device_ptr: ptr,
                    pitch: frame.planes.first().map(|p| p.1 as i32).unwrap_or(0),
                    size: frame.size,
                    device_id: device.ordinal(),
                },
            );
        }
        SlotMemory::Host { ptr, .. } => {
            b.append_memory(gst::Memory::from_slice(HostSlotRead {
                ptr,
                len: size,
                _hold: hold,
            }));
        }
    }
    buffer
}

/// Copies the frame in a slot into `buffer` (of the output memory type), in
/// the caps' default layout.
fn copy_slot(
    memory: &SlotMemory,
    frame: &Frame,
    info: &gst_video::VideoInfo,
    buffer: &mut gst::BufferRef,
) -> Result<(), String> {
    let planes = video::planes(info);
    match (memory, memory::buffer_device_memory(buffer)) {
        (SlotMemory::Device(slot), Some(dst)) => {
            // SAFETY: the output buffer holds a frame of `info` in `planes`;
            // the held slot holds `frame.planes`, checked against the slot
            // size by the channel.
            unsafe {
                video::copy_planes_device(
                    &slot.device().stream(),
                    dst.ptr,
                    &planes,
                    slot.ptr(),
                    &frame.planes,
                    info,
                )
            }
            .map_err(|e| e.to_string())?;
        }
        (SlotMemory::Device(slot), None) => {
            let mut map = buffer
                .map_writable()
                .map_err(|_| "cannot map the output buffer")?;
            let size = frame.size as usize;
            if frame.planes == planes && map.len() >= size {
                // Straight into the output buffer.
                slot.download(&mut map[..size]).map_err(|e| e.to_string())?;
            } else {
                let mut whole = vec![0u8; size];
                slot.download(&mut whole).map_err(|e| e.to_string())?;
                video::copy_planes(&whole, &mut map, info, &frame.planes, &video::planes(info));
            }
        }
        (SlotMemory::Host { ptr, len }, _) => {
            let mut map = buffer
                .map_writable()
                .map_err(|_| "cannot map the output buffer")?;
            // SAFETY: we hold the slot; the mapping is `len` bytes long.
            let src = unsafe { std::slice::from_raw_parts(*ptr, *len) };
            video::copy_planes(src, &mut map, info, &frame.planes, &video::planes(info));
        }
    }
    Ok(())
}

/// Copies the frame in a slot into a buffer of `GstCudaMemory`, done when
/// this returns: GStreamer 1.22's CUDA elements take pushed memory as ready.
fn copy_slot_to_gst_cuda(
    memory: &SlotMemory,
    frame: &Frame,
    info: &gst_video::VideoInfo,
    buffer: &mut gst::BufferRef,
) -> Result<(), String> {
    let SlotMemory::Device(slot) = memory else {
        return Err("GstCudaMemory output needs the cuda transport".into());
    };
    let dst = MappedCudaMemory::of_buffer(buffer, true)
        .ok_or("the output buffer holds no GstCudaMemory that maps")?;
    let stream = slot.device().stream();
    // SAFETY: the mapped output holds a frame of `info` in `dst.planes`; the
    // held slot holds `frame.planes`.
    unsafe {
        video::copy_planes_device(
            &stream,
            dst.ptr,
            &dst.planes,
            slot.ptr(),
            &frame.planes,
            info,
        )
    }
    .and_then(|()| stream.synchronize())
    .map_err(|e| e.to_string())
}

#[glib::object_subclass]
impl ObjectSubclass for CudaIpcSrc {
    const NAME: &'static str = "GstRsCudaIpcSrc";
    type Type = super::CudaIpcSrc;
    type ParentType = gst_base::PushSrc;
}

impl ObjectImpl for CudaIpcSrc {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPERTIES: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            vec![
                glib::ParamSpecString::builder("channel")
                    .nick("Channel")
                    .blurb("Name of the channel to read")
                    .default_value(Some(DEFAULT_CHANNEL))
                    .mutable_ready()
                    .build(),
                glib::ParamSpecInt::builder("cuda-device-id")
                    .nick("CUDA device")
                    .blurb("CUDA device to read on (-1: the producer's own; another one reads through peer access)")
                    .minimum(-1)
                    .default_value(DEFAULT_DEVICE_ID)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("wait-mode", Wait::default())
                    .nick("Wait mode")
                    .blurb("How to wait for the next frame")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecInt64::builder("connect-timeout")
                    .nick("Connect timeout")
                    .blurb("Milliseconds to wait for a producer to appear (-1: forever)")
                    .minimum(-1)
                    .default_value(DEFAULT_CONNECT_TIMEOUT_MS)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("on-producer-lost", ProducerLost::default())
                    .nick("On producer lost")
                    .blurb("What to do when the producer dies or closes the channel")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoolean::builder("is-live")
                    .nick("Is live")
                    .blurb("Act as a live source: buffers are timestamped with this pipeline's running time on arrival")
                    .default_value(DEFAULT_IS_LIVE)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("frames", Frames::default())
                    .nick("Frames")
                    .blurb("Every frame in order (the producer may wait for us) or only the latest")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("output-memory", OutputMemory::default())
                    .nick("Output memory")
                    .blurb("Memory of CUDA output buffers: the shared slots themselves, or GstCudaMemory for GStreamer's CUDA elements (nvcodec)")
                    .mutable_ready()
                    .build(),
                crate::periodic::interval_property(),
                glib::ParamSpecBoxed::builder::<gst::Structure>("stats")
                    .nick("Statistics")
                    .blurb("frames, missed, waits, reconnects, producer-pid, latency-{count,min,mean,p50,p99,max}[-ns] (publish to receive)")
                    .read_only()
                    .build(),
            ]
        });
        PROPERTIES.as_ref()
    }

    fn signals() -> &'static [glib::subclass::Signal] {
        static SIGNALS: LazyLock<Vec<glib::subclass::Signal>> = LazyLock::new(|| {
            vec![
                // Starts the statistics afresh, e.g. after a warm-up.
                glib::subclass::Signal::builder("reset-stats")
                    .action()
                    .class_handler(|args| {
                        let element = args[0].get::<super::CudaIpcSrc>().expect("signal arg");
                        let imp = element.imp();
                        let mut stats = imp.stats.lock().unwrap();
                        let producer_pid = stats.producer_pid;
                        *stats = Stats {
                            producer_pid,
                            ..Stats::default()
                        };
                        None
                    })
                    .build(),
            ]
        });
        SIGNALS.as_ref()
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
            "cuda-device-id" => settings.device_id = value.get().unwrap(),
            "wait-mode" => settings.wait_mode = value.get().unwrap(),
            "connect-timeout" => settings.connect_timeout_ms = value.get().unwrap(),
            "on-producer-lost" => settings.on_producer_lost = value.get().unwrap(),
            "is-live" => {
                settings.is_live = value.get().unwrap();
                // BaseSrc decides whether to preroll before `start`: tell it
                // now, or a live source never prerolls and the pipeline hangs.
                let obj = self.obj();
                obj.set_live(settings.is_live);
                obj.set_do_timestamp(settings.is_live);
            }
            "frames" => settings.frames = value.get().unwrap(),
            "output-memory" => settings.output_memory = value.get().unwrap(),
            "stats-interval" => self.ticker.set_interval_ms(value.get().unwrap()),
            _ => unimplemented!(),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        let settings = self.settings.lock().unwrap();
        match pspec.name() {
            "channel" => settings.channel.to_value(),
            "cuda-device-id" => settings.device_id.to_value(),
            "wait-mode" => settings.wait_mode.to_value(),
            "connect-timeout" => settings.connect_timeout_ms.to_value(),
            "on-producer-lost" => settings.on_producer_lost.to_value(),
            "is-live" => settings.is_live.to_value(),
            "frames" => settings.frames.to_value(),
            "output-memory" => settings.output_memory.to_value(),
            "stats-interval" => self.ticker.interval_ms().to_value(),
            "stats" => {
                drop(settings);
                self.stats_structure().to_value()
            }
            _ => unimplemented!(),
        }
    }

    fn constructed(&self) {
        self.parent_constructed();
        self.obj().set_format(gst::Format::Time);
    }
}

impl GstObjectImpl for CudaIpcSrc {}

impl ElementImpl for CudaIpcSrc {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static ELEMENT_METADATA: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "CUDA IPC source",
                "Source/Video/Hardware",
                "Receives video frames from another process through CUDA IPC or shared memory",
                "gst-cudaipc developers",
            )
        });
        Some(&*ELEMENT_METADATA)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static PAD_TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            vec![
                gst::PadTemplate::new(
                    "src",
                    gst::PadDirection::Src,
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
        let device_id = self.settings.lock().unwrap().device_id;
        self.cuda_context
            .before_change_state(self.obj().upcast_ref(), transition, device_id, None);
        let success = self.parent_change_state(transition)?;
        self.cuda_context.after_change_state(transition);
        Ok(success)
    }
}

impl BaseSrcImpl for CudaIpcSrc {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let settings = self.settings.lock().unwrap().clone();
        crate::ipc::shm::validate_channel_name(&settings.channel)
            .map_err(|e| gst::error_msg!(gst::ResourceError::Settings, ("{}", e)))?;
        if settings.output_memory == OutputMemory::GstCuda && !gstcuda::available() {
            return Err(gst::error_msg!(
                gst::ResourceError::Settings,
                ("output-memory=gstcuda needs GStreamer's CUDA library (libgstcuda-1.0, gst-plugins-bad) and a CUDA driver")
            ));
        }
        *self.gst_cuda_pool.lock().unwrap() = None;
        *self.state.lock().unwrap() = State::default();
        *self.stats.lock().unwrap() = Stats::default();
        self.interrupt.store(false, Ordering::SeqCst);
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        // Buffers still downstream keep their slots until they are dropped.
        *self.waker.lock().unwrap() = None;
        if let Some(pool) = self.gst_cuda_pool.lock().unwrap().take() {
            let _ = pool.set_active(false);
        }
        *self.state.lock().unwrap() = State::default();
        Ok(())
    }

    fn is_seekable(&self) -> bool {
        false
    }

    fn query(&self, query: &mut gst::QueryRef) -> bool {
        self.cuda_context.query(self.obj().upcast_ref(), query)
            || BaseSrcImplExt::parent_query(self, query)
    }

    fn negotiate(&self) -> Result<(), gst::LoggableError> {
        // Caps come from the channel: negotiated in `create` once attached,
        // and again here when downstream asks for a reconfiguration.
        let mut state = self.state.lock().unwrap();
        let Some(connection) = state.connection.as_mut() else {
            return Ok(());
        };
        let Some(caps) = connection.channel_caps.clone() else {
            return Ok(());
        };
        self.negotiate_output(connection, &caps)
            .map_err(|_| gst::loggable_error!(CAT, "renegotiation failed"))
    }

    fn caps(&self, filter: Option<&gst::Caps>) -> Option<gst::Caps> {
        let state = self.state.lock().unwrap();
        let caps = match state.connection.as_ref() {
            Some(Connection {
                channel_caps: Some(caps),
                kind,
                ..
            }) => {
                let mut all = gst::Caps::new_empty();
                if *kind == TransportKind::Cuda {
                    all.merge(memory::with_cuda_feature(caps));
                }
                all.merge(caps.clone());
                all
            }
            _ => self.obj().src_pad().pad_template_caps(),
        };
        Some(match filter {
            Some(f) => f.intersect_with_mode(&caps, gst::CapsIntersectMode::First),
            None => caps,
        })
    }

    fn unlock(&self) -> Result<(), gst::ErrorMessage> {
        self.interrupt.store(true, Ordering::SeqCst);
        if let Some(waker) = self.waker.lock().unwrap().as_ref() {
            waker.wake();
        }
        Ok(())
    }

    fn unlock_stop(&self) -> Result<(), gst::ErrorMessage> {
        self.interrupt.store(false, Ordering::SeqCst);
        Ok(())
    }
}

impl PushSrcImpl for CudaIpcSrc {
    fn create(
        &self,
        _buffer: Option<&mut gst::BufferRef>,
    ) -> Result<CreateSuccess, gst::FlowError> {
        let mut state = self.state.lock().unwrap();
        loop {
            if state.connection.is_none() {
                self.connect(&mut state)?;
            }
            let connection = state.connection.as_mut().unwrap();
            let waits_before = connection.consumer.waits();
            let item = connection.consumer.next(&self.interrupt, None);
            let waited = connection.consumer.waits() - waits_before;
            self.stats.lock().unwrap().waits += waited;
            match item {
                Ok(Item::Eos) => {
                    gst::debug!(CAT, imp = self, "end of stream from the producer");
                    return Err(gst::FlowError::Eos);
                }
                Ok(Item::Frame(frame)) => {
                    // Publish-to-receive: the frame is ours from here on.
                    let latency =
                        crate::ipc::shm::monotonic_ns().saturating_sub(frame.publish_time_ns);
                    self.stats.lock().unwrap().latency.record(latency);
                    if let Some(buffer) = self.frame_to_buffer(&mut state, frame)? {
                        if self.ticker.due() {
                            let _ = self.obj().post_message(
                                gst::message::Element::builder(self.stats_structure())
                                    .src(&*self.obj())
                                    .build(),
                            );
                        }
                        return Ok(CreateSuccess::NewBuffer(buffer));
                    }
                    if let Some(gone) = state.gone.take() {
                        match self.producer_lost(&mut state, gone)? {
                            Lost::Eos => return Err(gst::FlowError::Eos),
                            Lost::Reconnect => continue,
                        }
                    }
                }
                Err(ChannelError::Interrupted) => return Err(gst::FlowError::Flushing),
                Err(ChannelError::ProducerGone(gone)) => {
                    match self.producer_lost(&mut state, gone)? {
                        Lost::Eos => return Err(gst::FlowError::Eos),
                        Lost::Reconnect => continue,
                    }
                }
                Err(ChannelError::Corrupt(what)) => return Err(self.corrupt(what)),
                Err(e) => {
                    gst::element_imp_error!(self, gst::ResourceError::Read, ("{}", e));
                    return Err(gst::FlowError::Error);
                }
            }
        }
    }
}
