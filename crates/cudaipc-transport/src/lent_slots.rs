//! Slots lent by an upstream buffer pool: zero copy for writers that only
//! write into buffers of their own kind (GStreamer's CUDA elements write only
//! into a `GstCudaBufferPool`).
//!
//! Each slot is one buffer of that pool. While a slot's frame is published,
//! its buffer is kept here, so upstream cannot write into it; once every
//! consumer is done with the frame, the buffer goes back to upstream and
//! its slot stays reserved for the frame upstream writes into it next.
//! Upstream always keeps at least one buffer to write into: when it has
//! none left, publishing waits (like `when-full=block`) until a consumer
//! gives one back.
//!
//! The lent buffers take slot records the previous pool did not use, so
//! that no consumer still holds a frame of that pool in them: the records
//! in front are placeholders, never published (they are reserved whenever
//! free).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::cuda::AllocationKey;
use crate::reservation::Reservation;
use crate::{ProducerSlots, TransportError, WriterStream};
use cudaipc_channel::wait::timed;
use cudaipc_channel::{ChannelError, FrameMeta, Producer};

/// A buffer of an upstream pool whose device memory could become a slot.
#[derive(Debug, Clone)]
pub struct LendableFrame {
    pub key: AllocationKey,
    /// Device address of the buffer's memory.
    pub ptr: u64,
    pub size: usize,
    /// (offset, stride) of each plane of the frame in it.
    pub planes: Vec<(u64, u32)>,
}

/// What publishing a frame from the lent slots did
/// ([`Lender::publish`](crate::Lender::publish)).
#[derive(Debug)]
pub enum Lent<T> {
    /// Published from its lent slot; the buffers consumers were done with
    /// came back (for the caller to give back upstream).
    Published(Vec<T>),
    /// The slots are not lent: copy the frame.
    NotLent,
    /// The slots are lent, but the frame is in none of them waiting for a
    /// frame: slots of our own are needed again (`Publisher::configure`),
    /// and the frame is copied.
    Outside,
}

pub struct LentSlots<K, T> {
    /// Which buffer each slot is, by a key of its memory; `None` for a
    /// placeholder.
    keys: Vec<Option<K>>,
    /// Per slot, the buffer of the published frame, or of one released
    /// that waits in `pending`; `None` while upstream has it (the slot is
    /// then reserved).
    held: Mutex<Vec<Option<T>>>,
    /// Slots whose frame every consumer released (reserved by us again)
    /// while their GPU reads may still run, oldest first. Lock order:
    /// `pending`, then `held` or the slots' own (see docs/architecture.md).
    pending: Mutex<VecDeque<usize>>,
    /// Per slot, the sequence number its frame was last published under,
    /// so that released slots wait in `pending` in the order consumers
    /// read them.
    published_at: Vec<AtomicU64>,
}

impl<K: PartialEq, T> LentSlots<K, T> {
    /// For a slot set just published with `placeholders` records in front of
    /// one record per key: reserves every lent slot, since upstream has
    /// every buffer, and the placeholders that are free. Call in block mode
    /// only.
    pub fn new(
        placeholders: usize,
        keys: Vec<K>,
        producer: &Producer,
    ) -> Result<Self, TransportError> {
        let keys: Vec<Option<K>> = (0..placeholders)
            .map(|_| None)
            .chain(keys.into_iter().map(Some))
            .collect();
        // Given back if one is busy.
        let mut reserved = Vec::new();
        while let Some(slot) = producer.reserve_now() {
            reserved.push(Reservation::new(producer, slot));
        }
        if let Some(busy) = (placeholders..keys.len()).find(|&slot| !producer.is_reserved(slot)) {
            return Err(TransportError::LentSlotBusy { slot: busy });
        }
        for reservation in reserved {
            reservation.keep();
        }
        Ok(Self {
            held: Mutex::new((0..keys.len()).map(|_| None).collect()),
            pending: Mutex::new(VecDeque::new()),
            published_at: (0..keys.len()).map(|_| AtomicU64::new(0)).collect(),
            keys,
        })
    }

