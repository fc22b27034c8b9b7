#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""The cudaipc package on the cuda transport, with CuPy as the DLPack
consumer (GPU host). Prints ``SKIPPED: no CUDA device (...)`` and exits 0
where there is no GPU or no CuPy, unless CUDAIPC_REQUIRE_GPU=1 (then exit
1). Needs GST_PLUGIN_PATH at the plugin and NVRTC (scripts/nvrtc.sh) for
CuPy's kernels.

1. 4K RGB frames of ``cudatestsrc ! rscudaipcsink`` are read with
   ``cupy.from_dlpack`` on the consumer's own stream, without a copy (the
   array's pointer is the frame's), and verified there against the counter
   pattern (docs/test-elements.md), every frame in order.
2. The release gate: work queued on the consumer's stream before
   ``release()`` (a spin, then a copy of the frame) still sees the frame
   intact, although the producer writes into freed slots at once.
3. A CuPy producer (``Publisher(transport='cuda')``, arrays published on
   its own stream) feeds ``rscudaipcsrc ! cudaprocess verify=true``.
4. PyTorch (where it imports): 1 and 2 with ``torch.from_dlpack`` on
   torch's own stream (the counter pattern computed with torch), and 3
   with torch tensors published with ``stream=``.
5. A GStreamer application (PyGObject): ``rscudaipcsrc ! appsink``, each
   sample through ``cudaipc.from_gst_sample`` into CuPy on its own stream,
   zero copy (the array's pointer is the buffer's CudaIpcMeta device-ptr),
   with the release gate of 2 (the buffer's slot goes back after the work
   queued on the stream), frames verified against the counter pattern.
   Without PyGObject it prints ``SKIPPED: from_gst_sample (...)``: a GPU
   host without it runs tests/python/gpu_gst_app_check.py through the
   GStreamer runtime's Python (scripts/gst-runtime/make-runtime.sh, PYGI=1).

    GST_PLUGIN_PATH=target/release python3 tests/python/gpu_check.py
"""

import os
import subprocess
import sys
import time

import cudaipc
from glib_checks import assert_no_glib_complaints, checked_env
from gpu_skip import skip

WIDTH, HEIGHT, FRAMES = 3840, 2160, 60
ROW_BYTES = WIDTH * 3


def cupy_or_skip():
    try:
        import cupy
    except ImportError as e:
        skip(f"no CuPy: {e}")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            skip("CuPy sees no device")
    except Exception as e:  # CUDARuntimeError without a driver
        skip(f"CuPy: {e}")
    return cupy


def counter_rows(cp, frame, rows, row_bytes, plane=0):
    """The counter pattern of one plane of frame `frame` (rows of
    `row_bytes`), computed on the GPU on the current stream."""
    x = cp.arange(row_bytes, dtype=cp.uint32)[None, :]
    r = cp.arange(rows, dtype=cp.uint32)[:, None]
    base = cp.uint32((frame * 131 + plane * 17) & 0xFFFFFFFF)
    pattern = ((base + r * 7 + x * 3) & 0xFF).astype(cp.uint8)
    if row_bytes >= 8:
        for i in range(4):
            pattern[:, i] = (frame >> (8 * i)) & 0xFF
        pattern[:, 4] = (r[:, 0] & 0xFF).astype(cp.uint8)
        pattern[:, 5] = ((r[:, 0] >> 8) & 0xFF).astype(cp.uint8)
        pattern[:, 6] = plane
        pattern[:, 7] = 0xA5
    return pattern


def gst(pipeline):
    return subprocess.Popen(["gst-launch-1.0", "-q", *pipeline.split()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=checked_env())


def finish(process, what):
    try:
        out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    if process.returncode != 0:
        raise AssertionError(f"{what} failed ({process.returncode}):\n{out}\n{err}")
    assert_no_glib_complaints(what, err)


def producer(channel, frames):
    return gst(f"cudatestsrc num-buffers={frames} ! "
               f"video/x-raw(memory:CUDAMemory),format=RGB,width={WIDTH},height={HEIGHT} ! "
               f"rscudaipcsink channel={channel} wait-for-connection=1")


def read_and_verify(cp):
    channel = f"py-gpu-read-{os.getpid()}"
    process = producer(channel, FRAMES)
    stream = cp.cuda.Stream(non_blocking=True)
    numbers = []
    started = time.monotonic()
    # Every frame is verified; the producer is paced (a live channel).
    with cudaipc.Subscriber(channel, timeout=30, frames="every") as subscriber:
        for frame in subscriber:
            assert frame.device == "cuda" and frame.format == "RGB", frame
            with stream:
                # cupy passes its current stream: the frame is ordered on it.
                pixels = cp.from_dlpack(frame)
                assert pixels.data.ptr == frame.address, "not zero copy"
                assert pixels.shape == (HEIGHT, WIDTH, 3)
                rows = pixels.reshape(HEIGHT, ROW_BYTES)
                number = int(cp.asnumpy(rows[0, :4]).view("<u4")[0])
                wrong = int(cp.count_nonzero(rows != counter_rows(cp, number, HEIGHT, ROW_BYTES)))
            frame.release()
            assert wrong == 0, f"frame {number}: {wrong} bytes differ from the counter pattern"
            numbers.append(number)
    elapsed = time.monotonic() - started
    finish(process, "producer")
    assert numbers == list(range(FRAMES)), numbers
    print(f"read: {FRAMES} 4K frames verified on the consumer's stream "
          f"({FRAMES / elapsed:.1f} fps with verification)")


SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
"""


