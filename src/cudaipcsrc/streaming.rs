// SPDX-License-Identifier: MPL-2.0

//! What `create` does: attach, wait for the next event of the channel, and
//! turn it into a buffer, caps or the end of the stream. No element lock is
//! held while it waits.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::BaseSrcExtManual;

use super::CAT;
use super::TimestampMode;
use super::channel::{self, Channel};
use super::frame::{self, Failure, Timestamps};
use super::gstcuda_out::GstCudaPath;
use super::imp::CudaIpcSrc;
use super::settings::Settings;
use super::travelling::Arrived;
use crate::enums::ProducerLost;
use crate::video;
use cudaipc_channel::ProducerGone;
use cudaipc_transport::{
    Event, HeldFrame, Subscriber, SubscriberCorruption, SubscriberError, TransportKind, WrapOrCopy,
};

/// How long a consumer waits for a producer before it says so at the
/// default verbosity.
const WAIT_WARNING_AFTER: Duration = Duration::from_secs(2);

/// Posts one warning (gst-launch-1.0 prints it) when the wait for a
/// producer lasts `WAIT_WARNING_AFTER`: `waiting`, and the channels there
/// are, so that a mistyped name shows before the timeout. Dropped when the
/// wait ends.
struct WaitWarning {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WaitWarning {
    fn start(src: &super::CudaIpcSrc, channel: String, waiting: String) -> Self {
        let (stop, stopped) = mpsc::channel::<()>();
        let src = src.downgrade();
        let thread = std::thread::Builder::new()
            .name("cudaipcsrc-wait".into())
            .spawn(move || {
                if stopped.recv_timeout(WAIT_WARNING_AFTER) != Err(RecvTimeoutError::Timeout) {
                    return;
                }
                if let Some(src) = src.upgrade() {
                    let seen = channel::other_channels_seen(&channel);
                    gst::element_warning!(src, gst::ResourceError::NotFound, ("{waiting}; {seen}"));
                }
            })
            .ok();
        Self {
            stop: Some(stop),
            thread,
        }
    }
}

impl Drop for WaitWarning {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl CudaIpcSrc {
    fn connect(&self) -> Result<Subscriber, gst::FlowError> {
        let settings = self.settings.lock().unwrap().clone();
        // Made at `start` (`Settings::subscriber_config`).
        let (reconnect, config) = {
            let state = self.state.lock().unwrap();
            (state.connected_before, state.config.clone())
        };
        if !reconnect
            && let Some(message) = channel::mixed_with_upstream(
                &settings.channel,
                settings.channel == super::settings::DEFAULT_CHANNEL,
            )
        {
            self.post_error_message(message);
            return Err(gst::FlowError::Error);
        }
        let Some(mut config) = config else {
            return Err(gst::FlowError::Flushing);
        };
        if reconnect {
            // A reconnection waits as long as it takes (on-producer-lost=wait).
            config.connect_timeout = None;
        }
        let warns = config
            .connect_timeout
            .is_none_or(|timeout| timeout > WAIT_WARNING_AFTER);
        let mut warning = None;
        let subscriber = Subscriber::attach(config, &self.interrupt, || {
            let (channel, timeout) = (&settings.channel, settings.connect_timeout_ms);
            gst::info!(
                CAT,
                imp = self,
                "waiting for a producer on channel '{channel}' (connect-timeout={timeout} ms)"
            );
            let waiting = match reconnect {
                false => format!(
                    "still waiting for a producer on channel '{channel}' (connect-timeout={timeout} ms)"
                ),
                true => format!(
                    "still waiting for a new producer on channel '{channel}' (on-producer-lost=wait)"
                ),
            };
            warning = warns.then(|| WaitWarning::start(&self.obj(), channel.clone(), waiting));
        });
        drop(warning);
        let subscriber = subscriber.map_err(|e| self.failed(e))?;
        let pid = subscriber.info().producer_pid;
        let kind = subscriber.kind();
        gst::info!(
            CAT,
            imp = self,
            "attached to channel '{}' (producer pid {pid}, {kind:?} transport)",
            settings.channel
        );
        *self.waker.lock().unwrap() = Some(subscriber.waker());
        let mut state = self.state.lock().unwrap();
        let device = subscriber.device().cloned();
        state.channel = Some(Channel { kind, device });
        state.discont |= reconnect;
        state.connected_before = true;
        drop(state);
        let mut stats = self.stats.lock().unwrap();
        stats.producer_pid = pid;
        stats.reconnects += u64::from(reconnect);
        Ok(subscriber)
    }

