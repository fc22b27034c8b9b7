#!/bin/bash
# Windows (x86_64-pc-windows-gnu) on an amd64 Debian 12 host, under Wine 8:
# cross-builds the channel and Rust API crates' tests and the plugin against
# GStreamer's official 1.28.8 Windows wheels, then runs under Wine
#   - the channel, transport and API crates' tests that apply to Windows;
#   - a two-process gst-launch-1.0.exe pair on the host transport in each
#     ipc-mode, every frame's checksum equal to what the producer published;
#   - a producer killed mid-stream: its consumer (on-producer-lost=eos)
#     ends within a second, and a new producer takes the name;
#   - a second producer refused on a live channel.
#
# Installs what it needs: gcc-mingw-w64-x86-64, wine and wine64 from apt, the
# rustup target, and the wheels (pip download, about 40 MB, deleted once
# unpacked into .cache/windows/gstroot). The wheels hold DLLs only: the .pc
# files that gstreamer-sys reads are written here (GNU ld links straight
# against a DLL). Rust's std imports ProcessPrng, which Wine 8.0 lacks: a
# ten-line stand-in (scripts/windows/bcryptprimitives.c) goes into the Wine
# prefix. Where Wine cannot run, this prints a SKIPPED line and exits 0
# (CUDAIPC_REQUIRE_WINDOWS=1: fails). The Wine prefix (700 MB) is removed
# at the end unless CUDAIPC_KEEP_WINE_PREFIX=1. docs/windows.md says what
# Wine does not show.
# usage (repo root): scripts/test-windows.sh
set -euo pipefail
step=windows skip_what="Windows tests under Wine" require_var=CUDAIPC_REQUIRE_WINDOWS
source "$(dirname "$0")/lib/emulated-step.sh"
T=x86_64-pc-windows-gnu
cache=$repo/.cache/windows
G=$cache/gstroot

