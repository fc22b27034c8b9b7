// SPDX-License-Identifier: MPL-2.0

//! `cudaipc-bridge send`: a consumer of a local channel, at its own pace,
//! that sends each frame it takes to a receiver on another host. It
//! connects, proves the secret if asked, and keeps trying again while the
//! receiver is unreachable or gone; a refusal ends it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cudaipc_channel::{ConsumerMode, WaitMode};
use cudaipc_transport::{
    Event, HeldFrame, SlotMemory, Subscriber, SubscriberConfig, SubscriberError,
};
use cudaipc_ucx::{Context, Endpoint, Request, Worker};

use crate::auth::Secret;
use crate::link::{Link, LinkError};
use crate::wire::{self, Control, FrameHeader, Reply};

/// How long the receiver has to challenge and to answer.
const HANDSHAKE: Duration = Duration::from_secs(5);
/// How often an idle sender says it is alive.
const HEARTBEAT: Duration = Duration::from_millis(500);
/// How long one wait for the channel's next event lasts.
const POLL: Duration = Duration::from_millis(250);
/// The pause before trying an unreachable receiver again.
const RETRY: Duration = Duration::from_secs(1);
/// Frames whose bytes are on their way at once: the next one's transfer
/// starts while the receiver publishes the last (one at a time leaves the
/// link idle for a round trip per frame).
const WINDOW: usize = 2;

/// A frame being sent: its slot is held until the send finished. The
/// request drops (is cancelled and waited for) before the frame does.
struct InFlight {
    request: Request<'static>,
    frame: HeldFrame,
    taken: Instant,
}

pub struct SendOptions {
    pub channel: String,
    pub to: SocketAddr,
    pub mode: ConsumerMode,
    pub secret: Option<Secret>,
    pub patience: Duration,
}

/// Why a connection ended.
enum End {
    Stopped,
    Lost(LinkError),
}

pub fn run(options: &SendOptions, stop: &AtomicBool) -> Result<(), String> {
    // Attached first (before UCX starts, which takes a while), and kept
    // from one connection to the next: a consumer that attaches late
    // misses the events (stream-start, tags) published before it.
    let mut subscriber = wait_for_producer(options, stop)?;
    let context = Context::new("cudaipc-bridge-send").map_err(|e| e.to_string())?;
    let worker = Worker::new(&context).map_err(|e| e.to_string())?;
    let mut said_unreachable = false;
    while !stop.load(Ordering::SeqCst) {
        if subscriber.is_none() {
            subscriber = wait_for_producer(options, stop)?;
            continue;
        }
        let link = match Endpoint::connect(&worker, options.to) {
            Ok(endpoint) => Link {
                worker: worker.clone(),
                endpoint,
                patience: options.patience,
            },
            Err(e) => return Err(format!("cannot connect to {}: {e}", options.to)),
        };
        let session = match handshake(&link, options.secret.as_ref()) {
            Ok(session) => session,
            Err(Handshake::Refused(why)) => {
                return Err(format!(
                    "the receiver at {} refused this sender: {why}",
                    options.to
                ));
            }
            Err(Handshake::Failed(e)) => {
                if !said_unreachable {
                    eprintln!(
                        "cudaipc-bridge: no receiver at {} ({e}); trying again every {} s",
                        options.to,
                        RETRY.as_secs()
                    );
                    said_unreachable = true;
                }
                drop(link);
                std::thread::sleep(RETRY);
                continue;
            }
        };
        said_unreachable = false;
        eprintln!(
            "cudaipc-bridge: sending channel '{}' to {}",
            options.channel, options.to
        );
        let mut sending = Sending::new(options, &link, session, subscriber.take());
        let end = sending.run(stop);
        subscriber = sending.subscriber.take();
        match end {
            End::Stopped => break,
            End::Lost(e) => {
                eprintln!(
                    "cudaipc-bridge: the receiver at {} is gone: {e}; reconnecting",
                    options.to
                )
            }
        }
    }
    Ok(())
}

