#!/bin/bash
# Runs the test suite (host transport; GPU tests print SKIPPED without a GPU)
# against a newer GStreamer (1.26: Debian 13 packages; 1.28: Debian testing)
# with the binaries built here against Debian 12's GStreamer 1.22: the one
# build must work on all of them. The runtime (with its suite's own glibc and
# loader, scripts/gst-runtime/make-runtime.sh) is unpacked into .cache/gstNNN;
# test and example binaries are staged into target/gstNNN and given that
# loader as interpreter (patchelf), so that they, the processes they start
# and gst-launch-1.0 all run on that runtime.
# usage (repo root): scripts/test-gst-runtime.sh 1.26|1.28 [test-name-filter]
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: $0 1.26|1.28 [test-name-filter]}
filter=${2:-}
nnn=${version/./}
command -v patchelf >/dev/null || { echo "patchelf missing: run scripts/setup.sh" >&2; exit 1; }
runtime=.cache/gst$nnn
[ -f $runtime/gst$nnn.tgz ] || scripts/gst-runtime/make-runtime.sh "$version" $runtime >/dev/null
source $runtime/env$nnn.sh
# Scan plugins in a child process, as GStreamer does by default: a process
# that registers the plugin statically (the examples) must not also load the
# shared object the registry scan would open in-process.
export GST_PLUGIN_SCANNER=$GST_RT/wrap/gst-plugin-scanner
unset GST_REGISTRY_FORK
stage=target/gst$nnn
rm -rf $stage && mkdir -p $stage
cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, shutil, sys, os
out = sys.argv[1]
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") != "compiler-artifact": continue
    kind = m["target"]["kind"][0]
    exe = m.get("executable")
    if exe and m.get("profile", {}).get("test"):
        shutil.copy2(exe, os.path.join(out, "test-" + m["target"]["name"]))
    elif exe and kind in ("example", "bin"):
        shutil.copy2(exe, os.path.join(out, m["target"]["name"]))
    elif "cdylib" in m["target"]["kind"]:
        for f in m["filenames"]:
            if f.endswith(".so"): shutil.copy2(f, out)
' $stage
for f in $stage/*; do
  [ "${f%.so}" = "$f" ] || continue
  # DT_RPATH (not RUNPATH): it also applies to the libraries those load.
  patchelf --force-rpath --set-interpreter "$GST_RT_LOADER" --set-rpath "$GST_RT_LIBS:/usr/lib/x86_64-linux-gnu" "$f"
done
# Debian 12's PyGObject can only run GStreamer 1.22: the Python reader
# example then reads, on 1.22, what a publisher on the runtime sends.
printf '#!/bin/sh\nexec env -u GST_PLUGIN_SYSTEM_PATH -u GST_REGISTRY -u GST_PLUGIN_SCANNER /usr/bin/python3 "$@"\n' > $stage/python-gst122
chmod +x $stage/python-gst122
export CUDAIPC_PYTHON=$(pwd)/$stage/python-gst122
# The tests hand this folder to the processes they start (tests/common).
export CUDAIPC_PLUGIN_DIR=$(pwd)/$stage CUDAIPC_EXPECT_GST=$version
failed=0
for t in $stage/test-*; do
  name=$(basename "$t")
  if "$t" -q $filter >"$stage/$name.log" 2>&1; then
    echo "gst $version: $name: $(grep -E '^test result' "$stage/$name.log" | tail -1)"
  else
    failed=1
    echo "gst $version: $name FAILED"
    grep -E "^test .*FAILED|panicked|^---- |error" "$stage/$name.log" | sed -n 1,30p
  fi
done
# 1.22 and this runtime at the two ends of a channel: the reference
# timestamps and custom metas 1.22 writes itself are read by this
# GStreamer's gst_meta_deserialize, and what it serializes by 1.22.
native=$(cargo test --test processes_and_channels --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l) if l.startswith("{") else {}
    if m.get("reason") == "compiler-artifact" and m.get("executable"): print(m["executable"])' | tail -1)
gst_env_unset="-u GST_PLUGIN_SYSTEM_PATH -u GST_REGISTRY -u GST_REGISTRY_FORK -u GST_PLUGIN_SCANNER -u CUDAIPC_EXPECT_GST -u CUDAIPC_PLUGIN_DIR"
printf '#!/bin/sh\nexec env %s %s "$@"\n' "$gst_env_unset" "$native" > $stage/peer-gst122
printf '#!/bin/sh\nexec env GST_PLUGIN_SYSTEM_PATH=%s GST_REGISTRY=%s GST_REGISTRY_FORK=no GST_PLUGIN_SCANNER=%s %s "$@"\n' \
  "$GST_PLUGIN_SYSTEM_PATH" "$GST_REGISTRY" "$GST_PLUGIN_SCANNER" "$(pwd)/$stage/test-processes_and_channels" > $stage/peer-gst$nnn
chmod +x $stage/peer-gst122 $stage/peer-gst$nnn
cross=travelling::host_metas_tags_and_custom_events_cross_in_order
if CUDAIPC_PEER_TEST_BINARY=$(pwd)/$stage/peer-gst122 CUDAIPC_PEER_EXPECT_GST=1.22 $stage/test-processes_and_channels -q --exact $cross >"$stage/cross-to-122.log" 2>&1 \
  && env $gst_env_unset CUDAIPC_PEER_TEST_BINARY=$(pwd)/$stage/peer-gst$nnn CUDAIPC_PEER_EXPECT_GST=$version "$native" -q --exact $cross >"$stage/cross-from-122.log" 2>&1; then
  echo "gst $version: metas and events between $version and 1.22, both ways: passed"
else
  failed=1
  echo "gst $version: metas and events between $version and 1.22 FAILED"
  grep -hE "^test .*FAILED|panicked|left:|right:" "$stage"/cross-*.log | sed -n 1,20p
fi
# The staged copies are the size of the build's binaries; the logs stay.
find $stage -maxdepth 1 -type f ! -name '*.log' -delete
exit $failed
