// Shared device helpers. Included textually (prepended) by the Rust side, so NVRTC
// needs no include paths and no CUDA headers.

// bf16 -> f32: the bf16 bits are the high half of an f32.
__device__ __forceinline__ float bf16_to_f32(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}

// OCP FP8 E4M3 (e4m3fn): 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities;
// S.1111.111 is NaN. Decoded in registers with integer arithmetic only.
__device__ __forceinline__ float fp8_e4m3_to_f32(unsigned char b) {
    unsigned int s = (b >> 7) & 1u;
    unsigned int e = (b >> 3) & 0xFu;
    unsigned int m = b & 7u;
    float v;
    if (e == 0u) {
        v = (float)m * 0.001953125f;  // m/8 * 2^-6 = m * 2^-9
    } else if (e == 15u && m == 7u) {
        v = __uint_as_float(0x7fc00000u);
    } else {
        v = __uint_as_float(((e + 120u) << 23) | (m << 20));  // (1+m/8) * 2^(e-7)
    }
    return s ? -v : v;
}

// Packed signed 4-bit: two weights per byte, low nibble first, value = nibble - 8.
__device__ __forceinline__ float int4_lo(unsigned char b) { return (float)((int)(b & 0xF) - 8); }
__device__ __forceinline__ float int4_hi(unsigned char b) { return (float)((int)(b >> 4) - 8); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#define TWIN_NEG_INF __int_as_float(0xff800000)

// Decodes `per` (<= 16) consecutive fp8 values at `p` into v[0..per) times `scale`
// (zeros beyond). Uses 4-byte loads when `per` is a multiple of 4 (then `p` is 4-byte
// aligned: callers index rows of dim % 128 == 0 bytes), byte loads otherwise.
__device__ __forceinline__ void load_fp8_row(const unsigned char* __restrict__ p, int per, float scale,
                                             float* v) {
    if ((per & 3) == 0) {
#pragma unroll
        for (int w = 0; w < 4; w++) {
            unsigned int u = 4 * w < per ? reinterpret_cast<const unsigned int*>(p)[w] : 0u;
#pragma unroll
            for (int i = 0; i < 4; i++)
                v[4 * w + i] = 4 * w < per ? fp8_e4m3_to_f32((unsigned char)(u >> (8 * i))) * scale : 0.f;
        }
    } else {
#pragma unroll
        for (int j = 0; j < 16; j++) v[j] = j < per ? fp8_e4m3_to_f32(p[j]) * scale : 0.f;
    }
}

// Loads 8 consecutive weights k..k+8 of a weight row in dtype DT (0 bf16, 1 fp8, 2 int4)
// as f32. fp8 rows are unscaled here (the caller applies the per-row scale once); int4
// applies its per-32-weights group scale. Requires k % 8 == 0 and 16-byte aligned rows.
template <int DT>
__device__ __forceinline__ void load8(const unsigned char* __restrict__ w_row,
                                      const float* __restrict__ s_row, int k, float* w) {
    if (DT == 0) {  // bf16: 16 bytes
        uint4 v = *reinterpret_cast<const uint4*>(w_row + 2 * (size_t)k);
        unsigned int u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w[2 * i] = bf16_to_f32((unsigned short)(u[i] & 0xffffu));
            w[2 * i + 1] = bf16_to_f32((unsigned short)(u[i] >> 16));
        }
    } else if (DT == 1) {  // fp8: 8 bytes
        uint2 v = *reinterpret_cast<const uint2*>(w_row + (size_t)k);
        unsigned int u[2] = {v.x, v.y};
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = fp8_e4m3_to_f32((unsigned char)(u[i / 4] >> (8 * (i % 4))));
    } else {  // int4: 4 bytes, all 8 weights in one 32-weight scale group
        unsigned int u = *reinterpret_cast<const unsigned int*>(w_row + (size_t)k / 2);
        float s = s_row[k / 32];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            unsigned char b = (unsigned char)(u >> (8 * i));
            w[2 * i] = int4_lo(b) * s;
            w[2 * i + 1] = int4_hi(b) * s;
        }
    }
}