    /// Posts the error of a failed attach or read; the flow return for it.
    fn failed(&self, e: SubscriberError) -> gst::FlowError {
        let Settings {
            channel,
            connect_timeout_ms,
            ..
        } = self.settings.lock().unwrap().clone();
        match channel::error_message(e, &channel, connect_timeout_ms) {
            Ok(message) => {
                self.post_error_message(message);
                gst::FlowError::Error
            }
            Err(flow) => flow,
        }
    }

    /// Negotiates the channel's `caps` downstream (none: the current ones
    /// again, on reconfiguration).
    pub(super) fn negotiate_output(&self, caps: Option<gst::Caps>) -> Result<(), gst::FlowError> {
        let (channel, caps) = {
            let state = self.state.lock().unwrap();
            let current = state.output.as_ref().map(|o| o.channel_caps.clone());
            (state.channel.clone(), caps.or(current))
        };
        let (Some(channel), Some(caps)) = (channel, caps) else {
            return Ok(());
        };
        let Settings {
            channel: name,
            output_memory,
            ..
        } = self.settings.lock().unwrap().clone();
        // Downstream may propose the same pool again: it must be inactive.
        self.deactivate_output();
        let obj = self.obj();
        let negotiated = channel::negotiate(
            obj.upcast_ref(),
            &self.cuda_context,
            output_memory,
            (&name, &channel),
            &caps,
        );
        match negotiated {
            Ok(output) => {
                gst::debug!(
                    CAT,
                    imp = self,
                    "negotiated {caps} (CUDA memory: {})",
                    output.cuda
                );
                if let Some(pool) = &output.gst_cuda_pool {
                    let name = pool.name();
                    match output.gst_cuda_path {
                        Some(GstCudaPath::WrapSlots) => gst::debug!(
                            CAT,
                            imp = self,
                            "GstCudaMemory output: wrapping the slots (no copy; copying into {name} only where a slot cannot be wrapped)"
                        ),
                        Some(GstCudaPath::Copy(why)) => gst::debug!(
                            CAT,
                            imp = self,
                            "GstCudaMemory output: copying frames into GstCudaMemory of {name}: {why}"
                        ),
                        None => {}
                    }
                }
                self.state.lock().unwrap().output = Some(output);
                Ok(())
            }
            Err((flow, message)) => {
                self.post_error_message(message);
                Err(flow)
            }
        }
    }

    pub(super) fn deactivate_output(&self) {
        let output = self.state.lock().unwrap().output.take();
        if let Some(pool) = output.and_then(|o| o.gst_cuda_pool) {
            let _ = pool.set_active(false);
        }
    }

