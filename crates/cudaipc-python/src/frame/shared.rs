// SPDX-License-Identifier: MPL-2.0

//! The slot a frame holds (`FrameShared`): where its bytes are, who gives
//! them back, and the release ordered after the streams it was read on.

use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

use cudaipc::VideoLayout;
use pyo3::prelude::*;

use crate::streams;

/// The frame's slot, held while the Python frame is not released or a
/// DLPack export of it lives. Dropping the last holder gives the slot back,
/// after the work queued so far on the streams the frame was exported to.
pub struct FrameShared {
    pub(super) source: Source,
    /// `CUstream`s to order the release after.
    pub(super) streams: Mutex<Vec<usize>>,
}

/// Where a frame's bytes are and who gives them back.
// Inline: it lives in the frame's one `Arc` allocation, and a box would
// add one per frame.
#[allow(clippy::large_enum_variant)]
pub(super) enum Source {
    /// A frame of a subscriber: its slot goes back when it is dropped.
    Channel(cudaipc::Frame),
    /// A buffer of `rscudaipcsrc` (GStreamer): held through its Python object
    /// (a `Gst.Buffer`, or a read map of one on the host transport); the
    /// source gives the slot back once the buffer's last reference goes,
    /// ordered on `cuda`'s stream.
    Buffer {
        holder: Option<Py<PyAny>>,
        cuda: Option<BufferStream>,
    },
    /// A copy that holds no slot (`Frame.copy()`): complete when made, so
    /// nothing orders its reads or its release.
    Owned(cudaipc::OwnedFrame),
}

/// The stream an `rscudaipcsrc` buffer's frame is read on (its `CudaIpcMeta`).
pub(super) struct BufferStream {
    pub(super) device_ordinal: i32,
    pub(super) stream: usize,
    /// The device, looked up at the first use and kept for the next ones.
    pub(super) device: OnceLock<cudaipc::CudaDevice>,
}

impl BufferStream {
    fn device(&self) -> Result<&cudaipc::CudaDevice, cudaipc::Error> {
        if let Some(device) = self.device.get() {
            return Ok(device);
        }
        let device = cudaipc::CudaDevice::open(self.device_ordinal)?;
        Ok(self.device.get_or_init(|| device))
    }
}

impl FrameShared {
    pub(super) fn add_streams(&self, handles: &[usize]) {
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        for &handle in handles {
            if !streams.contains(&handle) {
                streams.push(handle);
            }
        }
    }

    /// Makes `stream` wait on the GPU for the frame's writes.
    ///
    /// # Safety
    /// `stream` is a live `CUstream` of the frame's device.
    pub(super) unsafe fn wait_on_stream(&self, stream: usize) -> Result<(), cudaipc::Error> {
        let stream = stream as *mut std::ffi::c_void;
        match &self.source {
            // SAFETY: the caller's contract.
            Source::Channel(frame) => unsafe { frame.wait_on_stream(stream) },
            Source::Buffer {
                cuda: Some(ours), ..
            } => unsafe {
                // SAFETY: the caller's; the source's stream lives as long as
                // the buffer, which we hold.
                ours.device()?
                    .order_streams(stream, ours.stream as *mut std::ffi::c_void)
            },
            Source::Buffer { cuda: None, .. } | Source::Owned(_) => Ok(()),
        }
    }

    /// Orders the frame's release after the work queued so far on `stream`.
    ///
    /// # Safety
    /// As for `wait_on_stream`.
    unsafe fn release_after_stream(&self, stream: usize) -> Result<(), cudaipc::Error> {
        let stream = stream as *mut std::ffi::c_void;
        match &self.source {
            // SAFETY: the caller's contract.
            Source::Channel(frame) => unsafe { frame.release_after_stream(stream) },
            // The source's release of the slot (when the buffer goes) is
            // queued on its stream after this wait.
            Source::Buffer {
                cuda: Some(ours), ..
            } => unsafe {
                // SAFETY: as above.
                ours.device()?
                    .order_streams(ours.stream as *mut std::ffi::c_void, stream)
            },
            Source::Buffer { cuda: None, .. } | Source::Owned(_) => Ok(()),
        }
    }

