// SPDX-License-Identifier: MPL-2.0

use std::sync::{Arc, LazyLock, Mutex};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::prelude::*;

use crate::enums::OutputMemory;
use crate::frame_copy::{self, Source, StreamOf, Target};
use crate::gstcuda::{self, Access, MappedCudaMemory, OrderedAccess, StreamOrdering};
use crate::memory::{self, CudaAllocator};
use crate::output_pool::{self, CudaOutput, SizedPool};
use crate::pattern::kernels::{self, Geometry, Planes};
use crate::pattern::{self, Pattern};
use crate::video;
use cudaipc_transport::cuda::{Device, DeviceBuffer, DeviceRegion, Module};

pub(crate) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "cudatestsrc",
        gst::DebugColorFlags::empty(),
        Some("CUDA test source"),
    )
});

const DEFAULT_PATTERN: Pattern = Pattern::Counter;
const DEFAULT_IS_LIVE: bool = false;
const DEFAULT_CUDA_DEVICE_ID: i32 = 0;
/// What unconstrained caps fixate to.
const DEFAULT_WIDTH: i32 = 3840;
const DEFAULT_HEIGHT: i32 = 2160;
const DEFAULT_FORMAT: &str = "RGB";
const DEFAULT_FPS: i32 = 30;

const GENERATE_MODULE: &str = "cudaipc-generate";
#[derive(Debug, Clone, Copy)]
struct Settings {
    pattern: Pattern,
    is_live: bool,
    cuda_device_id: i32,
    output_memory: OutputMemory,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            pattern: DEFAULT_PATTERN,
            is_live: DEFAULT_IS_LIVE,
            cuda_device_id: DEFAULT_CUDA_DEVICE_ID,
            output_memory: OutputMemory::default(),
        }
    }
}

struct Gpu {
    device: Arc<Device>,
    module: Arc<Module>,
    /// Orders GStreamer's streams against ours (GStreamer 1.24+).
    ordering: Option<StreamOrdering>,
}

#[derive(Default)]
struct State {
    gpu: Option<Gpu>,
    info: Option<gst_video::VideoInfo>,
    geometry: Geometry,
    cuda_memory: bool,
    /// Frames produced since start: the next frame's number.
    frames: u64,
    /// Timestamps count from here (a frame rate change moves it) ...
    rate_base: gst::ClockTime,
    /// ... in frames of the current rate.
    rate_frames: u64,
    /// Live: running time of the first frame.
    live_base: Option<gst::ClockTime>,
    /// System memory: frames are generated here, then downloaded.
    scratch: Option<DeviceRegion>,
}

fn layout_error(e: String) -> gst::ErrorMessage {
    gst::error_msg!(gst::StreamError::Format, ("Bad frame layout: {e}"))
}

fn copy_error(e: crate::copy_error::FrameCopyError) -> gst::ErrorMessage {
    gst::error_msg!(gst::StreamError::Failed, ("Frame copy failed: {e}"))
}

fn gpu_error(e: cudaipc_transport::cuda::CudaError) -> gst::ErrorMessage {
    gst::error_msg!(gst::StreamError::Failed, ("GPU work failed: {e}"))
}

/// Generates frame `frame` into `scratch` (grown to `size` bytes when
/// smaller), laid out as `layout`: for outputs the kernels cannot write.
#[allow(clippy::too_many_arguments)]
fn generate_in_scratch<'a>(
    scratch: &'a mut Option<DeviceRegion>,
    gpu: &Gpu,
    info: &gst_video::VideoInfo,
    geometry: &Geometry,
    layout: &[(usize, usize)],
    size: usize,
    pattern: Pattern,
    frame: u32,
) -> Result<&'a DeviceRegion, gst::ErrorMessage> {
    if scratch.as_ref().is_none_or(|s| s.len() < size) {
        let region = DeviceBuffer::new(&gpu.device, size)
            .map_err(gpu_error)?
            .into_region();
        // The kernels write every pixel but not the padding at the end of
        // rows, which the download carries too: zeroed once, it is defined
        // (compute-sanitizer's initcheck reported it) and the same in every
        // frame.
        region.memset(0).map_err(gpu_error)?;
        *scratch = Some(region);
    }
    let scratch = scratch.as_ref().unwrap();
    // SAFETY: the scratch region holds at least `size` bytes and stays
    // allocated until the stream has run the kernel (cuMemFree waits).
    let planes = unsafe { Planes::at(info, scratch.ptr(), size, layout) }.map_err(layout_error)?;
    kernels::generate(&gpu.module, &gpu.device, geometry, &planes, pattern, frame)
        .map_err(gpu_error)?;
    Ok(scratch)
}

