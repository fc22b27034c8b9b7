// SPDX-License-Identifier: MPL-2.0

//! The metric families of `serve-metrics`, encoded at each scrape from the
//! latest snapshot (docs/metrics.md lists them).
//!
//! Counters carry the `producer_session` of the producer they count for
//! (and a consumer's its `consumer_session`): a restarted producer or a
//! consumer that attached again is a new series starting at 0, so no series
//! ever counts down and `rate()` needs no reset guessing. Only what was
//! read is shown: a stale channel's producer is not asked for counters, so
//! it has none.

use std::fmt;
use std::sync::Arc;

use crate::channels::ChannelState;
use crate::channels::watch::{ChannelView, ConsumerView};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::caps;
use super::sampler::{ConsumerKey, Latest, Snapshot};

type Labels = Vec<(&'static str, String)>;

/// Every family, from the latest snapshot at each scrape.
#[derive(Debug)]
pub struct ChannelCollector(pub Arc<Latest>);

impl Collector for ChannelCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let snapshot = self.0.get();
        channel_families(&snapshot, &mut encoder)?;
        consumer_families(&snapshot, &mut encoder)
    }
}

fn gauges<N: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (Labels, N)>,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in series {
        ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// `name` without `_total`: the encoder adds it.
fn counters<N: EncodeCounterValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (Labels, N)>,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in series {
        ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A session as a label: 16 hex digits.
fn session(session: u64) -> String {
    format!("{session:016x}")
}

fn state_name(state: &ChannelState) -> &'static str {
    match state {
        ChannelState::Live => "live",
        ChannelState::Stale => "stale",
        ChannelState::Unreadable(_) => "unreadable",
    }
}

fn channel_labels(view: &ChannelView) -> Labels {
    vec![("channel", view.now.entry.name.clone())]
}

fn producer_labels(view: &ChannelView) -> Labels {
    let mut labels = channel_labels(view);
    labels.push(("producer_session", session(view.now.entry.producer_session)));
    labels
}

fn flag(value: bool) -> i64 {
    i64::from(value)
}

fn channel_families(s: &Snapshot, e: &mut DescriptorEncoder) -> fmt::Result {
    let all = || s.channels.iter();
    // The control block's identity was read (its producer may be gone).
    let read = || all().filter(|v| v.now.entry.producer_session != 0);
    let live = || all().filter(|v| v.now.entry.state == ChannelState::Live);
    gauges(
        e,
        "cudaipc_channel_state",
        "1 for the channel's state: live (a producer holds it), stale (its producer died without removing it) or unreadable (see cudaipc_channel_corrupt); 0 for the others.",
        all().flat_map(|v| {
            ["live", "stale", "unreadable"].map(|state| {
                let mut labels = channel_labels(v);
                labels.push(("state", state.to_owned()));
                (labels, flag(state_name(&v.now.entry.state) == state))
            })
        }),
    )?;
    gauges(
        e,
        "cudaipc_channel_corrupt",
        "For an unreadable channel: 1 when this user may read the file but it is not a control block of this version (corrupt, hostile, or another version), 0 when it may not be read; reason says why.",
        all().filter_map(|v| match &v.now.entry.state {
            ChannelState::Unreadable(why) => {
                let mut labels = channel_labels(v);
                labels.push(("reason", why.chars().take(200).collect()));
                Some((labels, flag(s.corrupt.contains(&v.now.entry.name))))
            }
            _ => None,
        }),
    )?;
    gauges(
        e,
        "cudaipc_channel_info",
        "1 for each channel whose control block was read: its producer's pid and session, the transport, and the frames' format, width, height and framerate when the caps have them.",
        read().map(|v| {
            let entry = &v.now.entry;
            let mut labels = producer_labels(v);
            labels.push(("producer_pid", entry.producer_pid.to_string()));
            labels.push(("transport", entry.transport.to_owned()));
            for (name, value) in caps::FIELDS
                .into_iter()
                .zip(caps::labels(entry.caps.as_deref()))
            {
                labels.push((name, value));
            }
            (labels, 1)
        }),
    )?;
    gauges(
        e,
        "cudaipc_channel_slots",
        "Slots in the producer's ring.",
        read().map(|v| (producer_labels(v), i64::from(v.now.entry.slot_count))),
    )?;
    gauges(
        e,
        "cudaipc_channel_slot_size_bytes",
        "Bytes of each slot.",
        read().map(|v| (producer_labels(v), v.now.entry.slot_size)),
    )?;
    gauges(
        e,
        "cudaipc_channel_live",
        "1 while the producer's frames come paced by a live source (consumers in frames=auto then go at their own pace), else 0.",
        live().map(|v| (producer_labels(v), flag(v.now.live))),
    )?;
    gauges(
        e,
        "cudaipc_channel_slots_held",
        "Slots some consumer holds.",
        live().map(|v| (producer_labels(v), i64::from(v.now.slots_held))),
    )?;
    gauges(
        e,
        "cudaipc_channel_consumers",
        "Consumers attached.",
        live().map(|v| (producer_labels(v), i64::from(v.now.entry.consumers))),
    )?;
    counters(
        e,
        "cudaipc_channel_frames_published",
        "Frames the producer published.",
        live().map(|v| (producer_labels(v), v.now.frames_published)),
    )?;
    counters(
        e,
        "cudaipc_channel_frames_dropped",
        "Frames lost on the way: dropped because every slot was held (when-full=drop), or, on a channel a cudaipc-bridge receiver publishes, missed on the sending host's side.",
        live().map(|v| (producer_labels(v), v.now.frames_dropped)),
    )?;
    gauges(
        e,
        "cudaipc_channel_frames_per_second",
        "Frames the producer published per second over the exporter's last sampling interval (rate() of cudaipc_channel_frames_published_total over a longer window is steadier).",
        live().filter_map(|v| Some((producer_labels(v), v.rate?))),
    )?;
    gauges(
        e,
        "cudaipc_channel_waiting_consumers",
        "Consumers waiting for a producer on the channel (those started before it, or waiting for a new one with on-producer-lost=wait).",
        s.waiting
            .iter()
            .map(|(channel, n)| (vec![("channel", channel.clone())], i64::from(*n))),
    )
}

fn consumer_families(s: &Snapshot, e: &mut DescriptorEncoder) -> fmt::Result {
    let consumers = || {
        s.channels
            .iter()
            .filter(|v| v.now.entry.state == ChannelState::Live)
            .flat_map(|v| v.consumers.iter().map(move |c| (v, c)))
    };
    let labels = |v: &ChannelView, c: &ConsumerView| {
        let mut labels = producer_labels(v);
        labels.push(("consumer_pid", c.now.pid.to_string()));
        labels.push(("consumer_session", session(c.now.session)));
        labels.push(("mode", c.now.mode.to_owned()));
        labels
    };
    counters(
        e,
        "cudaipc_consumer_frames_received",
        "Frames the consumer took.",
        consumers().map(|(v, c)| (labels(v, c), c.now.frames_received)),
    )?;
    counters(
        e,
        "cudaipc_consumer_frames_missed",
        "Frames the consumer missed: overwritten before it took them (frames=auto on a live channel, frames=latest).",
        consumers().map(|(v, c)| (labels(v, c), c.now.frames_missed)),
    )?;
    gauges(
        e,
        "cudaipc_consumer_lag_frames",
        "Frames (and events) published that the consumer has not taken: how far behind the newest it is.",
        consumers().map(|(v, c)| (labels(v, c), c.now.behind)),
    )?;
    gauges(
        e,
        "cudaipc_consumer_slots_held",
        "Slots the consumer holds.",
        consumers().map(|(v, c)| (labels(v, c), i64::from(c.now.slots_held))),
    )?;
    gauges(
        e,
        "cudaipc_consumer_hold_frames",
        "Frames the consumer declared it keeps beyond the one it reads (hold=); no series when it declared none.",
        consumers().filter_map(|(v, c)| Some((labels(v, c), i64::from(c.now.hold?)))),
    )?;
    gauges(
        e,
        "cudaipc_consumer_producer_waits",
        "1 when the producer waits for this consumer before it overwrites a frame the consumer has not taken (frames=every, a channel that is not live, or a consumer starting).",
        consumers().map(|(v, c)| (labels(v, c), flag(c.now.producer_waits))),
    )?;
    gauges(
        e,
        "cudaipc_consumer_holds_producer_back",
        "1 when the consumer kept the producer from writing during the last sampling interval: the producer waits for it and every slot holds a frame it has not taken or still holds.",
        consumers().map(|(v, c)| (labels(v, c), flag(c.holds_producer_back))),
    )?;
    gauges(
        e,
        "cudaipc_consumer_starting",
        "1 while the consumer attached and has not asked for its first frame (a live producer keeps frames for it up to 5 s).",
        consumers().map(|(v, c)| (labels(v, c), flag(c.now.starting))),
    )?;
    gauges(
        e,
        "cudaipc_consumer_frames_per_second",
        "Frames the consumer took per second over the exporter's last sampling interval.",
        consumers().filter_map(|(v, c)| Some((labels(v, c), c.rate?))),
    )?;
    gauges(
        e,
        "cudaipc_consumer_last_frame_age_seconds",
        "Seconds since the exporter saw the consumer's frame count grow (since the exporter first saw the consumer, if it never did); in steps of the sampling interval.",
        consumers().filter_map(|(v, c)| {
            let key = ConsumerKey {
                channel: v.now.entry.name.clone(),
                producer_session: v.now.entry.producer_session,
                consumer_session: c.now.session,
            };
            Some((labels(v, c), *s.since_last_frame.get(&key)?))
        }),
    )
}
