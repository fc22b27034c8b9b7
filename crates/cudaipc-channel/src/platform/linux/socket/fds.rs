// SPDX-License-Identifier: MPL-2.0

//! Descriptors of the channel's memory: a file opened again with its own
//! open file description, and a received memfd checked (sealed, big
//! enough).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use crate::ChannelError;

/// Opens the file behind `file` again: a descriptor of its own (its own
/// open file description, so its locks are its own), read-write or
/// read-only.
pub fn reopen(file: &impl AsFd, write: bool) -> io::Result<File> {
    use std::os::fd::AsRawFd;
    let path = format!("/proc/self/fd/{}", file.as_fd().as_raw_fd());
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .open(path)
}

/// Checks a received memory descriptor: a regular file (memfd) of at least
/// `min_len` bytes that nobody can shrink or grow (sealed).
pub fn check_sealed(fd: &OwnedFd, min_len: u64) -> Result<(), ChannelError> {
    use rustix::fs::SealFlags;
    let stat = rustix::fs::fstat(fd)
        .map_err(|e| ChannelError::io("cannot inspect a received descriptor", e.into()))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(ChannelError::Corrupt(crate::Corruption::NotAMemoryFile));
    }
    let seals = rustix::fs::fcntl_get_seals(fd)
        .map_err(|_| ChannelError::Corrupt(crate::Corruption::NotSealed))?;
    if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
        return Err(ChannelError::Corrupt(
            crate::Corruption::NotSealedAgainstResizing,
        ));
    }
    if (stat.st_size as u64) < min_len {
        return Err(ChannelError::Corrupt(crate::Corruption::MemoryFileSize {
            found: stat.st_size as u64,
            needed: min_len,
        }));
    }
    Ok(())
}
