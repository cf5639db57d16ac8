// MoE expert FFN for decode: y[e, t, :] = W[expert_ids[e]] x[e, t, :] for every touched
// expert e and each of its `tokens` tokens (a GEMV when tokens == 1, a skinny GEMM
// otherwise). Weights are streamed from memory once per tile of TOK_TILE tokens and
// decoded in registers.
//
// Layouts (row-major): W[n_experts][n_out][k_in] in the weight dtype; x[touched][tokens]
// [k_in] f32; y[touched][tokens][n_out] f32.
//   bf16: 2 bytes per weight, no scales.
//   fp8 : 1 byte (e4m3) per weight, one f32 scale per output row: scales[n_experts][n_out].
//   int4: 2 weights per byte (low nibble first), one f32 scale per 32 consecutive
//         weights of a row: scales[n_experts][n_out][k_in / 32].
// Requirements (checked on the host): k_in % 256 == 0.
//
// Grid: (ceil(n_out / WARPS), touched); block: 32 * WARPS threads; one warp per output
// row; lane l handles 8 consecutive weights k = 256*i + 8*l .. +8.

#define WARPS 8
#define TOK_TILE 8

template <int DT>
__device__ void moe_gemv(const unsigned char* __restrict__ weights, const float* __restrict__ scales,
                         const int* __restrict__ expert_ids, const float* __restrict__ x,
                         float* __restrict__ y, int n_out, int k_in, int tokens) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * WARPS + (threadIdx.x >> 5);
    const int e = blockIdx.y;
    if (row >= n_out) return;
    const size_t expert = (size_t)expert_ids[e];
    const size_t row_idx = expert * (size_t)n_out + (size_t)row;
    const unsigned char* w_row;
    const float* s_row = nullptr;
    if (DT == 0) {
        w_row = weights + row_idx * (size_t)k_in * 2;
    } else if (DT == 1) {
        w_row = weights + row_idx * (size_t)k_in;
    } else {
        w_row = weights + row_idx * (size_t)(k_in / 2);
        s_row = scales + row_idx * (size_t)(k_in / 32);
    }
    const float* xe = x + (size_t)e * tokens * k_in;
    float* ye = y + (size_t)e * tokens * n_out;
    for (int t0 = 0; t0 < tokens; t0 += TOK_TILE) {
        const int nt = min(TOK_TILE, tokens - t0);
        float acc[TOK_TILE];
#pragma unroll
        for (int t = 0; t < TOK_TILE; t++) acc[t] = 0.f;
#pragma unroll 4
        for (int k = lane * 8; k < k_in; k += 256) {
            float w[8];
            load8<DT>(w_row, s_row, k, w);
#pragma unroll
            for (int t = 0; t < TOK_TILE; t++) {
                if (t < nt) {
                    const float4* xp = reinterpret_cast<const float4*>(xe + (size_t)(t0 + t) * k_in + k);
                    float4 a = xp[0], b = xp[1];
                    acc[t] += w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w +
                              w[4] * b.x + w[5] * b.y + w[6] * b.z + w[7] * b.w;
                }
            }
        }
        float rs = (DT == 1) ? scales[row_idx] : 1.f;
#pragma unroll
        for (int t = 0; t < TOK_TILE; t++) {
            float v = warp_sum(acc[t]);
            if (lane == 0 && t < nt) ye[(size_t)(t0 + t) * n_out + row] = v * rs;
        }
    }
}

extern "C" __global__ void moe_gemv_bf16(const unsigned char* w, const float* s, const int* ids,
                                         const float* x, float* y, int n_out, int k_in, int tokens) {
    moe_gemv<0>(w, s, ids, x, y, n_out, k_in, tokens);
}
extern "C" __global__ void moe_gemv_fp8(const unsigned char* w, const float* s, const int* ids,
                                        const float* x, float* y, int n_out, int k_in, int tokens) {
    moe_gemv<1>(w, s, ids, x, y, n_out, k_in, tokens);
}
extern "C" __global__ void moe_gemv_int4(const unsigned char* w, const float* s, const int* ids,
                                         const float* x, float* y, int n_out, int k_in, int tokens) {
    moe_gemv<2>(w, s, ids, x, y, n_out, k_in, tokens);
}
