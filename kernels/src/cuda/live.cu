// Kernels of the live serving engine's model (CPU twins: src/cpu/live.rs; argument checks
// in src/live.rs, done on the host before any launch). Row-major layouts throughout.
//
// linear_{bf16,fp8,int4}: grouped linear layer. groups[g] = (expert, start, rows): rows
//   start..start+rows of x[rows][k_in] go through expert `expert` of
//   W[experts][n_out][k_in]; y[rows][n_out]. Grid (ceil(n_out / LWARPS), n_groups), block
//   32 * LWARPS; one warp per output column, tokens in tiles of LTOK (the weight row is
//   streamed once per tile, as in moe_expert.cu). k_in % 256 == 0.
// rmsnorm: one block per row; x += delta (when delta != 0), out = x * rsqrt(mean(x^2)+eps) * w.
// swiglu: out[r][j] = silu(gu[r][j]) * gu[r][ffn + j].
// gate_topk: one warp per row; softmax over `experts` logits, the k largest (ties to the
//   lower index) in descending order, weights renormalised. experts <= 32 * GT_PER, k <= 32.
// gather_rows: out[i] = src[idx[i]] (rows of dim floats).
// moe_combine: out[r] += sum_j w[r][j] * y[slots[r][j]] (slots < 0 skipped).
// add: x += y.
// kv_write: one warp per row; scale = max|v| / 448 (1 for a zero row); each value stored as
//   fp8 e4m3 by round-to-nearest-even on the bits, saturating (same steps as
//   live::quantize_fp8 on the CPU).
// argmax: one block per row; index of the largest value, ties to the lower index.

#define LWARPS 8
#define LTOK 8
#define GT_PER 8

template <int DT>
__device__ void linear_rows(const unsigned char* __restrict__ weights, const float* __restrict__ scales,
                            const int* __restrict__ groups, const float* __restrict__ x,
                            float* __restrict__ y, int n_out, int k_in) {
    const int lane = threadIdx.x & 31;
    const int col = blockIdx.x * LWARPS + (threadIdx.x >> 5);
    if (col >= n_out) return;
    const int* g = groups + 3 * blockIdx.y;
    const size_t expert = (size_t)g[0];
    const int start = g[1], rows = g[2];
    const size_t row_idx = expert * (size_t)n_out + (size_t)col;
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
    const float rs = (DT == 1) ? scales[row_idx] : 1.f;
    for (int t0 = 0; t0 < rows; t0 += LTOK) {
        const int nt = min(LTOK, rows - t0);
        float acc[LTOK];
#pragma unroll
        for (int t = 0; t < LTOK; t++) acc[t] = 0.f;
#pragma unroll 4
        for (int k = lane * 8; k < k_in; k += 256) {
            float w[8];
            load8<DT>(w_row, s_row, k, w);
#pragma unroll
            for (int t = 0; t < LTOK; t++) {
                if (t < nt) {
                    const float4* xp =
                        reinterpret_cast<const float4*>(x + (size_t)(start + t0 + t) * k_in + k);
                    float4 a = xp[0], b = xp[1];
                    acc[t] += w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x +
                              w[5] * b.y + w[6] * b.z + w[7] * b.w;
                }
            }
        }
#pragma unroll
        for (int t = 0; t < LTOK; t++) {
            float v = warp_sum(acc[t]);
            if (lane == 0 && t < nt) y[(size_t)(start + t0 + t) * n_out + col] = v * rs;
        }
    }
}

#define LINEAR_ARGS                                                                      \
    const unsigned char *w, const float *s, const int *groups, const float *x, float *y, \
        int n_out, int k_in
extern "C" __global__ void linear_bf16(LINEAR_ARGS) { linear_rows<0>(w, s, groups, x, y, n_out, k_in); }
extern "C" __global__ void linear_fp8(LINEAR_ARGS) { linear_rows<1>(w, s, groups, x, y, n_out, k_in); }
extern "C" __global__ void linear_int4(LINEAR_ARGS) { linear_rows<2>(w, s, groups, x, y, n_out, k_in); }

// Block-wide sum over blockDim.x (a multiple of 32, at most 1024) threads.
__device__ float block_sum(float v) {
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    const int nw = blockDim.x >> 5;
    float t = lane < nw ? part[lane] : 0.f;
    return warp_sum(t);
}

extern "C" __global__ void rmsnorm(float* __restrict__ x, const float* __restrict__ delta,
                                   const float* __restrict__ w, float* __restrict__ out, int dim,
                                   float eps) {
    float* xr = x + (size_t)blockIdx.x * dim;
    const float* dr = delta ? delta + (size_t)blockIdx.x * dim : nullptr;
    float ss = 0.f;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) {
        float v = xr[j];
        if (dr) {
            v += dr[j];
            xr[j] = v;
        }
        ss += v * v;
    }
    ss = block_sum(ss);
    const float inv = rsqrtf(ss / (float)dim + eps);
    float* orow = out + (size_t)blockIdx.x * dim;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) orow[j] = xr[j] * inv * w[j];
}

