# SPDX-License-Identifier: MPL-2.0
"""cudaipc.from_gst_sample in a GStreamer application (PyGObject):
``rscudaipcsrc ! appsink`` here, a gst-launch-1.0 producer on the host
transport in another process; frames intact, zero copy, held until released;
a CUDA buffer's meta read without a GPU; every bad buffer an exception."""

import ctypes
import gc
import hashlib
import subprocess
import sys
from pathlib import Path

import cudaipc
import numpy as np
import pytest

from conftest import gst, reference_checksums, unique_channel
from glib_checks import assert_no_glib_complaints, checked_env
from test_host import assert_zero_copy_read_only

gi = pytest.importorskip(
    "gi", reason="PyGObject (Debian: python3-gi) is not installed: scripts/setup.sh installs it")
gi.require_version("Gst", "1.0")
gi.require_version("GstVideo", "1.0")
from gi.repository import Gst, GstVideo  # noqa: E402

Gst.init(None)


def plugin():
    factory = Gst.ElementFactory.find("rscudaipcsrc")
    assert factory is not None and factory.load() is not None, "GST_PLUGIN_PATH has no plugin"


def refcount(buffer):
    """The GstBuffer's reference count (GstMiniObject: GType, then gint),
    once Python dropped the wrappers it no longer uses: a collection that
    runs between two readings (an allocation can start one) would free an
    earlier sample's wrapper and change the count."""
    gc.collect()
    return ctypes.c_int.from_address(hash(buffer) + 8).value


def pull_all(channel, on_frame):
    """Runs rscudaipcsrc ! appsink until the end of the stream, handing each
    sample's frame to on_frame."""
    # No last sample: appsink would keep the previous buffer until the next
    # one is rendered, in its streaming thread, and the refcounts the tests
    # read would change under them.
    # frames=every: the producer (sync=true at 30 FPS) is paced, and a
    # consumer at its own pace that falls behind on a loaded machine would
    # miss frames the tests compare.
    pipeline = Gst.parse_launch(
        f"rscudaipcsrc channel={channel} connect-timeout=120000 frames=every "
        "! appsink name=sink sync=false max-buffers=1 enable-last-sample=false")
    sink = pipeline.get_by_name("sink")
    pipeline.set_state(Gst.State.PLAYING)
    try:
        while True:
            sample = sink.emit("try-pull-sample", 20 * Gst.SECOND)
            if sample is None:
                error = pipeline.get_bus().pop_filtered(Gst.MessageType.ERROR)
                assert error is None, error.parse_error()
                assert sink.get_property("eos"), "no sample within 20 s"
                return
            on_frame(cudaipc.from_gst_sample(sample), sample.get_buffer())
    finally:
        pipeline.set_state(Gst.State.NULL)


@pytest.mark.parametrize("fmt", ["RGB", "GRAY8", "NV12"])
def test_appsink_frames_intact_zero_copy_held_until_released(children, fmt):
    plugin()
    source = f"videotestsrc num-buffers=12 pattern=ball ! video/x-raw,format={fmt},width=64,height=48"
    reference = reference_checksums(source)
    channel = unique_channel("appsink")
    producer = children(gst(f"{source} ! rscudaipcsink channel={channel} transport=host "
                            "ipc-mode=fd slots=6 wait-for-connection=1"))
    sums = []
    kept = {}

    def on_frame(frame, buffer):
        assert (frame.format, frame.width, frame.height, frame.device) == (fmt, 64, 48, "cpu")
        assert frame.__dlpack_device__() == (1, 0)
        planes = [np.from_dlpack(plane) for plane in frame.planes]
        for plane in planes:
            assert_zero_copy_read_only(frame, plane)
        sums.append(hashlib.sha1(b"".join(p.tobytes() for p in planes)).hexdigest())
        # Copies, the way to keep a frame, hold nothing of the buffer.
        references = refcount(buffer)
        copies = [np.from_dlpack(plane, copy=True) for plane in frame.planes]
        copied = frame.copy()
        assert refcount(buffer) == references
        assert not frame.address <= copied.address < frame.address + frame.nbytes
        for plane, copy, of_copied in zip(planes, copies, copied.planes):
            assert np.array_equal(copy, plane) and copy.flags.writeable
            assert np.array_equal(np.from_dlpack(of_copied), plane)
        if not kept:
            # The first frame's arrays outlive its release: they hold the
            # buffer (and its slot) until they are gone.
            held = refcount(buffer)
            frame.release()
            assert refcount(buffer) == held
            with pytest.raises(BufferError, match="released"):
                np.from_dlpack(frame.planes[0])
            kept["planes"] = planes
        else:
            frame.release()

    pull_all(channel, on_frame)
    assert sums == reference
    # Frames 2 to 12 went through the producer's 6 slots: the one the
    # first frame's arrays hold was not written again.
    first = hashlib.sha1(b"".join(p.tobytes() for p in kept.pop("planes"))).hexdigest()
    assert first == reference[0]
    gc.collect()
    producer.finish().assert_success("producer")


