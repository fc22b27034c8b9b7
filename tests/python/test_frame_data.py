# SPDX-License-Identifier: MPL-2.0
"""Data that travels with each frame (host transport): a dict of boxes or
bytes given to ``publish(..., data=)`` is ``frame.data`` of that frame on
the other side, in another process too; a GStreamer consumer
(``rscudaipcsrc ! appsink``, PyGObject) finds it as the buffer's
``CudaIpcFrameData`` meta, and a GStreamer producer's meta (``appsrc !
rscudaipcsink``) is ``frame.data``; copies and batches keep each frame's
data; data larger than the channel's bound, or a dict JSON cannot hold, is
refused with nothing published."""

import json
import os
import sys
from pathlib import Path

import cudaipc
import numpy as np
import pytest

from conftest import example, gst as gst_launch, reference_checksums, unique_channel
from frame_data_peer import HEIGHT, WIDTH, boxes, expected, pixels

PEER = str(Path(__file__).with_name("frame_data_peer.py"))
FRAMES = 12


def peer(children, role, channel, kind, frames=FRAMES):
    return children([sys.executable, PEER, role, channel, str(frames), kind])


def gray_publisher(channel, **options):
    options = {"transport": "host", "slots": 8, **options}
    return cudaipc.Publisher(channel, "GRAY8", 8, 8, **options)


GRAY = np.zeros((8, 8), np.uint8)


def assert_frame(frame, n, kind):
    assert frame.data == expected(kind, n), f"frame {n}"
    assert np.array_equal(np.from_dlpack(frame), pixels(n)), f"frame {n}'s pixels"


@pytest.mark.parametrize("kind", ["dicts", "mixed"])
def test_each_frame_of_another_process_brings_its_data(children, kind):
    channel = unique_channel("data")
    producer = peer(children, "publish", channel, kind)
    with cudaipc.Subscriber(channel, timeout=60, frames="every") as subscriber:
        for n, frame in enumerate(subscriber):
            with frame:
                assert_frame(frame, n, kind)
                if kind == "dicts":
                    assert frame.data["boxes"] == boxes(n)["boxes"] and len(frame.data["boxes"]) == n % 5 + 1
            # Kept with the frame, not in its slot.
            assert frame.data == expected(kind, n)
    assert n == FRAMES - 1
    producer.finish().assert_success("producer")


def test_bytes_bytearray_memoryview_dict_and_none_in_one_process():
    channel = unique_channel("kinds")
    strided = np.arange(12, dtype=np.uint8).reshape(3, 4)[:, ::2]
    given = [b"\x00\x01\x02", bytearray(b"detections"), memoryview(strided), b"",
             {"frame": 4, "labels": ["car", "person"], "ok": True, "none": None}, None,
             {}]
    wanted = [b"\x00\x01\x02", b"detections", strided.tobytes(), b"", given[4], None, {}]
    with gray_publisher(channel) as publisher, \
            cudaipc.Subscriber(channel, frames="every") as subscriber:
        for data in given:
            assert publisher.publish(GRAY, data=data) is True
        for want in wanted:
            with subscriber.next_frame(5) as frame:
                got = frame.data
                assert got == want and type(got) is type(want), (got, want)
                # Each read is a new object: changing it changes nothing.
                if isinstance(got, dict):
                    got["changed"] = 1
                    assert frame.data == want


def test_copies_and_batches_keep_each_frames_data():
    channel = unique_channel("batch")
    batch_size = 4
    with gray_publisher(channel) as publisher, \
            cudaipc.Subscriber(channel, frames="every", hold=batch_size - 1) as subscriber:
        for n in range(batch_size):
            publisher.publish(GRAY, data=boxes(n))
        publisher.eos()
        batch = [subscriber.next_frame(5) for _ in range(batch_size)]
        copies = [frame.copy() for frame in batch]
        for frame in batch:
            frame.release()
        assert [frame.data for frame in batch] == [boxes(n) for n in range(batch_size)]
        assert [copy.data for copy in copies] == [boxes(n) for n in range(batch_size)]
        assert subscriber.next_frame(5) is None


def test_data_beyond_the_bound_is_refused_naming_it_and_nothing_is_published():
    channel = unique_channel("bound")
    # 64 bytes a frame: 16 of framing, 48 of data.
    with gray_publisher(channel, frame_data_bound=64) as publisher, \
            cudaipc.Subscriber(channel, frames="every") as subscriber:
        with pytest.raises(cudaipc.InvalidArgumentError) as raised:
            publisher.publish(GRAY, data=b"x" * 49)
        message = str(raised.value)
        assert "49 bytes" in message and "at most 48" in message and "frame_data_bound" in message, message
        with pytest.raises(cudaipc.InvalidArgumentError, match="at most 48"):
            publisher.publish(GRAY, data={"text": "y" * 40})  # 51 bytes of JSON
        assert publisher.publish(GRAY, data=b"x" * 48) is True
        publisher.eos()
        with subscriber.next_frame(5) as frame:
            assert frame.data == b"x" * 48
        assert subscriber.next_frame(5) is None, "nothing published for the refused frames"
    with gray_publisher(unique_channel("bound0"), frame_data_bound=0) as none:
        with pytest.raises(cudaipc.InvalidArgumentError, match="at most 0"):
            none.publish(GRAY, data=b"x")
        assert none.publish(GRAY) is True


