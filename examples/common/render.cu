// The examples' test pattern, one thread per RGBA pixel. It must stay equal,
// byte for byte, to `render_cpu` in examples/common/mod.rs: the consumers
// compare what they receive with checksums of the CPU rendering.
//
// Pixel (0, 0) holds the frame number (little-endian 32-bit), so a consumer
// can tell which frame it holds; every other pixel is a gradient that moves
// with the frame number.

extern "C" __global__ void render(unsigned int *out, unsigned int width,
                                  unsigned int height, unsigned int frame)
{
    unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height)
        return;
    unsigned int pixel;
    if (x == 0 && y == 0) {
        pixel = frame;
    } else {
        unsigned int r = (x + frame) & 255u;
        unsigned int g = (y + 2u * frame) & 255u;
        unsigned int b = ((x ^ y) + 3u * frame) & 255u;
        pixel = r | (g << 8) | (b << 16) | (255u << 24);
    }
    // RGBA rows are 4 * width bytes: GStreamer's default stride, no padding.
    out[y * width + x] = pixel;
}
