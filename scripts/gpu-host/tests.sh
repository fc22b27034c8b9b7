#!/bin/bash
# Runs every test binary staged by scripts/gpu-host/stage.sh on a GPU host,
# with CUDAIPC_REQUIRE_GPU=1 so that a skipped GPU test fails. With --gst126
# (--gst128) the same tests run on the staged GStreamer 1.26 (1.28) runtime,
# with its nvcodec.
# usage (repo root, GPU host): scripts/gpu-host/tests.sh [--gst126|--gst128] [LOGDIR] [test-name-filter]
#                              scripts/gpu-host/tests.sh [--gst126|--gst128] --list
#   --list: the names of the staged binaries it would run, one a line; nothing run
# CUDAIPC_TEST_TIMEOUT: seconds one test binary may run (default 900).
# CUDAIPC_TEST_ONLY: names of the test binaries to run (elements, processes_and_channels,
# hostile_and_faults, api; the unit tests: "gstcudaipc" of the plugin, "cudaipc_channel" and
# "cudaipc_transport" of the crates; default all); BINARY:MODULE runs one module of a binary
# (e.g. "elements:gstcuda_interop elements:sink"), unless a test-name-filter is given.
# Output: a line per binary ("NAME: rc=RC test result: ..."), then
# "tests.sh: B of B binaries ran (S staged), T tests ran: P passed, F failed".
# Exit status: 0 when every test passed; 1 when a binary failed or ran no
# test; 2 when nothing could run (nothing staged here, the runtime missing,
# CUDAIPC_TEST_ONLY naming no staged binary) or no test ran at all.
set -u
nnn=
case ${1:-} in
  --gst126|--gst128)
    nnn=${1#--gst}
    shift
    env_script=.gpu-host$nnn/env$nnn.sh
    build=.gpu-host$nnn/build ;;
  *)
    env_script=.gpu-host/env.sh
    build=.gpu-host/build ;;
esac
list=0
[ "${1:-}" = --list ] && list=1 && shift
# nothing_to_run WHY: says so, with what to do, and exits 2.
nothing_to_run() {
  echo "tests.sh: $1" >&2
  echo "tests.sh: 0 binaries ran"
  exit 2
}
unpack="on the GPU host, unpack what was carried (source .gpu-carry/unpack.sh); on the build machine, stage it (scripts/gpu-host/stage.sh${nnn:+ --gst$nnn}, then scripts/gpu-host/pack.sh)"
[ -f "$env_script" ] || nothing_to_run "$env_script is missing, so nothing is staged here: $unpack"
[ -d "$build" ] || nothing_to_run "$build is missing (the build is not unpacked): $unpack"
staged=()
for t in "$build"/test-* "$build"/gstcudaipc-* "$build"/cudaipc_channel-* "$build"/cudaipc_transport-*; do
  [ -f "$t" ] && [ -x "$t" ] && staged+=("$t")
