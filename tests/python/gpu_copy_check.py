#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""Keeping frames on the cuda transport (GPU host, CuPy): ``copy=True``
and ``frame.copy()``. Prints ``SKIPPED: no CUDA device (...)`` and exits 0
where there is no GPU or no CuPy, unless CUDAIPC_REQUIRE_GPU=1 (then exit
1). Needs GST_PLUGIN_PATH at the plugin and NVRTC (scripts/nvrtc.sh).

4K RGB frames of ``cudatestsrc ! rscudaipcsink slots=2`` are read by an
every-frame subscriber. For each, on the consumer's own stream: a spin
(about 20 ms of GPU time), then ``__dlpack__(stream=..., copy=True)``
through ``cupy.from_dlpack``, then ``release()`` at once. The copies are
device allocations of their own (not the frame's pointer), made after the
spin and before the producer writes the slot again (the release waits for
the copy), so every one matches the counter pattern of its frame, in
order, after the producer wrote both slots many times. ``frame.copy()``
(waited for on the host) is checked the same way, and the copies' memory
goes back to the device when they are deleted (the capsule's deleter).

    GST_PLUGIN_PATH=target/release python3 tests/python/gpu_copy_check.py
"""

import gc
import os

import cudaipc
from gpu_check import HEIGHT, ROW_BYTES, SPIN, WIDTH, counter_rows, cupy_or_skip, finish, gst

FRAMES = 12


class Copied:
    """`frame`, exported as a copy whatever the consumer asks (CuPy versions
    differ in passing `copy` on)."""

    def __init__(self, frame):
        self.frame = frame

    def __dlpack_device__(self):
        return self.frame.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        return self.frame.__dlpack__(**{**kwargs, "copy": True})


def frame_number(cp, copy):
    return int(cp.asnumpy(copy.reshape(HEIGHT, ROW_BYTES)[0, :4]).view("<u4")[0])


def assert_counter_pattern(cp, copies, what):
    numbers = []
    for copy in copies:
        number = frame_number(cp, copy)
        rows = copy.reshape(HEIGHT, ROW_BYTES)
        wrong = int(cp.count_nonzero(rows != counter_rows(cp, number, HEIGHT, ROW_BYTES)))
        assert wrong == 0, f"{what}: the copy of frame {number} has {wrong} bytes wrong"
        numbers.append(number)
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), numbers


def copies_on_the_consumers_stream(cp):
    channel = f"py-gpu-copy-{os.getpid()}"
    process = gst(f"cudatestsrc num-buffers={FRAMES * 2} ! "
                  f"video/x-raw(memory:CUDAMemory),format=RGB,width={WIDTH},height={HEIGHT} ! "
                  f"rscudaipcsink channel={channel} slots=2 wait-for-connection=1")
    spin = cp.RawKernel(SPIN, "spin")
    stream = cp.cuda.Stream(non_blocking=True)
    free_before = cp.cuda.runtime.memGetInfo()[0]
    kept, copied = [], []
    # Every frame is verified; the producer is paced (a live channel).
    with cudaipc.Subscriber(channel, timeout=30, frames="every") as subscriber:
        for count, frame in enumerate(subscriber):
            if count < FRAMES:
                with stream:
                    spin((1,), (1,), (cp.int64(40_000_000),))
                    array = cp.from_dlpack(Copied(frame))
                assert array.data.ptr != frame.address, "copy=True gave the frame itself"
                assert array.shape == (HEIGHT, WIDTH, 3)
                kept.append(array)
            else:
                owned = frame.copy()
                assert owned.address != frame.address and owned.stream is None
                copied.append(owned)
            # At once: the slot goes back only after the copy ran.
            frame.release()
    finish(process, "producer")
    stream.synchronize()
    assert_counter_pattern(cp, kept, "copy=True")
    print(f"copy=True: {FRAMES} 4K frames kept intact, copied on the consumer's stream "
          "after 20 ms of its work and released at once, through 2 slots")
    assert_counter_pattern(cp, [cp.from_dlpack(owned) for owned in copied], "frame.copy()")
    print(f"frame.copy(): {len(copied)} 4K frames kept intact")
    used = free_before - cp.cuda.runtime.memGetInfo()[0]
    assert used >= FRAMES * HEIGHT * ROW_BYTES, f"the copies took {used} bytes only"
    del kept, copied, array, owned
    gc.collect()
    # CuPy's pools keep what its own arrays used; the copies' memory is
    # cuMemAlloc's, freed by the deleters.
    cp.get_default_memory_pool().free_all_blocks()
    left = free_before - cp.cuda.runtime.memGetInfo()[0]
    assert left < 4 * HEIGHT * ROW_BYTES, f"{left} bytes not given back after the copies went"
    print("copies freed by their deleters")


def main():
    cp = cupy_or_skip()
    copies_on_the_consumers_stream(cp)
    print("gpu_copy_check.py: all passed")


if __name__ == "__main__":
    main()