extern "C" __global__ void swiglu(const float* __restrict__ gu, float* __restrict__ out, int ffn,
                                  long long total) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const long long r = i / ffn, j = i % ffn;
    const float g = gu[r * 2 * ffn + j], u = gu[r * 2 * ffn + ffn + j];
    out[i] = g / (1.f + expf(-g)) * u;
}

extern "C" __global__ void gate_topk(const float* __restrict__ logits, int* __restrict__ ids,
                                     float* __restrict__ weights, int rows, int experts, int k) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const float* l = logits + (size_t)r * experts;
    float v[GT_PER];
    float m = TWIN_NEG_INF;
#pragma unroll
    for (int i = 0; i < GT_PER; i++) {
        const int e = lane + 32 * i;
        v[i] = e < experts ? l[e] : TWIN_NEG_INF;
        m = fmaxf(m, v[i]);
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.f;
    for (int j = 0; j < k; j++) {
        // Warp argmax over the remaining values: largest value, then lowest index.
        float bv = TWIN_NEG_INF;
        int be = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < GT_PER; i++) {
            const int e = lane + 32 * i;
            if (e < experts && (v[i] > bv || (v[i] == bv && e < be))) {
                bv = v[i];
                be = e;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oe = __shfl_xor_sync(0xffffffffu, be, o);
            if (ov > bv || (ov == bv && oe < be)) {
                bv = ov;
                be = oe;
            }
        }
        const float p = expf(bv - m);
        sum += p;
        if (lane == 0) {
            ids[(size_t)r * k + j] = be;
            weights[(size_t)r * k + j] = p;
        }
        if ((be & 31) == lane) v[be >> 5] = TWIN_NEG_INF;  // taken (selected values are finite)
    }
    __syncwarp();
    if (lane < k) weights[(size_t)r * k + lane] /= sum;
}

extern "C" __global__ void gather_rows(const float* __restrict__ src, const int* __restrict__ idx,
                                       float* __restrict__ out, int dim, long long total) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const long long r = i / dim, j = i % dim;
    out[i] = src[(size_t)idx[r] * dim + j];
}

extern "C" __global__ void moe_combine(const float* __restrict__ y, const int* __restrict__ slots,
                                       const float* __restrict__ w, float* __restrict__ out, int dim,
                                       int k) {
    const int r = blockIdx.x;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) {
        float acc = out[(size_t)r * dim + j];
        for (int s = 0; s < k; s++) {
            const int slot = slots[(size_t)r * k + s];
            if (slot >= 0) acc += w[(size_t)r * k + s] * y[(size_t)slot * dim + j];
        }
        out[(size_t)r * dim + j] = acc;
    }
}

extern "C" __global__ void add(float* __restrict__ x, const float* __restrict__ y, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

// f32 -> fp8 e4m3, round to nearest even, saturating at +-448 (NaN -> 0x7f).
__device__ __forceinline__ unsigned char quantize_fp8(float v) {
    if (v != v) return 0x7f;
    const unsigned char sign = (__float_as_uint(v) >> 24) & 0x80u;
    const float a = fabsf(v);
    if (a >= 448.f) return sign | 0x7e;
    if (a < 0.015625f) return sign | (unsigned char)rintf(a * 512.f);
    const unsigned int bits = __float_as_uint(a);
    int e = (int)(bits >> 23) - 127;
    const unsigned int mant = bits & 0x7fffffu;
    unsigned int q = mant >> 20;
    const unsigned int rem = mant & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) q++;
    if (q == 8u) {
        q = 0u;
        e++;
    }
    const unsigned int code = min((((unsigned int)(e + 7)) << 3) | q, 0x7eu);
    return sign | (unsigned char)code;
}

extern "C" __global__ void kv_write(const float* __restrict__ src, const int* __restrict__ slots,
                                    unsigned char* __restrict__ cache, float* __restrict__ scales,
                                    int rows, int dim) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const float* row = src + (size_t)r * dim;
    float m = 0.f;
    for (int j = lane; j < dim; j += 32) m = fmaxf(m, fabsf(row[j]));
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float sc = (m > 0.f && m <= 3.402823466e38f) ? m / 448.f : 1.f;
    const float inv = 1.f / sc;
    const size_t slot = (size_t)slots[r];
    for (int j = lane; j < dim; j += 32) cache[slot * dim + j] = quantize_fp8(row[j] * inv);
    if (lane == 0) scales[slot] = sc;
}

extern "C" __global__ void argmax(const float* __restrict__ logits, int* __restrict__ out, int n) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const float* row = logits + (size_t)blockIdx.x * n;
    float bv = TWIN_NEG_INF;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = row[i];
        if (v > bv || (v == bv && i < bi)) {
            bv = v;
            bi = i;
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) {
            bv = ov;
            bi = oi;
        }
    }
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++)
            if (sv[w] > bv || (sv[w] == bv && si[w] < bi)) {
                bv = sv[w];
                bi = si[w];
            }
        out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
    }
}
