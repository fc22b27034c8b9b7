//! A read-only look at every channel's producer and consumers, for
//! `cudaipc-channels watch`: what each control block says now, and from two
//! such samples a moment apart, rates. Nothing here writes to a channel.

use std::sync::atomic::Ordering;

use crate::directory::{self, ChannelEntry, ChannelState};
use crate::layout::*;
use crate::producer::{Start, start_of, waits_for};
use crate::shm;

/// Every channel of the shm folder at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    /// `CLOCK_MONOTONIC`, ns.
    pub taken_ns: u64,
    pub channels: Vec<ChannelSample>,
}

/// What one channel's control block says at one moment.
#[derive(Debug, Clone)]
pub struct ChannelSample {
    pub entry: ChannelEntry,
    /// The producer's frames come paced by a live source.
    pub live: bool,
    pub frames_published: u64,
    /// Frames lost on the way: dropped because every slot was held
    /// (`when-full=drop`), or, on a bridged channel, missed on the sending
    /// host's side.
    pub frames_dropped: u64,
    /// Items (frames and end-of-stream markers) published.
    pub published: u64,
    /// Slots some consumer holds.
    pub slots_held: u32,
    pub consumers: Vec<ConsumerSample>,
}

/// What one consumer's record says at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSample {
    /// New at each attachment: a record reused by another consumer is not
    /// compared with its former owner.
    pub session: u64,
    pub pid: u32,
    /// `auto`, `every` or `latest`.
    pub mode: &'static str,
    /// Frames it declared it holds beyond the one it reads.
    pub hold: Option<u32>,
    pub frames_received: u64,
    pub frames_missed: u64,
    /// Items published that it has not taken.
    pub behind: u64,
    pub slots_held: u32,
    /// Attached and not ready yet (a live producer waits for it a while).
    pub starting: bool,
    /// The producer waits for it before it overwrites a frame it has not
    /// taken (`every`, `auto` on a channel that is not live, or starting).
    pub producer_waits: bool,
}

/// Every readable channel now; with `names` not empty, only those.
pub fn sample(names: &[String]) -> Sample {
    let channels = directory::open_channels()
        .into_iter()
        .filter(|(entry, _)| names.is_empty() || names.contains(&entry.name))
        .map(|(entry, shared)| {
            let header = shared
                .as_ref()
                .filter(|_| entry.state == ChannelState::Live)
                .and_then(directory::header);
            match header {
                Some(h) => sample_of(entry, h),
                None => ChannelSample {
                    entry,
                    live: false,
                    frames_published: 0,
                    frames_dropped: 0,
                    published: 0,
                    slots_held: 0,
                    consumers: Vec::new(),
                },
            }
        })
        .collect();
    Sample {
        taken_ns: shm::monotonic_ns(),
        channels,
    }
}

fn sample_of(entry: ChannelEntry, h: &ControlHeader) -> ChannelSample {
    let live = h.live.load(Ordering::Relaxed) != 0;
    let published = h.published.load(Ordering::Acquire);
    let slot_count = (entry.slot_count as usize).min(MAX_SLOTS);
    let holders: Vec<u64> = h.slots[..slot_count]
        .iter()
        .map(|s| s.holders.load(Ordering::Relaxed))
        .collect();
    let consumers = h
        .consumers
        .iter()
        .enumerate()
        .filter(|(_, c)| c.state.load(Ordering::Acquire) == CONSUMER_ACTIVE)
        .map(|(index, c)| {
            let mode = c.mode.load(Ordering::Relaxed);
            ConsumerSample {
                session: c.session.load(Ordering::Relaxed),
                pid: c.pid.load(Ordering::Relaxed),
                mode: match mode {
                    MODE_AUTO => "auto",
                    MODE_EVERY_FRAME => "every",
                    MODE_LATEST => "latest",
                    _ => "?",
                },
                hold: Some(c.hold.load(Ordering::Relaxed)).filter(|&h| h != u32::MAX),
                frames_received: c.frames_received.load(Ordering::Relaxed),
                frames_missed: c.frames_missed.load(Ordering::Relaxed),
                behind: published.saturating_sub(c.cursor.load(Ordering::Relaxed)),
                slots_held: holders.iter().filter(|&&b| b & (1 << index) != 0).count() as u32,
                starting: mode == MODE_AUTO && live && start_of(c) == Start::Starting,
                producer_waits: waits_for(c, live),
            }
        })
        .collect();
    ChannelSample {
        live,
        frames_published: h.frames_published.load(Ordering::Relaxed),
        frames_dropped: h.frames_dropped.load(Ordering::Relaxed),
        published,
        slots_held: holders.iter().filter(|&&b| b != 0).count() as u32,
        consumers,
        entry,
    }
}

/// A channel over the time between two samples.
#[derive(Debug, Clone)]
pub struct ChannelView {
    pub now: ChannelSample,
    /// Frames published per second; `None` for a channel new since the
    /// first sample, or with a new producer.
    pub rate: Option<f64>,
    pub consumers: Vec<ConsumerView>,
}

/// A consumer over the time between two samples.
#[derive(Debug, Clone)]
pub struct ConsumerView {
    pub now: ConsumerSample,
    /// Frames taken per second; `None` for a consumer new since the first
    /// sample.
    pub rate: Option<f64>,
    /// Frames it missed between the samples.
    pub missed: Option<u64>,
    /// It kept the producer from writing, in one sample or the other: the
    /// producer waits for it and every slot holds a frame it has not taken
    /// or still holds, or it holds every slot.
    pub holds_producer_back: bool,
}

/// Each channel of `after`, with rates since `before`.
pub fn compare(before: &Sample, after: &Sample) -> Vec<ChannelView> {
    let seconds = after.taken_ns.saturating_sub(before.taken_ns) as f64 / 1e9;
    let per_second =
        |from: u64, to: u64| (seconds > 0.0).then(|| to.saturating_sub(from) as f64 / seconds);
    after
        .channels
        .iter()
        .map(|now| {
            let then = before.channels.iter().find(|c| {
                c.entry.name == now.entry.name
                    && c.entry.producer_session == now.entry.producer_session
            });
            let slots = now.entry.slot_count.max(1) as u64;
            let consumers = now
                .consumers
                .iter()
                .map(|c| {
                    let earlier =
                        then.and_then(|t| t.consumers.iter().find(|e| e.session == c.session));
                    // The frames it has not taken and those it holds fill
                    // the ring: no slot is left for the producer.
                    let fills_ring = |s: &ConsumerSample| {
                        s.producer_waits && s.behind + s.slots_held as u64 >= slots
                    };
                    ConsumerView {
                        rate: earlier
                            .and_then(|e| per_second(e.frames_received, c.frames_received)),
                        missed: earlier.map(|e| c.frames_missed.saturating_sub(e.frames_missed)),
                        holds_producer_back: fills_ring(c)
                            || earlier.is_some_and(fills_ring)
                            || c.slots_held as u64 >= slots,
                        now: c.clone(),
                    }
                })
                .collect();
            ChannelView {
                rate: then.and_then(|t| per_second(t.frames_published, now.frames_published)),
                consumers,
                now: now.clone(),
            }
        })
        .collect()
}
