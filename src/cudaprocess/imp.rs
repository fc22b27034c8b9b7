// SPDX-License-Identifier: MPL-2.0

use std::sync::{LazyLock, Mutex};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_transform::{InputBuffer, PrepareOutputBufferSuccess};
use gst_base::subclass::prelude::*;

use super::Operation;
use super::settings::{
    DEFAULT_BRIGHTNESS, DEFAULT_GAMMA, DEFAULT_OPERATION, DEFAULT_VERIFY, DEFAULT_VERIFY_FATAL,
    Settings,
};
use super::state::{FormatTraits, Posts, State};
use crate::pattern::kernels::Geometry;
use crate::video;

pub(crate) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "cudaprocess",
        gst::DebugColorFlags::empty(),
        Some("CUDA frame processing and verification"),
    )
});

#[derive(Default)]
pub struct CudaProcess {
    pub(super) settings: Mutex<Settings>,
    pub(super) state: Mutex<State>,
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
            self.process_frame(state, settings, buf, source)
        })
    }

    fn transform_ip_passthrough(
        &self,
        buf: &gst::Buffer,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        self.handle_frame(true, |state, settings, _| {
            self.verify_frame(state, settings, buf)
        })
    }
}
