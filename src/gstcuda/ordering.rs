// SPDX-License-Identifier: MPL-2.0

//! Our CUDA streams ordered against the `GstCudaStream`s of GStreamer's
//! elements (1.24+, see `stream.rs`): events of a small pool recorded on one
//! stream and waited for on the other ([`StreamOrdering`]), and the one
//! ordering of our work on a `GstCudaMemory` ([`OrderedAccess`]). Where the
//! GPU cannot order two streams, or on 1.22, a host synchronisation.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys;

use super::stream::{CudaStream, TRANSFER_NEED_SYNC, UpstreamOrder, sync_memory, upstream_order};
use cudaipc_transport::WriterStream;
use cudaipc_transport::cuda::{CudaError, Device, Event, Stream, check};

/// `CU_STREAM_LEGACY`: the legacy default stream of the current context, which
/// waits for all work queued before it on the context's blocking streams.
fn legacy_stream() -> sys::CUstream {
    std::ptr::without_provenance_mut(1)
}

/// How an ordering was achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ordered {
    /// An event on one stream that the other waits for: no host wait.
    OnGpu,
    /// The streams are in different CUDA contexts (upstream made its own):
    /// waited on the host instead.
    HostSynchronized,
    /// Nothing was pending.
    NothingPending,
    /// The memory has no stream: nothing done, the caller keeps its 1.22
    /// behaviour.
    Unordered,
}

/// Orders CUDA streams against each other with events from a small pool,
/// for one device: the plugin's stream against the `GstCudaStream`s of
/// GStreamer's elements. One per element (or device); cheap to call per
/// frame: no allocation once the pool has its events (as many as calls run
/// at once).
pub struct StreamOrdering {
    device: Arc<Device>,
    /// Idle events. An event can be recorded again as soon as
    /// `cuStreamWaitEvent` has returned: the wait keeps the record it saw.
    events: Mutex<Vec<Event>>,
}

impl StreamOrdering {
    pub fn new(device: Arc<Device>) -> StreamOrdering {
        StreamOrdering {
            device,
            events: Mutex::new(Vec::new()),
        }
    }

    /// Makes later work on `waiting` wait for work queued so far on
    /// `signalling`; both are streams of the device's primary context.
    fn enqueue_wait(
        &self,
        waiting: sys::CUstream,
        signalling: sys::CUstream,
    ) -> Result<(), CudaError> {
        self.device.bind()?;
        let event = match self.events.lock().unwrap().pop() {
            Some(event) => event,
            None => Event::new(&self.device, false)?,
        };
        // SAFETY: the primary context is bound; the event is ours and of
        // that context; callers pass streams of that context that they keep
        // alive across the call (or the legacy stream handle).
        let result = unsafe {
            check("cuEventRecord", sys::cuEventRecord(event.raw(), signalling)).and_then(|()| {
                check(
                    "cuStreamWaitEvent",
                    sys::cuStreamWaitEvent(waiting, event.raw(), 0),
                )
            })
        };
        self.events.lock().unwrap().push(event);
        result
    }

    /// Sink side, before reading `memory` on `ours`: orders `ours` after the
    /// writes still pending on upstream's stream, without a host wait when
    /// both streams share the device's primary context.
    pub fn wait_for_upstream(
        &self,
        memory: &gst::MemoryRef,
        ours: &Stream,
    ) -> Result<Ordered, CudaError> {
        match upstream_order(memory) {
            UpstreamOrder::Unordered => Ok(Ordered::Unordered),
            UpstreamOrder::Ready(_) => Ok(Ordered::NothingPending),
            UpstreamOrder::Pending(theirs) if theirs.is_in_primary_context_of(&self.device) => {
                self.enqueue_wait(ours.raw(), theirs.handle())?;
                Ok(Ordered::OnGpu)
            }
            UpstreamOrder::Pending(_) => {
                sync_memory(memory);
                Ok(Ordered::HostSynchronized)
            }
        }
    }

    /// Sink side, after queueing the last read of `memory` on `ours` and
    /// before dropping the buffer: orders upstream's later work on its stream
    /// (the next write into this memory once its pool hands it out again)
    /// after those reads, so the buffer can go back without a host wait.
    /// Memory without a stream, or of a stream of another context: `ours` is
    /// synchronised on the host, as on 1.22.
    pub fn release_to_upstream(
        &self,
        memory: &gst::MemoryRef,
        ours: &Stream,
    ) -> Result<Ordered, CudaError> {
        match upstream_order(memory) {
            UpstreamOrder::Pending(theirs) | UpstreamOrder::Ready(theirs) => {
                self.order_after(&theirs, ours)
            }
            UpstreamOrder::Unordered => {
                ours.synchronize()?;
                Ok(Ordered::HostSynchronized)
            }
        }
    }

    /// Sink side, for a lent buffer going back upstream: the stream of the
    /// device's primary context that upstream writes `memory` on next (its
    /// own; GStreamer's writers use the memory's stream), which can then
    /// wait for the consumers' reads on the GPU. `None`: no stream, or one
    /// of another context; wait on the host instead.
    pub fn writer_stream(&self, memory: &gst::MemoryRef) -> Option<WriterStream> {
        match upstream_order(memory) {
            UpstreamOrder::Pending(theirs) | UpstreamOrder::Ready(theirs)
                if theirs.is_in_primary_context_of(&self.device) =>
            {
                // SAFETY: a stream of the primary context of this ordering's
                // device (the slots'); the memory keeps it alive while the
                // caller holds the buffer.
                Some(unsafe { WriterStream::new(theirs.handle()) })
            }
            _ => None,
        }
    }

