// SPDX-License-Identifier: MPL-2.0

//! What crosses one connection: the peer's credentials (`SO_PEERCRED`), a
//! text line each way, and descriptors over `SCM_RIGHTS`.

use std::io::{self, IoSlice, IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use super::{MAX_FDS, MAX_LINE, PEER_TIMEOUT};

/// The credentials of the process at the other end of a unix socket.
pub(super) struct Credentials {
    /// 0 when that process is in a PID namespace this one cannot see.
    pub(super) pid: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
}

/// `SO_PEERCRED`, through libc: rustix's `socket_peercred` cannot hold the
/// pid 0 a peer in an invisible PID namespace (another container) reports.
pub(super) fn peer_credentials(stream: &UnixStream) -> io::Result<Credentials> {
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

/// Reads one line of at most `MAX_LINE` bytes within `PEER_TIMEOUT` in
/// all (a peer that trickles bytes gets no longer); `None` at end of stream
/// or for a longer line.
pub(super) fn read_line(mut stream: &UnixStream) -> io::Result<Option<String>> {
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
pub(super) fn send_line(stream: &UnixStream, line: &str) -> io::Result<()> {
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

pub(super) fn send_with_fds(stream: &UnixStream, line: &str, fds: &[OwnedFd]) -> io::Result<()> {
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

/// One reply: its line and the descriptors that came with it (all closed
/// on error; a message with more than `MAX_FDS` is refused).
pub(super) fn receive_with_fds(stream: &UnixStream) -> io::Result<(String, Vec<OwnedFd>)> {
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
