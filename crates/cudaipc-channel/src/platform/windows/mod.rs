// The Windows implementation of the platform layer: the channel's files in
// a shared folder (%ProgramData%\cudaipc), created with a security
// descriptor of SIDs; byte-range locks (LockFileEx, dropped by the kernel
// with the handle, so at death) for liveness; named semaphores for waits;
// process handles and creation times for the identity of processes; named
// pipes and DuplicateHandle for descriptor channels (socket.rs).
// docs/windows.md says why files, not pagefile-backed named sections.

use std::fs::File;
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::fs::OpenOptionsExt;
use std::os::windows::io::{AsRawHandle, FromRawHandle};
use std::path::{Path, PathBuf};

use windows_sys::Win32::Foundation::{
    CloseHandle, ERROR_ACCESS_DENIED, ERROR_LOCK_VIOLATION, FILETIME, GENERIC_READ, GENERIC_WRITE,
    INVALID_HANDLE_VALUE, WAIT_TIMEOUT,
};
use windows_sys::Win32::Security::Cryptography::{
    BCRYPT_USE_SYSTEM_PREFERRED_RNG, BCryptGenRandom,
};
use windows_sys::Win32::Storage::FileSystem::{
    BY_HANDLE_FILE_INFORMATION, CREATE_NEW, CreateFileW, FILE_ATTRIBUTE_TEMPORARY,
    FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT, FILE_SHARE_DELETE, FILE_SHARE_READ,
    FILE_SHARE_WRITE, GetDiskFreeSpaceExW, GetFileInformationByHandle, LOCKFILE_EXCLUSIVE_LOCK,
    LOCKFILE_FAIL_IMMEDIATELY, LockFileEx, READ_CONTROL, UnlockFileEx,
};
use windows_sys::Win32::System::IO::OVERLAPPED;
use windows_sys::Win32::System::Performance::{QueryPerformanceCounter, QueryPerformanceFrequency};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, GetProcessTimes, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
    PROCESS_SYNCHRONIZE, WaitForSingleObject,
};

use super::random_u64;

pub mod mapping;
mod security;
pub mod socket;
mod wake;

pub use security::{SecurityDescriptor, owner_only_descriptor};
pub use wake::{futex_wait, futex_wake};

/// What a process hands to another (a duplicated handle).
pub type Shareable = std::os::windows::io::OwnedHandle;

/// Keeps `handle` from the processes this one starts (not inheritable),
/// for handles made by a library that may not ask for it.
pub fn keep_from_children(handle: &Shareable) -> io::Result<()> {
    use windows_sys::Win32::Foundation::{HANDLE_FLAG_INHERIT, SetHandleInformation};
    // SAFETY: a handle this process owns; only its inherit flag changes.
    if unsafe { SetHandleInformation(handle.as_raw_handle(), HANDLE_FLAG_INHERIT, 0) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Every open of a channel's file shares it fully: the other processes map
/// it too, and a dead producer's name must be removable while mapped.
const SHARE_ALL: u32 = FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE;

/// A NUL-terminated UTF-16 copy of `text`.
pub(crate) fn wide(text: impl AsRef<std::ffi::OsStr>) -> Vec<u16> {
    text.as_ref().encode_wide().chain(Some(0)).collect()
}

/// `%ProgramData%\cudaipc` (every user may create files there, as in
/// /dev/shm; each file carries its own access rights), created on first use;
/// the temp folder where there is no ProgramData.
pub fn default_shm_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::env::var_os("ProgramData")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join("cudaipc");
        let _ = std::fs::create_dir_all(&dir);
        dir
    })
    .clone()
}

pub fn effective_uid() -> u32 {
    security::uid_of_sid(security::user_sid())
}

pub fn owner_uid(file: &File) -> io::Result<u32> {
    Ok(owner_ids(file)?.0)
}

/// Opens the name `path` itself (a link is never followed) for its
/// attributes and owner only.
fn open_name(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .access_mode(READ_CONTROL)
        .share_mode(SHARE_ALL)
        .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT | FILE_FLAG_BACKUP_SEMANTICS)
        .open(path)
}