/// Time of `frames` frames at `fps` (> 0).
fn frames_to_time(frames: u64, fps: gst::Fraction) -> gst::ClockTime {
    let ns = frames
        .mul_div_floor(
            gst::ClockTime::SECOND.nseconds() * fps.denom() as u64,
            fps.numer() as u64,
        )
        .unwrap_or(u64::MAX);
    gst::ClockTime::from_nseconds(ns)
}

#[derive(Default)]
pub struct CudaTestSrc {
    settings: Mutex<Settings>,
    state: Mutex<State>,
    /// Shared with GStreamer's CUDA elements (`gst.cuda.context`).
    cuda_context: gstcuda::ContextShare,
}

impl CudaTestSrc {
    fn running_time_now(&self) -> Option<gst::ClockTime> {
        let obj = self.obj();
        let clock = obj.clock()?;
        clock.time().checked_sub(obj.base_time()?)
    }

    /// PTS and duration of the next frame (advances the counters).
    fn next_timestamps(
        &self,
        state: &mut State,
        fps: gst::Fraction,
        is_live: bool,
    ) -> (Option<gst::ClockTime>, Option<gst::ClockTime>) {
        if fps.numer() <= 0 {
            // As fast as possible: no timing, except a live source stamps
            // the running time at which it produced the frame.
            return (
                if is_live {
                    self.running_time_now()
                } else {
                    None
                },
                None,
            );
        }
        let base = if is_live {
            *state
                .live_base
                .get_or_insert_with(|| self.running_time_now().unwrap_or(gst::ClockTime::ZERO))
        } else {
            gst::ClockTime::ZERO
        } + state.rate_base;
        let start = base + frames_to_time(state.rate_frames, fps);
        let end = base + frames_to_time(state.rate_frames + 1, fps);
        state.rate_frames += 1;
        (Some(start), Some(end - start))
    }

