// SPDX-License-Identifier: MPL-2.0

//! `cudaipc-bridge receive`: listens for a sender, and publishes what it
//! sends on a local channel that any local consumer reads as it reads a
//! local producer's. One sender at a time; when it goes, the channel is
//! closed as when a local producer dies, and the next sender opens it anew.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cudaipc_channel::{FrameMeta, IpcMode, WaitMode, WhenFull};
use cudaipc_transport::cuda::Device;
use cudaipc_transport::{GpuSync, Publisher, PublisherConfig, SlotLoan, TransportKind};
use cudaipc_ucx::{Context, Endpoint, Listener, Request, Worker};

use crate::auth::{self, Admission};
use crate::link::{Link, LinkError};
use crate::wire::{self, Control, Malformed, Reply};

/// How long a sender has to answer the challenge.
const HANDSHAKE: Duration = Duration::from_secs(5);
/// Events kept until the stream's first frame.
const MAX_EARLY_EVENTS: usize = 16;
/// How long local consumers may finish their reads when a sender goes.
const CLOSE_GRACE: Duration = Duration::from_millis(200);

pub struct ReceiveOptions {
    pub listen: SocketAddr,
    pub channel: String,
    /// `None`: CUDA where there is a GPU, host memory where not.
    pub transport: Option<TransportKind>,
    pub device: i32,
    pub admission: Admission,
    pub patience: Duration,
    pub frame_data_bound: u32,
    /// Local consumers to wait for before the first frame (as the sink's
    /// `wait-for-connection`).
    pub wait_for_consumers: u32,
}

pub fn run(options: &ReceiveOptions, stop: &AtomicBool) -> Result<(), String> {
    let context = Context::new("cudaipc-bridge-receive").map_err(|e| e.to_string())?;
    let worker = Worker::new(&context).map_err(|e| e.to_string())?;
    let listener = Listener::bind(&worker, options.listen)
        .map_err(|e| format!("cannot listen on {}: {e}", options.listen))?;
    let address = listener.local_address().map_err(|e| e.to_string())?;
    // What the tests and an operator wait for: the port is open.
    println!(
        "cudaipc-bridge: receiving channel '{}' on {address}",
        options.channel
    );
    let mut session = u16::from_le_bytes([auth::nonce()?[0], 1]);
    while !stop.load(Ordering::SeqCst) {
        worker.wait(Duration::from_millis(100));
        let Some(request) = listener.next_request() else {
            continue;
        };
        let client = request.client;
        let from = client.map_or("a sender".to_string(), |c| c.to_string());
        let refusal = options.admission.refuse_address(client.map(|c| c.ip()));
        let endpoint = match Endpoint::accept(&worker, request) {
            Ok(endpoint) => endpoint,
            Err(e) => {
                eprintln!("cudaipc-bridge: cannot accept {from}: {e}");
                continue;
            }
        };
        session = session.wrapping_add(1);
        let link = Link {
            worker: worker.clone(),
            endpoint,
            patience: options.patience,
        };
        let admitted = match refusal {
            // Told why, so that the sender's operator sees it; nothing else.
            Some(why) => Err(why),
            None => admit(&link, session, &options.admission),
        };
        if let Err(why) = admitted {
            eprintln!("cudaipc-bridge: refused {from}: {why}");
            // Best effort: a peer that failed the handshake may be gone.
            link.send(wire::reply_tag(), &Reply::Refused(why).encode())
                .ok();
            continue;
        }
        eprintln!("cudaipc-bridge: sender {from} connected");
        let mut receiving = Receiving {
            options,
            link: &link,
            listener: &listener,
            session,
            publisher: None,
            frame_size: 0,
            frames: 0,
            missed_upstream: 0,
            early_events: Vec::new(),
            streaming: false,
            incoming: VecDeque::new(),
        };
        let outcome = receiving.run(stop);
        let (frames, missed) = (receiving.frames, receiving.missed_upstream);
        receiving.close_channel();
        match outcome {
            Ok(()) => eprintln!("cudaipc-bridge: stopped ({frames} frames received)"),
            Err(e) => eprintln!(
                "cudaipc-bridge: sender {from} lost: {e} ({frames} frames received, {missed} missed on the sending side); channel '{}' closed, waiting for a sender",
                options.channel
            ),
        }
    }
    Ok(())
}

