// SPDX-License-Identifier: MPL-2.0

//! Handles: what C holds is a number, never an address of ours. Each kind
//! has a registry from numbers to live objects; a freed, released or
//! published handle is no longer in it, so using it again is an error code,
//! not a read of freed memory. Numbers are never reused, and each kind's
//! carry its own tag in the top byte: a subscriber handle given where a
//! frame is expected is not found either.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::status::{CUDAIPC_ERROR_INVALID_HANDLE, Failure, Result};

/// The live objects of one kind, by handle number; `H` is the opaque C type
/// its handles point to (never dereferenced).
pub(crate) struct Registry<T, H> {
    kind: &'static str,
    tag: usize,
    next: AtomicUsize,
    live: Mutex<BTreeMap<usize, Arc<T>>>,
    handle: PhantomData<fn() -> H>,
}

/// Bits of a handle below its kind's tag.
const COUNTER_BITS: u32 = usize::BITS - 8;

impl<T, H> Registry<T, H> {
    pub(crate) const fn new(kind: &'static str, tag: u8) -> Self {
        Self {
            kind,
            tag: (tag as usize) << COUNTER_BITS,
            // 0 stays unused: a handle is never NULL.
            next: AtomicUsize::new(1),
            live: Mutex::new(BTreeMap::new()),
            handle: PhantomData,
        }
    }

    fn live(&self) -> MutexGuard<'_, BTreeMap<usize, Arc<T>>> {
        // A panic while the map was locked left it consistent (every
        // operation on it is one insert, lookup or removal).
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `object`; its handle.
    pub(crate) fn insert(&self, object: T) -> *mut H {
        let counter = self.next.fetch_add(1, Ordering::Relaxed) & ((1 << COUNTER_BITS) - 1);
        let id = self.tag | counter;
        self.live().insert(id, Arc::new(object));
        // A number in the shape of a pointer: C compares and passes it,
        // nothing dereferences it.
        std::ptr::without_provenance_mut(id)
    }

    /// The object of `handle`, kept alive while the caller uses it even if
    /// another thread frees the handle meanwhile.
    pub(crate) fn get(&self, handle: *const H) -> Result<Arc<T>> {
        self.check_null(handle)?;
        self.live()
            .get(&handle.addr())
            .cloned()
            .ok_or_else(|| self.invalid(handle))
    }

    /// Takes `handle` out of the registry: later uses are errors.
    pub(crate) fn remove(&self, handle: *const H) -> Result<Arc<T>> {
        self.check_null(handle)?;
        self.live()
            .remove(&handle.addr())
            .ok_or_else(|| self.invalid(handle))
    }

    fn check_null(&self, handle: *const H) -> Result<()> {
        if handle.is_null() {
            return Err(Failure::null(&format!("the {} handle", self.kind)));
        }
        Ok(())
    }

    fn invalid(&self, handle: *const H) -> Failure {
        Failure::new(
            CUDAIPC_ERROR_INVALID_HANDLE,
            format!(
                "{:#x} is not a live {} handle (freed, released, or not made by libcudaipc)",
                handle.addr(),
                self.kind
            ),
        )
    }
}
