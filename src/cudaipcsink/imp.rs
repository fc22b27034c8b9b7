// SPDX-License-Identifier: MPL-2.0

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::subclass::prelude::*;

use super::publishing;
use super::settings::{
    DEFAULT_CHANNEL, DEFAULT_DEVICE_ID, DEFAULT_FRAME_DATA_SIZE, DEFAULT_PERMISSIONS,
    DEFAULT_SLOTS, DEFAULT_WAIT_FOR_CONNECTION, Settings,
};
use super::state::{self, CAT, SinkPublisher, State};
use crate::enums::{self, Transport};
use crate::gstcuda;
use crate::memory;
use crate::video;
use cudaipc_channel::layout::MAX_SLOTS;
use cudaipc_transport::cuda;
use cudaipc_transport::{self as transport, TransportKind};

/// How long `stop` lets consumers finish reading before slots are freed.
const RELEASE_GRACE: Duration = Duration::from_secs(1);
/// A wait at the end longer than this is posted.
const SLOW_RELEASE: Duration = Duration::from_millis(500);

/// Lock order: `settings` is copied out and released before `state` is
/// taken; `state` is held only to clone the publisher (and info, pool) out
/// or to store into it, never across a wait (reserving a slot, consumers
/// draining, lent buffers coming back): those happen in the publisher with
/// no element lock held. The publisher's and the slot pool's locks are
/// leaves.
#[derive(Default)]
pub struct CudaIpcSink {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    ticker: crate::periodic::StatsTicker,
    /// Shared with GStreamer's CUDA elements (`gst.cuda.context`).
    cuda_context: gstcuda::ContextShare,
    /// Time spent in `render` since `start`, in nanoseconds (`stats`).
    render_ns: AtomicU64,
    /// Warns when consumers hold a live producer back.
    held_back: super::held_back::HeldBack,
    /// The caps last refused with an error (posted once, not at each retry
    /// of the sticky event).
    refused: Mutex<Option<gst::Caps>>,
    /// Metas, application data and events sent beside the frames.
    travelling: super::travelling::Travelling,
}

impl CudaIpcSink {
    /// Whether frames arrive paced: this sink waits for each frame's time
    /// (`sync=true` with a frame rate), or upstream is a live source.
    fn frames_are_paced(&self, info: &gst_video::VideoInfo) -> bool {
        let sink = self.obj();
        if gst_base::prelude::BaseSinkExt::is_sync(&*sink) && info.fps().numer() > 0 {
            return true;
        }
        let mut latency = gst::query::Latency::new();
        sink.static_pad("sink")
            .is_some_and(|pad| pad.peer_query(&mut latency))
            && latency.result().0
    }

    /// A copy of the state, with its caps.
    fn snapshot(&self) -> Result<(State, gst_video::VideoInfo), gst::FlowError> {
        let state = self.state.lock().unwrap().clone();
        let state = state.ok_or(gst::FlowError::Flushing)?;
        let Some(info) = state.info.clone() else {
            gst::element_imp_error!(
                self,
                gst::CoreError::Negotiation,
                ("received a buffer before caps")
            );
            return Err(gst::FlowError::NotNegotiated);
        };
        Ok((state, info))
    }

    fn publisher(&self) -> Option<Arc<SinkPublisher>> {
        self.state
            .lock()
            .unwrap()
            .as_ref()
            .map(|s| s.publisher.clone())
    }

    /// Caps upstream sent that the sink's pad refuses: GStreamer fails the
    /// stream with a bare not-negotiated; the error says which formats the
    /// sink takes and what to put before it.
    fn refuse_caps(&self, caps: &gst::Caps) {
        if self.refused.lock().unwrap().replace(caps.clone()).as_ref() == Some(caps) {
            return;
        }
        gst::element_imp_error!(
            self,
            gst::CoreError::Negotiation,
            ("{}", super::refused::why(caps)),
            [
                "upstream sent caps {}; rscudaipcsink takes {}",
                caps,
                video::any_memory_caps()
            ]
        );
    }

    fn stats(&self) -> gst::Structure {
        let mut stats = publishing::stats(
            self.publisher().map(|p| p.stats()),
            self.render_ns.load(Ordering::Relaxed),
        );
        self.travelling.write_stats(&mut stats);
        stats
    }
}

#[glib::object_subclass]
impl ObjectSubclass for CudaIpcSink {
    const NAME: &'static str = "GstRsCudaIpcSink";
    type Type = super::CudaIpcSink;
    type ParentType = gst_base::BaseSink;
}

