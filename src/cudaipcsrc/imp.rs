// SPDX-License-Identifier: MPL-2.0

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_src::CreateSuccess;
use gst_base::subclass::prelude::*;

use super::channel::{self, Channel, Output};
use super::settings::{
    DEFAULT_CHANNEL, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_DEVICE_ID, DEFAULT_IS_LIVE,
    DEFAULT_TIMESTAMP_MODE, Settings,
};
use super::stats::Stats;
use super::{CAT, TimestampMode};
use crate::enums::{self, OutputMemory, ProducerLost};
use crate::gstcuda;
use crate::video;
use cudaipc_channel::ConsumerWaker;
use cudaipc_transport::{Subscriber, SubscriberConfig};

#[derive(Default)]
pub(super) struct State {
    /// The subscriber's configuration, made from the settings at `start`.
    pub(super) config: Option<SubscriberConfig>,
    /// Taken out by the streaming thread while it waits on the channel.
    pub(super) subscriber: Option<Subscriber>,
    pub(super) channel: Option<Channel>,
    pub(super) output: Option<Output>,
    /// The next buffer starts a discontinuity.
    pub(super) discont: bool,
    pub(super) connected_before: bool,
    /// Pipeline timestamps: the last one given, to stay monotonic.
    pub(super) last_running_time: gst::ClockTime,
}

