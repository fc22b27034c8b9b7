// SPDX-License-Identifier: MPL-2.0

//! The contract every transport, and every composition of the cuda
//! transport's memory and ordering, must meet: a producer here writes
//! [`FRAMES`] frames into its slots, and two consumer processes read every
//! one of them intact, in order, through the channel (a GPU-ordered read
//! queued behind a closed gate included: the release must wait for it).
//!
//! Adding a transport or composition to the suite is one line in a
//! `conformance_suite!` (this crate's runs in `src/tests.rs`); its
//! `the_suite_covers_every_composition` test fails while a row of
//! [`CUDA_COMPOSITIONS`] has none. Memory that no constructor makes (as
//! lent memory) also needs its way in [`Slots`]' `create`. Other crates
//! use it through the `conformance` feature:
//!
//! ```ignore
//! cudaipc_transport::conformance_suite! {
//!     host_transport_meets_the_contract: Slots::Host(IpcMode::Legacy);
//!     cuda_own_memory_by_events_meets_the_contract: Slots::cuda(MemoryKind::Own, GpuSync::Event);
//! }
//! ```

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::cuda::gpu_or_skip;
use crate::*;
use cudaipc_channel::{Consumer, ConsumerConfig, FrameMeta, Item, ProducerConfig};

/// Defines a test per line (`name: slots;`) that runs the contract on those
/// slots, the consumer processes' entry point, and a test that the lines
/// cover every composition.
#[macro_export]
macro_rules! conformance_suite {
    ($($(#[$attr:meta])* $test:ident: $slots:expr;)*) => {
        #[test]
        #[ignore = "entry point of the conformance suite's consumer processes"]
        fn conformance_consumer_process() {
            $crate::conformance::consumer_process();
        }

        $(
            #[test]
            $(#[$attr])*
            fn $test() {
                $crate::conformance::run(stringify!($test), $slots);
            }
        )*

        #[test]
        fn the_suite_covers_every_composition() {
            $crate::conformance::assert_covers(&[$($slots),*]);
        }
    };
}

/// A channel name no other test uses.
fn unique_channel(tag: &str) -> String {
    format!("t-{tag}-{:x}", cudaipc_channel::shm::random_u64())
}

/// Writes `data` into a producer's slot.
pub fn write_slot(memory: &SlotMemory, data: &[u8]) {
    match memory {
        SlotMemory::Host(region) => {
            // SAFETY: the producer owns the reserved slot; nothing else views it.
            let bytes =
                unsafe { region.as_mut_slice() }.expect("the producer's mapping is writable");
            bytes[..data.len()].copy_from_slice(data);
        }
        SlotMemory::Device(region) => {
            // Ordered on the shared stream, like an upstream element's kernel.
            region.upload(data).unwrap();
        }
    }
}

fn read_slot(memory: &SlotMemory, len: usize) -> Vec<u8> {
    match memory {
        SlotMemory::Host(region) => region.as_slice()[..len].to_vec(),
        SlotMemory::Device(region) => {
            let mut out = vec![0u8; len];
            region.download(&mut out).unwrap();
            out
        }
    }
}

/// The bytes of frame `frame`: each frame differs from the last.
pub fn frame_bytes(frame: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(frame * 7) as u8)
        .collect()
}

/// The slot size of the suite's channels.
pub const SIZE: usize = 10_000;
const FRAMES: u64 = 40;
/// The test `conformance_suite!` defines as the consumer processes' entry
/// point (a filter: the module path is the caller's).
const CHILD_TEST: &str = "conformance_consumer_process";

/// What the producer's slots of one contract run are made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slots {
    /// The host transport on a channel of that kind.
    Host(cudaipc_channel::IpcMode),
    /// The cuda transport: a row of [`CUDA_COMPOSITIONS`].
    Cuda(CudaComposition),
}

impl Slots {
    /// The cuda transport's slots of `memory`, ordered by `ordering`.
    pub const fn cuda(memory: MemoryKind, ordering: GpuSync) -> Self {
        Self::Cuda(CudaComposition { memory, ordering })
    }

    fn kind(self) -> TransportKind {
        match self {
            Slots::Host(_) => TransportKind::Host,
            Slots::Cuda(_) => TransportKind::Cuda,
        }
    }

    fn gpu_sync(self) -> GpuSync {
        match self {
            // Announced, not used: nothing to order on host memory.
            Slots::Host(_) => GpuSync::Event,
            Slots::Cuda(composition) => composition.ordering,
        }
    }

    fn ipc_mode(self) -> cudaipc_channel::IpcMode {
        match self {
            Slots::Host(ipc_mode) => ipc_mode,
            Slots::Cuda(composition) => composition.memory.ipc_mode(),
        }
    }

    /// The slots, by the transport's constructors; lent memory is
    /// allocated here and kept in `lent` (it must outlive the slots).
    fn create(
        self,
        request: &SlotRequest,
        device: Option<&Arc<crate::cuda::Device>>,
        lent: &mut Vec<crate::cuda::DeviceRegion>,
    ) -> Box<dyn ProducerSlots> {
        let composition = match self {
            Slots::Host(_) => {
                return create_producer_slots(TransportKind::Host, request, None).unwrap();
            }
            Slots::Cuda(composition) => composition,
        };
        let device = device.expect("the cuda transport runs on a device");
        let slots = match composition.memory {
            MemoryKind::Own | MemoryKind::Shared => {
                CudaProducerSlots::create(device, request).unwrap()
            }
            MemoryKind::Lent => {
                lent.extend((0..request.count).map(|_| {
                    crate::cuda::DeviceBuffer::new(device, request.size)
                        .unwrap()
                        .into_region()
                }));
                let ptrs = lent.iter().map(|region| region.ptr()).collect();
                // SAFETY: `lent` holds the allocations, and the caller
                // keeps it longer than the slots.
                unsafe { CudaProducerSlots::lend(device, 0, ptrs, request.size, request) }.unwrap()
            }
        };
        assert_eq!(slots.composition(), composition);
        Box::new(slots)
    }
}

/// Runs the contract for `test` on `slots_of`: where the slots need a GPU
/// and none is here, prints `SKIPPED: no CUDA device` (a failure with
/// `CUDAIPC_REQUIRE_GPU=1`).
pub fn run(test: &str, slots_of: Slots) {
    let device = match slots_of {
        Slots::Host(_) => None,
        Slots::Cuda(composition) => match gpu_or_skip(test) {
            // Shown with a failure.
            Some(device) => {
                eprintln!("contract: {composition}");
                Some(device)
            }
            None => return,
        },
    };
    contract(slots_of, device);
}

/// Fails unless `suite` holds both host channel kinds and every row of
/// [`CUDA_COMPOSITIONS`].
pub fn assert_covers(suite: &[Slots]) {
    let wanted = [
        Slots::Host(cudaipc_channel::IpcMode::Legacy),
        Slots::Host(cudaipc_channel::IpcMode::Fd),
    ]
    .into_iter()
    .chain(CUDA_COMPOSITIONS.map(Slots::Cuda));
    for slots in wanted {
        assert!(
            suite.contains(&slots),
            "the conformance suite has no line for {slots:?}"
        );
    }
}

/// The producer side runs here; the consumers run in child processes (a
/// process cannot open its own CUDA IPC handles, and this is the real use).
fn contract(slots_of: Slots, device: Option<Arc<crate::cuda::Device>>) {
    let kind = slots_of.kind();
    let gpu_sync = slots_of.gpu_sync();
    let ipc_mode = slots_of.ipc_mode();
    let channel = unique_channel("transport");
    let no = AtomicBool::new(false);
    let producer = cudaipc_channel::Producer::create(ProducerConfig {
        channel: channel.clone(),
        transport: kind.wire_value(),
        gpu_sync: gpu_sync.wire_value(),
        device_uuid: device.as_ref().map(|d| d.uuid()).unwrap_or_default(),
        ipc_mode,
        ..Default::default()
    })
    .unwrap();
    let request = SlotRequest {
        channel: channel.clone(),
        session: producer.session(),
        generation: 1,
        count: 3,
        size: SIZE,
        permissions: 0o600,
        gpu_sync,
        ipc_mode,
    };
    // Declared before the slots: dropped after them.
    let mut lent = Vec::new();
    let slots = slots_of.create(&request, device.as_ref(), &mut lent);
    assert_eq!(
        (slots.slot_count(), slots.slot_size(), slots.kind()),
        (3, SIZE, kind)
    );
    let memory = slots.shareables().unwrap();
    if !memory.is_empty() {
        producer.offer_pool(1, memory);
    }
    producer
        .configure_pool(
            SIZE as u64,
            &slots.slot_descriptors(),
            &slots.pool_descriptor(),
            &no,
        )
        .unwrap();
    producer.set_caps("application/x-test", &no).unwrap();

    let children: Vec<_> = (0..2)
        .map(|_| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([CHILD_TEST, "--ignored", "--test-threads=1"])
                .env("CUDAIPC_CONTRACT_CHANNEL", &channel)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Both consumers attach before the first frame: they wait for us.
    let start = std::time::Instant::now();
    while producer.stats().consumers < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "consumers did not attach"
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    for frame in 0..FRAMES {
        let slot = producer.reserve(&no).unwrap().unwrap();
        slots.before_write(slot, &producer).unwrap();
        write_slot(&slots.slot_memory(slot), &frame_bytes(frame, SIZE));
        slots.after_write(slot).unwrap();
        producer
            .publish(
                slot,
                &FrameMeta {
                    size: SIZE as u64,
                    ..Default::default()
                },
            )
            .unwrap();
    }
    producer.publish_eos();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        // What the consumer found out about its mapping (see the child).
        for line in String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.contains("mapped read-only"))
        {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "consumer process: {line}");
        }
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "consumer process failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Holds the work queued on the device's shared stream until opened: a
/// wait for a word of registered host memory.
struct StreamGate {
    registration: crate::cuda::HostRegistration,
    word: memmap2::MmapMut,
    value: std::sync::atomic::AtomicU64,
    copy: crate::cuda::DeviceRegion,
    device: Arc<crate::cuda::Device>,
}

impl StreamGate {
    fn new(device: &Arc<crate::cuda::Device>) -> Self {
        let mut word = memmap2::MmapMut::map_anon(4096).unwrap();
        // SAFETY: a page-aligned, writable anonymous mapping that the gate
        // keeps (declared after the registration, so unmapped after it).
        let registration =
            unsafe { crate::cuda::HostRegistration::new(device, word.as_mut_ptr(), 4096) }.unwrap();
        let copy = crate::cuda::DeviceBuffer::new(device, SIZE)
            .unwrap()
            .into_region();
        Self {
            registration,
            word,
            value: Default::default(),
            copy,
            device: device.clone(),
        }
    }

    fn counter(&self) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: the page is 8-aligned, lives as long as `self`, and is
        // only accessed as this atomic (by us and the GPU).
        unsafe { &*(self.word.as_ptr() as *const std::sync::atomic::AtomicU64) }
    }

    /// Later work on the shared stream waits for `open`.
    fn close(&self) {
        let next = self
            .value
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let address = self.registration.device_address(0).unwrap();
        // SAFETY: an aligned word of the registered page, which stays
        // registered until the gate goes (after `open`, the test waits for
        // the stream in its download).
        unsafe { self.device.stream().wait_value(address, next) }.unwrap();
    }

    fn open(&self) {
        let value = self.value.load(std::sync::atomic::Ordering::Relaxed);
        self.counter()
            .store(value, std::sync::atomic::Ordering::Release);
    }
}

