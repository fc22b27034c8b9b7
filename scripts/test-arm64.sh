#!/bin/bash
# aarch64 (Jetson's and Grace's CPUs) on an amd64 Debian 12 host, without a
# GPU: cross-builds the plugin and the crates for aarch64-unknown-linux-gnu
# against Debian 12's arm64 GStreamer 1.22, runs their tests (channel,
# transport contract, Rust API, the elements on the host transport) under
# qemu-user, a two-process arm64 gst-launch-1.0 pair in each ipc-mode with
# checksums, and builds the Python wheel for aarch64.
#
# Installs what it needs: the rustup target; gcc-aarch64-linux-gnu,
# libc6-dev-arm64-cross and qemu-user from apt. The arm64 GStreamer packages
# are downloaded and unpacked into a sysroot under .cache/arm64 (apt-get
# download, dpkg -x, with a private apt state: nothing of the host's apt or
# dpkg changes), not installed: a multiarch install would remove the amd64
# GStreamer dev packages (not Multi-Arch: same). The tests start their own
# binary and gst-launch-1.0 as children, so qemu-aarch64 is registered in
# binfmt_misc (left registered; undo: echo -1 >
# /proc/sys/fs/binfmt_misc/qemu-aarch64). Where binfmt_misc cannot be used
# this prints a SKIPPED line and exits 0 (CUDAIPC_REQUIRE_ARM64=1: fails).
#
# qemu-user runs the guest's threads on the host's cores with x86's memory
# ordering: the protocol's acquire/release orderings are not tested by this
# (docs/jetson.md).
# usage (repo root): scripts/test-arm64.sh [test-name-filter]
set -euo pipefail
step=arm64 skip_what="aarch64 tests under qemu-user" require_var=CUDAIPC_REQUIRE_ARM64
source "$(dirname "$0")/lib/emulated-step.sh"
filter=${1:-}
T=aarch64-unknown-linux-gnu
cache=$repo/.cache/arm64
S=$cache/sysroot

# Tests that cannot hold under emulation, skipped by name (libtest --skip
# matches substrings), with the reason.
skips=(
  # The host's python3 (with PyGObject) cannot load an arm64 plugin.
  python_reader
  # Asserts the producer's RSS stays flat over 40 kill cycles; under qemu the
  # RSS also holds qemu's translated code (+11 MiB in the spike; the
  # descriptor count, which the test checks too, stays flat).
  consumers_killed_at_any_moment_leave_nothing_in_the_producer
)

# --- setup: cross toolchain, qemu, binfmt_misc, sysroot ---------------------
rustup target list --installed | grep -qx $T || rustup target add $T >/dev/null
missing=""
for p in gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "arm64: installing Debian packages:$missing"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

binfmt=/proc/sys/fs/binfmt_misc
if [ ! -e $binfmt/register ]; then
  $sudo mount -t binfmt_misc binfmt_misc $binfmt 2>/dev/null ||
    skip "binfmt_misc is not mounted and cannot be mounted here (a container without the privilege?)"
