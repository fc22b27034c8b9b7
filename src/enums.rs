// Enumerated element properties, shared by the sink and the source.

use gst::glib;

use crate::ipc::{ConsumerMode, WaitMode, WhenFull};
use crate::transport::{GpuSync, TransportChoice};

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

impl From<Transport> for TransportChoice {
    fn from(t: Transport) -> Self {
        match t {
            Transport::Auto => TransportChoice::Auto,
            Transport::Cuda => TransportChoice::Cuda,
            Transport::Host => TransportChoice::Host,
        }
    }
}

#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaIpcWhenFull")]
pub enum WhenFullMode {
    #[default]
    #[enum_value(name = "Block: wait for a free slot, lose nothing", nick = "block")]
    Block,
    #[enum_value(name = "Drop: drop the new frame, never wait", nick = "drop")]
    Drop,
}

impl From<WhenFullMode> for WhenFull {
    fn from(w: WhenFullMode) -> Self {
        match w {
            WhenFullMode::Block => WhenFull::Block,
            WhenFullMode::Drop => WhenFull::Drop,
        }
    }
}

#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaIpcWaitMode")]
pub enum Wait {
    #[enum_value(name = "Spin: busy-poll, lowest latency, one core busy", nick = "spin")]
    Spin,
    #[default]
    #[enum_value(name = "Hybrid: spin briefly, then sleep on a futex", nick = "hybrid")]
    Hybrid,
    #[enum_value(name = "Sleep: poll every 100 us", nick = "sleep")]
    Sleep,
}

impl From<Wait> for WaitMode {
    fn from(w: Wait) -> Self {
        match w {
            Wait::Spin => WaitMode::Spin,
            Wait::Hybrid => WaitMode::Hybrid,
            Wait::Sleep => WaitMode::Sleep,
        }
    }
}

#[derive(Debug, Eq, PartialEq, Ord, PartialOrd, Hash, Clone, Copy, Default, glib::Enum)]
#[repr(u32)]
#[enum_type(name = "GstRsCudaIpcGpuSync")]
pub enum Sync {
    #[default]
    #[enum_value(
        name = "Event: GPU-side ordering with interprocess events",
        nick = "event"
    )]
    Event,
    #[enum_value(
        name = "Host: synchronise the stream on the CPU per frame",
        nick = "host"
    )]
    Host,
}

impl From<Sync> for GpuSync {
    fn from(s: Sync) -> Self {
        match s {
            Sync::Event => GpuSync::Event,
            Sync::Host => GpuSync::Host,
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
pub enum Frames {
    #[default]
    #[enum_value(name = "Every frame, in order", nick = "every")]
    Every,
    #[enum_value(
        name = "Only the latest frame; never holds the producer back",
        nick = "latest"
    )]
    Latest,
}

impl From<Frames> for ConsumerMode {
    fn from(f: Frames) -> Self {
        match f {
            Frames::Every => ConsumerMode::EveryFrame,
            Frames::Latest => ConsumerMode::Latest,
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
        name = "The plugin's own CudaIpcMemory (cudaipcsrc: the shared slots, no copy)",
        nick = "cudaipc"
    )]
    CudaIpc,
    #[enum_value(
        name = "GstCudaMemory of GStreamer's CUDA library (one device-to-device copy on GStreamer 1.22)",
        nick = "gstcuda"
    )]
    GstCuda,
}
