// Corrupt and hostile control blocks. This test process plays the hostile
// producer: it builds control blocks by hand, or with the channel API and
// then tampers with them through a second mapping, while a `gst-launch-1.0`
// consumer reads them. Every case must end in a clear element error and a
// clean exit: no panic, no crash, no hang. Then proptest fuzzes the channel
// code that reads the control block.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use cudaipc_channel::layout::*;
use cudaipc_channel::shm;
use cudaipc_channel::{
    ChannelError, Consumer, ConsumerConfig, ConsumerMode, ControlBlock, FrameMeta, Item, Producer,
    ProducerConfig,
};
use cudaipc_transport::{self as transport, GpuSync, ProducerSlots, SlotRequest, TransportKind};

const LIMIT: Duration = Duration::from_secs(60);
const CAPS: &str =
    "video/x-raw, format=(string)RGB, width=(int)64, height=(int)48, framerate=(fraction)30/1";
const FRAME: u64 = 64 * 48 * 3;
/// The consumers are live sources: gst-launch-1.0 1.22 itself sometimes
/// hangs when a source fails while the pipeline prerolls (filesrc does it
/// too), and a live source does not preroll.
const LIVE: &str = "is-live=true";

/// A producer made with the channel API, host slots included, ready to
/// publish valid frames or to tamper with its own control block.
struct Hostile {
    channel: String,
    producer: Producer,
    _slots: Box<dyn ProducerSlots>,
    block: ControlBlock,
}

impl Hostile {
    fn new(tag: &str) -> Self {
        Self::with_caps(tag, CAPS)
    }

    fn with_caps(tag: &str, caps: &str) -> Self {
        let channel = unique_channel(tag);
        let no = AtomicBool::new(false);
        let producer = Producer::create(ProducerConfig {
            channel: channel.clone(),
            ..Default::default()
        })
        .unwrap();
        let slots = transport::create_producer_slots(
            TransportKind::Host,
            &SlotRequest {
                channel: channel.clone(),
                session: producer.session(),
                generation: 1,
                count: 4,
                size: FRAME as usize,
                permissions: 0o600,
                gpu_sync: GpuSync::Event,
                ipc_mode: Default::default(),
            },
            None,
        )
        .unwrap();
        producer
            .configure_pool(
                FRAME,
                &slots.slot_descriptors(),
                &slots.pool_descriptor(),
                &no,
            )
            .unwrap();
        producer.set_caps(caps, &no).unwrap();
        let block = ControlBlock::open(&channel).unwrap();
        Self {
            channel,
            producer,
            _slots: slots,
            block,
        }
    }

    fn h(&self) -> &ControlHeader {
        self.block.header()
    }

    /// Publishes a frame with `meta` through the API.
    fn publish(&self, meta: FrameMeta) {
        let no = AtomicBool::new(false);
        let slot = self.producer.reserve(&no).unwrap().unwrap();
        self.producer.publish(slot, &meta).unwrap();
    }

    fn publish_valid(&self) {
        self.publish(valid_meta());
    }

    /// Publishes queue entry `entry` by hand, as a hostile producer may.
    fn hand_publish(&self, entry: u64) {
        let h = self.h();
        let seq = h.published.load(Ordering::SeqCst);
        h.queue[seq as usize % QUEUE_LEN].store(entry, Ordering::SeqCst);
        h.published.store(seq + 1, Ordering::SeqCst);
        wake(h);
    }

    /// Starts a consumer (it may attach, or fail, at any time from now).
    fn launch_consumer(&self) -> Launch {
        launch(&format!(
            "rscudaipcsrc channel={} {LIVE} connect-timeout=120000 ! fakesink",
            self.channel
        ))
    }

    /// Starts a consumer and waits until it is attached, so that what comes
    /// next reaches it.
    fn consumer(&self) -> Launch {
        let consumer = self.launch_consumer();
        let pid = consumer.pid();
        wait_until(LIMIT, "the consumer attaches", || {
            self.block.consumer_of(pid).is_some()
        });
        consumer
    }
}

fn wake(h: &ControlHeader) {
    h.publish_futex.fetch_add(1, Ordering::SeqCst);
    cudaipc_channel::wait::futex_wake_all(&h.publish_futex);
}

fn valid_meta() -> FrameMeta {
    FrameMeta {
        size: FRAME,
        pts: Some(0),
        planes: vec![(0, 64 * 3)],
        ..Default::default()
    }
}

