#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""Feeds a model batches of frames of a cudaipc channel, as a clip model or
a batched detector takes them: B frames held without a copy, stacked into
one tensor, given back, then the model runs on the batch.

    gst-launch-1.0 -e videotestsrc is-live=true ! video/x-raw,format=RGB,width=320,height=240,framerate=30/1 ! rscudaipcsink channel=demo slots=10
    python3 examples/python/batching_consumer.py --channel demo --batch 8

The subscriber declares the frames it keeps while it asks for the next one:
``hold=B-1``. The producer's ring needs ``B+1`` slots for that (``slots=``
on rscudaipcsink, ``Publisher(..., slots=)``); a smaller one raises
cudaipc.HoldError at the first frame, naming both numbers. On a live
channel a batcher that falls behind misses frames (one RuntimeWarning,
then ``subscriber.frames_missed``); ``--frames every`` makes the producer
wait for it instead.

PyTorch takes the frames (``torch.from_dlpack``, on the GPU on the cuda
transport); without PyTorch, or with ``--backend numpy``, NumPy does on the
host transport. Prints ``batch N seq=FIRST..LAST mean=M,...`` per batch
(the stand-in model: each frame's mean value), then ``summary batches=N
frames=F missed=M``. Exit status 1 with the error on stderr if the channel
cannot be read.
"""

import argparse
import signal
import sys

# SIGTERM ends it quietly, the subscriber closed on the way out (as
# recorder_and_viewer.sh stops it when another process of its set failed).
signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))

import cudaipc  # noqa: E402 (after the SIGTERM handler: it takes a moment)
from stand_in_model import backend


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channel", default="demo")
    parser.add_argument("--batch", type=int, default=8, help="frames per batch (B)")
    parser.add_argument("--frames", choices=["auto", "every"], default="auto",
                        help="every: the producer waits for this consumer (no frame missed)")
    parser.add_argument("--backend", choices=["auto", "torch", "numpy"], default="auto")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for the producer and for each frame")
    args = parser.parse_args()

    batches = frames = 0
    try:
        with cudaipc.Subscriber(args.channel, timeout=args.timeout, frames=args.frames,
                                hold=args.batch - 1) as subscriber:
            from_dlpack, stack, model = backend(args.backend, subscriber.transport, "batching_consumer.py")
            batch = []
            for frame in subscriber:
                batch.append(frame)
                frames += 1
                if len(batch) < args.batch:
                    continue
                # One copy, into the batch: the views are the slots themselves.
                clip = stack([from_dlpack(held) for held in batch])
                # The slots go back to the producer (on the GPU, after the stack).
                for held in batch:
                    held.release()
                means = model(clip)
                print(f"batch {batches} seq={batch[0].seq}..{batch[-1].seq} "
                      f"mean={','.join(f'{m:.3f}' for m in means)}", flush=True)
                batches += 1
                batch.clear()
            for held in batch:  # an incomplete batch at the end of the stream
                held.release()
            missed = subscriber.frames_missed
    except cudaipc.Error as e:
        print(f"batching_consumer.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C: the subscriber was closed on the way out.
        print(f"batching_consumer.py: stopped after {batches} batches ({frames} frames)", file=sys.stderr)
        return 130
    print(f"summary batches={batches} frames={frames} missed={missed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
