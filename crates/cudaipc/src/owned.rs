// SPDX-License-Identifier: MPL-2.0

//! Owned copies of frames: memory of this process that holds no slot, for
//! frames kept longer than they are read.

use std::ffi::c_void;
use std::time::Duration;

use cudaipc_transport::cuda::{DeviceBuffer, DeviceRegion};
use cudaipc_transport::{SlotMemory, TransportError};

use crate::gpu_order::CudaDevice;
use crate::{Error, Frame, VideoLayout};

/// A copy of a frame in memory of this process: it holds no slot, so the
/// producer goes on writing while it is kept. The way to keep a frame:
/// [`Frame::to_owned_copy`] makes one and the frame may be dropped at once.
///
/// On the host transport it is host memory ([`host_bytes`](Self::host_bytes),
/// writable too). On the cuda transport it is device memory of the frame's
/// device ([`device_ptr`](Self::device_ptr), from `cuMemAlloc`), freed when
/// it is dropped, after the work queued on the device (its drop waits on the
/// host for it). Its layout (strides, offsets) is the frame's.
pub struct OwnedFrame {
    memory: Memory,
    layout: VideoLayout,
    seq: u64,
    pts: Option<Duration>,
    missed_before: u64,
}

enum Memory {
    Host(Box<[u8]>),
    Device(DeviceBuffer),
}

impl Drop for Memory {
    fn drop(&mut self) {
        if let Self::Device(buffer) = self {
            // Work queued on a reader's stream may still read it: `cuMemFree`
            // (the buffer's drop) waits for it in most cases only, so wait
            // here. Nothing better is left to do in a drop on failure.
            let _ = buffer.device().synchronize_context();
        }
    }
}

impl std::fmt::Debug for OwnedFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedFrame")
            .field("seq", &self.seq)
            .field("layout", &self.layout)
            .field("cuda", &matches!(self.memory, Memory::Device(_)))
            .finish()
    }
}

fn cuda_error(what: &'static str) -> impl FnOnce(cudaipc_transport::cuda::CudaError) -> Error {
    move |e| Error::Transport {
        what,
        source: TransportError::Cuda(e),
    }
}

/// A new device allocation of `size` bytes with a copy of the `size` bytes
/// at `src` queued on `stream`.
///
/// # Safety
/// `src` is device memory of `device` readable for `size` bytes until the
/// copy has run on `stream`, a live `CUstream` of the device's primary
/// context (or `CU_STREAM_LEGACY`, 1, or `CU_STREAM_PER_THREAD`, 2).
unsafe fn copy_device(
    device: &std::sync::Arc<cudaipc_transport::cuda::Device>,
    src: u64,
    size: usize,
    stream: *mut c_void,
) -> Result<DeviceBuffer, Error> {
    let buffer = DeviceBuffer::new(device, size)
        .map_err(cuda_error("allocate device memory for a copy of the frame"))?;
    // SAFETY: the caller's stream; the destination is the new buffer of
    // `size` bytes, which lives until its drop waits for the device's work;
    // the source is the caller's contract.
    unsafe {
        device
            .foreign_stream(stream.cast())
            .copy_device_to_device(buffer.ptr(), src, size)
    }
    .map_err(cuda_error("copy the frame"))?;
    Ok(buffer)
}

impl Frame {
    /// The way to keep a frame: a copy of it that holds no slot, so that
    /// this frame may be dropped (and its slot go back to the producer) at
    /// once. On the cuda transport the copy is made on the GPU on
    /// [`cuda_stream`](Self::cuda_stream) and waited for on the host;
    /// [`to_owned_copy_on_stream`](Self::to_owned_copy_on_stream) queues it
    /// on a stream of yours instead, without a host wait.
    pub fn to_owned_copy(&self) -> Result<OwnedFrame, Error> {
        let memory = match self.held.memory() {
            SlotMemory::Host(_) => Memory::Host(self.host_copy()?),
            SlotMemory::Device(region) => {
                let stream = region.device().stream();
                // SAFETY: the frame's bytes lie in its slot, which it holds;
                // its stream is the device's own, ordered after the
                // producer's writes, and the slot's release is queued on it
                // after the copy.
                let buffer = unsafe {
                    copy_device(
                        region.device(),
                        region.ptr(),
                        self.frame_bytes(&region)?,
                        stream.raw().cast(),
                    )
                }?;
                stream
                    .synchronize()
                    .map_err(cuda_error("wait for the copy of the frame"))?;
                Memory::Device(buffer)
            }
        };
        Ok(self.owned(memory))
    }

    /// [`to_owned_copy`](Self::to_owned_copy) queued on `stream` on the
    /// cuda transport, without a host wait: `stream` first waits on the GPU
    /// for the producer's writes, and the slot's release (when this frame
    /// is dropped) waits for the copy. The copy is read on `stream`, or
    /// after it. On the host transport it is `to_owned_copy`.
    ///
    /// # Safety
    /// `stream` is a live `CUstream` of a context of the frame's device, or
    /// `CU_STREAM_LEGACY` (1) or `CU_STREAM_PER_THREAD` (2), and the copy
    /// is read only by work ordered after it (on `stream`, or on the host
    /// once `stream` was synchronised).
    pub unsafe fn to_owned_copy_on_stream(&self, stream: *mut c_void) -> Result<OwnedFrame, Error> {
        let SlotMemory::Device(region) = self.held.memory() else {
            return self.to_owned_copy();
        };
        // SAFETY: the caller's stream; the copy's source is the frame's
        // bytes in the slot, which stays held until the copy has run (the
        // release waits for `stream` below).
        let buffer = unsafe {
            self.wait_on_stream(stream)?;
            let buffer = copy_device(
                region.device(),
                region.ptr(),
                self.frame_bytes(&region)?,
                stream,
            )?;
            self.release_after_stream(stream)?;
            buffer
        };
        Ok(self.owned(Memory::Device(buffer)))
    }

