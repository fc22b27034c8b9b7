// Shared mappings of a channel's files on Windows. Windows refuses to
// truncate a file while a view of it is mapped, so a mapping never breaks
// (no SIGBUS analogue to catch). Each mapping is registered with the file's
// identity, so that a wait on a word inside it finds the named semaphore
// every process derives from the same file and offset (see `wake`).

use std::fs::File;
use std::io;

use memmap2::{MmapOptions, MmapRaw};

/// A shared mapping of a file, read-only or read-write. Written only
/// through `as_mut_ptr` of a writable mapping.
pub struct SharedMapping {
    map: MmapRaw,
    writable: bool,
}

impl std::fmt::Debug for SharedMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMapping")
            .field("len", &self.map.len())
            .field("writable", &self.writable)
            .finish()
    }
}

impl SharedMapping {
    /// Maps the first `len` bytes of `file` shared (the whole file when
    /// `len` is `None`).
    pub fn map(file: &File, len: Option<usize>, writable: bool) -> io::Result<Self> {
        let mut options = MmapOptions::new();
        if let Some(len) = len {
            options.len(len);
        }
        let map = if writable {
            options.map_raw(file)?
        } else {
            options.map_raw_read_only(file)?
        };
        if let Ok(identity) = super::file_identity(file) {
            super::wake::register(map.as_ptr() as usize, map.len(), identity);
        }
        Ok(Self { map, writable })
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.map.as_ptr()
    }

    /// Pointer for writes; `None` for a read-only mapping.
    pub fn as_mut_ptr(&self) -> Option<*mut u8> {
        self.writable.then(|| self.map.as_mut_ptr())
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Never: Windows does not truncate a mapped file.
    pub fn is_broken(&self) -> bool {
        false
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        super::wake::unregister(self.map.as_ptr() as usize);
    }
}
