// SPDX-License-Identifier: MPL-2.0

//! The ring policy as tables: every depth (fixed, live, MPS, deep, host,
//! lent, grown for holds), what the consumers need, and wrap or copy.

use super::{
    Gpu, RingMemory, RingPolicy, WrapOrCopy, deep_ring_slots, lent_ring_fits_holds,
    live_ring_slots, slots_consumers_need,
};
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

const HOST: RingMemory = RingMemory::Host;
const H100: RingMemory = RingMemory::Cuda(Some(Gpu {
    mps: false,
    total_memory: 80 * GB,
}));
const H100_MPS: RingMemory = RingMemory::Cuda(Some(Gpu {
    mps: true,
    total_memory: 80 * GB,
}));
const NO_DEVICE_YET: RingMemory = RingMemory::Cuda(None);

/// How the stream looks to the policy in a row of the table.
#[derive(Debug, Clone, Copy)]
enum Stream {
    AsFast,
    /// Paced, at a rate (0: not known).
    Paced(f64),
    /// As fast, and an upstream pool that may lend its buffers is proposed.
    MayLend,
}

fn policy(memory: RingMemory, slots: usize, stream: Stream) -> RingPolicy {
    let policy = RingPolicy::for_memory(memory, slots);
    match stream {
        Stream::AsFast => {}
        Stream::Paced(fps) => {
            policy.set_paced(true);
            policy.set_frame_rate(fps);
        }
        Stream::MayLend => policy.set_may_lend(true),
    }
    policy
}

#[test]
fn every_depth_of_the_table() {
    use Stream::{AsFast, MayLend, Paced};
    // (memory, slots setting, stream) -> (own ring, lent pool, grows to)
    let table: [(RingMemory, usize, Stream, usize, usize, usize); 19] = [
        // Fixed: as set, whatever the stream; a lent pool of 2 at least.
        (H100, 3, AsFast, 3, 3, 0),
        (H100_MPS, 1, Paced(30.0), 1, 2, 0),
        (HOST, 6, MayLend, 6, 6, 0),
        // Host memory: 4 as fast as the pipeline runs, live by rate.
        (HOST, 0, AsFast, 4, 4, 16),
        (HOST, 0, Paced(30.0), 4, 4, 16),
        (HOST, 0, Paced(60.0), 8, 8, 16),
        (HOST, 0, Paced(0.0), 8, 8, 16),
        // MPS: 2, a lent pool of 4; live without time slices: 4 at 30 FPS.
        (H100_MPS, 0, AsFast, 2, 4, MAX_SLOTS),
        (H100_MPS, 0, Paced(30.0), 4, 4, MAX_SLOTS),
        (H100_MPS, 0, MayLend, 2, 4, MAX_SLOTS),
        // Without MPS: deep (5% of the card, 64 4K frames), half where a
        // lent ring must fit beside it; live: 8 at least.
        (H100, 0, AsFast, MAX_SLOTS, MAX_SLOTS / 2, MAX_SLOTS),
        (H100, 0, MayLend, MAX_SLOTS / 2, MAX_SLOTS / 2, MAX_SLOTS),
        (H100, 0, Paced(30.0), 8, 8, MAX_SLOTS),
        (H100, 0, Paced(60.0), 8, 8, MAX_SLOTS),
        (H100, 0, Paced(120.0), 16, 16, MAX_SLOTS),
        (H100, 0, Paced(0.0), 8, 8, MAX_SLOTS),
        // No device known yet: 8, and contexts count as taking turns.
        (NO_DEVICE_YET, 0, AsFast, 8, 8, 16),
        (NO_DEVICE_YET, 0, Paced(30.0), 8, 8, 16),
        (NO_DEVICE_YET, 0, MayLend, 8, 8, 16),
    ];
    for (memory, slots, stream, own, lent, grows_to) in table {
        let p = policy(memory, slots, stream);
        let row = format!("{memory:?} slots={slots} {stream:?}");
        assert_eq!(p.own(RGB_4K), own, "own ring, {row}");
        assert_eq!(p.lent(RGB_4K), lent, "lent pool, {row}");
        assert_eq!(p.grows_to(RGB_4K), grows_to, "grows to, {row}");
        assert_eq!(p.is_automatic(), slots == 0, "{row}");
    }
}

