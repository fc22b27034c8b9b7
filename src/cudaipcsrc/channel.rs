// SPDX-License-Identifier: MPL-2.0

//! Between the channel and GStreamer: the channel's caps negotiated
//! downstream (which memory, which pools), and its failures as messages.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use gst::glib;
use gst::prelude::*;
use gst_base::prelude::*;

use super::gstcuda_out::{self, GstCudaPath, SlotWrapper};
use crate::copy_error::FrameCopyError;
use crate::enums::OutputMemory;
use crate::gstcuda::{self, ContextShare, CudaContext, StreamOrdering};
use crate::memory::{self, CudaAllocator};
use crate::output_pool::{self, CudaOutput};
use crate::video;
use cudaipc_transport::cuda::Device;
use cudaipc_transport::{SubscriberCorruption, SubscriberError, TransportKind};

/// The channel attached to.
#[derive(Clone)]
pub(super) struct Channel {
    pub kind: TransportKind,
    pub device: Option<Arc<Device>>,
}

/// What is pushed, negotiated from the channel's caps.
#[derive(Clone)]
pub(super) struct Output {
    /// Caps as published, without memory feature.
    pub channel_caps: gst::Caps,
    pub info: gst_video::VideoInfo,
    pub cuda: bool,
    /// Buffers of the output memory type, for frames copied out of their slot
    /// (downloads, and copies when downstream holds many slots).
    pub copy_pool: gst::BufferPool,
    /// The active `GstCudaBufferPool` frames are copied into (output-memory).
    pub gst_cuda_pool: Option<gst::BufferPool>,
    /// With `gst_cuda_pool`, how frames become `GstCudaMemory`.
    pub gst_cuda_path: Option<GstCudaPath>,
    /// Wraps the slots as `GstCudaMemory` (GStreamer 1.24+).
    pub slot_wrapper: Option<Arc<SlotWrapper>>,
    /// Orders GStreamer's streams against ours (GStreamer 1.24+).
    pub ordering: Option<Arc<StreamOrdering>>,
    /// The buffers downstream keeps, as its allocation query's pools ask
    /// (min buffers): a hold declared on its behalf.
    pub downstream_min_buffers: u32,
}

/// A failed negotiation: the flow return, and the error to post.
pub(super) type Failed = (gst::FlowError, gst::ErrorMessage);

/// The caps a caps query gets once the channel's caps are known.
pub(super) fn query_caps(channel: &Channel, output: &Output) -> gst::Caps {
    let mut all = gst::Caps::new_empty();
    if channel.kind == TransportKind::Cuda {
        all.merge(memory::with_cuda_feature(&output.channel_caps));
    }
    all.merge(output.channel_caps.clone());
    all
}

/// The channel's caps string as video caps this plugin handles.
pub(super) fn parse_caps(text: &str) -> Result<gst::Caps, SubscriberError> {
    let caps = gst::Caps::from_str(text)
        .ok()
        .filter(|c| c.is_fixed())
        .ok_or_else(|| unusable_caps(text))?;
    let info = gst_video::VideoInfo::from_caps(&caps).map_err(|_| unusable_caps(text))?;
    if !video::FORMATS.contains(&info.format()) {
        return Err(SubscriberError::Corrupt(
            SubscriberCorruption::UnsupportedFormat { caps: text.into() },
        ));
    }
    Ok(caps)
}

fn unusable_caps(text: &str) -> SubscriberError {
    SubscriberError::Corrupt(SubscriberCorruption::UnusableCaps { caps: text.into() })
}

/// The error to post for a failed attach or read; `Err`: none, flushing.
pub(super) fn error_message(
    e: SubscriberError,
    channel: &str,
    connect_timeout_ms: i64,
) -> Result<gst::ErrorMessage, gst::FlowError> {
    use gst::{ResourceError, StreamError};
    let hint = crate::hints::subscriber(&e);
    Ok(match e {
        SubscriberError::Interrupted => return Err(gst::FlowError::Flushing),
        SubscriberError::NoProducer(e) => gst::error_msg!(
            ResourceError::NotFound,
            (
                "{} (connect-timeout={} ms); {}",
                e,
                connect_timeout_ms,
                channels_seen()
            )
        ),
        SubscriberError::Attach(e) => gst::error_msg!(
            ResourceError::OpenRead,
            ("cannot attach to channel '{}': {}{}", channel, e, hint)
        ),
        e @ (SubscriberError::NoCuda { .. }
        | SubscriberError::ProducerGpuNotVisible
        | SubscriberError::Device { .. }) => {
            gst::error_msg!(ResourceError::OpenRead, ("{}{}", e, hint))
        }
        SubscriberError::Corrupt(what) => {
            gst::error_msg!(StreamError::Decode, ("corrupt control block: {}", what))
        }
        SubscriberError::OpenSlots(e) => gst::error_msg!(
            ResourceError::OpenRead,
            ("cannot open the channel's slots: {}{}", e, hint)
        ),
        SubscriberError::Read(e) => gst::error_msg!(ResourceError::Read, ("{}{}", e, hint)),
        e @ SubscriberError::Truncated(_) => gst::error_msg!(ResourceError::Read, ("{}", e)),
    })
}

