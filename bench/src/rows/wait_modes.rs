// SPDX-License-Identifier: MPL-2.0

//! Rows 8: a live producer at 60 frames per second, by wait mode.

use crate::measure::{Row, two_process};
use crate::options::Options;
use crate::rows::channel;
use crate::{HEIGHT, WIDTH};

/// 60 frames per second, live: latency and CPU per process by wait mode.
pub fn paced_rows(o: &Options, gpu: bool, env: &[(String, String)]) -> Vec<Row> {
    let frames = 60 * o.paced_seconds;
    let mut rows = Vec::new();
    for wait in ["hybrid", "spin", "sleep"] {
        let ch = channel(&format!("paced-{wait}"));
        let (producer, consumer) = if gpu {
            (
                format!(
                    "cudatestsrc is-live=true num-buffers={frames} pattern=counter ! video/x-raw(memory:CUDAMemory),format=RGB,width={WIDTH},height={HEIGHT},framerate=60/1 ! rscudaipcsink name=ipcsink channel={ch} wait-mode={wait}"
                ),
                format!(
                    "rscudaipcsrc name=src channel={ch} connect-timeout=60000 wait-mode={wait} ! cudaprocess name=check verify=true ! fakesink name=sink sync=false"
                ),
            )
        } else {
            (
                format!(
                    "videotestsrc is-live=true num-buffers={frames} ! video/x-raw,format=RGB,width=320,height=240,framerate=60/1 ! rscudaipcsink name=ipcsink channel={ch} transport=host wait-mode={wait}"
                ),
                format!(
                    "rscudaipcsrc name=src channel={ch} connect-timeout=60000 wait-mode={wait} ! fakesink name=sink sync=false"
                ),
            )
        };
        // The first frames wait for the consumer's start-up (kernel
        // compilation): the latency figures begin after 30.
        rows.push(two_process(
            &format!("8 paced 60 FPS, wait-mode={wait}"),
            &producer,
            &consumer,
            30.min(frames / 2),
            env,
            o.consumer_device.filter(|_| gpu),
        ));
    }
    rows
}
