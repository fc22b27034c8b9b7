#line 1 "verify.cu"
// SPDX-License-Identifier: MPL-2.0
//
// cudaprocess verify=true (common.cu is prepended): checks every byte of a
// counter-pattern frame, then, in the last block to finish, judges the
// frame and its number against the previous one and publishes running
// totals to host memory mapped into the device. No host synchronisation.

// Running totals and per-frame scratch, in device memory (zeroed at start).
struct VerifyState {
    u32 mismatches;  // bytes of the current frame that differ
    u32 blocks_done; // blocks of the current launch that finished
    u32 has_baseline;
    u32 last_frame;
    u32 current_frame; // set by verify_begin for the fused kernel
    u32 unused;
    u64 frames;
    u64 corrupt;
    u64 missing;
    u64 first_bad_kind;
    u64 first_bad_frame;
    u64 first_bad_detail;
    u64 sequence;
};

// What the first bad event was.
#define BAD_NONE 0u
#define BAD_CORRUPT 1u // detail: bytes that differ
#define BAD_GAP 2u     // frame: first missing number; detail: how many
#define BAD_STALE 3u   // a repeated or older number; detail: the last number

// The host's copy, as 64-bit words (REPORT_* in src/cudatestsrc/kernels.rs):
// 0 sequence (odd while being written), 1 frames, 2 corrupt, 3 missing,
// 4 last frame, 5 first bad kind, 6 first bad frame, 7 first bad detail.
__device__ void publish(VerifyState* st, volatile u64* report) {
    st->sequence += 2u;
    report[0] = st->sequence - 1u;
    __threadfence_system();
    report[1] = st->frames;
    report[2] = st->corrupt;
    report[3] = st->missing;
    report[4] = st->last_frame;
    report[5] = st->first_bad_kind;
    report[6] = st->first_bad_frame;
    report[7] = st->first_bad_detail;
    __threadfence_system();
    report[0] = st->sequence;
}

// `mask`: which bits of the frame number the frame carries.
__device__ void finish_frame(VerifyState* st, volatile u64* report, u32 frame,
                             u32 mask, u32 reset) {
    const u32 mismatches = atomicExch(&st->mismatches, 0u);
    atomicExch(&st->blocks_done, 0u);
    if (reset) st->has_baseline = 0u;
    st->frames += 1u;
    u32 kind = BAD_NONE;
    u32 bad_frame = frame;
    u64 detail = 0;
    const u32 expected = (st->last_frame + 1u) & mask;
    if (mismatches != 0) {
        st->corrupt += 1u;
        kind = BAD_CORRUPT;
        detail = mismatches;
        // A damaged frame that carries the expected number still moves the
        // sequence on, so that it is not counted missing as well.
        if (!st->has_baseline || frame == expected) {
            st->last_frame = frame;
            st->has_baseline = 1u;
        }
    } else if (!st->has_baseline) {
        // The first frame only sets where the sequence starts.
        st->last_frame = frame;
        st->has_baseline = 1u;
    } else if (frame == expected) {
        st->last_frame = frame;
    } else {
        const u32 gap = (frame - expected) & mask;
        if (gap <= (mask >> 1)) {
            st->missing += gap;
            kind = BAD_GAP;
            bad_frame = expected;
            detail = gap;
            st->last_frame = frame;
        } else {
            // Repeated or older: a stale frame. The sequence stays where it
            // was, so the frames after it are judged against the real last.
            st->corrupt += 1u;
            kind = BAD_STALE;
            detail = st->last_frame;
        }
    }
    if (kind != BAD_NONE && st->first_bad_kind == BAD_NONE) {
        st->first_bad_kind = kind;
        st->first_bad_frame = bad_frame;
        st->first_bad_detail = detail;
    }
    // Writes to host memory and system fences cost microseconds: bad news
    // goes out at once, the running totals every 32 frames (verify_publish
    // flushes them before the host needs exact figures).
    if (kind != BAD_NONE || (st->frames & 31u) == 1u) publish(st, report);
}

// Adds this block's mismatches; the block that finishes last ("last block
// done") sees every count and judges the frame. Every thread calls it.
__device__ __forceinline__ void count_and_judge(VerifyState* st, u64* report,
                                                const Geometry& g, u32 frame,
                                                u32 bad, u32 reset) {
    __shared__ bool last_block;
    if (bad != 0) {
        atomicAdd(&st->mismatches, bad);
        __threadfence();
    }
    __syncthreads();
    if (thread_in_block() == 0) {
        const u32 blocks = gridDim.x * gridDim.y;
        last_block = atomicAdd(&st->blocks_done, 1u) == blocks - 1u;
    }
    __syncthreads();
    if (last_block && thread_in_block() == 0) {
        __threadfence();
        const u32 mask = g.row_bytes0 >= HEADER_BYTES ? 0xFFFFFFFFu : 0xFFu;
        finish_frame(st, report, frame, mask, reset);
    }
}

// Publishes the totals now (before the host reads exact figures).
extern "C" __global__ void verify_publish(VerifyState* state, u64* report) {
    publish(state, report);
}

