//! Which channels exist in the shm folder, who produces them, and the
//! removal of the files that dead producers left behind.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use super::control_block::{control_header, recorded_producer_may_run, take_lock_of_dead_producer};
use super::layout::*;
use super::shm::{self, SharedFile};
use super::socket;

/// A channel found in the shm folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelEntry {
    pub name: String,
    pub path: PathBuf,
    /// Owner of the control block.
    pub owner_uid: Option<u32>,
    pub state: ChannelState,
    pub producer_pid: u32,
    pub producer_session: u64,
    /// `"host"` or `"cuda"`.
    pub transport: &'static str,
    /// The caps of the frames, once the producer set them.
    pub caps: Option<String>,
    pub consumers: u32,
    pub slot_count: u32,
    pub slot_size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelState {
    /// A live producer holds it.
    Live,
    /// Its producer died (any signal) without removing it.
    Stale,
    /// This user may not open it, or it is not a control block: the reason.
    Unreadable(String),
}

/// Channels in the shm folder, sorted by name. Never blocks and never
/// follows a link (see `shm::open_regular`).
pub fn list_channels() -> Vec<ChannelEntry> {
    open_channels()
        .into_iter()
        .map(|(entry, _)| entry)
        .collect()
}

/// The channels in the shm folder with their control blocks, mapped read
/// only where this user may read them (for `crate::watch`).
pub(crate) fn open_channels() -> Vec<(ChannelEntry, Option<SharedFile>)> {
    let mut names: Vec<(String, bool)> = std::fs::read_dir(shm::shm_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| channel_of_file_name(entry.file_name().to_str()?))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|(name, descriptors)| open_channel(&name, descriptors))
        .collect()
}

/// The channel a file of the shm folder names, and whether it is a
/// descriptor channel's socket.
fn channel_of_file_name(name: &str) -> Option<(String, bool)> {
    let name = name.strip_prefix(shm::FILE_PREFIX)?;
    // A descriptor channel's only name is its socket.
    let (channel, descriptors) = match name.strip_suffix(SOCKET_SUFFIX) {
        Some(channel) => (channel, true),
        None => (name, false),
    };
    shm::validate_channel_name(channel).ok()?;
    Some((channel.to_owned(), descriptors))
}

fn open_channel(name: &str, descriptors: bool) -> (ChannelEntry, Option<SharedFile>) {
    match descriptors {
        true => inspect_descriptor_channel(name),
        false => inspect(name),
    }
}

/// What follows the channel's name in its socket's name.
const SOCKET_SUFFIX: &str = "@socket";

/// The names of the live channels, for messages such as "no producer on
/// 'x'; channels that exist: ...".
pub fn live_channel_names() -> Vec<String> {
    list_channels()
        .into_iter()
        .filter(|c| c.state == ChannelState::Live)
        .map(|c| c.name)
        .collect()
}

/// What a consumer that finds no producer says about the channels there are
/// ("channels with a producer: a, b"), so that a mistyped name shows.
pub fn live_channels_note() -> String {
    let names = live_channel_names();
    if names.is_empty() {
        format!("no channel has a producer in {}", shm::shm_dir().display())
    } else {
        format!("channels with a producer: {}", names.join(", "))
    }
}

/// What a consumer still waiting for a producer on `channel` says about the
/// other channels there are. Never `channel` itself: a producer that is
/// starting (the consumer attaches at its next look) or stopping (no
/// consumer attaches any more) is listed live, and "waiting for a producer
/// on 'x'; channels with a producer: x" would contradict itself.
pub fn other_live_channels_note(channel: &str) -> String {
    let names: Vec<String> = live_channel_names()
        .into_iter()
        .filter(|name| name != channel)
        .collect();
    if names.is_empty() {
        format!(
            "no other channel has a producer in {}",
            shm::shm_dir().display()
        )
    } else {
        format!("other channels with a producer: {}", names.join(", "))
    }
}

fn empty_entry(name: &str, path: PathBuf) -> ChannelEntry {
    ChannelEntry {
        name: name.to_owned(),
        path,
        owner_uid: None,
        state: ChannelState::Unreadable(String::new()),
        producer_pid: 0,
        producer_session: 0,
        transport: "?",
        caps: None,
        consumers: 0,
        slot_count: 0,
        slot_size: 0,
    }
}

fn inspect(name: &str) -> (ChannelEntry, Option<SharedFile>) {
    let path = shm::control_path(name);
    let mut entry = empty_entry(name, path.clone());
    let shared = match SharedFile::open_read_only(&path) {
        Ok(shared) => shared,
        Err(e) => {
            entry.owner_uid = crate::platform::path_owner_uid(&path).ok();
            entry.state = ChannelState::Unreadable(e.to_string());
            return (entry, None);
        }
    };
    (describe(entry, &shared), Some(shared))
}

