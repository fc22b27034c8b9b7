#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""The Python consumer of scripts/gpu-host/census.sh: attaches to a channel
with the cudaipc package, takes every frame, uses it on the GPU without a
host synchronisation per frame and releases it; prints the frames it got.

Per frame: ``torch.from_dlpack(frame)`` on a stream of its own (the frame's
``__dlpack__(stream=...)`` makes that stream wait on the GPU for the
producer's writes), a small sum of the frame's first row added to a total
kept on the GPU, ``frame.release()`` (ordered after that stream's work),
the tensor dropped. CuPy stands in where PyTorch does not import
(``cupy.from_dlpack``, same steps). One synchronisation at the end reads the
total.

    PYTHONPATH=.gpu-host126/python python3 scripts/gpu-host/census/python_consumer.py \
        --channel cam0 [--ipc-mode legacy|fd] [--expect N]
"""

import argparse
import sys


def with_torch(subscriber):
    import torch

    stream = torch.cuda.Stream()
    frames = 0
    with torch.cuda.stream(stream):
        total = torch.zeros((), dtype=torch.int64, device="cuda")
        for frame in subscriber:
            pixels = torch.from_dlpack(frame)  # on `stream`, no copy
            total += pixels[0, :64].sum()
            frame.release()  # the slot goes back after `stream`'s work...
            del pixels  # ...once the export is gone too
            frames += 1
    stream.synchronize()
    return frames, int(total)


def with_cupy(subscriber):
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    frames = 0
    with stream:
        total = cupy.zeros((), dtype=cupy.int64)
        for frame in subscriber:
            pixels = cupy.from_dlpack(frame)  # on `stream`, no copy
            total += pixels[0, :64].sum(dtype=cupy.int64)
            frame.release()
            del pixels
            frames += 1
    stream.synchronize()
    return frames, int(total)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--channel", required=True)
    parser.add_argument("--ipc-mode", choices=("legacy", "fd"), default=None)
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for the producer and for each frame")
    parser.add_argument("--expect", type=int, default=None,
                        help="fail unless exactly this many frames came")
    parser.add_argument("--library", choices=("auto", "torch", "cupy"), default="auto")
    args = parser.parse_args()

    try:
        import cudaipc
    except ImportError as e:
        print(f"python consumer: {e} (PYTHONPATH=.gpu-host126/python: scripts/gpu-host/stage.sh --gst126 "
              "unpacks the package there)", file=sys.stderr)
        return 2
    use = with_torch
    if args.library == "cupy":
        use = with_cupy
    elif args.library == "auto":
        try:
            import torch

            if not torch.cuda.is_available():
                raise ImportError("torch sees no CUDA device")
        except ImportError:
            use = with_cupy
    with cudaipc.Subscriber(args.channel, timeout=args.timeout, frames="every",
                            ipc_mode=args.ipc_mode) as subscriber:
        frames, total = use(subscriber)
    library = "torch" if use is with_torch else "cupy"
    print(f"python consumer ({library}): {frames} frames, sum {total}")
    if args.expect is not None and frames != args.expect:
        print(f"python consumer: expected {args.expect} frames, got {frames}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