impl ObjectImpl for CudaIpcSink {
    fn constructed(&self) {
        self.parent_constructed();
        // Before the pad checks a caps event (and refuses it with no word
        // of why), this sees it.
        let sink = self.downgrade();
        self.obj().static_pad("sink").unwrap().add_probe(
            gst::PadProbeType::EVENT_DOWNSTREAM,
            move |pad, info| {
                if let Some(gst::PadProbeData::Event(event)) = &info.data
                    && let gst::EventView::Caps(c) = event.view()
                    && let caps = c.caps_owned()
                    && !pad.query_accept_caps(&caps)
                    && let Some(sink) = sink.upgrade()
                {
                    sink.refuse_caps(&caps);
                }
                gst::PadProbeReturn::Ok
            },
        );
    }

    fn properties() -> &'static [glib::ParamSpec] {
        static PROPERTIES: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            vec![
                glib::ParamSpecString::builder("channel")
                    .nick("Channel")
                    .blurb("Name of the channel: 1-64 characters of A-Z a-z 0-9 _ - (its control block is /dev/shm/cudaipc-<channel>)")
                    .default_value(Some(DEFAULT_CHANNEL))
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("slots")
                    .nick("Slots")
                    .blurb("Frames in the ring of shared buffers (0: automatic: 2 with NVIDIA MPS; without it as many as 5% of the device memory holds, 8 to 64 (32 where an upstream pool may lend its buffers), for frames that come as fast as the pipeline runs; else a tenth of a second of frames at the caps' frame rate, 4 to 16 (8 at least on CUDA without MPS); 4 on host memory; deeper where a consumer declares hold=N: N+2)")
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
                glib::ParamSpecEnum::builder_with_default("when-full", enums::WhenFull::default())
                    .nick("When full")
                    .blurb("What to do with a frame when every slot is in use")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("wait-mode", enums::WaitMode::default())
                    .nick("Wait mode")
                    .blurb("How to wait for a free slot")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("gpu-sync", enums::GpuSync::default())
                    .nick("GPU sync")
                    .blurb("How GPU work is ordered between the processes")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("permissions")
                    .nick("Permissions")
                    .blurb("File mode of the channel's shared files (default 0600, octal; permissions=0660 shares them with the group); a consumer of another user also needs allowed-producers=<this user's uid>")
                    .maximum(0o777)
                    .default_value(DEFAULT_PERMISSIONS)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("wait-for-connection")
                    .nick("Wait for connection")
                    .blurb("Consumers that must be attached before the first frame is published (0: publish at once)")
                    .maximum(cudaipc_channel::layout::MAX_CONSUMERS as u32)
                    .default_value(DEFAULT_WAIT_FOR_CONNECTION)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecEnum::builder_with_default("ipc-mode", enums::IpcMode::default())
                    .nick("IPC mode")
                    .blurb("How consumers reach the channel: names in the shm folder (legacy), or descriptors handed over the channel's unix socket to allowed users only (fd)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("allowed-uids")
                    .nick("Allowed users")
                    .blurb("ipc-mode=fd: numeric user ids, comma-separated, whose consumers may attach besides this user's ('permissions' must let them reach the socket)")
                    .default_value(Some(""))
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("allowed-gids")
                    .nick("Allowed groups")
                    .blurb("ipc-mode=fd: numeric group ids, comma-separated, whose consumers (by their primary group) may attach")
                    .default_value(Some(""))
                    .mutable_ready()
                    .build(),
                glib::ParamSpecUInt::builder("frame-data-size")
                    .nick("Frame data size")
                    .blurb("Bytes of metas (reference timestamps, custom metas, and on GStreamer 1.24+ every meta that serializes) and application data each frame may carry to the consumers; what does not fit is dropped and counted (stats: frame-data-bytes-dropped), the frame is not. The control block holds this for each of 64 slots (0: frames carry none)")
                    .maximum(cudaipc_channel::layout::MAX_FRAME_DATA_BOUND)
                    .default_value(DEFAULT_FRAME_DATA_SIZE)
                    .mutable_ready()
                    .build(),
                crate::periodic::interval_property(),
                glib::ParamSpecBoxed::builder::<gst::Structure>("stats")
                    .nick("Statistics")
                    .blurb("frames, dropped (lost to when-full=drop, overwritten ones included), overwritten (published, then overwritten before a lagging consumer took them), waits (for a free slot), render-time (ns in render), slot-wait-time (ns waiting for a free slot), read-wait-time (ns waiting for consumers' GPU reads of a slot), zero-copy (published where upstream wrote them: the slot pool or lent GstCudaMemory), copied, repeated (a buffer pushed again, published from its slot with no copy), slots, consumers, reclaimed-consumers, transport, frame-data-metas, frame-data-app-entries, frame-data-not-crossed, frame-data-local-metas, frame-data-hostile, frame-data-unknown-entries, frame-data-bytes-dropped, events-lost (what travelled beside the frames)")
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
            "wait-for-connection" => settings.wait_for_connection = value.get().unwrap(),
            "ipc-mode" => settings.ipc_mode = value.get().unwrap(),
            "allowed-uids" => {
                settings.allowed_uids = value.get::<Option<String>>().unwrap().unwrap_or_default()
            }
            "allowed-gids" => {
                settings.allowed_gids = value.get::<Option<String>>().unwrap().unwrap_or_default()
            }
            "frame-data-size" => settings.frame_data_size = value.get().unwrap(),
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
            "wait-for-connection" => settings.wait_for_connection.to_value(),
            "ipc-mode" => settings.ipc_mode.to_value(),
            "allowed-uids" => settings.allowed_uids.to_value(),
            "allowed-gids" => settings.allowed_gids.to_value(),
            "frame-data-size" => settings.frame_data_size.to_value(),
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
                "Shares video frames with other processes through CUDA IPC or shared memory (write rscudaipcsink: the bare name is GStreamer's own element on 1.24+ with nvcodec)",
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
        let (device, device_id) = {
            let settings = self.settings.lock().unwrap();
            (settings.context_device(), settings.device_id)
        };
        self.cuda_context.change_state(
            self.obj().upcast_ref(),
            transition,
            device_id,
            device.as_ref(),
            || self.parent_change_state(transition),
        )
    }
}

impl BaseSinkImpl for CudaIpcSink {
    fn query(&self, query: &mut gst::QueryRef) -> bool {
        self.cuda_context.query(self.obj().upcast_ref(), query)
            || BaseSinkImplExt::parent_query(self, query)
    }

