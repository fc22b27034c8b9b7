// SPDX-License-Identifier: MPL-2.0

//! The ring depth `slots=0` stands for, and what it follows as the stream
//! goes on (frames paced or not and at what rate, a lendable pool proposed
//! or not, the holds consumers declare): shared by
//! the publisher, which sizes its own ring with it, and its lending, which
//! sizes the upstream pool it lends from. Figures in docs/performance.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::TransportKind;
use crate::cuda::Device;
use cudaipc_channel::layout::MAX_SLOTS;

/// How many slots a publisher's rings get: `slots` as set, or with 0 the
/// automatic depth for what is known of the stream now.
pub(crate) struct RingDepth {
    kind: TransportKind,
    device: Option<Arc<Device>>,
    /// Slots per set as configured; 0: automatic.
    slots: usize,
    /// Frames come paced (a clock, a live source): no deep ring is needed.
    paced: AtomicBool,
    /// An upstream pool whose buffers may become the slots was proposed:
    /// the own ring leaves room for as many lent slots.
    may_lend: AtomicBool,
    /// The frame rate of paced frames in thousandths of a frame a second
    /// (0: not known).
    frame_rate_milli: AtomicU32,
}

impl RingDepth {
    pub(crate) fn new(kind: TransportKind, device: Option<Arc<Device>>, slots: usize) -> Self {
        Self {
            kind,
            device,
            slots,
            paced: AtomicBool::new(false),
            may_lend: AtomicBool::new(false),
            frame_rate_milli: AtomicU32::new(0),
        }
    }

    /// Whether the depth is automatic (`slots=0`): only then does it follow
    /// the stream and the consumers' declared holds.
    pub(crate) fn is_automatic(&self) -> bool {
        self.slots == 0
    }

    /// The slots of our own ring where the attached consumers need
    /// `consumers_need` (their declared holds, their number on a live
    /// channel: `Producer::slots_consumers_need`): the automatic depth, or
    /// deeper where they need it, up to [`Self::growth_limit`]; `slots` as
    /// set otherwise.
    pub(crate) fn own_for_consumers(
        &self,
        frame_size: usize,
        consumers_need: Option<usize>,
    ) -> usize {
        let depth = self.own(frame_size);
        match consumers_need {
            Some(wanted) if self.is_automatic() => {
                depth.max(wanted.min(self.growth_limit(frame_size)))
            }
            _ => depth,
        }
    }

    /// The deepest an automatic ring grows to for declared holds: as deep as
    /// a ring that never lends may be on the device (the memory share), and
    /// `HOST_GROWTH_LIMIT` slots of host memory.
    pub(crate) fn growth_limit(&self, frame_size: usize) -> usize {
        match (self.kind, self.device.as_deref()) {
            (TransportKind::Cuda, Some(device)) => {
                deep_ring_slots(device.total_memory(), frame_size, false)
            }
            _ => HOST_GROWTH_LIMIT,
        }
    }

    /// Says at what rate paced frames come (frames a second; 0 or less:
    /// not known): a live ring holds `LIVE_RING_SPAN` of them.
    pub(crate) fn set_frame_rate(&self, fps: f64) {
        let milli = if fps.is_finite() && fps > 0.0 {
            (fps * 1000.0).min(u32::MAX as f64) as u32
        } else {
            0
        };
        self.frame_rate_milli.store(milli, Ordering::Relaxed);
    }

    /// The slots a set of our own has for frames of `frame_size` bytes.
    pub(crate) fn own(&self, frame_size: usize) -> usize {
        match self.slots {
            0 => self.automatic(frame_size, self.may_lend.load(Ordering::Relaxed)),
            n => n,
        }
    }

    /// The buffers of an upstream pool whose buffers may be lent as slots:
    /// the slots set, or with `slots=0` the automatic depth of a ring that
    /// leaves room for as many lent slots, but at least
    /// `AUTO_LENT_SLOTS_MIN`; two at least, since the sink keeps the buffer
    /// it rendered last and upstream must have another to write into.
    pub(crate) fn lent(&self, frame_size: usize) -> usize {
        match self.slots {
            0 => self.automatic(frame_size, true).max(AUTO_LENT_SLOTS_MIN),
            n => n.max(2),
        }
    }