pub fn path_owner_uid(path: &Path) -> io::Result<u32> {
    owner_uid(&open_name(path)?)
}

/// Owner of `path` and, since Windows has no mode bits, 0 (messages only).
pub fn path_owner_and_mode(path: &Path) -> io::Result<(u32, u32)> {
    Ok((path_owner_uid(path)?, 0))
}

/// Owner and group of an open file, as ids (digests of their SIDs).
pub fn owner_ids(file: &File) -> io::Result<(u32, u32)> {
    let (owner, group) = security::owner_and_group_sids(file)?;
    Ok((security::uid_of_sid(&owner), security::uid_of_sid(&group)))
}

/// A user or group as a user writes it: a SID (`S-1-5-21-...`), or the id
/// the channel reports for one (a number).
pub fn parse_user_id(text: &str) -> Option<u32> {
    if text.starts_with("S-") {
        Some(security::uid_of_sid(text))
    } else {
        text.parse().ok()
    }
}

/// This user's SID (`effective_uid` is its digest).
pub fn user_sid() -> &'static str {
    security::user_sid()
}

/// Volume serial number and file index of an open file.
pub fn file_identity(file: &File) -> io::Result<(u64, u64)> {
    // SAFETY: BY_HANDLE_FILE_INFORMATION is plain data; all-zero is valid.
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: a valid file handle and an out struct.
    if unsafe { GetFileInformationByHandle(file.as_raw_handle(), &mut info) } == 0 {
        return Err(io::Error::last_os_error());
    }
    let index = ((info.nFileIndexHigh as u64) << 32) | info.nFileIndexLow as u64;
    Ok((info.dwVolumeSerialNumber as u64, index))
}

pub fn path_identity(path: &Path) -> io::Result<(u64, u64)> {
    file_identity(&open_name(path)?)
}

/// Opens a name in the shm folder: never through a link (a reparse point is
/// opened itself, then refused), and only if it is a regular file.
pub fn open_regular(path: &Path, write: bool) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .share_mode(SHARE_ALL)
        .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
        .open(path)?;
    let meta = file.metadata()?;
    if meta.file_type().is_symlink() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is a symbolic link, which is never followed",
                path.display()
            ),
        ));
    }
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// Creates `path` exclusively with the access rights of unix `mode` in SIDs
/// (see `security::file_sddl`); a temporary file, kept in memory where it fits.
pub fn create_new_file(path: &Path, mode: u32) -> io::Result<File> {
    create_file(path, mode, FILE_ATTRIBUTE_TEMPORARY)
}

fn create_file(path: &Path, mode: u32, flags: u32) -> io::Result<File> {
    let descriptor = security::SecurityDescriptor::from_sddl(&security::file_sddl(mode))?;
    let attributes = descriptor.attributes();
    let name = wide(path);
    // SAFETY: a NUL-terminated path and security attributes that outlive the call.
    let handle = unsafe {
        CreateFileW(
            name.as_ptr(),
            GENERIC_READ | GENERIC_WRITE,
            SHARE_ALL,
            &attributes,
            CREATE_NEW,
            flags,
            std::ptr::null_mut(),
        )
    };
    if handle == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh file handle that nothing else owns.
    Ok(unsafe { File::from_raw_handle(handle) })
}

/// No unnamed files on Windows: the caller falls back to a private name.
pub fn create_unnamed_file(_dir: &Path, _mode: u32) -> io::Result<Option<File>> {
    Ok(None)
}