# --- setup: toolchain, Wine, GStreamer's wheels, .pc files, Wine prefix ------
need=()
command -v x86_64-w64-mingw32-gcc >/dev/null || need+=(gcc-mingw-w64-x86-64)
command -v wine >/dev/null || need+=(wine wine64)
if [ ${#need[@]} -gt 0 ]; then
  # With recommends, as the recipe was checked (about 200 MB down, 1 GB on disk).
  $sudo apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null ||
    skip "apt-get install ${need[*]} failed"
fi
rustup target list --installed | grep -qx $T || rustup target add $T >/dev/null
stage tools

mkdir -p "$cache"
if [ ! -x "$G/bin/gst-launch-1.0.exe" ]; then
  rm -rf "$cache/whl" "$cache/x" "$G"
  python3 -m pip download -q --no-deps --only-binary=:all: --platform win_amd64 --python-version 3.12 \
    gstreamer-libs==1.28.8 gstreamer-cli==1.28.8 gstreamer-ext-runtime==1.28.8 -d "$cache/whl"
  mkdir -p "$cache/x"
  for w in "$cache"/whl/*.whl; do
    python3 -m zipfile -e "$w" "$cache/x"
    rm -f "$w"
  done
  mv "$cache"/x/gstreamer_libs-*.data/purelib/gstreamer_libs "$G"
  cp "$cache"/x/gstreamer_cli-*.data/purelib/gstreamer_cli/bin/* \
    "$cache"/x/gstreamer_ext_runtime-*.data/purelib/gstreamer_ext_runtime/bin/* "$G/bin/"
  rm -rf "$cache/x" "$cache/whl" "$G/share/locale"
fi
mkdir -p "$cache/pc"
# name version dll requires
while read -r name version dll requires; do
  printf 'Name: %s\nDescription: DLLs of the GStreamer wheels\nVersion: %s\nRequires: %s\nLibs: -L%s -l%s\nCflags:\n' \
    "$name" "$version" "$requires" "$G/bin" "$dll" >"$cache/pc/$name.pc"
done <<'L'
glib-2.0 2.82.4 glib-2.0-0
gobject-2.0 2.82.4 gobject-2.0-0 glib-2.0
gio-2.0 2.82.4 gio-2.0-0 gobject-2.0
gstreamer-1.0 1.28.8 gstreamer-1.0-0 gobject-2.0
gstreamer-base-1.0 1.28.8 gstbase-1.0-0 gstreamer-1.0
gstreamer-video-1.0 1.28.8 gstvideo-1.0-0 gstreamer-base-1.0
L
export WINEPREFIX=$cache/prefix WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
if [ ! -f "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" ]; then
  x86_64-w64-mingw32-gcc -O2 -shared -o "$cache/bcryptprimitives.dll" scripts/windows/bcryptprimitives.c -ladvapi32
  wine wineboot -i >/dev/null 2>&1 || skip "wineboot cannot make a Wine prefix"
  wineserver -w
  cp "$cache/bcryptprimitives.dll" "$WINEPREFIX/drive_c/windows/system32/"
fi
# One Wine server for the whole run: one that exits between two test
# binaries (3 s after its last process, by default) can reset the next
# one's connection. It is this prefix's own, stopped at the end.
wineserver -w
wineserver -p
trap 'wineserver -k 2>/dev/null || true; [ "${CUDAIPC_KEEP_WINE_PREFIX:-}" = 1 ] || rm -rf "$WINEPREFIX"' EXIT
wine cmd /c exit 0 >/dev/null 2>&1 || skip "wine does not run Windows programs here"
stage setup

# --- build --------------------------------------------------------------------
export PKG_CONFIG_ALLOW_CROSS=1 PKG_CONFIG_PATH_x86_64_pc_windows_gnu=$cache/pc
# Built once per run: no incremental state (it would triple the disk used).
export CARGO_INCREMENTAL=0
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine
cargo clippy --quiet --target $T -p cudaipc-channel -p cudaipc-transport -p cudaipc -p cudaipc-c -p cudaipc-ucx -p cudaipc-bridge --all-targets -- -D warnings
cargo clippy --quiet --target $T -p gst-plugin-cudaipc --lib -- -D warnings
cargo build --quiet --target $T -p gst-plugin-cudaipc --lib
stage build

# --- the crates' tests under Wine ----------------------------------------------
# CUDA tests print SKIPPED (no GPU, no nvcuda.dll under Wine).
cargo test --quiet --target $T -p cudaipc-channel -p cudaipc-transport -p cudaipc 2>&1 |
  grep -vE "^\s*$|^running [0-9]+ tests?$"
stage tests

# --- gst-launch-1.0.exe processes under Wine -----------------------------------
runs=$(mktemp -d)
# A unix path as Windows names it: backslashes for environment variables,
# forward slashes (which Windows takes too) in a pipeline, whose parser
# reads a backslash as an escape.
win() { printf 'Z:%s' "${1//\//\\}"; }
in_pipeline() { printf 'Z:%s' "$1"; }
export GST_PLUGIN_PATH=$(win "$repo/target/$T/debug")
export GST_REGISTRY=$(win "$runs/registry.bin")
export GST_DEBUG_NO_COLOR=1 G_DEBUG=fatal-criticals
launch=("$G/bin/gst-launch-1.0.exe")
started=()
cleanup() {
  for pid in "${started[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -rf "$runs"
  wineserver -k 2>/dev/null || true
  # The prefix is 700 MB and made again in about 15 s.
  [ "${CUDAIPC_KEEP_WINE_PREFIX:-}" = 1 ] || rm -rf "$WINEPREFIX"
}
trap cleanup EXIT
failed=0
fail() { failed=1; echo "windows: $1"; shift; for log in "$@"; do sed -n 1,20p "$log"; done; }
channel() { echo "win-$1-$$"; }
# wait_for_bytes FILE: up to 20 s for FILE to have bytes; status 1 if not.
wait_for_bytes() {
  for _ in $(seq 200); do
    [ -s "$1" ] && return 0
    sleep 0.1
  done
  return 1
}
caps="video/x-raw,format=RGBA,width=320,height=240,framerate=30/1"
frame_bytes=$((320 * 240 * 4))
# One SHA-1 a frame of a raw RGBA file.
checksums() {
  python3 -c 'import hashlib,sys
data=open(sys.argv[1],"rb").read(); n=int(sys.argv[2])
print(len(data)//n, len(data)%n)
for i in range(0,len(data)-len(data)%n,n): print(hashlib.sha1(data[i:i+n]).hexdigest())' "$1" $frame_bytes
}
wine "${launch[@]}" --version >/dev/null 2>&1 || fail "gst-launch-1.0.exe does not run"
wine "$G/bin/gst-inspect-1.0.exe" rscudaipcsink >"$runs/inspect.txt" 2>&1 ||
  fail "gst-inspect-1.0.exe cannot load the plugin" "$runs/inspect.txt"

# A pair in each ipc-mode (named files; a named pipe handing duplicated
# handles): every frame arrives, as the producer published it (a tee writes
# what it sent to a file beside the sink). The sink paces by the clock, a
# live channel: frames=every, else a consumer still starting under Wine
# misses frames, as a slow one should.
for mode in legacy fd; do
  ch=$(channel pair-$mode)
  rm -f "$runs/producer.raw" "$runs/consumer.raw"
  wine "${launch[@]}" -q rscudaipcsrc channel=$ch ipc-mode=$mode frames=every \
    ! filesink location=$(in_pipeline "$runs/consumer.raw") >"$runs/pair-consumer.txt" 2>&1 &
  consumer=$!
  started+=("$consumer")
  wine "${launch[@]}" -q videotestsrc num-buffers=60 pattern=ball ! $caps ! tee name=t \
    ! queue ! rscudaipcsink channel=$ch transport=host ipc-mode=$mode wait-for-connection=1 \
    t. ! queue ! filesink location=$(in_pipeline "$runs/producer.raw") >"$runs/pair-producer.txt" 2>&1 ||
    fail "pair ($mode): the producer failed" "$runs/pair-producer.txt"
  wait "$consumer" || fail "pair ($mode): the consumer failed" "$runs/pair-consumer.txt"
  started=()
  if [ -s "$runs/producer.raw" ] && [ "$(checksums "$runs/producer.raw")" = "$(checksums "$runs/consumer.raw")" ]; then
    echo "windows: pair (ipc-mode=$mode): 60 of 60 frames arrived, each with the producer's checksum"
  else
    fail "pair ($mode): the frames differ (frames, leftover bytes): producer $(checksums "$runs/producer.raw" | head -1), consumer $(checksums "$runs/consumer.raw" 2>/dev/null | head -1)" \
      "$runs/pair-producer.txt" "$runs/pair-consumer.txt"
  fi
done
stage pair

# Every format the elements take, to two consumers at once (frames=every):
# each gets the producer's bytes, frame for frame, and EOS. Each process is
# bounded: a Wine process that hangs while it starts (seen once in CI, a
# consumer stuck in its main thread before its pipeline ran, so the producer
# waited for its second consumer for ever) ends the attempt, which runs
# once more.
# format_attempt FORMAT: one attempt; status 0 when both consumers got the
# producer's bytes, 2 when a process did not end in time.
format_attempt() {
  local format=$1 ch i rc pids=() hung=0
  ch=$(channel fmt-$format-$RANDOM)
  rm -f "$runs"/fmt-*.raw
  for i in 1 2; do
    timeout -k 5 90 wine "${launch[@]}" -q rscudaipcsrc channel=$ch frames=every \
      ! filesink location=$(in_pipeline "$runs/fmt-$i.raw") >"$runs/fmt-consumer$i.txt" 2>&1 &
    pids+=("$!")
    started+=("$!")
  done
  rc=0
  timeout -k 5 90 wine "${launch[@]}" -q videotestsrc num-buffers=20 pattern=smpte \
    ! video/x-raw,format=$format,width=320,height=240,framerate=30/1 ! tee name=t \
    ! queue ! rscudaipcsink channel=$ch transport=host wait-for-connection=2 \
    t. ! queue ! filesink location=$(in_pipeline "$runs/fmt-producer.raw") >"$runs/fmt-producer.txt" 2>&1 || rc=$?
  case $rc in 0) ;; 124|137) hung=1 ;; *) echo "windows: $format: the producer failed"; sed -n 1,20p "$runs/fmt-producer.txt" ;; esac
  for i in 1 2; do
    rc=0
    wait "${pids[$((i - 1))]}" || rc=$?
    case $rc in 0) ;; 124|137) hung=1 ;; *) echo "windows: $format: consumer $i failed"; sed -n 1,20p "$runs/fmt-consumer$i.txt" ;; esac
  done
  started=()
  [ $hung = 0 ] || return 2
  [ -s "$runs/fmt-producer.raw" ] && cmp -s "$runs/fmt-producer.raw" "$runs/fmt-1.raw" \
    && cmp -s "$runs/fmt-producer.raw" "$runs/fmt-2.raw"
}
formats_ok=0
for format in RGB RGBA BGRA RGBx BGRx GRAY8 NV12 I420; do
  result=0
  format_attempt "$format" || result=$?
  if [ $result = 2 ]; then
    echo "windows: $format: a Wine process did not end within 90 s; the scenario runs once more"
    result=0
    format_attempt "$format" || result=$?
  fi
  if [ $result = 0 ]; then
    formats_ok=$((formats_ok + 1))
  else
    fail "$format: a consumer's frames differ from the producer's ($(wc -c <"$runs/fmt-producer.raw" 2>/dev/null) bytes sent; got $(wc -c <"$runs/fmt-1.raw" 2>/dev/null) and $(wc -c <"$runs/fmt-2.raw" 2>/dev/null))" \
      "$runs/fmt-consumer1.txt" "$runs/fmt-consumer2.txt"
  fi
done
echo "windows: $formats_ok of 8 formats: two consumers each got the producer's 20 frames, byte for byte, and EOS"
stage formats

# A consumer joining a live producer late: from its first frame on it gets
# every frame the producer published, in order, through to EOS.
# A Wine process that hangs before GStreamer prints anything (seen once in
# about 40 late starts, with no output at any debug level) is ended after
# 60 s and the join tried once more; any other failure fails at once.
for attempt in 1 2; do
  ch=$(channel late-$attempt)
  rm -f "$runs"/late-*
  wine "${launch[@]}" -q videotestsrc is-live=true num-buffers=150 pattern=ball ! $caps ! tee name=t \
    ! queue ! rscudaipcsink channel=$ch transport=host \
    t. ! queue ! filesink location=$(in_pipeline "$runs/late-producer.raw") >"$runs/late-producer.txt" 2>&1 &
  producer=$!
  started+=("$producer")
  wait_for_bytes "$runs/late-producer.raw" || true
  sleep 1
  timeout -k 5 60 wine "${launch[@]}" -q rscudaipcsrc channel=$ch frames=every \
    ! filesink location=$(in_pipeline "$runs/late-consumer.raw") >"$runs/late-consumer.txt" 2>&1
  code=$?
  wait "$producer" || fail "late join: the producer failed" "$runs/late-producer.txt"
  if [ $code = 124 ] && [ ! -s "$runs/late-consumer.txt" ] && [ $attempt = 1 ]; then
    echo "windows: WARNING: the late consumer's Wine process hung without a word for 60 s: once more"
    continue
  fi
  [ $code = 0 ] || fail "late join: the consumer failed (exit $code)" "$runs/late-consumer.txt"
  break
done
started=()
late=$(python3 - "$runs/late-producer.raw" "$runs/late-consumer.raw" $frame_bytes <<'PY'
import hashlib, sys
n = int(sys.argv[3])
def frames(path):
    data = open(path, "rb").read()
    return [hashlib.sha1(data[i:i + n]).digest() for i in range(0, len(data) - len(data) % n, n)]
sent, got = frames(sys.argv[1]), frames(sys.argv[2])
# got: a run of sent, in order, ending with sent's last frame (EOS).
ok = 0 < len(got) < len(sent) and sent[-len(got):] == got
print(f"{'ok' if ok else 'bad'} {len(got)} {len(sent)}")
PY
)
case $late in
  ok*) read -r _ got sent <<<"$late"; echo "windows: late join: the consumer got the last $got of the producer's $sent frames, in order, then EOS" ;;
  *) fail "late join: the consumer's frames are not the producer's last ones in order ($late)" "$runs/late-consumer.txt" ;;
esac
stage late

# A caps change mid-stream (concat: 320x240, then 160x120 from a second
# source) with the producer's timestamps: the consumer renegotiates and gets
# every frame with its size, timestamp and bytes as the producer sent them.
# -v prints each fakesink buffer's size and pts.
buffers() { tr -d '\r' <"$1" | grep -o '([0-9]* bytes, .*pts: [0-9:.]*' | sed -E 's/^\(([0-9]+) bytes.*pts: /\1 /'; }
ch=$(channel caps)
rm -f "$runs"/caps-*.raw
wine "${launch[@]}" -v rscudaipcsrc channel=$ch frames=every timestamp-mode=producer ! tee name=t \
  ! queue ! fakesink silent=false t. ! queue ! filesink location=$(in_pipeline "$runs/caps-consumer.raw") \
  >"$runs/caps-consumer.txt" 2>&1 &
consumer=$!
started+=("$consumer")
wine "${launch[@]}" -v concat name=c ! tee name=t ! queue ! rscudaipcsink channel=$ch transport=host wait-for-connection=1 \
  t. ! queue ! fakesink silent=false t. ! queue ! filesink location=$(in_pipeline "$runs/caps-producer.raw") \
  videotestsrc num-buffers=10 pattern=smpte ! $caps ! c. \
  videotestsrc num-buffers=10 pattern=ball ! video/x-raw,format=RGBA,width=160,height=120,framerate=30/1 ! c. \
  >"$runs/caps-producer.txt" 2>&1 || fail "caps change: the producer failed" "$runs/caps-producer.txt"
wait "$consumer" || fail "caps change: the consumer failed" "$runs/caps-consumer.txt"
started=()
sent=$(buffers "$runs/caps-producer.txt")
got=$(buffers "$runs/caps-consumer.txt")
if [ "$(wc -l <<<"$sent")" = 20 ] && [ "$sent" = "$got" ] &&
  [ "$(sha1sum <"$runs/caps-producer.raw")" = "$(sha1sum <"$runs/caps-consumer.raw")" ] &&
  grep -q "width=(int)160, height=(int)120" "$runs/caps-consumer.txt"; then
  echo "windows: caps change: the consumer renegotiated to 160x120 and got all 20 frames with the producer's sizes, timestamps and bytes"
else
  fail "caps change: the consumer's frames differ (producer: $(wc -l <<<"$sent") frames, consumer: $(wc -l <<<"$got"))" \
    "$runs/caps-producer.txt" "$runs/caps-consumer.txt"
fi
stage caps

# A live producer: a second one is refused; killed, its consumer ends within
# a second (on-producer-lost=eos); a new producer then takes the name.
# $1: the attempt; returns 2 for a consumer whose Wine process died as it
# exited, after its pipeline had ended (see below).
# Sets ch, the channel, for the new producer after it.
killed_producer() {
  local attempt=$1 producer consumer killed ms code
  ch=$(channel kill$attempt)
  wine "${launch[@]}" -q videotestsrc is-live=true pattern=ball ! $caps \
    ! rscudaipcsink channel=$ch transport=host >"$runs/kill-producer.txt" 2>&1 &
  producer=$!
  started+=("$producer")
  # Wine's own errors (a crash's report) go to this consumer's log too.
  # Not quiet: its log says how far it got (EOS, the pipeline freed).
  WINEDEBUG=fixme-all,warn-all wine "${launch[@]}" rscudaipcsrc channel=$ch connect-timeout=120000 on-producer-lost=eos \
    ! filesink location=$(in_pipeline "$runs/kill.raw") >"$runs/kill-consumer.txt" 2>&1 &
  consumer=$!
  started+=("$consumer")
  # Frames arriving: the consumer is attached and streaming.
  wait_for_bytes "$runs/kill.raw" || fail "the consumer of the live producer got no frame in 20 s" "$runs/kill-consumer.txt"
  if wine "${launch[@]}" -q videotestsrc num-buffers=5 ! $caps ! rscudaipcsink channel=$ch transport=host \
    >"$runs/second-producer.txt" 2>&1; then
    fail "a second producer on a live channel was not refused" "$runs/second-producer.txt"
  elif grep -q "in use by a live producer" "$runs/second-producer.txt"; then
    echo "windows: a second producer on a live channel is refused: $(grep -o "channel '[^']*' is in use[^;]*" "$runs/second-producer.txt" | head -1)"
  else
    fail "the second producer failed without saying the channel is in use" "$runs/second-producer.txt"
  fi
  kill -0 "$consumer" 2>/dev/null || fail "the consumer ended before its producer was killed" "$runs/kill-consumer.txt"
  killed=$(date +%s%N)
  kill -9 "$producer"
  wait "$producer" 2>/dev/null || true
  code=0
  wait "$consumer" || code=$?
  ms=$((($(date +%s%N) - killed) / 1000000))
  if [ $code != 0 ]; then
    # Rarely, with other builds loading the machine, the consumer's Wine
    # process died of a signal (SIGSEGV) with no Windows exception reported
    # (docs/windows.md says how often). A death after the pipeline ended
    # (EOS taken, the pipeline freed) is reported and the scenario run again
    # once; a second time, or a death before the pipeline ended, fails.
    if [ $attempt = 1 ] && [ $code -gt 128 ] && grep -q "Got EOS from element" "$runs/kill-consumer.txt" &&
      grep -q "^Freeing pipeline" "$runs/kill-consumer.txt"; then
      echo "windows: WARNING: the consumer of the killed producer took EOS and ended its pipeline $ms ms later, then its Wine process died as it exited (exit $code): once more"
      return 2
    fi
    fail "the consumer of a killed producer failed (exit $code) instead of taking EOS" "$runs/kill-consumer.txt"
  elif [ $ms -le 1500 ]; then
    # The limit holds Wine's own process teardown too (the channel's
    # liveness check runs every 100 ms).
    echo "windows: producer killed mid-stream: its consumer took EOS and ended $ms ms later"
  else
    fail "the consumer ended $ms ms after its producer was killed (over 1.5 s)" "$runs/kill-consumer.txt"
  fi
}
killed_producer 1 || killed_producer 2
started=()
# new_producer: status 0 when a new producer took the killed one's channel.
new_producer() {
  wine "${launch[@]}" -q videotestsrc num-buffers=5 ! $caps ! rscudaipcsink channel=$ch transport=host \
    >"$runs/new-producer.txt" 2>&1
}
code=0
new_producer || code=$?
if [ $code -gt 128 ]; then
  # Seen twice in about ten runs on a fresh clone: the new producer's Wine
  # process killed by a signal (SIGKILL, no Windows exception, its log
  # empty) soon after the killed producer's. Said, and tried once more; a
  # refusal (exit 1) or a second death fails.
  echo "windows: WARNING: the new producer's Wine process died of signal $((code - 128)) ($(wc -c <"$runs/new-producer.txt") bytes of log): once more"
  code=0
  new_producer || code=$?
fi
if [ $code = 0 ]; then
  echo "windows: a new producer takes the channel of the killed one"
else
  fail "a new producer could not replace the killed one's channel (exit $code)" "$runs/new-producer.txt"
fi
stage gst

report_timings
exit $failed
