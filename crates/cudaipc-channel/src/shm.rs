// Shared files: naming, exclusive creation, mapping, liveness locks and the
// identity of processes.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::ChannelError;
use super::mapping::SharedMapping;

/// Longest accepted channel name.
pub const MAX_CHANNEL_NAME: usize = 64;
/// Start of the name of every file of the plugin in the shm folder: the
/// control file is `cudaipc-<channel>`, the rest `cudaipc-<channel>.` or
/// `cudaipc-<channel>@` and more.
pub const FILE_PREFIX: &str = "cudaipc-";

/// Folder of the shared files: `$CUDAIPC_SHM_DIR`, else /dev/shm.
pub fn shm_dir() -> PathBuf {
    std::env::var_os("CUDAIPC_SHM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/dev/shm"))
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

/// A waiting consumer's marker, locked while it lives; removed on drop.
pub struct WaiterMarker {
    file: SharedFile,
}

impl WaiterMarker {
    pub fn create(channel: &str) -> Option<Self> {
        // Those of consumers that died waiting (killed by a signal), of any
        // channel: they would stay until a producer of theirs came.
        super::directory::remove_stale_waiters(None);
        let session = random_u64();
        let path = waiter_marker_path(channel, session);
        // Locked before it gets its name: `count_live_waiters` removes
        // unlocked markers as dead ones.
        let temp = shm_dir().join(format!(".cudaipc-waiter-{session:016x}"));
        let mut file = SharedFile::create_exclusive(&temp, 8, 0o600).ok()?;
        let locked = try_lock_byte(&file.file, 0).unwrap_or(false);
        let named = locked && link_exclusive(&temp, &path).is_ok();
        let _ = std::fs::remove_file(&temp);
        if !named {
            return None;
        }
        file.path = path;
        Some(Self { file })
    }
}

impl Drop for WaiterMarker {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file.path);
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
        if !entry.file_name().as_bytes().starts_with(prefix.as_bytes()) {
            continue;
        }
        let Ok(file) = open_regular(&entry.path(), false) else {
            continue;
        };
        let ours = owner_uid(&file).is_ok_and(|uid| uid == effective_uid());
        if !ours && !other_users {
            continue;
        }
        match byte_is_locked(&file, 0) {
            Ok(true) => live += 1,
            Ok(false) if ours => {
                let _ = std::fs::remove_file(entry.path());
            }
            _ => {}
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
        if !entry.file_name().as_bytes().starts_with(prefix.as_bytes()) {
            continue;
        }
        // lstat: the name itself, never what a link points to.
        let ours =
            std::fs::symlink_metadata(entry.path()).is_ok_and(|m| m.uid() == effective_uid());
        if ours {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

pub fn owner_uid(file: &File) -> io::Result<u32> {
    Ok(file.metadata()?.uid())
}

/// How every name in the shm folder is opened: never through a symbolic
/// link, never blocking (a FIFO opens at once), not inherited by children.
const SHARED_NAME_FLAGS: i32 = (rustix::fs::OFlags::CLOEXEC.bits()
    | rustix::fs::OFlags::NOFOLLOW.bits()
    | rustix::fs::OFlags::NONBLOCK.bits()) as i32;

/// Opens a name in the shm folder the only way a name there is opened: no
/// link followed (O_NOFOLLOW), never blocking (O_NONBLOCK: a FIFO opens at
/// once), and then only if it is a regular file (fstat). The owner is the
/// caller's to check (`owner_uid`).
pub fn open_regular(path: &Path, write: bool) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(SHARED_NAME_FLAGS)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} is a symbolic link, which is never followed",
                        path.display()
                    ),
                )
            } else {
                e
            }
        })?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// The error for a file that another user created under one of our names.
pub fn foreign_owner_error(path: &Path, uid: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} belongs to uid {uid}, not to this user (uid {}): another user created it; remove it or choose another channel name",
            path.display(),
            effective_uid()
        ),
    )
}

