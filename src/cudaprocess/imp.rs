// SPDX-License-Identifier: MPL-2.0

use std::sync::{Arc, LazyLock, Mutex};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_transform::{InputBuffer, PrepareOutputBufferSuccess};
use gst_base::subclass::prelude::*;
use gst_video::VideoFormat;

use super::{Operation, brightness_delta, gamma_table};
use crate::memory::{self, CudaAllocator};
use crate::pattern;
use crate::pattern::kernels::{
    self, Geometry, Planes, ROLE_KEEP, ROLE_LUMA3, ROLE_LUMA4, ROLE_NEUTRAL, Verifier, VerifyReport,
};
use crate::video;
use cudaipc_transport::cuda::{CudaError, Device, DeviceBuffer, DeviceRegion, Module};

pub(crate) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "cudaprocess",
        gst::DebugColorFlags::empty(),
        Some("CUDA frame processing and verification"),
    )
});

const DEFAULT_OPERATION: Operation = Operation::None;
const DEFAULT_BRIGHTNESS: f64 = 0.1;
const DEFAULT_GAMMA: f64 = 2.2;
const DEFAULT_VERIFY: bool = false;
const DEFAULT_VERIFY_FATAL: bool = false;

const PROCESS_MODULE: &str = "cudaipc-process";

#[derive(Debug, Clone, Copy)]
struct Settings {
    operation: Operation,
    brightness: f64,
    gamma: f64,
    verify: bool,
    verify_fatal: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            operation: DEFAULT_OPERATION,
            brightness: DEFAULT_BRIGHTNESS,
            gamma: DEFAULT_GAMMA,
            verify: DEFAULT_VERIFY,
            verify_fatal: DEFAULT_VERIFY_FATAL,
        }
    }
}

/// Which bytes of a format the operations touch.
#[derive(Debug, Default, Clone, Copy)]
struct FormatTraits {
    /// Colour bytes of each 4-byte word (alpha and padding excluded).
    colour_mask: u32,
    /// Planes `invert` changes: all of them.
    all_planes: u32,
    /// Planes `brightness` and `gamma` change: RGB or luma, not chroma.
    intensity_planes: u32,
    /// `grayscale`: per plane role (4 bits each) and the red byte.
    grayscale_roles: u32,
    red_index: u32,
}

impl FormatTraits {
    fn of(format: VideoFormat) -> Self {
        let packed4 = |red_index| FormatTraits {
            colour_mask: 0x00FF_FFFF,
            all_planes: 0b1,
            intensity_planes: 0b1,
            grayscale_roles: ROLE_LUMA4,
            red_index,
        };
        match format {
            VideoFormat::Rgba | VideoFormat::Rgbx => packed4(0),
            VideoFormat::Bgra | VideoFormat::Bgrx => packed4(2),
            VideoFormat::Rgb => FormatTraits {
                colour_mask: u32::MAX,
                all_planes: 0b1,
                intensity_planes: 0b1,
                grayscale_roles: ROLE_LUMA3,
                red_index: 0,
            },
            VideoFormat::Nv12 => FormatTraits {
                colour_mask: u32::MAX,
                all_planes: 0b11,
                intensity_planes: 0b1,
                grayscale_roles: ROLE_KEEP | ROLE_NEUTRAL << 4,
                red_index: 0,
            },
            VideoFormat::I420 => FormatTraits {
                colour_mask: u32::MAX,
                all_planes: 0b111,
                intensity_planes: 0b1,
                grayscale_roles: ROLE_KEEP | ROLE_NEUTRAL << 4 | ROLE_NEUTRAL << 8,
                red_index: 0,
            },
            // GRAY8 (and anything else the caps let through): every byte is
            // intensity; grayscale keeps it.
            _ => FormatTraits {
                colour_mask: u32::MAX,
                all_planes: 0b1,
                intensity_planes: 0b1,
                grayscale_roles: ROLE_KEEP,
                red_index: 0,
            },
        }
    }
}