    /// The next buffer, attaching (again) when needed.
    pub(super) fn next_buffer(
        &self,
        subscriber: &mut Option<Subscriber>,
    ) -> Result<gst::Buffer, gst::FlowError> {
        loop {
            let attached = match subscriber {
                Some(attached) => attached,
                None => {
                    let mut connected = self.connect()?;
                    // Set up downstream before the first frame is asked for:
                    // a live producer waits for a consumer until then (see
                    // START_LIMIT), and one that asks is ready to keep up.
                    if let Some(text) = connected.current_caps().map_err(|e| self.failed(e))? {
                        let caps = channel::parse_caps(&text).map_err(|e| self.failed(e))?;
                        self.negotiate_output(Some(caps))?;
                    }
                    subscriber.insert(connected)
                }
            };
            let wraps_slots = (self.state.lock().unwrap().output.as_ref())
                .is_some_and(|output| output.slot_wrapper.is_some());
            attached.wait_on_host(wraps_slots);
            let (waits, stale) = (attached.waits(), attached.stale());
            let event = attached.next(&self.interrupt);
            {
                let mut stats = self.stats.lock().unwrap();
                stats.waits += attached.waits() - waits;
                stats.missed += attached.stale() - stale;
                stats.channel_travelling = attached.travelling_counts();
            }
            let event = match event {
                // The channel cannot go on: as if its producer were lost.
                Err(e @ SubscriberError::Truncated(_)) => {
                    let channel = self.settings.lock().unwrap().channel.clone();
                    let why = format!("channel '{channel}': {e}");
                    self.producer_lost(&why, crate::hints::producer_lost(false))?;
                    *subscriber = None;
                    continue;
                }
                event => event,
            };
            match event.map_err(|e| self.failed(e))? {
                Event::Caps(text) => {
                    let caps = channel::parse_caps(&text).map_err(|e| self.failed(e))?;
                    self.negotiate_output(Some(caps))?;
                }
                Event::Frame(frame) => return self.frame_to_buffer(frame),
                Event::StreamEvent(bytes) => self.push_stream_event(&bytes),
                Event::Eos => {
                    self.count_missed(attached.take_missed_at_end());
                    gst::debug!(CAT, imp = self, "end of stream from the producer");
                    return Err(gst::FlowError::Eos);
                }
                Event::ProducerGone(gone) => {
                    let channel = self.settings.lock().unwrap().channel.clone();
                    let what = match gone {
                        ProducerGone::Closed => "closed the channel",
                        ProducerGone::Died => "died",
                    };
                    let why = format!("the producer of channel '{channel}' {what}");
                    let hint = crate::hints::producer_lost(gone == ProducerGone::Closed);
                    self.producer_lost(&why, hint)?;
                    *subscriber = None;
                }
            }
        }
    }

    fn frame_to_buffer(&self, frame: HeldFrame) -> Result<gst::Buffer, gst::FlowError> {
        let latency = cudaipc_channel::shm::monotonic_ns().saturating_sub(frame.publish_time_ns);
        let (output, kind, discont) = {
            let mut state = self.state.lock().unwrap();
            let kind = state.channel.as_ref().map(|c| c.kind);
            (
                state.output.clone(),
                kind,
                std::mem::take(&mut state.discont),
            )
        };
        let output = output.ok_or(gst::FlowError::NotNegotiated)?;
        if let Err(e) = video::layout_fits(&output.info, &frame.planes, frame.size) {
            let what = SubscriberCorruption::FrameLayout {
                seq: frame.seq,
                problem: e.to_string(),
            };
            return Err(self.failed(SubscriberError::Corrupt(what)));
        }
        // Wrap the slot or copy out of it: the ring's rule
        // (`cudaipc_transport::WrapOrCopy`, in its ring_policy.rs).
        let (latest, hold) = {
            let settings = self.settings.lock().unwrap();
            (
                settings.frames == crate::enums::ConsumerMode::Latest,
                settings.hold,
            )
        };
        let wrap = WrapOrCopy {
            wrappable: (output.cuda
                && (output.gst_cuda_pool.is_none() || output.slot_wrapper.is_some()))
                || kind == Some(TransportKind::Host),
            latest,
            // Downstream's allocation query declares a hold too.
            hold: hold.max(output.downstream_min_buffers),
            held: frame.frames_held(),
            slots: frame.slot_count(),
        }
        .wraps();
        let (seq, slot, held) = (frame.seq, frame.slot, frame.frames_held());
        let missed = frame.missed_before;
        // Copied out with the frame while its slot was held; mostly empty.
        let data = frame.data.clone();
        let timestamps = self.timestamps();
        let (buffer, delivery) = frame::to_buffer(frame, &output, wrap, timestamps, discont)
            .map_err(|e| match e {
                Failure::Pool(flow) => flow,
                Failure::Failed(e) => {
                    self.post_error_message(gst::error_msg!(gst::ResourceError::Read, ("{}", e)));
                    gst::FlowError::Error
                }
            })?;
        gst::trace!(
            CAT,
            imp = self,
            "frame {seq} in slot {slot}: {delivery:?} ({held} slots held downstream)"
        );
        let mut buffer = buffer;
        let mut stats = self.stats.lock().unwrap();
        if !data.is_empty() {
            stats.travelling.apply(&data, buffer.make_mut());
        }
        stats.latency.record(latency);
        stats.frames += 1;
        stats.count(delivery);
        drop(stats);
        self.count_missed(missed);
        Ok(buffer)
    }

