// Shared mappings of a channel's files on Windows. Windows refuses to
// truncate a file while a view of it is mapped, so a mapping never breaks
// (no SIGBUS analogue to catch). Each mapping is registered with the file's
// identity, so that a wait on a word inside it finds the named semaphore
// every process derives from the same file and offset (see `wake`).

use std::fs::File;
use std::io;

use crate::platform::mapped_file::MappedFile;

/// A shared mapping of a file, read-only or read-write. Its bytes are those
/// of the [`MappedFile`] it derefs to.
pub struct SharedMapping {
    file: MappedFile,
}

impl std::fmt::Debug for SharedMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMapping")
            .field("len", &self.len())
            .field("writable", &self.is_writable())
            .finish()
    }
}

impl SharedMapping {
    /// Maps the first `len` bytes of `file` shared (the whole file when
    /// `len` is `None`).
    pub fn map(file: &File, len: Option<usize>, writable: bool) -> io::Result<Self> {
        let mapped = MappedFile::map(file, len, writable)?;
        if let Ok(identity) = super::file_identity(file) {
            super::wake::register(mapped.as_ptr() as usize, mapped.len(), identity);
        }
        Ok(Self { file: mapped })
    }

    /// Never: Windows does not truncate a mapped file.
    pub fn is_broken(&self) -> bool {
        false
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
        super::wake::unregister(self.file.as_ptr() as usize);
    }
}