    /// The depth `slots=0` stands for now; `may_lend`: leaving room for as
    /// many lent slots.
    fn automatic(&self, frame_size: usize, may_lend: bool) -> usize {
        let paced = self.paced.load(Ordering::Relaxed).then(|| {
            let milli = self.frame_rate_milli.load(Ordering::Relaxed);
            (milli > 0).then(|| f64::from(milli) / 1000.0)
        });
        auto_slots(
            self.kind,
            self.device.as_deref(),
            frame_size,
            paced,
            may_lend,
        )
    }

    pub(crate) fn set_paced(&self, paced: bool) {
        self.paced.store(paced, Ordering::Relaxed);
    }

    pub(crate) fn is_paced(&self) -> bool {
        self.paced.load(Ordering::Relaxed)
    }

    /// Says whether an upstream pool whose buffers may become the slots is
    /// proposed; the own ring follows at its next allocation.
    pub(crate) fn set_may_lend(&self, may_lend: bool) {
        self.may_lend.store(may_lend, Ordering::Relaxed);
    }
}

/// The deepest a ring of host memory grows to for declared holds.
const HOST_GROWTH_LIMIT: usize = 16;

/// The time of frames a live ring holds: 8 frames at 60 FPS, the depth the
/// consumers at their own pace of rows 16 ran with. A consumer at its own
/// pace may fall this far behind before it misses a frame.
const LIVE_RING_SPAN_S: f64 = 0.1333;

/// The slots of a live ring for frames at `fps` (`None`: not known, 8):
/// `LIVE_RING_SPAN_S` of frames, 16 at most, and at least 4 (host memory,
/// MPS) or, where the processes' contexts take turns on the GPU
/// (`time_sliced`), 8: a consumer's read of a slot may then run long after
/// it took the frame, and the producer's next write into the slot waits
/// for it (row 14 at 100 streams on an H200 had late frames with 4 slots
/// and none with 8). Consumers that need more (each holds the frame it
/// reads, some declare holds) grow the ring
/// (`RingDepth::own_for_consumers`).
pub(crate) fn live_ring_slots(fps: Option<f64>, time_sliced: bool) -> usize {
    let least = if time_sliced { 8 } else { 4 };
    match fps {
        Some(fps) => ((fps * LIVE_RING_SPAN_S).ceil() as usize).clamp(least, 16),
        None => 8,
    }
}

/// How many buffers an upstream pool whose buffers may be lent as slots
/// gets with `slots=0`, at least: with MPS, a consumer feeding GStreamer's
/// `cudaconvert` from lent 4K slots ran 13% faster with four than with two
/// (and one that drops frames as fast), see docs/performance.md.
const AUTO_LENT_SLOTS_MIN: usize = 4;

/// The share of the device's memory a deep ring may fill: 5%, 4 GB of an
/// 80 GB card (64 4K RGB slots take 1.6 GB), 800 MB of a 16 GB one.
const DEEP_RING_SHARE: usize = 20;

/// The slots of a ring without MPS, for frames that come as fast as the
/// pipeline runs: as many as `DEEP_RING_SHARE` of the device's
/// `total_memory` holds, at least 8. At most `MAX_SLOTS` when the slots
/// are never lent; half of it when an upstream pool may lend its buffers,
/// so that a lent ring as deep fits beside it (lent slots follow the slots
/// they replace in one set).
pub(crate) fn deep_ring_slots(total_memory: usize, frame_size: usize, may_lend: bool) -> usize {
    let most = if may_lend { MAX_SLOTS / 2 } else { MAX_SLOTS };
    (total_memory / DEEP_RING_SHARE / frame_size.max(1)).clamp(8, most)
}

