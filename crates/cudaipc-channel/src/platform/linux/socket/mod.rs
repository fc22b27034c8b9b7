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

use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

pub use crate::descriptor_wire::{Request, RequestError, receive_control_block, socket_path};
pub use crate::peers::Peers;
use crate::shm;

mod client;
mod fds;
mod listener;
mod messages;
#[cfg(test)]
mod tests;

pub use client::request;
pub use fds::{check_sealed, reopen};
pub use listener::Listener;
use messages::peer_credentials;

/// Longest request or reply line.
const MAX_LINE: usize = 128;
/// Most descriptors one reply carries (the control block, or a pool's
/// memory: one per slot of device memory, and its timeline block).
const MAX_FDS: usize = crate::layout::MAX_SLOTS + 1;
/// How long either side waits for the other's line.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);

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
