# SPDX-License-Identifier: MPL-2.0
"""Arguments outside what a channel can take raise InvalidArgumentError (a
ValueError) naming the argument and its range, before anything is made
(never an OverflowError, nor a Rust panic); a timeout too long for a
deadline waits as long as it takes; and the end of a stream, asked for
again, is None at once until a new stream starts (host transport, one
process)."""

import os
import time
from pathlib import Path

import cudaipc
import numpy as np
import pytest

from conftest import unique_channel

WIDTH, HEIGHT = 8, 8


def control_block(channel):
    return Path(os.environ.get("CUDAIPC_SHM_DIR", "/dev/shm")) / f"cudaipc-{channel}"


def publisher(channel, **options):
    return cudaipc.Publisher(channel, "GRAY8", WIDTH, HEIGHT, transport="host", **options)


@pytest.mark.parametrize("permissions,shown", [
    (0o4777, "0o4777"),  # setuid, world-writable
    (0xFFFFFFFF, "0o37777777777"),  # every bit
    (777, "0o1411"),  # decimal 777: sticky, and not what was meant
    (-1, "-0o1"),
])
def test_permissions_outside_0_to_0o777_are_refused_naming_them(permissions, shown):
    channel = unique_channel("mode")
    with pytest.raises(cudaipc.InvalidArgumentError) as raised:
        publisher(channel, permissions=permissions)
    assert isinstance(raised.value, ValueError)
    message = str(raised.value)
    assert message.startswith(f"permissions={shown}:") and "0 to 0o777" in message, message
    assert not control_block(channel).exists(), "no file was made with that mode"


def test_the_widest_permissions_are_taken():
    with publisher(unique_channel("mode"), permissions=0o777):
        pass


@pytest.mark.parametrize("argument,value,allowed", [
    ("slots", 65, "0 to 64"),
    ("slots", 1000, "0 to 64"),
    ("slots", -1, "0 to 64"),
    ("wait_for_consumers", 33, "0 to 32"),
    ("wait_for_consumers", -5, "0 to 32"),
])
def test_slots_and_consumers_beyond_a_channels_are_refused_naming_the_range(argument, value, allowed):
    with pytest.raises(cudaipc.InvalidArgumentError) as raised:
        publisher(unique_channel("range"), **{argument: value})
    message = str(raised.value)
    assert message.startswith(f"{argument}={value}:") and allowed in message, message


def test_a_frame_larger_than_a_ring_can_hold_is_refused_naming_its_size():
    # Width and height within caps' limits; their frame is 2^62 bytes.
    side = 2**31 - 1
    with pytest.raises(cudaipc.InvalidArgumentError) as raised:
        cudaipc.Publisher(unique_channel("huge"), "GRAY8", side, side, transport="host")
    message = str(raised.value)
    assert "frame_size is" in message and "above the most a frame may have" in message, message


@pytest.mark.parametrize("hold", [63, 100, 2**40, -1])
def test_a_hold_no_ring_can_fit_is_refused_at_once_naming_the_limit(hold):
    # No producer is needed: the subscriber refuses it before it waits.
    started = time.monotonic()
    with pytest.raises(cudaipc.InvalidArgumentError) as raised:
        cudaipc.Subscriber(unique_channel("hold"), hold=hold, timeout=5)
    assert time.monotonic() - started < 2, "it did not wait for a producer"
    message = str(raised.value)
    assert message.startswith(f"hold={hold}:"), message
    assert "0 to 62, or None (not declared)" in message and "at most 64 slots" in message, message


def test_a_timeout_too_long_for_a_deadline_waits_as_long_as_it_takes():
    channel = unique_channel("forever")
    with publisher(channel) as producer, cudaipc.Subscriber(channel, timeout=1e19) as subscriber:
        producer.publish(np.full((HEIGHT, WIDTH), 9, np.uint8))
        with subscriber.next_frame(timeout=1e19) as frame:
            assert (np.from_dlpack(frame) == 9).all()


def test_after_the_end_of_stream_every_call_is_none_at_once_until_a_new_stream():
    channel = unique_channel("eos")
    with publisher(channel) as producer, cudaipc.Subscriber(channel) as subscriber:

        def next_value(timeout=5.0):
            frame = subscriber.next_frame(timeout=timeout)
            if frame is None:
                return None
            with frame:
                return int(np.from_dlpack(frame)[0, 0])

        producer.publish(np.full((HEIGHT, WIDTH), 1, np.uint8))
        producer.eos()
        assert [frame.copy().nbytes for frame in subscriber] == [WIDTH * HEIGHT]
        for timeout in (5.0, None, 0):
            started = time.monotonic()
            assert next_value(timeout) is None, timeout
            assert time.monotonic() - started < 1, "it did not wait"
        assert list(subscriber) == [], "iterating again ends at once"
        # A new stream: its frames, then its end.
        producer.publish(np.full((HEIGHT, WIDTH), 2, np.uint8))
        assert next_value() == 2
        producer.eos()
        assert next_value() is None
