// SPDX-License-Identifier: MPL-2.0
//
// Shared by the kernel modules of gst-cudaipc: prepended to generate.cu,
// process.cu and verify.cu before NVRTC compiles them (NVRTC gets no
// headers, so no <cstdint>: the typedefs below stand in).
//
// A frame has up to three planes. Kernels get them as scalar parameters
// (the host passes every argument in its own slot):
//   GEOMETRY_PARAMS: the plane count; per plane the bytes of pixel data in
//     one row and the number of rows (0 for planes the format lacks); and
//     `wide_mask`: bit p set when plane p's pointer and stride are 16-byte
//     aligned in every frame the kernel touches, so that whole 16-byte
//     chunks move with one uint4 access.
//   PLANE_PARAMS(name): per plane a device pointer and a stride in bytes.
//   Pointers are typed (not u64) so that the compiler knows they are global
//   memory and emits ld.global/st.global rather than generic accesses.
//
// Threads: a 2D grid; y walks the rows of all planes stacked (plane 0's
// rows, then plane 1's, then plane 2's), x walks the chunks of a row, both
// grid-stride, so any launch size is correct and the host sizes it for
// speed only. A chunk is 16 bytes on wide planes (the last chunk of a row
// may be shorter and is then moved byte by byte) and one byte otherwise.
// Padding between rows is never touched.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;

#define CHUNK 16u

#define GEOMETRY_PARAMS                                                      \
    u32 nplanes, u32 row_bytes0, u32 rows0, u32 row_bytes1, u32 rows1,      \
        u32 row_bytes2, u32 rows2, u32 wide_mask
#define PLANE_PARAMS(p)                                                      \
    u8 *p##0, u32 p##_stride0, u8 *p##1, u32 p##_stride1, u8 *p##2,         \
        u32 p##_stride2

struct Geometry {
    u32 nplanes;
    u32 row_bytes0, row_bytes1, row_bytes2;
    u32 rows0, rows1, rows2;
    u32 wide_mask;
};

struct Planes {
    u8 *ptr0, *ptr1, *ptr2;
    u32 stride0, stride1, stride2;
};

#define MAKE_GEOMETRY()                                                      \
    Geometry { nplanes, row_bytes0, row_bytes1, row_bytes2,                  \
               rows0, rows1, rows2, wide_mask }
