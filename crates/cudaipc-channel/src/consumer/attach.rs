// Attaching a consumer: finding the channel (its name or its socket),
// checking who made it and its header, and claiming a consumer record.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use super::*;

impl Consumer {
    /// Attaches to a channel, waiting up to the connect timeout for a live
    /// producer to create it.
    pub fn attach(config: ConsumerConfig, interrupt: &AtomicBool) -> Result<Self, ChannelError> {
        shm::validate_channel_name(&config.channel)?;
        let path = shm::control_path(&config.channel);
        let deadline = config.connect_timeout.map(|t| Instant::now() + t);
        // A consumer that was there before the producer gets its first frame:
        // its marker makes a new producer wait for it (see Producer::reserve)
        // until it is ready to take frames (`mark_ready`), so it goes with
        // the consumer (one that found the producer there needs none: the
        // producer waits for it while it starts, see `START_LIMIT`). Not for a single look (no time to wait): its marker
        // would come and go at once, and one who watches or signals waiting
        // consumers (the subscriber's first look, then its wait) could catch
        // it instead of the lasting one.
        let mut marker = (config.connect_timeout != Some(Duration::ZERO))
            .then(|| crate::directory::WaiterMarker::create(&config.channel))
            .flatten();
        let mut waited = false;
        loop {
            if interrupt.load(Ordering::Acquire) {
                return Err(ChannelError::Interrupted);
            }
            let descriptors = match config.ipc_mode {
                Some(mode) => mode == IpcMode::Fd,
                None => std::fs::symlink_metadata(socket::socket_path(&config.channel)).is_ok(),
            };
            if descriptors {
                match socket::receive_control_block(&config.channel, &config.producers, true) {
                    Ok(shared) => {
                        if let Some(mut consumer) = Self::attach_to(shared, &config, waited, true)?
                        {
                            consumer.info.descriptor_channel = Some(config.producers.clone());
                            consumer.waiter_marker = marker.take().filter(|_| waited);
                            return Ok(consumer);
                        }
                    }
                    // Nobody listens yet (or any more): wait.
                    Err(socket::RequestError::NoProducer | socket::RequestError::Gone) => {}
                    Err(socket::RequestError::Channel(e)) => return Err(e),
                }
            } else {
                match SharedFile::open(&path) {
                    Ok(shared) => {
                        if let Some(mut consumer) = Self::attach_to(shared, &config, waited, false)?
                        {
                            consumer.waiter_marker = marker.take().filter(|_| waited);
                            return Ok(consumer);
                        }
                        // The remains of a producer that died (by any signal):
                        // removed, if they are ours, so they do not linger.
                        let _ = crate::directory::remove_if_stale(&config.channel);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                        let owner = crate::platform::path_owner_and_mode(&path).ok();
                        return Err(ChannelError::NoAccess {
                            channel: config.channel.clone(),
                            endpoint: crate::Endpoint::File(path),
                            owner,
                        });
                    }
                    Err(e) => {
                        return Err(ChannelError::io(
                            format!("cannot open {}", path.display()),
                            e,
                        ));
                    }
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(ChannelError::NoProducer {
                    channel: config.channel.clone(),
                });
            }
            waited = true;
            std::thread::sleep(ATTACH_POLL);
        }
    }

    /// `Ok(None)`: the file is the remains of a dead or closed producer, or
    /// still being created; try again later. `from_start`: take the frames
    /// published before we attached too, as far as they are still there.
    fn attach_to(
        shared: SharedFile,
        config: &ConsumerConfig,
        from_start: bool,
        descriptors: bool,
    ) -> Result<Option<Self>, ChannelError> {
        if shared.len() < std::mem::size_of::<u64>() * 2 {
            return Err(ChannelError::Corrupt(Corruption::BlockTooSmall {
                len: shared.len(),
            }));
        }
        check_owner(&shared, &config.channel, &config.producers)?;
        let info = validate_header(&shared)?;
        let shared = Arc::new(shared);
        let h = control_header(&shared);
        if h.state.load(Ordering::SeqCst) != STATE_OPEN || !producer_alive(&shared) {
            return Ok(None);
        }
        // Names in the shm folder, and CUDA's IPC handles (of memory and
        // events), serve one PID namespace; the descriptors of a descriptor
        // channel cross them (and containers) over its socket, unless the
        // GPU work is ordered by interprocess events.
        let crosses =
            descriptors && (info.transport == TRANSPORT_HOST || info.gpu_sync != GPU_SYNC_EVENT);
        let ns = h.producer_pid_namespace.load(Ordering::Relaxed);
        if ns != shm::pid_namespace() && !crosses {
            return Err(ChannelError::OtherPidNamespace {
                channel: config.channel.clone(),
                producer_pid: info.producer_pid,
                descriptor_channel: descriptors,
            });
        }
        for index in 0..MAX_CONSUMERS {
            let lock_byte = CONSUMER_LOCK_BASE + index as i64;
            if !shm::try_lock_byte(&shared.file, lock_byte)
                .map_err(|e| ChannelError::io("cannot lock a consumer record", e))?
            {
                continue;
            }
            let bit = 1u64 << index;
            let record = &h.consumers[index];
            // A dead previous owner may have left its bit on some slots.
            for slot in &h.slots {
                slot.holders.fetch_and(!bit, Ordering::SeqCst);
            }
            record
                .mode
                .store(config.mode.record_value(), Ordering::Relaxed);
            record
                .hold
                .store(config.hold.unwrap_or(u32::MAX), Ordering::Relaxed);
            record.pid.store(std::process::id(), Ordering::Relaxed);
            record
                .attached_ns
                .store(shm::monotonic_ns(), Ordering::Relaxed);
            record.ready_ns.store(0, Ordering::Relaxed);
            record.caught_up.store(0, Ordering::Relaxed);
            record.session.store(shm::random_u64(), Ordering::Relaxed);
            record.frames_received.store(0, Ordering::Relaxed);
            record.frames_missed.store(0, Ordering::Relaxed);
            write_seqlocked(&record.release_seqlock, || {
                record.release_count.store(0, Ordering::Relaxed)
            });
            // Join late: the next frame published after the producer can see
            // us is the first one we get; or, having waited for the producer,
            // the oldest one it still has (earlier ones are not "missed").
            let join_cursor = |published: u64| match from_start {
                true => published.saturating_sub(MAX_SLOTS as u64),
                false => published,
            };
            // Until the final cursor is in place, one at or before it holds
            // the producer back: a record seen active with no cursor would
            // let it replace the pool or caps of frames we are about to take.
            record.cursor.store(
                join_cursor(h.published.load(Ordering::SeqCst)),
                Ordering::SeqCst,
            );
            record.state.store(CONSUMER_ACTIVE, Ordering::SeqCst);
            let published = h.published.load(Ordering::SeqCst);
            let cursor = join_cursor(published);
            record.cursor.store(cursor, Ordering::SeqCst);
            wait::notify(&h.release_futex, &h.producer_sleepers);
            return Ok(Some(Self {
                shared: shared.clone(),
                config: config.clone(),
                index,
                bit,
                info,
                cursor,
                last_published: published,
                silent_before: published,
                slot_count: 0,
                slot_size: 0,
                pool_generation: 0,
                pool_read: None,
                caps_read: None,
                missed: 0,
                missed_pending: 0,
                received: 0,
                waits: 0,
                pacing: Pacing::default(),
                travelling: Default::default(),
                ready: false,
                caught_up: false,
                waiter_marker: None,
                every_slot_held_since: None,
            }));
        }
        Err(ChannelError::TooManyConsumers)
    }
}

/// Whoever can create a file in the shm folder can create a channel's
/// control block before its real producer: the block's owner (of the open
/// file, not of the path, which may have been replaced since) must be a
/// trusted producer. Data files are checked against the same owner.
fn check_owner(shared: &SharedFile, channel: &str, producers: &Peers) -> Result<(), ChannelError> {
    let (uid, gid) = crate::platform::owner_ids(&shared.file)
        .map_err(|e| ChannelError::io("cannot inspect the control block", e))?;
    if producers.allows(uid, gid) {
        return Ok(());
    }
    Err(ChannelError::UntrustedProducer {
        channel: channel.to_owned(),
        endpoint: crate::Endpoint::File(shared.path.clone()),
        uid,
        gid,
        consumer_uid: shm::effective_uid(),
    })
}

fn validate_header(shared: &SharedFile) -> Result<ChannelInfo, ChannelError> {
    let words = shared.map.as_ptr() as *const AtomicU64;
    // SAFETY: the mapping holds at least two aligned u64 words (checked by
    // the caller); atomics make a concurrent writer harmless.
    let (magic, version_word) = unsafe {
        (
            (*words).load(Ordering::Relaxed),
            (*words.add(1)).load(Ordering::Relaxed),
        )
    };
    if magic != MAGIC {
        return Err(ChannelError::Corrupt(Corruption::Magic { found: magic }));
    }
    let version = version_word as u32;
    if version != PROTOCOL_VERSION {
        return Err(ChannelError::ProtocolVersion {
            found: version,
            supported: PROTOCOL_VERSION,
        });
    }
    if shared.len() < control_size() {
        return Err(ChannelError::Corrupt(Corruption::BlockSize {
            len: shared.len(),
            expected: control_size(),
        }));
    }
    let h = control_header(shared);
    let r = Ordering::Relaxed;
    let frame_data_bound = checked_frame_data_bound(h, shared.len());
    let layout_ok = h.header_size.load(r) as usize == std::mem::size_of::<ControlHeader>()
        && frame_data_bound.is_some()
        && h.max_slots.load(r) as usize == MAX_SLOTS
        && h.max_consumers.load(r) as usize == MAX_CONSUMERS
        && h.slot_record_size.load(r) as usize == std::mem::size_of::<SlotRecord>()
        && h.consumer_record_size.load(r) as usize == std::mem::size_of::<ConsumerRecord>();
    if !layout_ok {
        return Err(ChannelError::Corrupt(Corruption::HeaderSizes));
    }
    let transport = h.transport.load(r);
    if transport != TRANSPORT_HOST && transport != TRANSPORT_CUDA {
        return Err(ChannelError::Corrupt(Corruption::Transport {
            found: transport,
        }));
    }
    let gpu_sync = h.gpu_sync.load(r);
    if ![GPU_SYNC_EVENT, GPU_SYNC_HOST, GPU_SYNC_TIMELINE].contains(&gpu_sync) {
        return Err(ChannelError::Corrupt(Corruption::GpuSync {
            found: gpu_sync,
        }));
    }
    let mut device_uuid = [0u8; 16];
    device_uuid[..8].copy_from_slice(&h.device_uuid[0].load(r).to_le_bytes());
    device_uuid[8..].copy_from_slice(&h.device_uuid[1].load(r).to_le_bytes());
    Ok(ChannelInfo {
        frame_data_bound: frame_data_bound.unwrap_or(0),
        transport,
        gpu_sync,
        device_ordinal: h.device_ordinal.load(r),
        device_uuid,
        producer_pid: h.producer_pid.load(r),
        producer_session: h.producer_session.load(r),
        producer_uid: shared
            .owner_uid()
            .map_err(|e| ChannelError::io("cannot inspect the control block", e))?,
        descriptor_channel: None,
    })
}
