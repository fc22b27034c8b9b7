//! Where the slots live and how access to them is ordered: the seam between
//! the channel (which only knows slot indices) and the elements.
//!
//! Two backends pass the same contract tests: `cuda` (device memory of a
//! [`MemoryKind`] ordered across processes by a [`GpuSync`], composed as
//! one of [`CUDA_COMPOSITIONS`]) and `host` (shared host memory, for
//! machines without a GPU and for CI).
//!
//! [`cuda`] holds the CUDA driver wrappers both use. Nothing here knows
//! GStreamer.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod corruption;
pub mod cuda;
mod cuda_slots;
mod error;
mod host;
mod kinds;
mod lending;
mod lent_slots;
mod publisher;
mod reservation;
mod ring_policy;
mod slots;
mod subscriber;
#[cfg(test)]
mod tests;
mod timeline;

pub use corruption::SubscriberCorruption;
pub use cuda_slots::{
    CUDA_COMPOSITIONS, CudaComposition, CudaConsumerSlots, CudaProducerSlots, MemoryKind,
    waits_on_host,
};
pub use error::{GpuWork, LegacyCudaIpc, SharedObject, TransportError};
pub use host::{HostConsumerSlots, HostProducerSlots, HostRegion, MAX_SLOT_SIZE};
pub use kinds::{DeviceTraits, GpuSync, TransportKind, resolve_ipc_mode, resolve_ipc_mode_for};
pub use lending::{Learned, Lender};
pub use lent_slots::{LendableFrame, Lent, LentSlots};
pub use publisher::{
    Allocated, ConfigureError, PublishError, Publisher, PublisherConfig, PublisherStats,
    PublisherStatus, ReserveError, SlotLoan,
};
pub use ring_policy::{WrapOrCopy, slots_consumers_need};
pub use slots::{
    ConsumerSlots, ProducerSlots, SlotMemory, SlotRequest, WriterStream, create_producer_slots,
    open_consumer_slots,
};
pub use subscriber::{Event, HeldFrame, Subscriber, SubscriberConfig, SubscriberError};
