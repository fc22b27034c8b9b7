#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""The Python producer of the benchmark's row 15p (bench/):
publishes RGB frames into a channel that ``rscudaipcsrc`` reads, and
prints one ``RESULT seconds=S cpu_s=C frames=F`` line as the benchmark's
own processes do.

On the cuda transport each frame is a CuPy array filled on the GPU (a
counter in every byte) on a stream of its own and published with
``stream=``: the copy into the slot is ordered after the fill, without
host synchronisation. ``--numpy`` publishes NumPy arrays on the host
transport instead (a smoke check without a GPU).

    python3 examples/python/bench_producer.py --channel bench --frames 2000
"""

import sys
import time

import cudaipc
from bench_common import add_numpy_option, argument_parser, cpu_seconds


def main():
    parser = argument_parser(__doc__)
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--width", type=int, default=3840)
    parser.add_argument("--height", type=int, default=2160)
    add_numpy_option(parser)
    args = parser.parse_args()

    shape = (args.height, args.width, 3)
    if args.numpy:
        import numpy as np

        arrays = [np.empty(shape, np.uint8) for _ in range(2)]
        stream, transport = None, "host"
    else:
        import cupy

        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            arrays = [cupy.empty(shape, cupy.uint8) for _ in range(2)]
        transport = "cuda"
    started, cpu_started = time.monotonic(), cpu_seconds()
    with cudaipc.Publisher(args.channel, "RGB", args.width, args.height, transport=transport,
                           wait_for_consumers=1) as publisher:
        for number in range(args.frames):
            # Two arrays in turn: publish() orders its copy after the fill,
            # and the next fill of an array after the copy out of it.
            pixels = arrays[number % 2]
            if stream is not None:
                with stream:
                    pixels.fill(number & 0xFF)
                publisher.publish(pixels, pts=number, stream=stream)
            else:
                pixels.fill(number & 0xFF)
                publisher.publish(pixels, pts=number)
    end = time.monotonic()
    print(f"RESULT seconds={end - started:.6f} cpu_s={cpu_seconds() - cpu_started:.6f} "
          f"frames={args.frames}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