/// A descriptor channel, through its socket: only one of this user (asking
/// another user's socket could be made to wait), like a consumer would.
fn inspect_descriptor_channel(name: &str) -> (ChannelEntry, Option<SharedFile>) {
    let path = socket::socket_path(name);
    let mut entry = empty_entry(name, path.clone());
    entry.owner_uid = crate::platform::path_owner_uid(&path).ok();
    if entry.owner_uid != Some(shm::effective_uid()) {
        entry.state = ChannelState::Unreadable("a descriptor channel of another user".into());
        return (entry, None);
    }
    match socket::receive_control_block(name, &socket::Peers::default(), false) {
        Ok(shared) => (describe(entry, &shared), Some(shared)),
        // Nobody listens: the socket of a producer that died.
        Err(socket::RequestError::NoProducer | socket::RequestError::Gone) => {
            entry.state = ChannelState::Stale;
            (entry, None)
        }
        Err(socket::RequestError::Channel(e)) => {
            entry.state = ChannelState::Unreadable(e.to_string());
            (entry, None)
        }
    }
}

/// `entry` completed from its channel's control block.
fn describe(mut entry: ChannelEntry, shared: &SharedFile) -> ChannelEntry {
    entry.owner_uid = shared.owner_uid().ok();
    let Some(h) = header(shared) else {
        entry.state = ChannelState::Unreadable("not a control block of this version".into());
        return entry;
    };
    let r = Ordering::Relaxed;
    let state = h.state.load(Ordering::SeqCst);
    let live = (state == STATE_OPEN || state == STATE_CLOSING)
        && shm::byte_is_locked(&shared.file, PRODUCER_LOCK_BYTE).unwrap_or(false)
        && recorded_producer_may_run(shared);
    entry.state = if live {
        ChannelState::Live
    } else {
        ChannelState::Stale
    };
    entry.producer_pid = h.producer_pid.load(r);
    entry.producer_session = h.producer_session.load(r);
    entry.transport = match h.transport.load(r) {
        TRANSPORT_CUDA => "cuda",
        TRANSPORT_HOST => "host",
        _ => "?",
    };
    entry.caps = super::read_seqlocked(&h.caps_seqlock, || {
        let len = (h.caps_len.load(r) as usize).min(CAPS_CAPACITY);
        load_bytes(&h.caps, len)
    })
    .and_then(|bytes| String::from_utf8(bytes).ok())
    .filter(|caps| !caps.is_empty() && !caps.contains('\0'));
    entry.consumers = h
        .consumers
        .iter()
        .filter(|c| c.state.load(r) == CONSUMER_ACTIVE)
        .count() as u32;
    entry.slot_count = h.slot_count.load(r).min(MAX_SLOTS as u32);
    entry.slot_size = h.slot_size.load(r);
    if shared.is_broken() {
        entry.state = ChannelState::Unreadable("truncated while being read".into());
    }
    entry
}

/// The header of a control block of this protocol version, if it is one.
pub(crate) fn header(shared: &SharedFile) -> Option<&ControlHeader> {
    if shared.len() < control_size() {
        return None;
    }
    let h = control_header(shared);
    let ok = h.magic.load(Ordering::Relaxed) == MAGIC
        && h.version.load(Ordering::Relaxed) == PROTOCOL_VERSION
        && checked_frame_data_bound(h, shared.len()).is_some();
    ok.then_some(h)
}

/// The marker of a consumer that waits (or waited) for a producer, found in
/// the shm folder (`cudaipc-<channel>@waiter.<random>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaiterEntry {
    pub channel: String,
    pub path: PathBuf,
    pub owner_uid: u32,
    /// Its consumer still waits (it holds the marker's lock, and runs: see
    /// `shm::waiter_is_live`); a process killed while it waited (SIGTERM,
    /// SIGKILL) leaves a stale one.
    pub live: bool,
}

/// Waiter markers in the shm folder, of `channel` or of every channel,
/// sorted by path. Never blocks and never follows a link; a marker whose
/// lock cannot be asked about counts as live.
pub fn list_waiters(channel: Option<&str>) -> Vec<WaiterEntry> {
    let mut waiters: Vec<WaiterEntry> = std::fs::read_dir(shm::shm_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let (marker_channel, _) = name
                .strip_prefix(shm::FILE_PREFIX)?
                .split_once(WAITER_INFIX)?;
            if channel.is_some_and(|c| c != marker_channel) {
                return None;
            }
            shm::validate_channel_name(marker_channel).ok()?;
            let file = shm::open_regular(&entry.path(), false).ok()?;
            Some(WaiterEntry {
                channel: marker_channel.to_owned(),
                path: entry.path(),
                owner_uid: shm::owner_uid(&file).ok()?,
                live: shm::waiter_is_live(&file),
            })
        })
        .collect();
    waiters.sort_by(|a, b| a.path.cmp(&b.path));
    waiters
}