/// The processing kernels of one device.
struct Gpu {
    device: Arc<Device>,
    module: Arc<Module>,
    /// The gamma table in device memory, and the gamma it was made for.
    gamma_table: Option<(f64, DeviceRegion)>,
}

#[derive(Default)]
struct State {
    info: Option<gst_video::VideoInfo>,
    caps: Option<gst::Caps>,
    geometry: Geometry,
    traits: FormatTraits,
    gpu: Option<Gpu>,
    verifier: Option<Verifier>,
    /// The next verified frame starts a new sequence.
    new_sequence: bool,
    /// Last totals read, kept after stop for the `stats` property.
    report: VerifyReport,
    /// Whether the first bad frame was posted.
    reported: bool,
    /// A fatal verification error was posted: refuse further frames.
    failed: bool,
    /// Pool for out-of-place output, and the device it allocates on.
    pool: Option<(i32, gst::BufferPool)>,
    /// Set by prepare_output_buffer when the output is a new buffer: the
    /// input it must be computed from.
    pending_source: Option<gst::Buffer>,
    frames: u64,
    /// Whether rejected caps were already reported.
    warned_caps: bool,
}

/// What to post once the state lock is released.
#[derive(Default)]
struct Posts {
    message: Option<gst::Message>,
    error: Option<gst::ErrorMessage>,
}

fn cuda_error(what: &str) -> impl Fn(CudaError) -> gst::ErrorMessage + '_ {
    move |e| gst::error_msg!(gst::StreamError::Failed, ("{what}: {e}"))
}

/// The planes of `buffer` (a frame of `info`) and the device holding them.
fn frame_planes(
    info: &gst_video::VideoInfo,
    buffer: &gst::BufferRef,
) -> Result<(Planes, Arc<Device>), gst::ErrorMessage> {
    let Some(mem) = memory::buffer_device_memory(buffer) else {
        return Err(gst::error_msg!(
            gst::StreamError::Format,
            ("cudaprocess got a buffer that is not CUDA memory of this plugin (CudaIpcMemory)"),
            [
                "buffer {buffer:?} with {} memory block(s)",
                buffer.n_memory()
            ]
        ));
    };
    let layout = pattern::buffer_planes(info, buffer)
        // SAFETY: the buffer's CudaIpcMemory holds `mem.size` bytes and is
        // freed with cuMemFree, which waits for the kernels on it.
        .and_then(|layout| unsafe { Planes::at(info, mem.ptr, mem.size, &layout) })
        .map_err(|e| gst::error_msg!(gst::StreamError::Format, ("Bad frame layout: {e}")))?;
    Ok((layout, mem.device))
}

#[derive(Default)]
pub struct CudaProcess {
    settings: Mutex<Settings>,
    state: Mutex<State>,
}

impl CudaProcess {
    fn post(&self, posts: Posts) {
        if let Some(message) = posts.message {
            let _ = self.obj().post_message(message);
        }
        if let Some(error) = posts.error {
            self.post_error_message(error);
        }
    }

    /// The element message (and, when fatal, the error) for the first bad
    /// frame, once.
    fn verdict(&self, state: &mut State, fatal: bool) -> Posts {
        let report = state.report;
        let Some(first_bad) = report.first_bad.filter(|_| !state.reported) else {
            return Posts::default();
        };
        state.reported = true;
        let description = first_bad.describe();
        gst::warning!(
            CAT,
            imp = self,
            "verification failed: {description} (corrupt {}, missing {})",
            report.corrupt,
            report.missing
        );
        let structure = gst::Structure::builder("cudaprocess-verify")
            .field("frame", first_bad.frame() as i64)
            .field("kind", first_bad.kind())
            .field("corrupt", report.corrupt)
            .field("missing", report.missing)
            .field("description", &description)
            .build();
        let message = gst::message::Element::builder(structure)
            .src(&*self.obj())
            .build();
        let error = fatal.then(|| {
            state.failed = true;
            gst::error_msg!(
                gst::StreamError::Failed,
                ("Frame check failed: {description}"),
                [
                    "{} corrupt and {} missing frame(s) in {} checked",
                    report.corrupt,
                    report.missing,
                    report.frames
                ]
            )
        });
        Posts {
            message: Some(message),
            error,
        }
    }

