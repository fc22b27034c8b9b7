#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""The Python consumer of the benchmark's rows 15 and 16 (bench/):
takes every frame of a channel through DLPack and releases it, and prints
one ``RESULT measured=N seconds=S cpu_s=C frames=F`` line as the
benchmark's own processes do (the clock starts at the warm-up's last frame).

On the cuda transport each frame goes to CuPy on a stream of its own
(``cupy.from_dlpack``: the stream waits for the frame on the GPU, and the
release is ordered after it); ``--reduce`` adds a tiny reduction (the sum of
the first row) per frame. ``--numpy`` reads host-transport frames with
``np.from_dlpack`` instead (a smoke check without a GPU).

``--batch B`` (rows 16) keeps B frames, each with its DLPack tensor (no
copy), declared as ``hold=B-1``, then does the per-frame work on the batch
and releases all B; the producer's ring needs B+1 slots.

    python3 examples/python/bench_consumer.py --channel bench --warmup 100
    python3 examples/python/bench_consumer.py --channel bench --batch 8
"""

import contextlib
import sys
import time

import cudaipc
from bench_common import add_numpy_option, argument_parser, cpu_seconds


def main():
    parser = argument_parser(__doc__)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--reduce", action="store_true", help="sum the first row of each frame")
    parser.add_argument("--batch", type=int, default=1,
                        help="frames kept before the work on them and their release (hold=B-1)")
    add_numpy_option(parser)
    args = parser.parse_args()
    if args.batch < 1:
        parser.error("--batch must be 1 or more")

    if args.numpy:
        import numpy as np

        take, stream, synchronize = np.from_dlpack, None, lambda: None
        current = contextlib.nullcontext()
    else:
        import cupy

        stream = cupy.cuda.Stream(non_blocking=True)
        take, synchronize, current = cupy.from_dlpack, stream.synchronize, stream
    work = Work(args.reduce, on_host=stream is None)
    hold = args.batch - 1 or None
    # The stream is made current once, not per frame: every frame's work
    # goes on it.
    with cudaipc.Subscriber(args.channel, timeout=args.timeout, hold=hold) as subscriber, current:
        if args.batch == 1:
            frames, started = every_frame(subscriber, take, work, args.warmup)
        else:
            frames, started = in_batches(subscriber, take, work, args.warmup, args.batch)
    # The clock stops once the GPU work queued on the stream is done.
    synchronize()
    if args.reduce and stream is not None and frames:
        work.checksum = int(work.total)
    end, cpu_end = time.monotonic(), cpu_seconds()
    if started is None:
        print(f"bench_consumer.py: {frames} frames, fewer than the warm-up", file=sys.stderr)
        return 1
    print(f"RESULT measured={frames - args.warmup} seconds={end - started[0]:.6f} "
          f"cpu_s={cpu_end - started[1]:.6f} frames={frames} reduced={work.checksum}")
    return 0


class Work:
    """The per-frame work: with ``--reduce``, the sum of the first row."""

    def __init__(self, reduce, on_host):
        self.reduce, self.on_host = reduce, on_host
        self.total, self.checksum = None, 0

    def on(self, pixels):
        self.total = pixels[0].sum()
        # On the GPU the sum stays queued: only the last one is read.
        if self.on_host:
            self.checksum += int(self.total)


def every_frame(subscriber, take, work, warmup):
    """Each frame taken, worked on and released before the next: the
    frames seen and the clock at the warm-up's last (None if not reached)."""
    frames, started, reduce = 0, None, work.reduce
    for frame in subscriber:
        pixels = take(frame)
        if reduce:
            work.on(pixels)
        frame.release()
        del pixels
        frames += 1
        if frames == warmup:
            started = (time.monotonic(), cpu_seconds())
    return frames, started


def in_batches(subscriber, take, work, warmup, size):
    """As every_frame, `size` frames at a time: each kept with its tensor
    until the batch is complete, then worked on and all released."""
    frames, started, batch = 0, None, []
    for frame in subscriber:
        batch.append((frame, take(frame)))
        frames += 1
        if frames == warmup:
            started = (time.monotonic(), cpu_seconds())
        if len(batch) == size:
            finish(batch, work)
    # The end of the stream may cut the last batch short.
    finish(batch, work)
    return frames, started


def finish(batch, work):
    if work.reduce:
        for _, pixels in batch:
            work.on(pixels)
    for frame, _ in batch:
        frame.release()
    # The tensors go with the list: their slots go back once both are gone.
    batch.clear()


if __name__ == "__main__":
    sys.exit(main())
