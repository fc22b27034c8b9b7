// SPDX-License-Identifier: MPL-2.0

//! A loaned slot: `cudaipc_loan_*`.

use std::ffi::{c_char, c_void};
use std::sync::{Mutex, MutexGuard};

use api::FrameLoan;

use crate::handles::Registry;
use crate::status::{
    CUDAIPC_ERROR_INVALID_HANDLE, CUDAIPC_OK, Failure, Result, cudaipc_status, guard,
};
use crate::types::{app_bytes, app_json, check_out, cudaipc_layout, cudaipc_loan_info, pts};

/// A slot lent by `cudaipc_publisher_loan`, to write one frame into in
/// place. Opaque; ends with `cudaipc_loan_publish` or
/// `cudaipc_loan_discard`.
pub struct cudaipc_loan {
    _opaque: (),
}

/// A loan; `None` once published or discarded by a call that raced with
/// another on the same handle.
pub(crate) struct Loan(Mutex<Option<FrameLoan>>);

impl Loan {
    pub(crate) fn new(loan: FrameLoan) -> Self {
        Self(Mutex::new(Some(loan)))
    }

    fn lock(&self) -> MutexGuard<'_, Option<FrameLoan>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) static LOANS: Registry<Loan, cudaipc_loan> = Registry::new("loan", 2);

/// Runs `f` on the loan of `handle`.
fn with_loan<R>(
    handle: *mut cudaipc_loan,
    f: impl FnOnce(&mut FrameLoan) -> Result<R>,
) -> Result<R> {
    let loan = LOANS.get(handle)?;
    let mut guard = loan.lock();
    match guard.as_mut() {
        Some(loan) => f(loan),
        None => Err(Failure::new(
            CUDAIPC_ERROR_INVALID_HANDLE,
            "the loan was published or discarded",
        )),
    }
}

/// Where to write the loaned slot's frame and how; see
/// `cudaipc_loan_info`. Set `info->struct_size` first.
///
/// # Safety
/// `info` is NULL or a writable `cudaipc_loan_info` whose `struct_size` is
/// readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_loan_get_info(
    loan: *mut cudaipc_loan,
    info: *mut cudaipc_loan_info,
) -> cudaipc_status {
    guard("cudaipc_loan_get_info", || {
        // SAFETY: the caller's contract.
        unsafe { check_out(info, "info") }?;
        let value = with_loan(loan, |loan| {
            let layout = cudaipc_layout::from_rust(loan.layout());
            let host_ptr = loan
                .host_bytes_mut()
                .map_or(std::ptr::null_mut(), |bytes| bytes.as_mut_ptr());
            Ok(cudaipc_loan_info {
                struct_size: size_of::<cudaipc_loan_info>() as u32,
                is_cuda: u32::from(loan.device_ptr().is_some()),
                layout,
                host_ptr,
                device_ptr: loan.device_ptr().unwrap_or(0),
                cuda_stream: loan.cuda_stream().unwrap_or(std::ptr::null_mut()),
                device_ordinal: loan.device_ordinal().unwrap_or(-1),
                reserved: 0,
            })
        })?;
        // SAFETY: checked above (not NULL, its size).
        unsafe { info.write_unaligned(value) };
        Ok(CUDAIPC_OK)
    })
}

/// Makes `stream` wait, on the GPU, until the slot may be written: after
/// the consumers' reads of its previous frame. Call it before queueing
/// writes of the slot on a stream of your own. Nothing to do on the host
/// transport. No host synchronisation.
///
/// # Safety
/// `stream` is NULL (the legacy default stream) or a live `CUstream` of a
/// context of the slot's device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_loan_stream_wait(
    loan: *mut cudaipc_loan,
    stream: *mut c_void,
) -> cudaipc_status {
    guard("cudaipc_loan_stream_wait", || {
        with_loan(loan, |loan| {
            // SAFETY: the caller's contract.
            unsafe { loan.make_stream_wait(stream) }?;
            Ok(CUDAIPC_OK)
        })
    })
}

