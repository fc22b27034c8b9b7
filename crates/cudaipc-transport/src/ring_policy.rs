// SPDX-License-Identifier: MPL-2.0

//! The ring's rules, in one place: how deep a producer's ring is, when it
//! grows, whether a lent ring fits, and when a consumer wraps a slot rather
//! than copying out of it. The channel crate keeps only the mechanism (a
//! slot count, a ring that may grow to `ring_grows_to`, the holds consumers
//! declare, and the protocol's `slots_for_hold`); every choice is made here
//! and tested as a table in `ring_policy/tests.rs`. Figures in
//! docs/performance.md; the rules in prose in docs/architecture.md ("The
//! ring").
//!
//! | depth | when | slots |
//! |---|---|---|
//! | fixed | `slots=N` | N (a lent pool: N, 2 at least) |
//! | live | frames paced (`slots=0`) | `LIVE_RING_SPAN_S` of frames, 4..16; 8 at least where contexts take turns on the GPU; 8 at an unknown rate |
//! | MPS | cuda, MPS, as fast as the pipeline runs | 2 |
//! | deep | cuda without MPS, as fast as the pipeline runs | `DEEP_RING_SHARE` of the device's memory, 8..64; 32 at most where a lent ring must fit beside it |
//! | host | host memory, as fast as the pipeline runs | 4 |
//! | lent | an upstream pool whose buffers may become the slots | the automatic depth, `AUTO_LENT_SLOTS_MIN` at least; never grows |
//! | grown for holds | an automatic ring of our own | what the consumers need (`slots_consumers_need`), up to `growth_limit` |

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::TransportKind;
use crate::cuda::Device;
use cudaipc_channel::layout::{MAX_SLOTS, slots_for_hold};

#[cfg(test)]
mod tests;

/// Where a ring's memory is, as far as its depth goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RingMemory {
    Host,
    /// Device memory; `None`: a device not known (no context yet).
    Cuda(Option<Gpu>),
}

/// What of a device a ring's depth follows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Gpu {
    /// The processes' contexts go through MPS: kernels run side by side.
    pub mps: bool,
    pub total_memory: usize,
}

impl RingMemory {
    pub(crate) fn of(kind: TransportKind, device: Option<&Device>) -> Self {
        match kind {
            TransportKind::Host => RingMemory::Host,
            TransportKind::Cuda => RingMemory::Cuda(device.map(|device| Gpu {
                mps: device.mps_enabled(),
                total_memory: device.total_memory(),
            })),
        }
    }

    /// The processes' contexts take turns on the GPU: CUDA without MPS (or
    /// a device not known yet).
    fn time_sliced(self) -> bool {
        matches!(self, RingMemory::Cuda(gpu) if gpu.is_none_or(|gpu| !gpu.mps))
    }
}

/// How a publisher's rings are sized, one per publisher, shared with its
/// lending (which sizes the upstream pool it lends from): `slots` as set,
/// or with 0 the automatic depth for what is known of the stream now
/// (frames paced or not and at what rate, a lendable pool proposed or not).
pub(crate) struct RingPolicy {
    memory: RingMemory,
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

impl RingPolicy {
    pub(crate) fn new(kind: TransportKind, device: Option<Arc<Device>>, slots: usize) -> Self {
        Self::for_memory(RingMemory::of(kind, device.as_deref()), slots)
    }

