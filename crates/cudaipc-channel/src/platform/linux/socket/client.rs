// SPDX-License-Identifier: MPL-2.0

//! The consumer's end: a request to the producer, its credentials checked,
//! and its reply read.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;

use super::messages::{Credentials, peer_credentials, receive_with_fds, send_line};
use super::{MAX_LINE, PEER_TIMEOUT, Peers, Request, RequestError, connect, socket_path};
use crate::ChannelError;
use crate::descriptor_wire::refused;
use crate::shm;

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
pub(super) fn exchange(
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
