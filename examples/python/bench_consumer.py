#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""The Python consumer of the benchmark's rows 15 (examples/bench.rs): takes
every frame of a channel through DLPack and releases it, and prints one
``RESULT measured=N seconds=S cpu_s=C frames=F`` line as the benchmark's
own processes do (the clock starts at the warm-up's last frame).

On the cuda transport each frame goes to CuPy on a stream of its own
(``cupy.from_dlpack``: the stream waits for the frame on the GPU, and the
release is ordered after it); ``--reduce`` adds a tiny reduction (the sum of
the first row) per frame. ``--numpy`` reads host-transport frames with
``np.from_dlpack`` instead (a smoke check without a GPU).

    python3 examples/python/bench_consumer.py --channel bench --warmup 100
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
    add_numpy_option(parser)
    args = parser.parse_args()

    if args.numpy:
        import numpy as np

        take, stream, synchronize = np.from_dlpack, None, lambda: None
        current = contextlib.nullcontext()
    else:
        import cupy

        stream = cupy.cuda.Stream(non_blocking=True)
        take, synchronize, current = cupy.from_dlpack, stream.synchronize, stream
    frames = 0
    started = None
    checksum = 0
    total = None
    reduce, warmup = args.reduce, args.warmup
    # The stream is made current once, not per frame: every frame's work
    # goes on it.
    with cudaipc.Subscriber(args.channel, timeout=args.timeout) as subscriber, current:
        for frame in subscriber:
            pixels = take(frame)
            if reduce:
                total = pixels[0].sum()
                if stream is None:
                    checksum += int(total)
            frame.release()
            del pixels
            frames += 1
            if frames == warmup:
                started = (time.monotonic(), cpu_seconds())
    # The clock stops once the GPU work queued on the stream is done.
    synchronize()
    if args.reduce and stream is not None and frames:
        checksum = int(total)
    end, cpu_end = time.monotonic(), cpu_seconds()
    if started is None:
        print(f"bench_consumer.py: {frames} frames, fewer than the warm-up", file=sys.stderr)
        return 1
    print(f"RESULT measured={frames - args.warmup} seconds={end - started[0]:.6f} "
          f"cpu_s={cpu_end - started[1]:.6f} frames={frames} reduced={checksum}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