    /// Source side, before pushing memory wrapped with `stream`: orders
    /// `stream` after what `ours` has queued (the wait for the producer's
    /// frame). Streams of another context are synchronised on the host.
    pub fn order_after(&self, stream: &CudaStream, ours: &Stream) -> Result<Ordered, CudaError> {
        if stream.is_in_primary_context_of(&self.device) {
            self.enqueue_wait(stream.handle(), ours.raw())?;
            Ok(Ordered::OnGpu)
        } else {
            ours.synchronize()?;
            Ok(Ordered::HostSynchronized)
        }
    }

    /// Writer side (a source writing into a downstream `GstCudaBufferPool`'s
    /// memory), after queueing the writes into `memory` on `ours`: orders the
    /// memory's stream, which its readers order themselves after, after
    /// those writes and sets `NEED_SYNC`, so the buffer can be pushed without
    /// a host wait. [`Ordered::Unordered`] (no stream, 1.22): synchronise
    /// `ours` before pushing, as on 1.22.
    pub fn order_readers_after(
        &self,
        memory: &gst::MemoryRef,
        ours: &Stream,
    ) -> Result<Ordered, CudaError> {
        match upstream_order(memory) {
            UpstreamOrder::Unordered => Ok(Ordered::Unordered),
            UpstreamOrder::Pending(theirs) | UpstreamOrder::Ready(theirs) => {
                let ordered = self.order_after(&theirs, ours)?;
                if ordered == Ordered::OnGpu {
                    // SAFETY: a valid memory that the caller is writing (so
                    // no other writer touches its flags now); GStreamer's own
                    // writers set this flag the same way.
                    unsafe { (*memory.as_mut_ptr()).mini_object.flags |= TRANSFER_NEED_SYNC };
                }
                Ok(ordered)
            }
        }
    }

    /// Source side, when wrapped memory is freed, before releasing the slot:
    /// orders `ours` after everything queued so far on the blocking streams of
    /// the device's primary context (an event on its legacy default stream).
    ///
    /// Why: GStreamer's elements drop an input once their work on it is
    /// queued, often on a stream of their own (cudaconvert, encoders), so the
    /// free does not mean the reads are done. Every `GstCudaStream` is a
    /// blocking stream, so this covers them (in this context) without a host
    /// wait. The cost: work queued later on those streams also waits for the
    /// work queued before (one GPU-side barrier per released frame).
    pub fn wait_for_context_work(&self, ours: &Stream) -> Result<Ordered, CudaError> {
        self.enqueue_wait(ours.raw(), legacy_stream())?;
        Ok(Ordered::OnGpu)
    }
}

/// What our work does with a `GstCudaMemory` (see [`OrderedAccess`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads it: the sink copying upstream's frame out.
    Read,
    /// Writes it: a source filling memory of downstream's pool.
    Write,
}

/// The one ordering of our work on a `GstCudaMemory` against the memory's
/// own stream (GStreamer 1.24+): [`begin`](Self::begin) before the work is
/// queued on our stream, [`finish`](Self::finish) after it, so that the
/// buffer moves on with the work still queued. Without a
/// [`StreamOrdering`] (GStreamer 1.22), or where the GPU cannot order the
/// two streams, our stream is synchronised on the host instead.
pub struct OrderedAccess<'a> {
    ordering: Option<&'a StreamOrdering>,
    ours: &'a Stream<'a>,
    access: Access,
}

impl<'a> OrderedAccess<'a> {
    /// Orders `ours` after the work still pending on `memory`'s stream:
    /// upstream's writes before a read, downstream's reads of the memory's
    /// last frame before a write.
    pub fn begin(
        ordering: Option<&'a StreamOrdering>,
        memory: &gst::MemoryRef,
        ours: &'a Stream<'a>,
        access: Access,
    ) -> Result<Self, CudaError> {
        if let Some(ordering) = ordering {
            ordering.wait_for_upstream(memory, ours)?;
        }
        Ok(Self {
            ordering,
            ours,
            access,
        })
    }

    /// After the work on `memory` is queued on `ours`: orders the memory's
    /// stream after it (a read: the owner's next write into it waits for
    /// it; a write: its readers see the frame), or synchronises `ours` on
    /// the host where that cannot be (1.22; memory without a stream or of
    /// another context), as 1.22's CUDA elements expect.
    pub fn finish(self, memory: &gst::MemoryRef) -> Result<(), CudaError> {
        match (self.ordering, self.access) {
            (None, _) => self.ours.synchronize(),
            (Some(ordering), Access::Read) => {
                ordering.release_to_upstream(memory, self.ours).map(drop)
            }
            (Some(ordering), Access::Write) => {
                match ordering.order_readers_after(memory, self.ours)? {
                    Ordered::Unordered => self.ours.synchronize(),
                    _ => Ok(()),
                }
            }
        }
    }
}
