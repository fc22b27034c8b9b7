// The control block: one shared mapping per channel, written by one producer
// and read (and partly written) by up to MAX_CONSUMERS consumers.
//
// Every field is an atomic, so that concurrent access from several processes
// is defined behaviour. Plain data is read with Relaxed loads under the
// protocol's own ordering (seqlocks, slot ownership); the rules are described
// in docs/protocol.md, which must change together with this file.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// "CUDAIPC\0" in little endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"CUDAIPC\0");
/// Bump on any change of the layout or of the rules.
pub const PROTOCOL_VERSION: u32 = 4;

/// Most slots a channel can have.
pub const MAX_SLOTS: usize = 64;
/// The slots a consumer's declared `hold` needs beside the frames it
/// keeps: the one it reads and the one the producer writes. Both sides
/// count with [`slots_for_hold`] (docs/protocol.md, "Holds").
pub const HOLD_SPARE_SLOTS: usize = 2;

/// The slots a ring needs for a consumer that declared it keeps `hold`
/// frames while it asks for the next one.
pub const fn slots_for_hold(hold: u32) -> usize {
    hold as usize + HOLD_SPARE_SLOTS
}

/// Most consumers attached at once (one bit each in `SlotRecord::holders`).
pub const MAX_CONSUMERS: usize = 32;
/// Room for the caps string, in bytes.
pub const CAPS_CAPACITY: usize = 4096;
/// Room for one slot's transport descriptor (memory + event IPC handles).
pub const SLOT_DESCRIPTOR_BYTES: usize = 128;
/// Room for one consumer's per-slot release descriptor (an event IPC handle).
pub const RELEASE_DESCRIPTOR_BYTES: usize = 64;
/// Room for the pool-wide transport descriptor (e.g. a host data file name).
pub const POOL_DESCRIPTOR_BYTES: usize = 128;
/// Length of the publication queue; a consumer that lags by more misses items.
pub const QUEUE_LEN: usize = 2 * MAX_SLOTS;
/// Most planes a frame can describe (GstVideoMeta has four).
pub const MAX_PLANES: usize = 4;
/// Room for one frame's data (its metas, an application's bytes) unless the
/// producer sets another: a few hundred detections. The area of every slot
/// index follows the header (`frame_data_offset`).
pub const DEFAULT_FRAME_DATA_BOUND: u32 = 16 * 1024;
/// Most a producer may give each frame's data: 64 slots of it stay well
/// within what a control block may map.
pub const MAX_FRAME_DATA_BOUND: u32 = 1 << 20;
/// Events (tags, stream-start, custom ones) kept for consumers that have
/// not taken them yet; an event overwrites the one this many before it.
pub const EVENT_RECORDS: usize = 16;
/// Room for one serialized event.
pub const EVENT_CAPACITY: usize = 4096;

// Slot indices must never collide with queue markers, and every consumer
// needs a bit in `SlotRecord::holders`.
const _: () = assert!(MAX_SLOTS < QUEUE_EVENT as usize);
const _: () = assert!(QUEUE_EVENT < QUEUE_EOS);
const _: () = assert!(MAX_CONSUMERS <= 64);

/// `ControlHeader::state`
pub const STATE_OPEN: u32 = 1;
pub const STATE_CLOSED: u32 = 2;
/// The producer ended and waits (bounded) for consumers to release its
/// frames: no consumer attaches, and one at its own pace on a live channel
/// skips to the end of what is left.
pub const STATE_CLOSING: u32 = 3;

/// `ControlHeader::transport`
pub const TRANSPORT_HOST: u32 = 1;
pub const TRANSPORT_CUDA: u32 = 2;

/// `ControlHeader::gpu_sync`
pub const GPU_SYNC_EVENT: u32 = 0;
pub const GPU_SYNC_HOST: u32 = 1;
pub const GPU_SYNC_TIMELINE: u32 = 2;

/// `ConsumerRecord::state`
pub const CONSUMER_FREE: u32 = 0;
pub const CONSUMER_ACTIVE: u32 = 1;

