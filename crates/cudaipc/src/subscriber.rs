// SPDX-License-Identifier: MPL-2.0

//! The consumer end: attaches to a channel and hands out its frames, each
//! holding its slot until dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cudaipc_channel::socket::Peers;
use cudaipc_channel::{ChannelError, ConsumerMode, IpcMode, Setting, WaitMode};
use cudaipc_transport::{
    Event, HeldFrame, SlotMemory, SubscriberConfig, SubscriberError, TransportKind,
};

use crate::closer::Closer;
use crate::{Error, VideoLayout};

/// Which frames a [`Subscriber`] gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Frames {
    /// Every frame, in order, at this subscriber's own pace on a live
    /// channel (a producer paced by a clock or a live source): there the
    /// producer never waits for it, and frames it cannot keep up with are
    /// missed ([`Subscriber::frames_missed`]). On a channel that is not
    /// live, the same as [`Every`](Self::Every).
    #[default]
    Auto,
    /// Every frame, in order, live or not: a producer with
    /// `when_full: Block` waits for this subscriber, so nothing is lost,
    /// even when that holds a live source back.
    Every,
    /// Only the newest frame; never holds the producer back.
    Latest,
}

/// How a [`Subscriber`] attaches; [`Default`] gives the elements'
/// defaults.
#[derive(Debug, Clone)]
pub struct SubscriberOptions {
    /// How long [`Subscriber::attach`] waits for a producer to appear
    /// (`None`: forever; so does a timeout of more than a hundred years).
    pub timeout: Option<Duration>,
    /// Every frame (at its own pace on a live channel, or always), or only
    /// the newest.
    pub frames: Frames,
    /// How many frames this subscriber keeps while it asks for the next
    /// one (a batch of 8: 7). `None`: not declared. Declared, a ring with
    /// fewer than `hold + 2` slots grows to them where the publisher
    /// leaves its depth to the transport, and is refused where it set
    /// `slots` ([`Error::Holds`]); asking for a frame while holding more
    /// fails at once. Undeclared,
    /// asking while holding every slot of the ring fails at once
    /// ([`Error::Holds`]) rather than waiting on itself. At most 62
    /// ([`Setting::Hold`]'s max: a ring has at most 64 slots); more is
    /// refused by [`Subscriber::attach`] ([`Error::OutOfRange`]).
    pub hold: Option<u32>,
    /// How the channel is reached; `None`: through its socket if it has
    /// one, else by its files' names.
    pub ipc_mode: Option<IpcMode>,
    /// User ids trusted as the channel's producer beside this user (a
    /// channel owned by anyone else is refused: another user may have
    /// taken the name).
    pub allowed_producer_uids: Vec<u32>,
    /// Group ids trusted as the channel's producer.
    pub allowed_producer_gids: Vec<u32>,
    /// CUDA device to read a cuda channel on; `None`: the producer's own.
    pub device: Option<i32>,
}

impl Default for SubscriberOptions {
    fn default() -> Self {
        Self {
            timeout: Some(Duration::from_secs(10)),
            frames: Frames::Auto,
            hold: None,
            ipc_mode: None,
            allowed_producer_uids: Vec::new(),
            allowed_producer_gids: Vec::new(),
            device: None,
        }
    }
}

