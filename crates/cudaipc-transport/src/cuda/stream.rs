// A stream of a device, borrowed from it: ordering work, copies, waits.

use std::ffi::c_void;

use cudarc::driver::sys;

use super::{Device, Event, Result, check, query_done};

/// A borrowed stream handle with its device.
#[derive(Clone, Copy)]
pub struct Stream<'a> {
    pub(super) device: &'a Device,
    pub(super) raw: sys::CUstream,
}

impl Stream<'_> {
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    pub fn synchronize(&self) -> Result<()> {
        self.device.bind()?;
        // SAFETY: valid stream of the bound context.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.raw)
        })
    }

    /// Whether all work queued on the stream so far has completed.
    pub fn is_idle(&self) -> Result<bool> {
        self.device.bind()?;
        // SAFETY: valid stream of the bound context.
        query_done("cuStreamQuery", unsafe { sys::cuStreamQuery(self.raw) })
    }

    /// Makes later work on this stream wait for the last record of `event`.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.device.bind()?;
        // SAFETY: valid stream and event handles.
        check("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(self.raw, event.raw, 0)
        })
    }

    /// Writes `value` to the 8 bytes at device address `address` once the
    /// work queued before is done, and makes that work's memory writes
    /// visible before it.
    ///
    /// # Safety
    /// `address` is 8 aligned, writable device (or registered host) memory
    /// that stays mapped until the write has run.
    pub unsafe fn write_value(&self, address: u64, value: u64) -> Result<()> {
        self.device.bind()?;
        // SAFETY: the caller's contract; a valid stream.
        check("cuStreamWriteValue64", unsafe {
            sys::cuStreamWriteValue64_v2(
                self.raw,
                address,
                value,
                sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
            )
        })
    }

    /// Makes later work on this stream wait until the 8 bytes at `address`
    /// hold at least `value`.
    ///
    /// # Safety
    /// As for [`write_value`](Self::write_value), readable instead of
    /// writable; and someone will write a large enough value there (the
    /// stream waits for it forever).
    pub unsafe fn wait_value(&self, address: u64, value: u64) -> Result<()> {
        self.device.bind()?;
        // SAFETY: the caller's contract; a valid stream.
        check("cuStreamWaitValue64", unsafe {
            sys::cuStreamWaitValue64_v2(
                self.raw,
                address,
                value,
                sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
            )
        })
    }

    pub fn record(&self, event: &Event) -> Result<()> {
        self.device.bind()?;
        // SAFETY: valid stream and event handles.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(event.raw, self.raw)
        })
    }

    /// Device-to-device copy of `bytes`, ordered on this stream.
    ///
    /// # Safety
    /// `dst` and `src` must be device addresses valid for `bytes` bytes
    /// until the copy has run on the stream. [`DeviceRegion::copy_from`] is
    /// the safe form.
    pub unsafe fn copy_device_to_device(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        self.device.bind()?;
        // SAFETY: per this function's contract.
        check("cuMemcpyDtoDAsync", unsafe {
            sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, self.raw)
        })
    }

    /// Copies host memory to the device and waits until `src` may be reused.
    ///
    /// # Safety
    /// `dst` must be a device address valid for writes of `src.len()`
    /// bytes. [`DeviceRegion::upload`] is the safe form.
    pub unsafe fn upload(&self, dst: u64, src: &[u8]) -> Result<()> {
        self.device.bind()?;
        // SAFETY: `src` is valid for its length; `dst` for as many bytes
        // (this function's contract). The stream is synchronised before
        // `src` can be dropped.
        unsafe {
            check(
                "cuMemcpyHtoDAsync",
                sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr() as *const c_void, src.len(), self.raw),
            )?;
        }
        self.synchronize()
    }

    /// Copies device memory into `dst` once the stream's earlier work is done.
    ///
    /// # Safety
    /// `src` must be a device address valid for reads of `dst.len()` bytes.
    /// [`DeviceRegion::download`] is the safe form.
    pub unsafe fn download(&self, dst: &mut [u8], src: u64) -> Result<()> {
        self.device.bind()?;
        // SAFETY: `dst` is valid for its length; `src` for as many bytes
        // (this function's contract). We synchronise before returning, so
        // `dst` is written when the borrow ends.
        unsafe {
            check(
                "cuMemcpyDtoHAsync",
                sys::cuMemcpyDtoHAsync_v2(
                    dst.as_mut_ptr() as *mut c_void,
                    src,
                    dst.len(),
                    self.raw,
                ),
            )?;
        }
        self.synchronize()
    }

    /// 2D copy between device pitches (rows of `width` bytes).
    ///
    /// # Safety
    /// `dst` and `src` must be device addresses valid for `rows` rows of
    /// `width` bytes at their pitches (`pitch * (rows - 1) + width` bytes)
    /// until the copy has run on the stream.
    pub unsafe fn copy_2d_device(
        &self,
        dst: u64,
        dst_pitch: usize,
        src: u64,
        src_pitch: usize,
        width: usize,
        rows: usize,
    ) -> Result<()> {
        self.device.bind()?;
        let copy = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: src,
            srcArray: std::ptr::null_mut(),
            srcPitch: src_pitch,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst,
            dstArray: std::ptr::null_mut(),
            dstPitch: dst_pitch,
            WidthInBytes: width,
            Height: rows,
        };
        // SAFETY: per this function's contract.
        check("cuMemcpy2DAsync", unsafe {
            sys::cuMemcpy2DAsync_v2(&copy, self.raw)
        })
    }

    /// Fills `bytes` at `dst` with `value`, ordered on this stream.
    ///
    /// # Safety
    /// `dst` must be a device address valid for writes of `bytes` bytes
    /// until the fill has run. [`DeviceRegion::memset`] is the safe form.
    pub unsafe fn memset(&self, dst: u64, value: u8, bytes: usize) -> Result<()> {
        self.device.bind()?;
        // SAFETY: per this function's contract.
        check("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(dst, value, bytes, self.raw)
        })
    }
}