/// Bytes free for unprivileged users in the folder holding `path`.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let stats = rustix::fs::statvfs(dir).ok()?;
    Some(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// Reserves `size` bytes for `file` (tmpfs allocates the pages now), so a
/// full shm folder is a clear error here instead of SIGBUS at the first
/// write.
fn reserve_space(file: &File, path: &Path, size: usize) -> io::Result<()> {
    if size == 0 {
        return Ok(());
    }
    use rustix::io::Errno;
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, size as u64) {
        Ok(()) => Ok(()),
        Err(Errno::NOSPC | Errno::FBIG) => {
            let dir = path.parent().unwrap_or(Path::new("/"));
            let free = free_bytes(dir)
                .map(|b| format!("{b} bytes are free"))
                .unwrap_or_else(|| "the free space is unknown".into());
            Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "not enough space in {}: {size} bytes needed, {free}; enlarge it (in Docker: docker run --shm-size=...; elsewhere: mount -o remount,size=... {}) or use fewer or smaller slots",
                    dir.display(),
                    dir.display()
                ),
            ))
        }
        // Filesystems without fallocate: size it sparsely, as before.
        Err(Errno::OPNOTSUPP | Errno::INVAL) => file.set_len(size as u64),
        Err(other) => Err(other.into()),
    }
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
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(SHARED_NAME_FLAGS)
            .open(path)?;
        let prepared = (|| {
            // The umask may have cleared bits the caller asked for.
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
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
        use rustix::fs::{Mode, OFlags};
        use rustix::io::Errno;
        if !Path::new("/proc/self/fd").is_dir() {
            return Ok(None);
        }
        let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
        let file = match rustix::fs::open(dir, flags, Mode::from_raw_mode(mode)) {
            Ok(fd) => File::from(fd),
            Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // The umask may have cleared bits the caller asked for.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
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
        use rustix::fs::{MemfdFlags, SealFlags};
        let file = File::from(rustix::fs::memfd_create(
            name,
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?);
        reserve_space(&file, label, size)?;
        rustix::fs::fcntl_add_seals(&file, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
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

    pub fn inode(&self) -> io::Result<(u64, u64)> {
        let meta = self.file.metadata()?;
        Ok((meta.dev(), meta.ino()))
    }

    /// Whether `self.path` still names this very file.
    pub fn is_linked_at_path(&self) -> bool {
        match (self.inode(), std::fs::symlink_metadata(&self.path)) {
            (Ok(ours), Ok(meta)) => ours == (meta.dev(), meta.ino()),
            _ => false,
        }
    }
}

/// Gives a file its public name atomically; fails with AlreadyExists.
pub fn link_exclusive(from: &Path, to: &Path) -> io::Result<()> {
    // link(2) never follows `from` if it is a symbolic link.
    std::fs::hard_link(from, to)
}

/// Gives a file of [`SharedFile::create_unnamed`] its name atomically;
/// fails with AlreadyExists.
pub fn link_unnamed(file: &File, to: &Path) -> io::Result<()> {
    // linkat of the descriptor itself (AT_EMPTY_PATH) needs a capability;
    // through /proc any process may link a file it holds open.
    let by_descriptor = format!("/proc/self/fd/{}", file.as_raw_fd());
    rustix::fs::linkat(
        rustix::fs::CWD,
        by_descriptor.as_str(),
        rustix::fs::CWD,
        to,
        rustix::fs::AtFlags::SYMLINK_FOLLOW,
    )?;
    Ok(())
}

// Open-file-description locks on single bytes stay with libc's fcntl:
// rustix offers whole-file locks only.
fn ofd_lock_struct(kind: libc::c_int, byte: i64) -> libc::flock {
    // SAFETY: flock is a plain C struct; all-zero is a valid value.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = byte as libc::off_t;
    lock.l_len = 1;
    lock
}

/// Takes an exclusive open-file-description lock on one byte, without
/// waiting. `Ok(false)` means someone else holds it.
pub fn try_lock_byte(file: &File, byte: i64) -> io::Result<bool> {
    let lock = ofd_lock_struct(libc::F_WRLCK, byte);
    // SAFETY: valid fd and a properly initialised flock struct.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(err),
    }
}

pub fn unlock_byte(file: &File, byte: i64) {
    let lock = ofd_lock_struct(libc::F_UNLCK, byte);
    // SAFETY: valid fd and a properly initialised flock struct.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
}

/// Whether some open file description other than ours holds a lock on `byte`.
pub fn byte_is_locked(file: &File, byte: i64) -> io::Result<bool> {
    let mut lock = ofd_lock_struct(libc::F_WRLCK, byte);
    // SAFETY: valid fd and a properly initialised flock struct, which the
    // kernel overwrites with the conflicting lock, if any.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut lock) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(lock.l_type != libc::F_UNLCK as libc::c_short)
}

/// State (field 3) and start time in clock ticks since boot (field 22) of
/// process `pid`, from the stat file of its main thread,
/// /proc/PID/task/PID/stat: natively the same fields as /proc/PID/stat, but
/// qemu-user answers a process's reads of its own /proc/PID/stat itself,
/// with a start time of its own making (often one tick off the kernel's),
/// and leaves the task entry to the kernel. Every reader, the process
/// itself included, then gets the one value.
fn process_stat(pid: u32) -> Option<(char, u64)> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/stat")).ok()?)
}

/// State and start time from the text of a stat file.
fn parse_stat(stat: &str) -> Option<(char, u64)> {
    // The command name may hold spaces and parentheses: skip past the last ')'.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start_time = fields.nth(18)?.parse().ok()?;
    Some((state, start_time))
}

/// Start time of a process in clock ticks since boot: with the pid, it
/// names a process even after pid reuse.
pub fn process_start_time(pid: u32) -> Option<u64> {
    process_stat(pid).map(|(_, start_time)| start_time)
}

/// This process's start time as others read it ([`process_start_time`]):
/// what a producer records for itself in its control block.
pub fn own_start_time() -> Option<u64> {
    process_start_time(std::process::id())
}

/// Whether process `pid` of this PID namespace runs and is the one that
/// started at `start_time` (0: not known): false for a process that is
/// gone, a zombie, or another process under a reused pid. True where /proc
/// cannot tell (not mounted).
pub fn process_runs(pid: u32, start_time: u64) -> bool {
    match process_stat(pid) {
        Some((state, started)) => {
            !matches!(state, 'Z' | 'X' | 'x') && (start_time == 0 || started == start_time)
        }
        None => std::fs::metadata("/proc/self/stat").is_err(),
    }
}

/// Inode of this process's PID namespace.
pub fn pid_namespace() -> u64 {
    std::fs::metadata("/proc/self/ns/pid")
        .map(|m| m.ino())
        .unwrap_or(0)
}

/// A random 64-bit value for session identifiers.
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    let filled = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::NONBLOCK);
    let mut value = u64::from_ne_bytes(bytes);
    if filled.ok() != Some(8) {
        // No entropy yet: fall back to time and pid, still unique enough.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        value = nanos ^ ((std::process::id() as u64) << 32);
    }
    value | 1
}