/// The consumer end of a channel: what `rscudaipcsrc` is to a pipeline. It
/// reads what a [`Publisher`](crate::Publisher) or `rscudaipcsink` publishes.
///
/// ```
/// use cudaipc::{Publisher, PublisherOptions, Subscriber, SubscriberOptions, Transport,
///               VideoFormat, VideoLayout};
/// use std::time::Duration;
///
/// let channel = format!("doc-subscriber-{}", std::process::id());
/// let layout = VideoLayout::new(VideoFormat::Gray8, 32, 16)?;
/// let host = PublisherOptions { transport: Transport::Host, ..Default::default() };
/// let publisher = Publisher::create(&channel, layout.clone(), host)?;
/// let mut subscriber = Subscriber::attach(&channel, SubscriberOptions::default())?;
///
/// let pixels: Vec<u8> = (0..layout.frame_size()).map(|i| i as u8).collect();
/// publisher.publish(&pixels, Some(Duration::from_millis(40)))?;
/// publisher.eos();
///
/// let timeout = Some(Duration::from_secs(5));
/// let frame = subscriber.next_frame(timeout)?.expect("a frame before the end");
/// assert_eq!(frame.host_bytes(), Some(&pixels[..]));
/// assert_eq!(frame.pts(), Some(Duration::from_millis(40)));
/// assert_eq!(frame.layout(), &layout);
/// drop(frame); // the slot goes back to the publisher
/// assert!(subscriber.next_frame(timeout)?.is_none(), "the end of the stream");
/// # Ok::<(), cudaipc::Error>(())
/// ```
pub struct Subscriber {
    inner: cudaipc_transport::Subscriber,
    channel: String,
    /// The layout the producer's caps announced last.
    layout: Option<VideoLayout>,
    /// Set by a [`Closer`]: waits end with it.
    closed: Arc<AtomicBool>,
    /// The last event handed out was the end of a stream: until a new one
    /// starts, every call says so again at once.
    ended: bool,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("channel", &self.channel)
            .field("layout", &self.layout)
            .finish()
    }
}

impl Subscriber {
    /// Attaches to `channel`, waiting up to `options.timeout` for its
    /// producer. [`Error::NoProducer`] if none appeared;
    /// [`Error::PermissionDenied`] if the channel belongs to a user that
    /// is not trusted, or its files may not be opened.
    pub fn attach(channel: &str, options: SubscriberOptions) -> Result<Self, Error> {
        if let Some(hold) = options.hold {
            Setting::Hold
                .check(u64::from(hold))
                .map_err(|e| Error::channel(channel, "attach to the channel", e))?;
        }
        let options = SubscriberOptions {
            timeout: bounded(options.timeout),
            ..options
        };
        let config = SubscriberConfig {
            channel: channel.to_owned(),
            mode: match options.frames {
                Frames::Auto => ConsumerMode::Auto,
                Frames::Every => ConsumerMode::EveryFrame,
                Frames::Latest => ConsumerMode::Latest,
            },
            hold: options.hold,
            refuse_self_wait: true,
            wait_mode: WaitMode::Hybrid,
            connect_timeout: options.timeout,
            device_id: options.device,
            // The slot is released all the same, and a frame already
            // dropped has nobody left to tell.
            on_finish_read_error: Arc::new(|_, _| {}),
            ipc_mode: options.ipc_mode,
            producers: Peers {
                uids: options.allowed_producer_uids,
                gids: options.allowed_producer_gids,
            },
        };
        let closed = Arc::new(AtomicBool::new(false));
        let inner = cudaipc_transport::Subscriber::attach(config, &closed, || {}).map_err(
            |e| match e {
                SubscriberError::NoProducer(_) => Error::NoProducer {
                    channel: channel.to_owned(),
                    timeout: options.timeout,
                },
                SubscriberError::Attach(e) => Error::channel(channel, "attach to the channel", e),
                e @ SubscriberError::NoCuda { .. } => Error::Device(match &e {
                    SubscriberError::NoCuda { source, .. } => {
                        format!("{e}{}", crate::error::no_driver_note(source))
                    }
                    _ => e.to_string(),
                }),
                e @ SubscriberError::ProducerGpuNotVisible => Error::Device(format!(
                    "{e}; set SubscriberOptions::device to read through peer access from another GPU"
                )),
                e @ SubscriberError::Device { .. } => Error::Device(e.to_string()),
                e => Error::read(e),
            },
        )?;
        Ok(Self {
            inner,
            channel: channel.to_owned(),
            layout: None,
            closed,
            ended: false,
        })
    }

