// SPDX-License-Identifier: MPL-2.0

//! The producer end: creates a channel, announces the layout's caps, and
//! publishes frames copied from host memory or written into a loaned slot.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cudaipc_channel::socket::Peers;
use cudaipc_channel::{ChannelError, FrameMeta, IpcMode, WaitMode, WhenFull};
use cudaipc_transport::cuda::Device;
use cudaipc_transport::{
    ConfigureError, GpuSync, PublishError, PublisherConfig, ReserveError, SharedObject, SlotLoan,
    SlotMemory, TransportError, TransportKind,
};

use crate::closer::{Closer, close_publisher};
use crate::{AppData, Error, VideoLayout};

type Inner = cudaipc_transport::Publisher<()>;

/// Where a publisher's slots live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// CUDA device memory when a device is usable, else host memory.
    #[default]
    Auto,
    /// CUDA device memory, shared with CUDA IPC; consumers read it on the
    /// GPU.
    Cuda,
    /// Shared host memory: no GPU needed on either side.
    Host,
}

/// How a [`Publisher`] is set up; [`Default`] gives the elements' defaults.
#[derive(Debug, Clone)]
pub struct PublisherOptions {
    /// Where the slots live.
    pub transport: Transport,
    /// How consumers reach the channel: named files in the shm folder
    /// (`Legacy`) or descriptors handed over its socket (`Fd`).
    pub ipc_mode: IpcMode,
    /// Slots in the ring; 0 lets the transport choose as `rscudaipcsink`
    /// does: 8 on a [`live`](Self::live) channel; for frames that come as
    /// fast as they are made, on CUDA without MPS as many as 5% of the
    /// device memory holds (8 to 64), 2 with MPS, 4 in host memory; and
    /// deeper where a subscriber declares a `hold` that needs it. At most 64
    /// ([`Setting::Slots`](crate::Setting::Slots)); more is
    /// [`Error::OutOfRange`].
    pub slots: usize,
    /// What `publish` and `loan` do when consumers hold every slot.
    pub when_full: WhenFull,
    /// File mode of the channel's shared files (`0o600`: this user only):
    /// read, write and execute bits, 0 to `0o777`; a setuid, setgid or
    /// sticky bit (or a decimal `777`) is [`Error::OutOfRange`].
    pub permissions: u32,
    /// Consumers to wait for before the first frame is published (0: none),
    /// so that they get every frame. At most 32, a channel's most
    /// consumers ([`Error::OutOfRange`] above).
    pub wait_for_consumers: u32,
    /// `IpcMode::Fd`: user ids whose consumers may attach beside this user.
    pub allowed_uids: Vec<u32>,
    /// `IpcMode::Fd`: group ids whose consumers may attach.
    pub allowed_gids: Vec<u32>,
    /// CUDA device ordinal of the slots (cuda transport).
    pub device: i32,
    /// Frames come at a fixed rate (a camera, a clock): the channel is
    /// live, and consumers keep their own pace. The producer then waits
    /// only for subscribers that ask for every frame ([`Frames::Every`]);
    /// [`Frames::Auto`] ones that fall behind miss frames
    /// ([`Subscriber::frames_missed`]) rather than hold it back. `false`:
    /// frames come as fast as they are made, and every subscriber but a
    /// [`Frames::Latest`] one gets every frame (the producer waits).
    ///
    /// [`Frames::Every`]: crate::Frames::Every
    /// [`Frames::Auto`]: crate::Frames::Auto
    /// [`Frames::Latest`]: crate::Frames::Latest
    /// [`Subscriber::frames_missed`]: crate::Subscriber::frames_missed
    pub live: bool,
    /// Bytes of data each frame may carry (its [`AppData`], and a
    /// GStreamer producer's metas): an area of this size for each of the
    /// 64 slot records follows the control block. 0: frames carry none.
    pub frame_data_bound: u32,
}

