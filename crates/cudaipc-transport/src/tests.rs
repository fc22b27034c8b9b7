// The transport's own tests; the contract every transport and composition
// meets is crate::conformance, run here by `conformance_suite!`.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::*;
use crate::conformance::{SIZE, Slots, frame_bytes, write_slot};
use crate::cuda::gpu_or_skip;
use cudaipc_channel::FrameMeta;
use cudaipc_channel::IpcMode;

/// A channel name no other test uses.
pub(crate) fn unique_channel(tag: &str) -> String {
    format!("t-{tag}-{:x}", cudaipc_channel::shm::random_u64())
}

// The transport contract (crate::conformance) over both transports and
// every composition of the cuda transport's memory and ordering: one line
// each.
crate::conformance_suite! {
    host_transport_meets_the_contract: Slots::Host(IpcMode::Legacy);
    // The consumer processes find the channel's socket and receive the
    // control block and the slots' memory.
    host_transport_meets_the_contract_over_descriptors: Slots::Host(IpcMode::Fd);
    // Own memory: a legacy channel, IPC handles.
    cuda_own_memory_by_events_meets_the_contract: Slots::cuda(MemoryKind::Own, GpuSync::Event);
    cuda_own_memory_by_host_meets_the_contract: Slots::cuda(MemoryKind::Own, GpuSync::Host);
    cuda_own_memory_by_timeline_meets_the_contract: Slots::cuda(MemoryKind::Own, GpuSync::Timeline);
    // Shared memory: a descriptor channel, allocations handed over the
    // socket (the timeline's block too).
    cuda_shared_memory_by_events_meets_the_contract: Slots::cuda(MemoryKind::Shared, GpuSync::Event);
    cuda_shared_memory_by_host_meets_the_contract: Slots::cuda(MemoryKind::Shared, GpuSync::Host);
    cuda_shared_memory_by_timeline_meets_the_contract: Slots::cuda(MemoryKind::Shared, GpuSync::Timeline);
    // Lent memory: a legacy channel, allocations made here.
    cuda_lent_memory_by_events_meets_the_contract: Slots::cuda(MemoryKind::Lent, GpuSync::Event);
    cuda_lent_memory_by_host_meets_the_contract: Slots::cuda(MemoryKind::Lent, GpuSync::Host);
    cuda_lent_memory_by_timeline_meets_the_contract: Slots::cuda(MemoryKind::Lent, GpuSync::Timeline);
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
        frame_data_bound: 0,
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
                Event::Caps(_) | Event::StreamEvent(_) => {}
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
            frame_data_bound: 0,
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