    /// Our caps in our order of preference, whatever the filter's order:
    /// CUDA memory first on the cuda transport (so that `cudaupload !
    /// cudaipcsink` negotiates it), system memory first on the host one.
    fn caps(&self, filter: Option<&gst::Caps>) -> Option<gst::Caps> {
        let cuda_first = self.settings.lock().unwrap().kind() == TransportKind::Cuda;
        let mut ours = video::raw_caps(cuda_first);
        ours.merge(video::raw_caps(!cuda_first));
        Some(match filter {
            Some(filter) => ours.intersect_with_mode(filter, gst::CapsIntersectMode::First),
            None => ours,
        })
    }

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        self.render_ns.store(0, Ordering::Relaxed);
        self.held_back.reset();
        self.travelling.reset();
        gst::debug!(
            CAT,
            imp = self,
            "metas that cross: {}",
            match crate::frame_data::gstreamer_serializes_metas() {
                true => "every one that serializes (GStreamer 1.24+)",
                false => "reference timestamps and custom metas (GStreamer 1.22 serializes none)",
            }
        );
        *self.refused.lock().unwrap() = None;
        let settings = self.settings.lock().unwrap().clone();
        let config = settings.publisher_config()?;
        let (kind, ipc_mode, gpu_sync) = (config.kind, config.ipc_mode, config.gpu_sync);
        let ordering = publishing::stream_ordering(config.device.as_ref());
        let publisher = publishing::open(config)?;
        gst::info!(
            CAT,
            imp = self,
            "channel '{}' open ({:?} transport, ipc-mode {:?}, gpu-sync {:?}{})",
            settings.channel,
            kind,
            ipc_mode,
            gpu_sync,
            match &publisher.config().device {
                Some(device) if transport::waits_on_host(device) => {
                    "; waits for consumers' GPU work on the host (no MPS)"
                }
                Some(_) => "; waits for consumers' GPU work on the GPU (MPS)",
                None => "",
            }
        );
        let publisher = Arc::new(publisher);
        *self.state.lock().unwrap() = Some(State {
            lender: transport::Lender::new(publisher.clone()).map(Arc::new),
            publisher,
            info: None,
            lendable: None,
            ordering,
        });
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        let Some(state) = self.state.lock().unwrap().take() else {
            return Ok(());
        };
        // The name goes now; the memory goes once upstream drops the pool.
        // Consumers at their own pace on a live channel are not waited for;
        // only the frames consumers hold are (what each reads now), and
        // every-frame consumers, within the grace.
        let started = Instant::now();
        let released = state.publisher.close(RELEASE_GRACE);
        let waited = started.elapsed();
        if !released {
            gst::element_imp_warning!(
                self,
                gst::ResourceError::Busy,
                [
                    "consumers still held frames after {} ms; the slots were freed anyway",
                    waited.as_millis()
                ]
            );
        } else if waited > SLOW_RELEASE {
            gst::element_imp_warning!(
                self,
                gst::ResourceError::Busy,
                [
                    "waited {} ms at the end for consumers to release the frames they hold (at most {} s; 5 s after an end of stream)",
                    waited.as_millis(),
                    RELEASE_GRACE.as_secs()
                ]
            );
        }
        Ok(())
    }

