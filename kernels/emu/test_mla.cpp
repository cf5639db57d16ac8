#include "mla_decode.cpp"
#include "util.h"
int main() {
    for (int mode = 0; mode < 3; mode++) for (int dim : {64, 512}) for (int heads : {5, 20}) {
        int B = 3, page = 16, seq = 333, topk = 64, window = 50, splits = 3;
        int max_pages = (seq + page - 1) / page, n_pages = B * max_pages;
        std::vector<int> bt(n_pages); for (int i = 0; i < n_pages; i++) bt[i] = i;
        std::shuffle(bt.begin(), bt.end(), rng);
        std::vector<unsigned char> kv((size_t)n_pages * page * dim); for (auto& b : kv) b = mod_fp8(rbyte());
        std::vector<float> ks((size_t)n_pages * page); for (auto& v : ks) v = urand(0.5, 1.5);
        std::vector<int> lens = {seq, seq, 100};
        std::vector<float> q((size_t)B * heads * dim); for (auto& v : q) v = urand(-1, 1);
        std::vector<int> idx((size_t)B * topk);
        for (size_t i = 0; i < idx.size(); i++) idx[i] = (i % 17 == 16) ? -1 : (int)(rng() % seq);
        if (mode == 1) for (int i = 0; i < topk; i++) idx[2 * topk + i] = 200 + i; // row 2: all beyond len 100 -> empty
        size_t ws = (size_t)B * splits * heads;
        std::vector<float> wm(ws), wl(ws), wa(ws * dim), out((size_t)B * heads * dim, -7.f);
        float scale = 1.f / std::sqrt((float)dim);
        auto fn = mode == 0 ? mla_decode_dense : mode == 1 ? mla_decode_sparse : mla_decode_window;
        launch({(unsigned)splits, (unsigned)B, (unsigned)(heads + 15) / 16}, {512, 1, 1}, 0, [&] {
            fn(q.data(), kv.data(), ks.data(), bt.data(), lens.data(), idx.data(), wm.data(), wl.data(), wa.data(),
               heads, dim, page, max_pages, topk, window, scale, splits);
        });
        launch({(unsigned)heads, (unsigned)B, 1}, {32, 1, 1}, 0, [&] { mla_decode_combine(wm.data(), wl.data(), wa.data(), out.data(), heads, dim, splits); });
        std::vector<double> ref(out.size(), 0.0);
        for (int b = 0; b < B; b++) {
            std::vector<int> pos;
            int len = lens[b];
            if (mode == 0) for (int p = 0; p < len; p++) pos.push_back(p);
            if (mode == 1) for (int i = 0; i < topk; i++) { int p = idx[b * topk + i]; if (p >= 0 && p < len) pos.push_back(p); }
            if (mode == 2) for (int p = std::max(0, len - window); p < len; p++) pos.push_back(p);
            for (int h = 0; h < heads; h++) {
                std::vector<double> sc; std::vector<std::vector<double>> vals;
                for (int p : pos) {
                    size_t slot = (size_t)bt[b * max_pages + p / page] * page + p % page;
                    std::vector<double> v(dim); double d = 0;
                    for (int j = 0; j < dim; j++) { v[j] = fp8_e4m3_to_f32(kv[slot * dim + j]) * (double)ks[slot]; d += v[j] * q[((size_t)b * heads + h) * dim + j]; }
                    sc.push_back(d * scale); vals.push_back(v);
                }
                if (pos.empty()) continue;
                double m = *std::max_element(sc.begin(), sc.end()), z = 0;
                for (auto& s : sc) { s = std::exp(s - m); z += s; }
                for (size_t i = 0; i < pos.size(); i++) for (int j = 0; j < dim; j++) ref[((size_t)b * heads + h) * dim + j] += sc[i] / z * vals[i][j];
            }
        }
        char name[80]; snprintf(name, 80, "mla mode=%d dim=%d heads=%d", mode, dim, heads);
        check_close(name, out, ref, 1e-4, 1e-3);
    }
    return failures;
}