/// `ConsumerRecord::mode`: every frame in order; the producer waits for it
/// unless the channel is live (`ControlHeader::live`), where the consumer
/// keeps its own pace and misses the frames it cannot keep up with.
pub const MODE_AUTO: u32 = 0;
/// Only the newest frame; the producer never waits for it.
pub const MODE_LATEST: u32 = 1;
/// Every frame in order, live or not: the producer waits for it.
pub const MODE_EVERY_FRAME: u32 = 2;

/// Set in `SlotRecord::seq` while the producer owns the slot (empty, being
/// written, or reserved). A consumer never takes a slot in that state.
pub const SEQ_WRITING: u64 = 1 << 63;

/// Queue entries pack `seq << 8 | kind`, kind being a slot index or a marker.
pub const QUEUE_KIND_BITS: u32 = 8;
pub const QUEUE_EOS: u64 = 0xFF;
/// An event, in `ControlHeader::events[seq % EVENT_RECORDS]`.
pub const QUEUE_EVENT: u64 = 0xFE;

/// `u64::MAX` stands for "no timestamp" (GST_CLOCK_TIME_NONE).
pub const TIME_NONE: u64 = u64::MAX;

/// Byte offset of the producer's liveness lock in the control file; consumer
/// `i` locks byte `CONSUMER_LOCK_BASE + i`. The kernel drops these locks when
/// the holder dies, which makes liveness immune to pid reuse.
pub const PRODUCER_LOCK_BYTE: i64 = 0;
pub const CONSUMER_LOCK_BASE: i64 = 1;

#[repr(C)]
pub struct ControlHeader {
    // Identity: written before the file gets its public name, never after.
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub header_size: AtomicU32,
    pub total_size: AtomicU64,
    pub max_slots: AtomicU32,
    pub max_consumers: AtomicU32,
    pub slot_record_size: AtomicU32,
    pub consumer_record_size: AtomicU32,
    pub transport: AtomicU32,
    pub gpu_sync: AtomicU32,
    pub device_ordinal: AtomicU32,
    pub producer_pid: AtomicU32,
    pub device_uuid: [AtomicU64; 2],
    pub producer_start_time: AtomicU64,
    pub producer_pid_namespace: AtomicU64,
    pub producer_session: AtomicU64,
    /// Bytes of each slot's frame data area (a multiple of 8, at most
    /// MAX_FRAME_DATA_BOUND; 0: frames carry no data).
    pub frame_data_bound: AtomicU32,
    pub _pad_identity: AtomicU32,

    /// STATE_OPEN while the producer lives, STATE_CLOSING while it stops,
    /// STATE_CLOSED after a clean stop.
    pub state: AtomicU32,
    /// 1 while frames come paced (a live source, or a sink synchronised to a
    /// clock): the producer then waits only for `MODE_EVERY_FRAME`
    /// consumers. Written by the producer at any time.
    pub live: AtomicU32,

    // Slot pool: guarded by `pool_seqlock` (odd while being written).
    pub pool_seqlock: AtomicU64,
    pub pool_generation: AtomicU64,
    pub slot_size: AtomicU64,
    pub slot_count: AtomicU32,
    /// The most slots the producer's ring grows to for the holds its
    /// consumers declare (`ConsumerRecord::hold`); 0: the ring's depth is
    /// fixed (set, or lent by upstream). Written by the producer at any
    /// time, outside the seqlock. Padding (0) before it had a use, which
    /// reads as a fixed ring: no version change.
    pub ring_grows_to: AtomicU32,
    pub pool_descriptor: [AtomicU64; POOL_DESCRIPTOR_BYTES / 8],

    // Caps: guarded by `caps_seqlock`.
    pub caps_seqlock: AtomicU64,
    pub caps_generation: AtomicU64,
    pub caps_len: AtomicU32,
    pub _pad2: AtomicU32,
    pub caps: [AtomicU64; CAPS_CAPACITY / 8],

    // Publication: the producer writes `queue[seq % QUEUE_LEN]`, then
    // `published = seq + 1` with Release; consumers load it with Acquire.
    pub published: AtomicU64,
    pub queue: [AtomicU64; QUEUE_LEN],
    /// Bumped after every publication; consumers sleep on it (futex).
    pub publish_futex: AtomicU32,
    /// Number of consumers asleep on `publish_futex`.
    pub consumer_sleepers: AtomicU32,
    /// Bumped after every release; the producer sleeps on it.
    pub release_futex: AtomicU32,
    /// Non-zero while the producer sleeps on `release_futex`.
    pub producer_sleepers: AtomicU32,

