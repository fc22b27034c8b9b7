// SPDX-License-Identifier: MPL-2.0

//! `cudatestsrc`'s properties, their defaults, and what caps that leave
//! the size or rate open fixate to.

use crate::enums::OutputMemory;
use crate::pattern::Pattern;

pub(super) const DEFAULT_PATTERN: Pattern = Pattern::Counter;
pub(super) const DEFAULT_IS_LIVE: bool = false;
pub(super) const DEFAULT_CUDA_DEVICE_ID: i32 = 0;
/// What unconstrained caps fixate to.
pub(super) const DEFAULT_WIDTH: i32 = 3840;
pub(super) const DEFAULT_HEIGHT: i32 = 2160;
pub(super) const DEFAULT_FORMAT: &str = "RGB";
pub(super) const DEFAULT_FPS: i32 = 30;

#[derive(Debug, Clone, Copy)]
pub(super) struct Settings {
    pub(super) pattern: Pattern,
    pub(super) is_live: bool,
    pub(super) cuda_device_id: i32,
    pub(super) output_memory: OutputMemory,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            pattern: DEFAULT_PATTERN,
            is_live: DEFAULT_IS_LIVE,
            cuda_device_id: DEFAULT_CUDA_DEVICE_ID,
            output_memory: OutputMemory::default(),
        }
    }
}
