// Reading the producer's records: the slot pool, the caps and a frame's
// slot record, each validated (a corrupt block is `ChannelError::Corrupt`).

use super::*;

impl Consumer {
    /// Reads the slot pool; validates it and remembers its bounds.
    pub fn pool(&mut self) -> Result<PoolInfo, ChannelError> {
        self.read_pool().map_err(|e| self.truncation_first(e))
    }

    pub(super) fn read_pool(&mut self) -> Result<PoolInfo, ChannelError> {
        let h = self.header();
        let read = read_seqlocked(&h.pool_seqlock, || {
            let count = h.slot_count.load(Ordering::Relaxed) as usize;
            PoolInfo {
                generation: h.pool_generation.load(Ordering::Relaxed),
                slot_size: h.slot_size.load(Ordering::Relaxed),
                pool_descriptor: load_bytes(&h.pool_descriptor, POOL_DESCRIPTOR_BYTES),
                slot_descriptors: h.slots[..count.min(MAX_SLOTS)]
                    .iter()
                    .map(|s| {
                        let mut d = [0u8; SLOT_DESCRIPTOR_BYTES];
                        d.copy_from_slice(&load_bytes(&s.descriptor, SLOT_DESCRIPTOR_BYTES));
                        d
                    })
                    .collect(),
            }
        });
        let pool = match read {
            Some(pool) => pool,
            None => {
                self.check_producer()?;
                return Err(ChannelError::Corrupt(Corruption::NeverSettles(
                    Seqlocked::Pool,
                )));
            }
        };
        let count = h.slot_count.load(Ordering::Relaxed) as usize;
        if pool.generation == 0 {
            return Err(ChannelError::Corrupt(Corruption::FrameBeforePool));
        }
        if !(1..=MAX_SLOTS).contains(&count) || pool.slot_descriptors.len() != count {
            return Err(ChannelError::Corrupt(Corruption::SlotCount {
                found: count,
            }));
        }
        if pool.slot_size == 0 || pool.slot_size > MAX_SLOT_SIZE {
            return Err(ChannelError::Corrupt(Corruption::SlotSize {
                found: pool.slot_size,
            }));
        }
        self.check_hold_fits(count)?;
        self.slot_count = count;
        self.slot_size = pool.slot_size;
        self.pool_generation = pool.generation;
        self.pool_read = Some(pool.clone());
        Ok(pool)
    }

    /// The pool of a frame this consumer took, as it was read before the
    /// frame's cursor moved on: an every-frame consumer's cursor holds back
    /// the producer's next pool, so the frame's pool is still the current
    /// one then. `None`: the frame is of another pool than the one read
    /// (only a latest-frame consumer can be overtaken so).
    pub fn frame_pool(&self, generation: u64) -> Option<&PoolInfo> {
        self.pool_read
            .as_ref()
            .filter(|p| p.generation == generation)
    }

    /// The caps of a frame this consumer took, read like `frame_pool`.
    pub fn frame_caps(&self, generation: u64) -> Option<&str> {
        self.caps_read
            .as_ref()
            .filter(|(g, _)| *g == generation)
            .map(|(_, caps)| caps.as_str())
    }

    /// The newest pool generation this consumer has read.
    pub fn pool_generation(&self) -> u64 {
        self.pool_generation
    }

    /// Reads the caps of `generation` unless they are already known; called
    /// before the cursor moves past the frame that carries them.
    pub(super) fn keep_caps_of(&mut self, generation: u64) -> Result<(), ChannelError> {
        if generation == 0
            || self
                .caps_read
                .as_ref()
                .is_some_and(|(g, _)| *g == generation)
        {
            return Ok(());
        }
        self.caps_read = Some(self.caps()?);
        Ok(())
    }

    /// The caps the producer published last, if it published any yet:
    /// (generation, caps string).
    pub fn current_caps(&self) -> Result<Option<(u64, String)>, ChannelError> {
        if self.header().caps_generation.load(Ordering::Acquire) == 0 {
            return Ok(None);
        }
        self.caps().map(Some)
    }