/// Lock order: `settings`, then `state`, then `stats`; `waker` alone. None is
/// held across a wait on the channel or a call downstream, so that queries
/// (caps, latency, position) are answered at once while `create` waits.
#[derive(Default)]
pub struct CudaIpcSrc {
    pub(super) settings: Mutex<Settings>,
    pub(super) state: Mutex<State>,
    pub(super) stats: Mutex<Stats>,
    pub(super) interrupt: AtomicBool,
    pub(super) waker: Mutex<Option<ConsumerWaker>>,
    pub(super) ticker: crate::periodic::StatsTicker,
    /// Shared with GStreamer's CUDA elements (`gst.cuda.context`).
    pub(super) cuda_context: gstcuda::ContextShare,
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
                    .blurb("Name of the channel to read: 1-64 characters of A-Z a-z 0-9 _ -")
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
                glib::ParamSpecEnum::builder_with_default("wait-mode", enums::WaitMode::default())
                    .nick("Wait mode")
                    .blurb("How to wait for the next frame")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecInt64::builder("connect-timeout")
                    .nick("Connect timeout")
                    .blurb("Milliseconds to wait for a producer to appear (-1: forever); after 2 s a warning names the channels that have one")
                    .minimum(-1)
                    .default_value(DEFAULT_CONNECT_TIMEOUT_MS)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("on-producer-lost", ProducerLost::default())
                    .nick("On producer lost")
                    .blurb("What to do when the producer dies or closes the channel without an end of stream")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoolean::builder("is-live")
                    .nick("Is live")
                    .blurb("Act as a live source (no preroll; with timestamp-mode=pipeline, GStreamer stamps each buffer with the running time it arrives at)")
                    .default_value(DEFAULT_IS_LIVE)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("timestamp-mode", DEFAULT_TIMESTAMP_MODE)
                    .nick("Timestamp mode")
                    .blurb("pipeline: the running time of this pipeline when the frame arrives (zero while prerolling), so a late viewer never waits on old timestamps; producer: the producer's PTS and DTS, meaningful here only when both pipelines share clock and base time (a non-live viewer that joins late waits as long as the producer has run)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("ipc-mode", enums::SrcIpcMode::default())
                    .nick("IPC mode")
                    .blurb("How to reach the channel: its socket if it has one, else its name in the shm folder (auto); only its name (legacy); only its socket, from a trusted producer (fd)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("allowed-producers")
                    .nick("Allowed producers")
                    .blurb("Numeric user ids, comma-separated, whose channels this source trusts besides its own user's (the owner of the control block, and the peer on a channel's socket); a channel of another user is refused without it, even where its permissions let this user in")
                    .default_value(Some(""))
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("frames", enums::ConsumerMode::default())
                    .nick("Frames")
                    .blurb("Which frames: every frame in order, at this consumer's own pace on a live channel (auto); every frame, the producer waiting for this consumer even when live (every); only the latest (latest)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("hold")
                    .nick("Hold")
                    .blurb("Buffers downstream keeps while this source pushes the next (an aggregator, a batch, appsink max-buffers); 0: none declared. The producer's ring must have hold+2 slots, or the source fails when it attaches; frames beyond are copied out of their slots")
                    .maximum(62)
                    .default_value(0)
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
                    .blurb("frames, copied, gstcuda-wrapped, gstcuda-copied, missed, waits, reconnects, producer-pid, latency-count, latency-min-ns, latency-mean-ns, latency-p50-ns, latency-p99-ns, latency-max-ns (publish to receive), frame-data-metas, frame-data-app-entries, frame-data-not-crossed, frame-data-local-metas, frame-data-hostile, frame-data-unknown-entries, frame-data-bytes-dropped, events, events-refused, events-lost, frame-data-refused (what arrived beside the frames)")
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
                        imp.stats.lock().unwrap().reset();
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
                self.obj().set_live(settings.is_live);
            }
            "timestamp-mode" => settings.timestamp_mode = value.get().unwrap(),
            "frames" => settings.frames = value.get().unwrap(),
            "hold" => settings.hold = value.get().unwrap(),
            "output-memory" => settings.output_memory = value.get().unwrap(),
            "ipc-mode" => settings.ipc_mode = value.get().unwrap(),
            "allowed-producers" => {
                settings.allowed_producers =
                    value.get::<Option<String>>().unwrap().unwrap_or_default()
            }
            "stats-interval" => self.ticker.set_interval_ms(value.get().unwrap()),
            _ => unimplemented!(),
        }
        let do_timestamp = settings.is_live && settings.timestamp_mode == TimestampMode::Pipeline;
        self.obj().set_do_timestamp(do_timestamp);
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
            "timestamp-mode" => settings.timestamp_mode.to_value(),
            "frames" => settings.frames.to_value(),
            "hold" => settings.hold.to_value(),
            "output-memory" => settings.output_memory.to_value(),
            "ipc-mode" => settings.ipc_mode.to_value(),
            "allowed-producers" => settings.allowed_producers.to_value(),
            "stats-interval" => self.ticker.interval_ms().to_value(),
            "stats" => {
                drop(settings);
                self.stats.lock().unwrap().structure().to_value()
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
                "Receives video frames from another process through CUDA IPC or shared memory (write rscudaipcsrc: the bare name is GStreamer's own element on 1.24+ with nvcodec)",
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
            .change_state(self.obj().upcast_ref(), transition, device_id, None, || {
                self.parent_change_state(transition)
            })
    }
}

impl BaseSrcImpl for CudaIpcSrc {
    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let settings = self.settings.lock().unwrap().clone();
        cudaipc_channel::shm::validate_channel_name(&settings.channel)
            .map_err(|e| gst::error_msg!(gst::ResourceError::Settings, ("{}", e)))?;
        let config = settings.subscriber_config()?;
        if settings.output_memory == OutputMemory::GstCuda && !gstcuda::available() {
            return Err(gst::error_msg!(
                gst::ResourceError::Settings,
                ("output-memory=gstcuda needs GStreamer's CUDA library (libgstcuda-1.0, gst-plugins-bad) and a CUDA driver")
            ));
        }
        *self.state.lock().unwrap() = State {
            config: Some(config),
            ..State::default()
        };
        *self.stats.lock().unwrap() = Stats::default();
        self.interrupt.store(false, Ordering::SeqCst);
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        // Buffers still downstream keep their slots until they are dropped.
        *self.waker.lock().unwrap() = None;
        self.deactivate_output();
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
        // Caps come from the channel: negotiated in `create` once known, and
        // again here when downstream asks for a reconfiguration.
        self.negotiate_output(None)
            .map_err(|_| gst::loggable_error!(CAT, "renegotiation failed"))
    }

    fn caps(&self, filter: Option<&gst::Caps>) -> Option<gst::Caps> {
        let caps = match &*self.state.lock().unwrap() {
            State {
                channel: Some(channel),
                output: Some(output),
                ..
            } => channel::query_caps(channel, output),
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
        // Out of the state while it waits: queries must not wait with it.
        let mut subscriber = self.state.lock().unwrap().subscriber.take();
        let buffer = self.next_buffer(&mut subscriber);
        self.state.lock().unwrap().subscriber = subscriber;
        let buffer = buffer?;
        if self.ticker.due() {
            let _ = self.obj().post_message(
                gst::message::Element::builder(self.stats.lock().unwrap().structure())
                    .src(&*self.obj())
                    .build(),
            );
        }
        Ok(CreateSuccess::NewBuffer(buffer))
    }
}
