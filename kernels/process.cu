#line 1 "process.cu"
// SPDX-License-Identifier: MPL-2.0
//
// cudaprocess's operations (common.cu is prepended). Every kernel reads
// the `src` planes and writes the `dst` planes; in place, both are the same
// and each thread reads its chunk before writing it back. Planes whose bit
// is clear in `active_planes` are copied when src and dst differ and left
// alone in place. `colour_mask` says which bytes of each 4-byte word are
// colour (0x00FFFFFF for 4-byte pixels whose byte 3 is alpha or padding,
// all ones otherwise): the others are kept.

#define OP_INVERT 1
#define OP_BRIGHTNESS 2
#define OP_GAMMA 3

// Per-byte addition clamped at 255.
__device__ __forceinline__ u32 add_bytes_saturate(u32 a, u32 b) {
    const u32 low = (a & 0x7F7F7F7Fu) + (b & 0x7F7F7F7Fu);
    const u32 sum = low ^ ((a ^ b) & 0x80808080u);
    const u32 carry = ((a & b) | ((a | b) & low)) & 0x80808080u;
    return sum | ((carry >> 7) * 0xFFu);
}

struct OpParams {
    u32 colour_mask;
    u32 amount;  // brightness: |delta| in every byte
    bool darken; // brightness: subtract instead of add
    const u8* lut;
};

template <int OP>
__device__ __forceinline__ u32 apply_word(u32 w, const OpParams& p) {
    if (OP == OP_INVERT) return w ^ p.colour_mask;
    u32 r;
    if (OP == OP_BRIGHTNESS) {
        // a - b clamped at 0 is ~(~a + b clamped at 255).
        r = p.darken ? ~add_bytes_saturate(~w, p.amount)
                     : add_bytes_saturate(w, p.amount);
    } else {
        r = (u32)p.lut[w & 0xFFu] | ((u32)p.lut[(w >> 8) & 0xFFu] << 8) |
            ((u32)p.lut[(w >> 16) & 0xFFu] << 16) |
            ((u32)p.lut[w >> 24] << 24);
    }
    return (r & p.colour_mask) | (w & ~p.colour_mask);
}

// Byte x of a row (x counted from the row's start, where a pixel starts).
template <int OP>
__device__ __forceinline__ u32 apply_byte(u32 b, u32 x, const OpParams& p) {
    if (((p.colour_mask >> ((x & 3u) * 8u)) & 0xFFu) == 0) return b;
    if (OP == OP_INVERT) return b ^ 0xFFu;
    if (OP == OP_BRIGHTNESS) {
        const u32 amount = p.amount & 0xFFu;
        if (p.darken) return b > amount ? b - amount : 0u;
        return b + amount < 255u ? b + amount : 255u;
    }
    return p.lut[b];
}

__device__ __forceinline__ void copy_row(const u8* src, u8* dst, const Row& r) {
    if (r.wide) {
        for (u32 x0 = first_chunk() * CHUNK; x0 < r.bytes;
             x0 += chunk_step() * CHUNK) {
            if (x0 + CHUNK <= r.bytes) {
                *(uint4*)(dst + x0) = *(const uint4*)(src + x0);
            } else {
                for (u32 x = x0; x < r.bytes; ++x) dst[x] = src[x];
            }
        }
    } else {
        for (u32 x = first_chunk(); x < r.bytes; x += chunk_step())
            dst[x] = src[x];
    }
}