/// The consumer stopped with an element error naming `expected`: a clean
/// exit (code 1), no panic, no signal.
fn assert_clear_error(consumer: Launch, expected: &str) {
    let done = consumer.finish(LIMIT);
    let text = format!("{}\n{}", done.stdout, done.stderr);
    assert_eq!(done.code, Some(1), "expected a clean error exit:\n{text}");
    assert!(text.contains("ERROR"), "no element error:\n{text}");
    assert!(text.contains(expected), "expected {expected:?} in:\n{text}");
    assert!(!text.contains("anicked"), "{text}");
}

// ---------------------------------------------------------------------------
// Blocks that are not ours at all

/// A file of `bytes` at the channel's name whose producer lock this test
/// holds, so it looks alive.
fn fake_channel(tag: &str, bytes: &[u8]) -> (String, std::fs::File) {
    let channel = unique_channel(tag);
    let path = shm::control_path(&channel);
    std::fs::write(&path, bytes).unwrap();
    let lock = hold_producer_lock(&path).unwrap();
    (channel, lock)
}

fn consumer_of(channel: &str) -> Launch {
    launch(&format!(
        "rscudaipcsrc channel={channel} {LIVE} connect-timeout=5000 ! fakesink"
    ))
}

#[test]
fn random_bytes_are_refused() {
    let (channel, _lock) = fake_channel("random", &random_bytes(1, control_size()));
    assert_clear_error(consumer_of(&channel), "bad magic");
    let _ = std::fs::remove_file(shm::control_path(&channel));
}

#[test]
fn a_truncated_block_is_refused() {
    for len in [0, 12] {
        let (channel, _lock) = fake_channel("short", &random_bytes(2, len));
        assert_clear_error(consumer_of(&channel), "too small");
        let _ = std::fs::remove_file(shm::control_path(&channel));
    }
    // Right magic and version, but cut short.
    let mut bytes = MAGIC.to_le_bytes().to_vec();
    bytes.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    bytes.resize(4096, 0);
    let (channel, _lock) = fake_channel("short", &bytes);
    assert_clear_error(consumer_of(&channel), "control block of 4096 bytes");
    let _ = std::fs::remove_file(shm::control_path(&channel));
}

#[test]
fn wrong_magic_is_refused() {
    let p = Hostile::new("magic");
    p.h().magic.store(0x1234, Ordering::SeqCst);
    assert_clear_error(consumer_of(&p.channel), "bad magic");
}

#[test]
fn wrong_version_is_refused() {
    let p = Hostile::new("version");
    p.h().version.store(PROTOCOL_VERSION + 98, Ordering::SeqCst);
    assert_clear_error(
        consumer_of(&p.channel),
        &format!("protocol version {}", PROTOCOL_VERSION + 98),
    );
}

#[test]
fn wrong_layout_sizes_are_refused() {
    let p = Hostile::new("layout");
    p.h().slot_record_size.store(8, Ordering::SeqCst);
    assert_clear_error(consumer_of(&p.channel), "header sizes disagree");
}

#[test]
fn an_unknown_transport_is_refused() {
    let p = Hostile::new("transport");
    p.h().transport.store(77, Ordering::SeqCst);
    assert_clear_error(consumer_of(&p.channel), "unknown transport 77");
}

#[test]
fn another_pid_namespace_is_refused() {
    // Also checked with a real namespace in tests/hostile_and_faults/faults.rs, where the
    // machine allows it.
    let p = Hostile::new("pidns");
    p.h().producer_pid_namespace.store(12345, Ordering::SeqCst);
    assert_clear_error(consumer_of(&p.channel), "another PID namespace");
}

// ---------------------------------------------------------------------------
// Frames that lie

#[test]
fn a_slot_index_out_of_range_is_refused() {
    let p = Hostile::new("slotidx");
    let consumer = p.consumer();
    p.hand_publish(queue_entry(p.h().published.load(Ordering::SeqCst), 60));
    assert_clear_error(consumer, "slot index 60 is out of range");
}

#[test]
fn a_frame_smaller_than_its_caps_is_refused() {
    let p = Hostile::new("small");
    let consumer = p.consumer();
    p.publish(FrameMeta {
        size: 100,
        ..valid_meta()
    });
    assert_clear_error(consumer, "does not match the caps");
}