    /// Synchronises the stream once, reads the final totals and prepares
    /// what to post (EOS, stop).
    fn finish(&self, state: &mut State) -> Posts {
        let Some(verifier) = state.verifier.as_ref() else {
            return Posts::default();
        };
        match verifier.exact_report() {
            Ok(report) => state.report = report,
            Err(e) => gst::error!(CAT, imp = self, "cannot read the verification totals: {e}"),
        }
        gst::debug!(CAT, imp = self, "verification totals: {:?}", state.report);
        let fatal = self.settings.lock().unwrap().verify_fatal;
        self.verdict(state, fatal)
    }

    /// The processing kernels for `device`, loaded once.
    fn gpu<'a>(
        &self,
        gpu: &'a mut Option<Gpu>,
        device: &Arc<Device>,
    ) -> Result<&'a mut Gpu, gst::ErrorMessage> {
        if gpu
            .as_ref()
            .is_none_or(|g| g.device.ordinal() != device.ordinal())
        {
            let module = kernels::load(device, PROCESS_MODULE).map_err(|e| {
                gst::error_msg!(
                    gst::LibraryError::Init,
                    ("Cannot build cudaprocess's GPU kernels: {e}")
                )
            })?;
            gst::info!(
                CAT,
                imp = self,
                "processing on CUDA device {} ({})",
                device.ordinal(),
                device.name()
            );
            *gpu = Some(Gpu {
                device: device.clone(),
                module,
                gamma_table: None,
            });
        }
        Ok(gpu.as_mut().unwrap())
    }

    /// Verifies `src` (when asked) and applies the operation from `src`
    /// into `dst` (the same planes: in place; `None`: verify only).
    fn run(
        &self,
        state: &mut State,
        settings: &Settings,
        src: Planes,
        dst: Option<Planes>,
        device: &Arc<Device>,
    ) -> Result<(), gst::ErrorMessage> {
        let geometry = state.geometry;
        if settings.verify {
            if state
                .verifier
                .as_ref()
                .is_none_or(|v| v.device().ordinal() != device.ordinal())
            {
                state.verifier = Some(Verifier::new(device).map_err(|e| {
                    gst::error_msg!(
                        gst::LibraryError::Init,
                        ("Cannot set up frame verification: {e}")
                    )
                })?);
                state.new_sequence = true;
            }
            let verifier = state.verifier.as_ref().unwrap();
            if settings.operation == Operation::Invert
                && let Some(dst) = dst.as_ref()
            {
                // One pass reads, checks and writes the frame.
                let traits = state.traits;
                verifier
                    .check_and_invert(
                        &geometry,
                        &src,
                        dst,
                        traits.all_planes,
                        traits.colour_mask,
                        state.new_sequence,
                    )
                    .map_err(cuda_error("Frame verification failed"))?;
                state.new_sequence = false;
                return Ok(());
            }
            verifier
                .check(&geometry, &src, state.new_sequence)
                .map_err(cuda_error("Frame verification failed"))?;
            state.new_sequence = false;
        }
        let Some(dst) = dst else {
            return Ok(());
        };
        let traits = state.traits;
        let in_place = src == dst;
        let gpu = self.gpu(&mut state.gpu, device)?;
        let (operation, active_planes) = match settings.operation {
            Operation::None => (kernels::Operation::Invert, 0),
            Operation::Invert => (kernels::Operation::Invert, traits.all_planes),
            Operation::Brightness => {
                let delta = brightness_delta(settings.brightness);
                (
                    kernels::Operation::Brightness {
                        amount: delta.unsigned_abs() as u8,
                        darken: delta < 0,
                    },
                    traits.intensity_planes,
                )
            }
            Operation::Gamma => {
                if gpu
                    .gamma_table
                    .as_ref()
                    .is_none_or(|(gamma, _)| *gamma != settings.gamma)
                {
                    let table = DeviceBuffer::new(&gpu.device, 256)
                        .map_err(cuda_error("Cannot allocate the gamma table"))?
                        .into_region();
                    // Synchronises once per gamma change; earlier frames
                    // keep the table they were queued with (stream order).
                    table
                        .upload(&gamma_table(settings.gamma))
                        .map_err(cuda_error("Cannot upload the gamma table"))?;
                    gpu.gamma_table = Some((settings.gamma, table));
                }
                let lut = gpu.gamma_table.as_ref().unwrap().1.ptr();
                (kernels::Operation::Gamma { lut }, traits.intensity_planes)
            }
            Operation::Grayscale => (
                kernels::Operation::Grayscale {
                    roles: traits.grayscale_roles,
                    red_index: traits.red_index,
                },
                traits.all_planes,
            ),
        };
        let nothing_to_do = match operation {
            kernels::Operation::Grayscale { roles, .. } => roles == ROLE_KEEP,
            _ => active_planes == 0,
        };
        if in_place && nothing_to_do {
            return Ok(());
        }
        kernels::process(
            &gpu.module,
            &gpu.device,
            &geometry,
            &src,
            &dst,
            operation,
            active_planes,
            traits.colour_mask,
        )
        .map_err(cuda_error("Frame processing failed"))
    }

    /// Reads the (lagging) totals after a frame; what to post if a frame
    /// went bad.
    fn after_frame(&self, state: &mut State, settings: &Settings) -> Posts {
        let Some(verifier) = state.verifier.as_ref() else {
            return Posts::default();
        };
        state.report = verifier.report();
        self.verdict(state, settings.verify_fatal)
    }

    /// Runs `work` on one frame with the state locked, then reads the
    /// lagging verification totals and posts what they call for.
    /// `verify_only`: nothing to do unless `verify` is on.
    fn handle_frame(
        &self,
        verify_only: bool,
        work: impl FnOnce(&mut State, &Settings, Option<gst::Buffer>) -> Result<(), gst::ErrorMessage>,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        let settings = *self.settings.lock().unwrap();
        let mut state = self.state.lock().unwrap();
        // Taken first, so that it never outlives the frame it belongs to.
        let source = state.pending_source.take();
        if state.failed {
            return Err(gst::FlowError::Error);
        }
        state.frames += 1;
        if verify_only && !settings.verify {
            return Ok(gst::FlowSuccess::Ok);
        }
        let posts = match work(&mut state, &settings, source) {
            Ok(()) => self.after_frame(&mut state, &settings),
            Err(error) => Posts {
                message: None,
                error: Some(error),
            },
        };
        let failed = posts.error.is_some();
        drop(state);
        self.post(posts);
        if failed {
            Err(gst::FlowError::Error)
        } else {
            Ok(gst::FlowSuccess::Ok)
        }
    }

    /// Our pool for out-of-place output on `device`.
    fn output_pool(
        &self,
        state: &mut State,
        device: &Arc<Device>,
    ) -> Result<gst::BufferPool, gst::ErrorMessage> {
        if let Some((ordinal, pool)) = &state.pool
            && *ordinal == device.ordinal()
        {
            return Ok(pool.clone());
        }
        if let Some((_, old)) = state.pool.take() {
            let _ = old.set_active(false);
        }
        let (Some(caps), Some(info)) = (state.caps.as_ref(), state.info.as_ref()) else {
            return Err(gst::error_msg!(
                gst::CoreError::Negotiation,
                ("No caps before the first frame")
            ));
        };
        let pool = gst_video::VideoBufferPool::new();
        let mut config = pool.config();
        config.set_params(Some(caps), info.size() as u32, 0, 0);
        config.set_allocator(Some(&CudaAllocator::for_device(device)), None);
        config.add_option(gst_video::BUFFER_POOL_OPTION_VIDEO_META.as_str());
        let pool: gst::BufferPool = pool.upcast();
        pool.set_config(config)
            .and_then(|_| pool.set_active(true))
            .map_err(|e| {
                gst::error_msg!(
                    gst::ResourceError::Failed,
                    ("Cannot set up a CUDA buffer pool: {e}")
                )
            })?;
        gst::debug!(
            CAT,
            imp = self,
            "output pool for read-only input on device {}",
            device.ordinal()
        );
        state.pool = Some((device.ordinal(), pool.clone()));
        Ok(pool)
    }

    fn new_output_buffer(&self, input: &gst::BufferRef) -> Result<gst::Buffer, gst::ErrorMessage> {
        let mut state = self.state.lock().unwrap();
        let Some(mem) = memory::buffer_device_memory(input) else {
            return Err(gst::error_msg!(
                gst::StreamError::Format,
                ("cudaprocess got a buffer that is not CUDA memory of this plugin (CudaIpcMemory)")
            ));
        };
        let pool = self.output_pool(&mut state, &mem.device)?;
        drop(state);
        let mut output = pool.acquire_buffer(None).map_err(|e| {
            gst::error_msg!(
                gst::ResourceError::Failed,
                ("Cannot get an output buffer: {e:?}")
            )
        })?;
        self.parent_copy_metadata(input, output.get_mut().unwrap())
            .map_err(|_| {
                gst::error_msg!(
                    gst::CoreError::Failed,
                    ("Cannot copy the buffer's metadata")
                )
            })?;
        self.state.lock().unwrap().pending_source = Some(input.to_owned());
        Ok(output)
    }

    fn apply_operation(&self, operation: Operation) {
        let obj = self.obj();
        obj.set_passthrough(operation == Operation::None);
    }
}

