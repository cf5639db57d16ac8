use engine::serve::*;
use std::time::Instant;
fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let (hidden, experts, topk, ffn, layers) = (args[0], args[1], args[2], args[3], args[4]);
    let cfg = bench_config(hidden, experts, topk, ffn, layers);
    let t = Instant::now();
    let mut e = Executor::new(
        Box::new(CpuDevice::new()),
        cfg,
        Shard {
            seed: 1,
            rank: 0,
            ranks: 1,
            pages: 2048,
        },
    )
    .unwrap();
    eprintln!("build {:.2}s", t.elapsed().as_secs_f64());
    prefill_all(&mut e);
    decode_sweep(&mut e);
}

/// Builds the benchmark model: two sparse layers, then dense MoE layers up to `layers`.
fn bench_config(
    hidden: usize,
    experts: usize,
    topk: usize,
    ffn: usize,
    layers: usize,
) -> ModelConfig {
    let l = |a, w, i, m| LayerConfig {
        attention: a,
        window_branch: w,
        has_indexer: i,
        moe: m,
    };
    let mut ls = vec![
        l(AttnKind::Sparse, true, true, true),
        l(AttnKind::Sparse, true, false, true),
    ];
    while ls.len() < layers {
        ls.push(l(AttnKind::Dense, false, false, true));
    }
    ModelConfig {
        name: "x".into(),
        hidden,
        vocab: 8192,
        heads: 4,
        latent: hidden / 4,
        window: 128,
        indexer: Some(IndexerConfig {
            heads: 2,
            dim: 64,
            topk: 128,
        }),
        layers: ls,
        moe: Some(MoeConfig {
            experts,
            top_k: topk,
            expert_ffn: ffn,
            shared_ffn: ffn,
        }),
        dense_ffn: 0,
        mtp_ffn: ffn,
        weight_dtype: LinearDtype::Bf16,
        page_size: 64,
    }
}

/// Prefills 16 requests of 255 tokens each, printing the first three timings.
fn prefill_all(e: &mut Executor) {
    // prefill 16 requests x 256 tokens
    for r in 0..16u32 {
        let pages: Vec<u32> = (r * 8..r * 8 + 8).collect();
        let s = Seq {
            tokens: (0..255).map(|i| (i * 7 + r) % 8192).collect(),
            start: 0,
            pages,
            accept: None,
        };
        let t = Instant::now();
        e.forward(&[s], 0, &mut Solo).unwrap();
        if r < 3 {
            eprintln!("prefill 255: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
        }
    }
}

/// Times decode steps (one draft token) at several batch sizes and prints the median.
fn decode_sweep(e: &mut Executor) {
    for b in [1usize, 4, 8, 16] {
        let seqs: Vec<Seq> = (0..b as u32)
            .map(|r| Seq {
                tokens: vec![5, 6],
                start: 255,
                pages: (r * 8..r * 8 + 8).collect(),
                accept: Some(1),
            })
            .collect();
        let mut ts = vec![];
        for _ in 0..5 {
            let t = Instant::now();
            e.forward(&seqs, 1, &mut Solo).unwrap();
            ts.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ts.sort_by(f64::total_cmp);
        eprintln!("decode batch {b} (+1 draft): {:.2} ms", ts[2]);
    }
}
