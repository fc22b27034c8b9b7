# SPDX-License-Identifier: MPL-2.0
"""The cudaipc Python package on the host transport, against gst-launch-1.0
pipelines and the example programs in other processes: frames intact and
zero copy both ways, and every bad input an exception, in both ipc modes."""

import gc
import hashlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import cudaipc
import numpy as np
import pytest

from conftest import example, gst, reference_checksums, remove_stale, unique_channel

IPC_MODES = ["fd", "legacy"]


def mapping_of(address):
    """The line of /proc/self/maps whose range holds `address`."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            if start <= address < end:
                return line.strip()
    return None


def assert_zero_copy_read_only(frame, plane):
    """`plane`, a NumPy array of `frame`, is a read-only view of the
    frame's bytes in the channel's shared slot, not a private copy."""
    address = plane.__array_interface__["data"][0]
    line = mapping_of(address)
    assert line is not None and line.split()[1][3] == "s", line
    assert frame.address <= address < frame.address + frame.nbytes
    assert not plane.flags.writeable


def sink(source, channel, mode, extra=""):
    return gst(f"{source} ! rscudaipcsink channel={channel} transport=host ipc-mode={mode} "
               f"wait-for-connection=1 {extra}")


@pytest.mark.parametrize("mode", IPC_MODES)
@pytest.mark.parametrize("fmt", ["RGB", "GRAY8", "NV12"])
def test_gst_producer_to_python_frames_intact_zero_copy_read_only(children, mode, fmt):
    source = f"videotestsrc num-buffers=8 pattern=ball ! video/x-raw,format={fmt},width=64,height=48"
    reference = reference_checksums(source)
    channel = unique_channel("read")
    producer = children(sink(source, channel, mode))
    sums = []
    with cudaipc.Subscriber(channel, timeout=20) as subscriber:
        for frame in subscriber:
            with frame:
                assert (frame.format, frame.width, frame.height, frame.device) == (fmt, 64, 48, "cpu")
                assert frame.__dlpack_device__() == (1, 0)
                assert not hasattr(frame, "__cuda_array_interface__")
                planes = [np.from_dlpack(plane) for plane in frame.planes]
                if fmt != "NV12":
                    whole = np.from_dlpack(frame)
                    assert whole.shape == ((48, 64, 3) if fmt == "RGB" else (48, 64))
                    assert np.array_equal(whole, planes[0])
                else:
                    assert [p.shape for p in planes] == [(48, 64), (24, 32, 2)]
                    with pytest.raises(BufferError, match="planes"):
                        np.from_dlpack(frame)
                for plane in planes:
                    assert_zero_copy_read_only(frame, plane)
                    with pytest.raises(ValueError, match="read-only"):
                        plane[0, 0] = 1
                sums.append(hashlib.sha1(b"".join(p.tobytes() for p in planes)).hexdigest())
                # The arrays hold the slot; the producer's close waits for it.
                del planes, plane
                whole = None
    assert sums == reference
    producer.finish().assert_success("producer")


@pytest.mark.parametrize("mode", IPC_MODES)
def test_python_producer_to_gst_checksums(children, mode):
    channel = unique_channel("publish")
    consumer = children(gst(f"rscudaipcsrc channel={channel} connect-timeout=120000 ! "
                            "video/x-raw ! checksumsink"))
    sent = []
    # Rows from a wider array: strides other than the slot's.
    wide = np.zeros((48, 100, 3), np.uint8)
    with cudaipc.Publisher(channel, "RGB", 64, 48, transport="host", ipc_mode=mode,
                           wait_for_consumers=1) as publisher:
        assert publisher.shapes == [[48, 64, 3]]
        for number in range(6):
            wide[...] = (np.arange(48 * 100 * 3).reshape(48, 100, 3) + number * 7) % 251
            frame = wide[:, 10:74, :]
            assert not frame.flags.c_contiguous
            assert publisher.publish(frame, pts=number * 1000) is True
            sent.append(hashlib.sha1(np.ascontiguousarray(frame).tobytes()).hexdigest())
    consumer.finish().assert_success("consumer")
    assert consumer.checksums() == sent


@pytest.mark.parametrize("fmt", ["NV12", "I420"])
def test_publish_example_to_gst_checksums(children, fmt):
    channel = unique_channel("example")
    consumer = children(gst(f"rscudaipcsrc channel={channel} connect-timeout=120000 ! "
                            "video/x-raw ! checksumsink"))
    publisher = children(example("cudaipc_publish.py", "--channel", channel, "--format", fmt,
                                 "--width", "64", "--height", "48", "--frames", "5",
                                 "--fps", "0", "--wait-consumers", "1"))
    publisher.finish().assert_success("cudaipc_publish.py")
    consumer.finish().assert_success("consumer")
    assert len(publisher.checksums()) == 5
    assert consumer.checksums() == publisher.checksums()


def test_read_example_from_gst(children):
    source = "videotestsrc num-buffers=5 ! video/x-raw,format=I420,width=64,height=48"
    reference = reference_checksums(source)
    channel = unique_channel("read-example")
    producer = children(sink(source, channel, "fd"))
    read = children(example("cudaipc_read.py", "--channel", channel, "--timeout", "20")).finish()
    read.assert_success("cudaipc_read.py")
    assert read.checksums() == reference
    assert "summary frames=5" in read.stdout
    producer.finish().assert_success("producer")


def test_an_export_holds_the_slot_after_release():
    channel = unique_channel("hold")
    with cudaipc.Publisher(channel, "GRAY8", 32, 16, transport="host", slots=2,
                           when_full="drop") as publisher:
        subscriber = cudaipc.Subscriber(channel, timeout=5, frames="latest")
        publisher.publish(np.full((16, 32), 1, np.uint8))
        frame = subscriber.next_frame()
        held = np.from_dlpack(frame)
        frame.release()
        assert frame.released
        with pytest.raises(BufferError, match="released"):
            np.from_dlpack(frame)
        with pytest.raises(BufferError, match="released"):
            frame.planes[0].__dlpack__()
        for value in range(2, 8):
            publisher.publish(np.full((16, 32), value, np.uint8))
        # The other slot took them all: the exported one was not written.
        assert (held == 1).all()
        latest = subscriber.next_frame()
        assert (np.from_dlpack(latest) == 7).all()
        latest.release()
        # The export gone, its slot is free again: two frames fit.
        del held
        gc.collect()
        assert publisher.publish(np.full((16, 32), 8, np.uint8))
        first = subscriber.next_frame()
        assert publisher.publish(np.full((16, 32), 9, np.uint8))
        assert (np.from_dlpack(first) == 8).all()
        first.release()
        subscriber.close()


def publish_in_time(publisher, arrays):
    """Publishes `arrays` from another thread; fails (closing the publisher,
    which ends its wait) unless they were all published within 5 s."""
    publishing = threading.Thread(target=lambda: [publisher.publish(a) for a in arrays])
    publishing.start()
    publishing.join(5)
    if publishing.is_alive():
        publisher.close()
        publishing.join()
        raise AssertionError("the publisher waited for a slot: one is still held")


def test_a_copy_holds_no_slot_and_stays_intact_when_its_slot_is_written_again():
    channel = unique_channel("keep")
    first = (np.arange(8 * 16 * 3) % 251).astype(np.uint8).reshape(8, 16, 3)
    with cudaipc.Publisher(channel, "RGB", 16, 8, transport="host", slots=2,
                           when_full="block") as publisher:
        subscriber = cudaipc.Subscriber(channel, timeout=5)
        publisher.publish(first)
        frame = subscriber.next_frame()
        in_place = np.from_dlpack(frame, copy=False)
        assert_zero_copy_read_only(frame, in_place)
        kept = np.from_dlpack(frame, copy=True)
        kept_copy = frame.copy()
        address = kept.__array_interface__["data"][0]
        assert address != in_place.__array_interface__["data"][0]
        assert not frame.address <= address < frame.address + frame.nbytes
        # Private memory of this process, the consumer's to write.
        assert mapping_of(address).split()[1][3] == "p"
        assert kept.flags.writeable
        assert kept_copy.address != frame.address and not kept_copy.released
        assert (kept_copy.format, kept_copy.seq, kept_copy.pts) == (frame.format, frame.seq, frame.pts)
        slot = frame.address
        del in_place
        frame.release()
        # Two frames without a read, into both slots: the copies hold none.
        publish_in_time(publisher, [np.full((8, 16, 3), value, np.uint8) for value in (1, 2)])
        written = []
        for value in (1, 2):
            with subscriber.next_frame() as later:
                assert (np.from_dlpack(later) == value).all()
                written.append(later.address)
        assert slot in written, "the copied frame's slot was written again"
        assert np.array_equal(kept, first)
        assert np.array_equal(np.from_dlpack(kept_copy), first)
        assert np.array_equal(np.from_dlpack(kept_copy, copy=True), first)
        kept[...] = 0  # its own memory
        assert np.array_equal(np.from_dlpack(kept_copy.copy()), first)
        kept_copy.release()
        subscriber.close()


def test_planes_are_copied_with_copy_true():
    channel = unique_channel("keep-planes")
    y = (np.arange(8 * 16) % 251).astype(np.uint8).reshape(8, 16)
    uv = np.full((4, 8, 2), 77, np.uint8)
    with cudaipc.Publisher(channel, "NV12", 16, 8, transport="host") as publisher:
        subscriber = cudaipc.Subscriber(channel, timeout=5)
        publisher.publish((y, uv))
        with subscriber.next_frame() as frame:
            planes = [np.from_dlpack(plane, copy=True) for plane in frame.planes]
            # Pre-1.0 consumers get a legacy capsule of the copy (its
            # destructor frees the copy: never taken).
            assert '"dltensor"' in repr(frame.planes[1].__dlpack__(copy=True))
        assert np.array_equal(planes[0], y) and np.array_equal(planes[1], uv)
        assert all(p.flags.writeable for p in planes)
        subscriber.close()


@pytest.mark.parametrize("mode", IPC_MODES)
def test_unknown_channel(mode):
    channel = unique_channel("unknown")
    started = time.monotonic()
    with pytest.raises(cudaipc.NoProducerError, match=channel) as raised:
        cudaipc.Subscriber(channel, timeout=0.3, ipc_mode=mode)
    assert isinstance(raised.value, FileNotFoundError)
    assert time.monotonic() - started < 5
    # As the element's error: the channels there are, for a mistyped name.
    with cudaipc.Publisher(channel + "-live", "RGB", 8, 4, transport="host", ipc_mode=mode):
        with pytest.raises(cudaipc.NoProducerError, match="channels with a producer: .*"
                           + channel + "-live"):
            cudaipc.Subscriber(channel, timeout=0.3, ipc_mode=mode)


@pytest.mark.parametrize("mode", IPC_MODES)
def test_wrong_arrays_are_refused_naming_expected_and_given(mode):
    channel = unique_channel("wrong")
    with cudaipc.Publisher(channel, "RGB", 64, 48, transport="host", ipc_mode=mode) as publisher:
        with pytest.raises(ValueError, match=r"expected shape \(48, 64, 3\) dtype uint8, "
                                             r"got shape \(48, 64, 4\) dtype uint8"):
            publisher.publish(np.zeros((48, 64, 4), np.uint8))
        with pytest.raises(ValueError, match="got shape .48, 64, 3. dtype float32"):
            publisher.publish(np.zeros((48, 64, 3), np.float32))
        with pytest.raises(ValueError, match="rows must be contiguous"):
            publisher.publish(np.zeros((48, 128, 3), np.uint8)[:, ::2, :])
        with pytest.raises(TypeError, match="DLPack"):
            publisher.publish(b"\0" * (64 * 48 * 3))
        with pytest.raises(ValueError, match="one array"):
            publisher.publish((np.zeros((48, 64, 3), np.uint8),) * 2)
    with cudaipc.Publisher(channel, "NV12", 64, 48, transport="host", ipc_mode=mode) as publisher:
        with pytest.raises(ValueError, match="a tuple of 2 arrays"):
            publisher.publish(np.zeros((72, 64), np.uint8))
        with pytest.raises(ValueError, match=r"plane 1 .* expected shape \(24, 32, 2\)"):
            publisher.publish((np.zeros((48, 64), np.uint8), np.zeros((24, 64), np.uint8)))
    with pytest.raises(cudaipc.UnsupportedFormatError, match="YUY2"):
        cudaipc.Publisher(channel, "YUY2", 64, 48, transport="host")
    with pytest.raises(ValueError, match="transport="):
        cudaipc.Publisher(channel, "RGB", 64, 48, transport="gpu")


def test_exports_that_cannot_be_made_raise_buffer_error():
    channel = unique_channel("exports")
    with cudaipc.Publisher(channel, "RGB", 8, 4, transport="host") as publisher:
        subscriber = cudaipc.Subscriber(channel, timeout=5)
        publisher.publish(np.zeros((4, 8, 3), np.uint8))
        with subscriber.next_frame() as frame:
            with pytest.raises(BufferError, match=r"dl_device=\(2, 0\)"):
                frame.__dlpack__(dl_device=(2, 0))
            with pytest.raises(BufferError, match=r"dl_device=\(2, 0\)"):
                frame.__dlpack__(dl_device=(2, 0), copy=True)
            # DLPack 1.x consumers get a versioned capsule, older ones the
            # legacy one.
            assert "dltensor_versioned" in repr(frame.__dlpack__(max_version=(1, 0)))
            assert '"dltensor"' in repr(frame.__dlpack__())
            assert np.from_dlpack(frame).shape == (4, 8, 3)
        subscriber.close()


@pytest.mark.parametrize("mode", IPC_MODES)
def test_a_killed_producer_is_an_exception_not_a_hang(children, mode):
    channel = unique_channel("killed")
    producer = children(sink("videotestsrc is-live=true ! video/x-raw,format=RGB,width=64,height=48",
                             channel, mode))
    started = None
    with pytest.raises(cudaipc.ProducerGoneError, match="died") as raised:
        with cudaipc.Subscriber(channel, timeout=20) as subscriber:
            for count, frame in enumerate(subscriber):
                frame.release()
                if count == 2:
                    os.kill(producer.process.pid, signal.SIGKILL)
                    started = time.monotonic()
    assert isinstance(raised.value, ConnectionError)
    assert time.monotonic() - started < 10
    # A producer killed by SIGKILL cannot remove its files (the control
    # block and its slots, or its socket): removed as a user would.
    producer.process.wait()
    remove_stale(channel)


@pytest.mark.parametrize("mode", IPC_MODES)
def test_a_closed_channel_says_how_to_wait_for_the_next_producer(children, mode):
    channel = unique_channel("closed")
    producer = children(sink("videotestsrc is-live=true ! video/x-raw,format=RGB,width=64,height=48",
                             channel, mode))
    with pytest.raises(cudaipc.ProducerGoneError) as raised:
        with cudaipc.Subscriber(channel, timeout=20) as subscriber:
            for count, frame in enumerate(subscriber):
                frame.release()
                if count == 2:
                    # Ctrl-C on a gst-launch-1.0 run without -e: no end of stream.
                    os.kill(producer.process.pid, signal.SIGINT)
    message = str(raised.value)
    assert "closed the channel without an end of stream" in message, message
    assert f"cudaipc.Subscriber('{channel}', timeout=None)" in message, message
    assert "gst-launch-1.0 with -e" in message, message


def other_user_or_skip():
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("cannot run commands as another user (needs root and setpriv)")


OTHER_USER = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def test_another_users_channel_is_refused_unless_allowed(children):
    other_user_or_skip()
    source = "videotestsrc num-buffers=5 ! video/x-raw,format=RGB,width=64,height=48"
    reference = reference_checksums(source)
    channel = unique_channel("owner")
    with tempfile.TemporaryDirectory(prefix="cudaipc-test-py-owner-", dir="/dev/shm") as folder:
        os.chmod(folder, 0o1777)
        env = {"CUDAIPC_SHM_DIR": folder}
        producer = children([*OTHER_USER, *sink(source, channel, "legacy", "permissions=0666")],
                            env=env)
        refused = children(example("cudaipc_read.py", "--channel", channel, "--timeout", "20"),
                           env=env).finish()
        assert refused.code == 1, refused.stdout + refused.stderr
        assert "ChannelPermissionError" in refused.stderr
        assert f"channel '{channel}' may not be used" in refused.stderr
        assert "allowed_producers" in refused.stderr
        nobody = str(pwd.getpwnam("nobody").pw_uid)
        read = children(example("cudaipc_read.py", "--channel", channel, "--timeout", "20",
                                "--allowed-producers", nobody), env=env).finish()
        read.assert_success("cudaipc_read.py allowing nobody")
        assert read.checksums() == reference
        producer.finish().assert_success("nobody's producer")


def test_no_cuda_is_touched_on_the_host_transport():
    # A process without libcuda reads and writes host channels: this one
    # (CI has no GPU); a cuda publisher there is a DeviceError, not a crash.
    try:
        subprocess.run(["nvidia-smi"], capture_output=True, check=True)
        pytest.skip("a GPU is here")
    except (OSError, subprocess.CalledProcessError):
        pass
    with pytest.raises(cudaipc.DeviceError):
        cudaipc.Publisher(unique_channel("nocuda"), "RGB", 64, 48, transport="cuda")


WAITS = {
    "publish": "p = cudaipc.Publisher(ch, 'GRAY8', 8, 8, transport='host', wait_for_consumers=1)\n"
               "print('waiting', flush=True)\n"
               "p.publish(np.zeros((8, 8), np.uint8))",
    "attach": "print('waiting', flush=True)\n"
              "cudaipc.Subscriber(ch, timeout=None)",
    "frame": "p = cudaipc.Publisher(ch, 'GRAY8', 8, 8, transport='host')\n"
             "s = cudaipc.Subscriber(ch)\n"
             "print('waiting', flush=True)\n"
             "s.next_frame(timeout=None)",
}


@pytest.mark.parametrize("wait", sorted(WAITS))
def test_ctrl_c_ends_every_wait(children, wait):
    script = ("import signal, sys, cudaipc, numpy as np\n"
              # A child of a shell job may inherit SIGINT ignored.
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              f"ch = {unique_channel('ctrl-c')!r}\n" + WAITS[wait])
    child = children([sys.executable, "-c", script])
    assert child.process.stdout.readline().strip() == "waiting"
    time.sleep(0.3)
    child.process.send_signal(signal.SIGINT)
    started = time.monotonic()
    child.finish(timeout=10)
    assert "KeyboardInterrupt" in child.stderr, child.stderr
    assert time.monotonic() - started < 2