    /// The channel's name.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Whether the channel's frames are in CUDA device memory (else shared
    /// host memory).
    pub fn is_cuda(&self) -> bool {
        self.inner.kind() == TransportKind::Cuda
    }

    /// Frames this subscriber missed so far: on a live channel, those it
    /// fell too far behind to take ([`Frames::Auto`]); with a producer that
    /// drops, those overwritten before it took them. Ask for
    /// [`Frames::Every`] to get every frame (the producer then waits).
    pub fn frames_missed(&self) -> u64 {
        self.inner.frames_missed()
    }

    /// Whether the channel is live: its producer is paced (a live source,
    /// a clock), and [`Frames::Auto`] subscribers keep their own pace.
    pub fn is_live(&self) -> bool {
        self.inner.channel_is_live()
    }

    /// The layout the producer announced last (`None` before its caps came
    /// with the first frame).
    pub fn layout(&self) -> Option<&VideoLayout> {
        self.layout.as_ref()
    }

    /// Waits up to `timeout` (`None`: as long as it takes; so does a
    /// timeout of more than a hundred years) for the next frame.
    /// `Ok(None)` at the end of the stream, and from then on at once,
    /// without waiting, at every call until the producer starts a new
    /// stream (publishes a frame again, as a pipeline restarted by a
    /// flushing seek does): that call hands out the new stream's first
    /// frame. [`Error::Timeout`] when none came in time;
    /// [`Error::ProducerGone`] once the producer closed the channel
    /// without an end of stream, or died (after an end of stream its
    /// close is that end again: `Ok(None)`); [`Error::Closed`] once
    /// [`close`](Self::close) was called, at once if it was called while
    /// this waits.
    pub fn next_frame(&mut self, timeout: Option<Duration>) -> Result<Option<Frame>, Error> {
        // After an end of stream only a look, never a wait: a new stream's
        // first item is there already, or the end stands.
        let timeout = match self.ended {
            true => Some(Duration::ZERO),
            false => bounded(timeout),
        };
        loop {
            if self.is_closed() {
                return Err(Error::Closed);
            }
            // The wait is `timeout` again after caps: they come with a frame
            // that the next call hands out at once.
            let event = match self.inner.next_within(&self.closed, timeout) {
                Err(SubscriberError::Interrupted) if self.is_closed() => {
                    return Err(Error::Closed);
                }
                other => other.map_err(Error::read),
            };
            let event = match event {
                // The end stands: nothing came after it. (The consumer
                // refuses to wait while this subscriber holds every slot
                // only when nothing new is there.)
                Ok(None) | Err(Error::Holds(ChannelError::HoldsEverySlot { .. })) if self.ended => {
                    return Ok(None);
                }
                event => event?,
            };
            match event {
                None => return Err(Error::Timeout(timeout.unwrap_or_default())),
                Some(Event::Caps(caps)) => self.layout = Some(VideoLayout::from_caps(&caps)?),
                Some(Event::Frame(held)) => {
                    self.ended = false;
                    return self.frame(held).map(Some);
                }
                // GStreamer's events (tags, stream-start) are for the
                // elements; frames and their data are what this API reads.
                Some(Event::StreamEvent(_)) => {}
                Some(Event::Eos) => {
                    self.ended = true;
                    return Ok(None);
                }
                Some(Event::ProducerGone(gone)) => {
                    self.ended = false;
                    return Err(Error::ProducerGone {
                        channel: self.channel.clone(),
                        died: gone == cudaipc_channel::ProducerGone::Died,
                    });
                }
            }
        }
    }

    /// Ends the waits of [`next_frame`](Self::next_frame), which return
    /// [`Error::Closed`] from then on. Idempotent. The channel is detached
    /// from when the subscriber is dropped; frames handed out stay valid
    /// until they are dropped. To close from another thread while one is
    /// blocked in `next_frame` (which borrows the subscriber mutably), use
    /// a [`closer`](Self::closer).
    pub fn close(&self) {
        self.closer().close();
    }

