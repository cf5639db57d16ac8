//! AIConfigurator's model configs (the repository's `tests/fixtures/models-hf/aic/`, a copy of the 81
//! configs and 27 ModelOpt quantization configs it ships): every one imported,
//! validated and priced, the refused ones each for its named reason; parameter counts
//! against the model cards; KV and state bytes, and priced steps, checked by hand.

use super::*;
use sim::cost::{AnalyticCostModel, CostModel, CostParams, Layout, Op, OpRate, Phase};
use sim::cost::{ReqSlice, StepShape};
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models-hf/aic")
}

/// The folder's config of `name` (`MiniMaxAI--MiniMax-M2.5`), imported with the
/// quantization config beside it, as `twin model import` imports it.
fn try_aic(name: &str) -> Result<Model> {
    let path = dir().join(format!("{name}_config.json"));
    let p = path.display().to_string();
    let text = std::fs::read_to_string(&path).unwrap();
    let mut opts = ImportOptions::default();
    if let Some(q) = sibling_quant(&path) {
        opts.quant = Some((
            q.display().to_string(),
            std::fs::read_to_string(&q).unwrap(),
        ));
    }
    import(&p, &text, &opts)
}

fn aic(name: &str) -> Model {
    try_aic(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The configs of the folder (not the quantization configs), by model name, sorted.
fn configs() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("_config.json") && !n.ends_with("_hf_quant_config.json"))
        .map(|n| n.trim_end_matches("_config.json").to_string())
        .collect();
    v.sort();
    v
}

/// A decode step of 4 requests at 2048 tokens and a prefill of 2048 tokens on one
/// H200 TP8 replica: both finite and positive.
fn prices(m: &Model) -> std::result::Result<(), String> {
    let hw: spec::hardware::Hardware =
        toml::from_str(include_str!("../../scenarios/hardware/h200.toml")).unwrap();
    let cm = AnalyticCostModel::new(
        hw,
        m.clone(),
        Layout::tensor_parallel(8),
        CostParams::default(),
    );
    for (phase, new, ctx, n) in [(Phase::Decode, 1, 2048, 4), (Phase::Prefill, 2048, 0, 1)] {
        let ranks = vec![vec![ReqSlice {
            new_tokens: new,
            context_tokens: ctx,
            count: n,
        }]];
        let s = cm.step(&StepShape {
            phase,
            ranks: &ranks,
            decode_ranks: &[],
            draft_tokens: 0,
        });
        if !(s.step_s.is_finite() && s.step_s > 0.0) {
            return Err(format!("{phase:?} step of {} s", s.step_s));
        }
    }
    Ok(())
}

#[test]
fn every_aic_config_imports_and_prices_but_the_refused_ones() {
    let names = configs();
    assert_eq!(
        names.len(),
        81,
        "the folder holds AIConfigurator's 81 configs"
    );
    let mut priced = 0;
    let mut refused: Vec<(String, String)> = Vec::new();
    for n in &names {
        match try_aic(n) {
            Ok(m) => {
                let problems = sim::validate::model(&m);
                assert!(problems.is_empty(), "{n}: {problems:?}");
                prices(&m).unwrap_or_else(|e| panic!("{n}: {e}"));
                priced += 1;
            }
            Err(e) => refused.push((n.clone(), e.to_string())),
        }
    }
    // At least 78 of the 81 price; each refused one names the one thing twin cannot
    // price (docs/adding-a-model.md lists them).
    assert!(priced >= 78, "{priced} priced; refused: {refused:?}");
    assert_eq!(priced + refused.len(), 81);
    let expected = [("moonshotai--Kimi-K3", "Kimi Delta Attention")];
    assert_eq!(refused.len(), expected.len(), "{refused:?}");
    for ((n, e), (want, why)) in refused.iter().zip(expected) {
        assert_eq!(n, want);
        assert!(
            e.contains("is refused: twin cannot price") && e.contains(why),
            "{e}"
        );
    }
}

