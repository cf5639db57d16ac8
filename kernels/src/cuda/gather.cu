// Engram-style gather: out[i, :] = table[idx[i], :] for rows of `row_bytes` bytes.
// `table` may be device memory or a host-mapped (zero-copy) pointer.
// Requirements (checked on the host): row_bytes % 16 == 0, table and out 16-byte aligned.
// Grid: ceil(n / GWARPS); block: 32 * GWARPS; one warp per row, 16 bytes per lane per
// step.

#define GWARPS 8

extern "C" __global__ void engram_gather(const unsigned char* __restrict__ table,
                                         const unsigned long long* __restrict__ idx,
                                         unsigned char* __restrict__ out, long long n,
                                         int row_bytes) {
    const long long r = (long long)blockIdx.x * GWARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= n) return;
    const uint4* src = reinterpret_cast<const uint4*>(table + idx[r] * (unsigned long long)row_bytes);
    uint4* dst = reinterpret_cast<uint4*>(out + (unsigned long long)r * row_bytes);
    for (int i = lane; i < row_bytes / 16; i += 32) dst[i] = src[i];
}