@pytest.mark.parametrize("bound", [-1, 2**20 + 1, 2**40])
def test_a_bound_outside_0_to_1_mib_is_refused_naming_it(bound):
    with pytest.raises(cudaipc.InvalidArgumentError) as raised:
        gray_publisher(unique_channel("bound"), frame_data_bound=bound)
    assert str(raised.value).startswith(f"frame_data_bound={bound}:"), str(raised.value)
    assert "0 to 1048576" in str(raised.value)


@pytest.mark.parametrize("data,error", [
    ({"box": object()}, TypeError),
    ({"score": np.float32(0.5)}, TypeError),
    ({"score": float("nan")}, ValueError),
    ("a str", TypeError),
    ([1, 2], TypeError),
    (42, TypeError),
])
def test_data_json_cannot_hold_is_an_error_naming_data(data, error):
    channel = unique_channel("json")
    with gray_publisher(channel) as publisher, \
            cudaipc.Subscriber(channel, frames="every") as subscriber:
        with pytest.raises(error, match=r"^data"):
            publisher.publish(GRAY, data=data)
        publisher.eos()
        assert subscriber.next_frame(5) is None, "nothing published"


def cuda_or_skip():
    """Skips without a usable CUDA device (fails with CUDAIPC_REQUIRE_GPU=1)."""
    try:
        cudaipc.Publisher(unique_channel("probe"), "GRAY8", 8, 8, transport="cuda").close()
    except cudaipc.DeviceError as e:
        if os.environ.get("CUDAIPC_REQUIRE_GPU") == "1":
            raise
        pytest.skip(f"SKIPPED: no CUDA device ({e})")


def cupy_pixels(frame):
    """The frame's pixels through CuPy, or None where there is no CuPy."""
    try:
        import cupy
    except ImportError:
        return None
    return cupy.asnumpy(cupy.from_dlpack(frame))


def test_on_the_cuda_transport_uploaded_and_device_frames_carry_their_data():
    """In one process: descriptors (ipc_mode='fd'); a process cannot open
    its own legacy CUDA IPC handles."""
    cuda_or_skip()
    channel = unique_channel("cuda")
    publisher = cudaipc.Publisher(channel, "RGB", WIDTH, HEIGHT, transport="cuda", slots=4,
                                  ipc_mode="fd")
    with publisher, cudaipc.Subscriber(channel, frames="every") as subscriber:
        # A host array into device slots: uploaded.
        assert publisher.publish(pixels(0), data=boxes(0)) is True
        with subscriber.next_frame(10) as first:
            assert (first.device, first.data) == ("cuda", boxes(0))
            kept = first.copy()  # device memory of its own
            # A CUDA array (a frame is one) into a loaned slot, copied on the GPU.
            assert publisher.publish(first, data=b"relayed") is True
        assert kept.data == boxes(0)
        with subscriber.next_frame(10) as second:
            assert (second.device, second.data) == ("cuda", b"relayed")
            copied = cupy_pixels(second)
            assert copied is None or np.array_equal(copied, pixels(0))
        kept.release()


def test_a_cuda_producer_in_another_process_sends_each_frames_data(children):
    cuda_or_skip()
    channel = unique_channel("cuda-peer")
    producer = children([sys.executable, PEER, "publish", channel, str(FRAMES), "mixed", "cuda"])
    with cudaipc.Subscriber(channel, timeout=60, frames="every") as subscriber:
        got = []
        for frame in subscriber:
            with frame:
                assert frame.device == "cuda"
                copied = cupy_pixels(frame)
                assert copied is None or np.array_equal(copied, pixels(len(got)))
                got.append(frame.data)
    assert got == [expected("mixed", n) for n in range(FRAMES)]
    producer.finish().assert_success("cuda producer")


# --- with GStreamer applications (PyGObject) -------------------------------

def gst():
    gi = pytest.importorskip(
        "gi", reason="PyGObject (Debian: python3-gi) is not installed: scripts/setup.sh installs it")
    gi.require_version("Gst", "1.0")
    from gi.repository import Gst

    Gst.init(None)
    factory = Gst.ElementFactory.find("rscudaipcsrc")
    assert factory is not None and factory.load() is not None, "GST_PLUGIN_PATH has no plugin"
    return Gst