/// CLOCK_MONOTONIC in nanoseconds: comparable between processes of one host.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_runs_until_it_is_a_zombie_and_its_pid_names_only_it() {
        let me = std::process::id();
        let started = process_start_time(me).unwrap();
        assert!(process_runs(me, started));
        assert!(process_runs(me, 0), "start time not known");
        assert!(
            !process_runs(me, started + 1),
            "another process under a reused pid"
        );
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let child_started = process_start_time(pid).unwrap_or(0);
        // Exited but not reaped: a zombie, which holds nothing any more.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while process_stat(pid).is_some_and(|(state, _)| state != 'Z') {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never exited"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!process_runs(pid, child_started), "a zombie");
        child.wait().unwrap();
        assert!(!process_runs(pid, child_started), "gone");
    }

    /// The start time this process reads for itself is the one another
    /// process (a `cat`, reading the kernel's) reads for its pid: else
    /// consumers take a live producer for a dead one whose pid was reused.
    /// Natively /proc/self/stat agrees too; under qemu-user it is qemu's
    /// own answer, which is why the task entry is read.
    #[test]
    fn own_start_time_is_what_another_process_reads() {
        let me = std::process::id();
        let read_by_another = |path: String| {
            let out = std::process::Command::new("cat").arg(&path).output();
            let out = out.expect("cat runs");
            assert!(out.status.success(), "cat {path}");
            parse_stat(&String::from_utf8_lossy(&out.stdout))
                .unwrap_or_else(|| panic!("{path} parses"))
                .1
        };
        let outside = read_by_another(format!("/proc/{me}/stat"));
        assert_eq!(own_start_time(), Some(outside));
        assert_eq!(
            read_by_another(format!("/proc/{me}/task/{me}/stat")),
            outside
        );
        // `uname` is a binary of the host: under qemu-user it runs natively
        // and names another architecture than this test's.
        let uname = std::process::Command::new("uname").arg("-m").output();
        let host_arch = String::from_utf8_lossy(&uname.expect("uname runs").stdout)
            .trim()
            .to_owned();
        if host_arch == std::env::consts::ARCH {
            let own = std::fs::read_to_string("/proc/self/stat").unwrap();
            assert_eq!(parse_stat(&own).map(|(_, t)| t), Some(outside));
        } else {
            eprintln!(
                "emulated ({} on {host_arch}): /proc/self/stat is the emulator's, not compared",
                std::env::consts::ARCH
            );
        }
    }

    #[test]
    fn channel_names_are_restricted() {
        assert!(validate_channel_name("cam0").is_ok());
        assert!(validate_channel_name("a-b_C9").is_ok());
        for bad in ["", "a/b", "../x", "a.b", "spa ce", &"x".repeat(65)] {
            assert!(validate_channel_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn own_start_time_is_known() {
        let me = std::process::id();
        let t = process_start_time(me).expect("own start time");
        assert_eq!(process_start_time(me), Some(t));
        assert!(pid_namespace() != 0);
    }

    #[test]
    fn ofd_locks_conflict_between_descriptions() {
        let dir = std::env::temp_dir().join(format!("cudaipc-lock-{}", random_u64()));
        let a = SharedFile::create_exclusive(&dir, 4096, 0o600).unwrap();
        let b = SharedFile::open(&dir).unwrap();
        assert!(!byte_is_locked(&b.file, 3).unwrap());
        assert!(try_lock_byte(&a.file, 3).unwrap());
        assert!(byte_is_locked(&b.file, 3).unwrap());
        assert!(!try_lock_byte(&b.file, 3).unwrap());
        // Other bytes are independent.
        assert!(try_lock_byte(&b.file, 4).unwrap());
        drop(a);
        // Closing the description drops its locks, as death does.
        assert!(try_lock_byte(&b.file, 3).unwrap());
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn exclusive_creation_sets_the_exact_mode() {
        let path = std::env::temp_dir().join(format!("cudaipc-mode-{}", random_u64()));
        let f = SharedFile::create_exclusive(&path, 64, 0o640).unwrap();
        assert_eq!(f.file.metadata().unwrap().mode() & 0o777, 0o640);
        assert!(SharedFile::create_exclusive(&path, 64, 0o600).is_err());
        assert!(f.is_linked_at_path());
        std::fs::remove_file(&path).unwrap();
        assert!(!f.is_linked_at_path());
    }
}