/// Why downstream (`peer`) takes none of the channel's `caps` although it
/// takes video in a memory the channel can give: the fields it refuses,
/// what it accepts instead, and the element that converts. `None` when no
/// single field explains it.
fn refused_fields(caps: &gst::Caps, peer: &gst::Caps, kind: TransportKind) -> Option<String> {
    let structure = caps.structure(0)?;
    let in_memory = |cuda: bool, fields: gst::Structure| {
        let probe = gst::Caps::builder_full().structure(fields).build();
        if cuda {
            memory::with_cuda_feature(&probe)
        } else {
            probe
        }
    };
    // CUDA memory first, as negotiation tries it.
    let memories: &[bool] = match kind {
        TransportKind::Cuda => &[true, false],
        TransportKind::Host => &[false],
    };
    let cuda = memories.iter().copied().find(|&cuda| {
        peer.can_intersect(&in_memory(
            cuda,
            gst::Structure::new_empty(structure.name()),
        ))
    })?;
    let refused: Vec<(&str, String)> = structure
        .iter()
        .filter(|(field, value)| {
            let mut only = gst::Structure::new_empty(structure.name());
            only.set_value(*field, (*value).clone());
            !peer.can_intersect(&in_memory(cuda, only))
        })
        .map(|(field, value)| (field.as_str(), readable(value)))
        .collect();
    if refused.is_empty() {
        return None;
    }
    let memory_only = in_memory(cuda, gst::Structure::new_empty(structure.name()));
    let accepted = |field: &str| {
        let mut values: Vec<String> = peer
            .iter_with_features()
            .filter(|(s, features)| {
                let one = gst::Caps::builder_full()
                    .structure_with_features((*s).to_owned(), (*features).to_owned())
                    .build();
                one.can_intersect(&memory_only)
            })
            .filter_map(|(s, _)| s.value(field).ok())
            .flat_map(|value| match value.get::<gst::List>() {
                Ok(list) => list.iter().map(readable).collect(),
                Err(_) => vec![readable(value)],
            })
            .collect();
        values.dedup();
        values.join(", ")
    };
    let mismatch: Vec<String> = refused
        .iter()
        .map(|(field, value)| format!("{field}={value} (it takes {})", accepted(field)))
        .collect();
    // The element that changes each refused field, in the memory chosen.
    let mut converters: Vec<&str> = refused
        .iter()
        .map(|(field, _)| match (*field, cuda) {
            ("width" | "height" | "pixel-aspect-ratio", true) => "cudascale",
            ("width" | "height" | "pixel-aspect-ratio", false) => "videoscale",
            ("framerate", _) => "videorate",
            (_, true) => "cudaconvert",
            (_, false) => "videoconvert",
        })
        .collect();
    converters.dedup();
    let alternative =
        if kind == TransportKind::Cuda && !cuda && converters.contains(&"videoconvert") {
            " (or cudaconvert ! cudadownload, to convert on the GPU)"
        } else {
            ""
        };
    Some(format!(
        "downstream does not take the channel's {}: put {} after rscudaipcsrc{alternative}",
        mismatch.join(" or "),
        converters.join(" ! ")
    ))
}

/// A caps value as a gst-launch-1.0 line writes it.
fn readable(value: &glib::SendValue) -> String {
    value
        .serialize()
        .map_or_else(|_| "?".into(), |v| v.to_string())
}

