// Attention decode over a paged latent KV cache (MLA-like): one shared KV head whose
// entries are latent vectors of `dim` fp8 (e4m3) values with one f32 scale per entry;
// the latent serves as both key and value. For every query row b and head h:
//   s_i = softmax_scale * q[b,h,:] . kv(p_i),   o[b,h,:] = sum_i softmax(s)_i kv(p_i)
// over positions p_i chosen by the mode:
//   dense : p = 0 .. seq_len-1
//   sparse: p = indices[b, i] for i < topk (entries < 0 or >= seq_len are skipped)
//   window: p = max(0, seq_len-window) .. seq_len-1
// Paging: position p of row b lives in page block_table[b * max_pages + p / page_size],
// slot p % page_size; kv[page][slot][dim], kv_scale[page][slot].
// Requirements (checked on the host): dim % 32 == 0, dim <= 512.
//
// Grid: (heads, batch); block: 32 * AWARPS threads. Each warp walks a strided subset of
// positions with an online softmax; lane l owns dims [l*per, (l+1)*per), per = dim/32.
// Warps are merged through shared memory at the end.

#define AWARPS 4
#define MAX_PER 16

template <int MODE>
__device__ void mla_decode(const float* __restrict__ q, const unsigned char* __restrict__ kv,
                           const float* __restrict__ kv_scale, const int* __restrict__ block_table,
                           const int* __restrict__ seq_lens, const int* __restrict__ indices,
                           float* __restrict__ out, int heads, int dim, int page_size,
                           int max_pages, int topk, int window, float softmax_scale) {
    __shared__ float sm_m[AWARPS];
    __shared__ float sm_l[AWARPS];
    __shared__ float sm_acc[AWARPS][512];
    const int h = blockIdx.x, b = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int per = dim / 32;
    const int seq_len = seq_lens[b];
    const float* qv = q + ((size_t)b * heads + h) * dim + lane * per;
    float qr[MAX_PER], acc[MAX_PER];
#pragma unroll
    for (int j = 0; j < MAX_PER; j++) {
        qr[j] = j < per ? qv[j] : 0.f;
        acc[j] = 0.f;
    }
    int n, start = 0;
    if (MODE == 0) {
        n = seq_len;
    } else if (MODE == 1) {
        n = topk;
    } else {
        start = max(0, seq_len - window);
        n = seq_len - start;
    }
    float m = TWIN_NEG_INF, l = 0.f;
    for (int i = warp; i < n; i += AWARPS) {
        int p;
        if (MODE == 1) {
            p = indices[(size_t)b * topk + i];
            if (p < 0 || p >= seq_len) continue;  // warp-uniform
        } else {
            p = start + i;
        }
        const size_t slot = (size_t)block_table[(size_t)b * max_pages + p / page_size] * page_size +
                            (size_t)(p % page_size);
        const unsigned char* row = kv + slot * dim + lane * per;
        const float ks = kv_scale[slot];
        float v[MAX_PER];
        float dot = 0.f;
#pragma unroll
        for (int j = 0; j < MAX_PER; j++) {
            v[j] = j < per ? fp8_e4m3_to_f32(row[j]) * ks : 0.f;
            dot += qr[j] * v[j];
        }
        const float s = warp_sum(dot) * softmax_scale;
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new);  // exp(-inf) = 0 on the first position
        const float pexp = expf(s - m_new);
        l = l * corr + pexp;
#pragma unroll
        for (int j = 0; j < MAX_PER; j++) acc[j] = acc[j] * corr + pexp * v[j];
        m = m_new;
    }
    if (lane == 0) {
        sm_m[warp] = m;
        sm_l[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < MAX_PER; j++)
        if (j < per) sm_acc[warp][lane * per + j] = acc[j];
    __syncthreads();
    if (warp == 0) {
        float mg = TWIN_NEG_INF;
        for (int w = 0; w < AWARPS; w++) mg = fmaxf(mg, sm_m[w]);
        float lg = 0.f;
        float o[MAX_PER];
#pragma unroll
        for (int j = 0; j < MAX_PER; j++) o[j] = 0.f;
        if (mg != TWIN_NEG_INF) {
            for (int w = 0; w < AWARPS; w++) {
                if (sm_m[w] == TWIN_NEG_INF) continue;
                const float c = expf(sm_m[w] - mg);
                lg += sm_l[w] * c;
#pragma unroll
                for (int j = 0; j < MAX_PER; j++)
                    if (j < per) o[j] += sm_acc[w][lane * per + j] * c;
            }
        }
        const float inv = lg > 0.f ? 1.f / lg : 0.f;
        float* ov = out + ((size_t)b * heads + h) * dim + lane * per;
#pragma unroll
        for (int j = 0; j < MAX_PER; j++)
            if (j < per) ov[j] = o[j] * inv;
    }
}

#define MLA_ARGS                                                                          \
    const float *q, const unsigned char *kv, const float *kv_scale, const int *block_table, \
        const int *seq_lens, const int *indices, float *out, int heads, int dim,           \
        int page_size, int max_pages, int topk, int window, float softmax_scale
#define MLA_PASS q, kv, kv_scale, block_table, seq_lens, indices, out, heads, dim, page_size, \
                 max_pages, topk, window, softmax_scale

extern "C" __global__ void mla_decode_dense(MLA_ARGS) { mla_decode<0>(MLA_PASS); }
extern "C" __global__ void mla_decode_sparse(MLA_ARGS) { mla_decode<1>(MLA_PASS); }
extern "C" __global__ void mla_decode_window(MLA_ARGS) { mla_decode<2>(MLA_PASS); }
