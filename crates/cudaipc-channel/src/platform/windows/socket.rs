// Descriptor channels (ipc-mode=fd) on Windows, as GStreamer's own Windows
// cudaipc does it: a named pipe per channel. The producer checks each
// client's token user (and primary group) against the owner and its
// allowed list, and duplicates the handles it hands over into the client
// (DuplicateHandle). The channel's claim is a marker file at `socket_path`
// (locked while the producer lives, holding its pid and the pipe's name,
// which has a random part so nobody can create it first); the consumer
// checks the pipe server's token user against its allowed producers.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use windows_sys::Win32::Foundation::{
    DUPLICATE_SAME_ACCESS, DuplicateHandle, ERROR_ACCESS_DENIED, ERROR_PIPE_BUSY,
    ERROR_PIPE_CONNECTED, GENERIC_READ, GENERIC_WRITE, HANDLE, INVALID_HANDLE_VALUE,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, FILE_FLAG_FIRST_PIPE_INSTANCE, FILE_TYPE_DISK, GetFileSizeEx, GetFileType,
    OPEN_EXISTING, PIPE_ACCESS_DUPLEX, ReOpenFile,
};
use windows_sys::Win32::System::Pipes::{
    ConnectNamedPipe, CreateNamedPipeW, DisconnectNamedPipe, GetNamedPipeClientProcessId,
    GetNamedPipeServerProcessId, PIPE_READMODE_BYTE, PIPE_REJECT_REMOTE_CLIENTS, PIPE_TYPE_BYTE,
    PIPE_UNLIMITED_INSTANCES, PIPE_WAIT, WaitNamedPipeW,
};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, OpenProcess, PROCESS_DUP_HANDLE, PROCESS_QUERY_LIMITED_INFORMATION,
};

use super::security::{self, SecurityDescriptor, uid_of_sid};
use super::{SHARE_ALL, Shareable, wide};
use crate::ChannelError;
use crate::descriptor_wire::{MAX_HANDLERS, Offer, refused};
pub use crate::descriptor_wire::{Request, RequestError, receive_control_block, socket_path};
use crate::shm;

pub use crate::peers::Peers;

/// Longest request or reply line.
const MAX_LINE: usize = 1024;
/// The marker's lock byte: past its text, which a lock would make unreadable.
const MARKER_LOCK_BYTE: i64 = 1 << 20;

/// A handle closed on drop (a pipe instance or a process).
struct Handle(HANDLE);

// SAFETY: a kernel handle may be used and closed from any thread.
unsafe impl Send for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: a handle this value owns.
        unsafe { windows_sys::Win32::Foundation::CloseHandle(self.0) };
    }
}