def cuda_buffer(size, device_ptr, cuda_stream, video_meta=None):
    """A buffer as rscudaipcsrc pushes it on the cuda transport, without a
    GPU: a CudaIpcMeta (the plugin registers it) filled through
    libgstreamer, PyGObject's structure being a copy."""
    lib = ctypes.CDLL("libgstreamer-1.0.so.0")
    lib.gst_buffer_add_custom_meta.restype = ctypes.c_void_p
    lib.gst_buffer_add_custom_meta.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.gst_custom_meta_get_structure.restype = ctypes.c_void_p
    lib.gst_custom_meta_get_structure.argtypes = [ctypes.c_void_p]
    buffer = Gst.Buffer.new()
    meta = lib.gst_buffer_add_custom_meta(hash(buffer), b"CudaIpcMeta")
    assert meta, "CudaIpcMeta is not registered: the plugin is not loaded"
    structure = lib.gst_custom_meta_get_structure(meta)
    g_type_int, g_type_uint64 = 6 << 2, 11 << 2
    lib.gst_structure_set(
        ctypes.c_void_p(structure),
        b"device-ptr", ctypes.c_size_t(g_type_uint64), ctypes.c_uint64(device_ptr),
        b"pitch", ctypes.c_size_t(g_type_int), ctypes.c_int(0),
        b"size", ctypes.c_size_t(g_type_uint64), ctypes.c_uint64(size),
        b"device-id", ctypes.c_size_t(g_type_int), ctypes.c_int(0),
        b"cuda-stream", ctypes.c_size_t(g_type_uint64), ctypes.c_uint64(cuda_stream),
        None)
    if video_meta is not None:
        offsets, strides = video_meta
        GstVideo.buffer_add_video_meta_full(
            buffer, GstVideo.VideoFrameFlags.NONE, GstVideo.VideoFormat.NV12, 64, 48, 2,
            offsets + [0, 0], strides + [0, 0])
    return buffer


def test_a_cuda_buffer_is_exported_from_its_meta():
    plugin()
    caps = Gst.Caps.from_string("video/x-raw(memory:CUDAMemory),format=NV12,width=64,height=48")
    # Padded rows (128 bytes) and a gap before the chroma: the video meta's.
    buffer = cuda_buffer(128 * 48 + 256 + 128 * 24, 0x7F00_0000_0000, 0x1234,
                         ([0, 128 * 48 + 256], [128, 128]))
    held = refcount(buffer)
    frame = cudaipc.from_gst_buffer(buffer, caps)
    assert refcount(buffer) == held + 1
    assert (frame.device, frame.device_id, frame.stream) == ("cuda", 0, 0x1234)
    assert frame.__dlpack_device__() == (2, 0)
    y, uv = (plane.__cuda_array_interface__ for plane in frame.planes)
    assert (y["data"], y["shape"], y["strides"], y["stream"]) == \
        ((0x7F00_0000_0000, True), (48, 64), (128, 1), 0x1234)
    assert (uv["data"][0], uv["shape"], uv["strides"]) == \
        (0x7F00_0000_0000 + 128 * 48 + 256, (24, 32, 2), (128, 2, 1))
    # stream=-1 asks for no ordering: a capsule without touching CUDA.
    capsule = frame.planes[0].__dlpack__(stream=-1, max_version=(1, 0))
    frame.release()
    assert refcount(buffer) == held + 1, "the capsule holds the buffer"
    del capsule
    gc.collect()
    assert refcount(buffer) == held


