// SPDX-License-Identifier: MPL-2.0

//! The Rust API's errors whose text names what to change, told in C's
//! terms: the fields of the C options structs and the C calls, not
//! `PublisherOptions::slots` or Python's `copy=True`.

use api::Setting;
use cudaipc_channel::ChannelError;

/// What to do about frames held too long, in C's calls.
const KEEP_FEWER: &str = "release frames it no longer needs (cudaipc_frame_release), copy them out instead (cudaipc_frame_copy_to_host, then release them), or declare how many it holds (cudaipc_subscriber_options.hold = N; the ring needs N+2 slots)";

/// An option outside its range, as `cudaipc_publisher_create` and
/// `cudaipc_subscriber_open` name their `options` argument's fields.
pub(crate) fn out_of_range(setting: Setting, value: u64) -> String {
    let why = setting.why();
    match setting {
        Setting::Permissions => format!(
            "options.permissions is 0{value:o} (octal): {why}, so it takes 0 to 0{:o} (0600: this user only; 0660: its group too)",
            setting.max()
        ),
        Setting::Slots => format!(
            "options.slots is {value}: {why}, so it takes 0 to {} (0: chosen as rscudaipcsink does)",
            setting.max()
        ),
        Setting::WaitForConsumers => format!(
            "options.wait_for_consumers is {value}: {why}, so it takes 0 to {}",
            setting.max()
        ),
        Setting::Hold => hold_out_of_range(&value.to_string()),
        Setting::FrameDataBound => format!(
            "options.frame_data_bound is {value}: {why}, so it takes 0 to {}",
            setting.max()
        ),
    }
}

/// Per-frame data of `len` bytes where the channel's frames carry `bound`.
pub(crate) fn frame_data_too_large(len: usize, bound: usize) -> String {
    format!(
        "per-frame data of {len} bytes: this channel's frames carry at most {bound} (cudaipc_publisher_options.frame_data_bound, less 16 bytes of framing, sets it; 16384 by default, at most {})",
        Setting::FrameDataBound.max()
    )
}

/// `options.hold` (given as `value`) outside -1 and 0 to the most a ring
/// can hold.
pub(crate) fn hold_out_of_range(value: &str) -> String {
    format!(
        "options.hold is {value}: {}, so it takes 0 to {}, or -1 (not declared)",
        Setting::Hold.why(),
        Setting::Hold.max()
    )
}

/// A subscriber's holding mistake (`api::Error::Holds`), with the channel's
/// facts.
pub(crate) fn holds(e: &ChannelError) -> String {
    match e {
        ChannelError::HoldExceedsRing {
            channel,
            hold,
            slots,
        } => {
            let needs = u64::from(*hold) + 2;
            format!(
                "channel '{channel}' has {slots} slots, and cudaipc_subscriber_options.hold = {hold} needs {needs}: give the producer more slots (cudaipc_publisher_options.slots = {needs} or more) or hold fewer frames (copy them out with cudaipc_frame_copy_to_host and release them)"
            )
        }
        ChannelError::HoldsEverySlot {
            channel,
            held,
            slots,
            hold,
        } => {
            let asked = format!(
                "this subscriber holds {held} frames of channel '{channel}' and asked for another"
            );
            match hold {
                Some(hold) if *held <= *hold as usize => {
                    let needs = u64::from(*hold) + 2;
                    format!(
                        "{asked}, every slot of a ring of {slots}; cudaipc_subscriber_options.hold = {hold} needs {needs} and the producer did not grow its ring in time (upstream holds its slots): give the producer cudaipc_publisher_options.slots = {needs} or hold fewer frames (copy them out with cudaipc_frame_copy_to_host and release them)"
                    )
                }
                Some(hold) => format!(
                    "{asked}, more than it declared (cudaipc_subscriber_options.hold = {hold}: {} frames at once): {KEEP_FEWER}",
                    u64::from(*hold) + 1
                ),
                None => format!(
                    "{asked}; the ring has {slots} slots, so the producer cannot publish one until this subscriber releases a frame: {KEEP_FEWER}"
                ),
            }
        }
        other => other.to_string(),
    }
}

/// No producer on the channel: the Rust API's text, and the channels that
/// have one, so that a mistyped name shows (as Python and `rscudaipcsrc`
/// say it).
pub(crate) fn no_producer(e: &api::Error) -> String {
    format!(
        "{e} (is the channel's name right, and its producer running?); {}",
        api::live_channels_note()
    )
}