/// The challenge, and the sender's answer checked; `Err`: why it is refused.
fn admit(link: &Link, session: u16, admission: &Admission) -> Result<(), String> {
    let nonce = auth::nonce()?;
    let challenge = Reply::Challenge {
        nonce,
        secret: admission.secret.is_some(),
        session,
    };
    link.send(wire::reply_tag(), &challenge.encode())
        .map_err(|e| e.to_string())?;
    let mut buffer = vec![0u8; 256];
    let length = link
        .receive(wire::control_tag(session), &mut buffer, HANDSHAKE)
        .map_err(|e| format!("no hello: {e}"))?;
    let Ok(Control::Hello { version, proof }) = Control::decode(&buffer[..length]) else {
        return Err("its first message is not a hello".into());
    };
    if version != wire::VERSION {
        return Err(format!(
            "it speaks version {version}, this receiver {}",
            wire::VERSION
        ));
    }
    if let Some(secret) = &admission.secret {
        if !secret.verify(&nonce, &proof) {
            return Err("it does not know the secret (--secret-file)".into());
        }
    }
    link.send(wire::reply_tag(), &Reply::Accepted.encode())
        .map_err(|e| e.to_string())
}

pub(crate) type BridgePublisher = Arc<Publisher<()>>;

pub(crate) struct Receiving<'a> {
    pub(crate) options: &'a ReceiveOptions,
    pub(crate) link: &'a Link,
    listener: &'a Listener,
    pub(crate) session: u16,
    pub(crate) publisher: Option<BridgePublisher>,
    /// The frame size the slots were made for.
    pub(crate) frame_size: usize,
    pub(crate) frames: u64,
    pub(crate) missed_upstream: u64,
    /// Events that came before the stream's first frame.
    early_events: Vec<Vec<u8>>,
    /// A frame was published on this channel: events go out as they come.
    streaming: bool,
    /// Frames whose bytes are on their way into their slots, oldest first.
    pub(crate) incoming: VecDeque<Incoming>,
}

/// A frame landing in its slot (`incoming.rs` starts and lands them). The
/// request drops (is cancelled and waited for) before the loan gives the
/// slot back.
pub(crate) struct Incoming {
    pub(crate) request: Request<'static>,
    pub(crate) loan: SlotLoan<()>,
    pub(crate) meta: FrameMeta,
    pub(crate) missed_before: u64,
}