def test_bad_buffers_are_exceptions():
    plugin()
    rgb = Gst.Caps.from_string("video/x-raw,format=RGB,width=64,height=48")
    cuda_rgb = Gst.Caps.from_string("video/x-raw(memory:CUDAMemory),format=RGB,width=64,height=48")
    with pytest.raises(cudaipc.InvalidArgumentError, match="output-memory=cudaipc"):
        cudaipc.from_gst_buffer(Gst.Buffer.new_allocate(None, 64 * 48 * 3, None), cuda_rgb)
    with pytest.raises(cudaipc.InvalidArgumentError, match="beyond the frame of 100 bytes"):
        cudaipc.from_gst_buffer(Gst.Buffer.new_allocate(None, 100, None), rgb)
    with pytest.raises(cudaipc.InvalidArgumentError, match="beyond the frame"):
        cudaipc.from_gst_buffer(cuda_buffer(1000, 0x7F00_0000_0000, 0x1234), cuda_rgb)
    with pytest.raises(cudaipc.UnsupportedFormatError, match="YUY2"):
        cudaipc.from_gst_buffer(Gst.Buffer.new_allocate(None, 64 * 48 * 2, None),
                                Gst.Caps.from_string("video/x-raw,format=YUY2,width=64,height=48"))
    with pytest.raises(cudaipc.InvalidArgumentError, match="video/x-raw"):
        cudaipc.from_gst_buffer(Gst.Buffer.new_allocate(None, 64, None),
                                Gst.Caps.from_string("audio/x-raw,format=S16LE,rate=48000,channels=1"))
    with pytest.raises(cudaipc.InvalidArgumentError, match="not fixed"):
        cudaipc.from_gst_buffer(Gst.Buffer.new_allocate(None, 64, None),
                                Gst.Caps.from_string("video/x-raw,format={RGB,NV12}"))
    with pytest.raises(cudaipc.InvalidArgumentError, match="no sample"):
        cudaipc.from_gst_sample(None)


def test_without_a_gpu_ordering_a_cuda_buffer_is_an_exception():
    try:
        subprocess.run(["nvidia-smi"], capture_output=True, check=True)
        pytest.skip("a GPU is here (gpu_check.py covers the cuda transport)")
    except (OSError, subprocess.CalledProcessError):
        pass
    plugin()
    cuda_rgb = Gst.Caps.from_string("video/x-raw(memory:CUDAMemory),format=RGB,width=64,height=48")
    frame = cudaipc.from_gst_buffer(cuda_buffer(64 * 48 * 3, 0x7F00_0000_0000, 0x1234), cuda_rgb)
    with pytest.raises(cudaipc.DeviceError):
        frame.__dlpack__()
    frame.release()


def test_the_gpu_host_appsink_check_passes_on_the_host_transport():
    check = Path(__file__).with_name("gpu_gst_app_check.py")
    done = subprocess.run([sys.executable, str(check), "--transport", "host"],
                          capture_output=True, text=True, timeout=120, env=checked_env())
    assert done.returncode == 0, f"{check.name} failed:\n{done.stdout}\n{done.stderr}"
    assert_no_glib_complaints(check.name, done.stderr)
    assert "from_gst_sample: 30 frames" in done.stdout and "all passed" in done.stdout, done.stdout
