#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""cudaipc.from_gst_sample in a GStreamer application that has only
PyGObject and cudaipc (no CuPy, no NumPy): the GPU host's runtime Python
(``$GST_RT/wrap/python3-gi``, scripts/gst-runtime/make-runtime.sh with
PYGI=1) runs it.

A gst-launch-1.0 producer writes channel A; here ``rscudaipcsrc channel=A !
appsink`` turns each sample into a frame with ``cudaipc.from_gst_sample``,
checks that the frame is the buffer's memory (zero copy: the frame's
address, its DLPack tensor's and, on the GPU, its CUDA Array Interface
pointer are the buffer's CudaIpcMeta device-ptr; on the host transport, the
buffer's own mapping), and republishes it with ``cudaipc.Publisher`` to
channel B, which a second gst-launch-1.0 checks:

- ``--transport cuda`` (default, GPU host): 4K RGB frames of ``cudatestsrc
  pattern=counter``, republished on the legacy default stream (the copy
  waits there for the source's stream; the release of each frame waits for
  the copy), verified by ``rscudaipcsrc ! cudaprocess verify=true
  verify-fatal=true``: every frame intact, none missing or stale. Without a
  GPU or without PyGObject it prints ``SKIPPED: no CUDA device (...)`` and
  exits 0, unless CUDAIPC_REQUIRE_GPU=1 (then exit 1).
- ``--transport host`` (anywhere): ``videotestsrc`` frames, read here and
  republished on the host transport, each frame's SHA-1 (here and after
  ``rscudaipcsrc ! checksumsink``) that of the source's.

    $GST_RT/wrap/python3-gi tests/python/gpu_gst_app_check.py
    python3 tests/python/gpu_gst_app_check.py --transport host

GST_PLUGIN_PATH must point at the plugin and PYTHONPATH at the cudaipc
package if it is not installed: on the GPU host, .gpu-host126/env126.sh
sets the first and python3-gi puts .gpu-host126/python (staged by
scripts/gpu-host/stage.sh --gst126) on sys.path.
"""

import argparse
import ctypes
import hashlib
import os
import re
import subprocess
import sys

from glib_checks import assert_no_glib_complaints, checked_env
from gpu_skip import skip

CU_STREAM_LEGACY = 1


def cuda_device_or_skip():
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        skip(f"no CUDA driver: {e}")
    code = cuda.cuInit(0)
    if code != 0:
        skip(f"cuInit failed with CUresult {code}")
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        skip("the driver sees no device")


def gst_or_skip(transport):
    try:
        import gi
        gi.require_version("Gst", "1.0")
        from gi.repository import Gst
    except (ImportError, ValueError) as e:
        if transport == "host":
            sys.exit(f"FAILED: no PyGObject ({e})")
        skip(f"no PyGObject: {e}; run it with $GST_RT/wrap/python3-gi")
    Gst.init(None)
    if Gst.ElementFactory.find("rscudaipcsrc") is None:
        sys.exit("FAILED: no rscudaipcsrc: GST_PLUGIN_PATH does not point at the plugin")
    return Gst


def gst(arguments):
    return subprocess.Popen(["gst-launch-1.0", *arguments.split()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=checked_env())


def finish(process, what, timeout=120):
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"{what} did not end within {timeout} s:\n{out}\n{err}")
    if process.returncode != 0:
        raise AssertionError(f"{what} failed ({process.returncode}):\n{out}\n{err}")
    assert_no_glib_complaints(what, err)
    return out


class _MapInfo(ctypes.Structure):
    """GstMapInfo (gst/gstmemory.h)."""

    _fields_ = [("memory", ctypes.c_void_p), ("flags", ctypes.c_int), ("data", ctypes.c_void_p),
                ("size", ctypes.c_size_t), ("maxsize", ctypes.c_size_t),
                ("user_data", ctypes.c_void_p * 4), ("_gst_reserved", ctypes.c_void_p * 4)]


def mapped_address(buffer):
    """Where a system-memory buffer's bytes are (a read map of its own,
    through libgstreamer: PyGObject's map copies them)."""
    lib = ctypes.CDLL("libgstreamer-1.0.so.0")
    lib.gst_buffer_map.argtypes = [ctypes.c_void_p, ctypes.POINTER(_MapInfo), ctypes.c_int]
    lib.gst_buffer_unmap.argtypes = [ctypes.c_void_p, ctypes.POINTER(_MapInfo)]
    info = _MapInfo()
    # hash() of a PyGObject boxed object is its address: the GstBuffer.
    assert lib.gst_buffer_map(hash(buffer), ctypes.byref(info), 1), "the buffer cannot be mapped"
    address = info.data
    lib.gst_buffer_unmap(hash(buffer), ctypes.byref(info))
    return address


def dlpack_data(frame):
    """The data pointer of the frame's DLPack 1.x tensor, read from its
    capsule (``stream=-1``: no ordering, nothing queued)."""
    capsule = frame.__dlpack__(stream=-1, max_version=(1, 0))
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    managed = get_pointer(capsule, b"dltensor_versioned")
    # DLManagedTensorVersioned: version (2 x u32), manager_ctx, deleter,
    # flags (u64), then the DLTensor (data, device, ndim, dtype, shape,
    # strides, byte_offset).
    data = ctypes.c_void_p.from_address(managed + 32).value or 0
    byte_offset = ctypes.c_uint64.from_address(managed + 32 + 8 + 8 + 4 + 4 + 8 + 8).value
    return data + byte_offset


