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
// Grid: (ceil(n_out / (MOE_WARPS * MOE_ROWS)), touched); block: 32 * MOE_WARPS threads.
// Warp w of block b owns MOE_ROWS consecutive output rows from (b * MOE_WARPS + w) *
// MOE_ROWS. A weight row is read in 16-byte chunks (8 bf16, 16 fp8 or 32 int4 weights:
// an int4 chunk is exactly one scale group); lane l reads chunks l, l + 32, ... of each
// of its warp's rows, all MOE_ROWS loads issued before any arithmetic (bytes in flight
// per lane: 16 * MOE_ROWS, whatever the dtype), through the non-coherent path without
// allocating in L1 (each weight is read once) so that L1 keeps x, which every row of
// the expert reads. FP8 is decoded by the hardware's E4M3 conversion (sm_89+), two
// weights an instruction. Measured on one H100 (docs/measured/gpu-h100-2026-12-05), the
// best of 1 to 4 tokens and 1 to 32 experts (n 2048, k 7168) as a share of its
// measured 3.14 TB/s HBM read: the 12-04 kernel (one row a warp, 16/8/4-byte loads for
// bf16/fp8/int4) reached 33%/15%/14% (of an H200's); four rows a warp with 16-byte
// loads 91%/20%/33%; with the E4M3 conversion and each chunk's sums kept apart before
// being added fp8 reached 65%, while the same sums kept apart (and int4 decoded by a
// float trick with its group scale applied once a chunk) cost bf16 79% and int4 23%.
// Each dtype runs the variant that measured best: bf16 and int4 add to the sums
// directly, fp8 keeps a chunk's sums apart. fp8 and int4 stay short of the bandwidth:
// their decodes, not their loads, bound them.

#define MOE_WARPS 4
#define MOE_ROWS 4
#define TOK_TILE 8

__device__ __forceinline__ uint4 ld_stream16(const void* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

// Two E4M3 bytes (low byte first) as f32: one hardware conversion to a pair of halves
// where the GPU has it (sm_89 and later), else the integer decode of common.cuh.
__device__ __forceinline__ void fp8x2_to_f32(unsigned int two, float* lo, float* hi) {
#if __CUDA_ARCH__ >= 890
    unsigned int h2;
    const unsigned short b = (unsigned short)two;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(b));
    asm("{.reg .f16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;}"
        : "=f"(*lo), "=f"(*hi)
        : "r"(h2));
#else
    *lo = fp8_e4m3_to_f32((unsigned char)(two & 0xffu));
    *hi = fp8_e4m3_to_f32((unsigned char)((two >> 8) & 0xffu));
#endif
}

// Weights j0 .. j0+8 of a 16-byte chunk as f32 (fp8 unscaled: its row scale is
// applied to the sums; int4 times its chunk's group scale `gs`).
template <int DT>
__device__ __forceinline__ void chunk8(const uint4& c, int j0, float gs, float* w) {
    const unsigned int u[4] = {c.x, c.y, c.z, c.w};
    if (DT == 0) {  // 8 bf16, j0 == 0
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w[2 * i] = bf16_to_f32((unsigned short)(u[i] & 0xffffu));
            w[2 * i + 1] = bf16_to_f32((unsigned short)(u[i] >> 16));
        }
    } else if (DT == 1) {  // 16 fp8, j0 in {0, 8}: bytes j0 .. j0+8 = words j0/4, j0/4+1
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const unsigned int word = u[j0 / 4 + i];
            fp8x2_to_f32(word, &w[4 * i], &w[4 * i + 1]);
            fp8x2_to_f32(word >> 16, &w[4 * i + 2], &w[4 * i + 3]);
        }
    } else {  // 32 int4, j0 in {0, 8, 16, 24}: bytes j0/2 .. j0/2+4, low nibble first
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int byte = j0 / 2 + i;
            const unsigned char b = (unsigned char)(u[byte / 4] >> (8 * (byte % 4)));
            w[2 * i] = int4_lo(b) * gs;
            w[2 * i + 1] = int4_hi(b) * gs;
        }
    }
}

