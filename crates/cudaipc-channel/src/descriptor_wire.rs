//! What the descriptor channel (`platform::socket`: a unix socket on Linux,
//! a named pipe on Windows) says the same way on both platforms: its name,
//! the consumer's request, the pools the producer keeps offering, the checks
//! of a reply, and the control block a consumer receives.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::peers::Peers;
use crate::platform::Shareable;
use crate::socket::{check_sealed, reopen, request};
use crate::{ChannelError, shm};

/// The first word of every request.
pub(crate) const MAGIC: &str = "CUDAIPC1";
/// Connections served at once; more are closed at once (a flood of
/// connections cannot grow the producer's threads without bound).
pub(crate) const MAX_HANDLERS: usize = 16;
/// Pools whose memory is still handed out (consumers that read a pool's
/// frames late ask for it after the next one is published).
const KEPT_POOLS: usize = 2;

/// The socket (on Windows, the marker file) of `channel`'s descriptor
/// channel. `@` cannot occur in channel names, so no file of one channel
/// matches another channel's names.
pub fn socket_path(channel: &str) -> PathBuf {
    shm::shm_dir().join(format!("cudaipc-{channel}@socket"))
}

/// What a consumer asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Control,
    Pool(u64),
}

impl Request {
    pub(crate) fn line(self) -> String {
        match self {
            Request::Control => format!("{MAGIC} CONTROL\n"),
            Request::Pool(generation) => format!("{MAGIC} POOL {generation}\n"),
        }
    }

    pub(crate) fn parse(line: &str) -> Option<Request> {
        let mut words = line.split_whitespace();
        if words.next()? != MAGIC {
            return None;
        }
        let request = match (words.next()?, words.next()) {
            ("CONTROL", None) => Request::Control,
            ("POOL", Some(generation)) => Request::Pool(generation.parse().ok()?),
            _ => return None,
        };
        words.next().is_none().then_some(request)
    }

    /// Whether a reply of `found` handles fits: the control block is one; a
    /// pool's memory at least one (its receiver checks how many its
    /// transport needs).
    pub(crate) fn check_count(self, found: usize) -> Result<(), RequestError> {
        let (fits, requested) = match self {
            Request::Control => (found == 1, crate::Requested::ControlBlock),
            Request::Pool(_) => (found > 0, crate::Requested::Pool),
        };
        match fits {
            true => Ok(()),
            false => {
                Err(
                    ChannelError::Corrupt(crate::Corruption::DescriptorCount { found, requested })
                        .into(),
                )
            }
        }
    }
}

/// Why a consumer's request got no descriptors (handles).
#[derive(Debug)]
pub enum RequestError {
    /// No producer serves the channel (yet).
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

/// The producer's refusal, `line` being its `DENIED ...` reply.
pub(crate) fn refused(channel: &str, line: &str) -> RequestError {
    ChannelError::Refused {
        channel: channel.to_owned(),
        reason: line.trim_start_matches("DENIED").trim().to_owned(),
    }
    .into()
}

/// What the producer hands out.
pub(crate) struct Offer {
    /// The control block, opened apart from the producer's own handle
    /// (whose locks say the producer is alive: a consumer must not share
    /// them).
    pub control: File,
    pub pools: Vec<(u64, Vec<Shareable>)>,
}

impl Offer {
    /// Offers `handles` for pool `generation` from now on, with the previous
    /// pool's, for consumers still reading it.
    pub fn keep_pool(&mut self, generation: u64, handles: Vec<Shareable>) {
        self.pools.retain(|(g, _)| *g != generation);
        self.pools.push((generation, handles));
        let excess = self.pools.len().saturating_sub(KEPT_POOLS);
        self.pools.drain(..excess);
    }
}

/// `channel`'s control block, from its producer (one of `producers`):
/// sealed (on Windows: a disk file the producer keeps mapped), whole, and
/// mapped read-write through a file object of our own (a consumer's record
/// lock must be its own, not the producer's), or read-only (to look at it).
pub fn receive_control_block(
    channel: &str,
    producers: &Peers,
    write: bool,
) -> Result<shm::SharedFile, RequestError> {
    let handle = request(channel, Request::Control, producers)?
        .pop()
        .ok_or(ChannelError::Corrupt(crate::Corruption::NoControlBlock))?;
    check_sealed(&handle, crate::layout::control_size() as u64)?;
    let file = if write {
        reopen(&handle, true)
            .map_err(|e| ChannelError::io("cannot open the received control block", e))?
    } else {
        File::from(handle)
    };
    Ok(
        shm::SharedFile::from_file(file, &socket_path(channel), write)
            .map_err(|e| ChannelError::io("cannot map the received control block", e))?,
    )
}

/// Takes `path`, the name of `channel`'s descriptor channel (a socket on
/// Linux, a marker file on Windows). `create` makes it, answering `None`
/// while the name is taken; a dead producer's name is removed and the name
/// tried again, while a live producer's or another user's is refused.
pub(crate) fn claim_name<T>(
    channel: &str,
    path: &Path,
    mut create: impl FnMut() -> Result<Option<T>, ChannelError>,
    remove_if_dead: impl Fn(&str) -> io::Result<Option<u32>>,
    owner_uid: impl Fn(&Path) -> Option<u32>,
) -> Result<T, ChannelError> {
    for _ in 0..8 {
        if let Some(made) = create()? {
            return Ok(made);
        }
        match remove_if_dead(channel) {
            Ok(None) => {}
            Ok(Some(pid)) => {
                return Err(ChannelError::InUse {
                    channel: channel.to_owned(),
                    pid,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                return Err(ChannelError::NameTaken {
                    channel: channel.to_owned(),
                    path: path.to_owned(),
                    owner_uid: owner_uid(path),
                    source: Some(e),
                });
            }
            Err(e) => {
                return Err(ChannelError::io(
                    format!("cannot replace {}", path.display()),
                    e,
                ));
            }
        }
    }
    Err(ChannelError::Io {
        context: format!("cannot claim channel '{channel}'"),
        source: io::Error::other("its name kept changing hands"),
    })
}