done
[ ${#staged[@]} -gt 0 ] || nothing_to_run "no test binary in $build (test-*, gstcudaipc-*, cudaipc_channel-*, cudaipc_transport-*): $unpack"

# short NAME: the binary's short name (test-elements-0123abcd -> elements).
short() {
  local s=${1#test-}
  echo "${s%-[0-9a-f]*[0-9a-f]}"
}
# The binaries CUDAIPC_TEST_ONLY selects (all by default), with the modules
# to run of each; an entry that names no staged binary is an error.
selected=() selected_modules=()
for t in "${staged[@]}"; do
  s=$(short "$(basename "$t")")
  modules=""
  if [ -n "${CUDAIPC_TEST_ONLY:-}" ]; then
    wanted=0
    for only in $CUDAIPC_TEST_ONLY; do
      case $only in
        "$s") wanted=1 ;;
        "$s":*) wanted=1 modules="$modules ${only#*:}::" ;;
      esac
    done
    [ $wanted = 1 ] || continue
  fi
  selected+=("$t")
  selected_modules+=("$modules")
done
if [ -n "${CUDAIPC_TEST_ONLY:-}" ]; then
  names=$(for t in "${staged[@]}"; do short "$(basename "$t")"; done | sort -u | tr '\n' ' ')
  for only in $CUDAIPC_TEST_ONLY; do
    found=0
    for t in "${staged[@]}"; do [ "$(short "$(basename "$t")")" = "${only%%:*}" ] && found=1; done
    [ $found = 1 ] || nothing_to_run "CUDAIPC_TEST_ONLY names '$only', and no staged binary is '${only%%:*}' (staged: ${names% })"
  done
fi
if [ $list = 1 ]; then
  for t in "${selected[@]}"; do basename "$t"; done
  exit 0
fi

# shellcheck source=/dev/null
source "$env_script" || nothing_to_run "sourcing $env_script failed"
if [ -n "$nnn" ]; then
  [ -n "${GST_RT:-}" ] || nothing_to_run "$env_script did not set GST_RT (the runtime's folder): stage it again"
  # Plugins are scanned in a child, as by default: the examples register
  # the plugin statically and must not also get the shared object in-process.
  export GST_PLUGIN_SCANNER=$GST_RT/wrap/gst-plugin-scanner CUDAIPC_EXPECT_GST=${nnn:0:1}.${nnn:1}
  unset GST_REGISTRY_FORK
fi
logdir=${1:-/tmp/gpu-test-logs}
filter=${2:-}
mkdir -p "$logdir"
export CUDAIPC_PLUGIN_DIR=$(pwd)/$build
export CUDAIPC_REQUIRE_GPU=1 CUDAIPC_REQUIRE_NVRTC=1 RUST_BACKTRACE=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
failed=0 ran=0 passed_total=0 failed_total=0
for i in "${!selected[@]}"; do
  t=${selected[$i]}
  modules=${selected_modules[$i]}
  name=$(basename "$t")
  # Its own process group, so that children a failed test left behind
  # (stopped or orphaned pipelines) are ended before the next binary runs.
  # shellcheck disable=SC2086 # the modules are words
  setsid timeout "${CUDAIPC_TEST_TIMEOUT:-900}" "$t" --test-threads=1 ${filter:-$modules} >"$logdir/$name.log" 2>&1 &
  pid=$!
  wait $pid
  rc=$?
  kill -KILL -- -$pid 2>/dev/null
  ran=$((ran + 1))
  summary=$(grep -E "^test result" "$logdir/$name.log" | tail -1)
  echo "$name: rc=$rc $summary"
  passed=$(echo "$summary" | sed -n 's/.* \([0-9]*\) passed;.*/\1/p')
  nfailed=$(echo "$summary" | sed -n 's/.* \([0-9]*\) failed;.*/\1/p')
  passed_total=$((passed_total + ${passed:-0}))
  failed_total=$((failed_total + ${nfailed:-0}))
  if [ $rc -ne 0 ]; then
    failed=1
    grep -E "^test .*FAILED|panicked|^---- " "$logdir/$name.log" | sed -n 1,20p
  elif [ -z "$summary" ]; then
    failed=1
    echo "$name: ran no test: no 'test result' line in $logdir/$name.log"
  elif [ -z "$filter" ] && [ $((${passed:-0} + ${nfailed:-0})) = 0 ]; then
    # Without a test-name filter every binary has tests to run; none ran:
    # a module of CUDAIPC_TEST_ONLY that matches none, say.
    failed=1
    echo "$name: ran no test${modules:+ (modules:$modules)}"
  fi
done
total=$((passed_total + failed_total))
echo "tests.sh: $ran of ${#selected[@]} binaries ran (${#staged[@]} staged), $total tests ran: $passed_total passed, $failed_total failed"
if [ "$total" = 0 ]; then
  echo "tests.sh: no test ran${filter:+ (no test matches '$filter')}" >&2
  exit 2
fi
exit $failed
