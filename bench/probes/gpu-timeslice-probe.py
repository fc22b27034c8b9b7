#!/usr/bin/env python3
"""How the GPU takes turns between two processes' CUDA contexts (no MPS).

Two processes each queue spin kernels that read the GPU's global timer;
a kernel also notes the largest jump between two reads (it was switched
out there). From the merged timelines: how long a process keeps the GPU
while both have work (the time slice), and how long the GPU runs neither
at a change of turn (the switch). A third case: one process runs short
bursts and idles between them; how soon after a burst the other resumes.

Needs CuPy and a CUDA device; prints SKIPPED without them.
usage: python3 bench/probes/gpu-timeslice-probe.py
"""
import multiprocessing as mp
import sys
import time

SRC = r'''
extern "C" __global__ void spin(unsigned long long* out, int idx, long long ns) {
    unsigned long long t0, prev, t, jump = 0, jump_at = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    prev = t0;
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - prev > jump) { jump = t - prev; jump_at = prev; }
        prev = t;
    } while (t - t0 < ns + jump);
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        out[4*idx] = t0; out[4*idx+1] = t; out[4*idx+2] = jump_at; out[4*idx+3] = jump;
    }
}
'''


def child(name, kernel_us, count, burst, idle_us, start_at, queue):
    import numpy as np
    import cupy as cp
    spin = cp.RawKernel(SRC, "spin")
    out = cp.zeros(4 * count, dtype=cp.uint64)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        spin((1,), (32,), (out, np.int32(0), np.int64(1000)))
    stream.synchronize()
    while time.time() < start_at:
        pass
    i = 0
    with stream:
        while i < count:
            for _ in range(min(burst, count - i)):
                # One block per SM: the kernel fills the GPU.
                spin((132,), (32,), (out, np.int32(i), np.int64(int(kernel_us * 1000))))
                i += 1
            if idle_us:
                stream.synchronize()
                until = time.perf_counter() + idle_us / 1e6
                while time.perf_counter() < until:
                    pass
    stream.synchronize()
    queue.put((name, out.get().reshape(-1, 4).tolist()))


def intervals(records):
    """Busy intervals of one process: a kernel switched out is two."""
    spans = []
    for t0, t1, jump_at, jump in records:
        if jump > 20_000:
            spans += [(t0, jump_at), (jump_at + jump, t1)]
        else:
            spans.append((t0, t1))
    return spans


def turns(timelines):
    """Merged (owner, start, end) runs, joining an owner's gaps under 20 us."""
    events = sorted((s, e, n) for n, spans in timelines.items() for s, e in spans)
    runs = []
    for s, e, n in events:
        if runs and runs[-1][0] == n and s - runs[-1][2] < 20_000:
            runs[-1][2] = max(runs[-1][2], e)
        else:
            runs.append([n, s, e])
    return runs


def case(title, a, b):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 3
    procs = [ctx.Process(target=child, args=(n, *args, start_at, queue)) for n, args in (("A", a), ("B", b))]
    for p in procs:
        p.start()
    results = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
    runs = turns({n: intervals(r) for n, r in results.items()})
    runs = runs[len(runs) // 5: -max(1, len(runs) // 5)]  # the middle: both busy
    switches = [(b[1] - a[2]) / 1e3 for a, b in zip(runs, runs[1:]) if a[0] != b[0]]
    lengths = {n: sorted((r[2] - r[1]) / 1e3 for r in runs if r[0] == n) for n in "AB"}
    med = lambda v: v[len(v) // 2] if v else float("nan")
    print(f"{title}: turns A {med(lengths['A']):.0f} us, B {med(lengths['B']):.0f} us (medians); "
          f"change of turn: median {med(sorted(switches)):.0f} us over {len(switches)} changes")


def main():
    try:
        import cupy as cp
        cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # no CuPy, no driver, no device
        print(f"SKIPPED: no CUDA device ({e})")
        return 1 if __import__("os").environ.get("CUDAIPC_REQUIRE_GPU") == "1" else 0
    # (kernel µs, kernels, burst, idle µs after each burst)
    case("both always busy", (10, 4000, 4000, 0), (10, 4000, 4000, 0))
    case("A: 100 us bursts, 400 us idle; B busy", (10, 400, 10, 400), (10, 4000, 4000, 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