impl Default for PublisherOptions {
    fn default() -> Self {
        Self {
            transport: Transport::Auto,
            ipc_mode: IpcMode::Legacy,
            slots: 0,
            when_full: WhenFull::Block,
            permissions: 0o600,
            wait_for_consumers: 0,
            allowed_uids: Vec::new(),
            allowed_gids: Vec::new(),
            device: 0,
            live: false,
            frame_data_bound: cudaipc_channel::layout::DEFAULT_FRAME_DATA_BOUND,
        }
    }
}

/// What became of a frame given to [`Publisher::publish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// Copied into a slot and published.
    Sent,
    /// Dropped: `when_full: Drop` and every slot was held by consumers.
    Dropped,
}

/// The producer end of a channel: what `rscudaipcsink` is to a pipeline.
/// Consumers (`rscudaipcsrc`, a [`Subscriber`](crate::Subscriber)) read its
/// frames. Dropping it ends the channel; after [`eos`](Self::eos) it first
/// gives consumers up to 5 s to take what was published.
///
/// ```
/// use cudaipc::{Publisher, PublisherOptions, Transport, VideoFormat, VideoLayout};
/// use std::time::Duration;
///
/// let layout = VideoLayout::new(VideoFormat::Rgba, 64, 48)?;
/// let options = PublisherOptions { transport: Transport::Host, ..Default::default() };
/// let channel = format!("doc-publisher-{}", std::process::id());
/// let publisher = Publisher::create(&channel, layout.clone(), options)?;
///
/// // Copied from host memory.
/// let frame = vec![0x80u8; layout.frame_size()];
/// publisher.publish(&frame, Some(Duration::ZERO))?;
///
/// // Written in place into a loaned slot.
/// let mut loan = publisher.loan()?;
/// if let Some(bytes) = loan.host_bytes_mut() {
///     bytes.fill(0x40);
/// }
/// loan.publish(Some(Duration::from_millis(33)))?;
/// publisher.eos();
/// # Ok::<(), cudaipc::Error>(())
/// ```
pub struct Publisher {
    inner: Arc<Inner>,
    channel: Arc<str>,
    layout: Arc<VideoLayout>,
    when_full: WhenFull,
    /// Set by [`close`](Self::close) (or a [`Closer`]): a loan's wait for a
    /// slot ends with it.
    closed: Arc<AtomicBool>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("channel", &self.channel)
            .field("layout", &self.layout)
            .finish()
    }
}

impl Publisher {
    /// Creates `channel` for frames of `layout` and announces their caps.
    /// Fails if the name is taken by a live producer or not usable, if an
    /// option is outside its range ([`Error::OutOfRange`], before anything
    /// is created), if the cuda transport is asked for without a usable
    /// device, or if the slots cannot be allocated.
    pub fn create(
        channel: &str,
        layout: VideoLayout,
        options: PublisherOptions,
    ) -> Result<Self, Error> {
        let kind = match options.transport {
            Transport::Auto => TransportKind::resolve(None),
            Transport::Cuda => TransportKind::Cuda,
            Transport::Host => TransportKind::Host,
        };
        let device = match kind {
            TransportKind::Cuda => Some(Device::get(options.device).map_err(|e| {
                Error::Device(format!(
                    "the cuda transport needs CUDA device {}: {e}{}",
                    options.device,
                    crate::error::no_driver_note(&e)
                ))
            })?),
            TransportKind::Host => None,
        };
        // An integrated GPU (Jetson) has no legacy CUDA IPC: say so, not
        // the driver's "not supported" from cuIpcGetMemHandle later.
        cudaipc_transport::resolve_ipc_mode(Some(options.ipc_mode), kind, device.as_deref())
            .map_err(|e| {
                Error::Device(format!("{e}: use IpcMode::Fd (ipc_mode=\"fd\" in Python)"))
            })?;
        let gpu_sync = GpuSync::resolve(None, kind, device.as_deref())
            .map_err(|e| Error::transport(channel, "choose the GPU ordering", e))?;
        let inner = Inner::create(PublisherConfig {
            channel: channel.to_owned(),
            kind,
            device,
            slots: options.slots,
            permissions: options.permissions,
            gpu_sync,
            when_full: options.when_full,
            wait_mode: WaitMode::Hybrid,
            wait_for_consumers: options.wait_for_consumers,
            ipc_mode: options.ipc_mode,
            peers: Peers {
                uids: options.allowed_uids,
                gids: options.allowed_gids,
            },
            frame_data_bound: options.frame_data_bound,
        })
        .map_err(|e| Error::channel(channel, "create the channel", e))?;
        // Before the slots are allocated: a live ring's depth is its own.
        inner.set_paced(options.live);
        let publisher = Self {
            inner: Arc::new(inner),
            channel: channel.into(),
            layout: Arc::new(layout),
            when_full: options.when_full,
            closed: Arc::new(AtomicBool::new(false)),
        };
        publisher
            .inner
            .configure(publisher.layout.frame_size())
            .map_err(|e| match e {
                ConfigureError::Allocate { error, .. } => {
                    Error::transport(channel, "allocate the slots", error)
                }
                ConfigureError::Install(e) => Error::transport(channel, "publish the slots", e),
            })?;
        publisher
            .inner
            .set_caps(&publisher.layout.caps())
            .map_err(|e| Error::channel(channel, "announce the caps", e))?;
        Ok(publisher)
    }

