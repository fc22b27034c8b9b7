/* SPDX-License-Identifier: MPL-2.0
 *
 * A census of the CUDA driver API calls of one process, for
 * scripts/gpu-host/census.sh (docs/performance.md, "Driver calls per frame").
 *
 * The plugin and the cudaipc package load libcuda with dlopen (cudarc), so an
 * LD_PRELOAD shim can miss their calls; CUPTI's callback API sees every
 * driver call however it was reached. The driver loads this library itself
 * at cuInit when CUDA_INJECTION64_PATH names it, and calls
 * InitializeInjection().
 *
 * Counted, on API entry: every driver call, by callback id (its name from
 * CUPTI); for the cuMemcpy family the bytes asked for, and the copies of at
 * least CENSUS_COPY_MIN_BYTES (default 1 MiB: "frame-sized"); copies whose
 * size cannot be read here (batch copies, the 32-bit v1 forms with
 * descriptors, a member CUPTI adds later) are counted apart as unsized.
 *
 * At exit the process writes $CUDAIPC_CENSUS_DIR/census-<pid>.txt (default
 * /tmp): "#" lines (pid, command line, copy figures), then "name count" for
 * every call made. On a CUPTI error it prints one line to stderr and counts
 * nothing (no report): it never stops its host process.
 *
 * Build (census.sh does):
 *   gcc -std=c99 -shared -fPIC -O2 -I$CUPTI/include -I$CUDA/include census.c \
 *     $CUPTI/lib64/libcupti.so -Wl,-rpath,$CUPTI/lib64 -o libcensus.so
 */
#define _GNU_SOURCE
/* cupti.h brings the driver calls' parameter structs (generated_cuda_meta.h). */
#include <cupti.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define CENSUS_EXPORT __attribute__((visibility("default")))
#define MAX_CBID ((unsigned)CUPTI_DRIVER_TRACE_CBID_SIZE)

static uint64_t counts[MAX_CBID];
/* CUPTI's name of each callback id: static strings of libcupti. */
static const char *names[MAX_CBID];
static uint64_t copies;             /* cuMemcpy* calls */
static uint64_t copies_frame_sized; /* of >= copy_min_bytes */
static uint64_t copies_unsized;     /* size not readable here */
static uint64_t copy_bytes;         /* bytes of all sized copies */
static uint64_t out_of_range;       /* callback ids >= MAX_CBID */
static uint64_t copy_min_bytes = 1048576;
static int initialized;
static int reported;
static pid_t census_pid;
static CUpti_SubscriberHandle subscriber;

#define ADD(var, n) __atomic_fetch_add(&(var), (uint64_t)(n), __ATOMIC_RELAXED)
#define LOAD(var) __atomic_load_n(&(var), __ATOMIC_RELAXED)

#define BYTES(fn) ((uint64_t)((const fn##_params *)params)->ByteCount)
#define CASE_BYTES(fn)                                                         \
  case CUPTI_DRIVER_TRACE_CBID_##fn:                                           \
    *bytes = BYTES(fn);                                                        \
    return 1;
#define CASE_2D(fn)                                                            \
  case CUPTI_DRIVER_TRACE_CBID_##fn: {                                         \
    const fn##_params *p = (const fn##_params *)params;                        \
    if (!p->pCopy)                                                             \
      return 0;                                                                \
    *bytes = (uint64_t)p->pCopy->WidthInBytes * p->pCopy->Height;              \
    return 1;                                                                  \
  }
#define CASE_3D(fn)                                                            \
  case CUPTI_DRIVER_TRACE_CBID_##fn: {                                         \
    const fn##_params *p = (const fn##_params *)params;                        \
    if (!p->pCopy)                                                             \
      return 0;                                                                \
    *bytes = (uint64_t)p->pCopy->WidthInBytes * p->pCopy->Height *             \
             (p->pCopy->Depth ? p->pCopy->Depth : 1);                          \
    return 1;                                                                  \
  }

/* The bytes a copy call asks for: 1 and *bytes where this knows the call's
 * parameters, 0 otherwise. */
