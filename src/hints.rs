// SPDX-License-Identifier: MPL-2.0

//! What a user changes, in the elements' properties, for an error of the
//! library crates. Those carry the facts (the channel, the owner, the slot);
//! the words naming a property live here, with the elements, so that the
//! Rust API can name its own options instead.

use cudaipc_channel::ChannelError;
use cudaipc_transport::cuda::CudaError;
use cudaipc_transport::{LegacyCudaIpc, SubscriberError, TransportError};

/// `n` and `noun`, the noun plural unless `n` is 1: "1 frame", "3 frames".
pub fn count(n: u64, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// Appended to a channel error that a property changes; empty otherwise.
pub fn channel(e: &ChannelError) -> &'static str {
    match e {
        ChannelError::NoAccess { .. } => {
            ": sharing a channel with another user takes both ends: the producer widens its 'permissions' (e.g. permissions=0666 on rscudaipcsink; allowed-uids with ipc-mode=fd), and this consumer trusts the producer's user with 'allowed-producers=UID' (a consumer refuses a producer of another user by default)"
        }
        ChannelError::UntrustedProducer { .. } => {
            "; a consumer refuses a producer of another user by default: trust it with 'allowed-producers=UID' on rscudaipcsrc (and the producer's 'permissions', or allowed-uids with ipc-mode=fd, must let this user in)"
        }
        ChannelError::OtherPidNamespace {
            descriptor_channel: true,
            ..
        } => {
            "; a descriptor channel of the cuda transport crosses PID namespaces with gpu-sync=timeline (its default) or host on the sink, not with events"
        }
        ChannelError::OtherPidNamespace {
            descriptor_channel: false,
            ..
        } => {
            "; a channel named in the shm folder works only between processes of one PID namespace: run both in the same container, share the host PID namespace, or use ipc-mode=fd"
        }
        _ => "",
    }
}

/// Appended to a CUDA error: without a driver, which elements need none.
pub fn cuda(e: &CudaError) -> &'static str {
    match e {
        CudaError::NoDriver => {
            " (without one, a channel of rscudaipcsink transport=host, and rscudaipcsrc reading it, need no GPU; cudatestsrc and cudaprocess do)"
        }
        _ => "",
    }
}

/// Appended to a transport error that a property changes; empty otherwise.
pub fn transport(e: &TransportError) -> &'static str {
    match e {
        TransportError::Channel(e) => channel(e),
        TransportError::Cuda(e) => cuda(e),
        TransportError::NoLegacyCudaIpc {
            what: LegacyCudaIpc::Memory,
        } => {
            ": use ipc-mode=fd (VMM memory handed over as file descriptors), which ipc-mode=auto picks there"
        }
        TransportError::NoLegacyCudaIpc {
            what: LegacyCudaIpc::Events,
        } => ": use gpu-sync=timeline or gpu-sync=host, one of which gpu-sync=auto picks there",
        TransportError::OpenEvent { .. } => {
            ". CUDA keeps interprocess events in files only their creator's user can map, in its PID namespace: a producer and a consumer of different users need gpu-sync=timeline (the default where the device supports it) or host on the sink, and of different containers ipc-mode=fd as well"
        }
        _ => "",
    }
}

/// Appended to a subscriber's error that a property changes; empty
/// otherwise.
pub fn subscriber(e: &SubscriberError) -> &'static str {
    match e {
        SubscriberError::NoProducer(e) | SubscriberError::Attach(e) => channel(e),
        SubscriberError::OpenSlots(e) | SubscriberError::Read(e) => transport(e),
        SubscriberError::NoCuda { source, .. } => cuda(source),
        SubscriberError::ProducerGpuNotVisible => {
            "; set cuda-device-id to read through peer access from another GPU"
        }
        _ => "",
    }
}

/// Appended to the error for a channel whose producer is gone: closed
/// (`closed`: stopped without sending an end of stream) or died.
pub fn producer_lost(closed: bool) -> &'static str {
    if closed {
        " without an end of stream (set on-producer-lost=eos to end this stream, or on-producer-lost=wait to wait for a new producer; run the producer's gst-launch-1.0 with -e so that Ctrl-C sends an end of stream)"
    } else {
        " (set on-producer-lost=wait to wait for a new producer, or on-producer-lost=eos to end this stream)"
    }
}

/// The message for `gpu-sync` settings that cannot work; `None` for other
/// errors.
pub fn gpu_sync(e: &TransportError) -> Option<&'static str> {
    match e {
        TransportError::TimelineNeedsCuda => {
            Some("gpu-sync=timeline needs transport=cuda (it orders GPU work)")
        }
        TransportError::NoLegacyCudaIpc {
            what: LegacyCudaIpc::Events,
        } => Some(
            "gpu-sync=event needs CUDA IPC event handles, which an integrated GPU (Jetson) does not have: use gpu-sync=timeline or gpu-sync=host, one of which gpu-sync=auto picks there",
        ),
        TransportError::TimelineUnsupported => Some(
            "gpu-sync=timeline: this device cannot write and wait for values in memory (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS); use gpu-sync=event",
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(count(1, "frame"), "1 frame");
        assert_eq!(count(0, "frame"), "0 frames");
        assert_eq!(count(3, "frame"), "3 frames");
    }
    use cudaipc_transport::{DeviceTraits, GpuSync, TransportKind, resolve_ipc_mode_for};

    /// A Jetson (integrated GPU) told to make a legacy channel of the cuda
    /// transport, or to order by events: the sink's message names the
    /// setting that works there.
    #[test]
    fn legacy_cuda_ipc_on_an_integrated_gpu_names_what_works_there() {
        let tegra = DeviceTraits {
            integrated: true,
            value_ops: false,
        };
        let e = resolve_ipc_mode_for(
            Some(cudaipc_channel::IpcMode::Legacy),
            TransportKind::Cuda,
            tegra,
        )
        .unwrap_err();
        let message = format!("{e}{}", transport(&e));
        assert!(message.contains("integrated GPU"), "{message}");
        assert!(message.contains("use ipc-mode=fd"), "{message}");
        let e = GpuSync::resolve_for(Some(GpuSync::Event), TransportKind::Cuda, tegra).unwrap_err();
        let message = gpu_sync(&e).expect("a gpu-sync message");
        assert!(message.starts_with("gpu-sync=event needs CUDA IPC event handles"));
        assert!(message.contains("use gpu-sync=timeline or gpu-sync=host"));
    }
}
