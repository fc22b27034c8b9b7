// Creating a channel: claiming its name (a file in the shm folder, or a
// socket for a descriptor channel), replacing a dead producer's, and
// handing a descriptor channel's memory to its consumers.

use super::*;

impl Producer {
    /// Creates the channel. Fails with `InUse` if a live producer owns the
    /// name; replaces the channel of a dead one.
    pub fn create(config: ProducerConfig) -> Result<Self, ChannelError> {
        shm::validate_channel_name(&config.channel)?;
        // Before any file is made with it: a setuid, setgid or sticky bit
        // (or a decimal 777 taken for octal) must not reach a mode.
        Setting::Permissions.check(u64::from(config.permissions))?;
        Setting::FrameDataBound.check(u64::from(config.frame_data_bound))?;
        // Areas start on 8-byte boundaries: a bound rounds up to that.
        let config = ProducerConfig {
            frame_data_bound: config.frame_data_bound.next_multiple_of(8),
            ..config
        };
        if config.ipc_mode == IpcMode::Fd {
            return Self::create_descriptor_channel(config);
        }
        // A live descriptor channel of this name: in use too.
        if let Some(pid) = socket::live_producer(&config.channel) {
            return Err(ChannelError::InUse {
                channel: config.channel.clone(),
                pid,
            });
        }
        let path = shm::control_path(&config.channel);
        let session = shm::random_u64();
        // Built without a name (or under a private one), then linked to the
        // public one, so no one ever sees a half-initialised or unlocked
        // control block.
        let (mut shared, temp) = Self::create_private_block(&path, &config)?;
        let remove_temp = || {
            if let Some(temp) = &temp {
                let _ = std::fs::remove_file(temp);
            }
        };
        let locked = shm::try_lock_byte(&shared.file, PRODUCER_LOCK_BYTE);
        if !matches!(locked, Ok(true)) {
            remove_temp();
            return Err(match locked {
                Err(e) => ChannelError::io("cannot lock the control block", e),
                Ok(_) => ChannelError::Corrupt(crate::Corruption::FreshBlockLocked),
            });
        }
        init_header(control_header(&shared), &config, session);
        let claimed = Self::claim_name(
            || match &temp {
                Some(temp) => shm::link_exclusive(temp, &path),
                None => shm::link_unnamed(&shared.file, &path),
            },
            &path,
            &config.channel,
        );
        remove_temp();
        claimed?;
        shared.path = path;
        Ok(Self::with_block(shared, config, session, None))
    }

    /// A control block not yet under its public name `path`: a file without
    /// a name (O_TMPFILE), which a producer killed before linking it leaves
    /// nowhere; where the shm folder's file system cannot, a file under a
    /// random private name, returned too (left behind by such a kill).
    fn create_private_block(
        path: &std::path::Path,
        config: &ProducerConfig,
    ) -> Result<(SharedFile, Option<std::path::PathBuf>), ChannelError> {
        let dir = shm::shm_dir();
        let size = control_file_size(config.frame_data_bound);
        match SharedFile::create_unnamed(&dir, path, size, config.permissions) {
            Ok(Some(shared)) => return Ok((shared, None)),
            Ok(None) => {}
            Err(e) => {
                return Err(ChannelError::io(
                    format!("cannot create a control block in {}", dir.display()),
                    e,
                ));
            }
        }
        // The name is random; if another user took it anyway, a fresh one.
        let mut attempt = 0;
        loop {
            let temp = dir.join(format!(
                ".cudaipc-new-{}-{:016x}",
                std::process::id(),
                shm::random_u64()
            ));
            match SharedFile::create_exclusive(&temp, size, config.permissions) {
                Ok(shared) => return Ok((shared, Some(temp))),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 8 => {
                    attempt += 1;
                }
                Err(e) => {
                    return Err(ChannelError::io(
                        format!("cannot create {}", temp.display()),
                        e,
                    ));
                }
            }
        }
    }

    fn with_block(
        shared: SharedFile,
        config: ProducerConfig,
        session: u64,
        listener: Option<socket::Listener>,
    ) -> Self {
        Self {
            shared,
            config,
            session,
            reserved: AtomicU64::new(0),
            slot_count: AtomicU32::new(0),
            next_slot_hint: AtomicUsize::new(0),
            publish: Mutex::new(0),
            waits: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            overwritten: AtomicU64::new(0),
            reclaimed: AtomicU64::new(0),
            waiters_gate: Mutex::new(None),
            gate_open: AtomicBool::new(false),
            listener: Mutex::new(listener),
            last_blockers: Mutex::new(Vec::new()),
            slots_needed: Mutex::new(None),
        }
    }