    /// Reads the caps: (generation, caps string).
    pub fn caps(&self) -> Result<(u64, String), ChannelError> {
        self.read_caps().map_err(|e| self.truncation_first(e))
    }

    pub(super) fn read_caps(&self) -> Result<(u64, String), ChannelError> {
        let h = self.header();
        let read = read_seqlocked(&h.caps_seqlock, || {
            let len = h.caps_len.load(Ordering::Relaxed) as usize;
            (
                h.caps_generation.load(Ordering::Relaxed),
                len,
                load_bytes(&h.caps, len.min(CAPS_CAPACITY)),
            )
        });
        let Some((generation, len, bytes)) = read else {
            self.check_producer()?;
            return Err(ChannelError::Corrupt(Corruption::NeverSettles(
                Seqlocked::Caps,
            )));
        };
        if len == 0 || len > CAPS_CAPACITY {
            return Err(ChannelError::Corrupt(Corruption::CapsLength { found: len }));
        }
        let caps =
            String::from_utf8(bytes).map_err(|_| ChannelError::Corrupt(Corruption::CapsNotUtf8))?;
        if caps.contains('\0') {
            return Err(ChannelError::Corrupt(Corruption::CapsNul));
        }
        Ok((generation, caps))
    }

    /// `Ok(None)`: the frame belongs to a pool the producer replaced since
    /// (it may do so while a latest-mode consumer is about to take a frame).
    pub(super) fn read_frame(&mut self, slot: usize) -> Result<Option<Frame>, ChannelError> {
        let r = &self.header().slots[slot];
        let time = |v: u64| (v != TIME_NONE).then_some(v);
        let pool_generation = r.pool_generation.load(Ordering::Relaxed);
        if pool_generation != self.pool_generation {
            self.pool()?;
            if pool_generation < self.pool_generation {
                return Ok(None);
            }
            if pool_generation != self.pool_generation {
                return Err(ChannelError::Corrupt(Corruption::PoolGeneration {
                    found: pool_generation,
                    current: self.pool_generation,
                }));
            }
        }
        let shared = self.shared.clone();
        let r = &control_header(&shared).slots[slot];
        let size = r.size.load(Ordering::Relaxed);
        if size == 0 || size > self.slot_size {
            return Err(ChannelError::Corrupt(Corruption::FrameSize {
                found: size,
                slot_size: self.slot_size,
            }));
        }
        let n_planes = r.n_planes.load(Ordering::Relaxed) as usize;
        if n_planes > MAX_PLANES {
            return Err(ChannelError::Corrupt(Corruption::PlaneCount {
                found: n_planes,
            }));
        }
        let planes: Vec<(u64, u32)> = (0..n_planes)
            .map(|p| {
                (
                    r.plane_offset[p].load(Ordering::Relaxed),
                    r.plane_stride[p].load(Ordering::Relaxed),
                )
            })
            .collect();
        if let Some((offset, _)) = planes.iter().find(|(offset, _)| *offset >= size) {
            return Err(ChannelError::Corrupt(Corruption::PlaneOffset {
                found: *offset,
                frame_size: size,
            }));
        }
        let data = self.read_frame_data(slot, r.data_len.load(Ordering::Relaxed));
        Ok(Some(Frame {
            seq: r.frame_number.load(Ordering::Relaxed),
            slot,
            caps_generation: r.caps_generation.load(Ordering::Relaxed),
            pool_generation,
            size,
            pts: time(r.pts.load(Ordering::Relaxed)),
            dts: time(r.dts.load(Ordering::Relaxed)),
            duration: time(r.duration.load(Ordering::Relaxed)),
            offset: r.offset.load(Ordering::Relaxed),
            offset_end: r.offset_end.load(Ordering::Relaxed),
            flags: r.flags.load(Ordering::Relaxed),
            planes,
            publish_time_ns: r.publish_time_ns.load(Ordering::Relaxed),
            missed_before: 0,
            data,
        }))
    }
}
