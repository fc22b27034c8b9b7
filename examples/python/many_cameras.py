#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""Reads many cameras' channels in one process and feeds a model one batch
a round: a frame of every camera, stacked into one (cameras, H, W, C) tensor,
as a video-analytics app batches its streams.

    for i in 0 1 2 3; do
      gst-launch-1.0 -e videotestsrc is-live=true pattern=$i ! video/x-raw,format=RGB,width=320,height=240,framerate=30/1 ! rscudaipcsink channel=cam$i &
    done
    python3 examples/python/many_cameras.py cam0 cam1 cam2 cam3

One process for every camera has one CUDA context for all of them: without
MPS a GPU holds about 100 contexts (docs/performance.md, "Streams per
GPU"), so a consumer process per camera stops at about 50 cameras, and this
one does not. Each round takes the newest frame of every camera
(``--frames latest``, the default: a slow model skips frames, it never
holds a camera back), or each camera's next one (``--frames every``: the
producers wait for this consumer, and round N holds every camera's
frame N).

PyTorch takes the frames (``torch.from_dlpack``); without PyTorch, or with
``--backend numpy``, NumPy does on the host transport. Prints ``round N
seq=S0,S1,... mean=M0,M1,...`` per round (the stand-in model: each frame's
mean value), then ``summary rounds=N cameras=C``. The rounds end when a
camera ends its stream (or after ``--rounds``). Exit status 1 with the
error on stderr if a channel cannot be read or the cameras' frames differ
in shape (they cannot be stacked).
"""

import argparse
import contextlib
import sys

import cudaipc
from stand_in_model import backend


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("channels", nargs="+", help="one channel per camera")
    parser.add_argument("--frames", choices=["latest", "every"], default="latest",
                        help="latest: the newest frame of every camera a round; "
                             "every: each camera's next frame, the producers wait")
    parser.add_argument("--rounds", type=int, default=0, help="stop after N rounds (0: at the end)")
    parser.add_argument("--backend", choices=["auto", "torch", "numpy"], default="auto")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for each producer and for each frame")
    args = parser.parse_args()

    rounds = 0
    try:
        with contextlib.ExitStack() as stack_of_subscribers:
            cameras = [stack_of_subscribers.enter_context(
                cudaipc.Subscriber(channel, timeout=args.timeout, frames=args.frames))
                for channel in args.channels]
            from_dlpack, stack, model = backend(args.backend, cameras[0].transport, "many_cameras.py")
            while args.rounds == 0 or rounds < args.rounds:
                batch = []
                try:
                    for camera in cameras:
                        frame = camera.next_frame()
                        if frame is None:  # this camera ended its stream
                            break
                        batch.append(frame)
                    if len(batch) < len(cameras):
                        break
                    # Views of the slots themselves, then one copy: the batch.
                    views = [from_dlpack(frame) for frame in batch]
                    if len({tuple(view.shape) for view in views}) > 1:
                        named = ", ".join(f"{channel} {tuple(view.shape)}"
                                          for channel, view in zip(args.channels, views))
                        print(f"many_cameras.py: the cameras' frames differ in shape and cannot "
                              f"be stacked: {named}", file=sys.stderr)
                        return 1
                    tensor = stack(views)
                    del views
                finally:
                    # The slots go back to the producers (on the GPU, after the stack).
                    for frame in batch:
                        frame.release()
                means = model(tensor)
                print(f"round {rounds} seq={','.join(str(f.seq) for f in batch)} "
                      f"mean={','.join(f'{m:.3f}' for m in means)}", flush=True)
                rounds += 1
    except (cudaipc.Error, BufferError) as e:  # BufferError: a format of several planes
        print(f"many_cameras.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"summary rounds={rounds} cameras={len(args.channels)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
