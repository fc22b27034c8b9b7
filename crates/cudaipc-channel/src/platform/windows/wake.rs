// Cross-process waits on Windows. A futex word lives in a shared mapping;
// its sleepers wait on a named semaphore, `Local\cudaipc-wake-<volume>-
// <file index>-<offset>`, which every process derives from the same file and
// offset. A waker releases one permit per announced sleeper (the channel
// counts them before it sleeps, see wait::wait_for); a permit left over by a
// sleeper that timed out only wakes a later one early, which re-checks. A
// sleeper checks the word before it waits, and a permit stays until taken,
// so no wake-up is lost.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use windows_sys::Win32::Foundation::{CloseHandle, HANDLE};
use windows_sys::Win32::System::Threading::{
    CreateSemaphoreW, ReleaseSemaphore, WaitForSingleObject,
};

use super::security::{SecurityDescriptor, user_sid};
use super::wide;

/// Most permits a semaphore holds; leftovers above it are dropped.
const MAX_PERMITS: i32 = 1 << 20;
/// Most permits one wake releases (more than a channel has sleepers).
const MAX_WAKE: u32 = 64;

/// A mapping of a channel file in this process.
struct Region {
    start: usize,
    len: usize,
    identity: (u64, u64),
    /// Semaphores opened for words of this region, by offset.
    semaphores: HashMap<usize, usize>,
}

static REGIONS: Mutex<Vec<Region>> = Mutex::new(Vec::new());

pub(super) fn register(start: usize, len: usize, identity: (u64, u64)) {
    REGIONS.lock().unwrap().push(Region {
        start,
        len,
        identity,
        semaphores: HashMap::new(),
    });
}

pub(super) fn unregister(start: usize) {
    let mut regions = REGIONS.lock().unwrap();
    if let Some(index) = regions.iter().position(|r| r.start == start) {
        for (_, handle) in regions.swap_remove(index).semaphores {
            // SAFETY: a semaphore handle this module opened and still owns.
            unsafe { CloseHandle(handle as HANDLE) };
        }
    }
}

/// The semaphore of the futex word at `word`, opened on first use; `None`
/// outside a registered mapping (a word in private memory: nobody else
/// can wake it anyway) or if it cannot be opened.
fn semaphore(word: &AtomicU32) -> Option<HANDLE> {
    let address = word as *const AtomicU32 as usize;
    let mut regions = REGIONS.lock().unwrap();
    let region = regions
        .iter_mut()
        .find(|r| address >= r.start && address < r.start + r.len)?;
    let offset = address - region.start;
    if let Some(&handle) = region.semaphores.get(&offset) {
        return Some(handle as HANDLE);
    }
    let (volume, index) = region.identity;
    let name = wide(format!(
        "Local\\cudaipc-wake-{volume:x}-{index:x}-{offset:x}"
    ));
    // The user may do anything; every authenticated user may wait and wake
    // (SYNCHRONIZE | SEMAPHORE_MODIFY_STATE), as consumers of other users
    // whom the file's rights let in must: a stranger could only cause
    // early wake-ups, which every sleeper re-checks.
    let descriptor =
        SecurityDescriptor::from_sddl(&format!("D:(A;;GA;;;{})(A;;0x100002;;;AU)", user_sid()))
            .ok()?;
    let attributes = descriptor.attributes();
    // SAFETY: valid attributes and a NUL-terminated name; opens the
    // existing semaphore of that name, or creates it.
    let handle = unsafe { CreateSemaphoreW(&attributes, 0, MAX_PERMITS, name.as_ptr()) };
    if handle.is_null() {
        return None;
    }
    region.semaphores.insert(offset, handle as usize);
    Some(handle)
}

/// Sleeps while `word` holds `expected`, at most `timeout`. Early returns
/// are allowed; callers re-check.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    if word.load(Ordering::SeqCst) != expected {
        return;
    }
    let millis = timeout.as_micros().div_ceil(1000).min(u32::MAX as u128 - 1) as u32;
    match semaphore(word) {
        // SAFETY: a semaphore handle owned by the region registry, which
        // closes it only when the mapping holding `word` (borrowed here) goes.
        Some(handle) => unsafe {
            WaitForSingleObject(handle, millis.max(1));
        },
        None => std::thread::sleep(Duration::from_millis(1).min(timeout)),
    }
}

/// Wakes up to `sleepers` processes sleeping on `word`.
pub fn futex_wake(word: &AtomicU32, sleepers: u32) {
    if let Some(handle) = semaphore(word) {
        // SAFETY: as in futex_wait. Fails only when the permits would pass
        // MAX_PERMITS: there are plenty then.
        unsafe {
            ReleaseSemaphore(
                handle,
                sleepers.clamp(1, MAX_WAKE) as i32,
                std::ptr::null_mut(),
            )
        };
    }
}
