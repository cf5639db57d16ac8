#include "gather.cpp"
#include "copy_only.cpp" // copy.cu without the shared helpers (already included by gather.cpp)
#include "util.h"
int main() {
    int rows = 1000, rb = 256, n = 300;
    std::vector<unsigned char> table((size_t)rows * rb); for (auto& b : table) b = rbyte();
    std::vector<unsigned long long> idx(n); for (auto& i : idx) i = rng() % rows;
    std::vector<unsigned char> out((size_t)n * rb);
    launch({(unsigned)(n + 7) / 8, 1, 1}, {256, 1, 1}, 0, [&] { engram_gather(table.data(), idx.data(), out.data(), n, rb); });
    bool ok = true; for (int i = 0; i < n; i++) ok &= memcmp(&out[(size_t)i * rb], &table[idx[i] * rb], rb) == 0;
    printf("%s gather\n", ok ? "ok  " : "FAIL"); failures += !ok;
    size_t bytes = 16 * 3001; std::vector<unsigned char> src(bytes), dst(bytes);
    for (auto& b : src) b = rbyte();
    launch({4, 1, 1}, {256, 1, 1}, 0, [&] { device_copy((const uint4*)src.data(), (uint4*)dst.data(), bytes / 16); });
    ok = src == dst; printf("%s copy\n", ok ? "ok  " : "FAIL"); failures += !ok;
    std::vector<unsigned> sink(4 * 256);
    launch({4, 1, 1}, {256, 1, 1}, 0, [&] { stream_read((const uint4*)src.data(), sink.data(), bytes / 16); });
    unsigned a = 0, b = 0; for (unsigned v : sink) a ^= v; for (size_t i = 0; i < bytes / 4; i++) { unsigned u; memcpy(&u, &src[4 * i], 4); b ^= u; }
    ok = a == b; printf("%s stream_read xor\n", ok ? "ok  " : "FAIL"); failures += !ok;
    return failures;
}
