// Where a forward pass's time goes: each traced op (with the host work before it) and
// what is left outside any op. Diagnostic, not a test.
use engine::serve::*;
use kernels::WeightDtype;
use std::collections::BTreeMap;
use std::time::Instant;
fn main() {
    let l = |a, w, i, m| LayerConfig {
        attention: a,
        window_branch: w,
        has_indexer: i,
        moe: m,
    };
    let cfg = ModelConfig {
        name: "x".into(),
        hidden: 512,
        vocab: 8192,
        heads: 4,
        latent: 128,
        window: 128,
        indexer: Some(IndexerConfig {
            heads: 2,
            dim: 64,
            topk: 128,
        }),
        layers: vec![
            l(AttnKind::Sparse, true, true, true),
            l(AttnKind::Sparse, true, false, true),
            l(AttnKind::Dense, false, false, true),
            l(AttnKind::Dense, false, false, true),
        ],
        moe: Some(MoeConfig {
            experts: 16,
            top_k: 2,
            expert_ffn: 256,
            shared_ffn: 256,
        }),
        dense_ffn: 0,
        mtp_ffn: 256,
        weight_dtype: WeightDtype::Bf16,
        page_size: 64,
    };
    let mut e = Executor::new(Box::new(CpuDevice::new()), cfg, 1, 0, 1, 2048).unwrap();
    for r in 0..16u32 {
        let s = Seq {
            tokens: (0..255).map(|i| (i * 7 + r) % 8192).collect(),
            start: 0,
            pages: (r * 8..r * 8 + 8).collect(),
            accept: None,
        };
        e.forward(&[s], 0, &mut Solo).unwrap();
    }
    e.set_trace(true);
    for b in [1usize, 8] {
        let seqs: Vec<Seq> = (0..b as u32)
            .map(|r| Seq {
                tokens: vec![5, 6],
                start: 255,
                pages: (r * 8..r * 8 + 8).collect(),
                accept: Some(1),
            })
            .collect();
        let mut by: BTreeMap<String, f64> = BTreeMap::new();
        let mut tot = 0.0;
        let n = 20;
        for _ in 0..n {
            let t = Instant::now();
            e.forward(&seqs, 1, &mut Solo).unwrap();
            tot += t.elapsed().as_secs_f64();
            for (c, s) in e.take_timed_trace() {
                *by.entry(c.op.to_string()).or_default() += s;
            }
        }
        let traced: f64 = by.values().sum();
        println!(
            "decode batch {b}: forward {:.3} ms, traced {:.3} ms, untraced {:.3} ms",
            1e3 * tot / n as f64,
            1e3 * traced / n as f64,
            1e3 * (tot - traced) / n as f64
        );
        for (k, v) in &by {
            println!("   {k:<14} {:.3} ms", 1e3 * v / n as f64);
        }
    }
}