/// The producer's end: the marker, the pipe and the thread serving it.
/// Dropping it stops the thread and removes the marker.
pub struct Listener {
    marker: File,
    path: PathBuf,
    pipe: String,
    stop: Arc<AtomicBool>,
    offer: Arc<Mutex<Offer>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listener {
    /// Claims `channel`'s marker with access for `mode`, opens the pipe
    /// and serves `control` to the `peers` allowed. A marker left by a
    /// dead producer of this user is replaced; a live one is `InUse`; one
    /// of another user is refused, naming its owner.
    pub fn bind(
        channel: &str,
        mode: u32,
        peers: Peers,
        control: &File,
    ) -> Result<Self, ChannelError> {
        let path = socket_path(channel);
        let mut marker = claim_marker(channel, &path, mode)?;
        let pipe = format!(r"\\.\pipe\cudaipc-{channel}-{:016x}", shm::random_u64());
        let descriptor = SecurityDescriptor::from_sddl(&security::file_sddl(mode))
            .map_err(|e| ChannelError::io("cannot build the pipe's security descriptor", e))?;
        let first = create_instance(&pipe, &descriptor, true)
            .map_err(|e| ChannelError::io(format!("cannot create the pipe {pipe}"), e))?;
        // The marker names the pipe only once it exists.
        marker
            .write_all(format!("{} {pipe}\n", std::process::id()).as_bytes())
            .map_err(|e| ChannelError::io(format!("cannot write {}", path.display()), e))?;
        let offer = Arc::new(Mutex::new(Offer {
            control: reopen(control, true)
                .map_err(|e| ChannelError::io("cannot open the control block again", e))?,
            pools: Vec::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, offer, pipe) = (stop.clone(), offer.clone(), pipe.clone());
            std::thread::Builder::new()
                .name(format!("cudaipc-{channel}"))
                .spawn(move || serve(first, &pipe, descriptor, peers, offer, stop))
                .map_err(|e| ChannelError::io("cannot start the channel's pipe thread", e))?
        };
        Ok(Self {
            marker,
            path,
            pipe,
            stop,
            offer,
            thread: Some(thread),
        })
    }

    /// Hands out `handles` for pool `generation` from now on (with the
    /// previous pool's, for consumers still reading it).
    pub fn offer_pool(&self, generation: u64, handles: Vec<Shareable>) {
        self.offer.lock().unwrap().keep_pool(generation, handles);
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // A connection of our own ends the serving thread's wait.
        drop(open_pipe(&self.pipe));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // Only our own marker: a new producer may have claimed the name since.
        let ours = match (
            super::file_identity(&self.marker),
            super::path_identity(&self.path),
        ) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        if ours {
            let _ = super::remove_name(&self.path);
        }
    }
}

/// Creates the marker at `path`, replacing a dead producer's of this user.
fn claim_marker(channel: &str, path: &Path, mode: u32) -> Result<File, ChannelError> {
    let create = || match super::create_new_file(path, mode) {
        Ok(marker) => {
            if super::try_lock_byte(&marker, MARKER_LOCK_BYTE).unwrap_or(false) {
                return Ok(Some(marker));
            }
            drop(marker);
            let _ = super::remove_name(path);
            Err(ChannelError::Corrupt(crate::Corruption::FreshBlockLocked))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(ChannelError::io(
            format!("cannot create {}", path.display()),
            e,
        )),
    };
    crate::descriptor_wire::claim_name(channel, path, create, remove_if_dead, |path| {
        super::path_owner_uid(path).ok()
    })
}

/// One instance of the pipe, only for local clients.
fn create_instance(pipe: &str, descriptor: &SecurityDescriptor, first: bool) -> io::Result<Handle> {
    let name = wide(pipe);
    let attributes = descriptor.attributes();
    let open_mode = PIPE_ACCESS_DUPLEX
        | if first {
            FILE_FLAG_FIRST_PIPE_INSTANCE
        } else {
            0
        };
    // SAFETY: a NUL-terminated name and attributes that outlive the call.
    let handle = unsafe {
        CreateNamedPipeW(
            name.as_ptr(),
            open_mode,
            PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS,
            PIPE_UNLIMITED_INSTANCES,
            4096,
            4096,
            0,
            &attributes,
        )
    };
    if handle == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    Ok(Handle(handle))
}

/// Accepts connections until `stop`, each answered on a thread of its own.
fn serve(
    first: Handle,
    pipe: &str,
    descriptor: SecurityDescriptor,
    peers: Peers,
    offer: Arc<Mutex<Offer>>,
    stop: Arc<AtomicBool>,
) {
    let handlers = Arc::new(AtomicUsize::new(0));
    let mut instance = first;
    loop {
        // SAFETY: a pipe instance this thread owns; a synchronous wait.
        let connected = unsafe { ConnectNamedPipe(instance.0, std::ptr::null_mut()) } != 0
            || io::Error::last_os_error().raw_os_error() == Some(ERROR_PIPE_CONNECTED as i32);
        if stop.load(Ordering::SeqCst) {
            return;
        }
        // The next instance first, so that clients always find one.
        let Ok(next) = create_instance(pipe, &descriptor, false) else {
            return;
        };
        let current = std::mem::replace(&mut instance, next);
        if !connected || handlers.fetch_add(1, Ordering::SeqCst) >= MAX_HANDLERS {
            if connected {
                handlers.fetch_sub(1, Ordering::SeqCst);
            }
            continue;
        }
        let (peers, offer, count) = (peers.clone(), offer.clone(), handlers.clone());
        let spawned = std::thread::Builder::new()
            .name("cudaipc-peer".into())
            .spawn(move || {
                let _ = answer(&current, &peers, &offer);
                // The reply is read before the instance lets go (a
                // disconnect discards what the client has not read).
                let _ = as_file(&current).sync_all();
                // SAFETY: the pipe instance `current` owns.
                unsafe { DisconnectNamedPipe(current.0) };
                count.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            handlers.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// The ids (digests of the SIDs) of the user and primary group of `pid`,
/// with a handle to it that may duplicate handles into it where `dup`.
fn peer(pid: u32, dup: bool) -> io::Result<(u32, u32, String, Handle)> {
    let access = PROCESS_QUERY_LIMITED_INFORMATION | if dup { PROCESS_DUP_HANDLE } else { 0 };
    // SAFETY: plain arguments; null on failure.
    let process = unsafe { OpenProcess(access, 0, pid) };
    if process.is_null() {
        return Err(io::Error::last_os_error());
    }
    let process = Handle(process);
    let (user, group) = security::process_sids(process.0)?;
    Ok((uid_of_sid(&user), uid_of_sid(&group), user, process))
}

/// Serves one connection: the client's identity, one request, one reply.
fn answer(pipe: &Handle, peers: &Peers, offer: &Mutex<Offer>) -> io::Result<()> {
    let mut client_pid = 0;
    // SAFETY: a connected pipe instance and an out value.
    if unsafe { GetNamedPipeClientProcessId(pipe.0, &mut client_pid) } == 0 {
        return Err(io::Error::last_os_error());
    }
    let (uid, gid, user, client) = peer(client_pid, true)?;
    if !peers.allows(uid, gid) {
        return write_line(
            pipe,
            &format!("DENIED user {user} (id {uid}) is not allowed on this channel\n"),
        );
    }
    let Some(request) = read_line(pipe)?.as_deref().and_then(Request::parse) else {
        return Ok(());
    };
    let offer = offer.lock().unwrap();
    let handles: Option<Vec<HANDLE>> = match request {
        Request::Control => Some(vec![offer.control.as_raw_handle()]),
        Request::Pool(generation) => offer
            .pools
            .iter()
            .find(|(g, _)| *g == generation)
            .map(|(_, handles)| handles.iter().map(|h| h.as_raw_handle()).collect()),
    };
    let Some(handles) = handles else {
        return write_line(pipe, "GONE\n");
    };
    let mut line = format!("OK {}", handles.len());
    for handle in handles {
        let mut theirs: HANDLE = std::ptr::null_mut();
        // SAFETY: a handle of ours, a process handle with PROCESS_DUP_HANDLE
        // and an out value; the copy belongs to the client from now on.
        let ok = unsafe {
            DuplicateHandle(
                GetCurrentProcess(),
                handle,
                client.0,
                &mut theirs,
                0,
                0,
                DUPLICATE_SAME_ACCESS,
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        line.push_str(&format!(" {}", theirs as usize));
    }
    line.push('\n');
    write_line(pipe, &line)
}

/// As a `File`, for reads and writes on a pipe handle we do not own.
fn as_file(handle: &Handle) -> std::mem::ManuallyDrop<File> {
    // SAFETY: the File is never dropped (ManuallyDrop): `handle` keeps
    // ownership and outlives it.
    std::mem::ManuallyDrop::new(unsafe { File::from_raw_handle(handle.0) })
}

fn write_line(pipe: &Handle, line: &str) -> io::Result<()> {
    as_file(pipe).write_all(line.as_bytes())
}

/// Reads one line of at most `MAX_LINE` bytes; `None` at end of stream or
/// for a longer line.
fn read_line(pipe: &Handle) -> io::Result<Option<String>> {
    let mut file = as_file(pipe);
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() < MAX_LINE {
        match file.read(&mut byte) {
            Ok(0) => return Ok(None),
            Ok(_) if byte[0] == b'\n' => return Ok(String::from_utf8(line).ok()),
            Ok(_) => line.push(byte[0]),
            // The other end closed the pipe.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// A client connection to `pipe`, waiting up to 2 s for a free instance.
fn open_pipe(pipe: &str) -> io::Result<Handle> {
    let name = wide(pipe);
    for attempt in 0..2 {
        // SAFETY: a NUL-terminated name; no security attributes or template.
        let handle = unsafe {
            CreateFileW(
                name.as_ptr(),
                GENERIC_READ | GENERIC_WRITE,
                0,
                std::ptr::null(),
                OPEN_EXISTING,
                0,
                std::ptr::null_mut(),
            )
        };
        if handle != INVALID_HANDLE_VALUE {
            return Ok(Handle(handle));
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(ERROR_PIPE_BUSY as i32) || attempt == 1 {
            return Err(error);
        }
        // SAFETY: a NUL-terminated name.
        unsafe { WaitNamedPipeW(name.as_ptr(), 2000) };
    }
    Err(io::ErrorKind::TimedOut.into())
}

/// The pid and pipe a live producer's marker names, if it is live.
fn read_marker(channel: &str) -> io::Result<Option<(u32, String)>> {
    let mut marker = match super::open_regular(&socket_path(channel), false) {
        Ok(marker) => marker,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !super::byte_is_locked(&marker, MARKER_LOCK_BYTE)? {
        return Ok(None);
    }
    let mut text = String::new();
    marker.read_to_string(&mut text)?;
    let mut words = text.split_whitespace();
    Ok(
        match (words.next().and_then(|p| p.parse().ok()), words.next()) {
            (Some(pid), Some(pipe)) if pipe.starts_with(r"\\.\pipe\cudaipc-") => {
                Some((pid, pipe.to_owned()))
            }
            _ => None,
        },
    )
}

/// Nobody listens on an address that is not one of ours: never a
/// descriptor channel's pipe (names are read from markers only).
pub fn connect(_path: &Path) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// The pid of the producer serving `channel`'s pipe, if one does.
pub fn live_producer(channel: &str) -> Option<u32> {
    read_marker(channel).ok().flatten().map(|(pid, _)| pid)
}

/// Clears `channel`'s marker of a dead producer of this user. `Ok(Some(pid))`
/// for a live producer; another user's marker is an error naming it.
pub fn remove_if_dead(channel: &str) -> io::Result<Option<u32>> {
    let path = socket_path(channel);
    let uid = match super::path_owner_uid(&path) {
        Ok(uid) => uid,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if uid != shm::effective_uid() {
        return Err(shm::foreign_owner_error(&path, uid));
    }
    if let Some(pid) = live_producer(channel) {
        return Ok(Some(pid));
    }
    match super::remove_name(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(None),
    }
}

/// The consumer's end: asks `channel`'s producer, which must be one of
/// `producers`, for `request`; the handles of the reply, duplicated into
/// this process by the producer.
pub fn request(
    channel: &str,
    request: Request,
    producers: &Peers,
) -> Result<Vec<Shareable>, RequestError> {
    let path = socket_path(channel);
    let io_error = |e: io::Error| ChannelError::io(format!("channel '{channel}' pipe"), e);
    let Some((_, pipe_name)) = read_marker(channel).map_err(io_error)? else {
        return Err(RequestError::NoProducer);
    };
    let pipe = match open_pipe(&pipe_name) {
        Ok(pipe) => pipe,
        Err(e) if e.raw_os_error() == Some(ERROR_ACCESS_DENIED as i32) => {
            return Err(ChannelError::NoAccess {
                channel: channel.to_owned(),
                endpoint: crate::Endpoint::Socket(path),
                owner: super::path_owner_and_mode(&socket_path(channel)).ok(),
            }
            .into());
        }
        Err(_) => return Err(RequestError::NoProducer),
    };
    let mut server_pid = 0;
    // SAFETY: a connected pipe and an out value.
    if unsafe { GetNamedPipeServerProcessId(pipe.0, &mut server_pid) } == 0 {
        return Err(io_error(io::Error::last_os_error()).into());
    }
    let (uid, gid, _, _) = peer(server_pid, false).map_err(io_error)?;
    if !producers.allows(uid, gid) {
        return Err(ChannelError::UntrustedProducer {
            channel: channel.to_owned(),
            endpoint: crate::Endpoint::Socket(path),
            uid,
            gid,
            consumer_uid: shm::effective_uid(),
        }
        .into());
    }
    // A producer that refuses this consumer answers before reading.
    let _ = write_line(&pipe, &request.line());
    let Some(line) = read_line(&pipe).map_err(io_error)? else {
        return Err(RequestError::NoProducer);
    };
    let corrupt = || {
        RequestError::Channel(ChannelError::Corrupt(crate::Corruption::SocketReply {
            line: line.chars().take(MAX_LINE).collect(),
            descriptors: 0,
        }))
    };
    let mut words = line.split_whitespace();
    match words.next() {
        Some("OK") => {}
        Some("GONE") => return Err(RequestError::Gone),
        Some("DENIED") => return Err(refused(channel, &line)),
        _ => return Err(corrupt()),
    }
    let count: usize = words
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(corrupt)?;
    let values: Vec<usize> = words
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()
        .ok_or_else(corrupt)?;
    if values.len() != count || values.contains(&0) {
        return Err(corrupt());
    }
    // SAFETY: handles the producer duplicated into this process for us;
    // each is owned once from here on.
    let handles: Vec<Shareable> = values
        .into_iter()
        .map(|v| unsafe { OwnedHandle::from_raw_handle(v as HANDLE) })
        .collect();
    request.check_count(handles.len())?;
    Ok(handles)
}

/// Opens the file behind `file` again: a file object of its own (so its
/// locks are its own), read-write or read-only.
pub fn reopen(file: &impl AsRawHandle, write: bool) -> io::Result<File> {
    let access = GENERIC_READ | if write { GENERIC_WRITE } else { 0 };
    // SAFETY: a valid file handle; a new handle or INVALID_HANDLE_VALUE.
    let handle = unsafe { ReOpenFile(file.as_raw_handle(), access, SHARE_ALL, 0) };
    if handle == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh handle nothing else owns.
    Ok(unsafe { File::from_raw_handle(handle) })
}

/// Checks a received memory handle: a file of at least `min_len` bytes.
/// Windows refuses to shrink a file while a view of it is mapped, and the
/// producer keeps it mapped: it cannot be truncated under a consumer.
pub fn check_sealed(handle: &Shareable, min_len: u64) -> Result<(), ChannelError> {
    // SAFETY: a valid handle.
    if unsafe { GetFileType(handle.as_raw_handle()) } != FILE_TYPE_DISK {
        return Err(ChannelError::Corrupt(crate::Corruption::NotAMemoryFile));
    }
    let mut size = 0i64;
    // SAFETY: a file handle and an out value.
    if unsafe { GetFileSizeEx(handle.as_raw_handle(), &mut size) } == 0 {
        return Err(ChannelError::io(
            "cannot inspect a received handle",
            io::Error::last_os_error(),
        ));
    }
    if (size as u64) < min_len {
        return Err(ChannelError::Corrupt(crate::Corruption::MemoryFileSize {
            found: size as u64,
            needed: min_len,
        }));
    }
    Ok(())
}
