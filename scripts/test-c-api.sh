#!/bin/bash
# The C API (crates/cudaipc-c) as a C or C++ user gets it: installed into a
# temporary prefix with scripts/install.sh, the examples compiled with gcc
# and g++ from `pkg-config --cflags --libs cudaipc`, and run in pairs on the
# host transport, every frame checked against what the producer wrote:
#   - the C++ producer into `gst-launch-1.0 rscudaipcsrc ! checksumsink`
#     (each buffer's SHA-1 against the pattern's),
#   - `filesrc (the pattern) ! rawvideoparse ! rscudaipcsink` into the C
#     consumer (which checks every byte),
#   - the C++ producer into the C++ consumer (cudaipc.hpp's range-for),
#     each frame with the producer's JSON (--data json) in these pairs,
#   - the C++ producer into the C consumer, natively, both under valgrind
#     (no invalid access, no definite leak) and both built with
#     -fsanitize=address.
# usage (repo root): scripts/test-c-api.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  scripts/install.sh --uninstall --prefix "$work/usr" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

installed=$(scripts/install.sh --prefix "$work/usr")
eval "$(echo "$installed" | grep -E '^ *export PKG_CONFIG_PATH=')"
eval "$(echo "$installed" | grep -E '^ *export GST_PLUGIN_PATH=')"
export GST_REGISTRY=$work/registry.bin GST_REGISTRY_FORK=no
export G_DEBUG=${G_DEBUG:+$G_DEBUG,}fatal-criticals
libdir=$(pkg-config --variable=libdir cudaipc)
# shellcheck disable=SC2207,SC2054 # flags are words; the rpath flag has commas
flags=($(pkg-config --cflags --libs cudaipc) -Wl,-rpath,"$libdir")
strict=(-O2 -Wall -Wextra -Werror)
gcc -std=c11 "${strict[@]}" examples/c/consumer.c "${flags[@]}" -o "$work/consumer"
g++ -std=c++17 "${strict[@]}" -pedantic examples/cpp/producer.cpp "${flags[@]}" -o "$work/producer"
g++ -std=c++17 "${strict[@]}" -pedantic examples/cpp/consumer.cpp "${flags[@]}" -o "$work/consumer-cpp"
asan=(-g -fsanitize=address -fno-omit-frame-pointer)
gcc -std=c11 "${strict[@]}" "${asan[@]}" examples/c/consumer.c "${flags[@]}" -o "$work/consumer-asan"
g++ -std=c++17 "${strict[@]}" "${asan[@]}" examples/cpp/producer.cpp "${flags[@]}" -o "$work/producer-asan"
# The header alone, as C99 and pedantic C++.
echo '#include <cudaipc.h>' | gcc -std=c99 -pedantic -Werror -fsyntax-only -I"$(pkg-config --variable=includedir cudaipc)" -x c -
echo "c-api: installed into $work/usr; examples built with $(pkg-config --cflags --libs cudaipc)"
readelf -d "$work/consumer" | grep -q 'NEEDED.*\[libcudaipc.so.0\]' ||
  { echo "c-api: the consumer does not load libcudaipc.so.0 (the soname)" >&2; exit 1; }

