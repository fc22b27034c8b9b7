# SPDX-License-Identifier: MPL-2.0
"""Closing a Publisher or a Subscriber from another thread than the one
blocked in it (host transport, real threads): the blocked call raises
ClosedError promptly, never "Already borrowed", a hang or a crash; frames
handed out before stay intact."""

import threading
import time

import cudaipc
import numpy as np
import pytest

from conftest import unique_channel

SHAPE = (8, 16)
# How soon a woken call must raise, and how long a call must wait to count
# as blocked.
PROMPT = 1.0
BLOCKED = 0.3


def blocking_pair(tag):
    """A host publisher of two slots that waits when they are full, and an
    every-frame subscriber that reads nothing: it holds the producer
    back."""
    channel = unique_channel(tag)
    publisher = cudaipc.Publisher(channel, "GRAY8", SHAPE[1], SHAPE[0], transport="host",
                                  slots=2, when_full="block")
    subscriber = cudaipc.Subscriber(channel, timeout=5)
    return publisher, subscriber


class Blocked:
    """`call` run in a thread of its own: what it returned or raised, and
    when."""

    def __init__(self, call):
        self.result = self.error = self.at = None
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()
        self.thread.join(BLOCKED)
        assert self.thread.is_alive(), f"the call did not block: {self.result!r} {self.error!r}"

    def _run(self, call):
        try:
            self.result = call()
        except BaseException as error:  # reported to the test
            self.error = error
        self.at = time.monotonic()

    def raised_closed_error_after(self, closed_at):
        self.thread.join(10)
        assert not self.thread.is_alive(), "the call still blocks after the close"
        assert isinstance(self.error, cudaipc.ClosedError), repr(self.error)
        assert isinstance(self.error, cudaipc.Error)
        assert self.at - closed_at < PROMPT, f"raised {self.at - closed_at:.2f} s after the close"


def test_close_from_another_thread_wakes_a_blocked_publish():
    publisher, subscriber = blocking_pair("close-publish")
    for value in range(2):
        assert publisher.publish(np.full(SHAPE, value, np.uint8))
    blocked = Blocked(lambda: publisher.publish(np.full(SHAPE, 2, np.uint8)))
    closed_at = time.monotonic()
    publisher.close()
    blocked.raised_closed_error_after(closed_at)
    assert publisher.closed
    with pytest.raises(cudaipc.ClosedError, match="closed"):
        publisher.publish(np.zeros(SHAPE, np.uint8))
    publisher.close()  # idempotent
    subscriber.close()


def test_leaving_the_with_block_wakes_a_publish_blocked_in_another_thread():
    publisher, subscriber = blocking_pair("close-with")
    with publisher:
        for value in range(2):
            publisher.publish(np.full(SHAPE, value, np.uint8))
        blocked = Blocked(lambda: publisher.publish(np.full(SHAPE, 2, np.uint8)))
        # The subscriber lets go once the publish raised, so that the end of
        # the with block (an eos, then up to 5 s for consumers to take it)
        # is short.
        watcher = threading.Thread(target=lambda: (blocked.thread.join(10), subscriber.close()))
        watcher.start()
        closed_at = time.monotonic()
    blocked.raised_closed_error_after(closed_at)
    watcher.join(10)


def test_close_from_another_thread_wakes_a_blocked_iteration_and_keeps_frames_intact():
    publisher, subscriber = blocking_pair("close-iterate")
    publisher.publish(np.full(SHAPE, 7, np.uint8))
    frames = []

    def iterate():
        for frame in subscriber:
            frames.append(frame)

    blocked = Blocked(iterate)
    assert len(frames) == 1
    closed_at = time.monotonic()
    subscriber.close()
    blocked.raised_closed_error_after(closed_at)
    assert subscriber.closed
    # The frame handed out before holds its slot: intact after the close.
    assert (np.from_dlpack(frames[0]) == 7).all()
    frames[0].release()
    publisher.close()


def test_close_from_another_thread_wakes_a_blocked_next_frame():
    publisher, subscriber = blocking_pair("close-next")
    blocked = Blocked(lambda: subscriber.next_frame(timeout=None))
    closed_at = time.monotonic()
    subscriber.close()
    blocked.raised_closed_error_after(closed_at)
    with pytest.raises(cudaipc.ClosedError, match="closed"):
        subscriber.next_frame(timeout=0.1)
    subscriber.close()  # idempotent
    publisher.close()


def test_publisher_and_subscriber_closed_from_threads_of_their_own():
    # Every call of both ends blocked at once, each closed from another
    # thread.
    publisher, subscriber = blocking_pair("close-both")
    for value in range(2):
        publisher.publish(np.full(SHAPE, value, np.uint8))
    other_publisher, other_subscriber = blocking_pair("close-both-reader")
    publishing = Blocked(lambda: publisher.publish(np.zeros(SHAPE, np.uint8)))
    reading = Blocked(lambda: other_subscriber.next_frame(timeout=None))
    closed_at = time.monotonic()
    closers = [threading.Thread(target=publisher.close),
               threading.Thread(target=other_subscriber.close)]
    for closer in closers:
        closer.start()
    publishing.raised_closed_error_after(closed_at)
    reading.raised_closed_error_after(closed_at)
    for closer in closers:
        closer.join(10)
    subscriber.close()
    other_publisher.close()