template <int OP>
__device__ __forceinline__ void process_frame(const Geometry& g,
                                              const Planes& in,
                                              const Planes& out,
                                              u32 active_planes,
                                              const OpParams& p) {
    const u32 rows = total_rows(g);
    for (u32 global_row = first_row(); global_row < rows;
         global_row += row_step()) {
        const Row r = locate(g, global_row);
        const u8* src = row_pointer(in, r);
        u8* dst = row_pointer(out, r);
        if (((active_planes >> r.plane) & 1u) == 0) {
            if (src != dst) copy_row(src, dst, r);
            continue;
        }
        if (r.wide) {
            for (u32 x0 = first_chunk() * CHUNK; x0 < r.bytes;
                 x0 += chunk_step() * CHUNK) {
                if (x0 + CHUNK <= r.bytes) {
                    uint4 v = *(const uint4*)(src + x0);
                    v.x = apply_word<OP>(v.x, p);
                    v.y = apply_word<OP>(v.y, p);
                    v.z = apply_word<OP>(v.z, p);
                    v.w = apply_word<OP>(v.w, p);
                    *(uint4*)(dst + x0) = v;
                } else {
                    for (u32 x = x0; x < r.bytes; ++x)
                        dst[x] = (u8)apply_byte<OP>(src[x], x, p);
                }
            }
        } else {
            for (u32 x = first_chunk(); x < r.bytes; x += chunk_step())
                dst[x] = (u8)apply_byte<OP>(src[x], x, p);
        }
    }
}

#define PROCESS_PARAMS                                                       \
    GEOMETRY_PARAMS, PLANE_PARAMS(src), PLANE_PARAMS(dst), u32 active_planes, \
        u32 colour_mask, u32 amount, u32 darken, const u8* lut

extern "C" __global__ void process_invert(PROCESS_PARAMS) {
    const OpParams p = {colour_mask, 0u, false, lut};
    process_frame<OP_INVERT>(MAKE_GEOMETRY(), MAKE_PLANES(src),
                             MAKE_PLANES(dst), active_planes, p);
}

extern "C" __global__ void process_brightness(PROCESS_PARAMS) {
    const OpParams p = {colour_mask, (amount & 0xFFu) * 0x01010101u,
                        darken != 0, lut};
    process_frame<OP_BRIGHTNESS>(MAKE_GEOMETRY(), MAKE_PLANES(src),
                                 MAKE_PLANES(dst), active_planes, p);
}

// `lut`: 256 bytes in device memory, staged in shared memory per block.
extern "C" __global__ void process_gamma(PROCESS_PARAMS) {
    __shared__ u8 table[256];
    for (u32 i = thread_in_block(); i < 256u; i += blockDim.x * blockDim.y)
        table[i] = lut[i];
    __syncthreads();
    const OpParams p = {colour_mask, 0u, false, table};
    process_frame<OP_GAMMA>(MAKE_GEOMETRY(), MAKE_PLANES(src), MAKE_PLANES(dst),
                            active_planes, p);
}

// ---------------------------------------------------------------------------
// Grayscale: each plane has a role (4 bits per plane in `roles`).

#define ROLE_KEEP 0u    // untouched (copied when out of place)
#define ROLE_LUMA3 1u   // packed 3-byte pixels: luma into all three bytes
#define ROLE_LUMA4 2u   // packed 4-byte pixels: luma into bytes 0..2, byte 3 kept
#define ROLE_NEUTRAL 3u // chroma plane: every byte 128

// BT.601 luma, integer weights that sum to 256.
__device__ __forceinline__ u32 luma(u32 r, u32 g, u32 b) {
    return (77u * r + 150u * g + 29u * b + 128u) >> 8;
}

__device__ __forceinline__ u32 luma_word(u32 w, u32 red_index) {
    const u32 r = (w >> (red_index * 8u)) & 0xFFu;
    const u32 g = (w >> 8) & 0xFFu;
    const u32 b = (w >> ((2u - red_index) * 8u)) & 0xFFu;
    return (w & 0xFF000000u) | (luma(r, g, b) * 0x00010101u);
}

// One pixel of `bpp` bytes at x, byte by byte.
__device__ __forceinline__ void luma_pixel(const u8* src, u8* dst, u32 x,
                                           u32 bpp, u32 red_index) {
    const u32 y = luma(src[x + red_index], src[x + 1], src[x + 2 - red_index]);
    dst[x] = (u8)y;
    dst[x + 1] = (u8)y;
    dst[x + 2] = (u8)y;
    if (bpp == 4u) dst[x + 3] = src[x + 3];
}

__device__ __forceinline__ u32 byte_of(const u32* w, u32 i) {
    return (w[i >> 2] >> ((i & 3u) * 8u)) & 0xFFu;
}

