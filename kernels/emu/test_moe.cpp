#include "moe_expert.cpp"
#include "util.h"
int main() {
    for (int dt = 0; dt < 3; dt++) for (int tokens : {1, 9, 17}) {
        int E = 6, touched = 3, N = 40, K = 768;
        size_t nw = (size_t)E * N * K;
        std::vector<unsigned char> w(dt == 0 ? 2 * nw : dt == 1 ? nw : nw / 2);
        for (auto& b : w) b = rbyte();
        if (dt == 1) for (auto& b : w) b = mod_fp8(b);
        if (dt == 0) for (size_t i = 0; i < nw; i++) { unsigned short u = w[2*i] | (w[2*i+1] << 8); u = mod_bf16(u); w[2*i] = u & 0xff; w[2*i+1] = u >> 8; }
        std::vector<float> s(dt == 0 ? 1 : dt == 1 ? (size_t)E * N : nw / 32);
        for (auto& v : s) v = urand(0.01f, 0.1f);
        std::vector<int> ids = {4, 0, 2};
        std::vector<float> x((size_t)touched * tokens * K), y((size_t)touched * tokens * N, -1.f);
        for (auto& v : x) v = urand(-1, 1);
        auto fn = dt == 0 ? moe_gemv_bf16 : dt == 1 ? moe_gemv_fp8 : moe_gemv_int4;
        launch({(unsigned)(N + 7) / 8, (unsigned)touched, 1}, {256, 1, 1}, 0, [&] { fn(w.data(), s.data(), ids.data(), x.data(), y.data(), N, K, tokens); });
        std::vector<double> ref(y.size());
        for (int e = 0; e < touched; e++) for (int n = 0; n < N; n++) {
            size_t r = (size_t)ids[e] * N + n;
            for (int t = 0; t < tokens; t++) {
                double acc = 0;
                for (int k = 0; k < K; k++) {
                    double wv;
                    if (dt == 0) wv = bf16_to_f32(w[2*(r*K+k)] | (w[2*(r*K+k)+1] << 8));
                    else if (dt == 1) wv = fp8_e4m3_to_f32(w[r*K+k]) * s[r];
                    else { unsigned char b = w[(r*K+k)/2]; wv = (k % 2 ? int4_hi(b) : int4_lo(b)) * s[r*(K/32) + k/32]; }
                    acc += wv * x[((size_t)e*tokens+t)*K+k];
                }
                ref[((size_t)e*tokens+t)*N+n] = acc;
            }
        }
        char name[64]; snprintf(name, 64, "moe dtype=%d tokens=%d", dt, tokens);
        check_close(name, y, ref, 1e-4, 1e-4);
    }
    return failures;
}
