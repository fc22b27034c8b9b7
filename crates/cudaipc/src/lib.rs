// SPDX-License-Identifier: MPL-2.0

//! Publish and read video frames over a cudaipc channel from a Rust program
//! that is not a GStreamer pipeline.
//!
//! A [`Publisher`] is what the `rscudaipcsink` element is to a pipeline: its
//! frames are read by `rscudaipcsrc` (`gst-launch-1.0 rscudaipcsrc
//! channel=NAME ! ...`) or by a [`Subscriber`]. A [`Subscriber`] is what
//! `rscudaipcsrc` is: it reads what `rscudaipcsink` or a [`Publisher`]
//! publishes. Frames are described by a [`VideoLayout`] (format, width,
//! height, strides and offsets); no GStreamer types are involved, and this
//! crate does not link GStreamer.
//!
//! Frames live in slots of CUDA device memory (the cuda transport; read and
//! written on the GPU, ordered on CUDA streams) or of shared host memory
//! (the host transport; no GPU needed). A [`Frame`] holds its slot until it
//! is dropped; a [`FrameLoan`] is a slot to write a frame into in place,
//! published by consuming it or given back by dropping it.
//!
//! ```
//! use cudaipc::{Publisher, PublisherOptions, Subscriber, SubscriberOptions, Transport,
//!               VideoFormat, VideoLayout};
//! use std::time::Duration;
//!
//! let channel = format!("doc-crate-{}", std::process::id());
//! let layout = VideoLayout::new(VideoFormat::Rgb, 320, 240)?;
//! let options = PublisherOptions { transport: Transport::Host, ..Default::default() };
//! let publisher = Publisher::create(&channel, layout.clone(), options)?;
//! let mut subscriber = Subscriber::attach(&channel, SubscriberOptions::default())?;
//!
//! publisher.publish(&vec![7u8; layout.frame_size()], None)?;
//! let frame = subscriber.next_frame(Some(Duration::from_secs(5)))?.expect("a frame");
//! assert!(frame.host_bytes().unwrap().iter().all(|&b| b == 7));
//! # Ok::<(), cudaipc::Error>(())
//! ```
//!
//! docs/rust-api.md in the repository has the lines to copy; the
//! `api_publish` and `api_read` examples are whole programs.

#![warn(missing_docs)]

mod closer;
mod error;
mod frame_data;
mod gpu_order;
mod layout;
mod owned;
mod publisher;
mod subscriber;

pub use closer::Closer;
pub use cudaipc_channel::{IpcMode, Setting, WhenFull};
pub use error::Error;
pub use frame_data::AppData;
pub use gpu_order::{CudaDevice, order_streams, synchronize_device};
pub use layout::{MAX_FRAME_SIZE, Plane, VideoFormat, VideoLayout};
pub use owned::OwnedFrame;
pub use publisher::{FrameLoan, Published, Publisher, PublisherOptions, Transport};
pub use subscriber::{Frame, Frames, Subscriber, SubscriberOptions};

/// The channels that have a live producer, as an error about a missing
/// producer names them: "channels with a producer: a, b", or "no channel
/// has a producer in /dev/shm".
pub fn live_channels_note() -> String {
    cudaipc_channel::directory::live_channels_note()
}