    /// The channel's name.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The layout of every frame published.
    pub fn layout(&self) -> &VideoLayout {
        &self.layout
    }

    /// Whether the slots are CUDA device memory (else shared host memory).
    pub fn is_cuda(&self) -> bool {
        self.inner.config().kind == TransportKind::Cuda
    }

    /// Whether the channel is live ([`PublisherOptions::live`]).
    pub fn is_live(&self) -> bool {
        self.inner.status().paced
    }

    /// Consumers attached now.
    pub fn consumer_count(&self) -> u32 {
        self.inner.stats().producer.consumers
    }

    /// Copies `frame` (exactly [`VideoLayout::frame_size`] bytes in the
    /// layout) into a free slot and publishes it with `pts` (its time in
    /// the stream). With `when_full: Block` it waits while consumers hold
    /// every slot; with `Drop` it drops the frame instead.
    pub fn publish(&self, frame: &[u8], pts: Option<Duration>) -> Result<Published, Error> {
        self.publish_frame(frame, pts, Vec::new())
    }

    /// Like [`publish`](Self::publish), with `data` travelling with the
    /// frame ([`Frame::data`](crate::Frame::data) on the other side; a
    /// `CudaIpcFrameData` meta to `rscudaipcsrc`).
    pub fn publish_with_data(
        &self,
        frame: &[u8],
        pts: Option<Duration>,
        data: &AppData,
    ) -> Result<Published, Error> {
        let blob = data.encode(self.inner.frame_data_bound())?;
        self.publish_frame(frame, pts, blob)
    }

