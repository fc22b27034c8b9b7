// SPDX-License-Identifier: MPL-2.0

//! The few fields of a channel's caps that make good labels: format,
//! width, height and frame rate. The caps are the producer's text, so a
//! value that is long or holds anything but the characters of such fields
//! is left out rather than passed on as a label.

/// The labels' names, in order.
pub const FIELDS: [&str; 4] = ["format", "width", "height", "framerate"];

/// The longest value kept.
const MAX_VALUE: usize = 32;

/// `FIELDS`' values in `caps` (GStreamer's caps string: `video/x-raw,
/// format=(string)RGB, width=(int)64, ...`); `""` for one that is missing
/// or not a plain value.
pub fn labels(caps: Option<&str>) -> [String; 4] {
    let mut values: [String; 4] = Default::default();
    // The first structure only: a producer's caps are fixed, one structure.
    let Some(structure) = caps.and_then(|c| c.split(';').next()) else {
        return values;
    };
    for field in structure.split(',').skip(1) {
        let Some((key, value)) = field.split_once('=') else {
            continue;
        };
        let Some(index) = FIELDS.iter().position(|f| *f == key.trim()) else {
            continue;
        };
        let value = value.trim();
        // `(int)64` or plain `64`.
        let value = match value.strip_prefix('(').and_then(|v| v.split_once(')')) {
            Some((_, v)) => v.trim(),
            None => value,
        };
        let plain = value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_/.-".contains(c));
        if plain && !value.is_empty() && value.len() <= MAX_VALUE {
            values[index] = value.to_owned();
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_of_a_producers_caps() {
        let caps = "video/x-raw(memory:CUDAMemory), format=(string)RGB, width=(int)3840, height=(int)2160, framerate=(fraction)30/1, multiview-mode=(string)mono";
        assert_eq!(labels(Some(caps)), ["RGB", "3840", "2160", "30/1"]);
    }

    #[test]
    fn a_missing_or_odd_field_is_empty() {
        assert_eq!(labels(None), ["", "", "", ""]);
        assert_eq!(
            labels(Some("video/x-raw, width=(int)64")),
            ["", "64", "", ""]
        );
        let hostile = format!(
            "video/x-raw, format=(string)\"a\\\"b\", width=(int){}, height=(int)4 8",
            "9".repeat(40)
        );
        assert_eq!(labels(Some(&hostile)), ["", "", "", ""]);
    }
}
