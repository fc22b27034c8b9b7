// SPDX-License-Identifier: MPL-2.0

//! The benchmark's rows, one module per family. Each family's function
//! returns its rows in order; `Row::left_out` marks those `--rows` left out.

pub mod bridge;
pub mod copy;
pub mod gstcuda;
pub mod native;
pub mod own_pace;
pub mod python;
pub mod streams;
pub mod two_process;
pub mod viewer;
pub mod wait_modes;

/// A channel name of this run: `bench-<tag>-<pid>`.
pub fn channel(tag: &str) -> String {
    format!("bench-{tag}-{}", std::process::id())
}

/// The frame of rows 9, 14, 15 and 16: 4K RGB on a GPU, 320x240 on the
/// host transport.
pub fn frame_geometry(gpu: bool) -> (u32, u32) {
    if gpu {
        (crate::WIDTH, crate::HEIGHT)
    } else {
        (320, 240)
    }
}