    /// Writes the next frame into `buffer`.
    fn generate_into(
        &self,
        state: &mut State,
        buffer: &mut gst::BufferRef,
        pattern: Pattern,
    ) -> Result<(), gst::ErrorMessage> {
        let State {
            gpu,
            info,
            geometry,
            cuda_memory,
            frames,
            scratch,
            ..
        } = state;
        let (Some(gpu), Some(info)) = (gpu.as_ref(), info.as_ref()) else {
            return Err(gst::error_msg!(
                gst::CoreError::Negotiation,
                ("cudatestsrc produced a frame before it was started and negotiated")
            ));
        };
        // The pattern's frame number wraps at 2^32 (verify expects that).
        let frame = *frames as u32;
        if buffer.n_memory() == 1 && gstcuda::is_cuda_memory(buffer.peek_memory(0)) {
            // GstCudaMemory of GStreamer's CUDA library.
            let stream = gpu.device.stream();
            // Downstream's reads of the memory's last frame may still be
            // queued on its stream: written after them.
            let access = OrderedAccess::begin(
                gpu.ordering.as_ref(),
                buffer.peek_memory(0),
                &stream,
                Access::Write,
            )
            .map_err(gpu_error)?;
            let mapped = MappedCudaMemory::of_buffer(buffer, true).ok_or_else(|| {
                gst::error_msg!(
                    gst::StreamError::Failed,
                    ("Cannot map the output GstCudaMemory for the GPU")
                )
            })?;
            let layout: Vec<(usize, usize)> = mapped
                .planes
                .iter()
                .map(|&(offset, stride)| (offset as usize, stride as usize))
                .collect();
            if mapped.context.is_primary_of(&gpu.device) {
                // SAFETY: the mapped GstCudaMemory holds `mapped.size` bytes
                // and GStreamer frees it only after a stream sync.
                let planes = unsafe { Planes::at(info, mapped.ptr, mapped.size, &layout) }
                    .map_err(layout_error)?;
                kernels::generate(&gpu.module, &gpu.device, geometry, &planes, pattern, frame)
                    .map_err(gpu_error)?;
            } else {
                // Memory of another CUDA context: our kernels cannot touch
                // it, a copy can.
                let generated = generate_in_scratch(
                    scratch,
                    gpu,
                    info,
                    geometry,
                    &pattern::default_planes(info),
                    info.size(),
                    pattern,
                    frame,
                )?;
                let dst = mapped.region().map_err(gpu_error)?;
                // On our stream, which the ordering is about.
                frame_copy::copy_frame(
                    info,
                    Source::Device(generated),
                    &video::planes(info),
                    Target::Device(&dst),
                    &mapped.planes,
                    StreamOf::Source,
                )
                .map_err(copy_error)?;
            }
            drop(mapped);
            // Memory with a stream (1.24+) is pushed with the writes still
            // queued, its readers ordered after them; GStreamer 1.22's CUDA
            // elements take pushed memory as ready.
            access.finish(buffer.peek_memory(0)).map_err(gpu_error)?;
            return Ok(());
        }
        let layout = pattern::buffer_planes(info, buffer).map_err(layout_error)?;
        if *cuda_memory {
            let Some(mem) = memory::buffer_device_memory(buffer) else {
                return Err(gst::error_msg!(
                    gst::StreamError::Format,
                    ("The output buffer is not CUDA memory of this plugin (CudaIpcMemory)"),
                    ["buffer {buffer:?}"]
                ));
            };
            // SAFETY: the buffer's CudaIpcMemory holds `mem.size` bytes and
            // is freed with cuMemFree, which waits for the kernel.
            let planes =
                unsafe { Planes::at(info, mem.ptr, mem.size, &layout) }.map_err(layout_error)?;
            // Downstream's pool may live on another device than ours.
            let module = if mem.device.ordinal() == gpu.device.ordinal() {
                gpu.module.clone()
            } else {
                kernels::load(&mem.device, GENERATE_MODULE).map_err(gpu_error)?
            };
            kernels::generate(&module, &mem.device, geometry, &planes, pattern, frame)
                .map_err(gpu_error)?;
        } else {
            let generated = generate_in_scratch(
                scratch,
                gpu,
                info,
                geometry,
                &layout,
                buffer.size(),
                pattern,
                frame,
            )?;
            let mut map = buffer.map_writable().map_err(|_| {
                gst::error_msg!(gst::ResourceError::Write, ("Cannot map the output buffer"))
            })?;
            let planes: Vec<(u64, u32)> = layout
                .iter()
                .map(|&(offset, stride)| (offset as u64, stride as u32))
                .collect();
            // Synchronises the stream: the price of system memory.
            frame_copy::copy_frame(
                info,
                Source::Device(generated),
                &planes,
                Target::Host(map.as_mut_slice()),
                &planes,
                StreamOf::Source,
            )
            .map_err(copy_error)?;
        }
        Ok(())
    }
}

#[glib::object_subclass]
impl ObjectSubclass for CudaTestSrc {
    const NAME: &'static str = "GstRsCudaTestSrc";
    type Type = super::CudaTestSrc;
    type ParentType = gst_base::PushSrc;
}

impl ObjectImpl for CudaTestSrc {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPERTIES: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            vec![
                glib::ParamSpecEnum::builder_with_default("pattern", DEFAULT_PATTERN)
                    .nick("Pattern")
                    .blurb("What to draw: counter carries the frame number in every row (checkable), gradient moves")
                    .mutable_playing()
                    .build(),
                glib::ParamSpecBoolean::builder("is-live")
                    .nick("Is live")
                    .blurb("Behave as a live source: produce at the frame rate, timestamps from the running time")
                    .default_value(DEFAULT_IS_LIVE)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecInt::builder("cuda-device-id")
                    .nick("CUDA device")
                    .blurb("Ordinal of the CUDA device that generates the frames")
                    .minimum(0)
                    .default_value(DEFAULT_CUDA_DEVICE_ID)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("output-memory", OutputMemory::default())
                    .nick("Output memory")
                    .blurb("Memory of CUDA output buffers: the plugin's own, or GstCudaMemory for GStreamer's CUDA elements (nvcodec)")
                    .mutable_ready()
                    .build(),
            ]
        });
        PROPERTIES.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut settings = self.settings.lock().unwrap();
        match pspec.name() {
            "pattern" => {
                settings.pattern = value.get().expect("type checked upstream");
                gst::info!(CAT, imp = self, "pattern: {:?}", settings.pattern);
            }
            "is-live" => {
                settings.is_live = value.get().expect("type checked upstream");
                let is_live = settings.is_live;
                drop(settings);
                self.obj().set_live(is_live);
            }
            "cuda-device-id" => {
                settings.cuda_device_id = value.get().expect("type checked upstream");
            }
            "output-memory" => {
                settings.output_memory = value.get().expect("type checked upstream");
            }
            _ => unimplemented!(),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        let settings = self.settings.lock().unwrap();
        match pspec.name() {
            "pattern" => settings.pattern.to_value(),
            "is-live" => settings.is_live.to_value(),
            "cuda-device-id" => settings.cuda_device_id.to_value(),
            "output-memory" => settings.output_memory.to_value(),
            _ => unimplemented!(),
        }
    }

    fn constructed(&self) {
        self.parent_constructed();
        crate::element_names::name_after_factory(&*self.obj(), "cudatestsrc");
        let obj = self.obj();
        obj.set_live(DEFAULT_IS_LIVE);
        obj.set_format(gst::Format::Time);
    }
}