/// What follows the channel's name in a waiter marker's name.
const WAITER_INFIX: &str = "@waiter.";

/// Removes this user's markers of consumers that died while they waited,
/// of `channel` or of every channel; the paths removed. A live consumer's
/// marker is locked before it gets its name, so an unlocked one, or one
/// whose process is gone, is dead.
pub fn remove_stale_waiters(channel: Option<&str>) -> Vec<PathBuf> {
    list_waiters(channel)
        .into_iter()
        .filter(|w| !w.live && w.owner_uid == shm::effective_uid())
        .filter(|w| std::fs::remove_file(&w.path).is_ok())
        .map(|w| w.path)
        .collect()
}

/// Removes the files of `channel` if its producer is dead: the control
/// block (only while it is still the file at that name) and that
/// producer's data files. Only this user's files. `Ok(true)`: removed.
pub fn remove_if_stale(channel: &str) -> std::io::Result<bool> {
    shm::validate_channel_name(channel)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    if std::fs::symlink_metadata(socket::socket_path(channel)).is_ok() {
        return socket::remove_if_dead(channel).map(|live| live.is_none());
    }
    let path = shm::control_path(channel);
    let shared = SharedFile::open(&path)?;
    let uid = shared.owner_uid()?;
    if uid != shm::effective_uid() {
        return Err(shm::foreign_owner_error(&path, uid));
    }
    // Holding the producer's lock while removing: no producer can be
    // claiming this block at the same time, and a live one keeps it. A
    // producer that is gone may still hold it a while (the kernel tears
    // down a dead process's GPU context before it lets go of its files):
    // it is waited for, and then the block goes without it.
    if !shm::try_lock_byte(&shared.file, PRODUCER_LOCK_BYTE)?
        && !take_lock_of_dead_producer(&shared)?
        && recorded_producer_may_run(&shared)
    {
        return Ok(false);
    }
    let session = header(&shared).map(|h| h.producer_session.load(Ordering::Relaxed));
    if shared.is_linked_at_path() {
        shm::remove_name(&path)?;
    }
    // Only that dead producer's data files: a new producer may already
    // have created its own under the name we just freed.
    if let Some(session) = session {
        shm::remove_session_data_files(channel, session);
    }
    Ok(true)
}

/// A waiting consumer's marker, locked while it lives; removed on drop.
pub struct WaiterMarker {
    file: SharedFile,
}

impl WaiterMarker {
    pub fn create(channel: &str) -> Option<Self> {
        // Those of consumers that died waiting (killed by a signal), of any
        // channel: they would stay until a producer of theirs came.
        remove_stale_waiters(None);
        let session = shm::random_u64();
        let path = shm::waiter_marker_path(channel, session);
        // Locked before it gets its name: `count_live_waiters` removes
        // unlocked markers as dead ones.
        let temp = shm::shm_dir().join(format!(".cudaipc-waiter-{session:016x}"));
        let mut file = SharedFile::create_exclusive(&temp, shm::MARKER_BYTES, 0o600).ok()?;
        let owner = [
            u64::from(std::process::id()),
            shm::own_start_time().unwrap_or(0),
            shm::pid_namespace(),
        ];
        let words = file.map.as_ptr() as *const std::sync::atomic::AtomicU64;
        for (i, word) in owner.into_iter().enumerate() {
            // SAFETY: the mapping holds MARKER_BYTES (three aligned u64
            // words); atomics make a concurrent reader harmless.
            unsafe { (*words.add(i)).store(word, std::sync::atomic::Ordering::Relaxed) };
        }
        let locked = shm::try_lock_byte(&file.file, 0).unwrap_or(false);
        let named = locked && shm::link_exclusive(&temp, &path).is_ok();
        let _ = std::fs::remove_file(&temp);
        if !named {
            return None;
        }
        file.path = path;
        Some(Self { file })
    }
}

