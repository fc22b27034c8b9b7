# SPDX-License-Identifier: MPL-2.0
"""The exceptions of cudaipc: each is a cudaipc.Error and a built-in
exception, so ``except FileNotFoundError`` or ``except TimeoutError`` work
too."""


class Error(Exception):
    """Any failure of cudaipc."""


class NoProducerError(Error, FileNotFoundError):
    """No producer appeared on the channel within the timeout (an unknown
    channel name, or its producer is not running); the message names the
    channels that have one."""


class ProducerGoneError(Error, ConnectionError):
    """The producer closed the channel without an end of stream, or died; a
    new ``Subscriber(channel, timeout=None)`` waits for the next one."""


class ChannelPermissionError(Error, PermissionError):
    """The channel may not be used: its files' permissions, or an owner that
    is neither this user nor one of ``allowed_producers``."""


class WaitTimeoutError(Error, TimeoutError):
    """No frame came within the timeout."""


class ChannelInUseError(Error, FileExistsError):
    """Another live producer owns the channel."""


class UnsupportedFormatError(Error, ValueError):
    """A format cudaipc does not handle."""


class InvalidArgumentError(Error, ValueError):
    """A layout, caps, channel name or frame size that cannot be used."""


class DeviceError(Error, RuntimeError):
    """No usable CUDA device for the cuda transport, or a CUDA failure."""


class ClosedError(Error):
    """The channel was closed."""


class HoldError(Error, RuntimeError):
    """The subscriber holds frames in a way that cannot work: it asked for a
    frame while holding every frame it may hold (waiting would wait on
    itself), or declared a ``hold`` that its producer's ring cannot fit.
    Release frames, keep copies (``copy=True``), or declare ``hold``."""
