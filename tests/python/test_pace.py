# SPDX-License-Identifier: MPL-2.0
"""Consumers at their own pace, in Python, against producers in other
processes (host transport): batches held with `hold=`, the HoldError that
comes at once instead of a wait on itself, a killed subscriber's frames
given back, and a slow subscriber of a live producer that misses frames,
warned once."""

import importlib.util
import os
import signal
import sys
import time
import types
import warnings

import cudaipc
import numpy as np
import pytest

from conftest import EXAMPLES, example, gst, unique_channel

WIDTH, HEIGHT = 64, 48
# Long, so that a wait on itself would show as a timeout; the errors
# expected instead come within FAST seconds.
TIMEOUT = 20.0
FAST = 2.0


def _publish_example():
    spec = importlib.util.spec_from_file_location("cudaipc_publish", EXAMPLES / "cudaipc_publish.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PUBLISH = _publish_example()


def published(number):
    """Frame `number` as cudaipc_publish.py publishes it (GRAY8)."""
    return PUBLISH.planes_of(types.SimpleNamespace(shapes=[[HEIGHT, WIDTH]]), number)[0]


def number_of(pixels):
    """The number of a frame of cudaipc_publish.py (below 256), checked
    against its whole content."""
    number = int(pixels[0, 0])
    assert np.array_equal(pixels, published(number)), f"frame {number} is not intact"
    return number


def batches_held_together(subscriber, size):
    """Each `size` frames of the subscriber, in order, held together until
    the next batch is asked for (then released)."""
    batch = []
    while (frame := next_frame_quickly(subscriber)) is not None:
        batch.append(frame)
        if len(batch) == size:
            yield batch
            for held in batch:
                held.release()
            batch = []


def python_publisher(children, channel, slots, frames, *extra):
    return children(example("cudaipc_publish.py", "--channel", channel, "--format", "GRAY8",
                            "--width", str(WIDTH), "--height", str(HEIGHT),
                            "--frames", str(frames), "--fps", "0", "--slots", str(slots),
                            "--wait-consumers", "1", "--quiet", *extra))


def next_frame_quickly(subscriber):
    """The subscriber's next frame or its error, which must come within FAST
    seconds (the subscriber's own timeout is TIMEOUT)."""
    started = time.monotonic()
    try:
        return subscriber.next_frame()
    finally:
        took = time.monotonic() - started
        assert took < FAST, f"next_frame took {took:.1f} s"


@pytest.mark.parametrize("slots,hold", [(2, 3), (2, 7), (8, 7)])
def test_a_hold_the_ring_cannot_fit_is_refused_at_once_naming_the_slots(children, slots, hold):
    channel = unique_channel("hold-ring")
    producer = python_publisher(children, channel, slots, 12)
    with cudaipc.Subscriber(channel, hold=hold, timeout=TIMEOUT) as subscriber:
        with pytest.raises(cudaipc.HoldError) as raised:
            next_frame_quickly(subscriber)
    message = str(raised.value)
    assert isinstance(raised.value, RuntimeError)
    assert f"channel '{channel}' has {slots} slots, and hold={hold} needs {hold + 2}" in message
    assert f"slots={hold + 2} or more" in message, message
    assert "copy=True" in message, message
    # The producer goes on once the refused subscriber is gone.
    producer.finish().assert_success("cudaipc_publish.py")


@pytest.mark.parametrize("live", [False, True])
def test_an_automatic_ring_grows_for_a_declared_hold_and_batches_of_8_arrive_complete(children, live):
    # The producer leaves the depth to the transport (4 slots of host
    # memory): a subscriber that keeps batches of 8 (hold=7) needs 9, and
    # the ring grows to them instead of the HoldError a set depth gives.
    channel = unique_channel("grow")
    producer = python_publisher(children, channel, 0, 32, *(["--live", "--fps", "60"] if live else []))
    numbers = []
    with cudaipc.Subscriber(channel, hold=7, timeout=TIMEOUT) as subscriber:
        for batch in batches_held_together(subscriber, 8):
            numbers.append([number_of(np.from_dlpack(held)) for held in batch])
        assert subscriber.frames_missed == 0
    assert numbers == [list(range(first, first + 8)) for first in range(0, 32, 8)]
    producer.finish().assert_success("cudaipc_publish.py")


def test_batches_of_4_fit_an_8_slot_ring_and_arrive_complete_and_intact(children):
    channel = unique_channel("batch")
    producer = python_publisher(children, channel, 8, 24)
    numbers = []
    with cudaipc.Subscriber(channel, hold=3, timeout=TIMEOUT) as subscriber:
        for batch in batches_held_together(subscriber, 4):
            # The four frames are held together, each still its published
            # content, without a copy.
            arrays = [np.from_dlpack(held) for held in batch]
            assert all(not array.flags.writeable for array in arrays)
            clip = np.stack(arrays)
            numbers.append([number_of(array) for array in arrays])
            assert clip.shape == (4, HEIGHT, WIDTH)
            del arrays
        assert subscriber.frames_missed == 0
    assert numbers == [list(range(first, first + 4)) for first in range(0, 24, 4)]
    producer.finish().assert_success("cudaipc_publish.py")


def test_holding_every_slot_undeclared_is_a_hold_error_at_once_then_goes_on(children):
    channel = unique_channel("hold-all")
    producer = python_publisher(children, channel, 2, 6)
    got = []
    with cudaipc.Subscriber(channel, timeout=TIMEOUT) as subscriber:
        first = subscriber.next_frame()
        second = subscriber.next_frame()
        with pytest.raises(cudaipc.HoldError) as raised:
            next_frame_quickly(subscriber)
        message = str(raised.value)
        assert "holds 2 frames" in message and "the ring has 2 slots" in message, message
        assert "copy=True" in message and "hold=N" in message, message
        # Not a wait that ran out: the error is no timeout.
        assert not isinstance(raised.value, TimeoutError)

        got.append(number_of(np.from_dlpack(first)))
        first.release()
        third = next_frame_quickly(subscriber)
        # Again two held: the same error, until one goes.
        with pytest.raises(cudaipc.HoldError):
            next_frame_quickly(subscriber)
        got.append(number_of(np.from_dlpack(second)))
        del second
        got.append(number_of(np.from_dlpack(third)))
        del third
        for frame in subscriber:
            with frame:
                got.append(number_of(np.from_dlpack(frame)))
    assert got == list(range(6))
    producer.finish().assert_success("cudaipc_publish.py")


HOLDER = """
import sys, time, cudaipc
subscriber = cudaipc.Subscriber(sys.argv[1], hold=2, timeout=20)
held = [subscriber.next_frame() for _ in range(3)]
print("holding", len(held), flush=True)
time.sleep(60)
"""


def test_a_killed_subscriber_gives_its_held_frames_back_at_once(children):
    channel = unique_channel("killed-holder")
    frames = 40
    # 4 slots: the holder keeps 3 frames (hold=2 and the one it read), the
    # producer fills the fourth, then waits for the holder.
    producer = python_publisher(children, channel, 4, frames)
    holder = children([sys.executable, "-c", HOLDER, channel])
    assert holder.process.stdout.readline().split() == ["holding", "3"]
    got = []
    with cudaipc.Subscriber(channel, timeout=TIMEOUT) as subscriber:
        # The lossless producer waits for the holder: nothing new comes
        # (but the fourth frame, if it came after this attached).
        while True:
            try:
                frame = subscriber.next_frame(timeout=0.5)
            except cudaipc.WaitTimeoutError:
                break
            with frame:
                got.append(number_of(np.from_dlpack(frame)))
        assert got in ([], [3]), got
        os.kill(holder.process.pid, signal.SIGKILL)
        killed = time.monotonic()
        frame = subscriber.next_frame()
        took = time.monotonic() - killed
        assert took < FAST, f"the first frame after the kill took {took:.1f} s"
        with frame:
            got.append(number_of(np.from_dlpack(frame)))
        for frame in subscriber:
            with frame:
                got.append(number_of(np.from_dlpack(frame)))
    # The frames that followed the holder's, every one, in order.
    assert got[0] in (3, 4) and got == list(range(got[0], frames)), got
    producer.finish().assert_success("cudaipc_publish.py")
    holder.finish()
    assert holder.code == -signal.SIGKILL


def test_a_slow_auto_subscriber_of_a_live_gst_producer_misses_frames_warned_once(children):
    channel = unique_channel("live-gst")
    producer = children(gst(
        f"videotestsrc is-live=true pattern=ball ! video/x-raw,format=GRAY8,width={WIDTH},"
        f"height={HEIGHT},framerate=30/1 ! rscudaipcsink channel={channel} transport=host"))
    seqs, missed_before = [], []
    with warnings.catch_warnings(record=True) as caught:
        # Every warning recorded, even one repeated from the same line.
        warnings.simplefilter("always")
        with cudaipc.Subscriber(channel, frames="auto", timeout=TIMEOUT) as subscriber:
            for frame in subscriber:
                with frame:
                    seqs.append(frame.seq)
                    missed_before.append(frame.missed_before)
                if len(seqs) == 8:
                    break
                # 12 frames come meanwhile: more than the 8 slots of the
                # ring, whose producer does not wait for this subscriber.
                time.sleep(0.4)
            assert subscriber.live
            missed = subscriber.frames_missed
    ours = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert missed > 0
    assert sum(missed_before) == missed
    # In order: each frame follows the last one it got and those it missed.
    assert all(later - earlier == gap + 1
               for earlier, later, gap in zip(seqs, seqs[1:], missed_before[1:])), (seqs, missed_before)
    assert len(ours) == 1, [str(w.message) for w in ours]
    message = str(ours[0].message)
    assert f"channel '{channel}' missed" in message, message
    assert f"cudaipc.Subscriber('{channel}', frames='every')" in message, message
    assert "makes the producer wait" in message, message
    assert ours[0].filename == __file__, "the warning points at the loop that fell behind"
    producer.process.send_signal(signal.SIGINT)
    producer.finish()


def test_a_live_python_publisher_waits_only_for_its_every_frame_subscriber(children):
    channel = unique_channel("live-py")
    frames = 60
    producer = python_publisher(children, channel, 4, frames, "--live", "--wait-consumers", "2")
    got_every, got_auto = [], []
    with cudaipc.Subscriber(channel, frames="every", timeout=TIMEOUT) as every, \
            cudaipc.Subscriber(channel, frames="auto", timeout=TIMEOUT) as slow:
        assert every.live and slow.live
        with pytest.warns(RuntimeWarning, match="frames='every'") as record:
            # The slow one reads one frame each time the other reads ten.
            for count, frame in enumerate(every):
                with frame:
                    got_every.append(number_of(np.from_dlpack(frame)))
                if count % 10 == 0 and (kept := slow.next_frame(timeout=TIMEOUT)) is not None:
                    with kept:
                        got_auto.append(number_of(np.from_dlpack(kept)))
            while (kept := slow.next_frame()) is not None:
                with kept:
                    got_auto.append(number_of(np.from_dlpack(kept)))
        assert len(record) == 1
        assert slow.frames_missed == frames - len(got_auto) > 0
        assert every.frames_missed == 0
    assert got_every == list(range(frames))
    assert got_auto == sorted(got_auto) and got_auto[-1] == frames - 1, got_auto
    producer.finish().assert_success("cudaipc_publish.py --live")


def test_a_publisher_is_live_only_when_it_says_so():
    for live in (False, True):
        channel = unique_channel("live-flag")
        with cudaipc.Publisher(channel, "GRAY8", 8, 8, transport="host", live=live) as publisher, \
                cudaipc.Subscriber(channel, timeout=TIMEOUT) as subscriber:
            assert publisher.live is live
            assert subscriber.live is live
            assert subscriber.frames_missed == 0


def test_a_producer_that_drops_warns_its_subscriber_once_naming_when_full():
    channel = unique_channel("drops")
    with cudaipc.Publisher(channel, "GRAY8", WIDTH, HEIGHT, transport="host", slots=2,
                           when_full="drop") as publisher, \
            cudaipc.Subscriber(channel, frames="every", timeout=TIMEOUT) as subscriber:
        with pytest.warns(RuntimeWarning, match="when_full='block'") as record:
            for round_ in range(2):
                # Two rounds of 6 frames into 2 slots, nothing read meanwhile.
                for number in range(round_ * 6, round_ * 6 + 6):
                    publisher.publish(published(number))
                # The last two, intact: the others were written over.
                for number in range(round_ * 6 + 4, round_ * 6 + 6):
                    with subscriber.next_frame() as frame:
                        assert number_of(np.from_dlpack(frame)) == number
        assert len(record) == 1, [str(w.message) for w in record]
        assert f"cudaipc.Subscriber('{channel}', frames='every')" in str(record[0].message)
        assert subscriber.frames_missed == 8


def test_batching_consumer_example_feeds_its_model_complete_batches(children):
    channel = unique_channel("batching-example")
    # Batches of 4 (hold=3) need 5 slots.
    producer = python_publisher(children, channel, 5, 20)
    consumer = children(example("batching_consumer.py", "--channel", channel, "--batch", "4",
                                "--backend", "numpy", "--timeout", "20")).finish()
    consumer.assert_success("batching_consumer.py")
    producer.finish().assert_success("cudaipc_publish.py")
    batches = [line.split() for line in consumer.stdout.splitlines() if line.startswith("batch ")]
    # The stand-in model saw each frame as published, in batches of 4.
    assert [b[-1] for b in batches] == [
        "mean=" + ",".join(f"{published(n).mean():.3f}" for n in range(first, first + 4))
        for first in range(0, 20, 4)]
    assert consumer.stdout.splitlines()[-1] == "summary batches=5 frames=20 missed=0"


def test_batching_consumer_example_on_too_small_a_ring_names_the_slots(children):
    channel = unique_channel("batching-small")
    producer = python_publisher(children, channel, 4, 5)
    consumer = children(example("batching_consumer.py", "--channel", channel, "--batch", "8",
                                "--backend", "numpy", "--timeout", "20")).finish()
    assert consumer.code == 1, consumer.stdout + consumer.stderr
    assert "HoldError" in consumer.stderr
    assert "has 4 slots, and hold=7 needs 9" in consumer.stderr
    producer.finish().assert_success("cudaipc_publish.py")


# No display: the script's viewer needs none (autovideosink would crash).
NO_DISPLAY = {"DISPLAY": "", "WAYLAND_DISPLAY": ""}


def channel_files(channel):
    """The files of `channel` in the shm folder."""
    shm = os.environ.get("CUDAIPC_SHM_DIR") or "/dev/shm"
    return sorted(name for name in os.listdir(shm)
                  if name == f"cudaipc-{channel}" or name.startswith((f"cudaipc-{channel}.", f"cudaipc-{channel}@")))


def test_recorder_viewer_and_batching_consumer_on_one_live_channel(children, tmp_path):
    frames = 45
    recording = tmp_path / "recording.rgb"
    script = children([str(EXAMPLES / "recorder_and_viewer.sh"), unique_channel("recorder")],
                      env={"FRAMES": str(frames), "RECORDING": str(recording),
                           "PYTHON": sys.executable, **NO_DISPLAY}).finish()
    script.assert_success("recorder_and_viewer.sh")
    assert "no display" in script.stderr and "fakesink" in script.stderr, script.stderr
    # The recorder got every frame of the camera.
    assert recording.stat().st_size == frames * 320 * 240 * 3
    summary = script.stdout.splitlines()[-1].split()
    counts = dict(item.split("=") for item in summary[1:])
    # The batcher got every frame or counted it missed, in batches of 8.
    assert int(counts["frames"]) + int(counts["missed"]) == frames, summary
    assert int(counts["batches"]) == int(counts["frames"]) // 8 or int(counts["missed"]) > 0


def test_recorder_and_viewer_names_the_viewer_that_died_and_leaves_nothing(children, tmp_path):
    # A viewer that fails after a few frames, as one that cannot open its
    # window fails at once: the script says so (not a consumer's timeout
    # waiting for a camera that waits for the viewer), stops the others, and
    # leaves neither the unfinished recording nor the channel's files.
    channel = unique_channel("viewer-dies")
    recording = tmp_path / "recording.rgb"
    script = children([str(EXAMPLES / "recorder_and_viewer.sh"), channel],
                      env={"FRAMES": "300", "RECORDING": str(recording), "PYTHON": sys.executable,
                           "VIEWER": "identity error-after=3 ! fakesink", **NO_DISPLAY}).finish()
    assert script.code == 1, script.stdout + script.stderr
    last = script.stderr.strip().splitlines()[-1]
    assert "the viewer (identity error-after=3 ! fakesink) died, exit status 1" in last, script.stderr
    for misleading in ("WaitTimeoutError", "ProducerGoneError", "Traceback"):
        assert misleading not in script.stderr, script.stderr
    assert not recording.exists()
    assert channel_files(channel) == []