/// Orders the publication after the work queued on `stream` so far (the
/// frame's writes), on the GPU: the consumers read the slot only once it
/// has run. Call it before `cudaipc_loan_publish`. Nothing to do on the
/// host transport. No host synchronisation.
///
/// # Safety
/// As for `cudaipc_loan_stream_wait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_loan_publish_after_stream(
    loan: *mut cudaipc_loan,
    stream: *mut c_void,
) -> cudaipc_status {
    guard("cudaipc_loan_publish_after_stream", || {
        with_loan(loan, |loan| {
            // SAFETY: the caller's contract.
            unsafe { loan.wait_for_stream(stream) }?;
            Ok(CUDAIPC_OK)
        })
    })
}

/// Sets `len` bytes at `data` as the data that travels with the loan's
/// frame (copied; replacing data set before): `CUDAIPC_FRAME_DATA_BYTES`
/// to `cudaipc_frame_get_data`, a `CudaIpcFrameData` meta's `bytes` after
/// `rscudaipcsrc`, `bytes` to Python's `frame.data`. `data` may be NULL
/// where `len` is 0. More than the channel's frames carry
/// (`cudaipc_publisher_options.frame_data_bound` less 16 bytes) is
/// `CUDAIPC_ERROR_INVALID_ARGUMENT`, its message naming the bound; the
/// loan stays as it was.
///
/// # Safety
/// `data` is NULL or readable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_loan_set_data(
    loan: *mut cudaipc_loan,
    data: *const c_void,
    len: usize,
) -> cudaipc_status {
    guard("cudaipc_loan_set_data", || {
        with_loan(loan, |loan| {
            // SAFETY: the caller's contract.
            let data = unsafe { app_bytes(data, len, "data") }?;
            loan.set_data(&data)?;
            Ok(CUDAIPC_OK)
        })
    })
}

/// Sets the NUL-terminated UTF-8 JSON text `json` as the data that travels
/// with the loan's frame (copied, not parsed; replacing data set before):
/// `CUDAIPC_FRAME_DATA_JSON` to `cudaipc_frame_get_data`, a
/// `CudaIpcFrameData` meta's `json` after `rscudaipcsrc`, the dict
/// `json.loads` makes of it to Python's `frame.data`. Text that is not
/// UTF-8, or longer than the channel's frames carry
/// (`cudaipc_publisher_options.frame_data_bound` less 16 bytes), is
/// `CUDAIPC_ERROR_INVALID_ARGUMENT`; the loan stays as it was.
///
/// # Safety
/// `json` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaipc_loan_set_json(
    loan: *mut cudaipc_loan,
    json: *const c_char,
) -> cudaipc_status {
    guard("cudaipc_loan_set_json", || {
        with_loan(loan, |loan| {
            // SAFETY: the caller's contract.
            let data = unsafe { app_json(json) }?;
            loan.set_data(&data)?;
            Ok(CUDAIPC_OK)
        })
    })
}

/// Publishes the frame written into the slot, with `pts_ns` (nanoseconds;
/// negative: no PTS). The loan handle ends here, whatever the result.
#[unsafe(no_mangle)]
pub extern "C" fn cudaipc_loan_publish(loan: *mut cudaipc_loan, pts_ns: i64) -> cudaipc_status {
    guard("cudaipc_loan_publish", || {
        let loan = LOANS.remove(loan)?.lock().take().ok_or_else(|| {
            Failure::new(
                CUDAIPC_ERROR_INVALID_HANDLE,
                "the loan was published or discarded",
            )
        })?;
        loan.publish(pts(pts_ns))?;
        Ok(CUDAIPC_OK)
    })
}

/// Gives the slot back unpublished; the loan handle ends here.
#[unsafe(no_mangle)]
pub extern "C" fn cudaipc_loan_discard(loan: *mut cudaipc_loan) -> cudaipc_status {
    guard("cudaipc_loan_discard", || {
        drop(LOANS.remove(loan)?.lock().take());
        Ok(CUDAIPC_OK)
    })
}
