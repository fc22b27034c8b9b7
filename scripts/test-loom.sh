#!/bin/bash
# The loom model check of the channel's memory orderings (docs/protocol.md,
# "Memory ordering"): the seqlock, publishing and taking an item, and the
# slot claim, hold and release, as crates/cudaipc-channel/src/protocol.rs
# does them, explored over every interleaving and weak ordering loom models
# (what an ARM core may do and qemu-user on x86 cannot show).
#
# Its own target folder: `--cfg loom` in RUSTFLAGS would otherwise rebuild
# the normal build. LOOM_MAX_PREEMPTIONS bounds the search (default here 5:
# seconds to run, 1 to 3 minutes to build on 2 cores). The models run again
# with orderings weakened: those tests pass only if loom finds the failure.
# usage (repo root): scripts/test-loom.sh [test-name-filter, default: loom]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && source "$HOME/.cargo/env"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-5} \
  cargo test --quiet -p cudaipc-channel --release --lib "${1:-loom}"