/// How a publisher counts active parameters (as `tests::Active`).
#[derive(Clone, Copy)]
enum Active {
    WithEmbedding,
    WithoutEmbedding,
    WithoutEmbeddingOrHead,
}

/// `ours` (parameters) against `card_b` billions written with `decimals` decimals:
/// within 1%, or within half a unit of its last digit where the card rounds coarser.
fn near(ours: f64, card_b: f64, decimals: i32) -> bool {
    let b = ours / 1e9;
    (b - card_b).abs() <= (0.01 * card_b).max(0.5 * 10f64.powi(-decimals))
}

/// Model cards' figures: (config, total in billions and its decimals, active in
/// billions and its decimals, how the publisher counts active parameters).
const CARDS: &[(&str, f64, i32, f64, i32, Active)] = {
    use Active::*;
    &[
        // "229.9B total parameters, 9.8B activated per token" (MiniMax-M2.5; secondary:
        // emergentmind.com/topics/minimax-m2-5); 9.8B counts neither the embedding nor
        // the LM head.
        (
            "MiniMaxAI--MiniMax-M2.5",
            229.9,
            1,
            9.8,
            1,
            WithoutEmbeddingOrHead,
        ),
        // "Despite having 397B total parameters, only ~17B are activated per token"
        // (Qwen3.5-397B-A17B's card as copied in mlx-community/Qwen3.5-397B-A17B-4bit).
        ("Qwen--Qwen3.5-397B-A17B", 397.0, 0, 17.0, 0, WithEmbedding),
        // "a 120B total / 12B active parameter hybrid Mamba-Attention
        // Mixture-of-Experts model" (Nemotron 3 Super; secondary: aicompare.guru).
        (
            "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8",
            120.0,
            0,
            12.0,
            0,
            WithoutEmbedding,
        ),
        // GLM-5 technical report table: "# Total Parameters 744B, # Activated
        // Parameters 40B" (secondary: glennklockwood.com/garden/GLM-5); the MTP layer
        // is counted apart.
        ("zai-org--GLM-5", 744.0, 0, 40.0, 0, WithoutEmbeddingOrHead),
        // "V4-Flash has 284 billion parameters, 13 billion of which are active";
        // "DeepSeek V4 Pro has 1.6 trillion parameters, 49 billion of which are active"
        // (secondary: sipoch.com, citing DeepSeek's release).
        (
            "deepseek-ai--DeepSeek-V4-Flash",
            284.0,
            0,
            13.0,
            0,
            WithoutEmbedding,
        ),
        (
            "deepseek-ai--DeepSeek-V4-Pro",
            1600.0,
            -2,
            49.0,
            0,
            WithEmbedding,
        ),
        // "25.2B total parameters but only 3.8B active per token" (Gemma 4 26B A4B;
        // secondary: vast.ai/model/gemma-4-26b-a4b-it).
        ("google--gemma-4-26B-A4B", 25.2, 1, 3.8, 1, WithEmbedding),
        // "Llama 4 Maverick: 17B active parameters, 128 experts, 400B total" (Meta's
        // announcement as quoted by hackmd.io/@Ibi/Sy7i4gMRkx).
        (
            "meta-llama--Llama-4-Maverick-17B-128E-Instruct",
            400.0,
            0,
            17.0,
            0,
            WithEmbedding,
        ),
        // "309B total parameters and 15B active parameters" (MiMo-V2-Flash Technical
        // Report, arXiv 2601.02780, abstract).
        (
            "XiaomiMiMo--MiMo-V2-Flash",
            309.0,
            0,
            15.0,
            0,
            WithEmbedding,
        ),
        // "32 billion activated parameters and 1 trillion total parameters" (Kimi K2's
        // README; K2.5 keeps its language model).
        (
            "moonshotai--Kimi-K2.5",
            1000.0,
            -3,
            32.0,
            0,
            WithoutEmbedding,
        ),
        // "141B total, 39B active" (Mixtral 8x22B, mistral.ai/news/mixtral-8x22b).
        (
            "mistralai--Mixtral-8x22B-v0.1",
            141.0,
            0,
            39.0,
            0,
            WithEmbedding,
        ),
        // "in 8B, 70B and 405B sizes" (Llama 3.1 model card).
        (
            "meta-llama--Meta-Llama-3.1-405B",
            405.0,
            0,
            405.0,
            0,
            WithEmbedding,
        ),
        // "480B total and 35B activated" (Qwen3-Coder-480B-A35B-Instruct's name and
        // card).
        (
            "Qwen--Qwen3-Coder-480B-A35B-Instruct",
            480.0,
            0,
            35.0,
            0,
            WithEmbedding,
        ),
        // "235B in total and 22B activated" (Qwen3-VL-235B-A22B keeps Qwen3-235B-A22B's
        // language model; its vision tower is counted apart).
        (
            "Qwen--Qwen3-VL-235B-A22B-Instruct",
            235.0,
            0,
            22.0,
            0,
            WithEmbedding,
        ),
        // "Nemotron-H-56B-Base-8K" (the card names 56B).
        (
            "nvidia--Nemotron-H-56B-Base-8K",
            56.0,
            0,
            56.0,
            0,
            WithEmbedding,
        ),
    ]
};

