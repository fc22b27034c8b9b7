#!/bin/bash
# The test command (README, .ci/run): installs what it needs, then runs the
# format check, clippy, every test (channel, elements, cross-process on the
# host transport, kernel compilation with NVRTC; GPU tests print SKIPPED
# without a GPU), the commands of README.md and docs/ (run, or parsed where
# they need a GPU), the same tests again on GStreamer 1.26, and a short
# benchmark run on the host transport.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -f "$HOME/.cargo/env" ] && source "$HOME/.cargo/env"
source scripts/nvrtc.sh
export CUDAIPC_REQUIRE_NVRTC=1
# --workspace/--all: the plugin and the crates beside it (crates/).
echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test"
cargo test --workspace --quiet 2>&1 | grep -vE "^\s*$"
echo "== a producer and a consumer under valgrind (host transport)"
scripts/valgrind.sh
echo "== the commands of README.md and docs/*.md"
scripts/check-doc-commands.sh
echo "== the same tests on GStreamer 1.26 (Debian 13 packages, binaries built against 1.22)"
scripts/test-gst126.sh
if [ -f examples/bench.rs ]; then
  echo "== benchmark smoke run (host transport, figures not asserted)"
  cargo run --quiet --release --example bench -- --smoke --out target/bench-smoke
fi
echo "== all tests passed"
