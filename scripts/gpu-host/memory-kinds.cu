// Bandwidth of a consumer's read of 4K RGB slots by where their memory comes
// from (issue 54, item 8: why the descriptor channel's row 5d beats the
// legacy channel's row 5): cuMemAlloc memory opened with cuIpcOpenMemHandle
// (a legacy channel) against cuMemCreate memory imported from a POSIX file
// descriptor and mapped read-only (a descriptor channel), each read in
// another process, beside the producer's own view of either. The kernel
// inverts a slot into a buffer of the reader's own, 16 bytes a thread, as
// `cudaprocess operation=invert` does; slots rotate so that the L2 cache
// holds none of them.
// Findings: docs/perf/2026-12-07-h100-legacy-granules.md.
// usage (GPU host): nvcc -O2 -o /tmp/memory-kinds scripts/gpu-host/memory-kinds.cu -lcuda
//   /tmp/memory-kinds [slots] [laps]   (run it with MPS off and on)
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#define CHECK(call)                                                              \
  do {                                                                           \
    CUresult r_ = (call);                                                        \
    if (r_ != CUDA_SUCCESS) {                                                    \
      const char *s_ = 0;                                                        \
      cuGetErrorString(r_, &s_);                                                 \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, s_ ? s_ : "?"); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

static const size_t FRAME = 3840 * 2160 * 3;

__global__ void invert(const uint4 *in, uint4 *out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = in[i];
    out[i] = make_uint4(~v.x, ~v.y, ~v.z, ~v.w);
  }
}

// GB/s (bytes read plus written) of `laps` laps over `slots` slots at `ptrs`.
static double time_reads(CUdeviceptr *ptrs, int slots, int laps, const char *what) {
  CUdeviceptr out;
  CHECK(cuMemAlloc(&out, FRAME));
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  size_t n = FRAME / 16;
  for (int i = 0; i < slots; i++)  // warm-up: every mapping touched once
    invert<<<132 * 8, 256>>>((const uint4 *)ptrs[i], (uint4 *)out, n);
  cudaEventRecord(start);
  for (int lap = 0; lap < laps; lap++)
    for (int i = 0; i < slots; i++)
      invert<<<132 * 8, 256>>>((const uint4 *)ptrs[i], (uint4 *)out, n);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  if (cudaGetLastError() != cudaSuccess) { fprintf(stderr, "launch failed\n"); exit(1); }
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  double frames = (double)laps * slots;
  double gbs = frames * 2.0 * FRAME / (ms * 1e6);
  printf("| %s | %d | %.1f | %.0f |\n", what, slots, 1000.0 * ms / frames, gbs);
  fflush(stdout);
  cuMemFree(out);
  return gbs;
}

static CUmemAllocationProp vmm_prop(void) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

static CUdeviceptr map_vmm(CUmemGenericAllocationHandle handle, size_t size, int read_only) {
  CUdeviceptr ptr;
  CHECK(cuMemAddressReserve(&ptr, size, 0, 0, 0));
  CHECK(cuMemMap(ptr, size, 0, handle, 0));
  CUmemAccessDesc access;
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = read_only ? CU_MEM_ACCESS_FLAGS_PROT_READ : CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(cuMemSetAccess(ptr, size, &access, 1));
  return ptr;
}