def release_gate(cp):
    channel = f"py-gpu-gate-{os.getpid()}"
    process = producer(channel, 40)
    spin = cp.RawKernel(SPIN, "spin")
    stream = cp.cuda.Stream(non_blocking=True)
    copies = []
    with cudaipc.Subscriber(channel, timeout=30, frames="every") as subscriber:
        for count, frame in enumerate(subscriber):
            with stream:
                pixels = cp.from_dlpack(frame)
                # About 20 ms of GPU time before the copy reads the slot.
                spin((1,), (1,), (cp.int64(40_000_000),))
                copies.append(pixels.reshape(HEIGHT, ROW_BYTES).copy())
            # Released at once: the slot may go back only after the copy.
            frame.release()
            if count >= 9:
                break
    stream.synchronize()
    for copy in copies:
        number = int(cp.asnumpy(copy[0, :4]).view("<u4")[0])
        wrong = int(cp.count_nonzero(copy != counter_rows(cp, number, HEIGHT, ROW_BYTES)))
        assert wrong == 0, f"release gate: frame {number} was overwritten ({wrong} bytes)"
    process.kill()
    process.communicate()
    print("release gate: work queued before release() saw every frame intact")


def publish_to_verify(cp):
    channel = f"py-gpu-publish-{os.getpid()}"
    consumer = gst(f"rscudaipcsrc channel={channel} connect-timeout=120000 ! "
                   "cudaprocess verify=true ! fakesink")
    stream = cp.cuda.Stream(non_blocking=True)
    with cudaipc.Publisher(channel, "RGB", WIDTH, HEIGHT, transport="cuda",
                           wait_for_consumers=1) as publisher:
        for number in range(FRAMES):
            with stream:
                pixels = counter_rows(cp, number, HEIGHT, ROW_BYTES).reshape(HEIGHT, WIDTH, 3)
            publisher.publish(pixels, pts=number * 33_333_333, stream=stream)
    finish(consumer, "rscudaipcsrc ! cudaprocess verify=true")
    print(f"publish: {FRAMES} 4K frames from CuPy passed cudaprocess verify=true")


def gst_app_gate(cp):
    try:
        import gi
        gi.require_version("Gst", "1.0")
        from gi.repository import Gst
    except (ImportError, ValueError) as e:
        print(f"SKIPPED: from_gst_sample (no PyGObject: {e}); without CuPy, the GStreamer "
              "runtime's Python checks it: $GST_RT/wrap/python3-gi tests/python/gpu_gst_app_check.py")
        return
    Gst.init(None)
    channel = f"py-gpu-appsink-{os.getpid()}"
    process = producer(channel, 40)
    pipeline = Gst.parse_launch(f"rscudaipcsrc channel={channel} connect-timeout=120000 "
                                "! appsink name=sink sync=false max-buffers=1")
    sink = pipeline.get_by_name("sink")
    pipeline.set_state(Gst.State.PLAYING)
    spin = cp.RawKernel(SPIN, "spin")
    stream = cp.cuda.Stream(non_blocking=True)
    copies = []
    while len(copies) < 10:
        sample = sink.emit("try-pull-sample", 30 * Gst.SECOND)
        assert sample is not None, "no sample from rscudaipcsrc ! appsink within 30 s"
        frame = cudaipc.from_gst_sample(sample)
        meta = sample.get_buffer().get_custom_meta("CudaIpcMeta").get_structure()
        assert frame.device == "cuda" and frame.format == "RGB", frame
        with stream:
            pixels = cp.from_dlpack(frame)
            assert pixels.data.ptr == meta.get_value("device-ptr"), "not zero copy"
            spin((1,), (1,), (cp.int64(40_000_000),))
            copies.append(pixels.reshape(HEIGHT, ROW_BYTES).copy())
        # Released at once, the sample dropped: the slot goes back only
        # after the copy.
        frame.release()
        del pixels, sample
    stream.synchronize()
    pipeline.set_state(Gst.State.NULL)
    numbers = []
    for copy in copies:
        number = int(cp.asnumpy(copy[0, :4]).view("<u4")[0])
        wrong = int(cp.count_nonzero(copy != counter_rows(cp, number, HEIGHT, ROW_BYTES)))
        assert wrong == 0, f"from_gst_sample: frame {number} was overwritten ({wrong} bytes)"
        numbers.append(number)
    assert numbers == list(range(10)), numbers
    process.kill()
    process.communicate()
    print("from_gst_sample: 10 4K frames of rscudaipcsrc ! appsink intact on CuPy's stream, "
          "zero copy, release after the stream's work")


