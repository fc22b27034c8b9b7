// The contract both transports must meet, run against each.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::*;
use crate::cuda::gpu_or_skip;
use cudaipc_channel::{Consumer, ConsumerConfig, FrameMeta, Item, ProducerConfig};

/// A channel name no other test uses.
pub(crate) fn unique_channel(tag: &str) -> String {
    format!("t-{tag}-{:x}", cudaipc_channel::shm::random_u64())
}

fn write_slot(memory: &SlotMemory, data: &[u8]) {
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

fn frame_bytes(frame: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(frame * 7) as u8)
        .collect()
}

const SIZE: usize = 10_000;
const FRAMES: u64 = 40;
const CHILD_TEST: &str = "tests::contract_consumer_process";

/// What the producer's slots of one contract run are made of.
#[derive(Debug, Clone, Copy)]
enum Slots {
    /// The host transport on a channel of that kind.
    Host(cudaipc_channel::IpcMode),
    /// The cuda transport: a row of [`CUDA_COMPOSITIONS`].
    Cuda(CudaComposition),
}

impl Slots {
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
                .args([CHILD_TEST, "--exact", "--ignored", "--test-threads=1"])
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

/// A consumer of `contract`, run in a child process.
#[test]
#[ignore = "entry point of the consumer processes of the contract tests"]
fn contract_consumer_process() {
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

#[test]
fn host_transport_meets_the_contract() {
    contract(Slots::Host(cudaipc_channel::IpcMode::Legacy), None);
}

/// The same over a descriptor channel: the consumer processes find the
/// channel's socket and receive the control block and the slots' memory.
#[test]
fn host_transport_meets_the_contract_over_descriptors() {
    contract(Slots::Host(cudaipc_channel::IpcMode::Fd), None);
}

/// Every composition of the cuda transport's memory and ordering, each
/// with its own channel and consumer processes: own memory (legacy
/// channel, IPC handles), shared memory (descriptor channel, allocations
/// handed over the socket) and lent memory (legacy channel), each ordered
/// by events, host synchronisation and the timeline (on a legacy channel
/// a data file of the channel, on a descriptor channel handed over).
#[test]
fn cuda_transport_meets_the_contract_in_every_composition() {
    if let Some(device) = gpu_or_skip("cuda_transport_meets_the_contract_in_every_composition") {
        for composition in CUDA_COMPOSITIONS {
            // Shown with the failure of the composition that failed.
            eprintln!("contract: {composition}");
            contract(Slots::Cuda(composition), Some(device.clone()));
        }
    }
}

/// Lent memory has only legacy IPC handles: slots of it are refused on a
/// descriptor channel, and each memory kind belongs to its kind of channel.
#[test]
fn memory_is_composed_only_for_the_channel_that_hands_it_out() {
    use cudaipc_channel::IpcMode::{Fd, Legacy};
    let request = |ipc_mode| SlotRequest {
        channel: "cam0".into(),
        session: 1,
        generation: 1,
        count: 3,
        size: SIZE,
        permissions: 0o600,
        gpu_sync: GpuSync::Timeline,
        ipc_mode,
    };
    for (memory, ipc_mode, allowed) in [
        (MemoryKind::Lent, Legacy, true),
        (MemoryKind::Lent, Fd, false),
        (MemoryKind::Own, Legacy, true),
        (MemoryKind::Own, Fd, false),
        (MemoryKind::Shared, Fd, true),
        (MemoryKind::Shared, Legacy, false),
    ] {
        match CudaComposition::for_request(memory, &request(ipc_mode)) {
            Ok(composition) => {
                assert!(allowed, "{memory} memory composed on {ipc_mode:?}");
                assert_eq!(
                    composition,
                    CudaComposition {
                        memory,
                        ordering: GpuSync::Timeline
                    }
                );
            }
            Err(error) => {
                assert!(!allowed, "{memory} memory refused on {ipc_mode:?}: {error}");
                assert!(
                    matches!(error, TransportError::NoComposition { composition, ipc_mode: refused }
                        if composition.memory == memory && refused == ipc_mode),
                    "{error}"
                );
            }
        }
    }
    let refused = CudaComposition::for_request(MemoryKind::Lent, &request(Fd)).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "the cuda transport has no slots of lent memory ordered by the timeline on a descriptor channel"
    );
}

#[test]
fn auto_orders_the_cuda_transport_by_the_timeline() {
    if let Some(device) = gpu_or_skip("auto_orders_the_cuda_transport_by_the_timeline") {
        assert!(
            device.has_stream_value_ops(),
            "the GPU hosts we test on have value operations"
        );
        assert!(
            !device.is_integrated(),
            "the GPU hosts we test on are discrete"
        );
        assert!(matches!(
            resolve_ipc_mode(None, TransportKind::Cuda, Some(&device)),
            Ok(cudaipc_channel::IpcMode::Legacy)
        ));
        assert!(matches!(
            GpuSync::resolve(None, TransportKind::Cuda, Some(&device)),
            Ok(GpuSync::Timeline)
        ));
        assert!(matches!(
            GpuSync::resolve(Some(GpuSync::Event), TransportKind::Cuda, Some(&device)),
            Ok(GpuSync::Event)
        ));
    }
}

#[test]
fn the_timeline_needs_the_cuda_transport_and_value_operations() {
    let refused = |kind| GpuSync::resolve(Some(GpuSync::Timeline), kind, None).unwrap_err();
    assert!(matches!(
        refused(TransportKind::Host),
        TransportError::TimelineNeedsCuda
    ));
    // A device without value operations (here: none) cannot have it.
    let unsupported = refused(TransportKind::Cuda);
    assert!(
        matches!(unsupported, TransportError::TimelineUnsupported),
        "{unsupported}"
    );
    assert!(
        unsupported
            .to_string()
            .contains("CAN_USE_64_BIT_STREAM_MEM_OPS")
    );
    // Without a device (or one without value operations) auto means events.
    assert!(matches!(
        GpuSync::resolve(None, TransportKind::Cuda, None),
        Ok(GpuSync::Event)
    ));
    assert!(matches!(
        GpuSync::resolve(None, TransportKind::Host, None),
        Ok(GpuSync::Event)
    ));
    assert!(matches!(
        GpuSync::resolve(Some(GpuSync::Host), TransportKind::Cuda, None),
        Ok(GpuSync::Host)
    ));
}

/// Jetson's integrated GPU has no legacy CUDA IPC handles: there `auto`
/// takes a descriptor channel and an ordering without events, and asking
/// for either legacy one is refused saying why. Elsewhere nothing changes.
#[test]
fn an_integrated_gpu_gets_a_descriptor_channel_and_no_events() {
    use TransportKind::{Cuda, Host};
    use cudaipc_channel::IpcMode::{Fd, Legacy};
    let tegra = DeviceTraits {
        integrated: true,
        value_ops: true,
    };
    let tegra_without_value_ops = DeviceTraits {
        integrated: true,
        value_ops: false,
    };
    let discrete = DeviceTraits {
        integrated: false,
        value_ops: true,
    };
    let no_device = DeviceTraits::default();
    let mode = resolve_ipc_mode_for;
    assert!(matches!(mode(None, Cuda, tegra), Ok(Fd)));
    assert!(matches!(mode(None, Cuda, tegra_without_value_ops), Ok(Fd)));
    assert!(matches!(mode(None, Cuda, discrete), Ok(Legacy)));
    // The host transport uses no CUDA IPC: legacy stays the default.
    assert!(matches!(mode(None, Host, tegra), Ok(Legacy)));
    assert!(matches!(mode(None, Host, no_device), Ok(Legacy)));
    assert!(matches!(mode(Some(Legacy), Host, tegra), Ok(Legacy)));
    assert!(matches!(mode(Some(Fd), Cuda, discrete), Ok(Fd)));
    assert!(matches!(mode(Some(Legacy), Cuda, discrete), Ok(Legacy)));
    let refused = mode(Some(Legacy), Cuda, tegra).unwrap_err();
    assert!(
        matches!(
            refused,
            TransportError::NoLegacyCudaIpc {
                what: LegacyCudaIpc::Memory
            }
        ),
        "{refused}"
    );
    assert_eq!(
        refused.to_string(),
        "a legacy channel of the cuda transport needs CUDA IPC memory handles (cuIpcGetMemHandle), which an integrated GPU (CU_DEVICE_ATTRIBUTE_INTEGRATED: Jetson) does not have"
    );

    let sync = GpuSync::resolve_for;
    assert!(matches!(sync(None, Cuda, tegra), Ok(GpuSync::Timeline)));
    assert!(matches!(
        sync(None, Cuda, tegra_without_value_ops),
        Ok(GpuSync::Host)
    ));
    assert!(matches!(sync(None, Cuda, discrete), Ok(GpuSync::Timeline)));
    assert!(matches!(
        sync(
            None,
            Cuda,
            DeviceTraits {
                value_ops: false,
                ..discrete
            }
        ),
        Ok(GpuSync::Event)
    ));
    let refused = sync(Some(GpuSync::Event), Cuda, tegra).unwrap_err();
    assert!(
        refused.to_string().starts_with(
            "the event ordering needs CUDA IPC event handles (cuIpcGetEventHandle), which an integrated GPU"
        ),
        "{refused}"
    );
    assert!(matches!(
        sync(Some(GpuSync::Event), Host, tegra),
        Ok(GpuSync::Event)
    ));
    assert!(matches!(
        sync(Some(GpuSync::Host), Cuda, tegra),
        Ok(GpuSync::Host)
    ));
}

#[test]
fn host_data_file_names_are_confined_to_the_channel() {
    let pool = cudaipc_channel::PoolInfo {
        generation: 1,
        slot_size: 16,
        pool_descriptor: b"../../etc/passwd".to_vec(),
        slot_descriptors: vec![[0; cudaipc_channel::layout::SLOT_DESCRIPTOR_BYTES]],
    };
    let err = HostConsumerSlots::open("cam0", &pool, cudaipc_channel::shm::effective_uid())
        .err()
        .expect("must refuse");
    assert!(
        matches!(
            &err,
            TransportError::ForeignName { object: SharedObject::Slots, channel, name }
                if channel == "cam0" && name == "../../etc/passwd"
        ),
        "{err}"
    );
}

#[test]
fn auto_picks_host_without_cuda() {
    let kind = TransportKind::resolve(None);
    assert_eq!(kind == TransportKind::Cuda, crate::cuda::is_available());
    assert_eq!(
        TransportKind::resolve(Some(TransportKind::Host)),
        TransportKind::Host
    );
}

#[test]
fn wire_values_round_trip() {
    for kind in [TransportKind::Cuda, TransportKind::Host] {
        assert_eq!(TransportKind::from_wire(kind.wire_value()), Some(kind));
    }
    for sync in [GpuSync::Event, GpuSync::Host] {
        assert_eq!(GpuSync::from_wire(sync.wire_value()), Some(sync));
    }
    assert_eq!(TransportKind::from_wire(0), None);
    assert_eq!(GpuSync::from_wire(7), None);
}

/// Attaches an every-frame subscriber to `channel`, for the tests of one
/// producer's publishing; a failed read panics.
fn every_frame_subscriber(channel: String, no: &AtomicBool) -> Subscriber {
    Subscriber::attach(
        SubscriberConfig {
            channel,
            mode: cudaipc_channel::ConsumerMode::EveryFrame,
            wait_mode: cudaipc_channel::WaitMode::Hybrid,
            connect_timeout: Some(Duration::from_secs(10)),
            device_id: None,
            on_finish_read_error: Arc::new(|_, e| panic!("{e}")),
            ipc_mode: None,
            producers: Default::default(),
            hold: None,
            refuse_self_wait: false,
        },
        no,
        || {},
    )
    .unwrap()
}

/// A frame whose source is pushed again (imagefreeze, a tee) is published
/// again from a slot that still holds its copy: every frame arrives with
/// its own metadata and the right bytes, each source is copied at most
/// once per slot, and the publisher keeps only the last source's keeper.
#[test]
fn a_source_pushed_again_is_published_again_without_a_copy() {
    const PUSHES: u64 = 10;
    const SOURCES: u64 = 3;
    let channel = unique_channel("again");
    let publisher: Publisher<Arc<u64>> = Publisher::create(PublisherConfig {
        channel: channel.clone(),
        kind: TransportKind::Host,
        device: None,
        slots: 3,
        permissions: 0o600,
        gpu_sync: GpuSync::Event,
        when_full: cudaipc_channel::WhenFull::Block,
        wait_mode: cudaipc_channel::WaitMode::Hybrid,
        wait_for_consumers: 1,
        ipc_mode: Default::default(),
        peers: Default::default(),
    })
    .unwrap();
    publisher.configure(SIZE).unwrap();
    publisher.set_caps("application/x-test").unwrap();
    let reader = std::thread::spawn(move || {
        let no = AtomicBool::new(false);
        let mut subscriber = every_frame_subscriber(channel, &no);
        let mut pts = Vec::new();
        loop {
            match subscriber.next(&no).unwrap() {
                Event::Frame(frame) => {
                    let push = frame.pts.unwrap();
                    let bytes = frame.host_bytes().unwrap();
                    assert!(
                        bytes == frame_bytes(push / PUSHES, SIZE),
                        "push {push} arrived with other bytes"
                    );
                    pts.push(push);
                }
                Event::Caps(_) => {}
                Event::Eos => return pts,
                Event::ProducerGone(gone) => panic!("{gone:?}"),
            }
        }
    });
    let keepers: Vec<Arc<u64>> = (0..SOURCES).map(Arc::new).collect();
    for push in 0..SOURCES * PUSHES {
        let source = push / PUSHES;
        let meta = FrameMeta {
            size: SIZE as u64,
            pts: Some(push),
            ..Default::default()
        };
        let keeper = keepers[source as usize].clone();
        publisher
            .publish_copy_of(Some((source as usize + 1, keeper)), &meta, |memory| {
                write_slot(memory, &frame_bytes(source, SIZE));
                Ok::<(), TransportError>(())
            })
            .unwrap()
            .expect("block mode publishes every frame");
    }
    publisher.eos();
    let pts = reader.join().unwrap();
    assert_eq!(pts, (0..SOURCES * PUSHES).collect::<Vec<_>>());
    let stats = publisher.stats();
    assert_eq!(stats.copied + stats.repeated, SOURCES * PUSHES);
    assert!(stats.copied <= SOURCES * 3, "{} copied", stats.copied);
    // The last source is kept, the others were let go.
    assert_eq!(Arc::strong_count(&keepers[2]), 2);
    assert_eq!(Arc::strong_count(&keepers[0]), 1);
    assert_eq!(Arc::strong_count(&keepers[1]), 1);
    assert!(publisher.close(Duration::from_secs(1)));
    assert_eq!(Arc::strong_count(&keepers[2]), 1);
}

/// A writer's loan of a slot: published, a consumer reads what was written
/// into it; dropped unpublished, its slot goes back to the ring (with
/// `when_full=drop` a slot kept would show as no slot to lend); after the
/// channel closed, publishing it is an error, not a panic.
#[test]
fn a_loan_is_published_by_its_owner_or_given_back_when_dropped() {
    const SLOTS: usize = 2;
    let channel = unique_channel("loan");
    let publisher: Arc<Publisher<()>> = Arc::new(
        Publisher::create(PublisherConfig {
            channel: channel.clone(),
            kind: TransportKind::Host,
            device: None,
            slots: SLOTS,
            permissions: 0o600,
            gpu_sync: GpuSync::Event,
            when_full: cudaipc_channel::WhenFull::Drop,
            wait_mode: cudaipc_channel::WaitMode::Hybrid,
            wait_for_consumers: 0,
            ipc_mode: Default::default(),
            peers: Default::default(),
        })
        .unwrap(),
    );
    publisher.configure(SIZE).unwrap();
    publisher.set_caps("application/x-test").unwrap();
    let no = AtomicBool::new(false);
    let mut subscriber = every_frame_subscriber(channel, &no);
    let meta = |pts| FrameMeta {
        size: SIZE as u64,
        pts: Some(pts),
        ..Default::default()
    };

    // Every slot lent: no more to lend.
    let loans: Vec<_> = (0..SLOTS)
        .map(|_| publisher.loan(SIZE, &no).unwrap())
        .collect();
    assert!(matches!(
        publisher.loan(SIZE, &no),
        Err(ReserveError::Flushing)
    ));
    // Dropped unpublished (an unrendered buffer, an error): given back,
    // again and again.
    drop(loans);
    for _ in 0..3 * SLOTS {
        let loans: Vec<_> = (0..SLOTS)
            .map(|_| publisher.loan(SIZE, &no).expect("a dropped loan's slot"))
            .collect();
        drop(loans);
    }
    // A frame too big for the slots gets none (and keeps none).
    assert!(matches!(
        publisher.loan(SIZE + 1, &no),
        Err(ReserveError::TooSmall)
    ));

    for pts in 0..3 * SLOTS as u64 {
        let loan = publisher.loan(SIZE, &no).unwrap();
        write_slot(loan.memory(), &frame_bytes(pts, SIZE));
        // One dropped beside it is never seen by the consumer.
        drop(publisher.loan(SIZE, &no).unwrap());
        loan.publish(&meta(pts)).unwrap();
        let frame = loop {
            match subscriber.next(&no).unwrap() {
                Event::Frame(frame) => break frame,
                Event::Caps(_) => {}
                _ => panic!("the stream ended before frame {pts}"),
            }
        };
        assert_eq!(frame.pts, Some(pts));
        assert!(frame.host_bytes().unwrap() == frame_bytes(pts, SIZE));
    }
    assert_eq!(publisher.stats().zero_copy, 3 * SLOTS as u64);

    let late = publisher.loan(SIZE, &no).unwrap();
    publisher.close(Duration::ZERO);
    let error = late.publish(&meta(99)).unwrap_err();
    assert!(error.is_interrupted(), "{error}");
}