static int copy_size(CUpti_CallbackId cbid, const void *params,
                     uint64_t *bytes) {
  if (!params)
    return 0;
  switch (cbid) {
    CASE_BYTES(cuMemcpy)
    CASE_BYTES(cuMemcpy_ptds)
    CASE_BYTES(cuMemcpyAsync)
    CASE_BYTES(cuMemcpyAsync_ptsz)
    CASE_BYTES(cuMemcpyPeer)
    CASE_BYTES(cuMemcpyPeer_ptds)
    CASE_BYTES(cuMemcpyPeerAsync)
    CASE_BYTES(cuMemcpyPeerAsync_ptsz)
    CASE_BYTES(cuMemcpyHtoD_v2)
    CASE_BYTES(cuMemcpyHtoD_v2_ptds)
    CASE_BYTES(cuMemcpyDtoH_v2)
    CASE_BYTES(cuMemcpyDtoH_v2_ptds)
    CASE_BYTES(cuMemcpyDtoD_v2)
    CASE_BYTES(cuMemcpyDtoD_v2_ptds)
    CASE_BYTES(cuMemcpyDtoA_v2)
    CASE_BYTES(cuMemcpyDtoA_v2_ptds)
    CASE_BYTES(cuMemcpyAtoD_v2)
    CASE_BYTES(cuMemcpyAtoD_v2_ptds)
    CASE_BYTES(cuMemcpyHtoA_v2)
    CASE_BYTES(cuMemcpyHtoA_v2_ptds)
    CASE_BYTES(cuMemcpyAtoH_v2)
    CASE_BYTES(cuMemcpyAtoH_v2_ptds)
    CASE_BYTES(cuMemcpyAtoA_v2)
    CASE_BYTES(cuMemcpyAtoA_v2_ptds)
    CASE_BYTES(cuMemcpyHtoDAsync_v2)
    CASE_BYTES(cuMemcpyHtoDAsync_v2_ptsz)
    CASE_BYTES(cuMemcpyDtoHAsync_v2)
    CASE_BYTES(cuMemcpyDtoHAsync_v2_ptsz)
    CASE_BYTES(cuMemcpyDtoDAsync_v2)
    CASE_BYTES(cuMemcpyDtoDAsync_v2_ptsz)
    CASE_BYTES(cuMemcpyHtoAAsync_v2)
    CASE_BYTES(cuMemcpyHtoAAsync_v2_ptsz)
    CASE_BYTES(cuMemcpyAtoHAsync_v2)
    CASE_BYTES(cuMemcpyAtoHAsync_v2_ptsz)
    /* The 32-bit forms of CUDA 3.x, for old binaries. */
    CASE_BYTES(cuMemcpyHtoD)
    CASE_BYTES(cuMemcpyDtoH)
    CASE_BYTES(cuMemcpyDtoD)
    CASE_BYTES(cuMemcpyHtoDAsync)
    CASE_BYTES(cuMemcpyDtoHAsync)
    CASE_BYTES(cuMemcpyDtoDAsync)
    CASE_2D(cuMemcpy2D_v2)
    CASE_2D(cuMemcpy2D_v2_ptds)
    CASE_2D(cuMemcpy2DUnaligned_v2)
    CASE_2D(cuMemcpy2DUnaligned_v2_ptds)
    CASE_2D(cuMemcpy2DAsync_v2)
    CASE_2D(cuMemcpy2DAsync_v2_ptsz)
    CASE_3D(cuMemcpy3D_v2)
    CASE_3D(cuMemcpy3D_v2_ptds)
    CASE_3D(cuMemcpy3DAsync_v2)
    CASE_3D(cuMemcpy3DAsync_v2_ptsz)
    CASE_3D(cuMemcpy3DPeer)
    CASE_3D(cuMemcpy3DPeer_ptds)
    CASE_3D(cuMemcpy3DPeerAsync)
    CASE_3D(cuMemcpy3DPeerAsync_ptsz)
  default:
    return 0;
  }
}

static void CUPTIAPI on_call(void *userdata, CUpti_CallbackDomain domain,
                             CUpti_CallbackId cbid, const void *data) {
  const CUpti_CallbackData *info = (const CUpti_CallbackData *)data;
  uint64_t bytes = 0;
  (void)userdata;
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || !info ||
      info->callbackSite != CUPTI_API_ENTER)
    return;
  if (cbid >= MAX_CBID) {
    ADD(out_of_range, 1);
    return;
  }
  if (!__atomic_load_n(&names[cbid], __ATOMIC_RELAXED) && info->functionName)
    __atomic_store_n(&names[cbid], info->functionName, __ATOMIC_RELAXED);
  ADD(counts[cbid], 1);
  if (!info->functionName || strncmp(info->functionName, "cuMemcpy", 8) != 0)
    return;
  ADD(copies, 1);
  if (copy_size(cbid, info->functionParams, &bytes)) {
    ADD(copy_bytes, bytes);
    if (bytes >= copy_min_bytes)
      ADD(copies_frame_sized, 1);
  } else {
    ADD(copies_unsized, 1);
  }
}

