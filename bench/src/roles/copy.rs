// SPDX-License-Identifier: MPL-2.0

//! The role of row 2: copies of a frame on the GPU.

use std::time::Instant;

/// Device-to-device copies of one 4K RGB frame between rotating buffers,
/// from GPU 0 to GPU `to` (on `to`'s stream; another GPU through unified
/// addressing): the memory (or link) limit for moving these bytes.
pub fn run_copy(bytes: usize, iterations: u64, to: i32) -> i32 {
    use cudaipc_transport::cuda::{Device, DeviceBuffer, DeviceRegion};
    let (Ok(from), Ok(device)) = (Device::get(0), Device::get(to)) else {
        println!("RESULT measured=0 seconds=0");
        return 0;
    };
    let peer = to != 0 && device.enable_peer_access(&from).is_ok();
    let buffers: Vec<DeviceRegion> = (0..8)
        .map(|i| {
            DeviceBuffer::new(if i < 4 { &from } else { &device }, bytes)
                .unwrap()
                .into_region()
        })
        .collect();
    for b in &buffers {
        b.memset(0x5a).unwrap();
    }
    from.stream().synchronize().unwrap();
    let stream = device.stream();
    let copy = |i: u64| {
        let src = &buffers[(i % 4) as usize];
        let dst = &buffers[4 + (i % 4) as usize];
        // On `to`'s stream: the destination's device.
        dst.copy_from(src).unwrap();
    };
    for i in 0..iterations / 10 {
        copy(i);
    }
    stream.synchronize().unwrap();
    let start = Instant::now();
    for i in 0..iterations {
        copy(i);
    }
    stream.synchronize().unwrap();
    let seconds = start.elapsed().as_secs_f64();
    let peer = peer as u8;
    println!("RESULT measured={iterations} seconds={seconds:.6} cpu_s=0 peer={peer}");
    0
}
