#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""An inference process between a camera and a recorder: reads each frame
of one channel, finds the bright object in it (a stand-in for a model),
and publishes the frame with its detections on another channel.

    gst-launch-1.0 -e videotestsrc pattern=ball ! video/x-raw,format=RGB,width=640,height=360 ! rscudaipcsink channel=cam transport=host
    python3 examples/python/detector.py --input cam --output cam-boxes
    python3 examples/python/cudaipc_read.py --channel cam-boxes --data

Each frame of the output carries ``{"frame": N, "boxes": [[x, y, w, h,
score], ...]}``: ``frame.data`` for a cudaipc.Subscriber, the
``CudaIpcFrameData`` meta after ``rscudaipcsrc`` (``cudaipc.gst_buffer_data``
in Python, ``docs/metas.md``), ``cudaipc_frame_get_data`` in C. Frames on the
cuda transport need PyTorch with CUDA and stay on the GPU. Exit status 1
with the error on stderr if a channel cannot be read or published.
"""

import argparse
import sys

import cudaipc


def bright_box(image, threshold=200):
    """[x, y, w, h, score] around the pixels brighter than `threshold` in
    every channel of an RGB image (NumPy or PyTorch), or None."""
    mask = (image >= threshold).all(-1)
    # NumPy's nonzero gives a tuple of index arrays, PyTorch's an N x 1 tensor.
    rows, cols = mask.any(1).nonzero(), mask.any(0).nonzero()
    rows = rows[0] if isinstance(rows, tuple) else rows.flatten()
    cols = cols[0] if isinstance(cols, tuple) else cols.flatten()
    if len(rows) == 0:
        return None
    y, x = int(rows[0]), int(cols[0])
    h, w = int(rows[-1]) - y + 1, int(cols[-1]) - x + 1
    score = float(mask[y:y + h, x:x + w].sum()) / (w * h)
    return [x, y, w, h, round(score, 3)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", default="cam")
    parser.add_argument("--output", default="cam-boxes")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for the camera and for each frame")
    parser.add_argument("--wait-consumers", type=int, default=0,
                        help="publish only once this many consumers (a recorder) attached")
    args = parser.parse_args()
    publisher = None
    try:
        # Every frame: the camera waits for the detector instead of skipping.
        with cudaipc.Subscriber(args.input, timeout=args.timeout, frames="every") as subscriber:
            for number, frame in enumerate(subscriber):
                with frame:
                    if frame.format != "RGB":
                        sys.exit(f"detector.py: the camera sends {frame.format}, this takes RGB")
                    if frame.device == "cpu":
                        import numpy as np
                        image = np.from_dlpack(frame)
                    else:
                        import torch
                        image = torch.from_dlpack(frame)
                    if publisher is None:
                        transport = "host" if frame.device == "cpu" else "cuda"
                        publisher = cudaipc.Publisher(args.output, "RGB", frame.width,
                                                      frame.height, transport=transport,
                                                      wait_for_consumers=args.wait_consumers)
                    box = bright_box(image)
                    publisher.publish(image, pts=frame.pts,
                                      data={"frame": number, "boxes": [box] if box else []})
        if publisher is not None:
            publisher.eos()
    except cudaipc.Error as e:
        print(f"detector.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        if publisher is not None:
            publisher.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
