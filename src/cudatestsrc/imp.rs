// SPDX-License-Identifier: MPL-2.0

use std::sync::{LazyLock, Mutex};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::prelude::*;

use super::generate::{self, GENERATE_MODULE};
use super::settings::{
    DEFAULT_CUDA_DEVICE_ID, DEFAULT_FORMAT, DEFAULT_FPS, DEFAULT_HEIGHT, DEFAULT_IS_LIVE,
    DEFAULT_PATTERN, DEFAULT_WIDTH, Settings,
};
use super::state::{Gpu, State};
use crate::enums::OutputMemory;
use crate::gstcuda::{self, StreamOrdering};
use crate::memory;
use crate::pattern::kernels::{self, Geometry};
use crate::video;
use cudaipc_transport::cuda::Device;

pub(crate) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "cudatestsrc",
        gst::DebugColorFlags::empty(),
        Some("CUDA test source"),
    )
});

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
    pub(super) settings: Mutex<Settings>,
    pub(super) state: Mutex<State>,
    /// Shared with GStreamer's CUDA elements (`gst.cuda.context`).
    pub(super) cuda_context: gstcuda::ContextShare,
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
            .change_state(self.obj().upcast_ref(), transition, device_id, None, || {
                self.parent_change_state(transition)
            })
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
        self.choose_pool(query)
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
        if let Err(message) = generate::generate_into(&mut state, buffer, pattern) {
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
