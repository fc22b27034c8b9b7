// SPDX-License-Identifier: MPL-2.0

//! Descriptor channels (`ipc-mode=fd`): no control block or data file has a
//! name. The producer listens on a unix socket named after the channel and
//! hands, over `SCM_RIGHTS`, the control block (a memfd sealed against
//! shrinking and growing, so nobody can truncate it) and the host slots'
//! memfds to the consumers whose credentials (`SO_PEERCRED`) it allows. A
//! consumer checks the producer's credentials the same way, so another user
//! who took the socket's name first feeds it nothing.
//!
//! One request per connection, a text line each way:
//! - consumer: `CUDAIPC1 CONTROL` or `CUDAIPC1 POOL <generation>`;
//! - producer: `OK <n>` with `n` descriptors, `GONE` (no such pool), or
//!   `DENIED <why>`.
//!
//! Each connection is served by a thread of its own with short timeouts, so
//! a peer that connects and never speaks, or sends garbage, holds nothing
//! but that thread for a moment; the producer's frames never wait on the
//! socket.

use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::ChannelError;
use crate::descriptor_wire::{MAX_HANDLERS, Offer, refused};
pub use crate::descriptor_wire::{Request, RequestError, receive_control_block, socket_path};
pub use crate::peers::Peers;
use crate::shm;

/// Longest request or reply line.
const MAX_LINE: usize = 128;
/// Most descriptors one reply carries (the control block, or a pool's
/// memory: one per slot of device memory, and its timeline block).
const MAX_FDS: usize = crate::layout::MAX_SLOTS + 1;
/// How long either side waits for the other's line.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// The producer's end: the bound socket and the thread serving it. Dropping
/// it stops the thread and removes the socket's name.
pub struct Listener {
    path: PathBuf,
    inode: (u64, u64),
    stop: Arc<AtomicBool>,
    offer: Arc<Mutex<Offer>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listener {
    /// Binds `channel`'s socket with file mode `mode` (who may connect at
    /// all) and serves `control` to the `peers` allowed. A socket left by a
    /// dead producer of this user is replaced; a live one is `InUse`; one of
    /// another user is refused, naming its owner.
    pub fn bind(
        channel: &str,
        mode: u32,
        peers: Peers,
        control: &File,
    ) -> Result<Self, ChannelError> {
        let path = socket_path(channel);
        let listener = bind_claiming(channel, &path)?;
        let meta = std::fs::symlink_metadata(&path)
            .map_err(|e| ChannelError::io(format!("cannot inspect {}", path.display()), e))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(|e| {
            ChannelError::io(format!("cannot set the mode of {}", path.display()), e)
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| ChannelError::io("cannot configure the channel's socket", e))?;
        let offer = Arc::new(Mutex::new(Offer {
            control: reopen(control, true)
                .map_err(|e| ChannelError::io("cannot open the control block again", e))?,
            pools: Vec::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, offer) = (stop.clone(), offer.clone());
            std::thread::Builder::new()
                .name(format!("cudaipc-{channel}"))
                .spawn(move || serve(listener, peers, offer, stop))
                .map_err(|e| ChannelError::io("cannot start the channel's socket thread", e))?
        };
        Ok(Self {
            path,
            inode: (meta.dev(), meta.ino()),
            stop,
            offer,
            thread: Some(thread),
        })
    }

    /// Hands out `fds` for pool `generation` from now on (with the previous
    /// pool's, for consumers still reading it).
    pub fn offer_pool(&self, generation: u64, fds: Vec<OwnedFd>) {
        self.offer.lock().unwrap().keep_pool(generation, fds);
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // Only our own socket: a new producer may have bound the name since.
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.inode) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Connects to the unix socket at `path` without ever waiting: a socket
/// whose listener does not accept (another user can make one) has a full
/// backlog, and a plain connect would block on it for good. `WouldBlock`
/// then. The stream is blocking afterwards (callers set timeouts).
pub fn connect(path: &Path) -> io::Result<UnixStream> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::connect(&fd, &SocketAddrUnix::new(path)?)?;
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// The pid of the producer listening on `channel`'s socket, if one does.
pub fn live_producer(channel: &str) -> Option<u32> {
    let stream = connect(&socket_path(channel)).ok()?;
    Some(peer_credentials(&stream).map(|c| c.pid).unwrap_or(0))
}

/// The credentials of the process at the other end of a unix socket.
struct Credentials {
    /// 0 when that process is in a PID namespace this one cannot see.
    pid: u32,
    uid: u32,
    gid: u32,
}

/// `SO_PEERCRED`, through libc: rustix's `socket_peercred` cannot hold the
/// pid 0 a peer in an invisible PID namespace (another container) reports.
fn peer_credentials(stream: &UnixStream) -> io::Result<Credentials> {
    use std::os::fd::AsRawFd;
    let mut credentials = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket, and a ucred-sized buffer with its length,
    // which the kernel fills.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut credentials).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Credentials {
        pid: credentials.pid.max(0) as u32,
        uid: credentials.uid,
        gid: credentials.gid,
    })
}

/// Clears `channel`'s socket name of a dead producer of this user (a socket
/// nobody listens on, which is removed). `Ok(Some(pid))`: a producer
/// listens there; `Ok(None)`: the name is free. A file of another user, or
/// one of ours that is no socket, is left alone and is an error naming it.
pub fn remove_if_dead(channel: &str) -> io::Result<Option<u32>> {
    let path = socket_path(channel);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if meta.uid() != shm::effective_uid() {
        return Err(shm::foreign_owner_error(&path, meta.uid()));
    }
    use std::os::unix::fs::FileTypeExt;
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} is in the way and is no socket", path.display()),
        ));
    }
    if let Some(pid) = live_producer(channel) {
        return Ok(Some(pid));
    }
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(None),
    }
}