/// How the sender reads the local channel.
fn subscriber_config(options: &SendOptions, connect_timeout: Option<Duration>) -> SubscriberConfig {
    SubscriberConfig {
        channel: options.channel.clone(),
        mode: options.mode,
        wait_mode: WaitMode::Hybrid,
        connect_timeout,
        device_id: None,
        on_finish_read_error: Arc::new(|_, _| {}),
        ipc_mode: None,
        producers: Default::default(),
        // The frame in flight, kept while asking for the next.
        hold: Some(WINDOW as u32 - 1),
        refuse_self_wait: true,
    }
}

/// Attaches to the local channel, waiting for its producer as long as it
/// takes; `None` once stopped. A channel that cannot be read is an error.
fn wait_for_producer(
    options: &SendOptions,
    stop: &AtomicBool,
) -> Result<Option<Subscriber>, String> {
    let said = || {
        eprintln!(
            "cudaipc-bridge: waiting for a producer on channel '{}'",
            options.channel
        )
    };
    match Subscriber::attach(subscriber_config(options, None), stop, said) {
        Ok(subscriber) => Ok(Some(subscriber)),
        Err(SubscriberError::Interrupted) => Ok(None),
        Err(e) => Err(format!("channel '{}': {e}", options.channel)),
    }
}

enum Handshake {
    /// The receiver answered no.
    Refused(String),
    /// No receiver, or no answer.
    Failed(LinkError),
}

/// The session number, once the receiver accepted this sender.
fn handshake(link: &Link, secret: Option<&Secret>) -> Result<u16, Handshake> {
    let mut buffer = vec![0u8; 4096];
    let reply = |buffer: &mut Vec<u8>| -> Result<Reply, Handshake> {
        let length = link
            .receive(wire::reply_tag(), buffer, HANDSHAKE)
            .map_err(Handshake::Failed)?;
        Reply::decode(&buffer[..length]).map_err(|e| Handshake::Failed(e.into()))
    };
    let (nonce, needs_secret, session) = match reply(&mut buffer)? {
        Reply::Challenge {
            nonce,
            secret,
            session,
        } => (nonce, secret, session),
        Reply::Refused(why) => return Err(Handshake::Refused(why)),
        Reply::Accepted => return Err(Handshake::Refused("no challenge".into())),
    };
    let proof = match (needs_secret, secret) {
        (true, Some(secret)) => secret.prove(&nonce),
        (true, None) => {
            return Err(Handshake::Refused(
                "it asks for a shared secret: give --secret-file".into(),
            ));
        }
        (false, _) => [0; wire::NONCE],
    };
    let hello = Control::Hello {
        version: wire::VERSION,
        proof,
    };
    link.send(wire::control_tag(session), &hello.encode())
        .map_err(Handshake::Failed)?;
    match reply(&mut buffer)? {
        Reply::Accepted => Ok(session),
        Reply::Refused(why) => Err(Handshake::Refused(why)),
        Reply::Challenge { .. } => Err(Handshake::Refused("a second challenge".into())),
    }
}

struct Sending<'a> {
    options: &'a SendOptions,
    link: &'a Link,
    session: u16,
    subscriber: Option<Subscriber>,
    last_sent: Instant,
    said_waiting: bool,
    sent: Sent,
    in_flight: VecDeque<InFlight>,
}

/// What a connection carried, said when it ends: the frames, the ones the
/// channel's consumer missed (the network's pace), and how long sending one
/// frame took (from taking it off the channel to the receiver's slot).
#[derive(Default)]
struct Sent {
    frames: u64,
    missed: u64,
    first: Option<Instant>,
    send_us: Vec<u32>,
}

impl Sent {
    fn record(&mut self, took: Duration, missed_before: u64) {
        self.first.get_or_insert_with(Instant::now);
        self.frames += 1;
        self.missed += missed_before;
        if self.send_us.len() < 1_000_000 {
            self.send_us
                .push(took.as_micros().min(u32::MAX as u128) as u32);
        }
    }

