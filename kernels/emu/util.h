#pragma once
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include <algorithm>
static std::mt19937_64 rng(12345);
inline float urand(float a, float b) { return std::uniform_real_distribution<float>(a, b)(rng); }
inline unsigned char rbyte() { return (unsigned char)(rng() & 0xff); }
inline unsigned char mod_fp8(unsigned char b) { return (b & 0x87) | ((5 + ((b >> 3) & 3)) << 3); }
inline unsigned short mod_bf16(unsigned short r) { return (r & 0x807f) | ((124 + ((r >> 7) & 3)) << 7); }
static int failures = 0;
inline void check_close(const char* what, const std::vector<float>& got, const std::vector<double>& want, double atol, double rtol) {
    double worst = 0; size_t wi = 0;
    for (size_t i = 0; i < got.size(); i++) {
        double e = std::fabs(got[i] - want[i]) - (atol + rtol * std::fabs(want[i]));
        if (e > worst) { worst = e; wi = i; }
    }
    if (worst > 0) { failures++; printf("FAIL %s: element %zu got %g want %g\n", what, wi, got[wi], want[wi]); }
    else printf("ok   %s (%zu values)\n", what, got.size());
}