#[test]
fn parameter_counts_match_the_model_cards() {
    for &(config, total, total_decimals, card_active, active_decimals, how) in CARDS {
        let w = aic(config).weights();
        let head = w.active_of("lm_head");
        let active = match how {
            Active::WithEmbedding => w.active(),
            Active::WithoutEmbedding => w.active_without_embedding(),
            Active::WithoutEmbeddingOrHead => w.active_without_embedding() - head,
        };
        assert!(
            near(w.total(), total, total_decimals),
            "{config}: total {:.2}B against the card's {total}B",
            w.total() / 1e9
        );
        assert!(
            near(active, card_active, active_decimals),
            "{config}: active {:.2}B against the card's {card_active}B",
            active / 1e9
        );
    }
}

/// Two configs whose counts differ from their cards' figures, each for a reason.
#[test]
fn parameter_counts_that_differ_from_the_card_say_why() {
    // "Llama 4 Scout: 17B active parameters, 16 experts, 109B total" counts the vision
    // encoder, which this config (a text_config alone) does not describe: the language
    // model is 107.77B (1.1% under).
    let scout = aic("meta-llama--Llama-4-Scout-17B-16E-Instruct").weights();
    assert!((scout.total() / 1e9 - 107.77).abs() < 0.01);
    assert!(near(scout.active(), 17.0, 0));
    // DeciLM: its card says the search "reduced the parameter count from 70B to
    // approximately 49B" (nvidia/Llama-3_3-Nemotron-Super-49B-v1); its block_configs
    // count 49.87B: 49 attention layers of Llama-3.3-70B's, and FFN widths of 2 x
    // ffn_mult x 8192 / 3 rounded up to 256 (49 x 28,672, 10 x 7168, 8 x 5632, 6 x
    // 2816, 6 x 14,336, 17,920), embedding and head 2 x 1.05B.
    let decilm = aic("nvidia--Llama-3_3-Nemotron-Super-49B-v1").weights();
    assert!((decilm.total() / 1e9 - 49.87).abs() < 0.01);
}

