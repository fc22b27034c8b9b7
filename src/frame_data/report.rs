// SPDX-License-Identifier: MPL-2.0

//! What crossed with the frames and what did not: counts for the elements'
//! `stats`, and one debug line per meta name that could not cross.

use std::collections::{BTreeMap, HashSet};

use super::CAT;

/// Names counted one by one at most; the rest under [`OTHER_NAMES`] (the
/// names come from another process).
const MAX_NAMES: usize = 64;
/// Where names past [`MAX_NAMES`] are counted.
pub const OTHER_NAMES: &str = "other";

/// Why a meta did not cross.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotCrossed {
    /// Producer: its `GstMetaInfo` has no `serialize_func`.
    NotSerializable,
    /// Producer on GStreamer 1.22, which serializes no meta: the plugin
    /// writes only reference timestamp and custom metas itself.
    NeedsGst124,
    /// Producer: its serializer refused it (a custom meta holding an object
    /// or a pointer, which `GST_SERIALIZE_FLAG_STRICT` refuses).
    SerializeFailed,
    /// Producer: the frame's data bound was full.
    Bound,
    /// Producer: an application's `CudaIpcFrameData` whose `bytes` is not a
    /// GBytes or whose `json` is not a string.
    WrongFieldType,
    /// Consumer: no meta of that name is registered in this process, and
    /// none could be loaded.
    UnknownHere,
    /// Consumer: registered, but this GStreamer cannot deserialize it (1.22:
    /// any but reference timestamp and custom metas).
    NoDeserializer,
    /// Consumer: the deserializer refused its payload.
    DeserializeFailed,
    /// Either side: it describes its own process's memory (a "memory"
    /// tagged meta: GstVideoMeta, CudaIpcMeta); the consumer's buffer has
    /// its own.
    Local,
}

impl NotCrossed {
    pub fn why(self) -> &'static str {
        match self {
            NotCrossed::NotSerializable => "its GstMetaInfo has no serialize function",
            NotCrossed::NeedsGst124 => {
                "GStreamer 1.22 serializes no meta (1.24+ does); only reference timestamp and custom metas cross from 1.22"
            }
            NotCrossed::SerializeFailed => {
                "its serializer refused it (a field holding an object or a pointer?)"
            }
            NotCrossed::Bound => "the frame's data bound was full",
            NotCrossed::WrongFieldType => {
                "CudaIpcFrameData's `bytes` must be a GBytes and its `json` a string"
            }
            NotCrossed::UnknownHere => {
                "no meta of that name is registered in this process (load the library that defines it before the source starts)"
            }
            NotCrossed::NoDeserializer => "this GStreamer cannot deserialize it",
            NotCrossed::DeserializeFailed => "its deserializer refused the payload",
            NotCrossed::Local => "it describes the producer's own memory",
        }
    }
}

/// Counts of what travelled with the frames, for the elements' `stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrameDataStats {
    /// Metas written into frame data (producer) or added to buffers
    /// (consumer).
    pub metas: u64,
    /// Application data entries (`CudaIpcFrameData`) written or added.
    pub app_entries: u64,
    /// Metas that did not cross, by name ("memory" tagged ones excepted).
    pub not_crossed: BTreeMap<String, u64>,
    /// "memory" tagged metas, which stay in their process by design.
    pub local: u64,
    /// Entries (or whole frame data) refused as malformed.
    pub hostile: u64,
    /// Entries of kinds this build does not know (a newer producer's).
    pub unknown_entries: u64,
    /// Bytes of entries the bound refused.
    pub bytes_dropped: u64,
}