    pub(crate) fn for_memory(memory: RingMemory, slots: usize) -> Self {
        Self {
            memory,
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
    /// `consumers_need` ([`slots_consumers_need`]): the automatic depth, or
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

    /// How deep the ring may grow for declared holds (the channel's
    /// `ring_grows_to`): up to [`Self::growth_limit`] for an automatic ring
    /// of our own, 0 (fixed) for one set by `slots`.
    pub(crate) fn grows_to(&self, frame_size: usize) -> usize {
        match self.is_automatic() {
            true => self.growth_limit(frame_size),
            false => 0,
        }
    }

    /// The deepest an automatic ring grows to for declared holds: as deep as
    /// a ring that never lends may be on the device (the memory share), and
    /// `HOST_GROWTH_LIMIT` slots of host memory.
    pub(crate) fn growth_limit(&self, frame_size: usize) -> usize {
        match self.memory {
            RingMemory::Cuda(Some(gpu)) => deep_ring_slots(gpu.total_memory, frame_size, false),
            _ => HOST_GROWTH_LIMIT,
        }
    }

    /// Says at what rate paced frames come (frames a second; 0 or less:
    /// not known): a live ring holds `LIVE_RING_SPAN_S` of them.
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
        auto_slots(self.memory, frame_size, paced, may_lend)
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
/// ([`RingPolicy::own_for_consumers`]).
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
    memory: RingMemory,
    frame_size: usize,
    paced: Option<Option<f64>>,
    may_lend: bool,
) -> usize {
    if let Some(fps) = paced {
        return live_ring_slots(fps, memory.time_sliced());
    }
    match memory {
        RingMemory::Cuda(Some(gpu)) if gpu.mps => 2,
        RingMemory::Cuda(Some(gpu)) => deep_ring_slots(gpu.total_memory, frame_size, may_lend),
        RingMemory::Cuda(None) => 8,
        RingMemory::Host => 4,
    }
}

/// The slots the attached consumers need, from the `hold` each declared
/// (`None`: not declared), on a `live` channel or not: `slots_for_hold` of
/// the deepest declared hold (the frames kept, the one read, the one
/// written); on a live channel, where consumers at their own pace hold
/// frames at once, the frames each may hold (the one it reads and its
/// `hold`, or one more undeclared: a GStreamer sink keeps the last frame)
/// and the one written. `None`: no consumer needs any. The channel's
/// producer asks this (as its `SlotsNeeded`) before each reservation of a
/// ring that may grow.
pub fn slots_consumers_need(
    holds: &mut dyn Iterator<Item = Option<u32>>,
    live: bool,
) -> Option<usize> {
    let (mut deepest, mut together) = (None::<usize>, 0usize);
    for hold in holds {
        deepest = deepest.max(hold.map(slots_for_hold));
        together += 1 + hold.map_or(1, |h| h as usize).min(MAX_SLOTS);
    }
    let for_live = (live && together > 0).then_some(together + 1);
    deepest.max(for_live)
}

/// Whether a lent ring of `slots` (which never grows) fits every declared
/// hold (`slots_for_hold` of the deepest).
pub(crate) fn lent_ring_fits_holds(
    slots: usize,
    holds: &mut dyn Iterator<Item = Option<u32>>,
) -> bool {
    holds
        .flatten()
        .max()
        .is_none_or(|hold| slots_for_hold(hold) <= slots)
}

/// What a consumer knows of a frame it took when it decides to wrap its
/// slot or copy out of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrapOrCopy {
    /// The output can wrap a slot (CUDA memory its downstream takes as is,
    /// or host memory).
    pub wrappable: bool,
    /// The consumer takes the latest frame (`frames=latest`).
    pub latest: bool,
    /// The frames it declared it keeps (the property, or downstream's
    /// allocation query's minimum buffers, whichever is more; 0: none).
    pub hold: u32,
    /// The slots it holds now, this frame's included.
    pub held: usize,
    /// The ring's slots.
    pub slots: usize,
}

impl WrapOrCopy {
    /// Wrap the slot (zero copy) rather than copy the frame out. A wrapped
    /// slot stays with the consumer until downstream drops it; like v4l2src
    /// with its pool, it copies instead where it would otherwise leave the
    /// producer no slot to write into (a sink keeping its last buffer, a
    /// queue, `slots=1`). A consumer of the latest frame always copies: it
    /// promises never to hold the producer back, and a slow one (a viewer)
    /// would keep a slot for as long as downstream takes. Frames beyond a
    /// declared hold are copied, so that the ring fits every consumer's
    /// holds.
    pub fn wraps(&self) -> bool {
        let within_hold = self.hold == 0 || self.held <= self.hold as usize + 1;
        self.wrappable && !self.latest && within_hold && self.held < self.slots
    }
}