    fn set_caps(&self, caps: &gst::Caps) -> Result<(), gst::LoggableError> {
        let info = gst_video::VideoInfo::from_caps(caps)
            .map_err(|_| gst::loggable_error!(CAT, "cannot parse caps {}", caps))?;
        let publisher = self
            .publisher()
            .ok_or_else(|| gst::loggable_error!(CAT, "caps before start"))?;
        if publisher.config().kind == TransportKind::Host
            && memory::caps_are_cuda(caps)
            && !cuda::is_available()
        {
            return Err(gst::loggable_error!(
                CAT,
                "CUDA memory input needs CUDA to download it"
            ));
        }
        publisher.set_paced(self.frames_are_paced(&info));
        let fps = info.fps();
        publisher.set_frame_rate(match fps.denom() {
            0 => 0.0,
            denom => f64::from(fps.numer()) / f64::from(denom),
        });
        state::report_slots(self.obj().upcast_ref(), publisher.configure(info.size()))?;
        // Consumers choose their memory type themselves: publish the plain
        // caps.
        let mut plain = caps.clone();
        plain.make_mut().set_features(0, None);
        publisher
            .set_caps(&plain.to_string())
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
        // The slot pool blocks until a slot is free, so it suits only the
        // lossless policy; with drop, frames are copied into free slots.
        if !self.settings.lock().unwrap().blocks_when_full() {
            return Ok(());
        }
        let Some(State {
            publisher,
            lender,
            lendable,
            ..
        }) = self.state.lock().unwrap().clone()
        else {
            return Ok(());
        };
        let context = self.cuda_context.get();
        let proposed = publishing::propose(
            self.obj().upcast_ref(),
            query,
            &publisher,
            lender.as_ref(),
            lendable,
            &caps,
            context,
        )?;
        if let Some(pool) = proposed
            && let Some(state) = self.state.lock().unwrap().as_mut()
            && Arc::ptr_eq(&state.publisher, &publisher)
        {
            state.lendable = pool;
        }
        Ok(())
    }

    fn render(&self, buffer: &gst::Buffer) -> Result<gst::FlowSuccess, gst::FlowError> {
        let (state, info) = self.snapshot()?;
        let result = cudaipc_channel::wait::timed(&self.render_ns, || {
            let frame_data = self.travelling.frame_data_of(buffer, &state.publisher);
            publishing::render(self.obj().upcast_ref(), &state, &info, buffer, frame_data)
        });
        self.held_back
            .check(self.obj().upcast_ref(), &state.publisher, || {
                self.settings.lock().unwrap().channel.clone()
            });
        if result.is_ok() && self.ticker.due() {
            let message = gst::message::Element::builder(self.stats())
                .src(&*self.obj())
                .build();
            let _ = self.obj().post_message(message);
        }
        result
    }

    fn event(&self, event: gst::Event) -> bool {
        if let Some(publisher) = self.publisher() {
            match event.view() {
                gst::EventView::Eos(_) => publisher.eos(),
                _ => self
                    .travelling
                    .forward_event(self.obj().upcast_ref(), &event, &publisher),
            }
        }
        self.parent_event(event)
    }

    fn unlock(&self) -> Result<(), gst::ErrorMessage> {
        if let Some(publisher) = self.publisher() {
            publisher.set_interrupted(true);
        }
        Ok(())
    }

    fn unlock_stop(&self) -> Result<(), gst::ErrorMessage> {
        if let Some(publisher) = self.publisher() {
            publisher.set_interrupted(false);
        }
        Ok(())
    }
}