// The reader: argv = child legacy|fd slots laps size then per slot a legacy
// handle in hex or a file descriptor.
static int child(int argc, char **argv) {
  const char *kind = argv[2];
  int slots = atoi(argv[3]), laps = atoi(argv[4]);
  size_t size = strtoull(argv[5], 0, 10);
  cudaFree(0);
  CUdeviceptr *ptrs = (CUdeviceptr *)calloc(slots, sizeof *ptrs);
  for (int i = 0; i < slots; i++) {
    if (!strncmp(kind, "legacy", 6)) {
      CUipcMemHandle h;
      for (int b = 0; b < (int)sizeof h.reserved; b++) {
        unsigned v;
        sscanf(argv[6 + i] + 2 * b, "%2x", &v);
        h.reserved[b] = (char)v;
      }
      CHECK(cuIpcOpenMemHandle(&ptrs[i], h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    } else {
      CUmemGenericAllocationHandle handle;
      long fd = atol(argv[6 + i]);
      CHECK(cuMemImportFromShareableHandle(&handle, (void *)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
      ptrs[i] = map_vmm(handle, size, !strcmp(kind, "fd-ro"));
    }
  }
  char what[64];
  snprintf(what, sizeof what, "another process, %s", kind);
  time_reads(ptrs, slots, laps, what);
  return 0;
}

// Starts the reader of `kind` in another process; with `beside`, the
// producer meanwhile inverts its own view of the same slots (`mine`), so
// that the two contexts take turns on the GPU as a pair's do without MPS.
static void run_child(char *self, const char *kind, int slots, int laps, size_t size, char **handles,
                      CUdeviceptr *mine) {
  char **args = (char **)calloc(slots + 8, sizeof *args);
  char s[16], l[16], z[32];
  snprintf(s, sizeof s, "%d", slots);
  snprintf(l, sizeof l, "%d", laps);
  snprintf(z, sizeof z, "%zu", size);
  args[0] = self; args[1] = (char *)"child"; args[2] = (char *)kind;
  args[3] = s; args[4] = l; args[5] = z;
  for (int i = 0; i < slots; i++) args[6 + i] = handles[i];
  pid_t pid = fork();
  if (pid == 0) { execv(self, args); _exit(127); }
  if (mine) {
    sleep(1);  // the reader's context and mappings first, then both run
    char what[64];
    snprintf(what, sizeof what, "its producer, beside the %s reader", kind);
    time_reads(mine, slots, laps, what);
  }
  int status;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status)) fprintf(stderr, "%s reader failed\n", kind);
}

// `slots` cuMemAlloc allocations of `size` bytes, and (in `hex`) each one's
// IPC handle in hex for the reader's command line.
static CUdeviceptr *legacy_ring(int slots, size_t size, char ***hex) {
  CUdeviceptr *ptrs = (CUdeviceptr *)calloc(slots, sizeof *ptrs);
  *hex = (char **)calloc(slots, sizeof **hex);
  for (int i = 0; i < slots; i++) {
    CHECK(cuMemAlloc(&ptrs[i], size));
    CUipcMemHandle h;
    CHECK(cuIpcGetMemHandle(&h, ptrs[i]));
    (*hex)[i] = (char *)malloc(2 * sizeof h.reserved + 1);
    for (int b = 0; b < (int)sizeof h.reserved; b++)
      sprintf((*hex)[i] + 2 * b, "%02x", (unsigned char)h.reserved[b]);
  }
  return ptrs;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "child")) return child(argc, argv);
  int slots = argc > 1 ? atoi(argv[1]) : 64;
  int laps = argc > 2 ? atoi(argv[2]) : 20;
  cudaFree(0);
  printf("| memory, reader | slots | us a frame | GB/s read + written |\n|---|---|---|---|\n");
  // Legacy: cuMemAlloc, each exported as an IPC handle.
  char **hex;
  CUdeviceptr *legacy = legacy_ring(slots, FRAME, &hex);
  time_reads(legacy, slots, laps, "cuMemAlloc, its producer");
  // Descriptor: cuMemCreate rounded to the minimum granularity, exported as fds.
  CUmemAllocationProp prop = vmm_prop();
  size_t granularity = 0;
  CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  size_t size = (FRAME + granularity - 1) / granularity * granularity;
  CUdeviceptr *vmm = (CUdeviceptr *)calloc(slots, sizeof *vmm);
  char **fds = (char **)calloc(slots, sizeof *fds);
  for (int i = 0; i < slots; i++) {
    CUmemGenericAllocationHandle handle;
    CHECK(cuMemCreate(&handle, size, &prop, 0));
    vmm[i] = map_vmm(handle, size, 0);
    int fd = -1;
    CHECK(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    int inherited = dup(fd);  // dup clears close-on-exec
    fds[i] = (char *)malloc(16);
    snprintf(fds[i], 16, "%d", inherited);
  }
  time_reads(vmm, slots, laps, "cuMemCreate, its producer");
  printf("(granularity %zu bytes, slot %zu of a frame's %zu)\n", granularity, size, FRAME);
  // Legacy again, each allocation rounded up to the granularity as the
  // descriptor channel's are: whether the size alone makes the difference.
  char **hex_rounded;
  legacy_ring(slots, size, &hex_rounded);
  for (int round = 0; round < 2; round++) {
    run_child(argv[0], "legacy-rounded", slots, laps, size, hex_rounded, 0);
    run_child(argv[0], "legacy", slots, laps, FRAME, hex, 0);
    run_child(argv[0], "fd-ro", slots, laps, size, fds, 0);
    run_child(argv[0], "fd-rw", slots, laps, size, fds, 0);
  }
  // Both processes at once: time slices (without MPS) or side by side.
  for (int round = 0; round < 2; round++) {
    run_child(argv[0], "legacy", slots, 10 * laps, FRAME, hex, legacy);
    run_child(argv[0], "fd-ro", slots, 10 * laps, size, fds, vmm);
  }
  return 0;
}
