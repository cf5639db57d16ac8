//! One forward step of the live engine on the CPU device: the serving executor runs a
//! small DeepSeek-shaped model (sparse attention with an indexer and a window branch,
//! dense and window layers, MoE; seeded random weights) over a paged KV cache, as
//! `twin live` does on a host without a GPU. Decode steps of 1 and 8 sequences at a
//! 256-token context, with and without one MTP draft, and one 64-token prefill chunk.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use engine::serve::{
    AttnKind, CpuDevice, Executor, IndexerConfig, LayerConfig, LinearDtype, ModelConfig, MoeConfig,
    Seq, Shard, Solo,
};

const VOCAB: u32 = 512;
const CONTEXT: usize = 256;
/// Pages per sequence (16 tokens each): the context, a draft, room to spare.
const PAGES: u32 = 20;
const BATCH: u32 = 8;

fn model() -> ModelConfig {
    let layer = |attention, window_branch, has_indexer, moe| LayerConfig {
        attention,
        window_branch,
        has_indexer,
        moe,
    };
    ModelConfig {
        name: "bench-small".into(),
        hidden: 256,
        vocab: VOCAB as usize,
        heads: 2,
        latent: 128,
        window: 16,
        indexer: Some(IndexerConfig {
            heads: 2,
            dim: 32,
            topk: 64,
        }),
        layers: vec![
            layer(AttnKind::Sparse, true, true, true),
            layer(AttnKind::Sparse, false, false, true),
            layer(AttnKind::Dense, false, false, false),
            layer(AttnKind::Window, false, false, true),
        ],
        moe: Some(MoeConfig {
            experts: 8,
            top_k: 2,
            expert_ffn: 256,
            shared_ffn: 256,
        }),
        dense_ffn: 256,
        mtp_ffn: 256,
        weight_dtype: LinearDtype::Bf16,
        page_size: 16,
    }
}

fn pages(r: u32) -> Vec<u32> {
    (r * PAGES..(r + 1) * PAGES).collect()
}

fn prompt(r: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 37 + r * 11 + 5) % VOCAB)
        .collect()
}

/// An executor whose first `BATCH` sequences hold a `CONTEXT - 1`-token prompt each.
fn prefilled() -> Executor {
    let shard = Shard {
        seed: 7,
        rank: 0,
        ranks: 1,
        pages: ((BATCH + 1) * PAGES) as usize,
    };
    let mut e = Executor::new(Box::new(CpuDevice::new()), model(), shard).unwrap();
    for r in 0..BATCH {
        let s = Seq {
            tokens: prompt(r, CONTEXT - 1),
            start: 0,
            pages: pages(r),
            accept: None,
        };
        e.forward(&[s], 0, &mut Solo).unwrap();
    }
    e
}

/// The decode step of the first `batch` sequences: their last prompt token, and
/// `drafts` draft tokens, at position `CONTEXT - 1` (each iteration rewrites the same
/// KV slots, so every step sees the same cache).
fn decode(batch: u32, drafts: usize) -> Vec<Seq> {
    (0..batch)
        .map(|r| {
            let mut tokens = vec![prompt(r, CONTEXT)[CONTEXT - 1]];
            tokens.extend((0..drafts as u32).map(|i| (i * 5 + 3) % VOCAB));
            Seq {
                tokens,
                start: CONTEXT - 1,
                pages: pages(r),
                accept: Some(drafts),
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut e = prefilled();
    for batch in [1, BATCH] {
        for drafts in [0, 1] {
            let seqs = decode(batch, drafts);
            c.bench_function(
                &format!("forward_step/decode/b{batch}_ctx{CONTEXT}/mtp{drafts}"),
                |b| b.iter(|| e.forward(black_box(&seqs), drafts, &mut Solo).unwrap()),
            );
        }
    }
    // A prefill chunk on the spare pages.
    let chunk = [Seq {
        tokens: prompt(BATCH, 64),
        start: 0,
        pages: pages(BATCH),
        accept: None,
    }];
    c.bench_function("forward_step/prefill/chunk64", |b| {
        b.iter(|| e.forward(black_box(&chunk), 0, &mut Solo).unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