/// Binds `path`, replacing the socket of a dead producer of ours.
fn bind_claiming(channel: &str, path: &Path) -> Result<UnixListener, ChannelError> {
    let bind = || match UnixListener::bind(path) {
        Ok(listener) => Ok(Some(listener)),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => Ok(None),
        Err(e) => Err(ChannelError::io(
            format!("cannot create the socket {}", path.display()),
            e,
        )),
    };
    crate::descriptor_wire::claim_name(channel, path, bind, remove_if_dead, |path| {
        std::fs::symlink_metadata(path).ok().map(|m| m.uid())
    })
}

/// The listener thread: accepts until `stop`, one handler thread per
/// connection (at most `MAX_HANDLERS`).
fn serve(listener: UnixListener, peers: Peers, offer: Arc<Mutex<Offer>>, stop: Arc<AtomicBool>) {
    let handlers = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::SeqCst) {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        if handlers.fetch_add(1, Ordering::SeqCst) >= MAX_HANDLERS {
            handlers.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let (peers, offer, count) = (peers.clone(), offer.clone(), handlers.clone());
        let spawned = std::thread::Builder::new()
            .name("cudaipc-peer".into())
            .spawn(move || {
                let _ = answer(stream, &peers, &offer);
                count.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            // The closure went with the failed spawn: so does its count.
            handlers.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Serves one connection: credentials, one request, one reply.
fn answer(stream: UnixStream, peers: &Peers, offer: &Mutex<Offer>) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(PEER_TIMEOUT))?;
    stream.set_write_timeout(Some(PEER_TIMEOUT))?;
    let Credentials { uid, gid, .. } = peer_credentials(&stream)?;
    if !peers.allows(uid, gid) {
        return send_line(
            &stream,
            &format!("DENIED uid {uid} (gid {gid}) is not allowed on this channel\n"),
        );
    }
    let Some(request) = read_line(&stream)?.as_deref().and_then(Request::parse) else {
        return Ok(());
    };
    // Duplicates, so the lock is not held while sending.
    let fds: Option<Vec<OwnedFd>> = {
        let offer = offer.lock().unwrap();
        match request {
            Request::Control => Some(vec![offer.control.as_fd().try_clone_to_owned()?]),
            Request::Pool(generation) => offer
                .pools
                .iter()
                .find(|(g, _)| *g == generation)
                .map(|(_, fds)| {
                    fds.iter()
                        .map(|fd| fd.try_clone())
                        .collect::<io::Result<_>>()
                })
                .transpose()?,
        }
    };
    match fds {
        Some(fds) => send_with_fds(&stream, &format!("OK {}\n", fds.len()), &fds),
        None => send_line(&stream, "GONE\n"),
    }
}

/// Reads one line of at most `MAX_LINE` bytes within `PEER_TIMEOUT` in
/// all (a peer that trickles bytes gets no longer); `None` at end of stream
/// or for a longer line.
fn read_line(mut stream: &UnixStream) -> io::Result<Option<String>> {
    let deadline = std::time::Instant::now() + PEER_TIMEOUT;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() < MAX_LINE {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        if stream.read(&mut byte)? == 0 {
            return Ok(None);
        }
        if byte[0] == b'\n' {
            return Ok(String::from_utf8(line).ok());
        }
        line.push(byte[0]);
    }
    Ok(None)
}

/// Sends all of `line` without SIGPIPE: a peer that hangs up must not kill
/// the process (gst-launch-1.0 and C applications do not ignore SIGPIPE).
fn send_line(stream: &UnixStream, line: &str) -> io::Result<()> {
    let mut rest = line.as_bytes();
    while !rest.is_empty() {
        match rustix::net::send(stream, rest, SendFlags::NOSIGNAL) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(sent) => rest = &rest[sent..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn send_with_fds(stream: &UnixStream, line: &str, fds: &[OwnedFd]) -> io::Result<()> {
    let borrowed: Vec<_> = fds.iter().map(|fd| fd.as_fd()).collect();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&borrowed)) {
        return Err(io::Error::other("too many descriptors for one message"));
    }
    let sent = rustix::net::sendmsg(
        stream,
        &[IoSlice::new(line.as_bytes())],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    if sent != line.len() {
        return Err(io::Error::other("the reply was cut short"));
    }
    Ok(())
}

/// The consumer's end: asks `channel`'s producer, which must be one of
/// `producers`, for `request`; the descriptors of the reply.
pub fn request(
    channel: &str,
    request: Request,
    producers: &Peers,
) -> Result<Vec<OwnedFd>, RequestError> {
    let path = socket_path(channel);
    let stream = match connect(&path) {
        Ok(stream) => stream,
        // No socket, nobody listening, or a listener that does not accept:
        // no producer to talk to (now).
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound
                    | io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::WouldBlock
            ) =>
        {
            return Err(RequestError::NoProducer);
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            let owner = std::fs::metadata(&path)
                .ok()
                .map(|m| (m.uid(), m.mode() & 0o777));
            return Err(ChannelError::NoAccess {
                channel: channel.to_owned(),
                endpoint: crate::Endpoint::Socket(path),
                owner,
            }
            .into());
        }
        Err(e) => {
            return Err(
                ChannelError::io(format!("cannot connect to {}", path.display()), e).into(),
            );
        }
    };
    exchange(channel, &path, &stream, request, producers)
}

/// `request` on a connected socket: the producer's credentials, the
/// request, the reply.
fn exchange(
    channel: &str,
    path: &Path,
    stream: &UnixStream,
    request: Request,
    producers: &Peers,
) -> Result<Vec<OwnedFd>, RequestError> {
    let io_error = |e: io::Error| ChannelError::io(format!("channel '{channel}' socket"), e);
    stream
        .set_read_timeout(Some(PEER_TIMEOUT))
        .map_err(io_error)?;
    stream
        .set_write_timeout(Some(PEER_TIMEOUT))
        .map_err(io_error)?;
    let Credentials { uid, gid, .. } = peer_credentials(stream).map_err(io_error)?;
    if !producers.allows(uid, gid) {
        return Err(ChannelError::UntrustedProducer {
            channel: channel.to_owned(),
            endpoint: crate::Endpoint::Socket(path.to_owned()),
            uid,
            gid,
            consumer_uid: shm::effective_uid(),
        }
        .into());
    }
    match send_line(stream, &request.line()) {
        Ok(()) => {}
        // A producer that refuses this consumer answers before reading the
        // request and hangs up: its answer is still there to be read.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ) => {}
        Err(e) => return Err(io_error(e).into()),
    }
    let (line, fds) = match receive_with_fds(stream) {
        Ok(reply) => reply,
        // Closed without a word: a producer that is stopping, or too busy
        // (every connection slot taken), or a listener that went away with
        // our connection still queued (reset; a child process forked while
        // it listened can keep it listening a moment after it closed): as
        // if none were there yet.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
            ) =>
        {
            return Err(RequestError::NoProducer);
        }
        Err(e) => return Err(io_error(e).into()),
    };
    let corrupt = |what: crate::Corruption| RequestError::Channel(ChannelError::Corrupt(what));
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("OK"), Some(n), None) if n.parse() == Ok(fds.len()) => {}
        (Some("GONE"), None, None) if fds.is_empty() => return Err(RequestError::Gone),
        (Some("DENIED"), ..) if fds.is_empty() => return Err(refused(channel, &line)),
        _ => {
            return Err(corrupt(crate::Corruption::SocketReply {
                line: line.chars().take(MAX_LINE).collect(),
                descriptors: fds.len(),
            }));
        }
    }
    request.check_count(fds.len())?;
    Ok(fds)
}

