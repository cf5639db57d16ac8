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
// Two kernels (split-KV "flash decoding"):
// 1. mla_decode_{dense,sparse,window}: grid (splits, batch, ceil(heads / HPB)), block
//    32 * HPB threads. Warp w of the block is head blockIdx.z * HPB + w; the heads of a
//    block read the same cache entries (so a row is fetched from memory once and served
//    to the other heads by L1). Split s covers the s-th of `splits` equal chunks of the
//    row's positions. Each warp runs an online softmax over its chunk and writes the
//    partial (max m, sum l, unnormalised acc[dim]) to the workspace at
//    [(b * splits + s) * heads + h]. Lane l owns dims [l*per, (l+1)*per), per = dim/32.
// 2. mla_decode_combine: grid (heads, batch), block 32: merges the splits into out.

#define HPB 16
#define MAX_PER 16

template <int MODE>
__device__ void mla_partial(const float* __restrict__ q, const unsigned char* __restrict__ kv,
                            const float* __restrict__ kv_scale, const int* __restrict__ block_table,
                            const int* __restrict__ seq_lens, const int* __restrict__ indices,
                            float* __restrict__ ws_m, float* __restrict__ ws_l,
                            float* __restrict__ ws_acc, int heads, int dim, int page_size,
                            int max_pages, int topk, int window, float softmax_scale, int splits) {
    const int split = blockIdx.x, b = blockIdx.y;
    const int h = blockIdx.z * HPB + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (h >= heads) return;  // whole warp; no block-level synchronisation below
    const int per = dim / 32;
    const int seq_len = seq_lens[b];
    int n, start = 0;
    if (MODE == 0) {
        n = seq_len;
    } else if (MODE == 1) {
        n = topk;
    } else {
        start = max(0, seq_len - window);
        n = seq_len - start;
    }
    const int chunk = (n + splits - 1) / splits;
    const int i0 = split * chunk;
    const int i1 = min(n, i0 + chunk);

    const float* qv = q + ((size_t)b * heads + h) * dim + lane * per;
    float qr[MAX_PER], acc[MAX_PER];
#pragma unroll
    for (int j = 0; j < MAX_PER; j++) {
        qr[j] = j < per ? qv[j] : 0.f;
        acc[j] = 0.f;
    }
    float m = TWIN_NEG_INF, l = 0.f;
#pragma unroll 2
    for (int i = i0; i < i1; i++) {
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
        load_fp8_row(row, per, ks, v);
        float dot = 0.f;
#pragma unroll
        for (int j = 0; j < MAX_PER; j++) dot += qr[j] * v[j];
        const float s = warp_sum(dot) * softmax_scale;
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new);  // exp(-inf) = 0 on the first position
        const float pexp = expf(s - m_new);
        l = l * corr + pexp;
#pragma unroll
        for (int j = 0; j < MAX_PER; j++) acc[j] = acc[j] * corr + pexp * v[j];
        m = m_new;
    }
    const size_t w = ((size_t)b * splits + split) * heads + h;
    if (lane == 0) {
        ws_m[w] = m;
        ws_l[w] = l;
    }
    float* wa = ws_acc + w * dim + lane * per;
#pragma unroll
    for (int j = 0; j < MAX_PER; j++)
        if (j < per) wa[j] = acc[j];
}

#define MLA_ARGS                                                                           \
    const float *q, const unsigned char *kv, const float *kv_scale, const int *block_table, \
        const int *seq_lens, const int *indices, float *ws_m, float *ws_l, float *ws_acc,   \
        int heads, int dim, int page_size, int max_pages, int topk, int window,             \
        float softmax_scale, int splits
#define MLA_PASS q, kv, kv_scale, block_table, seq_lens, indices, ws_m, ws_l, ws_acc, heads, dim, \
                 page_size, max_pages, topk, window, softmax_scale, splits

extern "C" __global__ void mla_decode_dense(MLA_ARGS) { mla_partial<0>(MLA_PASS); }
extern "C" __global__ void mla_decode_sparse(MLA_ARGS) { mla_partial<1>(MLA_PASS); }
extern "C" __global__ void mla_decode_window(MLA_ARGS) { mla_partial<2>(MLA_PASS); }

// Merges the splits of one (b, h): o = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.
// Rows without any position give zeros.
extern "C" __global__ void mla_decode_combine(const float* __restrict__ ws_m, const float* __restrict__ ws_l,
                                              const float* __restrict__ ws_acc, float* __restrict__ out,
                                              int heads, int dim, int splits) {
    const int h = blockIdx.x, b = blockIdx.y, lane = threadIdx.x & 31;
    const int per = dim / 32;
    float mg = TWIN_NEG_INF;
    for (int s = 0; s < splits; s++) mg = fmaxf(mg, ws_m[((size_t)b * splits + s) * heads + h]);
    float lg = 0.f;
    float o[MAX_PER];
#pragma unroll
    for (int j = 0; j < MAX_PER; j++) o[j] = 0.f;
    if (mg != TWIN_NEG_INF) {
        for (int s = 0; s < splits; s++) {
            const size_t w = ((size_t)b * splits + s) * heads + h;
            const float ms = ws_m[w];
            if (ms == TWIN_NEG_INF) continue;
            const float c = expf(ms - mg);
            lg += ws_l[w] * c;
            const float* wa = ws_acc + w * dim + lane * per;
#pragma unroll
            for (int j = 0; j < MAX_PER; j++)
                if (j < per) o[j] += wa[j] * c;
        }
    }
    const float inv = lg > 0.f ? 1.f / lg : 0.f;
    float* ov = out + ((size_t)b * heads + h) * dim + lane * per;
#pragma unroll
    for (int j = 0; j < MAX_PER; j++)
        if (j < per) ov[j] = o[j] * inv;
}
