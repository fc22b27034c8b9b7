// SPDX-License-Identifier: MPL-2.0

//! `cudaprocess`'s properties: their defaults, and the values set.

use super::Operation;

pub(super) const DEFAULT_OPERATION: Operation = Operation::None;
pub(super) const DEFAULT_BRIGHTNESS: f64 = 0.1;
pub(super) const DEFAULT_GAMMA: f64 = 2.2;
pub(super) const DEFAULT_VERIFY: bool = false;
pub(super) const DEFAULT_VERIFY_FATAL: bool = false;

#[derive(Debug, Clone, Copy)]
pub(super) struct Settings {
    pub(super) operation: Operation,
    pub(super) brightness: f64,
    pub(super) gamma: f64,
    pub(super) verify: bool,
    pub(super) verify_fatal: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            operation: DEFAULT_OPERATION,
            brightness: DEFAULT_BRIGHTNESS,
            gamma: DEFAULT_GAMMA,
            verify: DEFAULT_VERIFY,
            verify_fatal: DEFAULT_VERIFY_FATAL,
        }
    }
}