// Adds chunk `c`'s products (weights `raw` of each row, x of each token of the tile)
// to sums[row][token].
template <int DT>
__device__ __forceinline__ void chunk_dot(const uint4* raw, const float* gs, const float* __restrict__ xe,
                                          int k_in, int t0, int nt, int c,
                                          float (&sums)[MOE_ROWS][TOK_TILE]) {
    constexpr int WPC = DT == 0 ? 8 : (DT == 1 ? 16 : 32);
#pragma unroll
    for (int j0 = 0; j0 < WPC; j0 += 8) {
        float w[MOE_ROWS][8];
#pragma unroll
        for (int r = 0; r < MOE_ROWS; r++) chunk8<DT>(raw[r], j0, gs[r], w[r]);
#pragma unroll
        for (int t = 0; t < TOK_TILE; t++) {
            if (t < nt) {
                const float4* xp =
                    reinterpret_cast<const float4*>(xe + (size_t)(t0 + t) * k_in + (size_t)c * WPC + j0);
                const float4 a = __ldg(xp), b = __ldg(xp + 1);
#pragma unroll
                for (int r = 0; r < MOE_ROWS; r++)
                    sums[r][t] += w[r][0] * a.x + w[r][1] * a.y + w[r][2] * a.z + w[r][3] * a.w +
                                  w[r][4] * b.x + w[r][5] * b.y + w[r][6] * b.z + w[r][7] * b.w;
            }
        }
    }
}

template <int DT>
__device__ void moe_gemv(const unsigned char* __restrict__ weights, const float* __restrict__ scales,
                         const int* __restrict__ expert_ids, const float* __restrict__ x,
                         float* __restrict__ y, int n_out, int k_in, int tokens) {
    constexpr int WPC = DT == 0 ? 8 : (DT == 1 ? 16 : 32);  // weights per 16-byte chunk
    const int lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * MOE_WARPS + (threadIdx.x >> 5)) * MOE_ROWS;
    const int e = blockIdx.y;
    if (row0 >= n_out) return;  // whole warp
    const size_t expert = (size_t)expert_ids[e];
    const size_t row_bytes = (size_t)k_in * (DT == 0 ? 2 : 1) / (DT == 2 ? 2 : 1);
    const int chunks = k_in / WPC;
    const unsigned char* w_row[MOE_ROWS];
    const float* s_row[MOE_ROWS];
    size_t row_idx[MOE_ROWS];
#pragma unroll
    for (int r = 0; r < MOE_ROWS; r++) {
        // Rows past n_out re-read the last row (their sums are never written).
        row_idx[r] = expert * (size_t)n_out + (size_t)min(row0 + r, n_out - 1);
        w_row[r] = weights + row_idx[r] * row_bytes;
        s_row[r] = DT == 2 ? scales + row_idx[r] * (size_t)(k_in / 32) : nullptr;
    }
    const float* xe = x + (size_t)e * tokens * k_in;
    float* ye = y + (size_t)e * tokens * n_out;
    for (int t0 = 0; t0 < tokens; t0 += TOK_TILE) {
        const int nt = min(TOK_TILE, tokens - t0);
        float acc[MOE_ROWS][TOK_TILE];
#pragma unroll
        for (int r = 0; r < MOE_ROWS; r++)
#pragma unroll
            for (int t = 0; t < TOK_TILE; t++) acc[r][t] = 0.f;
#pragma unroll 2
        for (int c = lane; c < chunks; c += 32) {
            uint4 raw[MOE_ROWS];
            float gs[MOE_ROWS];
#pragma unroll
            for (int r = 0; r < MOE_ROWS; r++) raw[r] = ld_stream16(w_row[r] + (size_t)c * 16);
#pragma unroll
            for (int r = 0; r < MOE_ROWS; r++) gs[r] = DT == 2 ? __ldg(s_row[r] + c) : 1.f;
            if (DT == 1) {
                // fp8: each chunk's sums first, then added (measured faster than adding
                // to acc directly for fp8, slower for bf16 and int4: see the header).
                float part[MOE_ROWS][TOK_TILE];
#pragma unroll
                for (int r = 0; r < MOE_ROWS; r++)
#pragma unroll
                    for (int t = 0; t < TOK_TILE; t++) part[r][t] = 0.f;
                chunk_dot<DT>(raw, gs, xe, k_in, t0, nt, c, part);
#pragma unroll
                for (int r = 0; r < MOE_ROWS; r++)
#pragma unroll
                    for (int t = 0; t < TOK_TILE; t++) acc[r][t] += part[r][t];
            } else {
                chunk_dot<DT>(raw, gs, xe, k_in, t0, nt, c, acc);
            }
        }
#pragma unroll
        for (int r = 0; r < MOE_ROWS; r++) {
            const float rs = (DT == 1) ? scales[row_idx[r]] : 1.f;
#pragma unroll
            for (int t = 0; t < TOK_TILE; t++) {
                const float v = warp_sum(acc[r][t]);
                if (lane == 0 && t < nt && row0 + r < n_out) ye[(size_t)(t0 + t) * n_out + row0 + r] = v * rs;
            }
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