    fn host_copy(&self) -> Result<Box<[u8]>, Error> {
        self.host_bytes()
            .map(Box::from)
            .ok_or_else(|| Error::InvalidLayout("the frame is larger than its slot".into()))
    }

    /// The frame's size, checked against its slot's.
    fn frame_bytes(&self, region: &DeviceRegion) -> Result<usize, Error> {
        let size = self.layout.frame_size();
        match size <= region.len() {
            true => Ok(size),
            false => Err(Error::InvalidLayout(
                "the frame is larger than its slot".into(),
            )),
        }
    }

    fn owned(&self, memory: Memory) -> OwnedFrame {
        OwnedFrame {
            memory,
            layout: self.layout.clone(),
            seq: self.seq(),
            pts: self.pts(),
            missed_before: self.missed_before(),
        }
    }
}

impl OwnedFrame {
    /// An owned frame of `layout` holding a copy of `bytes` (exactly
    /// [`VideoLayout::frame_size`] of them), in host memory.
    pub fn from_host(layout: VideoLayout, bytes: &[u8]) -> Result<Self, Error> {
        layout.expect_frame_bytes(bytes.len())?;
        Ok(Self {
            memory: Memory::Host(bytes.into()),
            layout,
            seq: 0,
            pts: None,
            missed_before: 0,
        })
    }

    /// An owned frame of `layout` in a new allocation of `device`, with a
    /// copy of the [`VideoLayout::frame_size`] bytes at `src` queued on
    /// `stream` (not waited for): for frames that a [`Frame`] does not
    /// hold, e.g. a buffer of the `cudaipcsrc` element.
    ///
    /// # Safety
    /// `src` is device memory of `device` readable for the frame's size and
    /// written by work ordered before the copy on `stream`, and stays so
    /// until the copy has run; `stream` is a live `CUstream` of the
    /// device's primary context (or `CU_STREAM_LEGACY`, 1, or
    /// `CU_STREAM_PER_THREAD`, 2); the copy is read only by work ordered
    /// after it.
    pub unsafe fn copy_of_device(
        device: &CudaDevice,
        layout: VideoLayout,
        src: u64,
        stream: *mut c_void,
    ) -> Result<Self, Error> {
        // SAFETY: the caller's contract.
        let buffer = unsafe { copy_device(device.device(), src, layout.frame_size(), stream) }?;
        Ok(Self {
            memory: Memory::Device(buffer),
            layout,
            seq: 0,
            pts: None,
            missed_before: 0,
        })
    }

    /// The frame's format, size, strides and offsets (those of the frame
    /// it copies).
    pub fn layout(&self) -> &VideoLayout {
        &self.layout
    }

    /// The copied frame's sequence number in its channel.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The copied frame's time in the stream.
    pub fn pts(&self) -> Option<Duration> {
        self.pts
    }

    /// Frames lost right before the copied one (see
    /// [`Frame::missed_before`]).
    pub fn missed_before(&self) -> u64 {
        self.missed_before
    }

    /// The bytes, in host memory; `None` for a copy in device memory.
    pub fn host_bytes(&self) -> Option<&[u8]> {
        match &self.memory {
            Memory::Host(bytes) => Some(&bytes[..]),
            Memory::Device(_) => None,
        }
    }

    /// The bytes, writable: the copy is this process's own.
    pub fn host_bytes_mut(&mut self) -> Option<&mut [u8]> {
        match &mut self.memory {
            Memory::Host(bytes) => Some(&mut bytes[..]),
            Memory::Device(_) => None,
        }
    }

    /// The device address of a copy in device memory.
    pub fn device_ptr(&self) -> Option<u64> {
        match &self.memory {
            Memory::Device(buffer) => Some(buffer.ptr()),
            Memory::Host(_) => None,
        }
    }

    /// The ordinal of the CUDA device of a copy in device memory.
    pub fn device_ordinal(&self) -> Option<i32> {
        match &self.memory {
            Memory::Device(buffer) => Some(buffer.device().ordinal()),
            Memory::Host(_) => None,
        }
    }

    /// Copies the bytes into `dst` (exactly [`VideoLayout::frame_size`]
    /// bytes). A copy in device memory is downloaded after the work queued
    /// on the device's primary context (its own copy included), waiting for
    /// it.
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<(), Error> {
        self.layout.expect_frame_bytes(dst.len())?;
        match &self.memory {
            Memory::Host(bytes) => dst.copy_from_slice(bytes),
            Memory::Device(buffer) => {
                let device = buffer.device();
                // The copy may have been queued on any stream of the device.
                device
                    .synchronize_context()
                    .map_err(cuda_error("wait for the copy of the frame"))?;
                // SAFETY: the buffer holds `expected` bytes (allocated for
                // the layout) and lives through the synchronous download.
                unsafe { device.stream().download(dst, buffer.ptr()) }
                    .map_err(cuda_error("download the frame"))?;
            }
        }
        Ok(())
    }
}