/// One reply: its line and the descriptors that came with it (all closed
/// on error; a message with more than `MAX_FDS` is refused).
fn receive_with_fds(stream: &UnixStream) -> io::Result<(String, Vec<OwnedFd>)> {
    let mut bytes = [0u8; MAX_LINE];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = rustix::net::recvmsg(
        stream,
        &mut [IoSliceMut::new(&mut bytes)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if received.bytes == 0 && fds.is_empty() {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    if received.flags.contains(ReturnFlags::CTRUNC) {
        return Err(io::Error::other("more descriptors than a reply carries"));
    }
    let text = std::str::from_utf8(&bytes[..received.bytes])
        .map_err(|_| io::Error::other("a reply that is not text"))?;
    let line = text
        .strip_suffix('\n')
        .filter(|line| !line.contains('\n'))
        .ok_or_else(|| io::Error::other(format!("a cut or malformed reply {text:?}")))?;
    Ok((line.to_owned(), fds))
}

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

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::tests::unique_channel;
    use crate::{
        Consumer, ConsumerConfig, IpcMode, Item, Producer, ProducerConfig, layout::control_size,
    };

    /// The error of something that must fail.
    fn refused<T>(result: Result<T, ChannelError>) -> ChannelError {
        match result {
            Ok(_) => panic!("accepted"),
            Err(e) => e,
        }
    }

    fn producer(channel: &str) -> Producer {
        Producer::create(ProducerConfig {
            channel: channel.into(),
            ipc_mode: IpcMode::Fd,
            ..Default::default()
        })
        .unwrap()
    }

    fn consumer(channel: &str) -> Result<Consumer, ChannelError> {
        Consumer::attach(
            ConsumerConfig {
                channel: channel.into(),
                connect_timeout: Some(Duration::from_secs(5)),
                ipc_mode: Some(IpcMode::Fd),
                ..Default::default()
            },
            &AtomicBool::new(false),
        )
    }

    #[test]
    fn the_control_block_is_handed_over_sealed_and_nothing_else_has_a_name() {
        let channel = unique_channel("fdctl");
        let p = producer(&channel);
        assert!(!shm::control_path(&channel).exists());
        assert!(socket_path(&channel).exists());
        let fds = request(&channel, Request::Control, &Peers::default()).unwrap();
        assert_eq!(fds.len(), 1);
        check_sealed(&fds[0], control_size() as u64).unwrap();
        // Nobody can shrink or grow it.
        let file = File::from(fds.into_iter().next().unwrap());
        let err = file.set_len(0).unwrap_err();
        assert_eq!(
            err.raw_os_error(),
            Some(rustix::io::Errno::PERM.raw_os_error())
        );
        assert!(file.set_len(control_size() as u64 * 2).is_err());
        // A consumer attaches through the socket.
        let c = consumer(&channel).unwrap();
        assert!(c.info().descriptor_channel.is_some());
        drop(c);
        drop(p);
        assert!(
            !socket_path(&channel).exists(),
            "the socket goes with the producer"
        );
    }

    #[test]
    fn frames_flow_over_a_descriptor_channel() {
        let channel = unique_channel("fdframes");
        let no = AtomicBool::new(false);
        let p = producer(&channel);
        p.configure_pool(
            64,
            &[[0u8; crate::layout::SLOT_DESCRIPTOR_BYTES]; 2],
            b"pool",
            &no,
        )
        .unwrap();
        p.set_caps("video/x-raw", &no).unwrap();
        let mut c = consumer(&channel).unwrap();
        for pts in 0..5u64 {
            let slot = p.reserve(&no).unwrap().unwrap();
            p.publish(
                slot,
                &crate::FrameMeta {
                    size: 8,
                    pts: Some(pts),
                    planes: vec![(0, 8)],
                    ..Default::default()
                },
            )
            .unwrap();
            let Item::Frame(f) = c.next(&no, Some(Duration::from_secs(5))).unwrap() else {
                panic!("expected a frame");
            };
            assert_eq!(f.pts, Some(pts));
            c.release(f.slot);
        }
    }

    /// A producer that refuses a consumer answers before it reads the
    /// request, and hangs up: the consumer's request then meets a closed
    /// socket, and it must still report the producer's reason, not
    /// "Broken pipe".
    #[test]
    fn a_refusal_sent_before_the_request_is_read_is_reported() {
        let (consumer_end, producer_end) = UnixStream::pair().unwrap();
        send_line(
            &producer_end,
            "DENIED uid 65534 (gid 65534) is not allowed on this channel\n",
        )
        .unwrap();
        drop(producer_end);
        let result = exchange(
            "refused-early",
            Path::new("/nonexistent"),
            &consumer_end,
            Request::Control,
            &Peers::default(),
        );
        match result {
            Err(RequestError::Channel(ChannelError::Refused { reason, .. })) => {
                assert!(
                    reason.contains("uid 65534") && reason.contains("not allowed"),
                    "{reason}"
                )
            }
            other => panic!("expected the producer's refusal, got {other:?}"),
        }
    }

    /// Hostile or broken peers on the producer's socket: garbage, a cut
    /// line, an endless line, a pool nobody published, and a peer that
    /// connects and never speaks. None gets descriptors, and a real consumer
    /// still attaches at once meanwhile.
    #[test]
    fn hostile_peers_get_nothing_and_hold_nobody_up() {
        let channel = unique_channel("fdhostile");
        let p = producer(&channel);
        let path = socket_path(&channel);
        let silent: Vec<UnixStream> = (0..4)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        for garbage in [
            &b"hello\n"[..],
            b"CUDAIPC1 CONTROL extra\n",
            b"CUDAIPC1 POOL x\n",
            b"CUDAIPC1 CONT",
            &[b'A'; 4096],
            &[0xff, 0xfe, b'\n'],
        ] {
            let mut peer = UnixStream::connect(&path).unwrap();
            peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let _ = peer.write_all(garbage);
            let _ = peer.shutdown(std::net::Shutdown::Write);
            let mut reply = Vec::new();
            let _ = peer.read_to_end(&mut reply);
            assert!(reply.is_empty(), "{garbage:?} got {reply:?}");
        }
        assert!(matches!(
            request(&channel, Request::Pool(7), &Peers::default()),
            Err(RequestError::Gone)
        ));
        let start = Instant::now();
        let c = consumer(&channel).unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        drop((c, silent, p));
    }

    /// A fake producer on the channel's socket: replies the consumer must
    /// refuse without a panic or a hang.
    #[test]
    fn a_consumer_refuses_what_a_broken_producer_sends() {
        let channel = unique_channel("fdfake");
        let path = socket_path(&channel);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let memfd = |sealed: bool, len: u64| {
            let fd = rustix::fs::memfd_create(
                "fake",
                rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
            )
            .unwrap();
            File::from(fd.try_clone().unwrap()).set_len(len).unwrap();
            if sealed {
                rustix::fs::fcntl_add_seals(
                    &fd,
                    rustix::fs::SealFlags::SHRINK | rustix::fs::SealFlags::GROW,
                )
                .unwrap();
            }
            fd
        };
        let replies: Vec<(&str, Vec<OwnedFd>)> = vec![
            ("garbage\n", vec![]),
            ("OK 2\n", vec![memfd(true, 64)]),
            ("OK 1\n", vec![memfd(true, 64), memfd(true, 64)]),
            ("OK 1\n", vec![memfd(false, control_size() as u64)]),
            ("OK 1\n", vec![memfd(true, 64)]),
            ("OK 1 and more\n", vec![]),
        ];
        // Each reply to every connection while its scenario runs (other
        // tests list channels, and so connect to this socket too).
        listener.set_nonblocking(true).unwrap();
        for (line, fds) in &replies {
            let stop = AtomicBool::new(false);
            let err = std::thread::scope(|scope| {
                scope.spawn(|| {
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        match listener.accept() {
                            Ok((stream, _)) => {
                                stream.set_nonblocking(false).unwrap();
                                let _ = read_line(&stream);
                                let _ = send_with_fds(&stream, line, fds);
                            }
                            Err(_) => std::thread::sleep(Duration::from_millis(2)),
                        }
                    }
                });
                let err = refused(consumer(&channel));
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
                err
            });
            assert!(matches!(err, ChannelError::Corrupt(_)), "{line:?}: {err}");
        }
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_second_producer_of_the_name_is_refused_and_a_dead_ones_socket_replaced() {
        let channel = unique_channel("fdtwice");
        let p = producer(&channel);
        let err = refused(Producer::create(ProducerConfig {
            channel: channel.clone(),
            ipc_mode: IpcMode::Fd,
            ..Default::default()
        }));
        assert!(
            matches!(err, ChannelError::InUse { pid, .. } if pid == std::process::id()),
            "{err}"
        );
        // A legacy producer of the name is refused too.
        let err = refused(Producer::create(ProducerConfig {
            channel: channel.clone(),
            ..Default::default()
        }));
        assert!(matches!(err, ChannelError::InUse { .. }), "{err}");
        drop(p);
        // The socket of a producer that died without removing it.
        let stale = std::os::unix::net::UnixListener::bind(socket_path(&channel)).unwrap();
        drop(stale);
        assert!(socket_path(&channel).exists());
        let p = producer(&channel);
        drop(p);
    }

    #[test]
    fn ids_parse_and_the_own_user_is_always_allowed() {
        assert_eq!(Peers::parse_ids("1000, 1001,").unwrap(), vec![1000, 1001]);
        assert!(matches!(
            Peers::parse_ids("bob"),
            Err(ChannelError::NotAnId(id)) if id == "bob"
        ));
        let peers = Peers {
            uids: vec![1000],
            gids: vec![20],
        };
        assert!(peers.allows(shm::effective_uid(), 999_999));
        assert!(peers.allows(1000, 999_999));
        assert!(peers.allows(999_998, 20));
        assert!(!Peers::default().allows(shm::effective_uid().wrapping_add(1), 999_999));
        for request in [Request::Control, Request::Pool(3)] {
            assert_eq!(Request::parse(request.line().trim_end()), Some(request));
        }
    }

    /// A listener that never accepts and whose backlog is full (another
    /// user can make one at a channel's name): nobody blocks on it.
    #[test]
    fn a_listener_that_never_accepts_blocks_nobody() {
        use rustix::net::{AddressFamily, SocketAddrUnix, SocketType};
        let channel = unique_channel("fdstuck");
        let path = socket_path(&channel);
        let fd = rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None).unwrap();
        rustix::net::bind(&fd, &SocketAddrUnix::new(&path).unwrap()).unwrap();
        rustix::net::listen(&fd, 0).unwrap();
        // Fill the backlog.
        let queued: Vec<UnixStream> = std::iter::from_fn(|| connect(&path).ok()).take(8).collect();
        assert!(!queued.is_empty());
        assert_eq!(
            connect(&path).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock
        );
        let start = Instant::now();
        assert!(matches!(
            request(&channel, Request::Control, &Peers::default()),
            Err(RequestError::NoProducer)
        ));
        assert_eq!(live_producer(&channel), None);
        let waited = Consumer::attach(
            ConsumerConfig {
                channel: channel.clone(),
                connect_timeout: Some(Duration::from_millis(300)),
                ipc_mode: Some(IpcMode::Fd),
                ..Default::default()
            },
            &AtomicBool::new(false),
        );
        assert!(matches!(waited, Err(ChannelError::NoProducer { .. })));
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        let _ = std::fs::remove_file(&path);
    }

    /// A peer that trickles its request a byte at a time is cut off after
    /// the timeout for the whole line, not one per byte.
    #[test]
    fn a_trickling_peer_is_cut_off() {
        let channel = unique_channel("fdtrickle");
        let p = producer(&channel);
        let mut peer = UnixStream::connect(socket_path(&channel)).unwrap();
        let start = Instant::now();
        let cut = loop {
            if peer.write_all(b"C").is_err() {
                break start.elapsed();
            }
            assert!(start.elapsed() < Duration::from_secs(10), "never cut off");
            std::thread::sleep(Duration::from_millis(200));
        };
        assert!(cut >= PEER_TIMEOUT && cut < PEER_TIMEOUT * 3, "{cut:?}");
        drop(p);
    }
}