/// A consumer of `contract`, run in a child process (through the test
/// `conformance_suite!` defines).
pub fn consumer_process() {
    let channel = std::env::var("CUDAIPC_CONTRACT_CHANNEL").expect("run by contract()");
    let no = AtomicBool::new(false);
    let mut consumer = Consumer::attach(
        ConsumerConfig {
            channel: channel.clone(),
            connect_timeout: Some(Duration::from_secs(10)),
            ..Default::default()
        },
        &no,
    )
    .unwrap();
    let pool = consumer.pool().unwrap();
    let device = match TransportKind::from_wire(consumer.info().transport).unwrap() {
        TransportKind::Cuda => Some(crate::cuda::Device::get(0).unwrap()),
        TransportKind::Host => None,
    };
    let view = open_consumer_slots(
        &channel,
        consumer.info(),
        &pool,
        device.as_ref(),
        consumer.index(),
    )
    .unwrap();
    assert_eq!((view.slot_count(), view.slot_size()), (3, SIZE));
    match (view.kind(), consumer.info().descriptor_channel.is_some()) {
        (TransportKind::Host, _) => {
            assert!(view.is_read_only(), "a consumer's host slots are read-only")
        }
        (TransportKind::Cuda, true) => {
            // Straight to stderr, past this child's output capture: the
            // parent reports it.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "device slots mapped read-only: {}",
                view.is_read_only()
            );
        }
        (TransportKind::Cuda, false) => {}
    }
    consumer.set_release_descriptors(&view.release_descriptors());
    // GPU-ordered reads (not `gpu-sync=host`, whose release synchronises
    // the stream): every other frame is read by a copy queued behind a
    // closed gate, and released before the gate opens.
    let gated = match (view.kind(), GpuSync::from_wire(consumer.info().gpu_sync)) {
        (TransportKind::Cuda, Some(GpuSync::Event | GpuSync::Timeline)) => {
            device.as_ref().map(StreamGate::new)
        }
        _ => None,
    };
    let mut seen = 0u64;
    while let Item::Frame(f) = consumer.next(&no, Some(Duration::from_secs(10))).unwrap() {
        assert_eq!(f.seq, seen);
        view.before_read(f.slot, false, &|| false).unwrap();
        if let (Some(gate), SlotMemory::Device(slot)) = (&gated, view.slot_memory(f.slot))
            && f.seq % 2 == 1
        {
            // The release must wait for the pending read: a producer that
            // wrote the slot again meanwhile (it has 20 ms) changes the copy.
            gate.close();
            gate.copy.copy_from(&slot.sub(0, SIZE).unwrap()).unwrap();
            view.finish_read(f.slot).unwrap();
            consumer.release(f.slot);
            std::thread::sleep(Duration::from_millis(20));
            gate.open();
            let mut got = vec![0u8; SIZE];
            gate.copy.download(&mut got).unwrap();
            assert!(
                got == frame_bytes(f.seq, SIZE),
                "frame {} changed before its queued read ran",
                f.seq
            );
            seen += 1;
            continue;
        }
        let got = read_slot(&view.slot_memory(f.slot), f.size as usize);
        assert!(
            got == frame_bytes(f.seq, SIZE),
            "frame {} arrived changed",
            f.seq
        );
        view.finish_read(f.slot).unwrap();
        consumer.release(f.slot);
        seen += 1;
    }
    assert_eq!(seen, FRAMES);
}