impl Drop for WaiterMarker {
    fn drop(&mut self) {
        let _ = shm::remove_name(&self.file.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Producer, ProducerConfig};

    #[test]
    fn a_live_channel_is_listed_and_not_removed() {
        let name = format!("listed-{:x}", shm::random_u64());
        let producer = Producer::create(ProducerConfig {
            channel: name.clone(),
            ..Default::default()
        })
        .unwrap();
        let no = std::sync::atomic::AtomicBool::new(false);
        producer.set_caps("video/x-raw, width=(int)8", &no).unwrap();
        let channels = list_channels();
        let c = channels
            .iter()
            .find(|c| c.name == name)
            .expect("the channel is listed");
        assert_eq!(c.state, ChannelState::Live);
        assert_eq!(c.producer_pid, std::process::id());
        assert_eq!(c.transport, "host");
        assert_eq!(c.caps.as_deref(), Some("video/x-raw, width=(int)8"));
        assert!(live_channel_names().contains(&name));
        assert!(
            live_channels_note().contains(&name),
            "{}",
            live_channels_note()
        );
        assert!(!remove_if_stale(&name).unwrap());
        assert!(shm::control_path(&name).exists());
        drop(producer);
        assert!(!list_channels().iter().any(|c| c.name == name));
    }

    #[test]
    fn a_dead_consumers_marker_is_listed_stale_and_removed_a_live_ones_kept() {
        let name = format!("waiters-{:x}", shm::random_u64());
        let live = super::WaiterMarker::create(&name).unwrap();
        // What a consumer killed while it waited leaves: an unlocked marker.
        let dead = shm::waiter_marker_path(&name, shm::random_u64());
        std::fs::write(&dead, [0u8; 8]).unwrap();
        let waiters = list_waiters(Some(&name));
        assert_eq!(waiters.len(), 2, "{waiters:?}");
        assert!(waiters.iter().all(|w| w.channel == name));
        let stale: Vec<&PathBuf> = waiters
            .iter()
            .filter(|w| !w.live)
            .map(|w| &w.path)
            .collect();
        assert_eq!(stale, [&dead]);
        assert!(list_waiters(None).iter().any(|w| w.path == dead));
        assert_eq!(
            remove_stale_waiters(Some(&name)),
            std::slice::from_ref(&dead)
        );
        assert!(!dead.exists());
        assert_eq!(list_waiters(Some(&name)).len(), 1);
        drop(live);
        assert!(list_waiters(Some(&name)).is_empty());
    }

    #[test]
    fn a_marker_still_locked_after_its_process_died_is_stale() {
        // The kernel can keep a dead process's files, and their locks, for a
        // while (it tears down the process's GPU context first): the process
        // recorded in the marker decides then.
        let name = format!("waiters-{:x}", shm::random_u64());
        let marker = super::WaiterMarker::create(&name).unwrap();
        assert!(list_waiters(Some(&name))[0].live);
        // A pid no process has: above Linux's pid_max (2^22), and not a
        // multiple of 4 as Windows' are. (No child is started for one: a
        // child forked while another test listens on a socket keeps it
        // listening a moment after it closed.)
        let dead_pid: u32 = 0x7fff_fffd;
        let path = list_waiters(Some(&name))[0].path.clone();
        let block = shm::SharedFile::open(&path).unwrap();
        let pid_word = block.map.as_ptr() as *const std::sync::atomic::AtomicU64;
        // SAFETY: the marker maps three aligned u64 words.
        unsafe { (*pid_word).store(u64::from(dead_pid), Ordering::SeqCst) };
        let waiters = list_waiters(Some(&name));
        assert!(!waiters[0].live, "{waiters:?}");
        assert_eq!(shm::count_live_waiters(&name), 0);
        drop(marker);
    }

    #[test]
    fn a_new_waiter_removes_the_markers_of_dead_ones_of_any_channel() {
        let name = format!("waiters-{:x}", shm::random_u64());
        let dead = shm::waiter_marker_path(&name, shm::random_u64());
        std::fs::write(&dead, [0u8; 8]).unwrap();
        let _live = super::WaiterMarker::create(&format!("{name}-other")).unwrap();
        assert!(!dead.exists());
    }

    #[cfg(unix)]
    #[test]
    fn a_descriptor_channel_is_listed_through_its_socket_and_a_dead_ones_removed() {
        let name = format!("listedfd-{:x}", shm::random_u64());
        let producer = Producer::create(ProducerConfig {
            channel: name.clone(),
            ipc_mode: crate::IpcMode::Fd,
            ..Default::default()
        })
        .unwrap();
        let no = std::sync::atomic::AtomicBool::new(false);
        producer.set_caps("video/x-raw, width=(int)8", &no).unwrap();
        let listed = |name: &str| list_channels().into_iter().find(|c| c.name == name);
        let c = listed(&name).expect("the channel is listed");
        assert_eq!(c.state, ChannelState::Live);
        assert_eq!(c.producer_pid, std::process::id());
        assert_eq!(c.caps.as_deref(), Some("video/x-raw, width=(int)8"));
        assert_eq!(c.path, socket::socket_path(&name));
        assert!(!remove_if_stale(&name).unwrap());
        drop(producer);
        assert!(listed(&name).is_none());
        // A socket nobody listens on: a dead producer's.
        drop(std::os::unix::net::UnixListener::bind(socket::socket_path(&name)).unwrap());
        assert_eq!(listed(&name).map(|c| c.state), Some(ChannelState::Stale));
        assert!(remove_if_stale(&name).unwrap());
        assert!(listed(&name).is_none());
    }
}
