/* SPDX-License-Identifier: MPL-2.0 */
/*
 * A C consumer of a cudaipc channel: reads every frame until the end of the
 * stream and checks each one against the examples' pattern (byte i of frame
 * n is (i + 3n) mod 256, what examples/cpp/producer.cpp and the api_publish
 * example write), on the host or the cuda transport. Prints one line per
 * frame with its checksum (FNV-1a) and exits 1 on a corrupt, missed or
 * missing frame. A frame's data, when it carries some, must be the JSON text
 * examples/cpp/producer.cpp attaches, {"frame":N,"pts_ns":T}; with --data
 * json every frame must carry it.
 *
 *   cc consumer.c $(pkg-config --cflags --libs cudaipc) -Wl,-rpath,$(pkg-config --variable=libdir cudaipc) -o consumer
 *   ./consumer --channel cam0 --frames 100
 *
 * Options: --channel NAME (demo), --frames N (expected; 0: any number),
 * --timeout MS (per frame and for the producer to appear; 10000),
 * --data any|json (any: frames with or without data; json: each with it).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudaipc.h>

static int fail(const char *what, cudaipc_status status) {
  fprintf(stderr, "consumer: %s: %s (%s)\n", what, cudaipc_last_error_message(),
          cudaipc_status_name(status));
  return 1;
}

/* The first byte that differs from frame n's pattern, or -1. */
static long long first_wrong_byte(const uint8_t *bytes, uint64_t size, uint64_t n) {
  for (uint64_t i = 0; i < size; i++) {
    if (bytes[i] != (uint8_t)(i + 3 * n)) return (long long)i;
  }
  return -1;
}

static uint32_t fnv1a(const uint8_t *bytes, uint64_t size) {
  uint32_t hash = 2166136261u;
  for (uint64_t i = 0; i < size; i++) hash = (hash ^ bytes[i]) * 16777619u;
  return hash;
}

int main(int argc, char **argv) {
  const char *channel = "demo";
  long long expected = 0, timeout_ms = 10000;
  int need_data = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--channel") == 0) channel = argv[i + 1];
    else if (strcmp(argv[i], "--frames") == 0) expected = atoll(argv[i + 1]);
    else if (strcmp(argv[i], "--timeout") == 0) timeout_ms = atoll(argv[i + 1]);
    else if (strcmp(argv[i], "--data") == 0 && strcmp(argv[i + 1], "any") == 0) need_data = 0;
    else if (strcmp(argv[i], "--data") == 0 && strcmp(argv[i + 1], "json") == 0) need_data = 1;
    else {
      fprintf(stderr, "usage: consumer [--channel NAME] [--frames N] [--timeout MS] [--data any|json]\n");
      return 2;
    }
  }

  cudaipc_subscriber_options options;
  cudaipc_subscriber_options_init(&options);
  options.frames = CUDAIPC_FRAMES_EVERY; /* the producer waits for us: none missed */
  options.timeout_ms = timeout_ms;
  cudaipc_subscriber *subscriber = NULL;
  cudaipc_status status = cudaipc_subscriber_open(channel, &options, &subscriber);
  if (status != CUDAIPC_OK) return fail("open", status);

  int rc = 0;
  uint8_t *copy = NULL; /* cuda transport: each frame downloaded here */
  uint64_t n = 0;
  for (;; n++) {
    cudaipc_frame *frame = NULL;
    status = cudaipc_subscriber_next_frame(subscriber, timeout_ms, &frame);
    if (status == CUDAIPC_END_OF_STREAM) break;
    if (status != CUDAIPC_OK) { rc = fail("next frame", status); break; }

    cudaipc_frame_info info;
    info.struct_size = sizeof info;
    cudaipc_frame_get_info(frame, &info);
    uint64_t size = info.layout.frame_size;
    const uint8_t *bytes = info.host_ptr;
    if (info.is_cuda) {
      /* A GPU program reads device_ptr on its own stream instead
       * (examples/cpp/gpu_consumer.cu); this one downloads. */
      uint8_t *grown = realloc(copy, size);
      if (grown == NULL) { cudaipc_frame_release(frame); rc = 1; break; }
      copy = grown;
      status = cudaipc_frame_copy_to_host(frame, copy, size);
      if (status != CUDAIPC_OK) { cudaipc_frame_release(frame); rc = fail("download", status); break; }
      bytes = copy;
    }
    long long wrong = first_wrong_byte(bytes, size, n);
    /* The data published with the frame: valid until the frame is released. */
    const void *data = NULL;
    size_t data_len = 0;
    uint32_t kind = CUDAIPC_FRAME_DATA_NONE;
    cudaipc_frame_get_data(frame, &data, &data_len, &kind);
    char want[64];
    snprintf(want, sizeof want, "{\"frame\":%" PRIu64 ",\"pts_ns\":%" PRId64 "}", n, info.pts_ns);
    printf("frame=%" PRIu64 " seq=%" PRIu64 " pts=%" PRId64 " fnv1a=%08" PRIx32, n, info.sequence,
           info.pts_ns, fnv1a(bytes, size));
    if (kind == CUDAIPC_FRAME_DATA_JSON) printf(" data=%s", (const char *)data); /* NUL-terminated */
    else if (kind == CUDAIPC_FRAME_DATA_BYTES) printf(" data=(%zu bytes)", data_len);
    printf("\n");
    if (kind == CUDAIPC_FRAME_DATA_NONE ? need_data
                                        : kind != CUDAIPC_FRAME_DATA_JSON || strcmp(data, want) != 0) {
      fprintf(stderr, "consumer: frame %" PRIu64 "'s data is not %s\n", n, want);
      rc = 1;
    }
    if (info.missed_before != 0) {
      fprintf(stderr, "consumer: %" PRIu64 " frame%s missed before frame %" PRIu64 "\n",
              info.missed_before, info.missed_before == 1 ? "" : "s", n);
      rc = 1;
    }
    if (wrong >= 0) {
      fprintf(stderr, "consumer: frame %" PRIu64 " is corrupt: byte %lld is %u, not %u\n", n,
              wrong, bytes[wrong], (uint8_t)(wrong + 3 * n));
      rc = 1;
    }
    cudaipc_frame_release(frame); /* the slot goes back to the producer */
    if (rc != 0) break;
  }
  free(copy);
  cudaipc_subscriber_free(subscriber);
  if (rc == 0 && expected > 0 && (long long)n != expected) {
    fprintf(stderr, "consumer: %" PRIu64 " frames before the end of the stream, %lld expected\n", n,
            expected);
    rc = 1;
  }
  if (rc == 0) {
    printf("consumer: %" PRIu64 " frames, every one as written%s\n", n,
           need_data ? ", each with its JSON" : "");
  }
  return rc;
}
