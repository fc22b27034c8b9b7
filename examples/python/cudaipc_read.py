#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""Reads the frames of a cudaipc channel with the cudaipc package (no
GStreamer): each frame as a NumPy array through DLPack, without a copy on
the host transport.

    python3 examples/python/cudaipc_read.py --channel demo
    gst-launch-1.0 -e videotestsrc num-buffers=100 ! video/x-raw,format=RGB,width=640,height=480 ! rscudaipcsink channel=demo transport=host

Prints ``frame seq=N pts=NS sha1=...`` per frame (the SHA-1 of its planes'
bytes, which ``checksumsink`` prints too for frames without padding), then
``summary frames=N``; with ``--data`` each line ends with the frame's data
(``data={...}``, the dict a producer published with it). Frames on the cuda transport are read with CuPy or
PyTorch where one is installed (else only their addresses are printed).
Exit status 1 with the error on stderr if the channel cannot be read.
"""

import argparse
import hashlib
import json
import sys

import cudaipc
import numpy as np


def gpu_to_numpy():
    """A function giving a host copy of a CUDA DLPack object, or None."""
    try:
        import cupy

        return lambda plane: cupy.asnumpy(cupy.from_dlpack(plane))
    except ImportError:
        pass
    try:
        import torch

        return lambda plane: torch.from_dlpack(plane).cpu().numpy()
    except ImportError:
        return None


def data_text(frame):
    """The frame's data as the end of its line: the dict as compact JSON,
    bytes as hex, nothing for a frame without data."""
    data = frame.data
    if isinstance(data, dict):
        return " data=" + json.dumps(data, separators=(",", ":"))
    return "" if data is None else f" bytes={data.hex()}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channel", default="demo")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for the producer and for each frame")
    parser.add_argument("--frames", choices=["every", "latest"], default="every")
    parser.add_argument("--ipc-mode", choices=["fd", "legacy"], default=None)
    parser.add_argument("--allowed-producers", type=int, nargs="*", default=[],
                        help="uids trusted as the channel's producer")
    parser.add_argument("--quiet", action="store_true", help="no line per frame")
    parser.add_argument("--data", action="store_true",
                        help="print each frame's data too (data=JSON, or bytes=hex)")
    args = parser.parse_args()

    download = None
    frames = 0
    try:
        with cudaipc.Subscriber(args.channel, timeout=args.timeout, frames=args.frames,
                                ipc_mode=args.ipc_mode,
                                allowed_producers=args.allowed_producers) as subscriber:
            for frame in subscriber:
                with frame:
                    frames += 1
                    if frame.device == "cpu":
                        planes = [np.from_dlpack(plane) for plane in frame.planes]
                    else:
                        download = download or gpu_to_numpy()
                        if download is None:
                            if not args.quiet:
                                print(f"frame seq={frame.seq} pts={frame.pts} "
                                      f"device-ptr={frame.address:#x}", flush=True)
                            continue
                        planes = [download(plane) for plane in frame.planes]
                    sha1 = hashlib.sha1()
                    for plane in planes:
                        sha1.update(plane.tobytes())
                    if not args.quiet:
                        print(f"frame seq={frame.seq} pts={frame.pts} "
                              f"sha1={sha1.hexdigest()}{data_text(frame) if args.data else ''}",
                              flush=True)
    except cudaipc.Error as e:
        print(f"cudaipc_read.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"summary frames={frames}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