    /// Producer statistics, for consumers and tools.
    pub frames_published: AtomicU64,
    pub frames_dropped: AtomicU64,
    /// Frames whose data did not fit `frame_data_bound` (published without).
    pub frame_data_dropped: AtomicU64,

    /// Events in the order of the queue: `events[seq % EVENT_RECORDS]`.
    pub events: [EventRecord; EVENT_RECORDS],
    pub slots: [SlotRecord; MAX_SLOTS],
    pub consumers: [ConsumerRecord; MAX_CONSUMERS],
}

#[repr(C)]
pub struct SlotRecord {
    /// Sequence number of the frame in the slot, or SEQ_WRITING.
    pub seq: AtomicU64,
    /// One bit per consumer that holds the slot.
    pub holders: AtomicU64,
    // Frame metadata, written while SEQ_WRITING is set.
    pub caps_generation: AtomicU64,
    pub pool_generation: AtomicU64,
    pub size: AtomicU64,
    pub pts: AtomicU64,
    pub dts: AtomicU64,
    pub duration: AtomicU64,
    pub offset: AtomicU64,
    pub offset_end: AtomicU64,
    pub publish_time_ns: AtomicU64,
    pub flags: AtomicU32,
    pub n_planes: AtomicU32,
    pub plane_offset: [AtomicU64; MAX_PLANES],
    pub plane_stride: [AtomicU32; MAX_PLANES],
    /// Bytes of the frame's data in the slot's frame data area.
    pub data_len: AtomicU32,
    pub _pad_data: AtomicU32,
    /// The frame's number: frames published on the channel before it. Its
    /// queue position (`seq`) counts events and ends of stream too.
    pub frame_number: AtomicU64,
    /// Transport handles of this slot; part of the pool (pool_seqlock).
    pub descriptor: [AtomicU64; SLOT_DESCRIPTOR_BYTES / 8],
}

/// One event of the queue. Guarded by `seqlock` (odd while written):
/// consumers read it without holding anything.
#[repr(C)]
pub struct EventRecord {
    pub seqlock: AtomicU64,
    /// Queue sequence number of the event held.
    pub seq: AtomicU64,
    pub len: AtomicU32,
    pub _pad: AtomicU32,
    pub bytes: [AtomicU64; EVENT_CAPACITY / 8],
}

#[repr(C)]
pub struct ConsumerRecord {
    pub state: AtomicU32,
    pub mode: AtomicU32,
    pub pid: AtomicU32,
    /// Number of valid entries in `release` (slots 0..release_count).
    pub release_count: AtomicU32,
    /// Frames the consumer declared it holds at once beyond the one it reads
    /// (`u32::MAX`: none declared). For messages and tools, and for a
    /// producer whose ring grows to fit it (`ControlHeader::ring_grows_to`).
    pub hold: AtomicU32,
    /// 1 when the consumer became ready with no frame published for it yet
    /// (its start is over: from then on it keeps its own pace); else 0.
    pub caught_up: AtomicU32,
    /// When the consumer attached (`CLOCK_MONOTONIC`, ns): on a live
    /// channel the producer waits for it while it starts, for a bounded time.
    pub attached_ns: AtomicU64,
    /// When the consumer became ready to take frames (`CLOCK_MONOTONIC`,
    /// ns; 0 while it starts: opens its device, its slots, its pipeline).
    pub ready_ns: AtomicU64,
    /// Random per attachment; tells the producer a record has a new owner.
    pub session: AtomicU64,
    /// Next sequence number this consumer wants (every-frame mode).
    pub cursor: AtomicU64,
    pub frames_received: AtomicU64,
    pub frames_missed: AtomicU64,
    /// Guards `release_generation` and `release`.
    pub release_seqlock: AtomicU64,
    pub release: [[AtomicU64; RELEASE_DESCRIPTOR_BYTES / 8]; MAX_SLOTS],
}