fi
# An existing aarch64 handler (qemu-user-binfmt, qemu-user-static) will do.
aarch64_magic=7f454c460201010000000000000000000200b700
if ! grep -qs "magic $aarch64_magic" $binfmt/*; then
  echo ':qemu-aarch64:M::\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64:' |
    $sudo tee $binfmt/register >/dev/null 2>&1 ||
    skip "qemu-aarch64 cannot be registered in binfmt_misc"
  echo "arm64: registered /usr/bin/qemu-aarch64 in binfmt_misc (undo: echo -1 > $binfmt/qemu-aarch64)"
fi
for entry in $binfmt/*; do
  if grep -qs "magic $aarch64_magic" "$entry" && ! grep -qx enabled "$entry"; then
    skip "the aarch64 handler $entry of binfmt_misc is disabled"
  fi
done

# The packages named beside apt's closure (the sysroot is made again when
# this list changes): checksumsink (bad), pngenc and imagefreeze (good) the
# tests use, without their many deps; an arm64 Python for the wheel.
extra_packages="gstreamer1.0-plugins-bad:arm64 libgstreamer-plugins-bad1.0-0:arm64
 gstreamer1.0-plugins-good:arm64 libpng16-16:arm64
 python3.11-minimal:arm64 libpython3.11-minimal:arm64 libpython3.11-stdlib:arm64"
if [ "$(cat "$S/.complete" 2>/dev/null)" != "$extra_packages" ]; then
  rm -rf "$S" "$cache/debs" "$cache/apt"
  mkdir -p "$cache/apt/lists/partial" "$cache/apt/cache/archives/partial" "$cache/debs" "$S"
  # A private apt state that also knows arm64: the host's own lists, dpkg
  # architectures and caches stay as they are.
  cp -p /var/lib/apt/lists/*_Packages* /var/lib/apt/lists/*Release* "$cache/apt/lists/" 2>/dev/null || true
  cat >"$cache/apt/apt.conf" <<EOF
APT::Architectures { "amd64"; "arm64"; };
Dir::State::Lists "$cache/apt/lists";
Dir::Cache "$cache/apt/cache";
APT::Sandbox::User "root";
Debug::NoLocking "true";
EOF
  export APT_CONFIG=$cache/apt/apt.conf
  apt-get update -qq
  # The arm64 closure apt would install next to what the host has (a
  # simulation), and the extra packages.
  apt-get install -s -q libgstreamer1.0-dev:arm64 libgstreamer-plugins-base1.0-dev:arm64 \
    gstreamer1.0-tools:arm64 gstreamer1.0-plugins-base:arm64 |
    awk '/^Inst .*:arm64/ {print $2}' | sort -u >"$cache/packages.txt"
  printf '%s\n' $extra_packages >>"$cache/packages.txt"
  (cd "$cache/debs" && xargs apt-get download -qq <"$cache/packages.txt")
  unset APT_CONFIG
  for d in "$cache"/debs/*.deb; do dpkg -x "$d" "$S"; done
  # Absolute links (libz.so -> /lib/...) must point into the sysroot.
  find "$S" -lname '/*' ! -lname "$S/*" | while read -r l; do ln -sfn "$S$(readlink "$l")" "$l"; done
  echo "$extra_packages" >"$S/.complete"
  echo "arm64: sysroot of $(wc -l <"$cache/packages.txt") packages in $S"
fi
# The plugins the tests use: the unpacked bad and good sets lack most deps.
rm -rf "$cache/gstplugins" "$cache/bin"
mkdir -p "$cache/gstplugins" "$cache/bin"
for p in coreelements videotestsrc videoconvertscale app debugutilsbad png imagefreeze; do
  ln -s "$S/usr/lib/aarch64-linux-gnu/gstreamer-1.0/libgst$p.so" "$cache/gstplugins/"
done
ln -s "$S/usr/bin/gst-launch-1.0" "$S/usr/bin/gst-inspect-1.0" "$cache/bin/"
stage setup

# --- build ------------------------------------------------------------------
export PKG_CONFIG_ALLOW_CROSS=1 PKG_CONFIG_SYSROOT_DIR=$S
export PKG_CONFIG_LIBDIR=$S/usr/lib/aarch64-linux-gnu/pkgconfig:$S/usr/share/pkgconfig
unset PKG_CONFIG_PATH
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# --sysroot: the sysroot's libc.so linker script names /lib/... paths, which
# are the host's without it; -rpath-link: the libraries' own dependencies.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C link-arg=--sysroot=$S -C link-arg=-Wl,-rpath-link,$S/usr/lib/aarch64-linux-gnu -C link-arg=-Wl,-rpath-link,$S/lib/aarch64-linux-gnu"
# No debug info: it only lengthens the links of some 30 test binaries
# (panics still name their file and line).
export CARGO_PROFILE_RELEASE_DEBUG=0
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}")
packages=(-p gst-plugin-cudaipc -p cudaipc-channel -p cudaipc-transport -p cudaipc -p cudaipc-channels)
nice -n 10 cargo build --quiet --release --target $T -p gst-plugin-cudaipc --lib
out=$target_dir/$T/release
tests=$out/arm64-tests
rm -rf "$tests" && mkdir -p "$tests"
# Test binaries only (no doctests: rustdoc would link each for qemu again).
nice -n 10 cargo test --quiet --release --target $T "${packages[@]}" --no-run --message-format=json-render-diagnostics |
  python3 -c '
import json, os, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        target = m["target"]
        os.symlink(m["executable"], os.path.join(sys.argv[1], target["kind"][0] + "-" + target["name"]))
' "$tests"
[ -n "$(ls "$tests")" ] || { echo "arm64: no test binaries were built" >&2; exit 1; }
stage build

# --- tests under qemu-user ----------------------------------------------------
export QEMU_LD_PREFIX=$S # for every arm64 process, started through binfmt
export GST_REGISTRY=$cache/registry.bin GST_REGISTRY_FORK=no
export GST_PLUGIN_SYSTEM_PATH=$cache/gstplugins
export PATH=$cache/bin:$PATH # gst-launch-1.0: the arm64 one
# The host's NVRTC (x86_64) and python3 cannot serve arm64 processes; no GPU.
unset GST_PLUGIN_PATH LD_LIBRARY_PATH CUDAIPC_NVRTC_LIB CUDAIPC_REQUIRE_NVRTC CUDAIPC_REQUIRE_GPU
export CUDAIPC_PYTHON=/nonexistent
# e_machine 0xb7: AArch64.
[ "$(od -An -tx1 -j18 -N2 "$(ls -d "$tests"/* | head -1)" | tr -d ' ')" = b700 ] ||
  { echo "arm64: the test binaries are not aarch64" >&2; exit 1; }
gst-launch-1.0 --version >/dev/null || { echo "arm64: the arm64 gst-launch-1.0 does not run under qemu-user" >&2; exit 1; }
skip_args=()
for s in "${skips[@]}"; do skip_args+=(--skip "$s"); done
echo "arm64: skipped by name under qemu: ${skips[*]}"
failed=0 passed=0 failures=0 ignored=0
for t in "$tests"/*; do
  name=$(basename "$t")
  log=$tests/$name.log
  rc=0
  timeout -k 10 300 "$t" -q "${skip_args[@]}" $filter >"$log" 2>&1 || rc=$?
  if [ $rc = 0 ]; then
    echo "arm64: $name: $(grep -E '^test result' "$log" | tail -1)"
  else
    failed=1
    echo "arm64: $name FAILED (exit $rc$([ $rc = 124 ] && echo ": timed out"); log $log)"
    grep -E "^test .*FAILED|panicked|^---- |error" "$log" | sed -n 1,30p
  fi
  result=$(grep -E '^test result' "$log" | tail -1 || true)
  if [[ $result =~ ([0-9]+)\ passed\;\ ([0-9]+)\ failed\;\ ([0-9]+)\ ignored ]]; then
    passed=$((passed + BASH_REMATCH[1])) failures=$((failures + BASH_REMATCH[2]))
    ignored=$((ignored + BASH_REMATCH[3]))
  fi
done
echo "arm64: tests under qemu-user: $passed passed, $failures failed, $ignored ignored"
stage tests

# --- an arm64 gst-launch-1.0 pair of each ipc-mode ------------------------------
started=()
stop_started() {
  for pid in "${started[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_started EXIT
# The plugin alone: GStreamer scans plugin folders recursively.
mkdir -p "$cache/plugin"
ln -sfn "$out/libgstcudaipc.so" "$cache/plugin/libgstcudaipc.so"
export GST_PLUGIN_PATH=$cache/plugin
frames="num-buffers=50 ! video/x-raw,format=RGB,width=320,height=240"
checksums() { awk '/^0:/ {print $2}' "$1" | sha1sum; }
gst-launch-1.0 -q videotestsrc $frames ! checksumsink >"$tests/gst-reference.txt"
want=$(checksums "$tests/gst-reference.txt")
for mode in legacy fd; do
  channel=arm64-$mode-$$
  # The consumer first: the producer waits for it (wait-for-connection=1).
  # The sink syncs to the clock, so the channel is live: frames=every, or a
  # consumer slowed by emulation takes the latest frame and misses some.
  timeout -k 5 120 gst-launch-1.0 -q rscudaipcsrc channel=$channel ipc-mode=$mode connect-timeout=60000 frames=every \
    ! checksumsink >"$tests/gst-$mode-consumer.txt" 2>&1 &
  consumer=$!
  started+=("$consumer")
  if ! timeout -k 5 120 gst-launch-1.0 -q videotestsrc $frames \
    ! rscudaipcsink channel=$channel transport=host ipc-mode=$mode wait-for-connection=1 >"$tests/gst-$mode-producer.txt" 2>&1; then
    failed=1
    echo "arm64: gst $mode: the producer failed"
    sed -n 1,20p "$tests/gst-$mode-producer.txt"
  fi
  wait "$consumer" || { failed=1; echo "arm64: gst $mode: the consumer failed"; sed -n 1,20p "$tests/gst-$mode-consumer.txt"; }
  started=()
  got=$(checksums "$tests/gst-$mode-consumer.txt")
  count=$(grep -c '^0:' "$tests/gst-$mode-consumer.txt" || true)
  if [ "$got" = "$want" ] && [ "$count" = 50 ]; then
    echo "arm64: gst-launch-1.0 pair, ipc-mode=$mode: 50 frames, the checksums videotestsrc gives"
  else
    failed=1
    echo "arm64: gst-launch-1.0 pair, ipc-mode=$mode: $count frames, checksums differ"
  fi
done
unset GST_PLUGIN_PATH
stage gst

# --- the Python wheel for aarch64 (abi3: one wheel for every Python 3.9+) --------
maturin=target/python-venv/bin/maturin
wheels=$target_dir/$T/wheels
if [ -x $maturin ]; then
  rm -rf $wheels "$tests/wheel-site"
  if nice -n 10 $maturin build --quiet --release --target $T -m crates/cudaipc-python/Cargo.toml \
    --target-dir "$target_dir" -o $wheels >"$tests/wheel.log" 2>&1; then
    wheel=$(ls $wheels/*.whl)
    # Read by Debian's arm64 Python under qemu, from an arm64 producer.
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$wheel" "$tests/wheel-site"
    channel=arm64-python-$$
    PYTHONPATH=$tests/wheel-site timeout -k 5 120 "$S/usr/bin/python3.11" -c '
import ctypes, hashlib, sys
import cudaipc
with cudaipc.Subscriber(sys.argv[1], timeout=60, frames="every") as subscriber:
    for frame in subscriber:
        with frame:
            data = ctypes.string_at(frame.address, frame.nbytes)
            print("0:py", hashlib.sha1(data).hexdigest(), flush=True)
' $channel >"$tests/python-consumer.txt" 2>&1 &
    consumer=$!
    started+=("$consumer")
    GST_PLUGIN_PATH=$cache/plugin timeout -k 5 120 gst-launch-1.0 -q videotestsrc $frames \
      ! rscudaipcsink channel=$channel transport=host ipc-mode=fd wait-for-connection=1 >"$tests/python-producer.txt" 2>&1 ||
      { failed=1; echo "arm64: python: the producer failed"; sed -n 1,20p "$tests/python-producer.txt"; }
    wait "$consumer" || { failed=1; echo "arm64: python: the consumer failed"; sed -n 1,20p "$tests/python-consumer.txt"; }
    started=()
    if [ "$(checksums "$tests/python-consumer.txt")" = "$want" ]; then
      echo "arm64: Python wheel $(basename "$wheel"): read 50 frames under qemu, the checksums videotestsrc gives"
    else
      failed=1
      echo "arm64: Python wheel $(basename "$wheel"): the frames read under qemu differ"
      sed -n 1,20p "$tests/python-consumer.txt"
    fi
  else
    failed=1
    echo "arm64: the aarch64 Python wheel failed to build"
    tail -20 "$tests/wheel.log"
  fi
else
  echo "arm64: no maturin in target/python-venv (scripts/python-tests.sh makes it): the aarch64 wheel is not built"
fi
stage wheel

report_timings
exit $failed
