#line 1 "generate.cu"
// SPDX-License-Identifier: MPL-2.0
//
// cudatestsrc's generator (common.cu is prepended): writes one frame of a
// pattern into the planes given, 16 bytes per thread where aligned.

__device__ __forceinline__ uint4 pattern_chunk(u32 pattern, u32 frame,
                                               const Row& r, u32 x0) {
    return pattern == PATTERN_COUNTER
               ? counter_chunk(frame, r.plane, r.row, x0, r.bytes)
               : gradient_chunk(frame, r.plane, r.row, x0);
}

__device__ __forceinline__ u32 pattern_byte(u32 pattern, u32 frame,
                                            const Row& r, u32 x) {
    return pattern == PATTERN_COUNTER
               ? counter_byte(frame, r.plane, r.row, x, r.bytes)
               : gradient_byte(frame, r.plane, r.row, x);
}

extern "C" __global__ void generate(GEOMETRY_PARAMS, PLANE_PARAMS(dst),
                                    u32 pattern, u32 frame) {
    const Geometry g = MAKE_GEOMETRY();
    const Planes out = MAKE_PLANES(dst);
    const u32 rows = total_rows(g);
    for (u32 global_row = first_row(); global_row < rows;
         global_row += row_step()) {
        const Row r = locate(g, global_row);
        u8* line = row_pointer(out, r);
        if (r.wide) {
            for (u32 x0 = first_chunk() * CHUNK; x0 < r.bytes;
                 x0 += chunk_step() * CHUNK) {
                const uint4 v = pattern_chunk(pattern, frame, r, x0);
                if (x0 + CHUNK <= r.bytes) {
                    *(uint4*)(line + x0) = v;
                } else {
                    for (u32 i = 0; x0 + i < r.bytes; ++i)
                        line[x0 + i] = (u8)chunk_byte(v, i);
                }
            }
        } else {
            for (u32 x = first_chunk(); x < r.bytes; x += chunk_step())
                line[x] = (u8)pattern_byte(pattern, frame, r, x);
        }
    }
}
