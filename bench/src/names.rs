// SPDX-License-Identifier: MPL-2.0

//! What each row measures, by its id. The ids (the first word of a row's
//! configuration: `5`, `5t`, `13b`) stay as they are in every CSV under
//! docs/perf, in `--rows` and in `--replot`; the printed table and the docs
//! (docs/performance.md) show the name beside the id. `--rows` takes
//! either.

/// (id, name) of every row, in the order the benchmark runs them.
pub const ROW_NAMES: &[(&str, &str)] = &[
    ("1a", "one-process-invert"),
    ("1b", "one-process-invert-verify"),
    ("1c", "one-process-verify-only"),
    ("1q", "one-process-halves-queued"),
    ("1t", "two-independent-processes"),
    ("2", "frame-copy"),
    ("3", "seed-spin"),
    ("4", "seed-sleep"),
    ("5", "pair-default"),
    ("5v", "pair-consumer-verifies-only"),
    ("5m", "pair-metas-every-frame"),
    ("5d", "descriptor-channel"),
    ("5de", "descriptor-channel-events"),
    ("5dt", "descriptor-channel-transport-only"),
    ("5u", "other-user-named-channel"),
    ("5du", "other-user-descriptor-channel"),
    ("5t", "pair-transport-only"),
    ("5g", "consumer-outputs-gstcuda"),
    ("5l", "lent-slots-transport-only"),
    ("5c", "copied-slots-transport-only"),
    ("5lv", "lent-slots-invert-verify"),
    ("6a", "system-memory-producer"),
    ("6b", "system-memory-consumer"),
    ("8", "paced-60fps-wait-mode"),
    ("9a", "four-verifying-consumers"),
    ("9b", "slow-latest-frame-viewer"),
    ("13a", "nvcodec-same-buffer"),
    ("13b", "nvcodec-cudaconvert"),
    ("13c", "nvcodec-cudaupload"),
    ("13d", "nvcodec-h264-decoder"),
    ("13e", "nvcodec-jpeg-decoder"),
    ("14", "streams-per-gpu"),
    ("14m", "streams-per-gpu-one-consumer-process"),
    ("14u", "streams-per-gpu-upstream"),
    ("15", "python-consumer"),
    ("15p", "python-producer"),
    ("15c", "cpp-consumer"),
    ("16a", "live-every-frame"),
    ("16b", "live-beside-slow-consumer"),
    ("16r", "python-one-frame-at-a-time"),
    ("16c", "python-batches"),
    ("17", "bridge-1080p"),
    ("17k", "bridge-4k"),
];

/// The id of a configuration: its first word.
pub fn id_of(config: &str) -> &str {
    config.split_whitespace().next().unwrap_or_default()
}

/// The name of the row of `config`, or its id when the row has none.
pub fn name_of(config: &str) -> &str {
    let id = id_of(config);
    ROW_NAMES
        .iter()
        .find(|(i, _)| *i == id)
        .map_or(id, |(_, name)| name)
}

/// `--rows`: an id as it is, a name as its id.
pub fn as_id(id_or_name: &str) -> String {
    ROW_NAMES
        .iter()
        .find(|(_, name)| *name == id_or_name)
        .map_or(id_or_name, |(id, _)| id)
        .to_string()
}

/// The three ways rows 13 take a producer's frames (the middle of a config).
pub const PAIR_ALONE: &str = "alone";
pub const PAIR_ALONE_QUEUED: &str = "alone, halves queued apart";
pub const PAIR_OURS: &str = "rscudaipc pair";
pub const PAIR_UPSTREAM: &str = "upstream import";

/// Rows 14: seconds of a trial (after every consumer's first frame) that
/// are not counted.
pub const STREAMS_SETTLE_S: f64 = 2.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_and_name_is_unique() {
        for (i, (id, name)) in ROW_NAMES.iter().enumerate() {
            for (other_id, other_name) in &ROW_NAMES[i + 1..] {
                assert_ne!(id, other_id);
                assert_ne!(name, other_name);
            }
        }
    }

    #[test]
    fn a_configuration_is_named_by_its_id_and_a_name_gives_the_id() {
        assert_eq!(name_of("5t default, transport only"), "pair-transport-only");
        assert_eq!(
            name_of("13b cudaconvert output > alone > drops"),
            "nvcodec-cudaconvert"
        );
        assert_eq!(name_of("99 unknown"), "99");
        assert_eq!(as_id("descriptor-channel"), "5d");
        assert_eq!(as_id("5d"), "5d");
    }
}
