// SPDX-License-Identifier: MPL-2.0

//! What the frame-copy path fails with ([`FrameCopyError`]): a layout that
//! does not fit its memory ([`LayoutError`]), a CUDA call, a buffer or slot
//! that cannot be mapped, memory of the wrong kind for the output, or a
//! pool to copy into that cannot be had. The variants carry the facts; the
//! elements turn them into their error messages with `{}`.

use std::fmt;

use cudaipc_transport::cuda::CudaError;

/// How a frame's plane layout (offset and stride per plane) does not fit
/// its caps or the memory it describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// Another number of planes than the caps' format has.
    PlaneCount { planes: usize, caps: usize },
    /// A plane's stride below the bytes of one of its rows.
    StrideBelowRow { plane: usize, stride: u32, row: u64 },
    /// A plane whose end does not fit in 64 bits.
    Overflow,
    /// A plane that ends beyond the memory.
    BeyondMemory { plane: usize, end: u64, size: u64 },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PlaneCount { planes, caps } => write!(f, "{planes} planes, the caps say {caps}"),
            Self::StrideBelowRow { plane, stride, row } => {
                write!(
                    f,
                    "plane {plane}: stride {stride} is below the row width {row}"
                )
            }
            Self::Overflow => f.write_str("layout overflows"),
            Self::BeyondMemory { plane, end, size } => write!(
                f,
                "plane {plane} ends at byte {end}, beyond the frame of {size} bytes"
            ),
        }
    }
}

impl std::error::Error for LayoutError {}

/// Which side of a copy a layout describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Source,
    Target,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Source => "source",
            Side::Target => "target",
        })
    }
}

/// A buffer of the pipeline's that a copy maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buffer {
    /// The sink's input buffer (read).
    Input,
    /// A source's output buffer (written).
    Output,
}

impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Buffer::Input => "input",
            Buffer::Output => "output",
        })
    }
}

/// Everything copying a frame between host and device memory, and choosing
/// the memory a source copies into, can fail with.
#[derive(Debug)]
pub enum FrameCopyError {
    /// The layout of one side does not fit its memory (or the caps).
    Layout { side: Side, error: LayoutError },
    /// The source's layout reaches beyond its device memory.
    SourceBeyondMemory,
    /// A CUDA call failed: an upload, a download, a device copy, mapping a
    /// `GstCudaMemory`, or ordering its stream's work with ours.
    Cuda(CudaError),
    /// A buffer that cannot be mapped on the host.
    CannotMap(Buffer),
    /// A host slot that is not mapped in this process.
    HostSlotUnmapped,
    /// A slot mapped read-only, to be written.
    SlotReadOnly,
    /// An output buffer without one `GstCudaMemory` that maps on the device.
    NoGstCudaMemory,
    /// `GstCudaMemory` output of frames in host slots.
    GstCudaNeedsCuda,
    /// Caps that are no video caps.
    InvalidCaps { caps: gst::Caps },
    /// output-memory=gstcuda, and no `GstCudaBufferPool` for the caps.
    NoGstCudaPool { caps: gst::Caps },
    /// The pool to copy into refused to start for the caps.
    PoolRefused { pool: String, caps: gst::Caps },
}

impl fmt::Display for FrameCopyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Layout { side, error } => write!(f, "{side}: {error}"),
            Self::SourceBeyondMemory => f.write_str("the source layout exceeds its memory"),
            Self::Cuda(e) => write!(f, "{e}"),
            Self::CannotMap(buffer) => write!(f, "cannot map the {buffer} buffer"),
            Self::HostSlotUnmapped => f.write_str("the host slot is not mapped"),
            Self::SlotReadOnly => f.write_str("the slot's mapping is read-only"),
            Self::NoGstCudaMemory => {
                f.write_str("the output buffer holds no GstCudaMemory that maps")
            }
            Self::GstCudaNeedsCuda => f.write_str("GstCudaMemory output needs the cuda transport"),
            Self::InvalidCaps { caps } => write!(f, "invalid video caps {caps}"),
            Self::NoGstCudaPool { caps } => write!(
                f,
                "output-memory=gstcuda: cannot make a GstCudaBufferPool for {caps}"
            ),
            Self::PoolRefused { pool, caps } => write!(f, "{pool} refused {caps}"),
        }
    }
}

impl std::error::Error for FrameCopyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Layout { error, .. } => Some(error),
            Self::Cuda(e) => Some(e),
            _ => None,
        }
    }
}

impl From<CudaError> for FrameCopyError {
    fn from(e: CudaError) -> Self {
        Self::Cuda(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn messages_keep_their_words_and_sources() {
        let error = FrameCopyError::Layout {
            side: Side::Target,
            error: LayoutError::BeyondMemory {
                plane: 0,
                end: 256,
                size: 255,
            },
        };
        assert_eq!(
            error.to_string(),
            "target: plane 0 ends at byte 256, beyond the frame of 255 bytes"
        );
        assert!(error.source().is_some());
        assert_eq!(
            FrameCopyError::CannotMap(Buffer::Input).to_string(),
            "cannot map the input buffer"
        );
        assert!(FrameCopyError::SlotReadOnly.source().is_none());
    }
}