#[glib::object_subclass]
impl ObjectSubclass for CudaProcess {
    const NAME: &'static str = "GstRsCudaProcess";
    type Type = super::CudaProcess;
    type ParentType = gst_base::BaseTransform;
}

impl ObjectImpl for CudaProcess {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPERTIES: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            vec![
                glib::ParamSpecEnum::builder_with_default("operation", DEFAULT_OPERATION)
                    .nick("Operation")
                    .blurb("What to do to each frame")
                    .mutable_playing()
                    .build(),
                glib::ParamSpecDouble::builder("brightness")
                    .nick("Brightness")
                    .blurb("operation=brightness: amount added to colour bytes, as a fraction of 255 (negative darkens)")
                    .minimum(-1.0)
                    .maximum(1.0)
                    .default_value(DEFAULT_BRIGHTNESS)
                    .mutable_playing()
                    .build(),
                glib::ParamSpecDouble::builder("gamma")
                    .nick("Gamma")
                    .blurb("operation=gamma: x becomes 255 * (x / 255)^(1 / gamma) (above 1 brightens)")
                    .minimum(0.01)
                    .maximum(10.0)
                    .default_value(DEFAULT_GAMMA)
                    .mutable_playing()
                    .build(),
                glib::ParamSpecBoolean::builder("verify")
                    .nick("Verify")
                    .blurb("Check every frame against cudatestsrc's counter pattern and the frame sequence, on the GPU")
                    .default_value(DEFAULT_VERIFY)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoolean::builder("verify-fatal")
                    .nick("Verify fatal")
                    .blurb("Post an error (not only an element message) on the first bad frame")
                    .default_value(DEFAULT_VERIFY_FATAL)
                    .mutable_playing()
                    .build(),
                glib::ParamSpecBoxed::builder::<gst::Structure>("stats")
                    .nick("Statistics")
                    .blurb("cudaprocess-stats: frames, verified, corrupt, missing, first-bad-frame (-1: none)")
                    .read_only()
                    .build(),
            ]
        });
        PROPERTIES.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut settings = self.settings.lock().unwrap();
        match pspec.name() {
            "operation" => {
                settings.operation = value.get().expect("type checked upstream");
                let operation = settings.operation;
                drop(settings);
                gst::info!(CAT, imp = self, "operation: {operation:?}");
                self.apply_operation(operation);
            }
            "brightness" => settings.brightness = value.get().expect("type checked upstream"),
            "gamma" => settings.gamma = value.get().expect("type checked upstream"),
            "verify" => settings.verify = value.get().expect("type checked upstream"),
            "verify-fatal" => settings.verify_fatal = value.get().expect("type checked upstream"),
            _ => unimplemented!(),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        match pspec.name() {
            "stats" => {
                let mut state = self.state.lock().unwrap();
                if let Some(verifier) = state.verifier.as_ref() {
                    // Exact totals: wait for the frames already queued.
                    match verifier.exact_report() {
                        Ok(report) => state.report = report,
                        Err(e) => {
                            gst::warning!(
                                CAT,
                                imp = self,
                                "cannot read the verification totals: {e}"
                            )
                        }
                    }
                }
                let report = state.report;
                gst::Structure::builder("cudaprocess-stats")
                    .field("frames", state.frames)
                    .field("verified", report.frames)
                    .field("corrupt", report.corrupt)
                    .field("missing", report.missing)
                    .field(
                        "first-bad-frame",
                        report.first_bad.map_or(-1, |b| b.frame() as i64),
                    )
                    .build()
                    .to_value()
            }
            name => {
                let settings = self.settings.lock().unwrap();
                match name {
                    "operation" => settings.operation.to_value(),
                    "brightness" => settings.brightness.to_value(),
                    "gamma" => settings.gamma.to_value(),
                    "verify" => settings.verify.to_value(),
                    "verify-fatal" => settings.verify_fatal.to_value(),
                    _ => unimplemented!(),
                }
            }
        }
    }

    fn constructed(&self) {
        self.parent_constructed();
        crate::element_names::name_after_factory(&*self.obj(), "cudaprocess");
        self.apply_operation(DEFAULT_OPERATION);
    }
}

