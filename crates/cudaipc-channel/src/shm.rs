// Shared files: naming, exclusive creation and mapping. The calls into the
// operating system (locks, owners, the identity of processes) are the
// platform layer's, re-exported here for the channel code.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::ChannelError;
use super::mapping::SharedMapping;
use super::platform::{self, reserve_space};
pub use super::platform::{
    byte_is_locked, effective_uid, free_bytes, link_exclusive, link_unnamed, monotonic_ns,
    open_regular, own_start_time, owner_uid, pid_namespace, process_runs, process_start_time,
    random_u64, remove_name, try_lock_byte, unlock_byte,
};

/// Longest accepted channel name.
pub const MAX_CHANNEL_NAME: usize = 64;
/// Start of the name of every file of the plugin in the shm folder: the
/// control file is `cudaipc-<channel>`, the rest `cudaipc-<channel>.` or
/// `cudaipc-<channel>@` and more.
pub const FILE_PREFIX: &str = "cudaipc-";

/// Folder of the shared files: `$CUDAIPC_SHM_DIR`, else the platform's
/// (/dev/shm on Linux; see docs/windows.md for Windows).
pub fn shm_dir() -> PathBuf {
    std::env::var_os("CUDAIPC_SHM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(platform::default_shm_dir)
}

/// Channel names become file names, so they are restricted to a safe set.
pub fn validate_channel_name(name: &str) -> Result<(), ChannelError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_CHANNEL_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ChannelError::InvalidName {
            name: name.to_owned(),
        })
    }
}

pub fn control_path(channel: &str) -> PathBuf {
    shm_dir().join(format!("{FILE_PREFIX}{channel}"))
}

/// Prefix of the data files of every producer session of `channel`.
pub fn channel_data_file_prefix(channel: &str) -> String {
    format!("{FILE_PREFIX}{channel}.")
}

/// Prefix of the data files of one producer session of `channel`.
pub fn data_file_prefix(channel: &str, session: u64) -> String {
    format!("{}{session:016x}.", channel_data_file_prefix(channel))
}

/// File name of a host-transport data file, with a random part so that no
/// other user can create it first; kept short enough to fit the pool
/// descriptor.
pub fn data_file_name(channel: &str, session: u64, generation: u64) -> String {
    format!(
        "{}{generation}.{:016x}",
        data_file_prefix(channel, session),
        random_u64()
    )
}

/// Marker a consumer leaves while it waits for a producer, so that a new
/// producer lets it attach before publishing its first frame. ('@' cannot
/// occur in channel names, so markers never match another channel's files.)
pub fn waiter_marker_path(channel: &str, session: u64) -> PathBuf {
    shm_dir().join(format!("{FILE_PREFIX}{channel}@waiter.{session:016x}"))
}

/// A waiter marker's bytes: its consumer's pid, start time and pid
/// namespace (three u64, little-endian).
pub(crate) const MARKER_BYTES: usize = 24;

/// Whether the consumer of a waiter marker still waits: it holds the
/// marker's lock, and the process recorded in it runs. The lock alone
/// does not say it: the kernel can keep a dead process's files, and their
/// locks, for a while after it exited, while its GPU context is torn down
/// (seen on the GPU host with GStreamer 1.26). A marker whose lock cannot
/// be asked about, or whose process cannot be checked (another pid
/// namespace, no record), counts as live while locked.
pub fn waiter_is_live(marker: &File) -> bool {
    if !byte_is_locked(marker, 0).unwrap_or(true) {
        return false;
    }
    let mut bytes = [0u8; MARKER_BYTES];
    if io::Read::read_exact(&mut &*marker, &mut bytes).is_err() {
        return true;
    }
    let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
    let (pid, start_time, namespace) = (word(0), word(1), word(2));
    match u32::try_from(pid) {
        Ok(pid) if pid != 0 && namespace == pid_namespace() => process_runs(pid, start_time),
        _ => true,
    }
}

/// Counts the consumers (of any user) waiting for a producer on `channel`,
/// removing the markers of dead ones.
pub fn count_live_waiters(channel: &str) -> usize {
    count_live_waiters_of(channel, true)
}

/// As `count_live_waiters`; markers of other users count only when
/// `other_users` (the channel's permissions let them in). Anything that is
/// not a regular file is ignored, and nothing is ever waited on.
pub fn count_live_waiters_of(channel: &str, other_users: bool) -> usize {
    let prefix = format!("{FILE_PREFIX}{channel}@waiter.");
    let Ok(entries) = std::fs::read_dir(shm_dir()) else {
        return 0;
    };
    let mut live = 0;
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let Ok(file) = open_regular(&entry.path(), false) else {
            continue;
        };
        let ours = owner_uid(&file).is_ok_and(|uid| uid == effective_uid());
        if !ours && !other_users {
            continue;
        }
        if waiter_is_live(&file) {
            live += 1;
        } else if ours {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    live
}

/// Removes this user's data files of earlier producers of `channel`.
pub fn remove_data_files(channel: &str) {
    remove_owned_with_prefix(&channel_data_file_prefix(channel));
}

/// Removes this user's data files of one (dead) producer session.
pub fn remove_session_data_files(channel: &str, session: u64) {
    remove_owned_with_prefix(&data_file_prefix(channel, session));
}

fn remove_owned_with_prefix(prefix: &str) {
    let Ok(entries) = std::fs::read_dir(shm_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        // The name itself, never what a link points to.
        let ours = platform::path_owner_uid(&entry.path()).is_ok_and(|uid| uid == effective_uid());
        if ours {
            let _ = remove_name(&entry.path());
        }
    }
}

/// The error for a file that another user created under one of our names.
pub fn foreign_owner_error(path: &Path, uid: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} belongs to uid {uid}, not to this user (uid {}): another user created it, and only that user or root can remove it",
            path.display(),
            effective_uid()
        ),
    )
}