impl GstObjectImpl for CudaTestSrc {}

impl ElementImpl for CudaTestSrc {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static ELEMENT_METADATA: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "CUDA test source",
                "Source/Video",
                "Generates video frames on the GPU; the counter pattern carries the frame number in every row",
                "gst-cudaipc developers",
            )
        });
        Some(&*ELEMENT_METADATA)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static PAD_TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            // CUDA memory first: it is what negotiation prefers.
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
        let device_id = self.settings.lock().unwrap().cuda_device_id;
        self.cuda_context
            .set_context(self.obj().upcast_ref(), context, device_id);
        self.parent_set_context(context)
    }

    fn change_state(
        &self,
        transition: gst::StateChange,
    ) -> Result<gst::StateChangeSuccess, gst::StateChangeError> {
        let device_id = self.settings.lock().unwrap().cuda_device_id;
        self.cuda_context
            .before_change_state(self.obj().upcast_ref(), transition, device_id, None);
        let success = self.parent_change_state(transition)?;
        self.cuda_context.after_change_state(transition);
        Ok(success)
    }
}

impl BaseSrcImpl for CudaTestSrc {
    /// A live source produces at its rate: GstBaseSrc waits on the clock
    /// until each buffer's time (as videotestsrc does), whatever the sink's
    /// `sync`. Not live: no wait.
    fn times(&self, buffer: &gst::BufferRef) -> (Option<gst::ClockTime>, Option<gst::ClockTime>) {
        if !self.obj().is_live() {
            return (None, None);
        }
        let start = buffer.pts();
        (start, start.zip(buffer.duration()).map(|(s, d)| s + d))
    }

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let Settings {
            cuda_device_id: id,
            output_memory,
            ..
        } = *self.settings.lock().unwrap();
        if output_memory == OutputMemory::GstCuda && !gstcuda::available() {
            return Err(gst::error_msg!(
                gst::ResourceError::Settings,
                ("output-memory=gstcuda needs GStreamer's CUDA library (libgstcuda-1.0, gst-plugins-bad) and a CUDA driver")
            ));
        }
        let device = Device::get(id).map_err(|e| match e {
            // The generic advice names the sink's `transport` property,
            // which this element does not have.
            cudaipc_transport::cuda::CudaError::NoDriver => gst::error_msg!(
                gst::ResourceError::NotFound,
                ("cudatestsrc needs CUDA device {id}, but the CUDA driver library (libcuda.so.1) was not found: install the NVIDIA driver; without a GPU, use videotestsrc (rscudaipcsink transport=host carries system memory)")
            ),
            e => gst::error_msg!(
                gst::ResourceError::NotFound,
                ("cudatestsrc needs CUDA device {id}: {e}")
            ),
        })?;
        let module = kernels::load(&device, GENERATE_MODULE).map_err(|e| {
            gst::error_msg!(
                gst::LibraryError::Init,
                ("Cannot build cudatestsrc's GPU kernels: {e}")
            )
        })?;
        gst::info!(
            CAT,
            imp = self,
            "generating on CUDA device {id} ({})",
            device.name()
        );
        self.cuda_context.ensure(self.obj().upcast_ref(), &device);
        *self.state.lock().unwrap() = State {
            gpu: Some(Gpu {
                ordering: (gstcuda::api_level() >= gstcuda::ApiLevel::V1_24)
                    .then(|| StreamOrdering::new(device.clone())),
                device,
                module,
            }),
            ..Default::default()
        };
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        *self.state.lock().unwrap() = State::default();
        Ok(())
    }

    fn is_seekable(&self) -> bool {
        // Frame numbers must follow each other for the counter pattern.
        false
    }

    fn negotiate(&self) -> Result<(), gst::LoggableError> {
        let result = self.parent_negotiate();
        let src_pad = self.obj().static_pad("src").unwrap();
        if result.is_err() && !src_pad.pad_flags().contains(gst::PadFlags::FLUSHING) {
            let downstream = src_pad.peer_query_caps(None);
            gst::element_imp_error!(
                self,
                gst::CoreError::Negotiation,
                ("cudatestsrc cannot produce a format downstream accepts"),
                [
                    "downstream accepts {downstream}; cudatestsrc produces {}",
                    video::any_memory_caps()
                ]
            );
        }
        result
    }

    fn fixate(&self, mut caps: gst::Caps) -> gst::Caps {
        caps.truncate();
        {
            let caps = caps.make_mut();
            let s = caps.structure_mut(0).unwrap();
            s.fixate_field_nearest_int("width", DEFAULT_WIDTH);
            s.fixate_field_nearest_int("height", DEFAULT_HEIGHT);
            if s.has_field("framerate") {
                s.fixate_field_nearest_fraction("framerate", gst::Fraction::new(DEFAULT_FPS, 1));
            }
            if s.has_field("pixel-aspect-ratio") {
                s.fixate_field_nearest_fraction("pixel-aspect-ratio", gst::Fraction::new(1, 1));
            }
            s.fixate_field_str("format", DEFAULT_FORMAT);
        }
        self.parent_fixate(caps)
    }

    fn set_caps(&self, caps: &gst::Caps) -> Result<(), gst::LoggableError> {
        let info = gst_video::VideoInfo::from_caps(caps)
            .map_err(|_| gst::loggable_error!(CAT, "Invalid video caps {caps}"))?;
        let mut state = self.state.lock().unwrap();
        let old_fps = state.info.as_ref().map(|old| old.fps());
        if let Some(old_fps) = old_fps
            && old_fps != info.fps()
        {
            // Keep time running on from the last frame at the old rate.
            if old_fps.numer() > 0 {
                let elapsed = frames_to_time(state.rate_frames, old_fps);
                state.rate_base += elapsed;
            }
            state.rate_frames = 0;
        }
        state.geometry = Geometry::new(&info);
        state.cuda_memory = memory::caps_are_cuda(caps);
        gst::debug!(
            CAT,
            imp = self,
            "producing {caps} ({} memory)",
            if state.cuda_memory { "CUDA" } else { "system" }
        );
        state.info = Some(info);
        Ok(())
    }

    fn query(&self, query: &mut gst::QueryRef) -> bool {
        if self.cuda_context.query(self.obj().upcast_ref(), query) {
            return true;
        }
        if let gst::QueryViewMut::Latency(q) = query.view_mut() {
            let fps = self.state.lock().unwrap().info.as_ref().map(|i| i.fps());
            if let Some(fps) = fps.filter(|f| f.numer() > 0) {
                // One frame: what a live source needs to produce it.
                q.set(self.obj().is_live(), frames_to_time(1, fps), None);
                return true;
            }
        }
        BaseSrcImplExt::parent_query(self, query)
    }

    fn decide_allocation(
        &self,
        query: &mut gst::query::Allocation,
    ) -> Result<(), gst::LoggableError> {
        let (Some(caps), _) = query.get_owned() else {
            return Err(gst::loggable_error!(CAT, "Allocation query without caps"));
        };
        let info = gst_video::VideoInfo::from_caps(&caps)
            .map_err(|_| gst::loggable_error!(CAT, "Invalid video caps {caps}"))?;
        let frame_size = info.size() as u32;
        if !memory::caps_are_cuda(&caps) {
            // System memory: a pool of whole frames (filled by a download).
            let pool = gst_video::VideoBufferPool::new();
            let mut config = pool.config();
            config.set_params(Some(&caps), frame_size, 0, 0);
            config.add_option(gst_video::BUFFER_POOL_OPTION_VIDEO_META.as_str());
            pool.set_config(config)
                .map_err(|e| gst::loggable_error!(CAT, "Cannot configure a buffer pool: {e}"))?;
            if query.allocation_pools().next().is_some() {
                query.set_nth_allocation_pool(0, Some(&pool), frame_size, 0, 0);
            } else {
                query.add_allocation_pool(Some(&pool), frame_size, 0, 0);
            }
            return Ok(());
        }
        let output_memory = self.settings.lock().unwrap().output_memory;
        let chosen = output_pool::choose_cuda_output(
            self.obj().upcast_ref(),
            query,
            &caps,
            output_memory,
            &self.cuda_context,
        )
        .map_err(|e| gst::loggable_error!(CAT, "{e}"))?;
        let had_pool = query.allocation_pools().next().is_some();
        let downstream = match chosen {
            CudaOutput::GstCuda(chosen) => Some(chosen),
            CudaOutput::Plugin(Some(proposed)) if proposed.configure(&caps) => Some(proposed),
            CudaOutput::Plugin(Some(refused)) => {
                gst::warning!(
                    CAT,
                    imp = self,
                    "{} refused {caps}; using our own CUDA pool",
                    refused.pool.name()
                );
                None
            }
            CudaOutput::Plugin(None) => None,
        };
        if let Some(chosen) = downstream {
            gst::info!(CAT, imp = self, "writing into {}", chosen.pool.name());
            let SizedPool {
                pool,
                size,
                min,
                max,
            } = chosen;
            if had_pool {
                query.set_nth_allocation_pool(0, Some(&pool), size, min, max);
            } else {
                query.add_allocation_pool(Some(&pool), size, min, max);
            }
            return Ok(());
        }
        let device = match &self.state.lock().unwrap().gpu {
            Some(gpu) => gpu.device.clone(),
            None => return Err(gst::loggable_error!(CAT, "Not started")),
        };
        let pool = gst_video::VideoBufferPool::new();
        let mut config = pool.config();
        config.set_params(Some(&caps), frame_size, 0, 0);
        config.set_allocator(Some(&CudaAllocator::for_device(&device)), None);
        config.add_option(gst_video::BUFFER_POOL_OPTION_VIDEO_META.as_str());
        pool.set_config(config)
            .map_err(|e| gst::loggable_error!(CAT, "Cannot configure a CUDA buffer pool: {e}"))?;
        gst::debug!(CAT, imp = self, "using our own CUDA buffer pool");
        if query.allocation_pools().next().is_some() {
            query.set_nth_allocation_pool(0, Some(&pool), frame_size, 0, 0);
        } else {
            query.add_allocation_pool(Some(&pool), frame_size, 0, 0);
        }
        Ok(())
    }
}