    /// Whether it was closed ([`close`](Self::close) or a [`Closer`]).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// A handle that [closes](Self::close) this subscriber from any
    /// thread: `Send`, `Sync` and cloneable, e.g. for a signal handler or
    /// a UI while another thread is blocked in
    /// [`next_frame`](Self::next_frame).
    pub fn closer(&self) -> Closer {
        Closer::of_subscriber(&self.closed, self.inner.waker())
    }

    /// `held` with its layout: the caps' format and size with the planes
    /// the frame carries (the caps' default layout where it carries none).
    fn frame(&self, held: HeldFrame) -> Result<Frame, Error> {
        let caps = self.layout.as_ref().ok_or_else(|| Error::InvalidCaps {
            caps: String::new(),
            reason: "a frame came before any caps".into(),
        })?;
        let size = usize::try_from(held.size).unwrap_or(usize::MAX);
        let layout = if held.planes.is_empty() && size >= caps.frame_size() {
            Some(caps.clone())
        } else {
            caps.with_wire_planes(&held.planes, size)
        };
        let layout = layout.ok_or_else(|| {
            Error::InvalidLayout(format!(
                "frame {} of {size} bytes with planes {:?} does not fit the caps' {}x{} {}",
                held.seq,
                held.planes,
                caps.width(),
                caps.height(),
                caps.format()
            ))
        })?;
        Ok(Frame { held, layout })
    }
}

/// The longest timeout waited as given; a longer one waits as long as it
/// takes (`None`), since an instant that far ahead may not be representable
/// (an overflow in the wait).
const LONGEST_TIMEOUT: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

fn bounded(timeout: Option<Duration>) -> Option<Duration> {
    timeout.filter(|&timeout| timeout <= LONGEST_TIMEOUT)
}

/// A frame read by a [`Subscriber`]. It holds its slot: the producer does
/// not write the slot again until the frame is dropped, so keep it only as
/// long as it is read. To keep a frame longer, keep an owned copy of it,
/// which holds no slot: [`to_owned_copy`](Self::to_owned_copy).
///
/// On the host transport its bytes are [`host_bytes`](Self::host_bytes), a
/// view of the shared memory (no copy). On the cuda transport it is device
/// memory at [`device_ptr`](Self::device_ptr): read it on
/// [`cuda_stream`](Self::cuda_stream), which is ordered after the
/// producer's writes; dropping the frame releases the slot after the work
/// queued on that stream so far.
pub struct Frame {
    pub(crate) held: HeldFrame,
    pub(crate) layout: VideoLayout,
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame")
            .field("seq", &self.held.seq)
            .field("layout", &self.layout)
            .finish()
    }
}

impl Frame {
    /// The frame's format, size, strides and offsets.
    pub fn layout(&self) -> &VideoLayout {
        &self.layout
    }

    /// The frame's sequence number in the channel (counts every frame
    /// published, and the end of a stream).
    pub fn seq(&self) -> u64 {
        self.held.seq
    }

    /// The frame's time in the stream, as its producer stamped it.
    pub fn pts(&self) -> Option<Duration> {
        self.held.pts.map(Duration::from_nanos)
    }

    /// Frames this subscriber lost right before this one: it fell behind a
    /// live producer ([`Frames::Auto`]), or a producer with
    /// `when_full: Drop` overwrote them. A latest-frame subscriber skips
    /// frames by design and counts none.
    pub fn missed_before(&self) -> u64 {
        self.held.missed_before
    }

    /// The data the producer published with the frame
    /// ([`Publisher::publish_with_data`](crate::Publisher::publish_with_data),
    /// [`FrameLoan::set_data`](crate::FrameLoan::set_data), or a
    /// `CudaIpcFrameData` meta in a GStreamer producer), if any.
    pub fn data(&self) -> Option<crate::AppData> {
        crate::AppData::decode(&self.held.data)
    }