def test_a_python_producers_dicts_reach_an_appsink_as_custom_metas(children):
    Gst = gst()
    channel = unique_channel("appsink")
    producer = peer(children, "publish", channel, "mixed")
    pipeline = Gst.parse_launch(
        f"rscudaipcsrc channel={channel} connect-timeout=60000 "
        "! appsink name=sink sync=false enable-last-sample=false")
    sink = pipeline.get_by_name("sink")
    pipeline.set_state(Gst.State.PLAYING)
    n = 0
    try:
        while (sample := sink.emit("try-pull-sample", 20 * Gst.SECOND)) is not None:
            buffer = sample.get_buffer()
            want = expected("mixed", n)
            meta = buffer.get_custom_meta("CudaIpcFrameData")
            if want is None:
                assert meta is None, f"frame {n} had no data"
            else:
                structure = meta.get_structure()
                if isinstance(want, dict):
                    assert json.loads(structure.get_value("json")) == want, f"frame {n}"
                    assert not structure.has_field("bytes")
                else:
                    assert bytes(structure.get_value("bytes").get_data()) == want, f"frame {n}"
                    assert not structure.has_field("json")
            assert cudaipc.gst_buffer_data(buffer) == want
            with cudaipc.from_gst_sample(sample) as frame:
                assert frame.data == want
                assert np.array_equal(np.from_dlpack(frame), pixels(n))
            n += 1
        error = pipeline.get_bus().pop_filtered(Gst.MessageType.ERROR)
        assert error is None, error.parse_error()
        assert sink.get_property("eos"), "no sample within 20 s"
    finally:
        pipeline.set_state(Gst.State.NULL)
    assert n == FRAMES
    producer.finish().assert_success("producer")


@pytest.mark.parametrize("kind", ["dicts", "mixed"])
def test_an_appsrc_producers_custom_metas_are_frame_data(children, kind):
    gst()
    channel = unique_channel("appsrc")
    producer = peer(children, "appsrc", channel, kind)
    with cudaipc.Subscriber(channel, timeout=60, frames="every") as subscriber:
        got = []
        for frame in subscriber:
            with frame:
                assert (frame.width, frame.height) == (WIDTH, HEIGHT)
                assert_frame(frame, len(got), kind)
                got.append(frame.data)
    assert got == [expected(kind, n) for n in range(FRAMES)]
    producer.finish().assert_success("appsrc producer")


def test_setting_gst_buffer_data_needs_a_writable_buffer_and_takes_one_kind():
    Gst = gst()
    buffer = Gst.Buffer.new_allocate(None, 16, None)
    cudaipc.set_gst_buffer_data(buffer, b"raw")
    cudaipc.set_gst_buffer_data(buffer, {"then": "a dict"})
    assert cudaipc.gst_buffer_data(buffer) == {"then": "a dict"}
    structure = buffer.get_custom_meta("CudaIpcFrameData").get_structure()
    assert structure.get_value("json") == '{"then":"a dict"}' and not structure.has_field("bytes")
    with pytest.raises(TypeError, match="not str"):
        cudaipc.set_gst_buffer_data(buffer, "text")
    assert cudaipc.gst_buffer_data(Gst.Buffer.new_allocate(None, 16, None)) is None
    # A sample holds a second reference: the buffer is no longer writable.
    sample = Gst.Sample.new(buffer, None, None, None)
    with pytest.raises(cudaipc.InvalidArgumentError, match="not writable"):
        cudaipc.set_gst_buffer_data(buffer, b"late")
    assert cudaipc.gst_buffer_data(sample.get_buffer()) == {"then": "a dict"}


def test_the_detector_example_sends_each_camera_frame_on_with_its_box(children):
    """examples/python/detector.py between a gst-launch camera and
    cudaipc_read.py --data: every frame arrives intact, in order, with the
    box around videotestsrc's ball."""
    source = "videotestsrc num-buffers=8 pattern=ball ! video/x-raw,format=RGB,width=64,height=48"
    reference = reference_checksums(source)
    camera, boxed = unique_channel("camera"), unique_channel("boxed")
    producer = children(gst_launch(f"{source} ! rscudaipcsink channel={camera} transport=host "
                            "wait-for-connection=1"))
    detector = children(example("detector.py", "--input", camera, "--output", boxed,
                                "--timeout", "20", "--wait-consumers", "1"))
    read = children(example("cudaipc_read.py", "--channel", boxed, "--timeout", "20",
                            "--data")).finish()
    read.assert_success("cudaipc_read.py")
    detector.finish().assert_success("detector.py")
    producer.finish().assert_success("camera")
    assert read.checksums() == reference
    lines = [line for line in read.stdout.splitlines() if line.startswith("frame ")]
    data = [json.loads(line.split(" data=", 1)[1]) for line in lines]
    assert [d["frame"] for d in data] == list(range(8))
    for d in data:
        [[x, y, w, h, score]] = d["boxes"]
        assert 0 <= x < x + w <= 64 and 0 <= y < y + h <= 48 and 0 < w < 64 and 0 < h < 48, d
        assert 0 < score <= 1, d
