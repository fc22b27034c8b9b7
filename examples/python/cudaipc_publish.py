#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""Publishes NumPy frames into a cudaipc channel with the cudaipc package,
for ``rscudaipcsrc`` (or a cudaipc.Subscriber) to read.

    gst-launch-1.0 rscudaipcsrc channel=demo ! videoconvert ! autovideosink
    python3 examples/python/cudaipc_publish.py --channel demo --frames 300

Frame N is a gradient moved by N pixels, so that every frame differs.
Prints ``frame N sha1=...`` per frame (the SHA-1 ``checksumsink`` prints
for it on the GStreamer side), then ``summary frames=N``. Exit status 1
with the error on stderr if the channel cannot be published.
"""

import argparse
import hashlib
import sys
import time

import cudaipc
import numpy as np


def planes_of(publisher, number):
    """Frame `number`: one uint8 array per plane, in the shapes publish
    expects (publisher.shapes)."""
    planes = []
    for index, shape in enumerate(publisher.shapes):
        grid = np.indices(shape, dtype=np.uint32).sum(axis=0)
        planes.append(((grid * (index + 1) + number) % 256).astype(np.uint8))
    return planes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channel", default="demo")
    parser.add_argument("--format", default="RGB", choices=list(cudaipc.FORMATS))
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--fps", type=float, default=30.0,
                        help="frames per second (pts; 0: as fast as possible)")
    parser.add_argument("--transport", choices=["auto", "cuda", "host"], default="host")
    parser.add_argument("--ipc-mode", choices=["fd", "legacy"], default="legacy")
    parser.add_argument("--wait-consumers", type=int, default=0,
                        help="consumers to wait for before the first frame")
    parser.add_argument("--slots", type=int, default=0,
                        help="slots in the ring (0: the transport chooses)")
    parser.add_argument("--live", action="store_true",
                        help="frames come at a fixed rate (a camera): consumers keep their own "
                             "pace, and only frames='every' ones make the publisher wait")
    parser.add_argument("--quiet", action="store_true", help="no line per frame")
    args = parser.parse_args()

    try:
        with cudaipc.Publisher(args.channel, args.format, args.width, args.height,
                               transport=args.transport, ipc_mode=args.ipc_mode,
                               slots=args.slots, live=args.live,
                               wait_for_consumers=args.wait_consumers) as publisher:
            period_ns = int(1e9 / args.fps) if args.fps > 0 else 0
            for number in range(args.frames):
                planes = planes_of(publisher, number)
                frame = planes[0] if len(planes) == 1 else tuple(planes)
                publisher.publish(frame, pts=number * period_ns)
                if not args.quiet:
                    sha1 = hashlib.sha1(b"".join(p.tobytes() for p in planes))
                    print(f"frame {number} sha1={sha1.hexdigest()}", flush=True)
                if period_ns:
                    time.sleep(period_ns / 1e9)
    except cudaipc.Error as e:
        print(f"cudaipc_publish.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"summary frames={args.frames}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
