// SPDX-License-Identifier: MPL-2.0

//! An application's data per frame: published with a frame, read with it,
//! bounded by the channel's `frame_data_bound`. A GStreamer consumer
//! (`rscudaipcsrc`) sees it as a `CudaIpcFrameData` custom meta (field
//! `bytes` or `json`), and data a pipeline attached that way reaches this
//! API's frames.

use cudaipc_channel::frame_data::{self, EntryKind, FrameDataWriter};

/// Data published with one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppData {
    /// Opaque bytes.
    Bytes(Vec<u8>),
    /// JSON text (Python's dicts travel so).
    Json(String),
}

impl AppData {
    /// The frame data blob carrying it, if it fits `bound` bytes.
    pub(crate) fn encode(&self, bound: usize) -> Result<Vec<u8>, crate::Error> {
        let (kind, bytes) = match self {
            AppData::Bytes(bytes) => (EntryKind::AppBytes, bytes.as_slice()),
            AppData::Json(text) => (EntryKind::AppJson, text.as_bytes()),
        };
        let mut writer = FrameDataWriter::new(bound);
        writer
            .push(kind, bytes)
            .map_err(|_| crate::Error::FrameDataTooLarge {
                len: bytes.len(),
                bound: bound.saturating_sub(frame_data::HEADER_LEN + frame_data::ENTRY_HEADER_LEN),
            })?;
        Ok(writer.finish())
    }

    /// The application's entry of a frame's data blob (the first), if it
    /// has one. The blob is another process's: a bad one yields what was
    /// whole before the damage (JSON that is not UTF-8 is dropped).
    pub(crate) fn decode(blob: &[u8]) -> Option<AppData> {
        frame_data::entries(blob).find_map(|entry| match entry.kind {
            EntryKind::AppBytes => Some(AppData::Bytes(entry.bytes.to_vec())),
            EntryKind::AppJson => std::str::from_utf8(entry.bytes)
                .ok()
                .map(|text| AppData::Json(text.to_owned())),
            EntryKind::GstMeta => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_json_round_trip_and_too_much_is_refused_with_the_room() {
        for data in [
            AppData::Bytes(vec![1, 2, 3]),
            AppData::Json(r#"{"boxes": [[1, 2, 3, 4]]}"#.into()),
            AppData::Bytes(Vec::new()),
        ] {
            let blob = data.encode(1024).unwrap();
            assert_eq!(AppData::decode(&blob), Some(data));
        }
        let err = AppData::Bytes(vec![0; 1024]).encode(1024).unwrap_err();
        assert!(
            matches!(err, crate::Error::FrameDataTooLarge { len: 1024, bound } if bound < 1024),
            "{err:?}"
        );
        assert_eq!(AppData::decode(b"garbage"), None);
        assert_eq!(AppData::decode(&[]), None);
    }
}
