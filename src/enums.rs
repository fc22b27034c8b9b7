// Enumerated element properties, shared by the sink and the source: one
// GEnum per property, named after the GStreamer-free type of the layer below
// that it converts into with `From` (that type alone has the wire values).

use gst::glib;

use cudaipc_channel as ipc;
use cudaipc_transport as transport;

#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaIpcTransport")]
pub enum Transport {
    #[default]
    #[enum_value(
        name = "Auto: CUDA when a device is usable, else host memory",
        nick = "auto"
    )]
    Auto,
    #[enum_value(name = "CUDA device memory exported with CUDA IPC", nick = "cuda")]
    Cuda,
    #[enum_value(name = "Shared host memory (no GPU needed)", nick = "host")]
    Host,
}

/// `None` for `auto`: see `TransportKind::resolve`.
impl From<Transport> for Option<transport::TransportKind> {
    fn from(t: Transport) -> Self {
        match t {
            Transport::Auto => None,
            Transport::Cuda => Some(transport::TransportKind::Cuda),
            Transport::Host => Some(transport::TransportKind::Host),
        }
    }
}

#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaIpcMode")]
pub enum IpcMode {
    // Appended after the older values: the numbers of legacy and fd stay.
    #[enum_value(
        name = "Legacy: the control block and host slots under names in the shm folder",
        nick = "legacy"
    )]
    Legacy = 0,
    #[enum_value(
        name = "Fd: descriptors over the channel's unix socket, to allowed users only",
        nick = "fd"
    )]
    Fd = 1,
    #[default]
    #[enum_value(
        name = "Auto: fd on the cuda transport of an integrated GPU (Jetson: no legacy CUDA IPC), else legacy",
        nick = "auto"
    )]
    Auto = 2,
}

/// `None` for `auto`: see `transport::resolve_ipc_mode`.
impl From<IpcMode> for Option<ipc::IpcMode> {
    fn from(m: IpcMode) -> Self {
        match m {
            IpcMode::Auto => None,
            IpcMode::Legacy => Some(ipc::IpcMode::Legacy),
            IpcMode::Fd => Some(ipc::IpcMode::Fd),
        }
    }
}

/// How a consumer reaches a channel.
#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaIpcSrcMode")]
pub enum SrcIpcMode {
    #[default]
    #[enum_value(
        name = "Auto: the channel's socket if it has one, else its name in the shm folder",
        nick = "auto"
    )]
    Auto,
    #[enum_value(name = "Legacy: the channel's name in the shm folder", nick = "legacy")]
    Legacy,
    #[enum_value(
        name = "Fd: only through the channel's socket, from a trusted producer",
        nick = "fd"
    )]
    Fd,
}

/// `None` for `auto`.
impl From<SrcIpcMode> for Option<ipc::IpcMode> {
    fn from(m: SrcIpcMode) -> Self {
        match m {
            SrcIpcMode::Auto => None,
            SrcIpcMode::Legacy => Some(ipc::IpcMode::Legacy),
            SrcIpcMode::Fd => Some(ipc::IpcMode::Fd),
        }
    }
}

#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaIpcWhenFull")]
pub enum WhenFull {
    #[default]
    #[enum_value(name = "Block: wait for a free slot, lose nothing", nick = "block")]
    Block,
    #[enum_value(name = "Drop: drop the new frame, never wait", nick = "drop")]
    Drop,
}

impl From<WhenFull> for ipc::WhenFull {
    fn from(w: WhenFull) -> Self {
        match w {
            WhenFull::Block => Self::Block,
            WhenFull::Drop => Self::Drop,
        }
    }
}

#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaIpcWaitMode")]
pub enum WaitMode {
    #[enum_value(name = "Spin: busy-poll, lowest latency, one core busy", nick = "spin")]
    Spin,
    #[default]
    #[enum_value(name = "Hybrid: spin briefly, then sleep on a futex", nick = "hybrid")]
    Hybrid,
    #[enum_value(name = "Sleep: poll every 100 us", nick = "sleep")]
    Sleep,
}

impl From<WaitMode> for ipc::WaitMode {
    fn from(w: WaitMode) -> Self {
        match w {
            WaitMode::Spin => Self::Spin,
            WaitMode::Hybrid => Self::Hybrid,
            WaitMode::Sleep => Self::Sleep,
        }
    }
}

#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaIpcGpuSync")]
pub enum GpuSync {
    #[default]
    #[enum_value(
        name = "Auto: the timeline on the cuda transport where the device supports it, else events (host on an integrated GPU)",
        nick = "auto"
    )]
    Auto,
    #[enum_value(
        name = "Event: GPU-side ordering with interprocess events (one user, one PID namespace)",
        nick = "event"
    )]
    Event,
    #[enum_value(
        name = "Host: synchronise the stream on the CPU per frame",
        nick = "host"
    )]
    Host,
    #[enum_value(
        name = "Timeline: values the GPU writes into memory both processes map (cuda transport; crosses users, and containers with ipc-mode=fd)",
        nick = "timeline"
    )]
    Timeline,
}

/// `None` for `auto`: see `transport::GpuSync::resolve`.
impl From<GpuSync> for Option<transport::GpuSync> {
    fn from(s: GpuSync) -> Self {
        match s {
            GpuSync::Auto => None,
            GpuSync::Event => Some(transport::GpuSync::Event),
            GpuSync::Host => Some(transport::GpuSync::Host),
            GpuSync::Timeline => Some(transport::GpuSync::Timeline),
        }
    }
}

#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaIpcProducerLost")]
pub enum ProducerLost {
    #[default]
    #[enum_value(name = "Error: post an error", nick = "error")]
    Error,
    #[enum_value(name = "EOS: end the stream", nick = "eos")]
    Eos,
    #[enum_value(name = "Wait: wait for a new producer on the channel", nick = "wait")]
    Wait,
}

#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaIpcFrames")]
pub enum ConsumerMode {
    #[enum_value(
        name = "Every frame, in order, live or not: the producer waits for this consumer, even a live one",
        nick = "every"
    )]
    Every = 0,
    #[enum_value(
        name = "Only the latest frame; never holds the producer back",
        nick = "latest"
    )]
    Latest = 1,
    #[default]
    #[enum_value(
        name = "Every frame, in order; on a live channel at this consumer's own pace (frames it falls behind on are missed), never holding the producer back",
        nick = "auto"
    )]
    Auto = 2,
}

impl From<ConsumerMode> for ipc::ConsumerMode {
    fn from(f: ConsumerMode) -> Self {
        match f {
            ConsumerMode::Auto => Self::Auto,
            ConsumerMode::Every => Self::EveryFrame,
            ConsumerMode::Latest => Self::Latest,
        }
    }
}

#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaIpcOutputMemory")]
pub enum OutputMemory {
    #[default]
    #[enum_value(
        name = "Auto: GstCudaMemory when downstream is an element of GStreamer's CUDA library (it proposes a GstCudaBufferPool), else the plugin's own memory",
        nick = "auto"
    )]
    Auto,
    #[enum_value(
        name = "The plugin's own CudaIpcMemory (rscudaipcsrc: the shared slots, no copy)",
        nick = "cudaipc"
    )]
    CudaIpc,
    #[enum_value(
        name = "GstCudaMemory of GStreamer's CUDA library (one device-to-device copy on GStreamer 1.22)",
        nick = "gstcuda"
    )]
    GstCuda,
}
