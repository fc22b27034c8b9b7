// SPDX-License-Identifier: MPL-2.0

//! The ring depth `slots=0` stands for, and what it follows as the stream
//! goes on (frames paced or not, a lendable pool proposed or not): shared by
//! the publisher, which sizes its own ring with it, and its lending, which
//! sizes the upstream pool it lends from. Figures in docs/performance.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
}

impl RingDepth {
    pub(crate) fn new(kind: TransportKind, device: Option<Arc<Device>>, slots: usize) -> Self {
        Self {
            kind,
            device,
            slots,
            paced: AtomicBool::new(false),
            may_lend: AtomicBool::new(false),
        }
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
        let paced = self.paced.load(Ordering::Relaxed);
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
/// make the laps long; `paced` frames leave time between them, and 8 do:
/// enough, on a live channel, for several consumers each at its own pace to
/// hold a frame while the producer writes the next (and for one consumer
/// to hold 6). With MPS the kernels run side by side, and a shallow ring
/// keeps the frame in flight inside the L2 cache (and the latency low).
pub(crate) fn auto_slots(
    kind: TransportKind,
    device: Option<&Device>,
    frame_size: usize,
    paced: bool,
    may_lend: bool,
) -> usize {
    match (kind, device) {
        (_, _) if paced => 8,
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
    use super::deep_ring_slots;
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
}