    /// `IpcMode::Fd`: the control block is a sealed memfd, handed to the
    /// allowed consumers over the channel's socket, whose name is the
    /// channel's claim.
    fn create_descriptor_channel(config: ProducerConfig) -> Result<Self, ChannelError> {
        let session = shm::random_u64();
        let label = socket::socket_path(&config.channel);
        // A live channel of the other mode under this name is in use too.
        if let Ok(legacy) = SharedFile::open_read_only(&shm::control_path(&config.channel))
            && shm::byte_is_locked(&legacy.file, PRODUCER_LOCK_BYTE).unwrap_or(false)
        {
            let pid = if legacy.len() >= control_size() {
                control_header(&legacy).producer_pid.load(Ordering::Relaxed)
            } else {
                0
            };
            return Err(ChannelError::InUse {
                channel: config.channel.clone(),
                pid,
            });
        }
        let shared = SharedFile::create_sealed(
            &format!("cudaipc-{}", config.channel),
            &label,
            control_file_size(config.frame_data_bound),
        )
        .map_err(|e| ChannelError::io("cannot create the control block", e))?;
        if !matches!(
            shm::try_lock_byte(&shared.file, PRODUCER_LOCK_BYTE),
            Ok(true)
        ) {
            return Err(ChannelError::Corrupt(
                crate::Corruption::FreshBlockUnlockable,
            ));
        }
        init_header(control_header(&shared), &config, session);
        // Consumers may connect as soon as it is bound: the block is ready.
        let listener = socket::Listener::bind(
            &config.channel,
            config.permissions,
            config.peers.clone(),
            &shared.file,
        )?;
        Ok(Self::with_block(shared, config, session, Some(listener)))
    }

    /// A descriptor channel's host slot memory of pool `generation`, handed
    /// to its consumers from now on. Nothing for other channels.
    pub fn offer_pool(&self, generation: u64, fds: Vec<crate::platform::Shareable>) {
        if let Some(listener) = self.listener.lock().unwrap().as_ref() {
            listener.offer_pool(generation, fds);
        }
    }

    fn claim_name(
        link: impl Fn() -> std::io::Result<()>,
        path: &std::path::Path,
        channel: &str,
    ) -> Result<(), ChannelError> {
        for _ in 0..16 {
            match link() {
                Ok(()) => {
                    // Data files of earlier producers of this name are orphans now.
                    shm::remove_data_files(channel);
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(ChannelError::io(
                        format!("cannot create {}", path.display()),
                        e,
                    ));
                }
            }
            // Someone has the name: a live producer, or the remains of a dead one.
            let existing = match SharedFile::open(path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    return Err(ChannelError::NameTaken {
                        channel: channel.to_owned(),
                        path: path.to_owned(),
                        owner_uid: None,
                        source: Some(e),
                    });
                }
                Err(e) => {
                    return Err(ChannelError::io(
                        format!(
                            "cannot create channel '{channel}': {} is in the way",
                            path.display()
                        ),
                        e,
                    ));
                }
            };
            // Only our own files are ours to judge and replace: a file of
            // another user under this name is refused, naming it.
            match existing.owner_uid() {
                Ok(uid) if uid == shm::effective_uid() => {}
                Ok(uid) => {
                    return Err(ChannelError::NameTaken {
                        channel: channel.to_owned(),
                        path: path.to_owned(),
                        owner_uid: Some(uid),
                        source: None,
                    });
                }
                Err(e) => {
                    return Err(ChannelError::io(
                        format!("cannot inspect {}", path.display()),
                        e,
                    ));
                }
            }
            let got_lock = take_lock_of_dead_producer(&existing)
                .map_err(|e| ChannelError::io("cannot test the producer lock", e))?;
            if !got_lock {
                let pid = if existing.len() >= control_size() {
                    control_header(&existing)
                        .producer_pid
                        .load(Ordering::Relaxed)
                } else {
                    0
                };
                return Err(ChannelError::InUse {
                    channel: channel.to_owned(),
                    pid,
                });
            }
            // Stale: its producer is dead. We hold its lock now, so no other
            // contender can decide the same; remove it only if it is still
            // the file at that name.
            if existing.is_linked_at_path() {
                let _ = shm::remove_name(path);
            }
        }
        Err(ChannelError::Io {
            context: format!("cannot claim channel '{channel}'"),
            source: std::io::Error::other("the name kept changing hands"),
        })
    }
}