impl FrameDataStats {
    /// Adds the counts to an element's `stats` structure, as
    /// `frame-data-*` fields; `frame-data-not-crossed` is a structure of
    /// counts by meta name.
    pub fn write_to(&self, stats: &mut gst::StructureRef) {
        let mut not_crossed = gst::Structure::new_empty("not-crossed");
        for (name, count) in &self.not_crossed {
            not_crossed.set(name.as_str(), *count);
        }
        stats.set("frame-data-metas", self.metas);
        stats.set("frame-data-app-entries", self.app_entries);
        stats.set("frame-data-not-crossed", not_crossed);
        stats.set("frame-data-local-metas", self.local);
        stats.set("frame-data-hostile", self.hostile);
        stats.set("frame-data-unknown-entries", self.unknown_entries);
        stats.set("frame-data-bytes-dropped", self.bytes_dropped);
    }
}

/// What one element's frames carried: [`FrameDataStats`] and the names
/// already said.
#[derive(Debug, Default)]
pub struct MetaReport {
    stats: FrameDataStats,
    said: HashSet<String>,
}

impl MetaReport {
    pub fn stats(&self) -> &FrameDataStats {
        &self.stats
    }

    /// Afresh (the elements' `reset-stats`); names are said again.
    pub fn reset(&mut self) {
        *self = MetaReport::default();
    }

    pub(super) fn crossed(&mut self) {
        self.stats.metas += 1;
    }

    pub(super) fn app_entry(&mut self) {
        self.stats.app_entries += 1;
    }

    pub(super) fn dropped(&mut self, bytes: usize) {
        self.stats.bytes_dropped = self.stats.bytes_dropped.saturating_add(bytes as u64);
    }

    pub(super) fn unknown_entries(&mut self, count: u32) {
        self.stats.unknown_entries += u64::from(count);
    }

    /// A meta named `name` that did not cross, said once per name.
    pub(super) fn not_crossed(&mut self, name: &str, why: NotCrossed) {
        if why == NotCrossed::Local {
            self.stats.local += 1;
        } else {
            let known = self.stats.not_crossed.contains_key(name);
            let key = match known || self.stats.not_crossed.len() < MAX_NAMES {
                true => name,
                false => OTHER_NAMES,
            };
            *self.stats.not_crossed.entry(key.to_owned()).or_default() += 1;
        }
        if self.said.len() < MAX_NAMES && self.said.insert(name.to_owned()) {
            gst::debug!(CAT, "meta {name} does not cross: {}", why.why());
        }
    }

    /// Something malformed from the other side, said once per kind of
    /// fault.
    pub(super) fn hostile(&mut self, what: &dyn std::fmt::Display) {
        self.stats.hostile += 1;
        let what = what.to_string();
        if self.said.len() < MAX_NAMES && self.said.insert(format!("hostile: {what}")) {
            gst::debug!(CAT, "refused frame data: {what}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_counted_up_to_a_limit() {
        let mut report = MetaReport::default();
        for i in 0..MAX_NAMES + 10 {
            report.not_crossed(&format!("Meta{i}"), NotCrossed::UnknownHere);
        }
        report.not_crossed("Meta0", NotCrossed::UnknownHere);
        report.not_crossed("GstVideoMeta", NotCrossed::Local);
        let stats = report.stats();
        assert_eq!(stats.not_crossed.len(), MAX_NAMES + 1);
        assert_eq!(stats.not_crossed["Meta0"], 2);
        assert_eq!(stats.not_crossed[OTHER_NAMES], 10);
        assert_eq!(stats.local, 1);
        report.reset();
        assert_eq!(report.stats(), &FrameDataStats::default());
    }

    #[test]
    fn stats_become_structure_fields() {
        gst::init().unwrap();
        let mut report = MetaReport::default();
        report.crossed();
        report.dropped(100);
        report.not_crossed("GstParentBufferMeta", NotCrossed::NotSerializable);
        let mut stats = gst::Structure::new_empty("stats");
        report.stats().write_to(&mut stats);
        assert_eq!(stats.get::<u64>("frame-data-metas").unwrap(), 1);
        assert_eq!(stats.get::<u64>("frame-data-bytes-dropped").unwrap(), 100);
        let not_crossed = stats
            .get::<gst::Structure>("frame-data-not-crossed")
            .unwrap();
        assert_eq!(not_crossed.get::<u64>("GstParentBufferMeta").unwrap(), 1);
    }
}
