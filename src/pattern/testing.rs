// SPDX-License-Identifier: MPL-2.0

//! Random bytes and padded frame layouts for the tests of the patterns
//! (this module's unit tests and `tests/elements`); the elements do not use
//! them.

use std::time::{SystemTime, UNIX_EPOCH};

use super::{default_planes, frame_layout};

/// xorshift64*: fresh random bytes per run, the seed printed on failure.
pub struct Random(pub u64);

impl Random {
    pub fn fresh() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        Random(nanos | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Every plane at a 16-byte aligned offset with a stride of 16 bytes more
/// than its row rounded up to 16: wide accesses with partial last chunks,
/// and padding that must stay untouched. The (offset, stride) of each plane
/// and the bytes they span.
pub fn padded_planes(info: &gst_video::VideoInfo) -> (Vec<(usize, usize)>, usize) {
    let mut planes = Vec::new();
    let mut offset = 0;
    let default = frame_layout(info, &default_planes(info), info.size())
        .expect("the caps' own layout fits the caps' frame size");
    for plane in default {
        let stride = plane.row_bytes.next_multiple_of(16) + 16;
        planes.push((offset, stride));
        offset = (offset + stride * plane.rows).next_multiple_of(16) + 16;
    }
    (planes, offset)
}