#[test]
fn a_frame_larger_than_its_slot_is_refused() {
    let p = Hostile::new("large");
    let consumer = p.consumer();
    p.publish(FrameMeta {
        size: FRAME + 1,
        ..valid_meta()
    });
    assert_clear_error(consumer, "does not fit the slot size");
}

#[test]
fn planes_outside_the_frame_are_refused() {
    let p = Hostile::new("planes");
    let consumer = p.consumer();
    p.publish(FrameMeta {
        planes: vec![(FRAME - 10, 64 * 3)],
        ..valid_meta()
    });
    assert_clear_error(consumer, "does not match the caps");
    // A stride below the row width.
    let p = Hostile::new("stride");
    let consumer = p.consumer();
    p.publish(FrameMeta {
        planes: vec![(0, 5)],
        ..valid_meta()
    });
    assert_clear_error(consumer, "below the row width");
}

#[test]
fn too_many_planes_are_refused() {
    let p = Hostile::new("nplanes");
    let consumer = p.consumer();
    // Claim a slot, fill its record by hand, publish it.
    let no = AtomicBool::new(false);
    let slot = p.producer.reserve(&no).unwrap().unwrap();
    let h = p.h();
    let r = &h.slots[slot];
    let seq = h.published.load(Ordering::SeqCst);
    r.pool_generation
        .store(h.pool_generation.load(Ordering::SeqCst), Ordering::SeqCst);
    r.caps_generation
        .store(h.caps_generation.load(Ordering::SeqCst), Ordering::SeqCst);
    r.size.store(FRAME, Ordering::SeqCst);
    r.n_planes.store(9, Ordering::SeqCst);
    r.seq.store(seq, Ordering::SeqCst);
    p.hand_publish(queue_entry(seq, slot as u64));
    assert_clear_error(consumer, "9 planes");
}

#[test]
fn sequence_numbers_going_backwards_are_refused() {
    let p = Hostile::new("backwards");
    let consumer = p.consumer();
    let pid = consumer.pid();
    for _ in 0..3 {
        p.publish_valid();
    }
    let index = p.block.consumer_of(pid).unwrap();
    wait_until(LIMIT, "the consumer takes three frames", || {
        p.block.cursor(index) >= 3
    });
    p.h().published.store(1, Ordering::SeqCst);
    wake(p.h());
    assert_clear_error(consumer, "went backwards");
}

#[test]
fn a_queue_entry_from_the_past_is_refused() {
    let p = Hostile::new("past");
    let consumer = p.consumer();
    p.publish_valid();
    p.publish_valid();
    // Item 2 claims to be item 0.
    p.hand_publish(queue_entry(0, 0));
    assert_clear_error(consumer, "published earlier");
}

/// A live producer streaming from another process; this test rewinds its
/// sequence number through a second mapping.
#[test]
fn tampering_with_a_live_producer_is_caught() {
    let channel = unique_channel("live");
    let consumer = launch(&format!(
        "rscudaipcsrc channel={channel} {LIVE} connect-timeout=120000 ! fakesink"
    ));
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let producer = launch(&format!(
        "videotestsrc is-live=true ! video/x-raw,width=64,height=48,framerate=30/1 ! rscudaipcsink channel={channel} transport=host"
    ));
    let mut block = None;
    wait_until(LIMIT, "frames flow", || {
        block = ControlBlock::open(&channel).filter(|b| b.published() >= 5);
        block.is_some()
    });
    let block = block.unwrap();
    block.header().published.store(0, Ordering::SeqCst);
    wake(block.header());
    assert_clear_error(consumer, "went backwards");
    producer.signal(libc::SIGINT);
    let _ = producer.finish(LIMIT);
}

// ---------------------------------------------------------------------------
// Caps that lie

/// The caps are tampered with before the consumer comes: it reads them when
/// it attaches (the source sets up downstream before it asks for a frame),
/// or with the frame published next.
fn caps_case(tag: &str, caps: &str, tamper: impl FnOnce(&ControlHeader), expected: &str) {
    let p = Hostile::with_caps(tag, caps);
    tamper(p.h());
    let consumer = p.launch_consumer();
    p.publish_valid();
    assert_clear_error(consumer, expected);
}

#[test]
fn caps_that_do_not_parse_are_refused() {
    caps_case("capsjunk", "not caps at all ((", |_| {}, "unusable caps");
}