// 16 packed 3-byte pixels (48 bytes, three uint4) at once.
__device__ __forceinline__ void luma3_chunk(const u8* src, u8* dst,
                                            u32 red_index) {
    const uint4 a = *(const uint4*)src;
    const uint4 b = *(const uint4*)(src + 16);
    const uint4 c = *(const uint4*)(src + 32);
    const u32 w[12] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w,
                       c.x, c.y, c.z, c.w};
    u32 y[16];
#pragma unroll
    for (u32 k = 0; k < 16u; ++k) {
        const u32 first = byte_of(w, 3u * k);
        const u32 last = byte_of(w, 3u * k + 2u);
        y[k] = luma(red_index == 0 ? first : last, byte_of(w, 3u * k + 1u),
                    red_index == 0 ? last : first);
    }
    u32 o[12];
#pragma unroll
    for (u32 k = 0; k < 12u; ++k)
        o[k] = y[(4u * k) / 3u] | (y[(4u * k + 1u) / 3u] << 8) |
               (y[(4u * k + 2u) / 3u] << 16) | (y[(4u * k + 3u) / 3u] << 24);
    *(uint4*)dst = make_uint4(o[0], o[1], o[2], o[3]);
    *(uint4*)(dst + 16) = make_uint4(o[4], o[5], o[6], o[7]);
    *(uint4*)(dst + 32) = make_uint4(o[8], o[9], o[10], o[11]);
}

extern "C" __global__ void process_grayscale(GEOMETRY_PARAMS,
                                             PLANE_PARAMS(src),
                                             PLANE_PARAMS(dst), u32 roles,
                                             u32 red_index) {
    const Geometry g = MAKE_GEOMETRY();
    const Planes in = MAKE_PLANES(src);
    const Planes out = MAKE_PLANES(dst);
    const u32 rows = total_rows(g);
    for (u32 global_row = first_row(); global_row < rows;
         global_row += row_step()) {
        const Row r = locate(g, global_row);
        const u8* src = row_pointer(in, r);
        u8* dst = row_pointer(out, r);
        const u32 role = (roles >> (4u * r.plane)) & 0xFu;
        if (role == ROLE_KEEP) {
            if (src != dst) copy_row(src, dst, r);
        } else if (role == ROLE_NEUTRAL) {
            if (r.wide) {
                for (u32 x0 = first_chunk() * CHUNK; x0 < r.bytes;
                     x0 += chunk_step() * CHUNK) {
                    if (x0 + CHUNK <= r.bytes) {
                        *(uint4*)(dst + x0) = make_uint4(
                            0x80808080u, 0x80808080u, 0x80808080u, 0x80808080u);
                    } else {
                        for (u32 x = x0; x < r.bytes; ++x) dst[x] = 128;
                    }
                }
            } else {
                for (u32 x = first_chunk(); x < r.bytes; x += chunk_step())
                    dst[x] = 128;
            }
        } else {
            const u32 bpp = role == ROLE_LUMA3 ? 3u : 4u;
            // A chunk is 16 pixels of 3 bytes or 4 pixels of 4 bytes when
            // wide, one pixel otherwise.
            const u32 chunk = r.wide ? (bpp == 3u ? 48u : 16u) : bpp;
            for (u32 x0 = first_chunk() * chunk; x0 < r.bytes;
                 x0 += chunk_step() * chunk) {
                if (r.wide && x0 + chunk <= r.bytes) {
                    if (bpp == 3u) {
                        luma3_chunk(src + x0, dst + x0, red_index);
                    } else {
                        uint4 v = *(const uint4*)(src + x0);
                        v.x = luma_word(v.x, red_index);
                        v.y = luma_word(v.y, red_index);
                        v.z = luma_word(v.z, red_index);
                        v.w = luma_word(v.w, red_index);
                        *(uint4*)(dst + x0) = v;
                    }
                } else {
                    for (u32 x = x0; x + bpp <= r.bytes && x < x0 + chunk;
                         x += bpp)
                        luma_pixel(src, dst, x, bpp, red_index);
                }
            }
        }
    }
}
