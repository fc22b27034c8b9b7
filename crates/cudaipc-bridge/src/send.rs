// SPDX-License-Identifier: MPL-2.0

//! `cudaipc-bridge send`: a consumer of a local channel, at its own pace,
//! that sends each frame it takes to a receiver on another host. It
//! connects, proves the secret if asked, and keeps trying again while the
//! receiver is unreachable or gone; a refusal ends it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cudaipc_channel::{ConsumerMode, WaitMode};
use cudaipc_transport::{
    Event, HeldFrame, SlotMemory, Subscriber, SubscriberConfig, SubscriberError,
};
use cudaipc_ucx::{Context, Endpoint, Worker};

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
    let context = Context::new("cudaipc-bridge-send").map_err(|e| e.to_string())?;
    let worker = Worker::new(&context).map_err(|e| e.to_string())?;
    let mut said_unreachable = false;
    while !stop.load(Ordering::SeqCst) {
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
        match Sending::new(options, &link, session).run(stop) {
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
}

impl<'a> Sending<'a> {
    fn new(options: &'a SendOptions, link: &'a Link, session: u16) -> Self {
        Self {
            options,
            link,
            session,
            subscriber: None,
            last_sent: Instant::now(),
            said_waiting: false,
        }
    }

    fn run(&mut self, stop: &AtomicBool) -> End {
        loop {
            if stop.load(Ordering::SeqCst) {
                return End::Stopped;
            }
            if let Err(e) = self.step(stop) {
                return End::Lost(e);
            }
        }
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
        let event = match subscriber.next_within(stop, Some(POLL)) {
            Ok(Some(event)) => event,
            Ok(None) => return self.heartbeat_if_due(),
            Err(SubscriberError::Interrupted) => return Ok(()),
            Err(e) => {
                eprintln!("cudaipc-bridge: channel '{}': {e}", self.options.channel);
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
                self.subscriber = None;
                self.control(&Control::ProducerGone)
            }
        }
    }

    /// Attaches to the local channel, waiting a little for its producer.
    fn attach(&mut self, stop: &AtomicBool) -> Option<Subscriber> {
        let config = SubscriberConfig {
            channel: self.options.channel.clone(),
            mode: self.options.mode,
            wait_mode: WaitMode::Hybrid,
            connect_timeout: Some(POLL),
            device_id: None,
            on_finish_read_error: Arc::new(|_, _| {}),
            ipc_mode: None,
            producers: Default::default(),
            hold: None,
            refuse_self_wait: true,
        };
        match Subscriber::attach(config, stop, || {}) {
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
        // until it is dropped, after the send finished or was cancelled.
        let sent = unsafe { self.link.send_memory(tag, address, size) };
        drop(frame);
        sent?;
        self.last_sent = Instant::now();
        Ok(())
    }
}