    pub fn slot_of(&self, key: &K) -> Option<usize> {
        self.keys.iter().position(|k| k.as_ref() == Some(key))
    }

    /// Lent `slot` as a reservation, if it waits (reserved) for the frame
    /// upstream writes into its buffer; `None` while its frame is published.
    pub(crate) fn waiting_for_frame<'a>(
        &self,
        slot: usize,
        producer: &'a Producer,
    ) -> Option<Reservation<'a>> {
        (self.keys.get(slot)?.is_some() && producer.is_reserved(slot))
            .then(|| Reservation::new(producer, slot))
    }

    /// Publishes the frame upstream wrote into the memory of the reserved
    /// slot, and keeps `buffer` until the consumers are done with it. The
    /// caller ordered our stream after upstream's writes. On an error the
    /// slot is given back (as a new pool would).
    pub(crate) fn publish(
        &self,
        reservation: Reservation<'_>,
        buffer: T,
        meta: &FrameMeta,
        slots: &dyn ProducerSlots,
    ) -> Result<u64, TransportError> {
        let slot = reservation.slot();
        let seq = reservation.publish(Some(slots), meta)?;
        self.published_at[slot].store(seq, Ordering::Relaxed);
        self.held.lock().unwrap()[slot] = Some(buffer);
        Ok(seq)
    }

    /// Takes back the buffers of frames every consumer is done with, for the
    /// caller to give back to upstream. `newest`: the slot just published,
    /// which stays published while upstream has a buffer left, even when no
    /// consumer has taken it yet (consumers of the newest frame only,
    /// `frames=latest`, hold no frame back and would otherwise never get one).
    ///
    /// A buffer goes back once the consumers' GPU reads of it finished.
    /// Consumers release a frame as soon as they queue its last read, and
    /// without MPS that read runs only at the consumer's next turn on the
    /// GPU: released buffers wait here meanwhile, so that upstream, which
    /// writes into the next buffer at once, keeps the GPU busy instead of
    /// waiting for that turn. Only when upstream would have no buffer left
    /// does the oldest go back at once: the stream `writer_stream` names for
    /// it (where upstream writes into it next) then waits for the reads on
    /// the GPU, or, without one, we wait on the host. With none released,
    /// this waits for a consumer to release one.
    pub fn take_released(
        &self,
        slots: &dyn ProducerSlots,
        producer: &Producer,
        interrupt: &AtomicBool,
        writer_stream: &dyn Fn(&T) -> Option<WriterStream>,
        read_wait_ns: &AtomicU64,
        newest: Option<usize>,
    ) -> Result<Vec<T>, TransportError> {
        let mut released = Vec::new();
        {
            let mut pending = self.pending.lock().unwrap();
            let all_but_newest = newest.map_or(u64::MAX, |slot| !(1u64 << slot));
            // Block mode (lending needs it): taking a slot never drops a
            // frame an every-frame consumer has not taken.
            let mut reserved = Vec::new();
            while let Some(slot) = producer.reserve_one_of(all_but_newest) {
                reserved.push(slot);
            }
            reserved.sort_by_key(|&slot| self.published_at[slot].load(Ordering::Relaxed));
            for slot in reserved {
                self.note_released(slot, &mut pending);
            }
            // Consumers read frames in the order they were published: once
            // the oldest is still read, so are the newer ones (not asked, a
            // query each). All stay, oldest first, on an error.
            while let Some(&slot) = pending.front() {
                if !slots.reads_done(slot, producer)? {
                    break;
                }
                pending.pop_front();
                released.extend(self.held.lock().unwrap()[slot].take());
            }
        }
        // No lock held across the waits below.
        while self.held_count() == self.lent_count() {
            let oldest = self.pending.lock().unwrap().pop_front();
            let Some(slot) = oldest else {
                match producer.reserve(interrupt) {
                    Ok(Some(slot)) => self.note_released(slot, &mut self.pending.lock().unwrap()),
                    Ok(None) => return Ok(released),
                    Err(ChannelError::Interrupted) if !released.is_empty() => return Ok(released),
                    Err(e) => return Err(e.into()),
                }
                continue;
            };
            let buffer = self.held.lock().unwrap()[slot].take();
            // Upstream's next write into the buffer, queued on its stream,
            // waits on the GPU for the consumers' reads; else we wait here.
            let ordered = match buffer.as_ref().and_then(writer_stream) {
                Some(writer) => slots.order_writer_after_reads(slot, producer, writer),
                None => Ok(false),
            };
            if let Err(e) = ordered.and_then(|ordered| match ordered {
                true => Ok(()),
                false => timed(read_wait_ns, || slots.before_write(slot, producer)),
            }) {
                self.held.lock().unwrap()[slot] = buffer;
                self.pending.lock().unwrap().push_front(slot);
                return Err(e);
            }
            released.extend(buffer);
        }
        Ok(released)
    }

    /// A slot consumers released (now reserved by us): a lent one waits in
    /// `pending` for its buffer to go back; a placeholder that a consumer of
    /// the previous pool gave back stays parked.
    fn note_released(&self, slot: usize, pending: &mut VecDeque<usize>) {
        if self.keys[slot].is_some() {
            pending.push_back(slot);
        }
    }

    /// Gives up the reservations of the slots upstream has, and of those
    /// whose buffers wait to go back, before the set is replaced (a new pool
    /// is published only once none is reserved; the waiting buffers go back
    /// with the set).
    pub fn cancel_reservations(&self, producer: &Producer) {
        let mut pending = self.pending.lock().unwrap();
        let held = self.held.lock().unwrap();
        for (slot, buffer) in held.iter().enumerate() {
            if (buffer.is_none() || pending.contains(&slot)) && producer.is_reserved(slot) {
                // Given back as it goes.
                drop(Reservation::new(producer, slot));
            }
        }
        pending.clear();
    }

    fn lent_count(&self) -> usize {
        self.keys.iter().flatten().count()
    }

    fn held_count(&self) -> usize {
        self.held.lock().unwrap().iter().flatten().count()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use super::*;
    use crate::tests::unique_channel;
    use crate::{SlotMemory, TransportKind};
    use cudaipc_channel::layout::{RELEASE_DESCRIPTOR_BYTES, SLOT_DESCRIPTOR_BYTES};
    use cudaipc_channel::{
        Consumer, ConsumerConfig, ConsumerMode, Item, ProducerConfig, WaitMode, WhenFull,
    };

    /// Slots whose orderings are only recorded.
    #[derive(Default)]
    struct RecordedSlots {
        before_write: Mutex<Vec<usize>>,
        after_write: Mutex<Vec<usize>>,
        writer_ordered: Mutex<Vec<usize>>,
        /// What `reads_done` answers.
        reads_done: std::sync::atomic::AtomicBool,
    }

    impl ProducerSlots for RecordedSlots {
        fn kind(&self) -> TransportKind {
            TransportKind::Host
        }
        fn slot_count(&self) -> usize {
            3
        }
        fn slot_size(&self) -> usize {
            64
        }
        fn slot_descriptors(&self) -> Vec<[u8; SLOT_DESCRIPTOR_BYTES]> {
            vec![[0; SLOT_DESCRIPTOR_BYTES]; 3]
        }
        fn pool_descriptor(&self) -> Vec<u8> {
            Vec::new()
        }
        fn slot_memory(&self, _slot: usize) -> SlotMemory {
            unreachable!("lent slots are written by their owner")
        }
        fn before_write(&self, slot: usize, _producer: &Producer) -> Result<(), TransportError> {
            self.before_write.lock().unwrap().push(slot);
            Ok(())
        }
        fn after_write(&self, slot: usize) -> Result<(), TransportError> {
            self.after_write.lock().unwrap().push(slot);
            Ok(())
        }
        fn order_writer_after_reads(
            &self,
            slot: usize,
            _producer: &Producer,
            _writer: WriterStream,
        ) -> Result<bool, TransportError> {
            self.writer_ordered.lock().unwrap().push(slot);
            Ok(true)
        }
        fn reads_done(&self, _slot: usize, _producer: &Producer) -> Result<bool, TransportError> {
            Ok(self.reads_done.load(std::sync::atomic::Ordering::Relaxed))
        }
    }

    /// Publishes the frame upstream wrote into lent `slot`, as
    /// `Lender::publish` does.
    fn publish<T>(
        lent: &LentSlots<u64, T>,
        slot: usize,
        buffer: T,
        meta: &FrameMeta,
        slots: &dyn ProducerSlots,
        producer: &Producer,
    ) -> Result<u64, TransportError> {
        let reservation = lent
            .waiting_for_frame(slot, producer)
            .ok_or(TransportError::LentSlotRewritten { slot })?;
        lent.publish(reservation, buffer, meta, slots)
    }

    /// No buffer names the stream its next write goes to.
    fn no_stream<T>(_: &T) -> Option<WriterStream> {
        None
    }

    fn meta(pts: u64) -> FrameMeta {
        FrameMeta {
            size: 64,
            pts: Some(pts),
            planes: vec![(0, 32)],
            ..Default::default()
        }
    }

    /// A block-mode channel whose pool has `slot_count` slots, with one
    /// consumer of `mode` attached.
    fn channel_with_consumer(
        tag: &str,
        slot_count: usize,
        mode: ConsumerMode,
    ) -> (Producer, Consumer) {
        let channel = unique_channel(tag);
        let no = AtomicBool::new(false);
        let producer = Producer::create(ProducerConfig {
            channel: channel.clone(),
            when_full: WhenFull::Block,
            ..Default::default()
        })
        .unwrap();
        producer
            .configure_pool(64, &vec![[0; SLOT_DESCRIPTOR_BYTES]; slot_count], &[], &no)
            .unwrap();
        producer.set_caps("video/x-raw", &no).unwrap();
        let consumer = Consumer::attach(
            ConsumerConfig {
                channel,
                mode,
                wait_mode: WaitMode::Hybrid,
                connect_timeout: Some(Duration::from_secs(5)),
                ipc_mode: None,
                producers: Default::default(),
                hold: None,
                refuse_self_wait: false,
            },
            &no,
        )
        .unwrap();
        (producer, consumer)
    }

    #[test]
    fn buffers_go_back_to_upstream_only_after_consumers_are_done() {
        let no = AtomicBool::new(false);
        let (producer, mut consumer) = channel_with_consumer("lend", 3, ConsumerMode::EveryFrame);
        let producer = Arc::new(producer);
        let slots = Arc::new(RecordedSlots::default());
        consumer.set_release_descriptors(&[[0; RELEASE_DESCRIPTOR_BYTES]; 3]);

        // Buffers are keyed by their memory; upstream has all three.
        let lent = Arc::new(LentSlots::new(0, vec![100u64, 101, 102], &producer).unwrap());
        assert_eq!(producer.reserve_now(), None, "every slot is upstream's");
        let slot_a = lent.slot_of(&100).unwrap();
        publish(&lent, slot_a, "a", &meta(0), &*slots, &producer).unwrap();
        // The consumer has not taken the frame: nothing comes back, and
        // upstream still has two buffers, so this does not wait.
        assert!(
            lent.take_released(
                &*slots,
                &producer,
                &no,
                &no_stream,
                &AtomicU64::new(0),
                None
            )
            .unwrap()
            .is_empty()
        );
        // A buffer whose frame is still published waits for no frame.
        assert!(lent.waiting_for_frame(slot_a, &producer).is_none());
        for (key, name, pts) in [(101, "b", 1), (102, "c", 2)] {
            let slot = lent.slot_of(&key).unwrap();
            publish(&lent, slot, name, &meta(pts), &*slots, &producer).unwrap();
        }
        assert_eq!(*slots.after_write.lock().unwrap(), vec![slot_a, 1, 2]);

        // All three published: upstream would have none left, so giving
        // back waits for the consumer.
        let (l, s, p) = (lent.clone(), slots.clone(), producer.clone());
        let waiting = std::thread::spawn(move || {
            l.take_released(
                &*s,
                &p,
                &AtomicBool::new(false),
                &no_stream,
                &AtomicU64::new(0),
                None,
            )
            .unwrap()
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !waiting.is_finished(),
            "gave a buffer back while all were published"
        );
        let Item::Frame(first) = consumer.next(&no, Some(Duration::from_secs(5))).unwrap() else {
            panic!("expected a frame");
        };
        assert_eq!(
            (first.slot, first.pts, first.planes.clone()),
            (slot_a, Some(0), vec![(0, 32)])
        );
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiting.is_finished(), "a taken frame is still being read");
        consumer.release(first.slot);
        assert_eq!(waiting.join().unwrap(), vec!["a"]);
        // Its writes are ordered after the consumer's reads, and the slot
        // waits reserved for upstream's next frame in that buffer.
        assert_eq!(*slots.before_write.lock().unwrap(), vec![slot_a]);
        assert!(producer.is_reserved(slot_a));
        publish(&lent, slot_a, "a2", &meta(3), &*slots, &producer).unwrap();
        for pts in 1..4 {
            let Item::Frame(f) = consumer.next(&no, Some(Duration::from_secs(5))).unwrap() else {
                panic!("expected a frame");
            };
            assert_eq!(f.pts, Some(pts));
            consumer.release(f.slot);
        }
        // All three released, their GPU reads still running: upstream has no
        // buffer, so the oldest goes back at once, its next writes ordered
        // after the reads: on the GPU where its buffer names the stream they
        // go to ("b", the oldest), else by a wait here. The others wait.
        let slot_b = lent.slot_of(&101).unwrap();
        // SAFETY: these slots only record the call.
        let stream = unsafe { WriterStream::new(std::ptr::null_mut()) };
        let b_writer = |name: &&str| (*name == "b").then_some(stream);
        assert_eq!(
            lent.take_released(&*slots, &producer, &no, &b_writer, &AtomicU64::new(0), None)
                .unwrap(),
            vec!["b"]
        );
        assert_eq!(*slots.writer_ordered.lock().unwrap(), vec![slot_b]);
        assert_eq!(*slots.before_write.lock().unwrap(), vec![slot_a]);
        // Upstream has a buffer: nothing more comes back while the reads run.
        assert!(
            lent.take_released(&*slots, &producer, &no, &b_writer, &AtomicU64::new(0), None)
                .unwrap()
                .is_empty()
        );
        // Reads done: the rest comes back with no wait or ordering at all.
        slots
            .reads_done
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let mut rest = lent
            .take_released(&*slots, &producer, &no, &b_writer, &AtomicU64::new(0), None)
            .unwrap();
        rest.sort();
        assert_eq!(rest, vec!["a2", "c"]);
        assert_eq!(*slots.writer_ordered.lock().unwrap(), vec![slot_b]);
        assert_eq!(*slots.before_write.lock().unwrap(), vec![slot_a]);
        assert_eq!(consumer.frames_missed(), 0);
    }

    /// A consumer of the newest frame only (`frames=latest`) holds nothing
    /// back, so no slot waits for it: still, the frame just published stays
    /// published until the next one, for it to take. (Taking back every free
    /// slot at once gave each frame back to upstream as soon as it was
    /// published: such a consumer never got one.)
    #[test]
    fn the_newest_frame_stays_published_for_consumers_of_the_latest() {
        let no = AtomicBool::new(false);
        let (producer, mut consumer) =
            channel_with_consumer("lend-latest", 2, ConsumerMode::Latest);
        let slots = RecordedSlots::default();
        consumer.set_release_descriptors(&[[0; RELEASE_DESCRIPTOR_BYTES]; 2]);
        slots
            .reads_done
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let lent = LentSlots::new(0, vec![100u64, 101], &producer).unwrap();
        let take_back = |newest| {
            lent.take_released(
                &slots,
                &producer,
                &no,
                &no_stream,
                &AtomicU64::new(0),
                Some(newest),
            )
            .unwrap()
        };
        // Upstream writes into its two buffers in turn, each published and
        // the one before given back.
        let mut upstream_writes_into = 100u64;
        for pts in 0..6 {
            let slot = lent.slot_of(&upstream_writes_into).unwrap();
            publish(
                &lent,
                slot,
                upstream_writes_into,
                &meta(pts),
                &slots,
                &producer,
            )
            .unwrap();
            let back = take_back(slot);
            if pts > 0 {
                assert_eq!(back, vec![upstream_writes_into ^ 1], "frame {pts}");
            }
            // The newest frame is there for the consumer of the latest.
            let Item::Frame(frame) = consumer.next(&no, Some(Duration::from_secs(1))).unwrap()
            else {
                panic!("expected a frame");
            };
            assert_eq!((frame.slot, frame.pts), (slot, Some(pts)));
            consumer.release(frame.slot);
            upstream_writes_into ^= 1;
        }
    }

    #[test]
    fn frames_of_the_previous_pool_stay_apart_in_placeholders() {
        let no = AtomicBool::new(false);
        let (producer, mut consumer) =
            channel_with_consumer("lend-placeholder", 2, ConsumerMode::EveryFrame);
        let slots = RecordedSlots::default();
        // A frame of the old pool, held (as a sink keeps its last buffer).
        let slot = producer.reserve(&no).unwrap().unwrap();
        producer.publish(slot, &meta(0)).unwrap();
        let Item::Frame(old) = consumer.next(&no, Some(Duration::from_secs(5))).unwrap() else {
            panic!("expected a frame");
        };
        // Two placeholders (the old pool's records), then three lent ones.
        producer
            .configure_pool(64, &[[1; SLOT_DESCRIPTOR_BYTES]; 5], &[], &no)
            .unwrap();
        let lent = LentSlots::new(2, vec![7u64, 8, 9], &producer).unwrap();
        assert_eq!(lent.slot_of(&7), Some(2));
        assert!((2..5).all(|slot| producer.is_reserved(slot)));
        assert!(!producer.is_reserved(old.slot), "held by the consumer");
        publish(&lent, 2, "x", &meta(1), &slots, &producer).unwrap();
        let Item::Frame(new) = consumer.next(&no, Some(Duration::from_secs(5))).unwrap() else {
            panic!("expected a frame");
        };
        assert_eq!((new.slot, new.pts, new.pool_generation), (2, Some(1), 2));
        consumer.release(old.slot);
        consumer.release(new.slot);
        // The freed placeholder is parked, never given out; the lent one,
        // read, comes back.
        slots
            .reads_done
            .store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            lent.take_released(&slots, &producer, &no, &no_stream, &AtomicU64::new(0), None)
                .unwrap(),
            vec!["x"]
        );
        assert!(
            producer.is_reserved(old.slot),
            "a free placeholder is parked"
        );
        assert!(slots.before_write.lock().unwrap().is_empty(), "no wait");
        assert_eq!(producer.reserve_now(), None);
    }

    #[test]
    fn reservations_are_given_up_for_a_new_pool() {
        let channel = unique_channel("lend-repool");
        let no = AtomicBool::new(false);
        let producer = Producer::create(ProducerConfig {
            channel,
            when_full: WhenFull::Block,
            ..Default::default()
        })
        .unwrap();
        let slots = RecordedSlots::default();
        producer
            .configure_pool(64, &slots.slot_descriptors(), &[], &no)
            .unwrap();
        let lent = LentSlots::new(0, vec![1u64, 2, 3], &producer).unwrap();
        publish(&lent, 0, (), &meta(0), &slots, &producer).unwrap();
        lent.cancel_reservations(&producer);
        assert!((0..3).all(|slot| !producer.is_reserved(slot)));
        // Without reservations a new pool goes in at once.
        let interrupt = AtomicBool::new(true);
        producer
            .configure_pool(64, &slots.slot_descriptors(), &[], &interrupt)
            .expect("a new pool waited for lent slots");
    }
}