class Channels:
    def __init__(self, transport):
        self.transport = transport
        self.a = f"py-gst-app-a-{os.getpid()}"
        self.b = f"py-gst-app-b-{os.getpid()}"
        if transport == "cuda":
            self.width, self.height, self.frames = 3840, 2160, 60
            caps = f"video/x-raw(memory:CUDAMemory),format=RGB,width={self.width},height={self.height}"
            self.source = f"cudatestsrc num-buffers={self.frames} pattern=counter ! {caps}"
            self.sink_options = ""
            self.checker = "cudaprocess verify=true verify-fatal=true ! fakesink silent=false"
        else:
            self.width, self.height, self.frames = 320, 240, 30
            caps = f"video/x-raw,format=RGB,width={self.width},height={self.height}"
            self.source = f"videotestsrc num-buffers={self.frames} pattern=ball ! {caps}"
            self.sink_options = " transport=host"
            self.checker = "checksumsink"


def reference_checksums(channels):
    out = finish(gst(f"-q {channels.source} ! checksumsink"), "the reference pipeline")
    return [line.split()[1] for line in out.splitlines() if len(line.split()) >= 2]


def republish(Gst, channels, on_frame):
    """rscudaipcsrc ! appsink on channel A until its end of stream, each
    frame checked by on_frame and published to channel B."""
    import cudaipc

    # Every frame is checked: the producer is paced (a live channel).
    pipeline = Gst.parse_launch(f"rscudaipcsrc channel={channels.a} connect-timeout=120000 "
                                "frames=every ! appsink name=sink sync=false max-buffers=1")
    sink = pipeline.get_by_name("sink")
    pipeline.set_state(Gst.State.PLAYING)
    count = 0
    try:
        with cudaipc.Publisher(channels.b, "RGB", channels.width, channels.height,
                               transport=channels.transport, wait_for_consumers=1) as publisher:
            while True:
                sample = sink.emit("try-pull-sample", 30 * Gst.SECOND)
                if sample is None:
                    error = pipeline.get_bus().pop_filtered(Gst.MessageType.ERROR)
                    assert error is None, error.parse_error()
                    assert sink.get_property("eos"), "no sample from rscudaipcsrc ! appsink within 30 s"
                    break
                frame = cudaipc.from_gst_sample(sample)
                assert (frame.format, frame.width, frame.height) == ("RGB", channels.width, channels.height), frame
                assert dlpack_data(frame) == frame.address, "the DLPack tensor is not the frame"
                on_frame(frame, sample.get_buffer(), count)
                stream = CU_STREAM_LEGACY if channels.transport == "cuda" else None
                assert publisher.publish(frame, pts=frame.pts, stream=stream), "frame dropped"
                # The slot goes back after the copy queued on the stream.
                frame.release()
                count += 1
    finally:
        pipeline.set_state(Gst.State.NULL)
    return count


def check(Gst, transport):
    channels = Channels(transport)
    reference = reference_checksums(channels) if transport == "host" else None
    checker = gst(f"-v rscudaipcsrc channel={channels.b} connect-timeout=120000 ! {channels.checker}")
    producer = gst(f"-q {channels.source} ! rscudaipcsink channel={channels.a} "
                   f"wait-for-connection=1{channels.sink_options}")
    seen = []

    def on_cuda_frame(frame, buffer, _):
        meta = buffer.get_custom_meta("CudaIpcMeta")
        assert meta is not None, "the buffer has no CudaIpcMeta"
        assert frame.device == "cuda", frame
        device_ptr = meta.get_structure().get_value("device-ptr")
        assert frame.address == device_ptr, "not zero copy: the frame is not the buffer's slot"
        interface = frame.__cuda_array_interface__
        assert interface["data"][0] == device_ptr and interface["shape"] == (channels.height, channels.width, 3)
        seen.append(frame.seq)

    def on_host_frame(frame, buffer, number):
        assert frame.device == "cpu" and frame.__dlpack_device__() == (1, 0), frame
        assert frame.address == mapped_address(buffer), "not zero copy: the frame is not the buffer's map"
        digest = hashlib.sha1(ctypes.string_at(frame.address, frame.nbytes)).hexdigest()
        assert digest == reference[number], f"frame {number}: SHA-1 {digest}, the source's {reference[number]}"
        seen.append(frame.seq)

    try:
        count = republish(Gst, channels, on_cuda_frame if transport == "cuda" else on_host_frame)
        out = finish(checker, f"rscudaipcsrc ! {channels.checker}")
        finish(producer, "the producer")
    finally:
        for process in (checker, producer):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert count == channels.frames, f"{count} frames of {channels.frames} came through the appsink"
    # seq: the buffer's offset, the producer's frame number.
    assert seen == list(range(channels.frames)), f"frames missing or out of order: {seen}"
    if transport == "cuda":
        # -v prints each buffer fakesink took; verify-fatal=true failed the
        # pipeline on a corrupt, missing or stale frame.
        checked = len(re.findall(r"last-message = chain", out))
        assert checked == channels.frames, f"cudaprocess checked {checked} frames of {channels.frames}"
        print(f"from_gst_sample: {count} 4K frames of rscudaipcsrc ! appsink, zero copy (frame, DLPack "
              "and CUDA Array Interface pointers are the CudaIpcMeta device-ptr), republished on the "
              "legacy stream, verified by cudaprocess verify=true")
    else:
        sums = [line.split()[1] for line in out.splitlines()
                if len(line.split()) >= 2 and len(line.split()[1]) == 40]
        assert sums == reference, f"channel B's frames differ from the source's:\n{sums}\n{reference}"
        print(f"from_gst_sample: {count} frames of rscudaipcsrc ! appsink on the host transport, zero copy, "
              "intact, republished intact")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transport", choices=("cuda", "host"), default="cuda")
    transport = parser.parse_args().transport
    Gst = gst_or_skip(transport)
    if transport == "cuda":
        cuda_device_or_skip()
    check(Gst, transport)
    print(f"gpu_gst_app_check.py: all passed ({Gst.version_string()}, Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