/// Chooses CUDA or system memory for the channel's `caps`, sets them on the
/// pad of `src` and prepares the pools frames are copied into.
pub(super) fn negotiate(
    src: &gst_base::BaseSrc,
    cuda_context: &ContextShare,
    output_memory: OutputMemory,
    (channel_name, channel): (&str, &Channel),
    caps: &gst::Caps,
) -> Result<Output, Failed> {
    let not_negotiated = |message| (gst::FlowError::NotNegotiated, message);
    let cuda_caps = memory::with_cuda_feature(caps);
    let peer = src.src_pad().peer_query_caps(None);
    let mut candidates = Vec::new();
    if channel.kind == TransportKind::Cuda {
        candidates.push(cuda_caps.clone());
    }
    candidates.push(caps.clone());
    let Some(chosen) = candidates.into_iter().find(|c| peer.can_intersect(c)) else {
        return Err(not_negotiated(
            if channel.kind == TransportKind::Host && peer.can_intersect(&cuda_caps) {
                gst::error_msg!(
                    gst::CoreError::Negotiation,
                    (
                        "channel '{}' uses the host transport, so its frames are in system memory, but downstream takes only CUDA memory: put an upload element (cudaupload) after rscudaipcsrc, or give the producer's rscudaipcsink transport=cuda (or auto, on a machine with a GPU)",
                        channel_name
                    ),
                    ["channel caps {}; downstream accepts {}", caps, peer]
                )
            } else if let Some(why) = refused_fields(caps, &peer, channel.kind) {
                gst::error_msg!(
                    gst::CoreError::Negotiation,
                    ("channel '{}': {}", channel_name, why),
                    ["channel caps {}; downstream accepts {}", caps, peer]
                )
            } else {
                gst::error_msg!(
                    gst::CoreError::Negotiation,
                    (
                        "downstream accepts neither CUDA nor system memory for the channel's caps {}",
                        caps
                    ),
                    ["downstream accepts {}", peer]
                )
            },
        ));
    };
    let cuda = memory::caps_are_cuda(&chosen);
    let device = channel.device.as_ref().filter(|_| cuda);
    if let Some(device) = device {
        // Before the allocation query, so that a pool of ours shares it.
        cuda_context.ensure(src.upcast_ref(), device);
    }
    let failed = |what: &str| {
        (
            gst::FlowError::Error,
            gst::error_msg!(gst::CoreError::Negotiation, ("{}", what)),
        )
    };
    let info = gst_video::VideoInfo::from_caps(caps).map_err(|_| failed("invalid caps"))?;
    let copy_pool = gst_video::VideoBufferPool::new();
    let mut config = copy_pool.config();
    config.set_params(Some(&chosen), info.size() as u32, 0, 0);
    if let Some(device) = device {
        let allocator = CudaAllocator::for_device(device);
        config.set_allocator(Some(allocator.upcast_ref::<gst::Allocator>()), None);
    }
    copy_pool
        .set_config(config)
        .and_then(|()| copy_pool.set_active(true))
        .map_err(|_| failed("cannot set up the pool to copy frames into"))?;
    src.set_caps(&chosen).map_err(|_| {
        not_negotiated(gst::error_msg!(
            gst::CoreError::Negotiation,
            ("downstream refused caps {}", chosen)
        ))
    })?;
    let downstream_min_buffers = downstream_min_buffers(src, &chosen);
    let gst_cuda_pool = if cuda {
        gst_cuda_pool(src, cuda_context, output_memory, &chosen)
            .map_err(|e| not_negotiated(gst::error_msg!(gst::CoreError::Negotiation, ("{}", e))))?
    } else {
        None
    };
    let (gst_cuda_path, slot_wrapper, ordering) = match (&gst_cuda_pool, device) {
        (Some(_), Some(device)) => gst_cuda_output(cuda_context, device),
        _ => (None, None, None),
    };
    Ok(Output {
        channel_caps: caps.clone(),
        info,
        cuda,
        copy_pool: copy_pool.upcast(),
        gst_cuda_pool,
        gst_cuda_path,
        slot_wrapper,
        ordering,
        downstream_min_buffers,
    })
}

/// The most buffers a pool downstream proposes for `caps` keeps at least
/// (its allocation query's min buffers, as GStreamer pools honour them).
fn downstream_min_buffers(src: &gst_base::BaseSrc, caps: &gst::Caps) -> u32 {
    let mut query = gst::query::Allocation::new(Some(caps), false);
    if !src.src_pad().peer_query(&mut query) {
        return 0;
    }
    query
        .allocation_pools()
        .map(|(_, _, min, _)| min)
        .max()
        .unwrap_or(0)
}

/// How frames of `device` become `GstCudaMemory` of the shared context.
fn gst_cuda_output(
    cuda_context: &ContextShare,
    device: &Arc<Device>,
) -> (
    Option<GstCudaPath>,
    Option<Arc<SlotWrapper>>,
    Option<Arc<StreamOrdering>>,
) {
    let api = gstcuda::api_level();
    let ordering =
        (api >= gstcuda::ApiLevel::V1_24).then(|| Arc::new(StreamOrdering::new(device.clone())));
    // The slots are mapped in our primary context, so they are wrapped in a
    // GstCudaContext of it, even where downstream shared another (its
    // elements made one before we knew our device): nvcodec's filters
    // follow the context of the memory they are given, others copy it.
    let context = cuda_context
        .get()
        .filter(|c| c.is_primary_of(device))
        .or_else(|| {
            (api >= gstcuda::ApiLevel::V1_24)
                .then(|| CudaContext::wrap(device))
                .flatten()
        });
    let primary = context.as_ref().is_some_and(|c| c.is_primary_of(device));
    let mut path = gstcuda_out::choose_path(api, primary);
    let wrapper = match (path, context, &ordering) {
        (GstCudaPath::WrapSlots, Some(context), Some(ordering)) => {
            SlotWrapper::new(context, device.clone(), ordering.clone()).map(Arc::new)
        }
        _ => None,
    };
    if path == GstCudaPath::WrapSlots && wrapper.is_none() {
        path = GstCudaPath::Copy("GStreamer could not make a CUDA stream");
    }
    (Some(path), wrapper, ordering)
}