#[test]
fn kv_and_state_bytes_by_hand() {
    // MiniMax-M2.5 (GQA, BF16 KV): K and V of 8 KV heads x 128 x 2 B, 62 layers.
    let m = aic("MiniMaxAI--MiniMax-M2.5");
    assert_eq!(m.kv.bytes_per_token, 2.0 * 8.0 * 128.0 * 2.0 * 62.0);
    assert_eq!(m.state_bytes_per_request(), 0.0);
    assert_eq!(
        m.mtp.as_ref().map(|t| (t.draft_tokens, t.modules)),
        Some((3, 3))
    );
    // Its NVFP4 release caches FP8 KV (hf_quant_config kv_cache_quant_algo FP8): half.
    let m = aic("nvidia--MiniMax-M2.5-NVFP4");
    assert_eq!(m.kv.bytes_per_token, 2.0 * 8.0 * 128.0 * 62.0);
    // Qwen3.5-397B-A17B: 15 full-attention layers keep 2 x 2 KV heads x 256 x 2 B =
    // 2048 B per token; 45 gated DeltaNet layers keep a state each: 64 value heads x
    // 128 x 128 x 4 B (mamba_ssm_dtype float32) = 4,194,304 B and the convolution's 3
    // past inputs of q, k (2 x 16 x 128) and v (64 x 128), 12,288 x 3 x 2 B = 73,728 B.
    let m = aic("Qwen--Qwen3.5-397B-A17B");
    assert_eq!(m.kv.bytes_per_token, 15.0 * 2048.0);
    assert_eq!(m.state_bytes_per_request(), 45.0 * (4_194_304.0 + 73_728.0));
    // Nemotron-3-Super FP8: 8 attention layers x 2 x 2 x 128 x 1 B (FP8 KV); 40 Mamba-2
    // layers x (128 heads x 64 x 128 x 4 B + (8192 + 2 x 8 x 128) x 3 x 2 B).
    let m = aic("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8");
    assert_eq!(m.kv.bytes_per_token, 8.0 * 512.0);
    assert_eq!(m.state_bytes_per_request(), 40.0 * (4_194_304.0 + 61_440.0));
    // Gemma-4-26B-A4B: 5 global layers of 2 KV heads x 512, K and V cached, 2 B: 4096 B
    // each; its 25 sliding-window layers (8 KV heads x 256 x 2 x 2 B = 8192 B) keep at
    // most 1024 tokens: 25 x 1024 x 8192 B.
    let m = aic("google--gemma-4-26B-A4B");
    assert_eq!(m.kv.bytes_per_token, 5.0 * 4096.0);
    assert_eq!(m.local_kv_bytes(u64::MAX), 25.0 * 1024.0 * 8192.0);
    assert_eq!(m.local_kv_bytes(100), 25.0 * 100.0 * 8192.0);
    // Llama-4-Scout: 12 global layers x 8 x 128 x 2 x 2 B; 36 chunked layers keep at
    // most their 8192-token chunk.
    let m = aic("meta-llama--Llama-4-Scout-17B-16E-Instruct");
    assert_eq!(m.kv.bytes_per_token, 12.0 * 4096.0);
    assert_eq!(m.local_kv_bytes(u64::MAX), 36.0 * 8192.0 * 4096.0);
    // MiMo-V2-Flash: 9 global layers of 4 KV heads x (192 + 128) x 2 B = 2560 B; its 39
    // sliding-window layers have 8 KV heads: 5120 B a token, 128 tokens kept.
    let m = aic("XiaomiMiMo--MiMo-V2-Flash");
    assert_eq!(m.kv.bytes_per_token, 9.0 * 2560.0);
    assert_eq!(m.local_kv_bytes(u64::MAX), 39.0 * 128.0 * 5120.0);
    // DeepSeek-V4-Flash: 21 sparse layers of 4-token entries and 20 of 128-token
    // entries, 512 x 2 B each, and an indexer key of 128 + 4 B per 4 tokens in the
    // sparse ones; its 2 sliding-window layers keep 128 tokens.
    let m = aic("deepseek-ai--DeepSeek-V4-Flash");
    let kv = 21.0 * 1024.0 / 4.0 + 20.0 * 1024.0 / 128.0 + 21.0 * 132.0 / 4.0;
    assert!((m.kv.bytes_per_token - kv).abs() < 1e-9);
    // GLM-5.2: MLA's 576-wide latent in BF16 on 78 layers, and an indexer key (132 B)
    // on the 21 layers that run their own indexer (the others share one).
    let m = aic("zai-org--GLM-5.2");
    assert_eq!(m.kv.bytes_per_token, 78.0 * 576.0 * 2.0 + 21.0 * 132.0);
    // Llama-3.3-Nemotron-Super-49B (DeciLM): 49 attention layers of 8 KV heads x 128.
    let m = aic("nvidia--Llama-3_3-Nemotron-Super-49B-v1");
    assert_eq!(m.kv.bytes_per_token, 49.0 * 4096.0);
}