/// The ring depth `slots=0` stands for, for frames of `frame_size` bytes.
/// Without MPS the two processes' contexts take turns on the GPU, each turn
/// change costs the GPU a fixed time, and each lap of the ring needs two:
/// for frames that come as fast as the pipeline runs, [`deep_ring_slots`]
/// make the laps long; `paced` frames (`Some`, with their rate if known)
/// leave time between them, and [`live_ring_slots`] do: a consumer at its
/// own pace finds the frames of the last `LIVE_RING_SPAN_S` (8 at least
/// where contexts take turns on the GPU). With MPS the
/// kernels run side by side, and a shallow ring keeps the frame in flight
/// inside the L2 cache (and the latency low).
pub(crate) fn auto_slots(
    kind: TransportKind,
    device: Option<&Device>,
    frame_size: usize,
    paced: Option<Option<f64>>,
    may_lend: bool,
) -> usize {
    if let Some(fps) = paced {
        // The contexts take turns on the GPU: CUDA without MPS.
        let time_sliced =
            kind == TransportKind::Cuda && device.is_none_or(|device| !device.mps_enabled());
        return live_ring_slots(fps, time_sliced);
    }
    match (kind, device) {
        (TransportKind::Cuda, Some(device)) if device.mps_enabled() => 2,
        (TransportKind::Cuda, Some(device)) => {
            deep_ring_slots(device.total_memory(), frame_size, may_lend)
        }
        (TransportKind::Cuda, None) => 8,
        (TransportKind::Host, _) => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::{deep_ring_slots, live_ring_slots};
    use cudaipc_channel::layout::MAX_SLOTS;

    const GB: usize = 1_000_000_000;
    const RGB_4K: usize = 3840 * 2160 * 3;

    #[test]
    fn a_ring_that_never_lends_takes_every_record_where_5_percent_of_the_device_holds_them() {
        // An 80 GB card: 64 4K RGB frames, 1.6 GB.
        assert_eq!(deep_ring_slots(80 * GB, RGB_4K, false), MAX_SLOTS);
        // A 16 GB card: 5% of it, 32 frames.
        assert_eq!(deep_ring_slots(16 * GB, RGB_4K, false), 32);
        assert!(deep_ring_slots(16 * GB, RGB_4K, false) * RGB_4K <= 16 * GB / 20);
        // A 24 GB card: 48.
        assert_eq!(deep_ring_slots(24 * GB, RGB_4K, false), 48);
    }

    #[test]
    fn a_ring_that_may_lend_leaves_room_for_as_many_lent_slots() {
        assert_eq!(deep_ring_slots(80 * GB, RGB_4K, true), MAX_SLOTS / 2);
        assert_eq!(
            deep_ring_slots(80 * GB, 640 * 480 * 3 / 2, true),
            MAX_SLOTS / 2
        );
        assert!(2 * deep_ring_slots(80 * GB, 640 * 480 * 3 / 2, true) <= MAX_SLOTS);
    }

    #[test]
    fn a_deep_ring_has_8_slots_at_least() {
        // 8K RGBA on a 16 GB card: 6 fit in 5%.
        assert_eq!(deep_ring_slots(16 * GB, 7680 * 4320 * 4, false), 8);
        assert_eq!(deep_ring_slots(0, RGB_4K, false), 8);
    }

    #[test]
    fn a_live_ring_holds_a_tenth_of_a_second_and_more_of_frames() {
        // 4K@30 on host memory or under MPS: 4 slots (100 MB), not 8.
        assert_eq!(live_ring_slots(Some(30.0), false), 4);
        assert_eq!(live_ring_slots(Some(25.0), false), 4);
        assert_eq!(live_ring_slots(Some(60.0), false), 8);
        assert_eq!(live_ring_slots(Some(120.0), false), 16);
        assert_eq!(live_ring_slots(Some(1000.0), false), 16);
        assert_eq!(live_ring_slots(Some(1.0), false), 4);
        assert_eq!(live_ring_slots(None, false), 8);
        // Contexts that take turns on the GPU: 8 at least.
        assert_eq!(live_ring_slots(Some(30.0), true), 8);
        assert_eq!(live_ring_slots(Some(120.0), true), 16);
    }
}
