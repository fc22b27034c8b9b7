// SPDX-License-Identifier: MPL-2.0

//! The receiver's frames on their way: each frame's bytes go straight into
//! a slot lent by the local channel, and the next frame's transfer starts
//! while the last one is published (one at a time, the link would idle a
//! round trip per frame). Frames are published in the order they came.

use std::sync::atomic::AtomicBool;

use cudaipc_channel::FrameMeta;
use cudaipc_transport::SlotMemory;

use crate::link::LinkError;
use crate::receive::{Incoming, Receiving};
use crate::wire::{self, FrameHeader, Malformed};

/// Frames whose bytes may be on their way at once.
const WINDOW: usize = 2;

impl Receiving<'_> {
    /// Lends a slot for the frame and starts its bytes' transfer into it.
    pub(crate) fn frame(&mut self, header: FrameHeader) -> Result<(), LinkError> {
        let size = usize::try_from(header.size).map_err(|_| Malformed("a frame size"))?;
        if size == 0 || size > cudaipc_transport::MAX_SLOT_SIZE {
            return Err(Malformed("a frame size beyond a slot's").into());
        }
        let publisher = self.publisher("a frame before caps")?.clone();
        if size > self.frame_size {
            // New slots: the frames on their way into the old ones first.
            self.settle()?;
            publisher
                .configure(size)
                .map_err(|e| LinkError::Local(e.to_string()))?;
            self.frame_size = size;
        }
        let never = AtomicBool::new(false);
        // The first loan waits for the local consumers asked for; the
        // events before the first frame go out once they are there.
        let loan = publisher
            .loan(size, &never)
            .map_err(|e| LinkError::Local(format!("cannot lend a slot: {e:?}")))?;
        self.publish_early_events()?;
        let address = match loan.memory() {
            SlotMemory::Host(region) => {
                // SAFETY: the loan holds the slot for writing: no consumer
                // reads it until it is published, and this is its only view.
                let Some(bytes) = (unsafe { region.as_mut_slice() }) else {
                    return Err(Malformed("a read-only slot").into());
                };
                bytes.as_mut_ptr() as *mut std::ffi::c_void
            }
            SlotMemory::Device(region) => {
                // UCX copies on its own stream: the consumers' reads that
                // the loan ordered this write after must be done first.
                region
                    .device()
                    .synchronize_context()
                    .map_err(|e| LinkError::Local(e.to_string()))?;
                region.ptr() as usize as *mut std::ffi::c_void
            }
        };
        let tag = wire::payload_tag(self.session, header.number);
        // SAFETY: the loan's slot stays ours, valid and unread, until the
        // request finished or was dropped (Incoming's field order).
        let request = unsafe { self.link.start_receive(tag, address, size) }?;
        self.incoming.push_back(Incoming {
            request,
            loan,
            missed_before: header.missed_before,
            meta: FrameMeta {
                size: header.size,
                pts: header.pts,
                dts: header.dts,
                duration: header.duration,
                offset: header.offset,
                offset_end: header.offset_end,
                flags: header.flags,
                planes: header.planes,
                data: header.data,
            },
        });
        while self.incoming.len() >= WINDOW {
            self.land_oldest()?;
        }
        Ok(())
    }

    /// Waits for the oldest frame's bytes and publishes it.
    fn land_oldest(&mut self) -> Result<(), LinkError> {
        let Some(Incoming {
            request,
            loan,
            meta,
            missed_before,
        }) = self.incoming.pop_front()
        else {
            return Ok(());
        };
        let got = self.link.finish_receive(request)?;
        if got as u64 != meta.size {
            return Err(Malformed("a frame's bytes of another size").into());
        }
        loan.publish(&meta)
            .map_err(|e| LinkError::Local(format!("cannot publish a frame: {e:?}")))?;
        if missed_before > 0 {
            // Shown as the channel's dropped frames by watch on this host.
            if let Some(publisher) = &self.publisher {
                publisher.count_dropped(missed_before);
            }
        }
        self.missed_upstream += missed_before;
        self.frames += 1;
        Ok(())
    }

    /// Progresses the oldest frame on its way once; publishes it if landed.
    pub(crate) fn poll_incoming(&mut self) -> Result<(), LinkError> {
        let landed = self
            .incoming
            .front_mut()
            .is_some_and(|oldest| oldest.request.poll().is_some());
        if landed { self.land_oldest() } else { Ok(()) }
    }

    /// Publishes every frame on its way (before what follows them).
    pub(crate) fn settle(&mut self) -> Result<(), LinkError> {
        while !self.incoming.is_empty() {
            self.land_oldest()?;
        }
        Ok(())
    }
}
