#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""Reads the frames of a cudaipc channel from Python (PyGObject).

Runs ``rscudaipcsrc ! appsink`` and gets at each frame:

- CUDA memory (cuda transport): the device pointer, pitch, size and CUDA
  device from the ``CudaIpcMeta`` custom meta that rscudaipcsrc puts on the
  buffers that wrap the producer's memory (``buffer.get_custom_meta("CudaIpcMeta").get_structure()``,
  GStreamer 1.20+; checked with 1.22's introspection data). Hand the pointer
  to CuPy, PyTorch or Numba to work on the frame without a copy. Mapping the
  buffer for reading downloads it: done here for the checksum, skipped with
  ``--pointers-only``.
- system memory (host transport, or ``--system-memory``): the bytes, through
  a readable map.

The plugin is found through GST_PLUGIN_PATH (the folder holding
libgstcudaipc.so, e.g. target/release)::

    GST_PLUGIN_PATH=target/release python3 examples/python/reader.py --channel demo
    cargo run --example publisher -- --channel demo --wait-consumers 1

Debian's python3-gi and gir1.2-gstreamer-1.0 / gir1.2-gst-plugins-base-1.0
provide the modules (a Python built elsewhere, e.g. by pyenv, may not see
them: run /usr/bin/python3 then).

It prints the same lines as the Rust ``reader`` example (``frame=N pts=...
memory=... sha1=...``, then ``summary frames=... missing=... checksum=...``):
the checksum is the SHA-1 of the frames' SHA-1s, equal to the publisher's
when every frame arrived intact. Exit status 1 if the pipeline fails.
"""

import argparse
import hashlib
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstApp", "1.0")
from gi.repository import Gst, GstApp  # noqa: E402

CUDA_FEATURE = "memory:CUDAMemory"
META_NAME = "CudaIpcMeta"


def cuda_meta(buffer):
    """The CudaIpcMeta of a buffer as a dict, or None.

    ``get_custom_meta`` gives a Gst.CustomMeta; its structure holds
    device-ptr (guint64), pitch (gint), size (guint64) and device-id (gint).
    The structure is a copy owned by Python: read it, do not expect writes
    to reach the buffer.
    """
    meta = buffer.get_custom_meta(META_NAME)
    if meta is None:
        return None
    structure = meta.get_structure()
    return {
        name: structure.get_value(name)
        for name in ("device-ptr", "pitch", "size", "device-id")
    }


def format_time(t):
    """A GstClockTime as h:mm:ss.nnnnnnnnn (what GST_TIME_FORMAT prints)."""
    if t == Gst.CLOCK_TIME_NONE:
        return "--:--:--.---------"
    seconds, ns = divmod(t, Gst.SECOND)
    return f"{seconds // 3600}:{seconds // 60 % 60:02}:{seconds % 60:02}.{ns:09}"


def plugin_or_exit():
    """Loads the plugin (registering its meta) or explains what is missing."""
    factory = Gst.ElementFactory.find("rscudaipcsrc")
    if factory is None or factory.load() is None:
        sys.exit(
            "rscudaipcsrc not found: point GST_PLUGIN_PATH at the folder "
            "holding libgstcudaipc.so (e.g. target/release)"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channel", default="demo")
    parser.add_argument("--timeout-ms", type=int, default=10000,
                        help="how long to wait for a producer")
    parser.add_argument("--system-memory", action="store_true",
                        help="ask for system memory (downloads CUDA frames)")
    parser.add_argument("--pointers-only", action="store_true",
                        help="leave CUDA frames on the GPU (no checksum)")
    parser.add_argument("--quiet", action="store_true",
                        help="no line per frame")
    args = parser.parse_args()

    Gst.init(None)
    plugin_or_exit()
    caps = " ! video/x-raw" if args.system_memory else ""
    pipeline = Gst.parse_launch(
        f"rscudaipcsrc name=src channel={args.channel} "
        f"connect-timeout={args.timeout_ms}{caps} "
        "! appsink name=sink sync=false max-buffers=2"
    )
    sink = pipeline.get_by_name("sink")
    bus = pipeline.get_bus()
    pipeline.set_state(Gst.State.PLAYING)

    frames = hashed = missing = 0
    first = following = None
    checksum = hashlib.sha1()
    error = None
    while True:
        sample = sink.try_pull_sample(100 * Gst.MSECOND)
        if sample is None:
            # A failing source posts its error, then sends EOS.
            msg = bus.pop_filtered(Gst.MessageType.ERROR)
            if msg is not None:
                err, debug = msg.parse_error()
                error = f"{err.message} ({debug})"
                break
            if sink.is_eos():
                break
            continue

        buffer = sample.get_buffer()
        frames += 1
        line = f"pts={format_time(buffer.pts)}"
        features = sample.get_caps().get_features(0)
        if features is not None and features.contains(CUDA_FEATURE):
            meta = cuda_meta(buffer)
            if meta is not None:
                line += (f" memory=cuda device-ptr={meta['device-ptr']:#x}"
                         f" size={meta['size']} device={meta['device-id']}"
                         f" pitch={meta['pitch']}")
            else:
                # A frame the source copied out of its slot (when downstream
                # holds many buffers; its stats count them as `copied`)
                # carries no CudaIpcMeta.
                line += " memory=cuda"
            if args.pointers_only:
                if not args.quiet:
                    print(line, flush=True)
                continue
        else:
            line += f" memory=system size={buffer.get_size()}"

        ok, info = buffer.map(Gst.MapFlags.READ)
        if not ok:
            error = "cannot map a frame for reading"
            break
        try:
            data = info.data
            sha1 = hashlib.sha1(data).hexdigest()
            number = int.from_bytes(data[:4], "little") if len(data) >= 4 else None
        finally:
            buffer.unmap(info)
        checksum.update(sha1.encode())
        hashed += 1
        if number is not None:
            if following is not None and number > following:
                missing += number - following
            if first is None:
                first = number
            following = number + 1
            line = f"frame={number} {line}"
        if not args.quiet:
            print(f"{line} sha1={sha1}", flush=True)

    pipeline.set_state(Gst.State.NULL)
    if error is not None:
        print(f"reader.py: {error}", file=sys.stderr)
        return 1
    print(f"summary frames={frames} first={first if first is not None else 'none'}"
          f" missing={missing}"
          f" checksum={checksum.hexdigest() if hashed == frames else 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
