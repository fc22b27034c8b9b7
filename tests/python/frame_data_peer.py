# SPDX-License-Identifier: MPL-2.0
"""The other process of test_frame_data.py: a producer of frames that carry
data, either a ``cudaipc.Publisher`` (``publish``) or a GStreamer
application written with PyGObject, ``appsrc ! rscudaipcsink``, that puts
each frame's data on its buffer as a ``CudaIpcFrameData`` meta (``appsrc``).
Frame n's pixels are (i + 3n) mod 256 and its data is ``expected(kind, n)``,
which the tests import to check what arrived.

    python3 frame_data_peer.py publish|appsrc CHANNEL FRAMES dicts|mixed [host|cuda]

On the cuda transport (publish only) the frames are host arrays, uploaded.
"""

import sys

import numpy as np

WIDTH, HEIGHT = 64, 48


def boxes(n):
    """Frame n's detections, as a model would publish them: [x, y, w, h,
    score] per box, a varying number of boxes, floats and a nested list."""
    return {
        "frame": n,
        "model": "stand-in",
        "boxes": [[4 * k + n, 3 * k, 16, 12, round(0.5 + 0.01 * k, 2)] for k in range(n % 5 + 1)],
    }


def expected(kind, n):
    """What frame n carries: a dict of boxes each frame ("dicts"), or by
    turns a dict, bytes and nothing ("mixed")."""
    if kind == "dicts" or n % 3 == 0:
        return boxes(n)
    if n % 3 == 1:
        return bytes([n, 0, 255, n ^ 0x5A]) * (n + 1)
    return None


def pixels(n):
    return ((np.arange(HEIGHT * WIDTH * 3) + 3 * n) % 256).astype(np.uint8).reshape(HEIGHT, WIDTH, 3)


def publish(channel, frames, kind, transport="host"):
    import cudaipc

    with cudaipc.Publisher(channel, "RGB", WIDTH, HEIGHT, transport=transport,
                           wait_for_consumers=1) as publisher:
        for n in range(frames):
            assert publisher.publish(pixels(n), pts=n * 33_333_333, data=expected(kind, n))


def appsrc(channel, frames, kind, transport="host"):
    assert transport == "host"
    import cudaipc
    import gi

    gi.require_version("Gst", "1.0")
    from gi.repository import Gst

    Gst.init(None)
    pipeline = Gst.parse_launch(
        f"appsrc name=src format=time caps=video/x-raw,format=RGB,width={WIDTH},height={HEIGHT},"
        f"framerate=30/1 ! rscudaipcsink channel={channel} transport=host wait-for-connection=1")
    source = pipeline.get_by_name("src")
    pipeline.set_state(Gst.State.PLAYING)
    for n in range(frames):
        buffer = Gst.Buffer.new_wrapped(pixels(n).tobytes())
        buffer.pts = n * 33_333_333
        buffer.duration = 33_333_333
        data = expected(kind, n)
        if data is not None:
            # The plugin (loaded with the pipeline) registered the meta.
            cudaipc.set_gst_buffer_data(buffer, data)
        assert source.emit("push-buffer", buffer) == Gst.FlowReturn.OK
    source.emit("end-of-stream")
    message = pipeline.get_bus().timed_pop_filtered(
        60 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR)
    pipeline.set_state(Gst.State.NULL)
    assert message is not None, "no end of stream within 60 s"
    assert message.type == Gst.MessageType.EOS, message.parse_error()


if __name__ == "__main__":
    role, channel, frames, kind, *transport = sys.argv[1:]
    {"publish": publish, "appsrc": appsrc}[role](channel, int(frames), kind, *transport)
    print(f"{role}: {frames} frames with {kind} data on {channel}")
