// SPDX-License-Identifier: MPL-2.0

//! DLPack 1.x structures (dlpack.h), the capsules that carry them, and the
//! reading of another library's capsule (for `Publisher.publish`).
//!
//! Capsule rules (the Python specification of DLPack): a capsule is named
//! `dltensor_versioned` (or `dltensor`, pre-1.0 consumers) until a consumer
//! takes the tensor and renames it `used_dltensor_versioned`
//! (`used_dltensor`); from then on the consumer calls the tensor's deleter.
//! A capsule destroyed under its first name was never taken: its destructor
//! calls the deleter.

use std::ffi::{CStr, c_void};

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;

pub const VERSIONED_NAME: &CStr = c"dltensor_versioned";
pub const LEGACY_NAME: &CStr = c"dltensor";
const USED_VERSIONED_NAME: &CStr = c"used_dltensor_versioned";
const USED_LEGACY_NAME: &CStr = c"used_dltensor";

/// `DLDeviceType` values used here.
pub const DEVICE_CPU: i32 = 1;
pub const DEVICE_CUDA: i32 = 2;
pub const DEVICE_CUDA_HOST: i32 = 3;
/// `DLDataTypeCode::kDLUInt`.
const TYPE_UINT: u8 = 1;
/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
const FLAG_READ_ONLY: u64 = 1;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the producer copied the data for this
/// export (`copy=True`).
const FLAG_IS_COPIED: u64 = 1 << 1;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

impl DLDataType {
    pub const U8: Self = Self {
        code: TYPE_UINT,
        bits: 8,
        lanes: 1,
    };
}

#[repr(C)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
pub struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

#[repr(C)]
pub struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

/// Up to three sizes of an array (its shape or its strides), held inline:
/// a view is made for every export, without an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    len: usize,
    values: [i64; 3],
}

impl Dims {
    pub fn new<const N: usize>(values: [i64; N]) -> Self {
        const { assert!(N <= 3) };
        let mut inline = [0; 3];
        inline[..N].copy_from_slice(&values);
        Self {
            len: N,
            values: inline,
        }
    }
}

impl std::ops::Deref for Dims {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        &self.values[..self.len]
    }
}

/// A view to export: where it starts, its shape and its strides (in
/// elements, which are bytes: every view is uint8).
#[derive(Clone, Copy, Debug)]
pub struct View {
    pub data: u64,
    pub device: DLDevice,
    pub shape: Dims,
    pub strides: Dims,
}

/// A managed tensor and what it points into, in one allocation: `managed`
/// first, so that the deleter finds the whole from the pointer it gets.
#[repr(C)]
struct Export<M, K> {
    managed: M,
    shape: [i64; 3],
    strides: [i64; 3],
    /// Keeps the frame's slot while the tensor lives.
    _keep: K,
}

/// The tensor inside a managed tensor of either DLPack version.
trait ManagedTensor {
    fn tensor_mut(&mut self) -> &mut DLTensor;
}

impl ManagedTensor for DLManagedTensor {
    fn tensor_mut(&mut self) -> &mut DLTensor {
        &mut self.dl_tensor
    }
}

impl ManagedTensor for DLManagedTensorVersioned {
    fn tensor_mut(&mut self) -> &mut DLTensor {
        &mut self.dl_tensor
    }
}

/// Puts `managed` into an [`Export`] with `shape`, `strides` and `keep`,
/// its tensor pointing at that export's arrays; the caller owns the
/// allocation.
fn boxed_export<M: ManagedTensor, K>(
    managed: M,
    shape: [i64; 3],
    strides: [i64; 3],
    keep: K,
) -> *mut Export<M, K> {
    let export = Box::into_raw(Box::new(Export {
        managed,
        shape,
        strides,
        _keep: keep,
    }));
    // SAFETY: just allocated; the arrays live as long as the box.
    unsafe {
        let tensor = (*export).managed.tensor_mut();
        tensor.shape = (*export).shape.as_mut_ptr();
        tensor.strides = (*export).strides.as_mut_ptr();
    }
    export
}

