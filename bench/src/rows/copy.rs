// SPDX-License-Identifier: MPL-2.0

//! Row 2: device-to-device copies of a frame, the memory (or link) limit
//! for moving these bytes; its process is `roles::copy`.

use std::process::{Command, Stdio};

use crate::FRAME_BYTES;
use crate::measure::{Row, number, result_of, row_from};
use crate::options::left_out;

/// Row 2: copies of a frame from GPU 0 to the consumer's GPU (`None`: 0).
pub fn frame_copy(iterations: u64, env: &[(String, String)], to: Option<i32>) -> Row {
    let config = match to {
        Some(to) => format!("2 device-to-device copy of a frame [GPU 0 -> GPU {to}]"),
        None => "2 device-to-device copy of a frame".to_string(),
    };
    if left_out(&config) {
        return Row::left_out(&config);
    }
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([
            "--role",
            "copy",
            &(FRAME_BYTES as u64).to_string(),
            &iterations.to_string(),
            &to.unwrap_or(0).to_string(),
        ])
        .envs(env.iter().cloned())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    match result_of(child, "copy") {
        Ok(c) => {
            let mut row = row_from(&config, &c, None);
            row.note = if to.unwrap_or(0) == 0 {
                format!("{:.0} GB/s read+write", 2.0 * row.gbps())
            } else {
                format!(
                    "GPU to GPU, {:.0} GB/s; peer access {}",
                    row.gbps(),
                    if number(&c, "peer") == Some(1.0) {
                        "enabled"
                    } else {
                        "unavailable (staged through the host)"
                    }
                )
            };
            row
        }
        Err(e) => Row {
            config,
            error: e,
            ..Default::default()
        },
    }
}
