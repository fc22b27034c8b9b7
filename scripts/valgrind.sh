#!/bin/bash
# A short producer and consumer on the host transport, each a gst-launch-1.0
# process under valgrind (memcheck): fails on any invalid access, use of
# uninitialised memory or definite leak beyond what gst-launch-1.0 alone
# shows. gst-launch-1.0 alone runs first; what valgrind reports there (GLib
# and GStreamer's own) becomes the suppressions for the two runs with the
# plugin.
# usage (repo root): scripts/valgrind.sh [PLUGIN_DIR]   (default: built into target/debug)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  # `cargo test` leaves the plugin in target/debug/deps only.
  cargo build --quiet --lib
fi
plugin_dir=$(cd "${1:-target/debug}" && pwd)
[ -f "$plugin_dir/libgstcudaipc.so" ] || { echo "no libgstcudaipc.so in $plugin_dir: build first" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind missing: run scripts/setup.sh" >&2; exit 1; }
work=$(mktemp -d)
producer=
cleanup() {
  [ -n "$producer" ] && kill "$producer" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
export GST_PLUGIN_PATH=$plugin_dir GST_REGISTRY=$work/registry.bin GST_REGISTRY_FORK=no
# A critical of GLib or GStreamer aborts the process (and fails the run);
# one that does not, or a warning of theirs, fails it below.
export G_DEBUG=${G_DEBUG:+$G_DEBUG,}fatal-criticals
# The registry is written outside valgrind: scanning every plugin under it
# takes minutes and reports on plugins that are not ours.
gst-inspect-1.0 rscudaipcsink >/dev/null
# gst-launch-1.0 spins after a crash (its SIGSEGV handler waits for a
# debugger): a bound on each run turns that into a failure.
memcheck=(timeout 300 valgrind --error-exitcode=99 --leak-check=full --show-leak-kinds=definite
  --errors-for-leak-kinds=definite --track-origins=no --num-callers=40)
caps="video/x-raw,format=RGB,width=320,height=240,framerate=30/1"
"${memcheck[@]}" --gen-suppressions=all --log-file="$work/alone.log" \
  gst-launch-1.0 -q videotestsrc num-buffers=30 ! "$caps" ! fakesink >/dev/null 2>&1 || true
# Suppression blocks are the log's lines without the ==pid== prefix; each
# keeps its first frames (the deeper ones, below the dynamic loader, are
# addresses that change from run to run) and matches any caller below.
awk '/^\{/{on=1; frames=0} on && /^   (fun|obj):/{if (++frames > 8) next}
     on && /^\}/{print "   ..."} on{print} /^\}/{on=0}' "$work/alone.log" > "$work/alone.supp"
echo "valgrind: gst-launch-1.0 alone: $(grep -c '^{' "$work/alone.supp") suppressions ($(grep -o 'ERROR SUMMARY: [0-9]* errors' "$work/alone.log"))"
channel=valgrind-$$
# The producer is paced (a frame rate, sync=true): the channel is live, and
# the consumer, slowed down by valgrind, asks for every frame.
"${memcheck[@]}" --suppressions="$work/alone.supp" --log-file="$work/producer.log" \
  gst-launch-1.0 -q videotestsrc num-buffers=30 ! "$caps" \
  ! rscudaipcsink channel=$channel transport=host wait-for-connection=1 >"$work/producer.out" 2>&1 &
producer=$!
consumer_rc=0
"${memcheck[@]}" --suppressions="$work/alone.supp" --log-file="$work/consumer.log" \
  gst-launch-1.0 -q rscudaipcsrc channel=$channel connect-timeout=60000 frames=every ! checksumsink \
  >"$work/consumer.out" 2>&1 || consumer_rc=$?
producer_rc=0
wait "$producer" || producer_rc=$?
producer=
frames=$(grep -c ' [0-9a-f]\{40\}$' "$work/consumer.out" || true)
failed=0
for side in producer consumer; do
  rc_var=${side}_rc
  summary=$(grep -o 'ERROR SUMMARY: [0-9]* errors' "$work/$side.log" || echo "no summary")
  echo "valgrind: $side: exit ${!rc_var}, $summary"
  if [ "${!rc_var}" != 0 ]; then
    failed=1
    sed -e 's/^==[0-9]*== //' "$work/$side.log" | grep -v '^[{}]' | tail -60
    cat "$work/$side.out"
  fi
  if grep -E '(GStreamer|GLib)[-A-Za-z]*-(CRITICAL|WARNING) \*\*' "$work/$side.out"; then
    echo "valgrind: $side: GLib or GStreamer complained (above)"
    failed=1
  fi
done
echo "valgrind: the consumer received $frames of 30 frames"
[ "$frames" = 30 ] || failed=1
exit $failed
