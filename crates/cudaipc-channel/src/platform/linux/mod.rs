// The Linux implementation of the platform layer: files in /dev/shm (tmpfs),
// open-file-description locks for liveness, futexes for waits, /proc for the
// identity of processes, memfds and SCM_RIGHTS for descriptor channels.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

pub mod mapping;
pub mod socket;

/// What a process hands to another over a descriptor channel.
pub type Shareable = std::os::fd::OwnedFd;

/// Keeps `handle` from the processes this one starts (close-on-exec), for
/// descriptors made by a library that may not ask for it (the CUDA
/// driver's exported memory): a child that kept one would keep the memory.
pub fn keep_from_children(handle: &Shareable) -> io::Result<()> {
    let flags = rustix::io::fcntl_getfd(handle)?;
    rustix::io::fcntl_setfd(handle, flags | rustix::io::FdFlags::CLOEXEC)?;
    Ok(())
}

/// The default folder of the shared files.
pub fn default_shm_dir() -> PathBuf {
    PathBuf::from("/dev/shm")
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

/// Bytes free for unprivileged users in the folder holding `path`.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let stats = rustix::fs::statvfs(dir).ok()?;
    Some(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// Reserves `size` bytes for `file` (tmpfs allocates the pages now), so a
/// full shm folder is a clear error here instead of SIGBUS at the first
/// write.
pub fn reserve_space(file: &File, path: &Path, size: usize) -> io::Result<()> {
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

/// Gives a file its public name atomically; fails with AlreadyExists.
pub fn link_exclusive(from: &Path, to: &Path) -> io::Result<()> {
    // link(2) never follows `from` if it is a symbolic link.
    std::fs::hard_link(from, to)
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

/// 64 random bits from the kernel; `None` before it has entropy.
pub(crate) fn os_random_u64() -> Option<u64> {
    let mut bytes = [0u8; 8];
    let filled = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::NONBLOCK);
    (filled.ok() == Some(8)).then(|| u64::from_ne_bytes(bytes))
}

/// CLOCK_MONOTONIC in nanoseconds: comparable between processes of one host.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Creates `path` exclusively (O_EXCL: never through a link or onto an
/// existing file) with exactly `mode`, whatever the umask.
pub fn create_new_file(path: &Path, mode: u32) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(SHARED_NAME_FLAGS)
        .open(path)?;
    // The umask may have cleared bits the caller asked for.
    if let Err(e) = file.set_permissions(std::fs::Permissions::from_mode(mode)) {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(file)
}

/// A file in `dir` without a name (O_TMPFILE) until [`link_unnamed`] gives
/// it one: a process killed meanwhile leaves nothing behind. `Ok(None)`
/// where the folder's file system has no O_TMPFILE or /proc, through which
/// it is linked, is not mounted.
pub fn create_unnamed_file(dir: &Path, mode: u32) -> io::Result<Option<File>> {
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
    Ok(Some(file))
}

/// Gives a file of [`create_unnamed_file`] its name atomically; fails with
/// AlreadyExists.
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

/// Anonymous shared memory (a memfd) of `size` bytes, reserved and zeroed,
/// then sealed so that nobody can shrink or grow it; `label` names it in
/// messages.
pub fn create_sealed_file(name: &str, label: &Path, size: usize) -> io::Result<File> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let file = File::from(rustix::fs::memfd_create(
        name,
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?);
    reserve_space(&file, label, size)?;
    rustix::fs::fcntl_add_seals(&file, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
    Ok(file)
}

/// Device and inode of an open file: equal for two handles of one file.
pub fn file_identity(file: &File) -> io::Result<(u64, u64)> {
    let meta = file.metadata()?;
    Ok((meta.dev(), meta.ino()))
}

/// Device and inode of the name `path` itself (lstat: no link followed).
pub fn path_identity(path: &Path) -> io::Result<(u64, u64)> {
    let meta = std::fs::symlink_metadata(path)?;
    Ok((meta.dev(), meta.ino()))
}

/// Owner of the name `path` itself (lstat: no link followed).
pub fn path_owner_uid(path: &Path) -> io::Result<u32> {
    Ok(std::fs::symlink_metadata(path)?.uid())
}

/// Removes the name `path` (the file lives on while mapped).
pub fn remove_name(path: &Path) -> io::Result<()> {
    std::fs::remove_file(path)
}

/// Owner and permission bits of `path` (followed), for messages.
pub fn path_owner_and_mode(path: &Path) -> io::Result<(u32, u32)> {
    let meta = std::fs::metadata(path)?;
    Ok((meta.uid(), meta.mode() & 0o777))
}

/// Owner and group of an open file: a producer is trusted by them.
pub fn owner_ids(file: &File) -> io::Result<(u32, u32)> {
    let meta = file.metadata()?;
    Ok((meta.uid(), meta.gid()))
}

/// A user or group id as a user writes it: a number.
pub fn parse_user_id(text: &str) -> Option<u32> {
    text.parse().ok()
}

/// Sleeps while `word` holds `expected`, at most `timeout` (a shared futex:
/// it works across processes on a shared mapping). Spurious wake-ups,
/// interruptions and a changed value return at once; callers re-check.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let timeout = rustix::thread::futex::Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    let _ = rustix::thread::futex::wait(
        word,
        rustix::thread::futex::Flags::empty(),
        expected,
        Some(&timeout),
    );
}

/// Wakes every process sleeping on `word`; `_sleepers`, the number the
/// waiters announced, is what a wake-up object without a broadcast needs.
pub fn futex_wake(word: &AtomicU32, _sleepers: u32) {
    let _ =
        rustix::thread::futex::wake(word, rustix::thread::futex::Flags::empty(), i32::MAX as u32);
}

#[cfg(test)]
mod tests;
