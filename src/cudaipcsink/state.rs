// SPDX-License-Identifier: MPL-2.0

//! What the sink's files share, beneath them all (`publishing`, `lending`
//! and the slot `pool` above all): the publisher type, the debug category,
//! the state from `start` to `stop`, and how the publisher's failures become
//! GStreamer's (a flow error, a posted message).

use std::sync::{Arc, LazyLock};

use crate::gstcuda;
use cudaipc_transport::{Allocated, ConfigureError, PublishError};

/// The sink's channel end; a published lent buffer is kept as a
/// `gst::Buffer` (upstream gets it back when the sink drops it).
pub(super) type SinkPublisher = cudaipc_transport::Publisher<gst::Buffer>;

/// The lending of the sink's publisher (the cuda transport).
pub(super) type SinkLender = cudaipc_transport::Lender<gst::Buffer>;

/// The sink's debug category, shared by the element and its slot pool.
pub(crate) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "cudaipcsink",
        gst::DebugColorFlags::empty(),
        Some("CUDA IPC sink"),
    )
});

/// From `start` to `stop`; `render` works on a copy.
#[derive(Clone)]
pub(super) struct State {
    pub(super) publisher: Arc<SinkPublisher>,
    /// The publisher's lending; `None` on the host transport.
    pub(super) lender: Option<Arc<SinkLender>>,
    pub(super) info: Option<gst_video::VideoInfo>,
    /// The `GstCudaBufferPool` proposed upstream, whose buffers may become
    /// the slots (see `lending`).
    pub(super) lendable: Option<gst::BufferPool>,
    /// Orders upstream's stream-ordered `GstCudaMemory` on the GPU
    /// (GStreamer 1.24+, cuda transport).
    pub(super) ordering: Option<Arc<gstcuda::StreamOrdering>>,
}

/// An error posted on the bus, or flushing when the sink was unlocked.
pub(super) fn flow_error(sink: &gst::Element, e: PublishError) -> gst::FlowError {
    if e.is_interrupted() {
        return gst::FlowError::Flushing;
    }
    gst::element_error!(sink, gst::ResourceError::Write, ("{}", e));
    gst::FlowError::Error
}

/// Logs slots just allocated, or posts why they could not be.
pub(super) fn report_slots(
    sink: &gst::Element,
    result: Result<Option<Allocated>, ConfigureError>,
) -> Result<(), gst::LoggableError> {
    match result {
        Ok(None) => Ok(()),
        Ok(Some(slots)) => {
            gst::info!(
                CAT,
                obj = sink,
                "{} slots of {} bytes",
                slots.count,
                slots.size
            );
            Ok(())
        }
        Err(e @ ConfigureError::Allocate { .. }) => {
            gst::element_error!(sink, gst::ResourceError::NoSpaceLeft, ("{}", e));
            Err(gst::loggable_error!(CAT, "slot allocation failed"))
        }
        Err(e) => Err(gst::loggable_error!(CAT, "{}", e)),
    }
}
