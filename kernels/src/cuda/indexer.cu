// Sparse-attention indexer (DeepSeek DSA "lightning indexer") and top-k selection.
//
// dsa_indexer_scores: for each query row b and position p,
//   score[b, p] = sum_h w[b, h] * relu(key_scale[b, p] * (q[b, h, :] . key[b, p, :]))
// q[batch][heads][dim] f32, w[batch][heads] f32, key[batch][n_pos][dim] fp8 e4m3,
// key_scale[batch][n_pos] f32, score[batch][n_pos] f32.
// Requirements (checked on the host): dim % 32 == 0, dim <= 512, heads*dim*4 <= 48 KiB.
// Grid: (ceil(n_pos / IWARPS), batch); block 32 * IWARPS; one warp per position; the
// queries of row b are staged in (dynamic) shared memory.
//
// block_topk: per query row, the indices of the `k` largest scores (unordered), by a
// four-pass 8-bit radix select on order-preserving integer keys; ties at the threshold
// are taken in arbitrary order. Rows with n_pos <= k return all positions, padded
// with -1. Grid: (batch); block: TOPK_THREADS threads.

#define IWARPS 8
#define TOPK_THREADS 1024
#define MAX_PER 16

extern "C" __global__ void dsa_indexer_scores(const float* __restrict__ q, const float* __restrict__ w,
                                              const unsigned char* __restrict__ key,
                                              const float* __restrict__ key_scale,
                                              float* __restrict__ score, int heads, int dim,
                                              int n_pos) {
    extern __shared__ float sq[];
    const int b = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < heads * dim; i += blockDim.x) sq[i] = q[(size_t)b * heads * dim + i];
    __syncthreads();
    const int p = blockIdx.x * IWARPS + warp;
    if (p >= n_pos) return;
    const int per = dim / 32;
    const size_t slot = (size_t)b * n_pos + p;
    const unsigned char* row = key + slot * dim + lane * per;
    float kr[MAX_PER];
    load_fp8_row(row, per, 1.f, kr);
    const float ks = key_scale[slot];
    float total = 0.f;
    for (int h = 0; h < heads; h++) {
        const float* qh = sq + h * dim + lane * per;
        float d = 0.f;
#pragma unroll
        for (int j = 0; j < MAX_PER; j++)
            if (j < per) d += qh[j] * kr[j];
        d = warp_sum(d) * ks;
        total += w[(size_t)b * heads + h] * fmaxf(d, 0.f);
    }
    if (lane == 0) score[slot] = total;
}

// dsa_indexer_scores_paged: the same scores for query rows over a paged key cache:
// keys[n_pages][page_size][dim] fp8, key_scale[n_pages][page_size]; position p of row r
// lives in page block_table[r * max_pages + p / page_size]. Row r scores positions
// 0..seq_lens[r]-1; positions seq_lens[r]..n_pos-1 score -inf (block_topk then prefers
// real positions; the attention kernel skips the rest). Grid (ceil(n_pos / IWARPS), rows).
extern "C" __global__ void dsa_indexer_scores_paged(
    const float* __restrict__ q, const float* __restrict__ w, const unsigned char* __restrict__ key,
    const float* __restrict__ key_scale, const int* __restrict__ block_table,
    const int* __restrict__ seq_lens, float* __restrict__ score, int heads, int dim, int n_pos,
    int page_size, int max_pages) {
    extern __shared__ float sq[];
    const int r = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < heads * dim; i += blockDim.x) sq[i] = q[(size_t)r * heads * dim + i];
    __syncthreads();
    const int p = blockIdx.x * IWARPS + warp;
    if (p >= n_pos) return;
    if (p >= seq_lens[r]) {
        if (lane == 0) score[(size_t)r * n_pos + p] = TWIN_NEG_INF;
        return;
    }
    const int per = dim / 32;
    const size_t slot = (size_t)block_table[(size_t)r * max_pages + p / page_size] * page_size +
                        (size_t)(p % page_size);
    float kr[MAX_PER];
    load_fp8_row(key + slot * dim + lane * per, per, 1.f, kr);
    const float ks = key_scale[slot];
    float total = 0.f;
    for (int h = 0; h < heads; h++) {
        const float* qh = sq + h * dim + lane * per;
        float d = 0.f;
#pragma unroll
        for (int j = 0; j < MAX_PER; j++)
            if (j < per) d += qh[j] * kr[j];
        d = warp_sum(d) * ks;
        total += w[(size_t)r * heads + h] * fmaxf(d, 0.f);
    }
    if (lane == 0) score[(size_t)r * n_pos + p] = total;
}

// Order-preserving map from f32 to u32 (larger float -> larger key).
__device__ __forceinline__ unsigned int float_key(float f) {
    unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

extern "C" __global__ void block_topk(const float* __restrict__ score, int* __restrict__ out_idx,
                                      int n_pos, int k) {
    __shared__ unsigned int hist[256];
    __shared__ unsigned int s_prefix, s_remaining, s_gt, s_eq;
    const int b = blockIdx.x;
    const float* sc = score + (size_t)b * n_pos;
    int* out = out_idx + (size_t)b * k;
    if (n_pos <= k) {
        for (int i = threadIdx.x; i < k; i += blockDim.x) out[i] = i < n_pos ? i : -1;
        return;
    }
    if (threadIdx.x == 0) {
        s_prefix = 0u;
        s_remaining = (unsigned int)k;
    }
    unsigned int mask = 0u;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0u;
        __syncthreads();
        const unsigned int prefix = s_prefix;
        for (int i = threadIdx.x; i < n_pos; i += blockDim.x) {
            unsigned int key = float_key(sc[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xFFu], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned int rem = s_remaining, cum = 0u;
            int bin = 255;
            for (; bin > 0; bin--) {
                if (cum + hist[bin] >= rem) break;
                cum += hist[bin];
            }
            s_remaining = rem - cum;
            s_prefix = prefix | ((unsigned int)bin << shift);
        }
        mask |= 0xFFu << shift;
        __syncthreads();
    }
    // s_prefix is now the key of the k-th largest score; s_remaining of the entries equal
    // to it are taken, after every entry strictly greater (there are k - s_remaining).
    if (threadIdx.x == 0) {
        s_gt = 0u;
        s_eq = 0u;
    }
    __syncthreads();
    const unsigned int thr = s_prefix, take_eq = s_remaining;
    const unsigned int n_gt = (unsigned int)k - take_eq;
    for (int i = threadIdx.x; i < n_pos; i += blockDim.x) {
        unsigned int key = float_key(sc[i]);
        if (key > thr) {
            out[atomicAdd(&s_gt, 1u)] = i;
        } else if (key == thr) {
            unsigned int slot = atomicAdd(&s_eq, 1u);
            if (slot < take_eq) out[n_gt + slot] = i;
        }
    }
}