    /// Pushes an event the producer's pipeline sent between two frames.
    fn push_stream_event(&self, bytes: &[u8]) {
        let obj = self.obj();
        let segment = obj.segment();
        let mode = self.settings.lock().unwrap().timestamp_mode;
        let now = obj.current_running_time();
        let arrived = self
            .stats
            .lock()
            .unwrap()
            .travelling
            .arrived(&obj, bytes, &segment, mode, now);
        if let Arrived::Push(event) = arrived {
            let what = event.type_();
            if !obj.src_pad().push_event(event) {
                gst::debug!(
                    CAT,
                    imp = self,
                    "downstream refused the producer's {what:?} event"
                );
            }
        }
    }

    /// Counts frames missed in the stats, warning the first time.
    fn count_missed(&self, missed: u64) {
        // Most frames follow the last one: no second lock of the stats.
        if missed == 0 {
            return;
        }
        let mut stats = self.stats.lock().unwrap();
        stats.missed += missed;
        let first_missed = !std::mem::replace(&mut stats.warned_behind, true);
        let total_missed = stats.missed;
        drop(stats);
        if first_missed {
            self.warn_behind(total_missed);
        }
    }

    /// Once per start: this consumer fell behind its producer and missed
    /// frames; how to get every frame.
    fn warn_behind(&self, missed: u64) {
        let Settings {
            channel, frames, ..
        } = self.settings.lock().unwrap().clone();
        let how = match frames {
            crate::enums::ConsumerMode::Every => {
                "its producer drops frames (when-full=drop on rscudaipcsink)".to_owned()
            }
            _ => "the channel is live and this consumer is slower than its producer, which does not wait for it; set frames=every on rscudaipcsrc to get every frame (the producer then waits for this consumer), or frames=latest to take only the newest".to_owned(),
        };
        gst::element_imp_warning!(
            self,
            gst::ResourceError::Read,
            (
                "rscudaipcsrc missed {} of channel '{}' (stats: missed)",
                crate::hints::count(missed, "frame"),
                channel
            ),
            ["{}", how]
        );
    }

    /// By default this pipeline's running time now; while not playing
    /// (prerolling), the last one given (zero at first), so that a syncing
    /// sink never waits on it.
    fn timestamps(&self) -> Timestamps {
        let (is_live, mode) = {
            let settings = self.settings.lock().unwrap();
            (settings.is_live, settings.timestamp_mode)
        };
        match mode {
            TimestampMode::Producer => return Timestamps::Producer,
            TimestampMode::Pipeline if is_live => return Timestamps::ByBaseSrc,
            TimestampMode::Pipeline => {}
        }
        let obj = self.obj();
        let now = (obj.current_state() == gst::State::Playing)
            .then(|| obj.current_running_time())
            .flatten();
        let mut state = self.state.lock().unwrap();
        state.last_running_time = now.unwrap_or_default().max(state.last_running_time);
        Timestamps::RunningTime(state.last_running_time)
    }

    /// Follows `on-producer-lost` for a channel that cannot go on, `why`
    /// saying so; an error adds `hint`, what the user can change.
    fn producer_lost(&self, why: &str, hint: &str) -> Result<(), gst::FlowError> {
        let on_producer_lost = self.settings.lock().unwrap().on_producer_lost;
        gst::info!(CAT, imp = self, "{why}");
        match on_producer_lost {
            ProducerLost::Error => {
                gst::element_imp_error!(self, gst::ResourceError::Read, ("{}{}", why, hint));
                Err(gst::FlowError::Error)
            }
            ProducerLost::Eos => Err(gst::FlowError::Eos),
            ProducerLost::Wait => {
                *self.waker.lock().unwrap() = None;
                self.deactivate_output();
                self.state.lock().unwrap().channel = None;
                Ok(())
            }
        }
    }
}