#[test]
fn absurd_caps_are_refused() {
    caps_case(
        "capsabsurd",
        "video/x-raw, format=(string)RGB, width=(int)2147483647, height=(int)2147483647, framerate=(fraction)30/1",
        |_| {},
        "corrupt control block",
    );
    caps_case(
        "capsformat",
        "video/x-raw, format=(string)v210, width=(int)64, height=(int)48, framerate=(fraction)30/1",
        |_| {},
        "unsupported format",
    );
}

#[test]
fn unterminated_caps_are_refused() {
    // The whole capacity filled, no terminator anywhere.
    caps_case(
        "capsfull",
        &"a".repeat(CAPS_CAPACITY),
        |_| {},
        "unusable caps",
    );
    // A length beyond the capacity.
    caps_case(
        "capslen",
        CAPS,
        |h| h.caps_len.store(CAPS_CAPACITY as u32 + 1, Ordering::SeqCst),
        &format!("caps length {}", CAPS_CAPACITY + 1),
    );
}

#[test]
fn caps_that_are_not_text_are_refused() {
    caps_case(
        "capsutf8",
        CAPS,
        |h| h.caps[0].store(u64::MAX, Ordering::SeqCst),
        "not UTF-8",
    );
}

#[test]
fn a_seqlock_that_never_settles_is_refused() {
    caps_case(
        "seqlock",
        CAPS,
        |h| {
            h.caps_seqlock.fetch_or(1, Ordering::SeqCst);
        },
        "never settles",
    );
}

// ---------------------------------------------------------------------------
// Pools that lie

fn pool_case(tag: &str, tamper: impl FnOnce(&Hostile), expected: &str) {
    let p = Hostile::new(tag);
    // Before the consumer starts: it opens the pool as it attaches (and
    // keeps the pool it checked then).
    tamper(&p);
    let mut consumer = p.launch_consumer();
    let pid = consumer.pid();
    wait_until(LIMIT, "the consumer attaches or stops", || {
        p.block.consumer_of(pid).is_some() || matches!(consumer.child.try_wait(), Ok(Some(_)))
    });
    p.publish_valid();
    assert_clear_error(consumer, expected);
}

#[test]
fn absurd_slot_counts_and_sizes_are_refused() {
    pool_case(
        "count",
        |p| p.h().slot_count.store(65, Ordering::SeqCst),
        "slot count 65",
    );
    pool_case(
        "size",
        |p| p.h().slot_size.store(1 << 50, Ordering::SeqCst),
        "slot size",
    );
}

#[test]
fn a_data_file_too_small_for_the_pool_is_refused() {
    pool_case(
        "datasize",
        |p| p.h().slot_size.store(1 << 30, Ordering::SeqCst),
        "the pool needs",
    );
}

fn store_pool_name(h: &ControlHeader, name: &str) {
    store_bytes(&h.pool_descriptor, name.as_bytes());
}

#[test]
fn data_file_names_outside_the_channel_are_refused() {
    pool_case(
        "escape",
        |p| store_pool_name(p.h(), "../../etc/passwd"),
        "does not belong to channel",
    );
}

/// A data file name that is a FIFO: opening it must not hang the consumer.
#[test]
fn a_data_file_that_is_not_a_regular_file_is_refused() {
    let mut fifo = None;
    pool_case(
        "fifo",
        |p| {
            let name = format!("cudaipc-{}.fifo", p.channel);
            let path = shm::shm_dir().join(&name);
            let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            store_pool_name(p.h(), &name);
            fifo = Some(path);
        },
        "not a regular file",
    );
    std::fs::remove_file(fifo.unwrap()).unwrap();
}

