// Shared mappings that survive truncation by another process.
//
// Any process that can open a shared file can shrink it; touching a mapped
// page past the new end then raises SIGBUS, which would kill the process.
// As libwayland does for client buffers (wl_shm_buffer_begin_access), one
// process-wide SIGBUS handler looks the fault address up among the mappings
// registered here; for one of ours it maps anonymous zero pages over the
// whole mapping (MAP_FIXED), marks it broken and returns, so the access
// completes on the zero pages. The channel code checks `is_broken` at its
// natural points and reports the truncation. Faults elsewhere go to the
// handler that was installed before ours (Rust's stack-overflow guard, or
// the default action).

use std::fs::File;
use std::io;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering};

use crate::platform::mapped_file::MappedFile;

/// Mappings that can be registered at once; a channel end holds two.
const MAX_MAPPINGS: usize = 1024;

const FREE: u8 = 0;
const CLAIMED: u8 = 1;
const LIVE: u8 = 2;
/// The signal handler is mapping zero pages over it: its owner waits before
/// it unmaps, so that the handler never maps over a range that another
/// mapping (or the heap) took meanwhile.
const FAULTING: u8 = 3;

/// One registered mapping; read by the signal handler, so atomics only.
struct Entry {
    state: AtomicU8,
    start: AtomicUsize,
    len: AtomicUsize,
    writable: AtomicBool,
    broken: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Entry = Entry {
    state: AtomicU8::new(FREE),
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    writable: AtomicBool::new(false),
    broken: AtomicBool::new(false),
};

static REGISTRY: [Entry; MAX_MAPPINGS] = [EMPTY; MAX_MAPPINGS];
static INSTALL: Once = Once::new();
/// The SIGBUS action in place before ours (leaked once, never freed).
static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());

/// A shared mapping of a file, read-only or read-write, whose truncation is
/// turned into `is_broken()` instead of SIGBUS. Its bytes are those of the
/// [`MappedFile`] it derefs to.
pub struct SharedMapping {
    file: MappedFile,
    entry: usize,
}

impl std::fmt::Debug for SharedMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMapping")
            .field("len", &self.len())
            .field("writable", &self.is_writable())
            .field("broken", &self.is_broken())
            .finish()
    }
}

impl SharedMapping {
    /// Maps the first `len` bytes of `file` shared (the whole file when
    /// `len` is `None`).
    pub fn map(file: &File, len: Option<usize>, writable: bool) -> io::Result<Self> {
        install_handler();
        let file = MappedFile::map(file, len, writable)?;
        let entry = register(file.as_ptr() as usize, file.len(), writable)?;
        Ok(Self { file, entry })
    }

    /// Whether another process truncated the file under this mapping (the
    /// mapping now holds private zero pages).
    pub fn is_broken(&self) -> bool {
        REGISTRY[self.entry].broken.load(Ordering::Acquire)
    }
}

impl std::ops::Deref for SharedMapping {
    type Target = MappedFile;

    fn deref(&self) -> &MappedFile {
        &self.file
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // Unregistered before memmap2 unmaps it, and never while the handler
        // maps over it, so the handler never maps over an address range that
        // is no longer ours.
        unregister(&REGISTRY[self.entry]);
    }
}

/// Frees `entry`, first waiting for a fault handler that is mapping over it.
fn unregister(entry: &Entry) {
    while entry
        .state
        .compare_exchange(LIVE, FREE, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // FAULTING: a handler in another thread, a few system calls long.
        std::thread::yield_now();
    }
}

fn register(start: usize, len: usize, writable: bool) -> io::Result<usize> {
    for (index, entry) in REGISTRY.iter().enumerate() {
        if entry
            .state
            .compare_exchange(FREE, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            entry.start.store(start, Ordering::Relaxed);
            entry.len.store(len, Ordering::Relaxed);
            entry.writable.store(writable, Ordering::Relaxed);
            entry.broken.store(false, Ordering::Relaxed);
            entry.state.store(LIVE, Ordering::Release);
            return Ok(index);
        }
    }
    Err(io::Error::other(format!(
        "more than {MAX_MAPPINGS} shared mappings in this process"
    )))
}