impl PushSrcImpl for CudaTestSrc {
    // GstPushSrc's C class has no create of its own to fall back on, so a
    // subclass that fills buffers acquires them itself.
    fn create(
        &self,
        buffer: Option<&mut gst::BufferRef>,
    ) -> Result<gst_base::subclass::base_src::CreateSuccess, gst::FlowError> {
        use gst_base::subclass::base_src::CreateSuccess;
        if let Some(buffer) = buffer {
            PushSrcImpl::fill(self, buffer)?;
            return Ok(CreateSuccess::FilledBuffer);
        }
        let pool = self
            .obj()
            .buffer_pool()
            .ok_or(gst::FlowError::NotNegotiated)?;
        let mut buffer = pool.acquire_buffer(None)?;
        PushSrcImpl::fill(self, buffer.get_mut().ok_or(gst::FlowError::Error)?)?;
        Ok(CreateSuccess::NewBuffer(buffer))
    }

    fn fill(&self, buffer: &mut gst::BufferRef) -> Result<gst::FlowSuccess, gst::FlowError> {
        let Settings {
            pattern, is_live, ..
        } = *self.settings.lock().unwrap();
        let mut state = self.state.lock().unwrap();
        if let Err(message) = self.generate_into(&mut state, buffer, pattern) {
            drop(state);
            self.post_error_message(message);
            return Err(gst::FlowError::Error);
        }
        let fps = state
            .info
            .as_ref()
            .map(|i| i.fps())
            .unwrap_or(gst::Fraction::new(0, 1));
        let (pts, duration) = self.next_timestamps(&mut state, fps, is_live);
        let n = state.frames;
        state.frames += 1;
        drop(state);
        buffer.set_pts(pts);
        buffer.set_duration(duration);
        buffer.set_offset(n);
        buffer.set_offset_end(n + 1);
        gst::trace!(CAT, imp = self, "frame {n} pts {}", pts.display());
        Ok(gst::FlowSuccess::Ok)
    }
}