/// The `GstCudaBufferPool` (configured, active) to copy frames into for
/// `caps` (CUDA memory); `None`: output the slots themselves. BaseSrc queries
/// downstream's allocation only when it negotiates itself; these caps come
/// from the channel, so ask here.
fn gst_cuda_pool(
    src: &gst_base::BaseSrc,
    cuda_context: &ContextShare,
    output_memory: OutputMemory,
    caps: &gst::Caps,
) -> Result<Option<gst::BufferPool>, FrameCopyError> {
    if output_memory == OutputMemory::CudaIpc || !gstcuda::available() {
        return Ok(None);
    }
    let mut query = gst::query::Allocation::new(Some(caps), true);
    let _ = src.src_pad().peer_query(&mut query);
    let chosen = output_pool::choose_cuda_output(
        src.upcast_ref(),
        &query,
        caps,
        output_memory,
        cuda_context,
    )?;
    let CudaOutput::GstCuda(chosen) = chosen else {
        return Ok(None);
    };
    if chosen.pool.set_active(true).is_err() {
        return Err(FrameCopyError::PoolRefused {
            pool: chosen.pool.name().to_string(),
            caps: caps.clone(),
        });
    }
    Ok(Some(chosen.pool))
}

/// What a user who mistyped a channel name needs: the live channels there are.
/// Where GStreamer's own `cudaipcsink` (nvcodec, 1.24+) listens unless given
/// an `address`; `CUDAIPC_UPSTREAM_ADDRESS` names another (tests).
#[cfg(unix)]
fn upstream_sink_address() -> PathBuf {
    std::env::var_os("CUDAIPC_UPSTREAM_ADDRESS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/gst.cuda.ipc"))
}

/// The address of a GStreamer (nvcodec) `cudaipcsink` that runs at its
/// default address: a unix socket there that accepts a connection.
#[cfg(unix)]
fn live_upstream_sink() -> Option<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let address = upstream_sink_address();
    let is_socket = std::fs::symlink_metadata(&address).is_ok_and(|m| m.file_type().is_socket());
    // Never a blocking connect: a listener that does not accept would hold
    // this source for good.
    (is_socket && cudaipc_channel::socket::connect(&address).is_ok()).then_some(address)
}

/// On Windows nvcodec's `cudaipcsink` listens on a named pipe
/// (`\\.\pipe\gst.cuda.ipc`), which is not probed: connecting would take
/// one of its instances.
#[cfg(windows)]
fn live_upstream_sink() -> Option<PathBuf> {
    None
}

/// What to say about the other cudaipc protocol when `channel` has no
/// producer of this plugin but nvcodec's `cudaipcsink` runs.
fn upstream_sink_note() -> Option<String> {
    live_upstream_sink().map(|address| {
        format!(
            "GStreamer's own cudaipcsink (nvcodec) listens at {}: its protocol is not this plugin's; read it with nvcodec's cudaipcsrc (address={}), or produce with rscudaipcsink (this plugin)",
            address.display(),
            address.display()
        )
    })
}

/// Before waiting for a producer on `channel`: the error to post at once
/// when both sides were left at their defaults and what runs is
/// GStreamer's own `cudaipcsink` (the element names mixed up the plugins:
/// waiting would never end). A channel named by the user is waited for.
pub(super) fn mixed_with_upstream(
    channel: &str,
    channel_is_default: bool,
) -> Option<gst::ErrorMessage> {
    if !channel_is_default || cudaipc_channel::shm::control_path(channel).exists() {
        return None;
    }
    upstream_sink_note().map(|note| {
        gst::error_msg!(
            gst::ResourceError::NotFound,
            (
                "no producer of this plugin on channel '{}', and {}",
                channel,
                note
            )
        )
    })
}

/// What a consumer that finds no producer can see: the live channels, and
/// GStreamer's own `cudaipcsink` if it runs.
pub(super) fn channels_seen() -> String {
    format!(
        "{}{}",
        cudaipc_channel::directory::live_channels_note(),
        upstream_note()
    )
}

/// What a consumer still waiting for a producer on `channel` can see: the
/// other live channels, and GStreamer's own `cudaipcsink` if it runs.
pub(super) fn other_channels_seen(channel: &str) -> String {
    let others = cudaipc_channel::directory::other_live_channels_note(channel);
    format!("{others}{}", upstream_note())
}

fn upstream_note() -> String {
    upstream_sink_note()
        .map(|note| format!("; {note}"))
        .unwrap_or_default()
}
