// Minimal CUDA execution emulator for checking kernel indexing on a CPU:
// one block at a time, one std::thread per CUDA thread, real barriers for
// __syncthreads and for warp shuffles. Not for performance.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <math.h>
#include <memory>
#include <thread>
#include <vector>
struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct float4 { float x, y, z, w; };
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline std::unique_ptr<std::barrier<>> g_block_bar;
inline std::vector<std::unique_ptr<std::barrier<>>> g_warp_bar;
inline float g_shfl[32][32];
inline std::vector<unsigned char> g_dyn_smem;
inline void __syncthreads() { g_block_bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    g_shfl[w][lane] = v;
    g_warp_bar[w]->arrive_and_wait();
    float r = g_shfl[w][lane ^ o];
    g_warp_bar[w]->arrive_and_wait();
    return r;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline void launch(dim3 grid, dim3 block, size_t smem, std::function<void()> f) {
    gridDim = grid; blockDim = block;
    unsigned nt = block.x;
    for (unsigned z = 0; z < grid.z; z++) for (unsigned y = 0; y < grid.y; y++) for (unsigned x = 0; x < grid.x; x++) {
        g_dyn_smem.assign(smem, 0);
        g_block_bar = std::make_unique<std::barrier<>>(nt);
        g_warp_bar.clear();
        for (unsigned w = 0; w < (nt + 31) / 32; w++) g_warp_bar.push_back(std::make_unique<std::barrier<>>(32));
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < nt; t++) ts.emplace_back([=] { threadIdx = {t, 0, 0}; blockIdx = {x, y, z}; f(); });
        for (auto& t : ts) t.join();
    }
}