    fn summary(&mut self) -> String {
        let seconds = self.first.map_or(0.0, |t| t.elapsed().as_secs_f64());
        self.send_us.sort_unstable();
        let at = |q: f64| {
            let n = self.send_us.len();
            if n == 0 {
                0
            } else {
                self.send_us[((n - 1) as f64 * q) as usize]
            }
        };
        format!(
            "sent {} frames in {seconds:.2} s ({:.1} FPS), {} missed; send time p50 {} us, p99 {} us, max {} us",
            self.frames,
            if seconds > 0.0 {
                self.frames as f64 / seconds
            } else {
                0.0
            },
            self.missed,
            at(0.5),
            at(0.99),
            at(1.0)
        )
    }
}

impl<'a> Sending<'a> {
    fn new(
        options: &'a SendOptions,
        link: &'a Link,
        session: u16,
        subscriber: Option<Subscriber>,
    ) -> Self {
        Self {
            options,
            link,
            session,
            subscriber,
            last_sent: Instant::now(),
            said_waiting: false,
            sent: Sent::default(),
            in_flight: VecDeque::new(),
        }
    }

    /// Waits for the oldest frame in flight; its slot goes back.
    fn finish_oldest(&mut self) -> Result<(), LinkError> {
        let Some(InFlight {
            request,
            frame,
            taken,
        }) = self.in_flight.pop_front()
        else {
            return Ok(());
        };
        let finished = self.link.finish_send(request);
        let missed_before = frame.missed_before;
        drop(frame);
        finished?;
        self.sent.record(taken.elapsed(), missed_before);
        Ok(())
    }

    /// Progresses the frames in flight once; the oldest goes back once sent.
    fn progress_in_flight(&mut self) -> Result<(), LinkError> {
        if let Some(status) = self.link.endpoint.failure() {
            return Err(LinkError::Lost(status));
        }
        let Some(oldest) = self.in_flight.front_mut() else {
            return Ok(());
        };
        match oldest.request.poll() {
            Some(_) => self.finish_oldest(),
            None if oldest.taken.elapsed() > self.options.patience => {
                Err(LinkError::Silent(self.options.patience))
            }
            None => Ok(()),
        }
    }

    /// Waits for every frame in flight (before the channel is let go).
    fn settle(&mut self) -> Result<(), LinkError> {
        while !self.in_flight.is_empty() {
            self.finish_oldest()?;
        }
        Ok(())
    }

    fn run(&mut self, stop: &AtomicBool) -> End {
        // A receiver that comes in mid-stream learns the caps first.
        if let Err(e) = self.announce_caps() {
            return End::Lost(e);
        }
        let end = loop {
            if stop.load(Ordering::SeqCst) {
                break End::Stopped;
            }
            if let Err(e) = self.step(stop) {
                break End::Lost(e);
            }
        };
        let end = match (end, self.settle()) {
            (End::Stopped, Err(e)) => End::Lost(e),
            (end, _) => end,
        };
        // Cancelled, if unfinished, before the subscriber goes.
        self.in_flight.clear();
        // What the benchmark and an operator read.
        println!("cudaipc-bridge: {}", self.sent.summary());
        end
    }

    fn control(&mut self, message: &Control) -> Result<(), LinkError> {
        self.link
            .send(wire::control_tag(self.session), &message.encode())?;
        self.last_sent = Instant::now();
        Ok(())
    }

    fn heartbeat_if_due(&mut self) -> Result<(), LinkError> {
        self.link.worker.progress();
        if let Some(status) = self.link.endpoint.failure() {
            return Err(LinkError::Lost(status));
        }
        if self.last_sent.elapsed() >= HEARTBEAT {
            self.control(&Control::Heartbeat)?;
        }
        Ok(())
    }