#define MAKE_PLANES(p)                                                       \
    Planes { p##0, p##1, p##2, p##_stride0, p##_stride1, p##_stride2 }

// One row of one plane, as a thread finds it.
struct Row {
    u32 plane;
    u32 row;
    u32 bytes;
    bool wide;
};

__device__ __forceinline__ u32 total_rows(const Geometry& g) {
    return g.rows0 + g.rows1 + g.rows2;
}

// Selects rather than indexing arrays, which would spill to local memory.
__device__ __forceinline__ Row locate(const Geometry& g, u32 global_row) {
    Row r;
    if (global_row < g.rows0) {
        r.plane = 0;
        r.row = global_row;
        r.bytes = g.row_bytes0;
    } else if (global_row < g.rows0 + g.rows1) {
        r.plane = 1;
        r.row = global_row - g.rows0;
        r.bytes = g.row_bytes1;
    } else {
        r.plane = 2;
        r.row = global_row - g.rows0 - g.rows1;
        r.bytes = g.row_bytes2;
    }
    r.wide = ((g.wide_mask >> r.plane) & 1u) != 0;
    return r;
}

__device__ __forceinline__ u8* row_pointer(const Planes& p, const Row& r) {
    u8* base = r.plane == 0 ? p.ptr0 : (r.plane == 1 ? p.ptr1 : p.ptr2);
    const u32 stride =
        r.plane == 0 ? p.stride0 : (r.plane == 1 ? p.stride1 : p.stride2);
    return base + (u64)r.row * stride;
}

__device__ __forceinline__ u32 first_row() {
    return blockIdx.y * blockDim.y + threadIdx.y;
}
__device__ __forceinline__ u32 row_step() { return gridDim.y * blockDim.y; }
__device__ __forceinline__ u32 first_chunk() {
    return blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ u32 chunk_step() { return gridDim.x * blockDim.x; }
__device__ __forceinline__ u32 thread_in_block() {
    return threadIdx.y * blockDim.x + threadIdx.x;
}

// Byte i (0..15) of a chunk held in registers.
__device__ __forceinline__ u32 chunk_byte(const uint4& v, u32 i) {
    const u32 w = i < 4 ? v.x : (i < 8 ? v.y : (i < 12 ? v.z : v.w));
    return (w >> ((i & 3u) * 8u)) & 0xFFu;
}

// Per-byte addition modulo 256: no carry crosses from one byte to the next.
__device__ __forceinline__ u32 add_bytes(u32 a, u32 b) {
    return ((a & 0x7F7F7F7Fu) + (b & 0x7F7F7F7Fu)) ^ ((a ^ b) & 0x80808080u);
}

// Number of non-zero bytes in a word.
__device__ __forceinline__ u32 nonzero_bytes(u32 x) {
    return __popc((((x & 0x7F7F7F7Fu) + 0x7F7F7F7Fu) | x) & 0x80808080u);
}

// ---------------------------------------------------------------------------
// The patterns of cudatestsrc (docs/test-elements.md gives the formulas;
// src/cudatestsrc/pattern.rs is the CPU reference and must stay identical).

#define PATTERN_COUNTER 0u
#define PATTERN_GRADIENT 1u

#define HEADER_BYTES 8u
#define HEADER_MARKER 0xA5u
// 131 * 43 = 1 (mod 256): recovers frame & 0xFF from a row without header.
#define INVERSE_131 43u

__device__ __forceinline__ u32 counter_seed(u32 frame, u32 plane, u32 row) {
    return frame * 131u + row * 7u + plane * 17u;
}

// Header words: [frame u32 LE][row u16 LE][plane u8][0xA5].
__device__ __forceinline__ u32 header_word(u32 frame, u32 plane, u32 row,
                                           u32 word) {
    return word == 0 ? frame
                     : ((row & 0xFFFFu) | (plane << 16) | (HEADER_MARKER << 24));
}

__device__ __forceinline__ u32 counter_byte(u32 frame, u32 plane, u32 row,
                                            u32 x, u32 row_bytes) {
    if (x < HEADER_BYTES && row_bytes >= HEADER_BYTES)
        return (header_word(frame, plane, row, x >> 2) >> ((x & 3u) * 8u)) &
               0xFFu;
    return (counter_seed(frame, plane, row) + x * 3u) & 0xFFu;
}

// Bytes x0 .. x0+15 of a counter row (x0 a multiple of 16).
__device__ __forceinline__ uint4 counter_chunk(u32 frame, u32 plane, u32 row,
                                               u32 x0, u32 row_bytes) {
    const u32 base = (counter_seed(frame, plane, row) + x0 * 3u) & 0xFFu;
    const u32 rep = base * 0x01010101u;
    uint4 v;
    // Byte i of the chunk is base + 3 * i.
    v.x = add_bytes(rep, 0x09060300u);
    v.y = add_bytes(rep, 0x15120F0Cu);
    v.z = add_bytes(rep, 0x211E1B18u);
    v.w = add_bytes(rep, 0x2D2A2724u);
    if (x0 == 0 && row_bytes >= HEADER_BYTES) {
        v.x = header_word(frame, plane, row, 0);
        v.y = header_word(frame, plane, row, 1);
    }
    return v;
}

__device__ __forceinline__ u32 gradient_seed(u32 frame, u32 plane, u32 row) {
    return row + frame * 2u + plane * 64u;
}

__device__ __forceinline__ u32 gradient_byte(u32 frame, u32 plane, u32 row,
                                             u32 x) {
    return (gradient_seed(frame, plane, row) + x) & 0xFFu;
}

__device__ __forceinline__ uint4 gradient_chunk(u32 frame, u32 plane, u32 row,
                                                u32 x0) {
    const u32 rep = ((gradient_seed(frame, plane, row) + x0) & 0xFFu) * 0x01010101u;
    uint4 v;
    v.x = add_bytes(rep, 0x03020100u);
    v.y = add_bytes(rep, 0x07060504u);
    v.z = add_bytes(rep, 0x0B0A0908u);
    v.w = add_bytes(rep, 0x0F0E0D0Cu);
    return v;
}

// The frame number a counter frame carries: row 0 of plane 0's header, or,
// when its rows are shorter than a header, frame & 0xFF from its byte 0.
__device__ __forceinline__ u32 encoded_frame(const u8* row0, u32 row_bytes0) {
    if (row_bytes0 >= HEADER_BYTES)
        return (u32)row0[0] | ((u32)row0[1] << 8) | ((u32)row0[2] << 16) |
               ((u32)row0[3] << 24);
    return ((u32)row0[0] * INVERSE_131) & 0xFFu;
}
