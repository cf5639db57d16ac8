// Dynamic per-tensor FP8 (E4M3) quantization of BF16 activations, as a production FP8
// linear layer runs it before its GEMM (vLLM's Fp8LinearMethod: `scaled_fp8_quant`
// with no static scale: a max-abs reduction, then the scaled conversion):
//   amax  = max |x_i|;  scale = amax / 448 (1 where amax is 0);
//   q_i   = e4m3(x_i / scale), round to nearest even, saturating at +-448.
// Two kernels on one stream; the caller zeroes `amax` first.
// 1. fp8_amax: grid-stride over n bf16 values (n % 8 == 0, 16-byte aligned), 8 per
//    16-byte load; block max through warp shuffles and shared memory, one atomicMax a
//    block on the float's bits (non-negative floats order as unsigned integers).
// 2. fp8_quant: grid-stride, 8 values per thread-step, written as 8 bytes; block 0
//    thread 0 writes the scale (the GEMM's scale operand).
// Requirements (checked on the host): n % 8 == 0.

__device__ __forceinline__ float bf16_abs_max8(uint4 v) {
    const unsigned int u[4] = {v.x, v.y, v.z, v.w};
    float m = 0.f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m = fmaxf(m, fabsf(bf16_to_f32((unsigned short)(u[i] & 0xffffu))));
        m = fmaxf(m, fabsf(bf16_to_f32((unsigned short)(u[i] >> 16))));
    }
    return m;
}

extern "C" __global__ void fp8_amax(const unsigned short* __restrict__ x, long long n,
                                    unsigned int* __restrict__ amax) {
    __shared__ float warp_max[32];
    const long long groups = n / 8;
    float m = 0.f;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < groups;
         g += (long long)gridDim.x * blockDim.x)
        m = fmaxf(m, bf16_abs_max8(reinterpret_cast<const uint4*>(x)[g]));
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_max[warp] = m;
    __syncthreads();
    if (warp == 0) {
        m = lane < (int)(blockDim.x >> 5) ? warp_max[lane] : 0.f;
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0) atomicMax(amax, __float_as_uint(m));
    }
}

// f32 pair to two E4M3 bytes (low byte: `lo`), round to nearest even, saturating.
__device__ __forceinline__ unsigned short f32x2_to_e4m3(float lo, float hi) {
#if __CUDA_ARCH__ >= 890
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
#else
    // Older GPUs run no FP8 GEMM; the kernel still compiles for them.
    return (unsigned short)0;
#endif
}

extern "C" __global__ void fp8_quant(const unsigned short* __restrict__ x, long long n,
                                     const unsigned int* __restrict__ amax,
                                     unsigned char* __restrict__ q, float* __restrict__ scale_out) {
    const float a = __uint_as_float(*amax);
    const float scale = a > 0.f ? a / 448.f : 1.f;
    const float inv = 1.f / scale;
    if (blockIdx.x == 0 && threadIdx.x == 0) *scale_out = scale;
    const long long groups = n / 8;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < groups;
         g += (long long)gridDim.x * blockDim.x) {
        const uint4 v = reinterpret_cast<const uint4*>(x)[g];
        const unsigned int u[4] = {v.x, v.y, v.z, v.w};
        unsigned int out[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const unsigned int p0 = f32x2_to_e4m3(bf16_to_f32((unsigned short)(u[2 * i] & 0xffffu)) * inv,
                                                  bf16_to_f32((unsigned short)(u[2 * i] >> 16)) * inv);
            const unsigned int p1 = f32x2_to_e4m3(bf16_to_f32((unsigned short)(u[2 * i + 1] & 0xffffu)) * inv,
                                                  bf16_to_f32((unsigned short)(u[2 * i + 1] >> 16)) * inv);
            out[i] = p0 | (p1 << 16);
        }
        reinterpret_cast<uint2*>(q)[g] = make_uint2(out[0], out[1]);
    }
}