fn install_handler() {
    INSTALL.call_once(|| {
        // SAFETY: a zeroed sigaction is valid; `on_sigbus` has the
        // SA_SIGINFO signature; the previous action is written into a
        // leaked, never-freed struct before ours can run.
        unsafe {
            let previous: &'static mut libc::sigaction = Box::leak(Box::new(std::mem::zeroed()));
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            libc::sigemptyset(&mut action.sa_mask);
            PREVIOUS.store(previous, Ordering::Release);
            if libc::sigaction(libc::SIGBUS, &action, previous) != 0 {
                PREVIOUS.store(std::ptr::null_mut(), Ordering::Release);
            }
        }
    });
}

/// The SIGBUS handler: only atomics and two system calls (mmap, sigaction),
/// which are safe in a signal handler on Linux.
extern "C" fn on_sigbus(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let address = unsafe { (*info).si_addr() } as usize;
    for entry in &REGISTRY {
        if entry.state.load(Ordering::Acquire) != LIVE {
            continue;
        }
        let start = entry.start.load(Ordering::Relaxed);
        let len = entry.len.load(Ordering::Relaxed);
        if address < start || address >= start + len {
            continue;
        }
        // Held against its owner's unmap while mapping over it: if the
        // owner freed it first, the range may be someone else's by now.
        if entry
            .state
            .compare_exchange(LIVE, FAULTING, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        let protection = if entry.writable.load(Ordering::Relaxed) {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: [start, start+len) is a live mapping of ours (registered
        // until just before it is unmapped); replacing it with private zero
        // pages keeps every pointer into it valid.
        let mapped = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                protection,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        let zeroed = mapped != libc::MAP_FAILED;
        if zeroed {
            entry.broken.store(true, Ordering::Release);
        }
        entry.state.store(LIVE, Ordering::Release);
        if zeroed {
            return;
        }
        break;
    }
    chain(signal, info, context);
}

/// Hands a fault that is not ours to the handler that was there before.
fn chain(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let previous = PREVIOUS.load(Ordering::Acquire);
    // SAFETY: `previous` is null or the leaked sigaction saved at install.
    let handler = unsafe { previous.as_ref() }.map(|p| (p.sa_sigaction, p.sa_flags));
    match handler {
        Some((h, flags)) if h != libc::SIG_DFL && h != libc::SIG_IGN => {
            if flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed with SA_SIGINFO,
                // so it has this signature.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(h) };
                f(signal, info, context);
            } else {
                // SAFETY: a plain handler takes the signal number only.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
                f(signal);
            }
        }
        _ => {
            // Default action: restore it; the faulting access runs again
            // and the process ends by SIGBUS as it would have without us.
            // SAFETY: a zeroed sigaction with SIG_DFL is valid.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn truncation_breaks_the_mapping_instead_of_killing() {
        let path = std::env::temp_dir().join(format!("cudaipc-trunc-{}", crate::shm::random_u64()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .unwrap();
        file.set_len(3 * 4096).unwrap();
        let writer = SharedMapping::map(&file, None, true).unwrap();
        let reader = SharedMapping::map(&file, None, false).unwrap();
        let w = writer.as_mut_ptr().unwrap();
        // SAFETY: in bounds of a live writable mapping.
        unsafe { w.add(8192).write_volatile(7) };
        // SAFETY: in bounds of a live mapping.
        assert_eq!(unsafe { reader.as_ptr().add(8192).read_volatile() }, 7);
        assert!(reader.as_mut_ptr().is_none());
        file.set_len(4096).unwrap();
        // SAFETY: in bounds; past the file's end now, which the handler turns
        // into zero pages.
        unsafe { w.add(8192).write_volatile(9) };
        assert!(writer.is_broken());
        // SAFETY: as above.
        assert_eq!(unsafe { reader.as_ptr().add(8192).read_volatile() }, 0);
        assert!(reader.is_broken());
        drop(writer);
        drop(reader);
        std::fs::remove_file(&path).unwrap();
    }
}