    fn publish_frame(
        &self,
        frame: &[u8],
        pts: Option<Duration>,
        data: Vec<u8>,
    ) -> Result<Published, Error> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        self.layout.expect_frame_bytes(frame.len())?;
        let fill = |memory: &SlotMemory| match memory {
            // SAFETY: `publish_copy_of` calls this with a slot it reserved,
            // which no consumer reads before it is published, and this is
            // the only view of it.
            SlotMemory::Host(region) => match unsafe { region.as_mut_slice() } {
                Some(bytes) if bytes.len() >= frame.len() => {
                    bytes[..frame.len()].copy_from_slice(frame);
                    Ok(())
                }
                Some(bytes) => Err(TransportError::SlotTooSmall {
                    slot_size: bytes.len(),
                    frame_size: frame.len(),
                }),
                None => Err(TransportError::ReadOnly {
                    object: SharedObject::Slots,
                }),
            },
            SlotMemory::Device(region) => region.upload(frame).map_err(TransportError::Cuda),
        };
        match self
            .inner
            .publish_copy_of(None, &frame_meta(&self.layout, pts, data), fill)
        {
            Ok(Some(_)) => Ok(Published::Sent),
            Ok(None) => Ok(Published::Dropped),
            Err(e) => Err(publish_error(&self.channel, e)),
        }
    }

    /// Lends a free slot to write the next frame into in place: no copy.
    /// [`FrameLoan::publish`] publishes it; a loan dropped unpublished
    /// gives the slot back. With `when_full: Block` it waits while
    /// consumers hold every slot; with `Drop` that is
    /// [`Error::NoFreeSlot`].
    pub fn loan(&self) -> Result<FrameLoan, Error> {
        self.loan_interruptible(&self.closed)
    }

    /// [`loan`](Self::loan), whose wait for a free slot (or for
    /// `wait_for_consumers`) ends with [`Error::Interrupted`] once
    /// `interrupt` is set (by another thread, e.g. on Ctrl-C). Set before
    /// the call, it lends a slot only if one is free now. A
    /// [`close`](Self::close) ends the wait too ([`Error::Closed`]) once
    /// the channel is closed (after the consumers' grace that follows an
    /// [`eos`](Self::eos)); [`loan`](Self::loan) ends at once.
    pub fn loan_interruptible(&self, interrupt: &AtomicBool) -> Result<FrameLoan, Error> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let loan = self
            .inner
            .loan(self.layout.frame_size(), interrupt)
            .map_err(|e| match e {
                ReserveError::Flushing if self.is_closed() || self.inner.status().closed => {
                    Error::Closed
                }
                ReserveError::Flushing if self.when_full == WhenFull::Drop => Error::NoFreeSlot,
                ReserveError::Flushing if interrupt.load(Ordering::SeqCst) => Error::Interrupted,
                ReserveError::Flushing => Error::Closed,
                ReserveError::TooSmall => Error::SlotsTooSmall {
                    frame_size: self.layout.frame_size(),
                },
                ReserveError::Channel(e) => Error::channel(&self.channel, "lend a slot", e),
                ReserveError::Transport(e) => Error::transport(&self.channel, "lend a slot", e),
            })?;
        Ok(FrameLoan {
            loan,
            channel: self.channel.clone(),
            layout: self.layout.clone(),
            data: Vec::new(),
            frame_data_bound: self.inner.frame_data_bound(),
        })
    }

    /// Ends the stream: consumers get an end of stream after the frames
    /// published so far.
    pub fn eos(&self) {
        self.inner.eos();
    }

    /// Closes the channel, as dropping the publisher does, from any thread
    /// that shares the publisher: the calls blocked in
    /// [`publish`](Self::publish) or [`loan`](Self::loan) return
    /// [`Error::Closed`] at once, and so does every later one. After an
    /// [`eos`](Self::eos) it first gives consumers up to 5 s to take what
    /// was published. Idempotent. [`closer`](Self::closer) gives a handle
    /// that does the same without sharing the publisher.
    pub fn close(&self) {
        close_publisher(&self.closed, &self.inner);
    }

    /// Whether [`close`](Self::close) was called (here or by a [`Closer`]).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// A handle that [closes](Self::close) this publisher from any thread:
    /// `Send`, `Sync` and cloneable, e.g. for a signal handler or a UI
    /// while another thread is blocked in [`publish`](Self::publish).
    pub fn closer(&self) -> Closer {
        Closer::of_publisher(&self.closed, &self.inner)
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        // After an EOS the close lets consumers take the frames first.
        close_publisher(&self.closed, &self.inner);
    }
}

/// A slot lent by [`Publisher::loan`] to write one frame into in place.
/// Owned: it may go to another thread. [`publish`](Self::publish) consumes
/// it; dropping it unpublished gives the slot back to the ring.
///
/// On the host transport the slot is [`host_bytes_mut`](Self::host_bytes_mut).
/// On the cuda transport it is device memory at
/// [`device_ptr`](Self::device_ptr): write it on the GPU, on
/// [`cuda_stream`](Self::cuda_stream), which orders the writes after the
/// consumers' reads of the slot's previous frame and before `publish`.
pub struct FrameLoan {
    loan: SlotLoan<()>,
    channel: Arc<str>,
    layout: Arc<VideoLayout>,
    /// The frame data blob to publish with it (see `set_data`).
    data: Vec<u8>,
    frame_data_bound: usize,
}

