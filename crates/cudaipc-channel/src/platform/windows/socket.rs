// The descriptor channel (ipc-mode=fd) on Windows: not available yet. The
// plan (docs/windows.md): a named pipe per channel, the client's token user
// checked against the owner and the allowed list, handles duplicated into
// the client. Until then every entry point answers with a clear error, and
// nothing is ever found listening, so legacy channels work unchanged.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::Shareable;
use crate::ChannelError;
use crate::shm;

pub use crate::peers::Peers;

/// The name a descriptor channel of `channel` would have (messages only).
pub fn socket_path(channel: &str) -> PathBuf {
    shm::shm_dir().join(format!("cudaipc-{channel}@socket"))
}

fn unsupported() -> ChannelError {
    ChannelError::io(
        "descriptor channels (ipc-mode=fd) are not available on Windows yet; use ipc-mode=legacy",
        io::Error::from(io::ErrorKind::Unsupported),
    )
}

/// What a consumer asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Control,
    Pool(u64),
}

/// The producer's end of a descriptor channel; never built on Windows.
pub struct Listener(());

impl Listener {
    pub fn bind(
        _channel: &str,
        _mode: u32,
        _peers: Peers,
        _control: &File,
    ) -> Result<Self, ChannelError> {
        Err(unsupported())
    }

    pub fn offer_pool(&self, _generation: u64, _handles: Vec<Shareable>) {}
}

impl Drop for Listener {
    // Nothing to stop (one is never built); the producer drops it at close
    // as it does on Linux.
    fn drop(&mut self) {}
}

/// Nobody listens: there are no descriptor channels.
pub fn connect(_path: &Path) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

pub fn live_producer(_channel: &str) -> Option<u32> {
    None
}

pub fn remove_if_dead(_channel: &str) -> io::Result<Option<u32>> {
    Ok(None)
}

pub enum RequestError {
    /// Nobody listens on the channel's socket (yet): no producer.
    NoProducer,
    /// The producer has no such pool (any more).
    Gone,
    Channel(ChannelError),
}

impl From<ChannelError> for RequestError {
    fn from(e: ChannelError) -> Self {
        RequestError::Channel(e)
    }
}

pub fn request(
    _channel: &str,
    _request: Request,
    _producers: &Peers,
) -> Result<Vec<Shareable>, RequestError> {
    Err(RequestError::Channel(unsupported()))
}

pub fn receive_control_block(
    _channel: &str,
    _producers: &Peers,
    _write: bool,
) -> Result<shm::SharedFile, RequestError> {
    Err(RequestError::Channel(unsupported()))
}

pub fn check_sealed(_handle: &Shareable, _min_len: u64) -> Result<(), ChannelError> {
    Err(unsupported())
}
