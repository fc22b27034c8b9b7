#!/bin/bash
# The test command (README, .ci/run): installs what it needs, then runs the
# format check, clippy, every test (channel, elements, cross-process on the
# host transport, kernel compilation with NVRTC; GPU tests print SKIPPED
# without a GPU), a producer and a consumer under valgrind, the commands of
# README.md and docs/ (run, or parsed where they need a GPU), the same tests
# again on GStreamer 1.26 and 1.28, an aarch64 cross-build whose tests run
# under qemu-user, a Windows cross-build whose tests and gst-launch-1.0.exe
# pairs run under Wine, the loom model check of the channel's protocol, an
# install into a temporary prefix and back out, the C API's examples built
# from it, and a short benchmark run on the host transport.
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
echo "== the Python package (tests/python, host transport; GPU parts print SKIPPED)"
scripts/python-tests.sh
echo "== a producer and a consumer under valgrind (host transport)"
scripts/valgrind.sh
echo "== the commands of README.md and docs/*.md"
scripts/check-doc-commands.sh
echo "== the same tests on GStreamer 1.26 (Debian 13 packages, binaries built against 1.22)"
scripts/test-gst-runtime.sh 1.26
echo "== the same tests on GStreamer 1.28 (Debian testing packages, the same binaries)"
scripts/test-gst-runtime.sh 1.28
echo "== aarch64: cross-built, its tests, gst-launch-1.0 pairs and the Python wheel under qemu-user"
scripts/test-arm64.sh
echo "== Windows: cross-built (x86_64-pc-windows-gnu), the crates' tests and gst-launch-1.0.exe pairs under Wine"
scripts/test-windows.sh
echo "== loom: the channel's memory orderings model-checked (seqlock, publish/take, slot claim/release)"
scripts/test-loom.sh
echo "== scripts/install.sh: into a temporary prefix, found there by gst-inspect-1.0 and the shell, uninstalled"
prefix=$(mktemp -d)
installed=$(scripts/install.sh --prefix "$prefix/usr")
path_line=$(echo "$installed" | grep -E "^ *export GST_PLUGIN_PATH=")
bin_line=$(echo "$installed" | grep -E "^ *export PATH=")
(
  unset GST_PLUGIN_PATH
  eval "$path_line"
  eval "$bin_line"
  # A fresh registry: nothing cached from an earlier run helps.
  GST_REGISTRY=$prefix/registry.bin gst-inspect-1.0 rscudaipcsink | grep -E "^ *Filename +$prefix/usr/lib/.*/gstreamer-1.0/libgstcudaipc.so$"
  # The channel tool, as the docs call it.
  [ "$(command -v cudaipc-channels)" = "$prefix/usr/bin/cudaipc-channels" ]
  [ "$(command -v cudaipc-bridge)" = "$prefix/usr/bin/cudaipc-bridge" ]
  cudaipc-bridge version | grep -q "on UCX"
  CUDAIPC_SHM_DIR=$prefix cudaipc-channels | grep -q "no channels"
  # The C library, as pkg-config gives it.
  eval "$(echo "$installed" | grep -E "^ *export PKG_CONFIG_PATH=")"
  libs=$(pkg-config --libs cudaipc)
  [ "${libs% }" = "-L$prefix/usr/lib/$(gcc -print-multiarch) -lcudaipc" ] || { echo "pkg-config --libs cudaipc: $libs" >&2; exit 1; }
  [ -f "$(pkg-config --variable=includedir cudaipc)/cudaipc.hpp" ]
)
scripts/install.sh --uninstall --prefix "$prefix/usr"
leftover=$(find "$prefix" -name libgstcudaipc.so -o -name cudaipc-channels -o -name cudaipc-bridge -o -name 'libcudaipc.so*' -o -name 'cudaipc.h*' -o -name cudaipc.pc)
[ -z "$leftover" ] || { echo "uninstall left $leftover" >&2; exit 1; }
[ ! -e "$prefix/usr/lib" ] && [ ! -e "$prefix/usr/bin" ] && [ ! -e "$prefix/usr/include" ] || { echo "uninstall left the folders it made under $prefix/usr" >&2; exit 1; }
rm -rf "$prefix"
echo "== the C API: examples built from the installed cudaipc.pc (gcc, g++), paired with gst-launch-1.0 and each other, under valgrind and ASan"
scripts/test-c-api.sh
echo "== benchmark smoke run (host transport, figures not asserted)"
cargo run --quiet --release -p cudaipc-bench -- --smoke --out target/bench-smoke
echo "== all tests passed"