# --- docs/c-api.md's build block, as shown (its prefix ~/cudaipc and its
# target/ outputs moved into $work) ---------------------------------------------
doc_block=$(python3 - docs/c-api.md <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"<!-- check: skip installs into ~/cudaipc;[^\n]*-->\n```sh\n(.*?)```", text, re.S)
sys.exit("c-api: docs/c-api.md has no build block (marked 'check: skip installs into ~/cudaipc')") if not m else print(m.group(1))
PY
)
doc_block=${doc_block//\~\/cudaipc/$work/doc-prefix}
doc_block=${doc_block//target\//$work/doc-}
doc_block=${doc_block//capi-demo/capi-doc-$$}
if ! (env -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH bash -euo pipefail -c "$doc_block") >"$work/doc.out" 2>&1; then
  echo "c-api: docs/c-api.md's build block fails as shown:"; echo "$doc_block"; tail -20 "$work/doc.out"; exit 1
fi
scripts/install.sh --uninstall --prefix "$work/doc-prefix" >/dev/null
echo "c-api: docs/c-api.md's build block ran as shown: $(tail -1 "$work/doc.out")"

W=320 H=240 N=30
size=$((W * H * 3))
gst-inspect-1.0 rscudaipcsrc >/dev/null

# --- the C++ producer into rscudaipcsrc ! checksumsink ------------------------
channel=capi-gst-$$
timeout 60 "$work/producer" --channel $channel --frames $N --size ${W}x$H --transport host >"$work/p1.out" &
pids=($!)
timeout 60 gst-launch-1.0 -q rscudaipcsrc channel=$channel connect-timeout=30000 frames=every \
  ! checksumsink >"$work/c1.out" 2>&1 || { cat "$work/c1.out"; exit 1; }
wait "${pids[0]}" || { echo "c-api: the producer failed"; cat "$work/p1.out"; exit 1; }
pids=()
python3 - "$work/c1.out" $size $N <<'PY'
import hashlib, re, sys
out, size, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
got = [m.group(1) for m in re.finditer(r" ([0-9a-f]{40})$", open(out).read(), re.M)]
base = bytes(range(256)) * (size // 256 + 2)
want = [hashlib.sha1(base[(3 * k) % 256:(3 * k) % 256 + size]).hexdigest() for k in range(n)]
bad = [k for k in range(n) if k >= len(got) or got[k] != want[k]]
if bad or len(got) != n:
    sys.exit(f"c-api: checksumsink got {len(got)} frames of {n}; wrong from frame {bad[:1]}")
print(f"c-api: C++ producer -> rscudaipcsrc ! checksumsink: {n} frames, every SHA-1 as written")
PY

# --- rscudaipcsink into the C consumer ----------------------------------------
python3 -c "
import sys
size, n = $size, $N
base = bytes(range(256)) * (size // 256 + 2)
with open('$work/frames.rgb', 'wb') as f:
    for k in range(n): f.write(base[(3 * k) % 256:(3 * k) % 256 + size])"
channel=capi-sink-$$
timeout 60 gst-launch-1.0 -q filesrc location="$work/frames.rgb" blocksize=$size \
  ! rawvideoparse format=rgb width=$W height=$H framerate=30/1 \
  ! rscudaipcsink channel=$channel transport=host wait-for-connection=1 sync=false >"$work/p2.out" 2>&1 &
pids=($!)
timeout 60 "$work/consumer" --channel $channel --frames $N --timeout 30000 >"$work/c2.out" ||
  { tail -5 "$work/c2.out"; cat "$work/p2.out"; exit 1; }
wait "${pids[0]}" || { echo "c-api: rscudaipcsink failed"; cat "$work/p2.out"; exit 1; }
pids=()
echo "c-api: rscudaipcsink -> C consumer: $(tail -1 "$work/c2.out")"

# pair PRODUCER CONSUMER LABEL [WRAPPER...]: the C++ producer into the C
# consumer, each run through WRAPPER.
pair() {
  local producer=$1 consumer=$2 label=$3 frames=$4
  shift 4
  channel=capi-$label-$$
  timeout 120 "$@" "$producer" --channel "$channel" --frames "$frames" --size ${W}x$H --transport host \
    >"$work/$label-p.out" 2>"$work/$label-p.err" &
  pids=($!)
  local rc=0
  timeout 120 "$@" "$consumer" --channel "$channel" --frames "$frames" --timeout 60000 --data json \
    >"$work/$label-c.out" 2>"$work/$label-c.err" || rc=$?
  local prc=0
  wait "${pids[0]}" || prc=$?
  pids=()
  if [ $rc != 0 ] || [ $prc != 0 ]; then
    echo "c-api: $label: producer exit $prc, consumer exit $rc"
    tail -40 "$work/$label-p.err" "$work/$label-c.err" "$work/$label-c.out"
    exit 1
  fi
  echo "c-api: C++ producer -> $(basename "$consumer") ($label): $(tail -1 "$work/$label-c.out")"
}
pair "$work/producer" "$work/consumer" native $N
pair "$work/producer" "$work/consumer-cpp" cpp $N
pair "$work/producer-asan" "$work/consumer-asan" asan $N
pair "$work/producer" "$work/consumer" valgrind 10 \
  valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite \
  --errors-for-leak-kinds=definite --track-origins=no
echo "c-api: all passed"