    /// The CUDA device of a frame in device memory.
    fn cuda_device(&self) -> Result<Option<cudaipc::CudaDevice>, cudaipc::Error> {
        match &self.source {
            Source::Channel(frame) => frame.device_ordinal(),
            Source::Buffer { cuda, .. } => cuda.as_ref().map(|ours| ours.device_ordinal),
            Source::Owned(owned) => owned.device_ordinal(),
        }
        .map(cudaipc::CudaDevice::open)
        .transpose()
    }

    /// A copy of the frame (the `layout.frame_size()` bytes at `address`)
    /// that holds no slot. In device memory it is made on `stream` (a
    /// consumer's, live now), which first waits for the frame's writes and
    /// which the release waits for; without one it is waited for on the
    /// host.
    pub(super) fn copy(
        &self,
        layout: &VideoLayout,
        address: u64,
        stream: Option<usize>,
    ) -> Result<cudaipc::OwnedFrame, cudaipc::Error> {
        if let Source::Channel(frame) = &self.source {
            return match stream {
                None => frame.to_owned_copy(),
                // SAFETY: the consumer's stream, live while it exports.
                Some(stream) => unsafe { frame.to_owned_copy_on_stream(stream as *mut c_void) },
            };
        }
        let Some(device) = self.cuda_device()? else {
            // SAFETY: a frame of `layout` lies at `address` (checked against
            // the buffer's size when the frame was made), in memory that
            // `self` keeps mapped: the read-mapped buffer, or the copy.
            let bytes =
                unsafe { std::slice::from_raw_parts(address as *const u8, layout.frame_size()) };
            return cudaipc::OwnedFrame::from_host(layout.clone(), bytes);
        };
        let on = stream.unwrap_or(streams::LEGACY_DEFAULT);
        // SAFETY: `on` is the consumer's stream, live now, or the legacy
        // default stream; the frame lies at `address` on `device` and stays
        // held until the copy has run: `on` waits for its writes, and its
        // release for `on`.
        let owned = unsafe {
            self.wait_on_stream(on)?;
            let owned = cudaipc::OwnedFrame::copy_of_device(
                &device,
                layout.clone(),
                address,
                on as *mut c_void,
            )?;
            self.release_after_stream(on)?;
            owned
        };
        if stream.is_none() {
            device.synchronize()?;
        }
        Ok(owned)
    }
}

impl FrameShared {
    /// Waits on the host for the work queued on the frame's device, if it
    /// is in device memory.
    fn synchronize_device(&self) -> Result<(), cudaipc::Error> {
        match &self.source {
            Source::Channel(frame) => match frame.device_ordinal() {
                Some(ordinal) => cudaipc::synchronize_device(ordinal),
                None => Ok(()),
            },
            Source::Buffer {
                cuda: Some(ours), ..
            } => ours.device()?.synchronize(),
            // Its memory's drop waits for the device itself.
            Source::Buffer { cuda: None, .. } | Source::Owned(_) => Ok(()),
        }
    }

    /// Orders the release after the work queued so far on the streams the
    /// frame was exported to (and given to `release`), and forgets them:
    /// called at `release()`, while the caller's streams are alive.
    pub(super) fn order_release(&self) -> Result<(), cudaipc::Error> {
        let streams = std::mem::take(&mut *self.streams.lock().unwrap_or_else(|e| e.into_inner()));
        for stream in streams {
            // SAFETY: a stream a consumer handed to __dlpack__ or release(),
            // in use by its caller at release() (docs/python.md).
            unsafe { self.release_after_stream(stream) }?;
        }
        Ok(())
    }
}

impl Drop for FrameShared {
    fn drop(&mut self) {
        // Streams still listed were never ordered by release(): they may be
        // gone by now (Python frees a stream object and an array in any
        // order), so none is touched; the release waits for the whole
        // context's work instead, on the host. A failure leaves the release
        // ordered after our own stream only: nothing better is left to do in
        // a drop.
        let unordered = !self
            .streams
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty();
        if unordered {
            let _ = self.synchronize_device();
        }
        // The buffer goes now, not at pyo3's next call: a DLPack deleter
        // runs outside pyo3's knowledge of the GIL, which would defer it.
        if let Source::Buffer { holder, .. } = &mut self.source
            && let Some(holder) = holder.take()
        {
            // SAFETY: asks only whether an interpreter is running.
            match unsafe { pyo3::ffi::Py_IsInitialized() } != 0 {
                true => Python::with_gil(|_| drop(holder)),
                // The process is ending: nothing to give back to.
                false => std::mem::forget(holder),
            }
        }
    }
}