def torch_counter_rows(torch, frame, rows, row_bytes):
    """counter_rows with PyTorch, on its current stream."""
    x = torch.arange(row_bytes, dtype=torch.int64, device="cuda")[None, :]
    r = torch.arange(rows, dtype=torch.int64, device="cuda")[:, None]
    pattern = (((frame * 131) & 0xFFFFFFFF) + r * 7 + x * 3).remainder(256).to(torch.uint8)
    for i in range(4):
        pattern[:, i] = (frame >> (8 * i)) & 0xFF
    pattern[:, 4] = (r[:, 0] & 0xFF).to(torch.uint8)
    pattern[:, 5] = ((r[:, 0] >> 8) & 0xFF).to(torch.uint8)
    pattern[:, 6] = 0
    pattern[:, 7] = 0xA5
    return pattern


class DLPackSpy:
    """Passes DLPack through and records what the consumer asked for."""

    def __init__(self, frame):
        self.frame, self.asked = frame, None

    def __dlpack_device__(self):
        return self.frame.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.asked = kwargs
        return self.frame.__dlpack__(**kwargs)


def torch_checks():
    """PyTorch as the consumer and as the producer: torch.from_dlpack on
    torch's own stream (zero copy, every byte checked, the release gate)
    and tensors published with stream=."""
    try:
        import torch
    except ImportError as e:
        print(f"SKIPPED: PyTorch checks (no torch: {e})")
        return
    channel = f"py-gpu-torch-{os.getpid()}"
    process = producer(channel, 40)
    stream = torch.cuda.Stream()
    numbers, copies, asked = [], [], None
    with cudaipc.Subscriber(channel, timeout=30, frames="every") as subscriber:
        for frame in subscriber:
            spy = DLPackSpy(frame)
            with torch.cuda.stream(stream):
                pixels = torch.from_dlpack(spy)
                assert pixels.data_ptr() == frame.address, "not zero copy"
                assert pixels.shape == (HEIGHT, WIDTH, 3) and pixels.dtype == torch.uint8
                rows = pixels.reshape(HEIGHT, ROW_BYTES)
                number = int(rows[0, :4].cpu().numpy().view("<u4")[0])
                wrong = int((rows != torch_counter_rows(torch, number, HEIGHT, ROW_BYTES))
                            .count_nonzero().item())
                if len(numbers) >= 30:
                    # The release gate: ~20 ms on torch's stream, then a copy,
                    # then release() at once.
                    torch.cuda._sleep(40_000_000)
                    copies.append(rows.clone())
            asked = spy.asked
            frame.release()
            del pixels, rows
            assert wrong == 0, f"torch: frame {number}: {wrong} bytes differ"
            numbers.append(number)
    stream.synchronize()
    finish(process, "producer")
    assert numbers == list(range(40)), numbers
    for copy in copies:
        number = int(copy[0, :4].cpu().numpy().view("<u4")[0])
        wrong = int((copy != torch_counter_rows(torch, number, HEIGHT, ROW_BYTES))
                    .count_nonzero().item())
        assert wrong == 0, f"torch release gate: frame {number} was overwritten ({wrong} bytes)"
    print(f"torch {torch.__version__}: 40 4K frames through torch.from_dlpack on its own stream, "
          f"zero copy, verified; release gate held for {len(copies)}; torch asked __dlpack__ "
          f"for {sorted(asked)} (max_version={asked.get('max_version')})")

    channel = f"py-gpu-torch-publish-{os.getpid()}"
    consumer = gst(f"rscudaipcsrc channel={channel} connect-timeout=120000 ! "
                   "cudaprocess verify=true ! fakesink")
    with cudaipc.Publisher(channel, "RGB", WIDTH, HEIGHT, transport="cuda",
                           wait_for_consumers=1) as publisher:
        for number in range(FRAMES):
            with torch.cuda.stream(stream):
                tensor = torch_counter_rows(torch, number, HEIGHT, ROW_BYTES)
            publisher.publish(tensor.reshape(HEIGHT, WIDTH, 3), pts=number * 33_333_333,
                              stream=stream)
    finish(consumer, "rscudaipcsrc ! cudaprocess verify=true")
    print(f"torch publish: {FRAMES} 4K tensors passed cudaprocess verify=true")


def main():
    cp = cupy_or_skip()
    read_and_verify(cp)
    release_gate(cp)
    publish_to_verify(cp)
    torch_checks()
    gst_app_gate(cp)
    print("gpu_check.py: all passed")


if __name__ == "__main__":
    main()