// ---------------------------------------------------------------------------
// Fuzzing the channel's reader

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    /// Reads everything a consumer reads, as far as it goes; any outcome but
    /// a panic is fine.
    fn exercise(consumer: &mut Consumer) {
        let no = AtomicBool::new(false);
        let _ = consumer.pool();
        let _ = consumer.caps();
        for _ in 0..12 {
            match consumer.next(&no, Some(Duration::from_millis(1))) {
                Ok(Item::Frame(f)) => consumer.release(f.slot),
                Ok(Item::Eos) | Ok(Item::Event(_)) => {}
                Err(ChannelError::Timeout) | Err(_) => break,
            }
        }
        let _ = consumer.try_next();
    }

    fn attach(channel: &str, mode: ConsumerMode) -> Result<Consumer, ChannelError> {
        Consumer::attach(
            ConsumerConfig {
                channel: channel.into(),
                mode,
                connect_timeout: Some(Duration::ZERO),
                ..Default::default()
            },
            &AtomicBool::new(false),
        )
    }

    /// A valid block with a pool, caps and six frames in its queue, but
    /// `published` still at 0, so a consumer that attaches reads them all
    /// once `published` is set to 6.
    fn template() -> &'static [u8] {
        static TEMPLATE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        TEMPLATE.get_or_init(|| {
            let no = AtomicBool::new(false);
            let p = Producer::create(ProducerConfig {
                channel: unique_channel("template"),
                ..Default::default()
            })
            .unwrap();
            p.configure_pool(
                FRAME,
                &[[7u8; SLOT_DESCRIPTOR_BYTES]; 4],
                b"cudaipc-x.1.1",
                &no,
            )
            .unwrap();
            p.set_caps(CAPS, &no).unwrap();
            for i in 0..6 {
                let slot = p.reserve(&no).unwrap().unwrap();
                p.publish(
                    slot,
                    &FrameMeta {
                        pts: Some(i),
                        ..valid_meta()
                    },
                )
                .unwrap();
            }
            let mut bytes = std::fs::read(p.path()).unwrap();
            let published = std::mem::offset_of!(ControlHeader, published);
            bytes[published..published + 8].copy_from_slice(&0u64.to_le_bytes());
            bytes
        })
    }

    /// Offsets of the fields a consumer reads, where a mutation matters most.
    fn field_offsets() -> Vec<(usize, usize)> {
        use std::mem::{offset_of, size_of};
        let mut fields = vec![
            (offset_of!(ControlHeader, magic), 8),
            (offset_of!(ControlHeader, version), 4),
            (offset_of!(ControlHeader, header_size), 4),
            (offset_of!(ControlHeader, total_size), 8),
            (offset_of!(ControlHeader, max_slots), 4),
            (offset_of!(ControlHeader, transport), 4),
            (offset_of!(ControlHeader, gpu_sync), 4),
            (offset_of!(ControlHeader, producer_pid_namespace), 8),
            (offset_of!(ControlHeader, state), 4),
            (offset_of!(ControlHeader, pool_seqlock), 8),
            (offset_of!(ControlHeader, pool_generation), 8),
            (offset_of!(ControlHeader, slot_size), 8),
            (offset_of!(ControlHeader, slot_count), 4),
            (offset_of!(ControlHeader, pool_descriptor), 8),
            (offset_of!(ControlHeader, caps_seqlock), 8),
            (offset_of!(ControlHeader, caps_generation), 8),
            (offset_of!(ControlHeader, caps_len), 4),
            (offset_of!(ControlHeader, caps), 8),
            (offset_of!(ControlHeader, published), 8),
            (offset_of!(ControlHeader, frame_data_bound), 4),
        ];
        for q in 0..6 {
            fields.push((offset_of!(ControlHeader, queue) + 8 * q, 8));
        }
        for e in 0..2 {
            let base = offset_of!(ControlHeader, events) + e * size_of::<EventRecord>();
            for (offset, width) in [
                (offset_of!(EventRecord, seqlock), 8),
                (offset_of!(EventRecord, seq), 8),
                (offset_of!(EventRecord, len), 4),
            ] {
                fields.push((base + offset, width));
            }
        }
        for s in 0..4 {
            let base = offset_of!(ControlHeader, slots) + s * size_of::<SlotRecord>();
            for (offset, width) in [
                (offset_of!(SlotRecord, seq), 8),
                (offset_of!(SlotRecord, holders), 8),
                (offset_of!(SlotRecord, caps_generation), 8),
                (offset_of!(SlotRecord, pool_generation), 8),
                (offset_of!(SlotRecord, size), 8),
                (offset_of!(SlotRecord, n_planes), 4),
                (offset_of!(SlotRecord, plane_offset), 8),
                (offset_of!(SlotRecord, plane_stride), 4),
                (offset_of!(SlotRecord, data_len), 4),
                (offset_of!(SlotRecord, frame_number), 8),
            ] {
                fields.push((base + offset, width));
            }
        }
        let consumers = offset_of!(ControlHeader, consumers);
        fields.push((consumers + offset_of!(ConsumerRecord, state), 4));
        fields.push((consumers + offset_of!(ConsumerRecord, cursor), 8));
        fields
    }

    fn store(bytes: &mut [u8], offset: usize, width: usize, value: u64) {
        bytes[offset..offset + width].copy_from_slice(&value.to_le_bytes()[..width]);
    }

    fn interesting_value() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(u64::MAX),
            Just(u64::MAX - 1),
            Just(1 << 63),
            Just(u32::MAX as u64),
            0u64..200,
            any::<u64>(),
        ]
    }

    fn config() -> ProptestConfig {
        ProptestConfig {
            cases: 256,
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    proptest! {
        #![proptest_config(config())]

        /// Arbitrary bytes, the first ones optionally a valid identity so
        /// that the reader gets past the magic.
        #[test]
        fn arbitrary_blocks_never_panic(
            seed in any::<u64>(),
            len in prop_oneof![0usize..64, 0usize..=control_size() + 64, Just(control_size())],
            valid_identity in any::<bool>(),
            latest in any::<bool>(),
        ) {
            let mut bytes = random_bytes(seed, len);
            if valid_identity && len >= 64 {
                let t = &template()[..64];
                bytes[..64].copy_from_slice(t);
            }
            let (channel, lock) = fake_channel("fuzz", &bytes);
            let mode = if latest { ConsumerMode::Latest } else { ConsumerMode::EveryFrame };
            if let Ok(mut consumer) = attach(&channel, mode) {
                if let Some(block) = ControlBlock::open(&channel) {
                    block.header().published.fetch_add(seed % 300, Ordering::SeqCst);
                }
                exercise(&mut consumer);
            }
            drop(lock);
            let _ = std::fs::remove_file(shm::control_path(&channel));
        }

        /// A valid block with one field (a known one, or any word) set to an
        /// arbitrary value, before or after the consumer attached.
        #[test]
        fn single_field_mutations_never_panic(
            known in any::<prop::sample::Index>(),
            any_word in 0..control_size() / 4,
            use_known in any::<bool>(),
            value in interesting_value(),
            after_attach in any::<bool>(),
            latest in any::<bool>(),
        ) {
            let fields = field_offsets();
            let (offset, width) = if use_known {
                fields[known.index(fields.len())]
            } else {
                (any_word * 4, 4)
            };
            let mut bytes = template().to_vec();
            if !after_attach {
                store(&mut bytes, offset, width, value);
            }
            let (channel, lock) = fake_channel("mutate", &bytes);
            let mode = if latest { ConsumerMode::Latest } else { ConsumerMode::EveryFrame };
            if let Ok(mut consumer) = attach(&channel, mode) {
                let block = ControlBlock::open(&channel).expect("a whole block");
                let h = block.header();
                h.published.fetch_add(6, Ordering::SeqCst);
                if after_attach {
                    // SAFETY: in bounds of the mapping (offset + width is
                    // within the template, as long as the block); aligned
                    // for its width; only atomics touch shared memory.
                    unsafe {
                        let at = block.shared.map.as_ptr().add(offset);
                        if width == 8 {
                            (*(at as *const AtomicU64)).store(value, Ordering::SeqCst);
                        } else {
                            (*(at as *const AtomicU32)).store(value as u32, Ordering::SeqCst);
                        }
                    }
                }
                exercise(&mut consumer);
            }
            drop(lock);
            let _ = std::fs::remove_file(shm::control_path(&channel));
        }
    }

    /// The mutations are not vacuous: the valid template, untouched, yields
    /// its six frames.
    #[test]
    fn the_fuzz_template_is_valid() {
        let (channel, lock) = fake_channel("valid", template());
        let mut consumer = attach(&channel, ConsumerMode::EveryFrame).unwrap();
        ControlBlock::open(&channel)
            .unwrap()
            .header()
            .published
            .store(6, Ordering::SeqCst);
        let pool = consumer.pool().unwrap();
        assert_eq!(pool.slot_descriptors.len(), 4);
        assert_eq!(consumer.caps().unwrap().1, CAPS);
        let no = AtomicBool::new(false);
        let mut frames = 0;
        while let Ok(Some(item)) = consumer.try_next() {
            if let Item::Frame(f) = item {
                assert_eq!(f.size, FRAME);
                consumer.release(f.slot);
                frames += 1;
            }
        }
        // Four slots were reused by six frames: the last four survive.
        assert_eq!(frames, 4);
        assert!(matches!(
            consumer.next(&no, Some(Duration::from_millis(1))),
            Err(ChannelError::Timeout)
        ));
        drop(lock);
        let _ = std::fs::remove_file(shm::control_path(&channel));
    }
}