#[test]
fn an_automatic_ring_grows_for_what_consumers_need_up_to_its_limit_and_a_fixed_one_does_not() {
    // (memory, slots setting, consumers need) -> own ring
    let table = [
        (HOST, 0, None, 4),
        (HOST, 0, Some(3), 4),
        (HOST, 0, Some(10), 10),
        (HOST, 0, Some(40), 16),
        (H100_MPS, 0, Some(8), 8),
        (H100_MPS, 0, Some(200), MAX_SLOTS),
        (H100, 0, Some(8), MAX_SLOTS),
        (HOST, 4, Some(10), 4),
        (H100_MPS, 2, Some(8), 2),
    ];
    for (memory, slots, need, own) in table {
        let p = policy(memory, slots, Stream::AsFast);
        assert_eq!(
            p.own_for_consumers(RGB_4K, need),
            own,
            "{memory:?} slots={slots} need {need:?}"
        );
    }
}

#[test]
fn what_the_attached_consumers_need() {
    // (declared holds, live) -> slots
    type Row = (&'static [Option<u32>], bool, Option<usize>);
    let table: [Row; 9] = [
        (&[], false, None),
        (&[], true, None),
        // Undeclared: nothing on a channel that is not live; live: the
        // frame it reads, the one a sink keeps, the one written.
        (&[None], false, None),
        (&[None], true, Some(3)),
        // Declared: the frames kept, the one read, the one written.
        (&[Some(6)], false, Some(8)),
        (&[Some(6)], true, Some(8)),
        (&[Some(0)], false, Some(2)),
        // Live consumers hold at once: their frames together, and one.
        (&[Some(3), None, Some(1)], false, Some(5)),
        (&[Some(3), None, Some(1)], true, Some(9)),
    ];
    for (holds, live, need) in table {
        assert_eq!(
            slots_consumers_need(&mut holds.iter().copied(), live),
            need,
            "holds {holds:?}, live {live}"
        );
    }
}

#[test]
fn a_lent_ring_fits_the_deepest_declared_hold_and_two() {
    let table: [(usize, &[Option<u32>], bool); 6] = [
        (4, &[], true),
        (4, &[None], true),
        (4, &[Some(2)], true),
        (4, &[Some(3)], false),
        (4, &[Some(1), Some(3), None], false),
        (5, &[Some(1), Some(3), None], true),
    ];
    for (slots, holds, fits) in table {
        assert_eq!(
            lent_ring_fits_holds(slots, &mut holds.iter().copied()),
            fits,
            "{slots} slots, holds {holds:?}"
        );
    }
}

#[test]
fn a_consumer_wraps_a_slot_only_where_it_leaves_the_producer_one_and_keeps_within_its_hold() {
    let wraps = |wrappable, latest, hold, held, slots| {
        WrapOrCopy {
            wrappable,
            latest,
            hold,
            held,
            slots,
        }
        .wraps()
    };
    // (wrappable, latest, hold, held, slots) -> wraps
    let table = [
        // The common case: a slot of an 8-slot ring, nothing declared.
        ((true, false, 0, 1, 8), true),
        // Memory downstream cannot take as is: a copy.
        ((false, false, 0, 1, 8), false),
        // A consumer of the latest frame never holds the producer back.
        ((true, true, 0, 1, 8), false),
        // The last slot of the ring stays the producer's.
        ((true, false, 0, 7, 8), true),
        ((true, false, 0, 8, 8), false),
        ((true, false, 0, 1, 1), false),
        // Within a declared hold (the frames kept and this one), then copies.
        ((true, false, 2, 3, 8), true),
        ((true, false, 2, 4, 8), false),
        ((true, false, 5, 6, 6), false),
    ];
    for ((wrappable, latest, hold, held, slots), wrap) in table {
        assert_eq!(
            wraps(wrappable, latest, hold, held, slots),
            wrap,
            "wrappable {wrappable}, latest {latest}, hold {hold}, held {held} of {slots}"
        );
    }
}
