// SPDX-License-Identifier: MPL-2.0

//! The producer's end: the bound socket, the thread that accepts on it,
//! and one answer per connection (credentials, request, descriptors).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::fds::reopen;
use super::messages::{Credentials, peer_credentials, read_line, send_line, send_with_fds};
use super::{PEER_TIMEOUT, Peers, Request, remove_if_dead, socket_path};
use crate::ChannelError;
use crate::descriptor_wire::{MAX_HANDLERS, Offer};

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