    fn step(&mut self, stop: &AtomicBool) -> Result<(), LinkError> {
        let Some(subscriber) = self.subscriber.as_mut() else {
            self.subscriber = self.attach(stop);
            return self.heartbeat_if_due();
        };
        // With a frame in flight, UCX needs progress calls to push it out:
        // the channel is only looked at, not waited on.
        let wait = if self.in_flight.is_empty() {
            POLL
        } else {
            Duration::ZERO
        };
        let event = match subscriber.next_within(stop, Some(wait)) {
            Ok(Some(event)) => event,
            Ok(None) if !self.in_flight.is_empty() => return self.progress_in_flight(),
            Ok(None) => return self.heartbeat_if_due(),
            Err(SubscriberError::Interrupted) => return Ok(()),
            Err(e) => {
                eprintln!("cudaipc-bridge: channel '{}': {e}", self.options.channel);
                self.settle()?;
                self.subscriber = None;
                return self.control(&Control::ProducerGone);
            }
        };
        match event {
            Event::Caps(caps) => {
                let live = subscriber.channel_is_live();
                self.control(&Control::Caps { caps, live })
            }
            Event::Frame(frame) => self.frame(frame),
            Event::StreamEvent(bytes) => self.control(&Control::Event(bytes)),
            Event::Eos => self.control(&Control::Eos),
            Event::ProducerGone(_) => {
                self.settle()?;
                self.subscriber = None;
                self.control(&Control::ProducerGone)
            }
        }
    }

    /// The caps of the stream so far, if it has begun.
    fn announce_caps(&mut self) -> Result<(), LinkError> {
        let Some(subscriber) = self.subscriber.as_mut() else {
            return Ok(());
        };
        let live = subscriber.channel_is_live();
        match subscriber.current_caps() {
            Ok(Some(caps)) => self.control(&Control::Caps { caps, live }),
            _ => Ok(()),
        }
    }

    /// Attaches to the local channel, waiting a little for its producer.
    fn attach(&mut self, stop: &AtomicBool) -> Option<Subscriber> {
        match Subscriber::attach(subscriber_config(self.options, Some(POLL)), stop, || {}) {
            Ok(subscriber) => {
                self.said_waiting = false;
                Some(subscriber)
            }
            Err(SubscriberError::NoProducer(_) | SubscriberError::Interrupted) => {
                if !self.said_waiting {
                    eprintln!(
                        "cudaipc-bridge: waiting for a producer on channel '{}'",
                        self.options.channel
                    );
                    self.said_waiting = true;
                }
                None
            }
            Err(e) => {
                eprintln!(
                    "cudaipc-bridge: channel '{}': {e}; trying again",
                    self.options.channel
                );
                std::thread::sleep(RETRY);
                None
            }
        }
    }

    fn frame(&mut self, frame: HeldFrame) -> Result<(), LinkError> {
        let taken = Instant::now();
        let header = FrameHeader {
            number: frame.seq,
            size: frame.size,
            pts: frame.pts,
            dts: frame.dts,
            duration: frame.duration,
            offset: frame.offset,
            offset_end: frame.offset_end,
            flags: frame.flags,
            planes: frame.planes.clone(),
            missed_before: frame.missed_before,
            data: frame.data.clone(),
        };
        self.control(&Control::Frame(header))?;
        let size = frame.size as usize;
        let memory = frame.memory();
        let address = match &memory {
            SlotMemory::Host(_) => match frame.host_bytes() {
                Some(bytes) => bytes.as_ptr() as *const std::ffi::c_void,
                None => return Err(LinkError::Local("a frame beyond its slot".into())),
            },
            SlotMemory::Device(region) => {
                // UCX reads on its own stream: the producer's writes, so far
                // only ordered before this process's stream, must be done.
                if !frame.is_written() {
                    region
                        .device()
                        .synchronize_context()
                        .map_err(|e| LinkError::Local(e.to_string()))?;
                }
                region.ptr() as usize as *const std::ffi::c_void
            }
        };
        let tag = wire::payload_tag(self.session, frame.seq);
        // SAFETY: the frame holds its slot (the producer does not write it)
        // until it is dropped, after its request (InFlight's field order).
        let request = unsafe { self.link.start_send(tag, address, size) }?;
        self.in_flight.push_back(InFlight {
            request,
            frame,
            taken,
        });
        self.last_sent = Instant::now();
        while self.in_flight.len() >= WINDOW {
            self.finish_oldest()?;
        }
        Ok(())
    }
}