impl std::fmt::Debug for FrameLoan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameLoan")
            .field("channel", &self.channel)
            .field("slot", &self.loan.slot())
            .finish()
    }
}

impl FrameLoan {
    /// The layout the frame must be written in.
    pub fn layout(&self) -> &VideoLayout {
        &self.layout
    }

    /// The frame's bytes to write (exactly the layout's frame size), on the
    /// host transport; `None` on the cuda transport.
    pub fn host_bytes_mut(&mut self) -> Option<&mut [u8]> {
        let size = self.layout.frame_size();
        match self.loan.memory() {
            // SAFETY: the slot is reserved for this loan and not published,
            // so no consumer reads it; `&mut self` makes this slice the only
            // view of it while it lives.
            SlotMemory::Host(region) => unsafe { region.as_mut_slice() }?.get_mut(..size),
            SlotMemory::Device(_) => None,
        }
    }

    /// The device address of the slot, on the cuda transport: the layout's
    /// frame size in bytes from there are this frame's.
    pub fn device_ptr(&self) -> Option<u64> {
        match self.loan.memory() {
            SlotMemory::Device(region) => Some(region.ptr()),
            SlotMemory::Host(_) => None,
        }
    }

    /// The ordinal of the CUDA device holding the slot (cuda transport).
    pub fn device_ordinal(&self) -> Option<i32> {
        match self.loan.memory() {
            SlotMemory::Device(region) => Some(region.device().ordinal()),
            SlotMemory::Host(_) => None,
        }
    }

    /// The `CUstream` (of the device's primary context) to queue the writes
    /// of the frame on, on the cuda transport. Writes queued elsewhere are
    /// not ordered: finish them before [`publish`](Self::publish) and do not
    /// start them before the loan was made.
    pub fn cuda_stream(&self) -> Option<*mut std::ffi::c_void> {
        match self.loan.memory() {
            SlotMemory::Device(region) => Some(region.device().stream().raw().cast()),
            SlotMemory::Host(_) => None,
        }
    }

    /// Orders the loan's writes on [`cuda_stream`](Self::cuda_stream), and
    /// with them the publication, after the work queued on `stream` so far
    /// (a frame rendered there), on the GPU. Nothing to do on the host
    /// transport.
    ///
    /// # Safety
    /// `stream` is a live `CUstream` of a context of the slot's device, or
    /// `CU_STREAM_LEGACY` (1) or `CU_STREAM_PER_THREAD` (2).
    pub unsafe fn wait_for_stream(&self, stream: *mut std::ffi::c_void) -> Result<(), Error> {
        // SAFETY: the caller's contract.
        unsafe {
            crate::gpu_order::order_with_slot(
                self.loan.memory(),
                stream,
                crate::gpu_order::Waiter::Slot,
                "order the frame's writes after a stream",
            )
        }
    }

    /// Makes `stream` wait on the GPU for the work queued on
    /// [`cuda_stream`](Self::cuda_stream) so far: memory the loan's writes
    /// read (the source of [`copy_plane_from_device`](Self::copy_plane_from_device))
    /// may then be reused by work queued on `stream`. Nothing to do on the
    /// host transport.
    ///
    /// # Safety
    /// As for [`wait_for_stream`](Self::wait_for_stream).
    pub unsafe fn make_stream_wait(&self, stream: *mut std::ffi::c_void) -> Result<(), Error> {
        // SAFETY: the caller's contract.
        unsafe {
            crate::gpu_order::order_with_slot(
                self.loan.memory(),
                stream,
                crate::gpu_order::Waiter::Caller,
                "order a stream after the frame's writes",
            )
        }
    }

