// One process holding a CUDA context (the primary context, with a stream
// and 1 MiB of device memory in use) for ARGV[1] seconds: prints "ok" once
// it holds it, or "fail" and the driver's error name.
// (scripts/gpu-host/context-count.sh starts many of these)
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int hold_s = argc > 1 ? atoi(argv[1]) : 30;
  CUdevice device;
  CUcontext context;
  CUstream stream;
  CUdeviceptr memory;
  CUresult r;
  if ((r = cuInit(0)) || (r = cuDeviceGet(&device, 0)) ||
      (r = cuDevicePrimaryCtxRetain(&context, device)) || (r = cuCtxSetCurrent(context)) ||
      (r = cuMemAlloc(&memory, 1 << 20)) || (r = cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) ||
      (r = cuMemsetD8Async(memory, 1, 1 << 20, stream)) || (r = cuStreamSynchronize(stream))) {
    const char *name = "?";
    cuGetErrorName(r, &name);
    printf("fail %s\n", name);
    return 1;
  }
  printf("ok\n");
  fflush(stdout);
  sleep(hold_s);
  return 0;
}
