#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""Per-frame CPU cost of the Python consumer's steps, on the host transport
(no GPU needed), next to ``rscudaipcsrc ! fakesink`` on the same producer.

Each variant runs against its own ``gst-launch-1.0`` producer
(``videotestsrc ! imagefreeze ! rscudaipcsink transport=host``) and prints
the consumer's CPU microseconds per frame (user + system, after a warm-up)
and its wall microseconds per frame (``--pin``: the producer on CPU 0, the
consumer on CPU 1, steadier than left to the scheduler):

- ``next``: ``for frame in subscriber`` and ``frame.release()``;
- ``capsule``: the same plus ``frame.__dlpack__(max_version=(1, 0))``;
- ``numpy``: the same with ``np.from_dlpack(frame)`` (the array dropped);
- ``gst``: ``rscudaipcsrc ! fakesink`` (its CPU measured over two frame
  counts, so that start-up and tear-down cancel out).

    GST_PLUGIN_PATH=target/release python3 examples/python/profile_consumer.py \
        --frames 20000 --repeat 3 --pin
"""

import argparse
import os
import resource
import subprocess
import sys
import time

import cudaipc

VARIANTS = ("next", "capsule", "numpy", "gst")
# With --pin: `taskset -c 0`, the producer on CPU 0 (the consumers on 1).
PRODUCER_PREFIX = []


def producer(channel, frames):
    return subprocess.Popen(
        PRODUCER_PREFIX + ["gst-launch-1.0", "-q", "videotestsrc", "num-buffers=1", "!",
         "video/x-raw,format=RGB,width=320,height=240,framerate=0/1", "!",
         "imagefreeze", f"num-buffers={frames}", "!", "rscudaipcsink",
         "transport=host", "sync=false", "wait-for-connection=1", f"channel={channel}"])


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def python_consumer(variant, channel, frames, warmup):
    """CPU and wall seconds of the frames after the warm-up."""
    import numpy as np

    step = {
        "next": lambda frame: None,
        "capsule": lambda frame: frame.__dlpack__(max_version=(1, 0)),
        "numpy": np.from_dlpack,
    }[variant]
    count = 0
    with cudaipc.Subscriber(channel, timeout=30.0) as subscriber:
        for frame in subscriber:
            step(frame)
            frame.release()
            count += 1
            if count == warmup:
                cpu, wall = cpu_seconds(), time.perf_counter()
    if count != frames:
        sys.exit(f"{variant}: {count} frames of {frames}")
    return cpu_seconds() - cpu, time.perf_counter() - wall


def gst_consumer(channel, frames):
    """CPU and wall seconds of a whole `rscudaipcsrc ! fakesink` run."""
    wall = time.perf_counter()
    child = subprocess.Popen(
        ["gst-launch-1.0", "-q", "rscudaipcsrc", f"channel={channel}",
         "connect-timeout=30000", "!", "fakesink", "sync=false"])
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        sys.exit(f"gst-launch-1.0 consumer: status {status}")
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - wall


def run(variant, frames, warmup, index):
    channel = f"profile-{variant}-{os.getpid()}-{index}"
    if variant != "gst":
        source = producer(channel, frames)
        try:
            cpu, wall = python_consumer(variant, channel, frames, warmup)
        finally:
            source.wait()
        return cpu / (frames - warmup), wall / (frames - warmup)
    runs = []
    for count in (warmup, frames):
        source = producer(f"{channel}-{count}", count)
        try:
            runs.append(gst_consumer(f"{channel}-{count}", count))
        finally:
            source.wait()
    (cpu_few, wall_few), (cpu_many, wall_many) = runs
    return (cpu_many - cpu_few) / (frames - warmup), (wall_many - wall_few) / (frames - warmup)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20000)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--pin", action="store_true",
                        help="producer on CPU 0, consumer on CPU 1: steadier figures")
    args = parser.parse_args()
    if args.pin:
        PRODUCER_PREFIX[:] = ["taskset", "-c", "0"]
        os.sched_setaffinity(0, {1})
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            parser.error(f"variant {variant!r}: one of {', '.join(VARIANTS)}")
        results = [run(variant, args.frames, args.warmup, i) for i in range(args.repeat)]
        cpu = " ".join(f"{c * 1e6:6.2f}" for c, _ in results)
        wall = " ".join(f"{w * 1e6:6.2f}" for _, w in results)
        print(f"{variant:8} cpu us/frame: {cpu}   wall us/frame: {wall}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