    /// Queues a copy of plane `plane` of the frame from device memory at
    /// `src` (rows `src_pitch` bytes apart) into the slot, on
    /// [`cuda_stream`](Self::cuda_stream): the layout's rows and row bytes
    /// of that plane. Cuda transport only ([`Error::Device`] on the host
    /// transport); the copy is not waited for.
    ///
    /// # Safety
    /// `src` is device memory readable by the slot's device for the plane's
    /// rows at `src_pitch` until the copy has run (order its reuse after it
    /// with [`make_stream_wait`](Self::make_stream_wait)).
    pub unsafe fn copy_plane_from_device(
        &self,
        plane: usize,
        src: u64,
        src_pitch: usize,
    ) -> Result<(), Error> {
        let SlotMemory::Device(region) = self.loan.memory() else {
            return Err(Error::Device(
                "the host transport's slots are not device memory".into(),
            ));
        };
        let format = self.layout.format();
        let Some(dst) = self.layout.planes().get(plane) else {
            return Err(Error::InvalidLayout(format!(
                "{format} has no plane {plane}"
            )));
        };
        let row_bytes = format.row_bytes(plane, self.layout.width()) as usize;
        let rows = format.rows(plane, self.layout.height()) as usize;
        if src_pitch < row_bytes {
            return Err(Error::InvalidLayout(format!(
                "a source pitch of {src_pitch} bytes is below the {row_bytes} bytes of a row of plane {plane}"
            )));
        }
        // SAFETY: the destination lies in the slot (the layout was checked
        // against the slot size); the source is the caller's contract.
        unsafe {
            region.device().stream().copy_2d_device(
                region.ptr() + dst.offset,
                dst.stride as usize,
                src,
                src_pitch,
                row_bytes,
                rows,
            )
        }
        .map_err(|e| Error::Transport {
            what: "copy a plane into the slot",
            source: TransportError::Cuda(e),
        })
    }

    /// Sets the data that travels with this frame (replacing any set
    /// before); refused when larger than the channel's frames carry.
    pub fn set_data(&mut self, data: &AppData) -> Result<(), Error> {
        self.data = data.encode(self.frame_data_bound)?;
        Ok(())
    }

    /// Publishes the frame written into the slot, with `pts`.
    pub fn publish(self, pts: Option<Duration>) -> Result<(), Error> {
        let meta = frame_meta(&self.layout, pts, self.data);
        match self.loan.publish(&meta) {
            Ok(_slot) => Ok(()),
            Err(e) => Err(publish_error(&self.channel, e)),
        }
    }
}

/// The channel's metadata of a frame of `layout`.
fn frame_meta(layout: &VideoLayout, pts: Option<Duration>, data: Vec<u8>) -> FrameMeta {
    FrameMeta {
        size: layout.frame_size() as u64,
        // u64::MAX stands for "none" on the wire.
        pts: pts.map(|t| {
            u64::try_from(t.as_nanos())
                .unwrap_or(u64::MAX - 1)
                .min(u64::MAX - 1)
        }),
        dts: None,
        duration: None,
        // GStreamer's "no offset".
        offset: u64::MAX,
        offset_end: u64::MAX,
        flags: 0,
        planes: layout.wire_planes(),
        data,
    }
}

fn publish_error(channel: &str, e: PublishError) -> Error {
    match e {
        PublishError::Channel(ChannelError::Interrupted)
        | PublishError::Transport(TransportError::Channel(ChannelError::Interrupted)) => {
            Error::Closed
        }
        PublishError::Channel(e) => Error::channel(channel, "publish the frame", e),
        PublishError::Transport(e) => Error::transport(channel, "publish the frame", e),
        // The slot's ordering and the fill above both fail with the
        // transport's error.
        PublishError::Copy { error, .. } => match error.downcast::<TransportError>() {
            Ok(e) => Error::transport(channel, "copy the frame into its slot", *e),
            Err(other) => Error::Transport {
                what: "copy the frame into its slot",
                source: TransportError::io("the copy", std::io::Error::other(other)),
            },
        },
    }
}