impl GstObjectImpl for CudaProcess {}

impl ElementImpl for CudaProcess {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static ELEMENT_METADATA: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "CUDA frame processing",
                "Filter/Effect/Video",
                "Inverts, brightens, gamma-corrects or grays frames in CUDA memory, and checks cudatestsrc's counter pattern",
                "gst-cudaipc developers",
            )
        });
        Some(&*ELEMENT_METADATA)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static PAD_TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            let caps = video::raw_caps(true);
            vec![
                gst::PadTemplate::new(
                    "src",
                    gst::PadDirection::Src,
                    gst::PadPresence::Always,
                    &caps,
                )
                .unwrap(),
                gst::PadTemplate::new(
                    "sink",
                    gst::PadDirection::Sink,
                    gst::PadPresence::Always,
                    &caps,
                )
                .unwrap(),
            ]
        });
        PAD_TEMPLATES.as_ref()
    }
}

impl BaseTransformImpl for CudaProcess {
    // In place; prepare_output_buffer picks a new buffer for read-only input.
    const MODE: gst_base::subclass::BaseTransformMode =
        gst_base::subclass::BaseTransformMode::AlwaysInPlace;
    const PASSTHROUGH_ON_SAME_CAPS: bool = false;
    // operation=none passes through, and still verifies.
    const TRANSFORM_IP_ON_PASSTHROUGH: bool = true;

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        *self.state.lock().unwrap() = State::default();
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        let mut state = self.state.lock().unwrap();
        let posts = self.finish(&mut state);
        if let Some((_, pool)) = state.pool.take() {
            let _ = pool.set_active(false);
        }
        // Keep the counters for the stats property; drop GPU resources.
        let kept = State {
            report: state.report,
            frames: state.frames,
            reported: state.reported,
            ..Default::default()
        };
        *state = kept;
        drop(state);
        self.post(posts);
        Ok(())
    }

    fn accept_caps(&self, direction: gst::PadDirection, caps: &gst::Caps) -> bool {
        let accepted = self.parent_accept_caps(direction, caps);
        if !accepted && caps.is_fixed() {
            let first = !std::mem::replace(&mut self.state.lock().unwrap().warned_caps, true);
            if first {
                let formats: Vec<&str> =
                    video::FORMATS.iter().map(|f| f.to_str().as_str()).collect();
                gst::element_imp_warning!(
                    self,
                    gst::CoreError::Negotiation,
                    ("cudaprocess cannot take {caps}"),
                    [
                        "cudaprocess takes video/x-raw(memory:CUDAMemory) in {}; frames in system memory need an upload first (e.g. a cudaipcsink/cudaipcsrc pair)",
                        formats.join(", ")
                    ]
                );
            }
        }
        accepted
    }

    fn set_caps(&self, incaps: &gst::Caps, outcaps: &gst::Caps) -> Result<(), gst::LoggableError> {
        let info = gst_video::VideoInfo::from_caps(incaps)
            .map_err(|_| gst::loggable_error!(CAT, "Invalid video caps {incaps}"))?;
        gst::debug!(CAT, imp = self, "caps {incaps} -> {outcaps}");
        let mut state = self.state.lock().unwrap();
        if let Some((_, pool)) = state.pool.take() {
            let _ = pool.set_active(false);
        }
        state.geometry = Geometry::new(&info);
        state.traits = FormatTraits::of(info.format());
        state.info = Some(info);
        state.caps = Some(outcaps.clone());
        Ok(())
    }

    fn sink_event(&self, event: gst::Event) -> bool {
        match event.view() {
            gst::EventView::StreamStart(_) | gst::EventView::FlushStop(_) => {
                // Frame numbers start again: no gap, no stale frame.
                self.state.lock().unwrap().new_sequence = true;
            }
            gst::EventView::Eos(_) => {
                let mut state = self.state.lock().unwrap();
                let posts = self.finish(&mut state);
                drop(state);
                self.post(posts);
            }
            _ => (),
        }
        self.parent_sink_event(event)
    }

    fn prepare_output_buffer(
        &self,
        inbuf: InputBuffer,
    ) -> Result<PrepareOutputBufferSuccess, gst::FlowError> {
        if self.obj().is_passthrough() {
            return Ok(PrepareOutputBufferSuccess::InputBuffer);
        }
        let input: &gst::BufferRef = match inbuf {
            InputBuffer::Writable(buffer) => {
                // Read-only memory wraps frames shared with others (a
                // cudaipcsrc slot); shared memory belongs to other buffers.
                let writable = buffer.is_all_memory_writable()
                    && buffer
                        .iter_memories()
                        .all(|m| !m.flags().contains(gst::MemoryFlags::READONLY));
                if writable {
                    return Ok(PrepareOutputBufferSuccess::InputBuffer);
                }
                buffer
            }
            InputBuffer::Readable(buffer) => buffer,
        };
        match self.new_output_buffer(input) {
            Ok(output) => Ok(PrepareOutputBufferSuccess::Buffer(output)),
            Err(error) => {
                self.post_error_message(error);
                Err(gst::FlowError::Error)
            }
        }
    }

    fn transform_ip(&self, buf: &mut gst::BufferRef) -> Result<gst::FlowSuccess, gst::FlowError> {
        self.handle_frame(false, |state, settings, source| {
            let (src, dst, device) = {
                let info = state.info.as_ref().ok_or_else(|| {
                    gst::error_msg!(
                        gst::CoreError::Negotiation,
                        ("No caps before the first frame")
                    )
                })?;
                match &source {
                    // Out of place: `buf` is a new buffer of our pool.
                    Some(source) => {
                        let (src, device) = frame_planes(info, source)?;
                        (src, frame_planes(info, buf)?.0, device)
                    }
                    None => {
                        let (planes, device) = frame_planes(info, buf)?;
                        (planes, planes, device)
                    }
                }
            };
            self.run(state, settings, src, Some(dst), &device)
        })
    }

    fn transform_ip_passthrough(
        &self,
        buf: &gst::Buffer,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        self.handle_frame(true, |state, settings, _| {
            let (src, device) = {
                let info = state.info.as_ref().ok_or_else(|| {
                    gst::error_msg!(
                        gst::CoreError::Negotiation,
                        ("No caps before the first frame")
                    )
                })?;
                frame_planes(info, buf)?
            };
            self.run(state, settings, src, None, &device)
        })
    }
}