/* The command line, NULs as spaces, newlines dropped. */
static void read_cmdline(char *out, size_t size) {
  ssize_t n = 0;
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  out[0] = '\0';
  if (fd < 0)
    return;
  n = read(fd, out, size - 1);
  close(fd);
  if (n <= 0) {
    out[0] = '\0';
    return;
  }
  out[n] = '\0';
  for (ssize_t i = 0; i < n; i++)
    if (out[i] == '\0' || out[i] == '\n')
      out[i] = ' ';
  while (n > 0 && out[n - 1] == ' ')
    out[--n] = '\0';
}

static void report(void) {
  const char *dir = getenv("CUDAIPC_CENSUS_DIR");
  char path[4096], tmp[4200], cmdline[4096];
  FILE *f;
  /* Once, and only in the process that was counted (not a forked child). */
  if (!initialized || getpid() != census_pid ||
      __atomic_exchange_n(&reported, 1, __ATOMIC_ACQ_REL))
    return;
  if (!dir || !*dir)
    dir = "/tmp";
  snprintf(path, sizeof path, "%s/census-%ld.txt", dir, (long)census_pid);
  snprintf(tmp, sizeof tmp, "%s.part", path);
  f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "census: cannot write %s: %s\n", tmp, strerror(errno));
    return;
  }
  read_cmdline(cmdline, sizeof cmdline);
  fprintf(f, "#pid %ld\n", (long)census_pid);
  fprintf(f, "#cmdline %s\n", cmdline);
  fprintf(f, "#copy_min_bytes %llu\n", (unsigned long long)copy_min_bytes);
  fprintf(f, "#copies %llu\n", (unsigned long long)LOAD(copies));
  fprintf(f, "#copies_frame_sized %llu\n",
          (unsigned long long)LOAD(copies_frame_sized));
  fprintf(f, "#copies_unsized %llu\n", (unsigned long long)LOAD(copies_unsized));
  fprintf(f, "#copy_bytes %llu\n", (unsigned long long)LOAD(copy_bytes));
  if (LOAD(out_of_range))
    fprintf(f, "#out_of_range_cbids %llu\n",
            (unsigned long long)LOAD(out_of_range));
  for (unsigned i = 0; i < MAX_CBID; i++) {
    uint64_t n = LOAD(counts[i]);
    const char *name = __atomic_load_n(&names[i], __ATOMIC_RELAXED);
    if (!n)
      continue;
    if (name)
      fprintf(f, "%s %llu\n", name, (unsigned long long)n);
    else
      fprintf(f, "cbid_%u %llu\n", i, (unsigned long long)n);
  }
  if (fclose(f) != 0 || rename(tmp, path) != 0)
    fprintf(stderr, "census: cannot write %s: %s\n", path, strerror(errno));
}

__attribute__((destructor)) static void census_fini(void) { report(); }

static int cupti_failed(const char *what, CUptiResult r) {
  const char *message = "unknown error";
  if (cuptiGetResultString(r, &message) != CUPTI_SUCCESS || !message)
    message = "unknown error";
  fprintf(stderr, "census: %s failed (%s): no census for pid %ld\n", what,
          message, (long)getpid());
  return 1;
}

CENSUS_EXPORT int InitializeInjection(void) {
  const char *min = getenv("CENSUS_COPY_MIN_BYTES");
  CUptiResult r;
  if (__atomic_exchange_n(&initialized, 1, __ATOMIC_ACQ_REL))
    return 1;
  if (min && *min) {
    char *end = NULL;
    unsigned long long v = strtoull(min, &end, 10);
    if (end && !*end)
      copy_min_bytes = v;
  }
  census_pid = getpid();
  r = cuptiSubscribe(&subscriber, (CUpti_CallbackFunc)on_call, NULL);
  if (r != CUPTI_SUCCESS) {
    initialized = 0; /* no report: nothing was counted */
    return cupti_failed("cuptiSubscribe", r);
  }
  r = cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
  if (r != CUPTI_SUCCESS) {
    initialized = 0;
    cuptiUnsubscribe(subscriber);
    return cupti_failed("cuptiEnableDomain(driver API)", r);
  }
  atexit(report);
  return 1;
}