const ROUND_GPU: &str = r#"
name = "round"
nvlink_domain_gpus = 8
sms = 100
power_w = 1000.0
[hbm]
capacity = "1000GB"
usable = "1000GB"
bytes_per_s = 1.0e12
[tensor]
bf16_flops_per_s = 1.0e15
fp8_flops_per_s = 2.0e15
fp4_flops_per_s = 4.0e15
[nvlink]
bytes_per_s = 1.0e11
latency_s = 1.0e-6
[scaleout]
bytes_per_s = 1.0e10
latency_s = 5.0e-6
[host]
memory = "100GB"
link_bytes_per_s = 1.0e11
link_latency_s = 1.0e-6
[tlb]
entries = 1000
miss_s = 1.0e-8
[price]
hyperscaler_usd_per_gpu_hour = 1.0
neocloud_usd_per_gpu_hour = 1.0
rental_3yr_usd_per_gpu_hour = 1.0
"#;

/// The attention operation of one step of one request on the round GPU (1 TB/s, 1e15
/// BF16 flop/s) with ideal attention and recurrent kernels.
fn attention_s(m: &Model, phase: Phase, new: u32, ctx: u64) -> f64 {
    let hw: spec::hardware::Hardware = toml::from_str(ROUND_GPU).unwrap();
    let r = OpRate::new(1.0, 1.0, 0.0);
    let p = CostParams {
        attention: r,
        attention_prefill: r,
        attention_sparse: r,
        attention_sparse_prefill: r,
        recurrent: r,
        recurrent_prefill: r,
        prefill_diag_tokens: 0.0,
        ..CostParams::default()
    };
    let cm = AnalyticCostModel::new(hw, m.clone(), Layout::new(1), p);
    let ranks = vec![vec![ReqSlice::one(new, ctx)]];
    cm.step(&StepShape {
        phase,
        ranks: &ranks,
        decode_ranks: &[],
        draft_tokens: 0,
    })
    .op(Op::Attention)
}

fn close(a: f64, b: f64) {
    assert!((a - b).abs() <= 1e-9 * b.abs(), "{a:e} != {b:e}");
}

