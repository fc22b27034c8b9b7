// Legacy IPC handles opened once per process. The driver maps a handle once
// per context: a second cuIpcOpenMemHandle of it in the same process fails
// with CUDA_ERROR_INVALID_CONTEXT. Subscribers of one channel in one process
// (several readers of a camera, several rscudaipcsrc of a pipeline) share
// the mapping through this table; the last one to let go closes it.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use super::{Device, DeviceRegion, IPC_HANDLE_BYTES, ImportedMemory, Result};

type Key = (i32, [u8; IPC_HANDLE_BYTES]);

/// The handles open now, by device ordinal and handle bytes.
static OPEN: LazyLock<Mutex<HashMap<Key, Weak<SharedImport>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// How often an open waits for a closing mapping of the same handle (whose
/// last holder is in its drop) before it opens the handle itself.
const CLOSING_RETRIES: u32 = 1000;

/// One open mapping of a handle, shared in the process.
struct SharedImport {
    key: Key,
    memory: Option<ImportedMemory>,
}

impl Drop for SharedImport {
    fn drop(&mut self) {
        // Closed under the table's lock: an open of the same handle never
        // runs between our close and the entry's removal.
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        if open.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
            open.remove(&self.key);
        }
        drop(self.memory.take());
    }
}

/// The first `len` bytes of the memory behind `handle` in `device`'s
/// context, mapped once in this process whoever else maps it.
pub fn open_region(
    device: &Arc<Device>,
    handle: &[u8; IPC_HANDLE_BYTES],
    len: usize,
) -> Result<DeviceRegion> {
    let shared = open_shared(device, handle)?;
    let memory = shared.memory.as_ref().expect("set until dropped");
    let (ptr, len) = (memory.ptr(), len.min(memory.size()));
    // SAFETY: the region keeps `shared`, which keeps the mapping of at
    // least `len` bytes open while it lives.
    Ok(unsafe { DeviceRegion::from_raw_parts(device, ptr, len, shared) })
}

fn open_shared(device: &Arc<Device>, handle: &[u8; IPC_HANDLE_BYTES]) -> Result<Arc<SharedImport>> {
    let key = (device.ordinal(), *handle);
    for _ in 0..CLOSING_RETRIES {
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        match open.get(&key).map(Weak::upgrade) {
            Some(Some(shared)) => return Ok(shared),
            // Its last holder is dropping it: closed in a moment.
            Some(None) => {
                drop(open);
                std::thread::yield_now();
            }
            None => return open_new(&mut open, key, device, handle),
        }
    }
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    open.remove(&key);
    open_new(&mut open, key, device, handle)
}

fn open_new(
    open: &mut HashMap<Key, Weak<SharedImport>>,
    key: Key,
    device: &Arc<Device>,
    handle: &[u8; IPC_HANDLE_BYTES],
) -> Result<Arc<SharedImport>> {
    let shared = Arc::new(SharedImport {
        key,
        memory: Some(ImportedMemory::open(device, handle)?),
    });
    open.insert(key, Arc::downgrade(&shared));
    Ok(shared)
}