/// A file in the shm folder, mapped shared (read-write unless opened with
/// `open_read_only`); truncation by another process breaks the mapping
/// (`is_broken`) instead of raising SIGBUS.
pub struct SharedFile {
    pub file: File,
    pub map: SharedMapping,
    pub path: PathBuf,
}

impl SharedFile {
    /// Creates `path` exclusively (O_EXCL: never through a link or onto an
    /// existing file) with exactly `mode`, `size` bytes reserved and zeroed.
    /// Nothing is left behind on failure.
    pub fn create_exclusive(path: &Path, size: usize, mode: u32) -> io::Result<Self> {
        let file = platform::create_new_file(path, mode)?;
        let prepared = (|| {
            reserve_space(&file, path, size)?;
            SharedMapping::map(&file, None, true)
        })();
        match prepared {
            Ok(map) => Ok(Self {
                file,
                map,
                path: path.to_owned(),
            }),
            Err(e) => {
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }

    /// Like [`create_exclusive`](Self::create_exclusive), but in `dir` and
    /// without a name (O_TMPFILE) until [`link_unnamed`] gives it one: a
    /// process killed meanwhile leaves nothing behind. `label` names it in
    /// messages. `Ok(None)` where the folder's file system has no O_TMPFILE
    /// or /proc, through which it is linked, is not mounted.
    pub fn create_unnamed(
        dir: &Path,
        label: &Path,
        size: usize,
        mode: u32,
    ) -> io::Result<Option<Self>> {
        let Some(file) = platform::create_unnamed_file(dir, mode)? else {
            return Ok(None);
        };
        reserve_space(&file, label, size)?;
        let map = SharedMapping::map(&file, None, true)?;
        Ok(Some(Self {
            file,
            map,
            path: label.to_owned(),
        }))
    }

    /// Anonymous shared memory (a memfd) of `size` bytes, reserved and
    /// zeroed, then sealed so that nobody can shrink or grow it; `label`
    /// names it in messages.
    pub fn create_sealed(name: &str, label: &Path, size: usize) -> io::Result<Self> {
        let file = platform::create_sealed_file(name, label, size)?;
        let map = SharedMapping::map(&file, None, true)?;
        Ok(Self {
            file,
            map,
            path: label.to_owned(),
        })
    }

    /// Maps `file` whole (received over a channel's socket), read-write or
    /// read-only; `label` names it in messages.
    pub fn from_file(file: File, label: &Path, write: bool) -> io::Result<Self> {
        let map = SharedMapping::map(&file, None, write)?;
        Ok(Self {
            file,
            map,
            path: label.to_owned(),
        })
    }

    /// Opens an existing regular file read-write and maps it whole (see
    /// `open_regular`: no link followed, no blocking). Any owner: the
    /// caller checks it where it matters.
    pub fn open(path: &Path) -> io::Result<Self> {
        Self::open_with(path, true)
    }

    /// As `open`, read-only (listing channels needs no more).
    pub fn open_read_only(path: &Path) -> io::Result<Self> {
        Self::open_with(path, false)
    }

    fn open_with(path: &Path, write: bool) -> io::Result<Self> {
        let file = open_regular(path, write)?;
        let map = SharedMapping::map(&file, None, write)?;
        Ok(Self {
            file,
            map,
            path: path.to_owned(),
        })
    }

    /// Whether another process truncated the file under our mapping.
    pub fn is_broken(&self) -> bool {
        self.map.is_broken()
    }

    pub fn owner_uid(&self) -> io::Result<u32> {
        owner_uid(&self.file)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The file's identity (device and inode, or volume and file index).
    pub fn inode(&self) -> io::Result<(u64, u64)> {
        platform::file_identity(&self.file)
    }

    /// Whether `self.path` still names this very file.
    pub fn is_linked_at_path(&self) -> bool {
        match (self.inode(), platform::path_identity(&self.path)) {
            (Ok(ours), Ok(theirs)) => ours == theirs,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_names_are_restricted() {
        assert!(validate_channel_name("cam0").is_ok());
        assert!(validate_channel_name("a-b_C9").is_ok());
        for bad in [
            "",
            "a/b",
            "../x",
            "..",
            "a\\b",
            "Local\\x",
            "Global\\x",
            "a.b",
            "spa ce",
            &"x".repeat(65),
        ] {
            let message = validate_channel_name(bad).expect_err(bad).to_string();
            assert!(message.contains("A-Z, a-z, 0-9"), "{bad:?}: {message}");
        }
    }
}
