#!/bin/bash
# A/B of two builds on the GPU host, interleaved in one call: the benchmark
# of scripts/gpu-host/stage-base.sh (base, "old") and of stage.sh (new),
# each with its own plugin, ROUNDS times base then new, then each row's
# frames per second side by side and new's median as a share of base's.
# usage (repo root, GPU host, after `source .gpu-carry/unpack.sh`):
#   scripts/gpu-host/ab.sh 1.22|1.26 ROUNDS [bench options]
#   e.g. scripts/gpu-host/ab.sh 1.22 2 --rows 1b,1q,5,5d --frames 12000 --mps both --slots 2
set -u
version=${1:?usage: $0 1.22|1.26 ROUNDS [bench options]}
rounds=${2:?usage: $0 1.22|1.26 ROUNDS [bench options]}
shift 2
case $version in
  1.22) new=.gpu-host; source .gpu-host/env.sh >/dev/null ;;
  1.26)
    new=.gpu-host126; source .gpu-host126/env126.sh
    # As bench.sh: plugins scanned in a child (the benchmark registers its
    # own plugin statically).
    export GST_PLUGIN_SCANNER=$GST_RT/wrap/gst-plugin-scanner
    unset GST_REGISTRY_FORK ;;
  *) echo "usage: $0 1.22|1.26 ROUNDS [bench options]" >&2; exit 2 ;;
esac
base=$new-base
[ -x $base/build/bench ] || { echo "$base/build/bench missing: run scripts/gpu-host/stage-base.sh REV first" >&2; exit 1; }
out=${OUT:-/tmp/ab}/ab-$version
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
echo "base: $(cat $base/build/REV 2>/dev/null || echo '?'), new: the checkout"
for round in $(seq "$rounds"); do
  for side in base new; do
    dir=$new/build; [ $side = base ] && dir=$base/build
    # Each side's own plugin, and a registry of its own.
    GST_PLUGIN_PATH=$(cd $dir && pwd) GST_REGISTRY=/tmp/ab-registry-$version-$side.bin \
      $dir/bench "$@" --out "$out/$side-$round" > "$out/$side-$round.log" 2>&1
    echo "round $round $side: exit $?"
  done
done
python3 - "$out" "$rounds" <<'PY'
import csv, statistics, sys, os
out, rounds = sys.argv[1], int(sys.argv[2])
fps = {}
for side in ("base", "new"):
    for r in range(1, rounds + 1):
        path = os.path.join(out, f"{side}-{r}", "bench.csv")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            rows = csv.DictReader(line for line in f if not line.startswith("#"))
            for row in rows:
                key = (row["configuration"][:60], row["mps"])
                fps.setdefault(key, {"base": [], "new": []})[side].append(float(row["fps"] or 0))
print("| row | MPS | base FPS | new FPS | new / base (medians) |")
print("|---|---|---|---|---|")
for (config, mps), sides in fps.items():
    b, n = sides["base"], sides["new"]
    ratio = f"{statistics.median(n) / statistics.median(b):.1%}" if b and n and statistics.median(b) > 0 else "-"
    fmt = lambda v: " / ".join(f"{x:,.0f}" for x in v) or "-"
    print(f"| {config} | {'on' if mps == 'true' else 'off'} | {fmt(b)} | {fmt(n)} | {ratio} |")
PY