    /// The frame's bytes ([`VideoLayout::frame_size`] of them), on the host
    /// transport; `None` on the cuda transport.
    pub fn host_bytes(&self) -> Option<&[u8]> {
        self.held
            .host_bytes()
            .and_then(|bytes| bytes.get(..self.layout.frame_size()))
    }

    /// Copies the frame's bytes into `dst` (exactly
    /// [`VideoLayout::frame_size`] bytes): from the shared memory on the
    /// host transport, or downloaded after the producer's writes on the
    /// cuda transport (waiting for the download).
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<(), Error> {
        self.layout.expect_frame_bytes(dst.len())?;
        match self.held.memory() {
            SlotMemory::Host(_) => {
                let bytes = self.host_bytes().ok_or_else(|| {
                    Error::InvalidLayout("the frame is larger than its slot".into())
                })?;
                dst.copy_from_slice(bytes);
                Ok(())
            }
            SlotMemory::Device(region) => region.download(dst).map_err(|e| Error::Transport {
                what: "download the frame",
                source: e.into(),
            }),
        }
    }

    /// The device address of the frame, on the cuda transport.
    pub fn device_ptr(&self) -> Option<u64> {
        match self.held.memory() {
            SlotMemory::Device(region) => Some(region.ptr()),
            SlotMemory::Host(_) => None,
        }
    }

    /// The ordinal of the CUDA device the frame is read on (cuda
    /// transport).
    pub fn device_ordinal(&self) -> Option<i32> {
        match self.held.memory() {
            SlotMemory::Device(region) => Some(region.device().ordinal()),
            SlotMemory::Host(_) => None,
        }
    }

    /// The `CUstream` (of the device's primary context) to read the frame
    /// on, on the cuda transport: ordered after the producer's writes.
    /// Reads queued elsewhere must first wait for this stream
    /// ([`wait_on_stream`](Self::wait_on_stream)), and end before the frame
    /// is dropped ([`release_after_stream`](Self::release_after_stream)).
    pub fn cuda_stream(&self) -> Option<*mut std::ffi::c_void> {
        match self.held.memory() {
            SlotMemory::Device(region) => Some(region.device().stream().raw().cast()),
            SlotMemory::Host(_) => None,
        }
    }

    /// Makes `stream` wait on the GPU for the producer's writes of the
    /// frame (which [`cuda_stream`](Self::cuda_stream) already waits for),
    /// so that work queued on `stream` afterwards may read it. No host
    /// synchronisation. Nothing to do on the host transport, whose frames
    /// are written when handed out.
    ///
    /// # Safety
    /// `stream` is a live `CUstream` of a context of the frame's device, or
    /// `CU_STREAM_LEGACY` (1) or `CU_STREAM_PER_THREAD` (2).
    pub unsafe fn wait_on_stream(&self, stream: *mut std::ffi::c_void) -> Result<(), Error> {
        // Seen done on the host when it was handed out (the consumer waited
        // there): later work on any stream reads it whole, and ordering
        // streams would cost two driver calls a frame for nothing.
        if self.held.is_written() {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        unsafe {
            crate::gpu_order::order_with_slot(
                &self.held.memory(),
                stream,
                crate::gpu_order::Waiter::Caller,
                "order a stream after the frame's writes",
            )
        }
    }

    /// Orders the frame's release after the work queued on `stream` so
    /// far: the slot goes back to the producer (when the frame is dropped)
    /// only once that work has run, on the GPU. Call it, for each stream
    /// that read the frame, right before dropping the frame. Nothing to do
    /// on the host transport.
    ///
    /// # Safety
    /// As for [`wait_on_stream`](Self::wait_on_stream).
    pub unsafe fn release_after_stream(&self, stream: *mut std::ffi::c_void) -> Result<(), Error> {
        // SAFETY: the caller's contract.
        unsafe {
            crate::gpu_order::order_with_slot(
                &self.held.memory(),
                stream,
                crate::gpu_order::Waiter::Slot,
                "order the frame's release after a stream",
            )
        }
    }
}