impl Receiving<'_> {
    fn run(&mut self, stop: &AtomicBool) -> Result<(), LinkError> {
        let mut buffer = vec![0u8; wire::MAX_CONTROL];
        loop {
            let Some(length) = self.next_control(&mut buffer, stop)? else {
                return Ok(());
            };
            let message = Control::decode(&buffer[..length])?;
            if !matches!(message, Control::Frame(_) | Control::Heartbeat) {
                // What is not a frame goes after the frames before it.
                self.settle()?;
            }
            match message {
                Control::Hello { .. } => return Err(Malformed("a second hello").into()),
                Control::Caps { caps, live } => self.caps(&caps, live)?,
                Control::Frame(header) => self.frame(header)?,
                // A stream's first events (stream-start, tags) come before
                // its caps, which make the channel, and before the first
                // frame, which waits for the local consumers asked for
                // (--wait-for-connection): they wait with it.
                Control::Event(bytes) => match &self.publisher {
                    Some(publisher) if self.streaming => {
                        publisher.publish_event(&bytes).map_err(channel_error)?;
                    }
                    _ if self.early_events.len() < MAX_EARLY_EVENTS => {
                        self.early_events.push(bytes)
                    }
                    _ => return Err(Malformed("events without frames").into()),
                },
                Control::Eos => {
                    self.publish_early_events()?;
                    if let Some(publisher) = &self.publisher {
                        publisher.eos();
                    }
                }
                Control::ProducerGone => self.close_channel(),
                Control::Heartbeat => {}
            }
        }
    }

    /// The next control message's length; `None` once stopped. Other
    /// senders asking meanwhile are refused.
    fn next_control(
        &mut self,
        buffer: &mut [u8],
        stop: &AtomicBool,
    ) -> Result<Option<usize>, LinkError> {
        let worker = self.link.worker.clone();
        let mut request = worker.receive(wire::control_tag(self.session), wire::EXACT, buffer)?;
        let deadline = Instant::now() + self.options.patience;
        loop {
            if let Some(result) = request.poll() {
                return result.map(|r| Some(r.length)).map_err(|status| {
                    LinkError::Ucx(cudaipc_ucx::Error::Call {
                        call: "a receive",
                        status,
                    })
                });
            }
            if let Some(status) = self.link.endpoint.failure() {
                return Err(LinkError::Lost(status));
            }
            if Instant::now() > deadline {
                return Err(LinkError::Silent(self.options.patience));
            }
            if stop.load(Ordering::SeqCst) {
                return Ok(None);
            }
            while let Some(other) = self.listener.next_request() {
                eprintln!(
                    "cudaipc-bridge: refused {}: a sender is connected already",
                    other
                        .client
                        .map_or("a sender".to_string(), |c| c.to_string())
                );
                self.listener.reject(other).ok();
            }
            if !self.incoming.is_empty() {
                // A frame on its way: progress it, publish it once landed.
                self.poll_incoming()?;
                continue;
            }
            worker.wait(Duration::from_millis(20));
        }
    }

    pub(crate) fn publisher(&self, what: &'static str) -> Result<&BridgePublisher, LinkError> {
        self.publisher
            .as_ref()
            .ok_or(LinkError::Malformed(Malformed(what)))
    }

    fn caps(&mut self, caps: &str, live: bool) -> Result<(), LinkError> {
        if self.publisher.is_none() {
            let publisher = create_publisher(self.options)?;
            // Before the slots are made: a live ring's depth is its own.
            publisher.set_paced(live);
            self.publisher = Some(Arc::new(publisher));
            self.frame_size = 0;
        }
        self.publisher("caps")?
            .set_caps(caps)
            .map_err(channel_error)?;
        Ok(())
    }

    /// Publishes the events that waited for the stream's first frame (or
    /// its end); from here on events are published as they come.
    pub(crate) fn publish_early_events(&mut self) -> Result<(), LinkError> {
        let Some(publisher) = &self.publisher else {
            return Ok(());
        };
        for event in self.early_events.drain(..) {
            publisher.publish_event(&event).map_err(channel_error)?;
        }
        self.streaming = true;
        Ok(())
    }

    /// Closes the local channel: its consumers see their producer lost.
    fn close_channel(&mut self) {
        // Frames still on their way are cancelled, their slots given back.
        self.incoming.clear();
        self.early_events.clear();
        self.streaming = false;
        if let Some(publisher) = self.publisher.take() {
            publisher.close(CLOSE_GRACE);
        }
    }
}

fn channel_error(e: cudaipc_channel::ChannelError) -> LinkError {
    LinkError::Local(e.to_string())
}

fn create_publisher(options: &ReceiveOptions) -> Result<Publisher<()>, LinkError> {
    let kind = TransportKind::resolve(options.transport);
    let device = match kind {
        TransportKind::Cuda => Some(Device::get(options.device).map_err(|e| {
            LinkError::Local(format!(
                "the cuda transport needs CUDA device {}: {e}",
                options.device
            ))
        })?),
        TransportKind::Host => None,
    };
    let gpu_sync = GpuSync::resolve(None, kind, device.as_deref())
        .map_err(|e| LinkError::Local(e.to_string()))?;
    Publisher::create(PublisherConfig {
        channel: options.channel.clone(),
        kind,
        device,
        slots: 0,
        permissions: 0o600,
        gpu_sync,
        when_full: WhenFull::Block,
        wait_mode: WaitMode::Hybrid,
        wait_for_consumers: options.wait_for_consumers,
        ipc_mode: IpcMode::default(),
        peers: Default::default(),
        frame_data_bound: options.frame_data_bound,
    })
    .map_err(|e| LinkError::Local(format!("cannot create channel '{}': {e}", options.channel)))
}
