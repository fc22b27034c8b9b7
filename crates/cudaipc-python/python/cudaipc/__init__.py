# SPDX-License-Identifier: MPL-2.0
"""Frames of cudaipc channels in Python, without GStreamer.

Read frames that ``rscudaipcsink`` (or a ``cudaipc.Publisher``) publishes::

    import cudaipc, numpy as np
    with cudaipc.Subscriber("demo") as subscriber:
        for frame in subscriber:
            with frame:
                pixels = np.from_dlpack(frame)   # or torch.from_dlpack, cupy.from_dlpack

Publish DLPack arrays that ``rscudaipcsrc`` (or a ``cudaipc.Subscriber``)
reads::

    with cudaipc.Publisher("out", "RGB", 1280, 720) as publisher:
        publisher.publish(array, pts=0)
        publisher.publish(array, pts=33_333_333, data={"boxes": [[10, 20, 64, 48, 0.9]]})

Data published with a frame (bytes, or a dict sent as JSON) is ``frame.data``
on the other side, and a ``CudaIpcFrameData`` meta after ``rscudaipcsrc``.

In a GStreamer application (PyGObject), a buffer of ``rscudaipcsrc ! appsink``
becomes a frame the same way, without a copy::

    frame = cudaipc.from_gst_sample(appsink.emit("pull-sample"))

docs/python.md in the repository has the rules (ordering on the GPU, when
slots go back, errors).
"""

from ._errors import (
    ChannelInUseError,
    ChannelPermissionError,
    ClosedError,
    HoldError,
    DeviceError,
    Error,
    InvalidArgumentError,
    NoProducerError,
    ProducerGoneError,
    UnsupportedFormatError,
    WaitTimeoutError,
)
from ._gst import from_gst_buffer, from_gst_sample, gst_buffer_data, set_gst_buffer_data
from ._native import FORMATS, Frame, FramePlane, Publisher, Subscriber, __version__

__all__ = [
    "FORMATS",
    "ChannelInUseError",
    "ChannelPermissionError",
    "ClosedError",
    "HoldError",
    "DeviceError",
    "Error",
    "Frame",
    "FramePlane",
    "InvalidArgumentError",
    "NoProducerError",
    "ProducerGoneError",
    "Publisher",
    "Subscriber",
    "UnsupportedFormatError",
    "WaitTimeoutError",
    "__version__",
    "from_gst_buffer",
    "from_gst_sample",
    "gst_buffer_data",
    "set_gst_buffer_data",
]