extern "C" __global__ void verify_counter(GEOMETRY_PARAMS, PLANE_PARAMS(src),
                                          VerifyState* state, u64* report,
                                          u32 reset) {
    const Geometry g = MAKE_GEOMETRY();
    const Planes in = MAKE_PLANES(src);
    VerifyState* st = state;
    __shared__ u32 frame_shared;
    const u32 tid = thread_in_block();
    if (tid == 0) frame_shared = encoded_frame(in.ptr0, g.row_bytes0);
    __syncthreads();
    const u32 frame = frame_shared;

    u32 bad = 0;
    const u32 rows = total_rows(g);
    for (u32 global_row = first_row(); global_row < rows;
         global_row += row_step()) {
        const Row r = locate(g, global_row);
        const u8* line = row_pointer(in, r);
        if (r.wide) {
            for (u32 x0 = first_chunk() * CHUNK; x0 < r.bytes;
                 x0 += chunk_step() * CHUNK) {
                if (x0 + CHUNK <= r.bytes) {
                    const uint4 v = *(const uint4*)(line + x0);
                    const uint4 e = counter_chunk(frame, r.plane, r.row, x0, r.bytes);
                    bad += nonzero_bytes(v.x ^ e.x) + nonzero_bytes(v.y ^ e.y) +
                           nonzero_bytes(v.z ^ e.z) + nonzero_bytes(v.w ^ e.w);
                } else {
                    for (u32 x = x0; x < r.bytes; ++x)
                        bad += line[x] != counter_byte(frame, r.plane, r.row, x, r.bytes);
                }
            }
        } else {
            for (u32 x = first_chunk(); x < r.bytes; x += chunk_step())
                bad += line[x] != counter_byte(frame, r.plane, r.row, x, r.bytes);
        }
    }

    count_and_judge(st, report, g, frame, bad, reset);
}

// verify=true with operation=invert in one pass: each chunk is checked
// against the counter pattern and written inverted (colour bytes only,
// planes in `active_planes`; others copied when out of place), so the frame
// is read once instead of twice.
__device__ __forceinline__ u32 invert_byte(u32 b, u32 x, u32 colour_mask) {
    return ((colour_mask >> ((x & 3u) * 8u)) & 0xFFu) ? (b ^ 0xFFu) : b;
}

// Before verify_counter_invert: the frame number, read before any block of
// an in-place pass can overwrite row 0's header.
extern "C" __global__ void verify_begin(const u8* row0, u32 row_bytes0,
                                        VerifyState* state) {
    state->current_frame = encoded_frame(row0, row_bytes0);
}

extern "C" __global__ void verify_counter_invert(GEOMETRY_PARAMS,
                                                 PLANE_PARAMS(src),
                                                 PLANE_PARAMS(dst),
                                                 u32 active_planes,
                                                 u32 colour_mask,
                                                 VerifyState* state,
                                                 u64* report, u32 reset,
                                                 u32 in_place) {
    const Geometry g = MAKE_GEOMETRY();
    const Planes in = MAKE_PLANES(src);
    const Planes out = MAKE_PLANES(dst);
    VerifyState* st = state;
    __shared__ u32 frame_shared;
    const u32 tid = thread_in_block();
    // In place, another block may have inverted row 0 already: verify_begin
    // read its number before this launch. Out of place, row 0 is intact.
    if (tid == 0)
        frame_shared = in_place ? *(volatile u32*)&st->current_frame
                                : encoded_frame(in.ptr0, g.row_bytes0);
    __syncthreads();
    const u32 frame = frame_shared;

    u32 bad = 0;
    const u32 rows = total_rows(g);
    for (u32 global_row = first_row(); global_row < rows;
         global_row += row_step()) {
        const Row r = locate(g, global_row);
        const u8* line = row_pointer(in, r);
        u8* target = row_pointer(out, r);
        const u32 mask = ((active_planes >> r.plane) & 1u) ? colour_mask : 0u;
        if (r.wide) {
            for (u32 x0 = first_chunk() * CHUNK; x0 < r.bytes;
                 x0 += chunk_step() * CHUNK) {
                if (x0 + CHUNK <= r.bytes) {
                    uint4 v = *(const uint4*)(line + x0);
                    const uint4 e = counter_chunk(frame, r.plane, r.row, x0, r.bytes);
                    bad += nonzero_bytes(v.x ^ e.x) + nonzero_bytes(v.y ^ e.y) +
                           nonzero_bytes(v.z ^ e.z) + nonzero_bytes(v.w ^ e.w);
                    v.x ^= mask;
                    v.y ^= mask;
                    v.z ^= mask;
                    v.w ^= mask;
                    *(uint4*)(target + x0) = v;
                } else {
                    for (u32 x = x0; x < r.bytes; ++x) {
                        const u32 b = line[x];
                        bad += b != counter_byte(frame, r.plane, r.row, x, r.bytes);
                        target[x] = (u8)invert_byte(b, x, mask);
                    }
                }
            }
        } else {
            for (u32 x = first_chunk(); x < r.bytes; x += chunk_step()) {
                const u32 b = line[x];
                bad += b != counter_byte(frame, r.plane, r.row, x, r.bytes);
                target[x] = (u8)invert_byte(b, x, mask);
            }
        }
    }

    count_and_judge(st, report, g, frame, bad, reset);
}