unsafe extern "C" fn delete_versioned<K>(managed: *mut DLManagedTensorVersioned) {
    // SAFETY: `managed` is the first field of a boxed Export made by
    // `capsule`, handed to one consumer, whose deleter runs once.
    drop(unsafe { Box::from_raw(managed as *mut Export<DLManagedTensorVersioned, K>) });
}

unsafe extern "C" fn delete_legacy<K>(managed: *mut DLManagedTensor) {
    // SAFETY: as above.
    drop(unsafe { Box::from_raw(managed as *mut Export<DLManagedTensor, K>) });
}

unsafe extern "C" fn destroy_versioned_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: the capsule is alive during its destructor; IsValid sets no
    // error, and GetPointer with the name IsValid accepted sets none.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, VERSIONED_NAME.as_ptr()) == 1 {
            let managed = ffi::PyCapsule_GetPointer(capsule, VERSIONED_NAME.as_ptr())
                as *mut DLManagedTensorVersioned;
            if let Some(deleter) = (*managed).deleter {
                deleter(managed);
            }
        }
    }
}

unsafe extern "C" fn destroy_legacy_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: as above.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, LEGACY_NAME.as_ptr()) == 1 {
            let managed =
                ffi::PyCapsule_GetPointer(capsule, LEGACY_NAME.as_ptr()) as *mut DLManagedTensor;
            if let Some(deleter) = (*managed).deleter {
                deleter(managed);
            }
        }
    }
}

fn fill_tensor(view: &View, shape: *mut i64, strides: *mut i64) -> DLTensor {
    DLTensor {
        data: view.data as *mut c_void,
        device: view.device,
        ndim: view.shape.len() as i32,
        dtype: DLDataType::U8,
        shape,
        strides,
        byte_offset: 0,
    }
}

/// A capsule holding `view` as a uint8 tensor, keeping `keep` alive until
/// the tensor's deleter runs: a versioned one (DLPack 1.0) when
/// `versioned`, else a legacy one. Read-only, unless `copied`: then it is
/// a copy made for the consumer (`copy=True`), the consumer's to write.
pub fn capsule<K: Send + 'static>(
    py: Python<'_>,
    view: &View,
    keep: K,
    versioned: bool,
    copied: bool,
) -> PyResult<Py<PyAny>> {
    if view.strides.len() != view.shape.len() {
        return Err(PyBufferError::new_err(
            "a view has as many strides as dimensions",
        ));
    }
    let (shape, strides) = (view.shape.values, view.strides.values);
    let null_tensor = || fill_tensor(view, std::ptr::null_mut(), std::ptr::null_mut());
    let (pointer, name, destructor): (*mut c_void, &CStr, Option<ffi::PyCapsule_Destructor>) =
        if versioned {
            let export = boxed_export(
                DLManagedTensorVersioned {
                    version: DLPackVersion { major: 1, minor: 0 },
                    manager_ctx: std::ptr::null_mut(),
                    deleter: Some(delete_versioned::<K>),
                    flags: match copied {
                        true => FLAG_IS_COPIED,
                        false => FLAG_READ_ONLY,
                    },
                    dl_tensor: null_tensor(),
                },
                shape,
                strides,
                keep,
            );
            (
                export.cast(),
                VERSIONED_NAME,
                Some(destroy_versioned_capsule),
            )
        } else {
            let export = boxed_export(
                DLManagedTensor {
                    dl_tensor: null_tensor(),
                    manager_ctx: std::ptr::null_mut(),
                    deleter: Some(delete_legacy::<K>),
                },
                shape,
                strides,
                keep,
            );
            (export.cast(), LEGACY_NAME, Some(destroy_legacy_capsule))
        };
    // SAFETY: a valid pointer and a static name; on failure nothing owns
    // the export but us.
    let raw = unsafe { ffi::PyCapsule_New(pointer, name.as_ptr(), destructor) };
    if raw.is_null() {
        // SAFETY: the capsule was not made, so the export is still ours.
        unsafe {
            match versioned {
                true => delete_versioned::<K>(pointer.cast()),
                false => delete_legacy::<K>(pointer.cast()),
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, raw) }.unbind())
}