#[test]
fn hybrid_steps_priced_by_hand() {
    // Qwen3.5-397B-A17B, decode at 999 cached tokens. A full-attention layer reads
    // 1000 entries x 2048 B = 2.048 us (its 1000 x 2 x 32 heads x 512 flops, 33 ns, do
    // not bind); a gated DeltaNet layer reads and writes its state, 2 x 4,268,032 B,
    // and its token's inputs and output, 2 B x (q, k: 4096; v, z: 2 x 8192; a, b: 128;
    // out: 8192) = 57,600 B: 8.593664 us.
    let m = aic("Qwen--Qwen3.5-397B-A17B");
    close(
        attention_s(&m, Phase::Decode, 1, 999),
        15.0 * 2.048e-6 + 45.0 * 8.593664e-6,
    );
    // Prefill of 1000 tokens: full attention computes 500,500 causal pairs x 2 x 32 x
    // 512 = 16.400384 us; a DeltaNet layer runs 16 chunks of 64, each writing and
    // reading a BF16 state (64 x 128 x 128 x 2 B = 2,097,152 B), the request's state
    // once each way, and 1000 tokens' inputs and outputs: 2 x 4,268,032 + 2 x 16 x
    // 2,097,152 + 57,600,000 = 133,244,928 B, 133.244928 us (its 1000 x 64 x 180,224
    // flops, 11.5 us, do not bind).
    close(
        attention_s(&m, Phase::Prefill, 1000, 0),
        15.0 * 16.400384e-6 + 45.0 * 133.244928e-6,
    );

    // Nemotron-3-Super FP8, decode at 999: an attention layer reads 1000 x 512 B (FP8
    // KV) = 0.512 us; a Mamba-2 layer its state twice, 2 x 4,255,744 B, and 2 B x
    // (in: 2 x 8192 + 2048 + 128; out: 8192) = 53,504 B: 8.564992 us. Its 40 MoE
    // layers have no token mixer and no attention time.
    let m = aic("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8");
    close(
        attention_s(&m, Phase::Decode, 1, 999),
        8.0 * 0.512e-6 + 40.0 * 8.564992e-6,
    );
    // Prefill of 1000: attention 500,500 x 2 x 32 x 256 = 8.200192 us; Mamba-2 8
    // chunks of 128, each an FP32 state of 8192 x 128 x 4 B = 4,194,304 B written and
    // read: 2 x 4,255,744 + 2 x 8 x 4,194,304 + 1000 x 53,504 = 129,124,352 B.
    close(
        attention_s(&m, Phase::Prefill, 1000, 0),
        8.0 * 8.200192e-6 + 40.0 * 129.124352e-6,
    );

    // Gemma-4-26B-A4B, decode at 1999: a sliding-window layer reads its 1024-token
    // window and the new token, 1025 x 8192 B = 8.3968 us; a global layer (its own
    // shape) 2000 x 4096 B = 8.192 us.
    let m = aic("google--gemma-4-26B-A4B");
    close(
        attention_s(&m, Phase::Decode, 1, 1999),
        25.0 * 8.3968e-6 + 5.0 * 8.192e-6,
    );

    // Llama-4-Scout, prefill of 10,000 tokens: a chunked layer's queries attend within
    // their 8192-token chunk: 8192 x 8193 / 2 + 1808 x 1809 / 2 = 35,193,864 pairs x 2 x
    // 40 heads x 256 = 720.7703347 us (its 10,000 x 4096 B, 41 us, do not bind); a
    // global layer all 50,005,000 pairs: 1024.1024 us.
    let m = aic("meta-llama--Llama-4-Scout-17B-16E-Instruct");
    close(
        attention_s(&m, Phase::Prefill, 10_000, 0),
        36.0 * 35_193_864.0 * 2.0 * 40.0 * 256.0 / 1e15
            + 12.0 * 50_005_000.0 * 2.0 * 40.0 * 256.0 / 1e15,
    );
    // Decode at 999: every layer reads 1000 x 4096 B (within the chunk).
    close(attention_s(&m, Phase::Decode, 1, 999), 48.0 * 4.096e-6);

    // MiniMax-M2.5, decode at 999: 62 layers x 1000 x 4096 B.
    let m = aic("MiniMaxAI--MiniMax-M2.5");
    close(attention_s(&m, Phase::Decode, 1, 999), 62.0 * 4.096e-6);
}

