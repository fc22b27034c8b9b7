// SPDX-License-Identifier: MPL-2.0

// The transports a scenario runs on: each test module writes a scenario
// once, as a function of `Transport`, and a test per transport calls it
// (`host_...` on every machine, `cuda_...` where a GPU is).

use std::time::Duration;

/// A transport under test: the sink's property, frame caps sized for it,
/// and how long one of its runs may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transport {
    pub sink: &'static str,
    pub caps: &'static str,
    pub limit: Duration,
}

pub const HOST: Transport = Transport {
    sink: "transport=host",
    caps: "video/x-raw,format=RGB,width=320,height=240,framerate=30/1",
    limit: Duration::from_secs(60),
};

/// 4K frames take longer to make, copy and check than the host's.
pub const CUDA: Transport = Transport {
    sink: "transport=cuda",
    caps: "video/x-raw,format=RGB,width=1280,height=720,framerate=30/1",
    limit: Duration::from_secs(120),
};

impl Transport {
    /// Whether `test` runs on this transport here: the host transport
    /// always; the cuda one where a GPU is (else it prints `SKIPPED: no
    /// CUDA device`, or fails with `CUDAIPC_REQUIRE_GPU=1`).
    pub fn runs_here(self, test: &str) -> bool {
        self == HOST || super::gpu(test)
    }
}