/// A tensor taken from another library's capsule: ours to read until
/// dropped, which calls its deleter (with the GIL held, as some deleters
/// need it).
pub struct Consumed {
    versioned: *mut DLManagedTensorVersioned,
    legacy: *mut DLManagedTensor,
}

// SAFETY: the pointers are only read, and the deleter is called once, from
// the thread that drops this (holding the GIL: see `Drop`).
unsafe impl Send for Consumed {}
// SAFETY: shared, it is only read.
unsafe impl Sync for Consumed {}

impl Consumed {
    /// Takes the tensor of `capsule` (renaming it `used_...`, so that its
    /// destructor leaves it to us).
    pub fn take(capsule: &Bound<'_, PyAny>) -> PyResult<Self> {
        let raw = capsule.as_ptr();
        // SAFETY: IsValid accepts any object and sets no error.
        let (versioned, legacy) = unsafe {
            (
                ffi::PyCapsule_IsValid(raw, VERSIONED_NAME.as_ptr()) == 1,
                ffi::PyCapsule_IsValid(raw, LEGACY_NAME.as_ptr()) == 1,
            )
        };
        let (name, used) = match (versioned, legacy) {
            (true, _) => (VERSIONED_NAME, USED_VERSIONED_NAME),
            (_, true) => (LEGACY_NAME, USED_LEGACY_NAME),
            _ => {
                return Err(PyTypeError::new_err(
                    "__dlpack__ returned no unused DLPack capsule",
                ));
            }
        };
        // SAFETY: a valid capsule of that name; the static name outlives it.
        let pointer = unsafe { ffi::PyCapsule_GetPointer(raw, name.as_ptr()) };
        if pointer.is_null() {
            return Err(PyErr::fetch(capsule.py()));
        }
        // SAFETY: the same valid capsule; `used` is static, so the capsule's
        // new name outlives it.
        if unsafe { ffi::PyCapsule_SetName(raw, used.as_ptr()) } != 0 {
            return Err(PyErr::fetch(capsule.py()));
        }
        Ok(match versioned {
            true => Self {
                versioned: pointer.cast(),
                legacy: std::ptr::null_mut(),
            },
            false => Self {
                versioned: std::ptr::null_mut(),
                legacy: pointer.cast(),
            },
        })
    }

    pub fn tensor(&self) -> &DLTensor {
        // SAFETY: the producer keeps the tensor until its deleter runs.
        unsafe {
            match self.versioned.is_null() {
                false => &(*self.versioned).dl_tensor,
                true => &(*self.legacy).dl_tensor,
            }
        }
    }

    /// Its shape, and its strides in elements (C order where it gives none).
    pub fn shape_and_strides(&self) -> (Vec<i64>, Vec<i64>) {
        let tensor = self.tensor();
        let dims = usize::try_from(tensor.ndim).unwrap_or(0);
        if dims == 0 || tensor.shape.is_null() {
            return (Vec::new(), Vec::new());
        }
        // SAFETY: DLPack: `shape` (and `strides` when not null) hold ndim
        // values.
        let shape = unsafe { std::slice::from_raw_parts(tensor.shape, dims) }.to_vec();
        let strides = match tensor.strides.is_null() {
            // SAFETY: as above.
            false => unsafe { std::slice::from_raw_parts(tensor.strides, dims) }.to_vec(),
            true => {
                let mut strides = vec![1i64; dims];
                for i in (0..dims.saturating_sub(1)).rev() {
                    strides[i] = strides[i + 1].saturating_mul(shape[i + 1]);
                }
                strides
            }
        };
        (shape, strides)
    }

    /// The address of the first element.
    pub fn address(&self) -> u64 {
        let tensor = self.tensor();
        (tensor.data as u64).wrapping_add(tensor.byte_offset)
    }
}

impl Drop for Consumed {
    fn drop(&mut self) {
        // SAFETY: taken from a capsule we renamed: its deleter is ours to
        // call, once.
        unsafe {
            if let Some(versioned) = self.versioned.as_mut() {
                if let Some(deleter) = versioned.deleter {
                    deleter(versioned);
                }
            } else if let Some(legacy) = self.legacy.as_mut()
                && let Some(deleter) = legacy.deleter
            {
                deleter(legacy);
            }
        }
    }
}
