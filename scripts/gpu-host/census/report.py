#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""The table of scripts/gpu-host/census.sh: per-frame driver calls of each
process of each path, from the census reports (census.c) of two runs, N and
2N frames: (count(2N) - count(N)) / N, which cancels start-up and teardown.

    report.py RAW_DIR N PATHS_TSV TABLE_MD

RAW_DIR/<path>/<frames>/<process>/census-<pid>.txt are the reports;
PATHS_TSV has one line per path: name, asserted (1/0), the path's label,
its note (the reason a measured path syncs or copies), its processes
(comma-separated), and "ok" or why a run failed or did not run. Writes the table to
TABLE_MD and stdout; exits 1 when an asserted path fails a check, or when
no asserted path was measured at all (each failure named on stderr).

Limits (environment): CENSUS_MAX_CALLS (driver calls a frame, default 10;
CENSUS_MAX_CALLS_PYTHON for the Python consumer's process, default 60),
CENSUS_SLACK (syncs and frame-sized copies that the 2N run may make beyond
the N run without failing, default 2: teardown jitter such as the frames in
flight at the end of the stream; a per-frame sync or copy makes N more).
"""

import glob
import os
import re
import sys

SYNCS = ("cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize")
QUERIES = ("cuStreamQuery", "cuEventQuery")
SUFFIX = re.compile(r"(_v\d+)?(_pt(sz|ds))?$")


def base_name(name):
    """cuStreamSynchronize_ptsz, cuCtxSynchronize_v2 -> their base call."""
    return SUFFIX.sub("", name)


def read_process(directory):
    """Counts of one process's reports (summed if it left several), and
    the number of reports."""
    counts = {}
    files = sorted(glob.glob(os.path.join(directory, "census-*.txt")))
    for path in files:
        with open(path) as f:
            for line in f:
                line = line.rstrip("\n")
                if not line:
                    continue
                if line.startswith("#"):
                    key, _, value = line[1:].partition(" ")
                    if key in ("copies", "copies_frame_sized", "copies_unsized", "copy_bytes"):
                        counts["#" + key] = counts.get("#" + key, 0) + int(value)
                    continue
                name, _, value = line.rpartition(" ")
                counts[name] = counts.get(name, 0) + int(value)
    return counts, len(files)


def per_frame(small, large, frames):
    names = set(small) | set(large)
    return {n: (large.get(n, 0) - small.get(n, 0)) / frames for n in names}


def fmt(value):
    return f"{value:.2f}"


def main():
    raw, frames, paths_tsv, table_md = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    plugin_limit = float(os.environ.get("CENSUS_MAX_CALLS", "10"))
    python_limit = float(os.environ.get("CENSUS_MAX_CALLS_PYTHON", "60"))
    slack = int(os.environ.get("CENSUS_SLACK", "2"))
    rows, failures = [], []
    # Asserted processes whose counts were measured and checked: a census
    # that checked none (CENSUS_ONLY matching no asserted path, every run
    # failed) must not pass.
    checked = 0
    with open(paths_tsv) as f:
        for line in f:
            if not line.strip():
                continue
            name, asserted, label, note, processes, status = line.rstrip("\n").split("\t")
            asserted = asserted == "1"
            for process in processes.split(","):
                cells = [label, process]
                if status != "ok" and asserted:
                    failures.append(f"{name} {process}: {status}")
                small, n_small = read_process(os.path.join(raw, name, str(frames), process))
                large, n_large = read_process(os.path.join(raw, name, str(2 * frames), process))
                if not n_small or not n_large:
                    why = status if status != "ok" else \
                        "no census report: no CUDA driver call, or see the run's log"
                    rows.append(cells + ["-"] * 5 + [why])
                    if asserted and status == "ok":
                        failures.append(f"{name} {process}: {why}")
                    continue
                diff = per_frame(small, large, frames)
                calls = {n: v for n, v in diff.items() if not n.startswith("#")}
                total = sum(calls.values())
                syncs = sum(v for n, v in calls.items() if base_name(n) in SYNCS)
                queries = sum(v for n, v in calls.items() if base_name(n) in QUERIES)
                sized = diff.get("#copies_frame_sized", 0.0)
                unsized = diff.get("#copies_unsized", 0.0)
                copies = sized + unsized
                top = sorted(((v, n) for n, v in calls.items() if v > 0.005), reverse=True)[:5]
                top_cell = ", ".join(f"{n} {fmt(v)}" for v, n in top) or "-"
                copies_cell = fmt(copies) + (f" ({fmt(unsized)} of unknown size)" if unsized else "")
                check = f"expected: {note}" if not asserted else "pass"
                # A Python consumer's process counts PyTorch's calls too
                # (cuCtxGetDevice and cuDevicePrimaryCtxGetState per op).
                limit = python_limit if "python" in name else plugin_limit
                if asserted:
                    checked += 1
                    problems = []
                    # The checks compare counts, not rounded figures.
                    if syncs * frames > slack:
                        problems.append(f"{syncs * frames:.0f} host syncs over {frames} frames")
                    if copies * frames > slack:
                        problems.append(f"{copies * frames:.0f} frame-sized copies over {frames} frames")
                    # One non-blocking query a frame is the consumer asking
                    # whether its reads are done (then its release needs no
                    # GPU work); a polling loop makes more, growing with load.
                    if queries * frames > frames + slack:
                        problems.append(f"{fmt(queries)} queries a frame (a polling loop?)")
                    if total > limit:
                        problems.append(f"{fmt(total)} driver calls a frame, over the ceiling of {limit:g}")
                    if problems:
                        check = "FAIL: " + "; ".join(problems)
                        failures.extend(f"{name} {process}: {p}" for p in problems)
                if status != "ok":
                    check += f"; {status}"
                if n_small > 1 or n_large > 1:
                    check += f" ({n_small}/{n_large} reports summed)"
                rows.append(cells + [fmt(total), fmt(syncs), fmt(queries), copies_cell, top_cell, check])
    header = ["path", "process", "driver calls/frame", "host syncs/frame", "queries/frame",
              "frame-sized copies/frame", "top 5 calls per frame", "check"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    table = "\n".join(lines) + "\n"
    with open(table_md, "w") as f:
        f.write(table)
    sys.stdout.write(table)
    if not checked:
        failures.append("no asserted path was measured: nothing was checked"
                        + (f" (CENSUS_ONLY={os.environ['CENSUS_ONLY']!r})" if os.environ.get("CENSUS_ONLY") else ""))
    for failure in failures:
        print(f"census FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
