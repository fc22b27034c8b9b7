// SPDX-License-Identifier: MPL-2.0

//! What the exporter serves: a thread samples every channel each interval,
//! reading what `watch` reads (the control blocks, mapped read only, and the
//! waiting consumers' markers; nothing is written), and keeps the latest
//! view for the scrapes. A scrape never reads a control block itself, so
//! however many scrapers there are, the rates stay over one interval.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::channels::watch::{self, ChannelView, Sample};
use crate::channels::{self as directory, ChannelState};

/// One consumer's attachment: a new producer or a new attachment is a new
/// consumer, whose counters start again.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConsumerKey {
    pub channel: String,
    pub producer_session: u64,
    pub consumer_session: u64,
}

/// The channels at one sample, with the rates since the one before.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub channels: Vec<ChannelView>,
    /// Seconds since each consumer's frame count last grew, as far as the
    /// exporter saw: since it first saw the consumer if it never did.
    pub since_last_frame: HashMap<ConsumerKey, f64>,
    /// Consumers waiting for a producer (live markers), by channel; every
    /// channel listed has an entry.
    pub waiting: BTreeMap<String, u32>,
    /// Channels that did not read as a control block although this user
    /// may read the file: a corrupt, hostile or foreign one.
    pub corrupt: Vec<String>,
}

/// The latest snapshot, shared by the sampler and the scrapes.
#[derive(Debug, Default)]
pub struct Latest(Mutex<Arc<Snapshot>>);

impl Latest {
    pub fn get(&self) -> Arc<Snapshot> {
        // A panic elsewhere leaves the last snapshot whole: serve it.
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, snapshot: Snapshot) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(snapshot);
    }
}

/// When each consumer's frame count last changed: `(frames, at ns)`.
type LastFrames = HashMap<ConsumerKey, (u64, u64)>;

/// Takes a first sample now (counters without rates) and starts the
/// thread that samples every `interval` from then on.
pub fn start(interval: Duration) -> Arc<Latest> {
    let latest = Arc::new(Latest::default());
    let mut before = watch::sample(&[]);
    let mut last_frames = LastFrames::new();
    latest.set(snapshot(&before, &before, &mut last_frames));
    let shared = latest.clone();
    std::thread::Builder::new()
        .name("sampler".into())
        .spawn(move || {
            loop {
                std::thread::sleep(interval);
                let after = watch::sample(&[]);
                shared.set(snapshot(&before, &after, &mut last_frames));
                before = after;
            }
        })
        // Without the thread the exporter would serve one old sample
        // forever: better not to start.
        .unwrap_or_else(|e| {
            eprintln!("cannot start the sampling thread: {e}");
            std::process::exit(1)
        });
    latest
}

fn snapshot(before: &Sample, after: &Sample, last_frames: &mut LastFrames) -> Snapshot {
    let channels = watch::compare(before, after);
    let now = after.taken_ns;
    let mut seen = LastFrames::new();
    let mut since_last_frame = HashMap::new();
    for view in &channels {
        for consumer in &view.consumers {
            let key = ConsumerKey {
                channel: view.now.entry.name.clone(),
                producer_session: view.now.entry.producer_session,
                consumer_session: consumer.now.session,
            };
            let frames = consumer.now.frames_received;
            let at = match last_frames.get(&key) {
                Some(&(before, at)) if before == frames => at,
                _ => now,
            };
            since_last_frame.insert(key.clone(), now.saturating_sub(at) as f64 / 1e9);
            seen.insert(key, (frames, at));
        }
    }
    // Consumers gone since are forgotten.
    *last_frames = seen;
    let mut waiting: BTreeMap<String, u32> = channels
        .iter()
        .map(|view| (view.now.entry.name.clone(), 0))
        .collect();
    for waiter in directory::list_waiters(None).into_iter().filter(|w| w.live) {
        *waiting.entry(waiter.channel).or_default() += 1;
    }
    let corrupt = channels
        .iter()
        .map(|view| &view.now.entry)
        .filter(|entry| matches!(entry.state, ChannelState::Unreadable(_)))
        // Opened without mapping, never through a link, never blocking:
        // the file is readable, so its content is what is wrong.
        .filter(|entry| cudaipc_channel::shm::open_regular(&entry.path, false).is_ok())
        .map(|entry| entry.name.clone())
        .collect();
    Snapshot {
        channels,
        since_last_frame,
        waiting,
        corrupt,
    }
}