#[test]
fn quantization_is_read_part_by_part() {
    // MiniMax-M2.5: FP8 128x128 blocks with FP32 scales everywhere but the router.
    let m = aic("MiniMaxAI--MiniMax-M2.5");
    let moe = m.moe.as_ref().unwrap();
    assert_eq!((moe.weight_dtype, moe.scale_block), (Dtype::Fp8, 4096));
    assert_eq!(m.attention.weight_dtype, Dtype::Fp8);
    // Its NVFP4 release: experts NVFP4 (an FP8 scale per 16), attention kept in BF16
    // by the exclude list, FP8 KV.
    let m = aic("nvidia--MiniMax-M2.5-NVFP4");
    let moe = m.moe.as_ref().unwrap();
    assert_eq!((moe.weight_dtype, moe.scale_block), (Dtype::Fp4, 16));
    assert_eq!(m.attention.weight_dtype, Dtype::Bf16);
    // Qwen3.5-397B NVFP4: the DeltaNet mixers and the shared expert kept in BF16.
    let m = aic("nvidia--Qwen3.5-397B-A17B-NVFP4");
    assert_eq!(
        m.linear_attention.as_ref().unwrap().weight_dtype,
        Dtype::Bf16
    );
    assert_eq!(m.moe.as_ref().unwrap().shared_weight_dtype, Dtype::Bf16);
    assert_eq!(m.moe.as_ref().unwrap().weight_dtype, Dtype::Fp4);
    // Kimi-K2.5: compressed-tensors INT4 experts in groups of 32 (a BF16 scale each:
    // one byte per 16 weights), BF16 activations; the rest in BF16 (its ignore list).
    let m = aic("moonshotai--Kimi-K2.5");
    let moe = m.moe.as_ref().unwrap();
    assert_eq!((moe.weight_dtype, moe.scale_block), (Dtype::Int4, 16));
    assert_eq!(moe.activation_dtype, Dtype::Bf16);
    assert_eq!(m.attention.weight_dtype, Dtype::Bf16);
    // Qwen3.6-27B NVFP4 (MIXED_PRECISION): FP8 attention and DeltaNet, weight-only
    // NVFP4 dense FFN.
    let m = aic("nvidia--Qwen3.6-27B-NVFP4");
    assert_eq!(m.attention.weight_dtype, Dtype::Fp8);
    assert_eq!(
        m.linear_attention.as_ref().unwrap().weight_dtype,
        Dtype::Fp8
    );
    assert_eq!(m.dense_ffn.as_ref().unwrap().weight_dtype, Dtype::Fp4);
    // DeepSeek-V4-Flash: FP4 experts (a UE8M0 scale per 32), FP8 blocks elsewhere.
    let m = aic("deepseek-ai--DeepSeek-V4-Flash");
    let moe = m.moe.as_ref().unwrap();
    assert_eq!((moe.weight_dtype, moe.scale_block), (Dtype::Fp4, 32));
    assert_eq!(m.attention.weight_dtype, Dtype::Fp8);
    // The vision tower of a wrapper is counted and named, not priced.
    let m = aic("Qwen--Qwen3-VL-8B-Instruct");
    assert!(
        m.vision_params > 0.3e9 && m.vision_params < 1e9,
        "{}",
        m.vision_params
    );
    assert!(m.provenance["vision_params"].contains("not priced"));
}

#[test]
fn awq_gptq_and_int4_weights_are_read() {
    let base = |q: &str| {
        format!(
            r#"{{"architectures": ["LlamaForCausalLM"], "hidden_size": 512, "vocab_size": 1000,
            "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
            "intermediate_size": 1024, "torch_dtype": "float16", "quantization_config": {q}}}"#
        )
    };
    let one = |q: &str| import("t/config.json", &base(q), &ImportOptions::default());
    // AWQ 4-bit, groups of 128 with a zero point: a BF16 scale and a 4-bit zero per
    // group, 2.5 B per 128 weights, one byte per 51.
    let m = one(r#"{"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true}"#)
        .unwrap();
    assert_eq!(
        (
            m.dense_ffn.as_ref().unwrap().weight_dtype,
            m.dense_scale_block
        ),
        (Dtype::Int4, 51)
    );
    // GPTQ symmetric, groups of 64: a BF16 scale per group, one byte per 32.
    let m = one(r#"{"quant_method": "gptq", "bits": 4, "group_size": 64, "sym": true}"#).unwrap();
    assert_eq!(m.dense_scale_block, 32);
    // 3-bit GPTQ and unknown methods are refused, naming what they are.
    let e = one(r#"{"quant_method": "gptq", "bits": 3}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("gptq with bits 3"), "{e}");
    let e = one(r#"{"quant_method": "bitsandbytes"}"#)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("quant_method `bitsandbytes` is not one twin reads"),
        "{e}"
    );
}

#[test]
fn a_layer_wide_qk_norm_is_read_from_the_config() {
    // MiniMax-M2's `qk_norm_type = "per_layer"`: one RMSNorm over every head's queries,
    // one over the keys (a TP all-reduce a layer); Qwen3's norms are per head.
    let m = aic("MiniMaxAI--MiniMax-M2.5");
    assert!(m.attention.layer_qk_norm);
    assert!(m.provenance["attention.layer_qk_norm"].contains("qk_norm_type"));
    assert!(!aic("Qwen--Qwen3-32B").attention.layer_qk_norm);
}