/// Never called: [`create_unnamed_file`] makes no unnamed files here.
pub fn link_unnamed(_file: &File, _to: &Path) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Shared memory for descriptor channels, owner-only: a file that Windows
/// deletes with its last handle, under a random name no one else is told
/// (the handle goes to consumers duplicated). Windows refuses to shrink it
/// while the producer keeps it mapped. `label` names it in messages.
pub fn create_sealed_file(_name: &str, label: &Path, size: usize) -> io::Result<File> {
    use windows_sys::Win32::Storage::FileSystem::FILE_FLAG_DELETE_ON_CLOSE;
    let path = crate::shm::shm_dir().join(format!(".cudaipc-anon-{:016x}", random_u64()));
    let file = create_file(
        &path,
        0o600,
        FILE_ATTRIBUTE_TEMPORARY | FILE_FLAG_DELETE_ON_CLOSE,
    )?;
    reserve_space(&file, label, size)?;
    Ok(file)
}

pub fn free_bytes(dir: &Path) -> Option<u64> {
    let name = wide(dir);
    let mut free = 0u64;
    // SAFETY: a NUL-terminated path and an out value; the rest may be null.
    let ok = unsafe {
        GetDiskFreeSpaceExW(
            name.as_ptr(),
            &mut free,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    (ok != 0).then_some(free)
}

/// Sizes `file` to `size` zeroed bytes; a full disk is a clear error.
pub fn reserve_space(file: &File, path: &Path, size: usize) -> io::Result<()> {
    file.set_len(size as u64).map_err(|e| {
        let dir = path.parent().unwrap_or(Path::new("."));
        let free = free_bytes(dir)
            .map(|b| format!("{b} bytes are free"))
            .unwrap_or_else(|| "the free space is unknown".into());
        io::Error::new(
            e.kind(),
            format!(
                "cannot size {} to {size} bytes ({free}): {e}; free space or use fewer or smaller slots",
                path.display()
            ),
        )
    })
}

/// Gives a file its public name atomically (a hard link); fails with
/// AlreadyExists.
pub fn link_exclusive(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::hard_link(from, to)
}

/// Removes the name `path` at once, even while the file is open and
/// mapped: it is renamed to a random name first, then deleted (where
/// deletion waits for the last handle, as on Windows before 10 and under
/// Wine, only the random name waits).
pub fn remove_name(path: &Path) -> io::Result<()> {
    let parked = path.with_file_name(format!(".cudaipc-removed-{:016x}", random_u64()));
    match std::fs::rename(path, &parked) {
        Ok(()) => {
            let _ = std::fs::remove_file(&parked);
            Ok(())
        }
        Err(_) => std::fs::remove_file(path),
    }
}

/// LockFileEx on one byte at `byte`, never waiting; Ok(false) on a conflict.
fn lock(file: &File, byte: i64, exclusive: bool) -> io::Result<bool> {
    // SAFETY: OVERLAPPED is plain data; all-zero is valid.
    let mut at: OVERLAPPED = unsafe { std::mem::zeroed() };
    at.Anonymous.Anonymous.Offset = byte as u32;
    at.Anonymous.Anonymous.OffsetHigh = (byte >> 32) as u32;
    let flags = LOCKFILE_FAIL_IMMEDIATELY
        | if exclusive {
            LOCKFILE_EXCLUSIVE_LOCK
        } else {
            0
        };
    // SAFETY: a valid synchronous file handle and an OVERLAPPED naming the offset.
    if unsafe { LockFileEx(file.as_raw_handle(), flags, 0, 1, 0, &mut at) } != 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(ERROR_LOCK_VIOLATION as i32) {
        Ok(false)
    } else {
        Err(err)
    }
}

/// Takes an exclusive lock on one byte through this handle, without
/// waiting. `Ok(false)` means another handle holds it.
pub fn try_lock_byte(file: &File, byte: i64) -> io::Result<bool> {
    lock(file, byte, true)
}

pub fn unlock_byte(file: &File, byte: i64) {
    // SAFETY: as in `lock`.
    let mut at: OVERLAPPED = unsafe { std::mem::zeroed() };
    at.Anonymous.Anonymous.Offset = byte as u32;
    at.Anonymous.Anonymous.OffsetHigh = (byte >> 32) as u32;
    // SAFETY: a valid file handle and an OVERLAPPED naming the offset.
    unsafe { UnlockFileEx(file.as_raw_handle(), 0, 1, 0, &mut at) };
}

/// Whether another handle holds a lock on `byte`: a shared lock is tried
/// and given back at once (Windows has no F_GETLK). Probes do not conflict
/// with each other, only with the exclusive locks they look for.
pub fn byte_is_locked(file: &File, byte: i64) -> io::Result<bool> {
    if lock(file, byte, false)? {
        unlock_byte(file, byte);
        Ok(false)
    } else {
        Ok(true)
    }
}

/// A FILETIME as one number (100 ns units since 1601).
fn filetime(time: FILETIME) -> u64 {
    ((time.dwHighDateTime as u64) << 32) | time.dwLowDateTime as u64
}

/// Creation time of an open process handle.
fn creation_time(process: windows_sys::Win32::Foundation::HANDLE) -> Option<u64> {
    // SAFETY: FILETIME is plain data; all-zero is valid.
    let mut times: [FILETIME; 4] = unsafe { std::mem::zeroed() };
    let [created, exited, kernel, user] = &mut times;
    // SAFETY: a process handle with query rights and four out values.
    let ok = unsafe { GetProcessTimes(process, created, exited, kernel, user) };
    (ok != 0).then(|| filetime(times[0]))
}

/// An open handle to process `pid` (query and wait rights), closed on drop.
struct Process(windows_sys::Win32::Foundation::HANDLE);

impl Process {
    fn open(pid: u32) -> io::Result<Self> {
        // SAFETY: OpenProcess with plain arguments; null on failure.
        let handle = unsafe {
            OpenProcess(
                PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_SYNCHRONIZE,
                0,
                pid,
            )
        };
        if handle.is_null() {
            Err(io::Error::last_os_error())
        } else {
            Ok(Self(handle))
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // SAFETY: the handle opened in `open`.
        unsafe { CloseHandle(self.0) };
    }
}

/// Creation time of process `pid`: with the pid, it names one process even
/// after the pid is reused.
pub fn process_start_time(pid: u32) -> Option<u64> {
    creation_time(Process::open(pid).ok()?.0)
}

pub fn own_start_time() -> Option<u64> {
    // SAFETY: the current-process pseudo handle needs no closing.
    creation_time(unsafe { GetCurrentProcess() })
}

/// Whether process `pid` runs and is the one created at `start_time` (0:
/// not known). True where Windows does not let us look (another user's
/// process, not ours to open): it exists.
pub fn process_runs(pid: u32, start_time: u64) -> bool {
    let process = match Process::open(pid) {
        Ok(process) => process,
        Err(e) => return e.raw_os_error() == Some(ERROR_ACCESS_DENIED as i32),
    };
    // SAFETY: a handle with SYNCHRONIZE rights; a zero timeout only polls.
    let running = unsafe { WaitForSingleObject(process.0, 0) } == WAIT_TIMEOUT;
    running && (start_time == 0 || creation_time(process.0) == Some(start_time))
}

/// Windows has one process id space per host (a constant, never 0).
pub fn pid_namespace() -> u64 {
    1
}

/// 64 random bits from the system RNG; `None` if it fails.
pub(crate) fn os_random_u64() -> Option<u64> {
    let mut bytes = [0u8; 8];
    // SAFETY: the system RNG (no algorithm handle) fills 8 bytes.
    let status = unsafe {
        BCryptGenRandom(
            std::ptr::null_mut(),
            bytes.as_mut_ptr(),
            8,
            BCRYPT_USE_SYSTEM_PREFERRED_RNG,
        )
    };
    (status == 0).then(|| u64::from_ne_bytes(bytes))
}

/// The performance counter in nanoseconds: comparable between processes.
pub fn monotonic_ns() -> u64 {
    let (mut counter, mut frequency) = (0i64, 0i64);
    // SAFETY: out values; both calls cannot fail on XP and later.
    unsafe {
        QueryPerformanceCounter(&mut counter);
        QueryPerformanceFrequency(&mut frequency);
    }
    (counter as u128 * 1_000_000_000 / frequency.max(1) as u128) as u64
}

#[cfg(test)]
mod tests;