impl ControlHeader {
    pub fn slot(&self, index: usize) -> &SlotRecord {
        &self.slots[index]
    }
}

/// Writes `bytes` into a run of atomic words, zero-padding the rest.
pub fn store_bytes(words: &[AtomicU64], bytes: &[u8]) {
    debug_assert!(bytes.len() <= words.len() * 8);
    for (i, word) in words.iter().enumerate() {
        let mut chunk = [0u8; 8];
        let start = i * 8;
        if start < bytes.len() {
            let end = (start + 8).min(bytes.len());
            chunk[..end - start].copy_from_slice(&bytes[start..end]);
        }
        word.store(u64::from_le_bytes(chunk), Ordering::Relaxed);
    }
}

/// Reads `len` bytes from a run of atomic words.
pub fn load_bytes(words: &[AtomicU64], len: usize) -> Vec<u8> {
    let len = len.min(words.len() * 8);
    let mut out = Vec::with_capacity(len);
    for word in words {
        if out.len() >= len {
            break;
        }
        let chunk = word.load(Ordering::Relaxed).to_le_bytes();
        let take = (len - out.len()).min(8);
        out.extend_from_slice(&chunk[..take]);
    }
    out
}

pub const fn queue_entry(seq: u64, kind: u64) -> u64 {
    (seq << QUEUE_KIND_BITS) | kind
}

pub const fn queue_entry_seq(entry: u64) -> u64 {
    entry >> QUEUE_KIND_BITS
}

pub const fn queue_entry_kind(entry: u64) -> u64 {
    entry & ((1 << QUEUE_KIND_BITS) - 1)
}

/// Size of the control block's header: the control file's first bytes.
pub const fn control_size() -> usize {
    std::mem::size_of::<ControlHeader>()
}

/// Size of a control file whose slots carry up to `frame_data_bound` bytes
/// of frame data each: the header, then one area per slot index.
pub const fn control_file_size(frame_data_bound: u32) -> usize {
    control_size() + MAX_SLOTS * frame_data_bound as usize
}

/// Where slot `slot`'s frame data area starts in the control file.
pub const fn frame_data_offset(slot: usize, frame_data_bound: u32) -> usize {
    control_size() + slot * frame_data_bound as usize
}

/// Whether a mapped control file of `len` bytes matches what its header
/// says of its size, and which frame data bound it has then.
pub fn checked_frame_data_bound(h: &ControlHeader, len: usize) -> Option<u32> {
    let bound = h.frame_data_bound.load(Ordering::Relaxed);
    let total = h.total_size.load(Ordering::Relaxed);
    (is_valid_frame_data_bound(bound)
        && total == control_file_size(bound) as u64
        && len as u64 >= total)
        .then_some(bound)
}

/// Whether a producer may give frames `bound` bytes of data each.
pub const fn is_valid_frame_data_bound(bound: u32) -> bool {
    bound <= MAX_FRAME_DATA_BOUND && bound % 8 == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_through_words() {
        let words: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(u64::MAX)).collect();
        let text = b"video/x-raw, width=(int)3";
        store_bytes(&words, text);
        assert_eq!(load_bytes(&words, text.len()), text);
        // The padding is zeroed, so stale bytes never leak past `len`.
        assert_eq!(load_bytes(&words, 32)[text.len()..], [0u8; 7]);
    }

    #[test]
    fn queue_entries_pack_seq_and_kind() {
        let entry = queue_entry(123_456_789, 7);
        assert_eq!(queue_entry_seq(entry), 123_456_789);
        assert_eq!(queue_entry_kind(entry), 7);
        assert_eq!(queue_entry_kind(queue_entry(5, QUEUE_EOS)), QUEUE_EOS);
    }

    #[test]
    fn layout_is_stable_and_aligned() {
        assert_eq!(std::mem::align_of::<ControlHeader>(), 8);
        assert_eq!(std::mem::size_of::<SlotRecord>() % 8, 0);
        assert_eq!(std::mem::size_of::<ConsumerRecord>() % 8, 0);
        // The whole block stays well under a megabyte.
        assert!(control_size() < 1 << 20, "{}", control_size());
    }
}
