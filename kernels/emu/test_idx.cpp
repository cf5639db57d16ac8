#include "indexer.cpp"
#include "util.h"
#include <set>
void check_topk(const char* name, const std::vector<float>& sc, const std::vector<int>& sel, int B, int n, int k) {
    bool ok = true;
    for (int b = 0; b < B && ok; b++) {
        std::vector<int> s(sel.begin() + b * k, sel.begin() + (b + 1) * k);
        std::vector<int> valid; for (int i : s) if (i >= 0) valid.push_back(i);
        int want = std::min(n, k);
        std::set<int> uniq(valid.begin(), valid.end());
        if ((int)valid.size() != want || (int)uniq.size() != want) { ok = false; printf("  count %zu uniq %zu want %d\n", valid.size(), uniq.size(), want); break; }
        std::vector<float> got, all(sc.begin() + (size_t)b * n, sc.begin() + (size_t)(b + 1) * n);
        for (int i : valid) { if (i >= n) { ok = false; break; } got.push_back(all[i]); }
        std::sort(got.rbegin(), got.rend()); std::sort(all.rbegin(), all.rend());
        for (int i = 0; i < want && ok; i++) if (got[i] != all[i]) { ok = false; printf("  rank %d got %g want %g\n", i, got[i], all[i]); }
    }
    if (!ok) { failures++; printf("FAIL %s\n", name); } else printf("ok   %s\n", name);
}
int main() {
    {
        int B = 2, H = 16, D = 128, n = 1000, k = 64;
        std::vector<float> q((size_t)B * H * D), w((size_t)B * H), ks((size_t)B * n), sc((size_t)B * n);
        std::vector<unsigned char> key((size_t)B * n * D);
        for (auto& v : q) v = urand(-1, 1); for (auto& v : w) v = urand(0, 1); for (auto& v : ks) v = urand(0.5, 1.5);
        for (auto& b : key) b = mod_fp8(rbyte());
        launch({(unsigned)(n + 7) / 8, (unsigned)B, 1}, {256, 1, 1}, (size_t)H * D * 4, [&] { dsa_indexer_scores(q.data(), w.data(), key.data(), ks.data(), sc.data(), H, D, n); });
        std::vector<double> ref(sc.size());
        for (int b = 0; b < B; b++) for (int p = 0; p < n; p++) {
            double tot = 0; size_t slot = (size_t)b * n + p;
            for (int h = 0; h < H; h++) { double d = 0; for (int j = 0; j < D; j++) d += q[((size_t)b * H + h) * D + j] * (double)fp8_e4m3_to_f32(key[slot * D + j]); d *= ks[slot]; tot += w[b * H + h] * std::max(d, 0.0); }
            ref[slot] = tot;
        }
        check_close("indexer scores", sc, ref, 1e-4, 1e-4);
        std::vector<int> sel((size_t)B * k, -5);
        launch({(unsigned)B, 1, 1}, {1024, 1, 1}, 0, [&] { block_topk(sc.data(), sel.data(), n, k); });
        check_topk("topk of indexer scores", sc, sel, B, n, k);
    }
    for (int variant = 0; variant < 4; variant++) {
        int B = 2, n = variant == 3 ? 100 : 5000, k = variant == 3 ? 128 : 256;
        std::vector<float> sc((size_t)B * n);
        for (auto& v : sc) v = variant == 0 ? urand(-5, 5) : variant == 1 ? (float)(rng() % 7) - 3.f : variant == 2 ? 1.5f : urand(0, 1);
        std::vector<int> sel((size_t)B * k, -5);
        launch({(unsigned)B, 1, 1}, {1024, 1, 1}, 0, [&] { block_topk(sc.data(), sel.data(), n, k); });
        char name[64]; snprintf(name, 64, "topk variant %d (n=%d k=%d)", variant, n, k);
        check_topk(name, sc, sel, B, n, k);
    }
    return failures;
}
