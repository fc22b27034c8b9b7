// A shared mapping of a file, read-only or read-write: the part both
// platforms map the same way (memmap2). Each platform's `SharedMapping`
// wraps one with what it tracks beside it: on Linux the SIGBUS registry, on
// Windows the wake-up names of the words inside it.

use std::fs::File;
use std::io;

use memmap2::{MmapOptions, MmapRaw};

/// The bytes of a shared mapping. Written only through `as_mut_ptr` of a
/// writable one.
pub struct MappedFile {
    map: MmapRaw,
    writable: bool,
}

impl MappedFile {
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

    pub fn is_writable(&self) -> bool {
        self.writable
    }
}
