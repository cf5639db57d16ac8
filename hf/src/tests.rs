//! The import against the verbatim public configs in `tests/fixtures/models-hf/`.

use super::*;

/// Every verbatim config in `tests/fixtures/models-hf/` (sources in its README).
const CONFIGS: &[(&str, &str)] = &[
    (
        "DeepSeek-V3",
        include_str!("../../tests/fixtures/models-hf/DeepSeek-V3/config.json"),
    ),
    (
        "DeepSeek-V3.2",
        include_str!("../../tests/fixtures/models-hf/DeepSeek-V3.2/config.json"),
    ),
    (
        "Kimi-K2-Instruct",
        include_str!("../../tests/fixtures/models-hf/Kimi-K2-Instruct/config.json"),
    ),
    (
        "GLM-4.5",
        include_str!("../../tests/fixtures/models-hf/GLM-4.5/config.json"),
    ),
    (
        "Qwen3-235B-A22B",
        include_str!("../../tests/fixtures/models-hf/Qwen3-235B-A22B/config.json"),
    ),
    (
        "Qwen3-235B-A22B-FP8",
        include_str!("../../tests/fixtures/models-hf/Qwen3-235B-A22B-FP8/config.json"),
    ),
    (
        "Qwen3-235B-A22B-NVFP4",
        include_str!("../../tests/fixtures/models-hf/Qwen3-235B-A22B-NVFP4/config.json"),
    ),
    (
        "Qwen3-30B-A3B",
        include_str!("../../tests/fixtures/models-hf/Qwen3-30B-A3B/config.json"),
    ),
    (
        "Qwen3-32B",
        include_str!("../../tests/fixtures/models-hf/Qwen3-32B/config.json"),
    ),
    (
        "Qwen3-8B",
        include_str!("../../tests/fixtures/models-hf/Qwen3-8B/config.json"),
    ),
    (
        "gpt-oss-120b",
        include_str!("../../tests/fixtures/models-hf/gpt-oss-120b/config.json"),
    ),
    (
        "gpt-oss-20b",
        include_str!("../../tests/fixtures/models-hf/gpt-oss-20b/config.json"),
    ),
    (
        "Llama-3.1-8B",
        include_str!("../../tests/fixtures/models-hf/Llama-3.1-8B/config.json"),
    ),
    (
        "Llama-3.1-70B",
        include_str!("../../tests/fixtures/models-hf/Llama-3.1-70B/config.json"),
    ),
    (
        "Llama-3.1-70B-Instruct-FP8",
        include_str!("../../tests/fixtures/models-hf/Llama-3.1-70B-Instruct-FP8/config.json"),
    ),
    (
        "Mixtral-8x7B-v0.1",
        include_str!("../../tests/fixtures/models-hf/Mixtral-8x7B-v0.1/config.json"),
    ),
];

fn load(name: &str) -> Model {
    load_with(name, &ImportOptions::default())
}

fn load_with(name: &str, opts: &ImportOptions) -> Model {
    let text = CONFIGS.iter().find(|(n, _)| *n == name).unwrap().1;
    import(
        &format!("tests/fixtures/models-hf/{name}/config.json"),
        text,
        opts,
    )
    .unwrap()
}

#[test]
fn every_public_config_imports_into_a_valid_model() {
    for (name, _) in CONFIGS {
        let m = load(name);
        let problems = sim::validate::model(&m);
        assert!(problems.is_empty(), "{name}: {problems:?}");
        // Every priced field says where it came from.
        for key in [
            "hidden",
            "vocab",
            "layers",
            "attention.heads",
            "attention.kv_entry_bytes",
            "kv.bytes_per_token",
        ] {
            let why = m
                .provenance
                .get(key)
                .unwrap_or_else(|| panic!("{name}: no provenance for {key}"));
            assert!(
                why.starts_with("derived: ") || why.starts_with("assumed: "),
                "{name} {key}: {why}"
            );
        }
        assert!(
            m.provenance.values().all(|v| v.starts_with("derived: ")
                || v.starts_with("assumed: ")
                || v.starts_with("given: ")),
            "{name}"
        );
    }
}

/// How a publisher counts active parameters.
#[derive(Clone, Copy)]
enum Active {
    /// Every weight a token uses, the input embedding's table included.
    WithEmbedding,
    /// Without the input embedding table (a lookup, not a product).
    WithoutEmbedding,
    /// Without the embedding table and the LM head.
    WithoutEmbeddingOrHead,
}

/// `ours` against a published figure written with `decimals` decimals (in billions):
/// within 1%, or within half a unit of its last digit where the publisher rounded
/// more coarsely than 1% ("37B": 36.5-37.5).
fn matches(ours: f64, published_b: f64, decimals: i32) -> bool {
    let ours_b = ours / 1e9;
    let rounding = 0.5 * 10f64.powi(-decimals);
    (ours_b - published_b).abs() <= (0.01 * published_b).max(rounding)
}

#[test]
#[allow(clippy::too_many_lines)] // a test reads as one story; tests are exempt
fn parameter_counts_match_the_published_counts() {
    use Active::*;
    // (config, total B, its decimals, active B, its decimals, how the publisher
    // counts active, where it was published). Quotes in
    // tests/fixtures/models-hf/README.md.
    let published: &[(&str, f64, i32, f64, i32, Active, &str)] = &[
        // "671B total parameters with 37B activated for each token" (the MTP
        // module's 14B apart): deepseek-ai/DeepSeek-V3 README.
        (
            "DeepSeek-V3",
            671.0,
            0,
            37.0,
            0,
            WithoutEmbedding,
            "deepseek-ai/DeepSeek-V3 README",
        ),
        // "32 billion activated parameters and 1 trillion total parameters":
        // MoonshotAI/Kimi-K2 README.
        (
            "Kimi-K2-Instruct",
            1000.0,
            -3,
            32.0,
            0,
            WithoutEmbedding,
            "MoonshotAI/Kimi-K2 README",
        ),
        // "355 billion total parameters with 32 billion active parameters":
        // zai-org/GLM-4.5 README (the MTP layer's 4B counted in the total).
        (
            "GLM-4.5",
            355.0,
            0,
            32.0,
            0,
            WithoutEmbeddingOrHead,
            "zai-org/GLM-4.5 README",
        ),
        // "235B in total and 22B activated": the Qwen3-235B-A22B model card.
        (
            "Qwen3-235B-A22B",
            235.0,
            0,
            22.0,
            0,
            WithEmbedding,
            "Qwen/Qwen3-235B-A22B model card",
        ),
        // "30.5B in total and 3.3B activated": the Qwen3-30B-A3B model card.
        (
            "Qwen3-30B-A3B",
            30.5,
            1,
            3.3,
            1,
            WithEmbedding,
            "Qwen/Qwen3-30B-A3B model card",
        ),
        // "Number of Parameters: 32.8B" / "8.2B": the Qwen3 dense model cards.
        (
            "Qwen3-32B",
            32.8,
            1,
            32.8,
            1,
            WithEmbedding,
            "Qwen/Qwen3-32B model card",
        ),
        (
            "Qwen3-8B",
            8.2,
            1,
            8.2,
            1,
            WithEmbedding,
            "Qwen/Qwen3-8B model card",
        ),
        // "117B parameters with 5.1B active parameters", "21B ... 3.6B":
        // openai/gpt-oss README.
        (
            "gpt-oss-120b",
            117.0,
            0,
            5.1,
            1,
            WithoutEmbedding,
            "openai/gpt-oss README",
        ),
        (
            "gpt-oss-20b",
            21.0,
            0,
            3.6,
            1,
            WithoutEmbedding,
            "openai/gpt-oss README",
        ),
        // "in 8B, 70B and 405B sizes": meta-llama/llama-models Llama 3.1 model card.
        (
            "Llama-3.1-8B",
            8.0,
            0,
            8.0,
            0,
            WithEmbedding,
            "Llama 3.1 model card",
        ),
        (
            "Llama-3.1-70B",
            70.0,
            0,
            70.0,
            0,
            WithEmbedding,
            "Llama 3.1 model card",
        ),
        // "46.7B total parameters but only uses 12.9B parameters per token":
        // mistral.ai/news/mixtral-of-experts.
        (
            "Mixtral-8x7B-v0.1",
            46.7,
            1,
            12.9,
            1,
            WithEmbedding,
            "mistral.ai Mixtral announcement",
        ),
    ];
    for &(name, total, td, active, ad, how, source) in published {
        let w = load(name).weights();
        let ours_active = match how {
            WithEmbedding => w.active(),
            WithoutEmbedding => w.active_without_embedding(),
            WithoutEmbeddingOrHead => w.active_without_embedding() - w.active_of("lm_head"),
        };
        let ours_total = if name == "GLM-4.5" {
            w.total() + w.mtp_params
        } else {
            w.total()
        };
        assert!(
            matches(ours_total, total, td),
            "{name}: total {ours_total:e} against {total}B ({source})"
        );
        // A known gap, bounded: Qwen3-30B-A3B's card says 3.3B activated; the count
        // by its config is 3.353B with the embedding (as Qwen counts for the 235B)
        // and 3.04B without: the card's figure reads as cut, not rounded, from
        // 3.35B (+1.6%).
        let within = if name == "Qwen3-30B-A3B" {
            (ours_active / 1e9 - active).abs() <= 0.02 * active
        } else {
            matches(ours_active, active, ad)
        };
        assert!(
            within,
            "{name}: active {ours_active:e} against {active}B ({source})"
        );
    }
}

#[test]
fn kv_bytes_per_token_by_hand() {
    // Llama-3.1-8B (GQA): K and V of 8 KV heads x 128 dims x 2 B (BF16) x 32 layers.
    let m = load("Llama-3.1-8B");
    assert_eq!(m.attention.kv_entry_bytes, 2.0 * 8.0 * 128.0 * 2.0);
    assert_eq!(m.kv.bytes_per_token, 2.0 * 8.0 * 128.0 * 2.0 * 32.0);
    // At FP8, half.
    let m = load_with(
        "Llama-3.1-8B",
        &ImportOptions {
            kv_dtype: Some(Dtype::Fp8),
            ..Default::default()
        },
    );
    assert_eq!(m.kv.bytes_per_token, 65_536.0);
    // DeepSeek-V3 (MLA): one latent of kv_lora 512 + rope 64 per layer, 61 layers;
    // in BF16 70,272 B, in FP8 35,136 B (the shipped file's published figure).
    assert_eq!(load("DeepSeek-V3").kv.bytes_per_token, 576.0 * 2.0 * 61.0);
    let fp8 = load_with(
        "DeepSeek-V3",
        &ImportOptions {
            kv_dtype: Some(Dtype::Fp8),
            ..Default::default()
        },
    );
    assert_eq!(fp8.kv.bytes_per_token, 35_136.0);
    // gpt-oss-120b: only its 18 full-attention layers keep the whole context (the
    // 18 sliding layers keep 128 tokens): 18 x 2 x 8 x 64 x 2 B.
    let m = load("gpt-oss-120b");
    assert_eq!(m.kv.bytes_per_token, 18.0 * 2.0 * 8.0 * 64.0 * 2.0);
    assert_eq!(m.attention.window, 128);
    assert!(m.attention.sinks);
    let kinds = m.layers_by_kind();
    assert_eq!(kinds.len(), 2);
    assert!(kinds.iter().all(|(_, _, c)| *c == 18));
}

#[test]
fn quantized_checkpoints_are_priced_as_what_they_are() {
    // Qwen3 FP8: 128x128 blocks with an FP32 scale, 1 byte per 4096 weights.
    let m = load("Qwen3-235B-A22B-FP8");
    let moe = m.moe.as_ref().unwrap();
    assert_eq!((moe.weight_dtype, moe.scale_block), (Dtype::Fp8, 4096));
    assert_eq!(m.attention.weight_dtype, Dtype::Fp8);
    assert_eq!(moe.activation_dtype, Dtype::Fp8);
    // NVFP4 from its hf_quant_config.json: FP4 with an FP8 scale per 16, FP8 KV.
    let q =
        include_str!("../../tests/fixtures/models-hf/Qwen3-235B-A22B-NVFP4/hf_quant_config.json");
    let m = load_with(
        "Qwen3-235B-A22B-NVFP4",
        &ImportOptions {
            quant: Some(("hf_quant_config.json".into(), q.into())),
            ..Default::default()
        },
    );
    let moe = m.moe.as_ref().unwrap();
    assert_eq!((moe.weight_dtype, moe.scale_block), (Dtype::Fp4, 16));
    assert_eq!(m.attention.kv_entry_bytes, 2.0 * 4.0 * 128.0);
    // Expert bytes: 0.5 B + 1/16 B per weight.
    let e = m
        .weights()
        .parts
        .into_iter()
        .find(|p| p.name == "routed_experts")
        .unwrap();
    assert!((e.bytes - e.params * (0.5 + 1.0 / 16.0)).abs() < 1.0);
    // gpt-oss: MXFP4 experts (E8M0 scale per 32), attention left in BF16.
    let m = load("gpt-oss-120b");
    let moe = m.moe.as_ref().unwrap();
    assert_eq!((moe.weight_dtype, moe.scale_block), (Dtype::Fp4, 32));
    assert_eq!(m.attention.weight_dtype, Dtype::Bf16);
    assert_eq!(m.dense_scale_block, 0);
    // Llama FP8 (ModelOpt, per-tensor): FP8 weights without block scales, FP8 KV.
    let q = include_str!(
        "../../tests/fixtures/models-hf/Llama-3.1-70B-Instruct-FP8/hf_quant_config.json"
    );
    let m = load_with(
        "Llama-3.1-70B-Instruct-FP8",
        &ImportOptions {
            quant: Some(("hf_quant_config.json".into(), q.into())),
            ..Default::default()
        },
    );
    assert_eq!(m.dense_ffn.as_ref().unwrap().weight_dtype, Dtype::Fp8);
    assert_eq!(m.dense_scale_block, 0);
    assert_eq!(m.kv.bytes_per_token, 2.0 * 8.0 * 128.0 * 80.0);
    // --weights overrides: Llama in NVFP4.
    let m = load_with(
        "Llama-3.1-8B",
        &ImportOptions {
            weights: Some(WeightChoice::Fp4),
            ..Default::default()
        },
    );
    assert_eq!(
        (m.attention.weight_dtype, m.dense_scale_block),
        (Dtype::Fp4, 16)
    );
}

#[test]
fn imported_deepseek_v3_prices_as_the_shipped_file() {
    // The shipped file was written by hand from the paper; importing the public
    // config with FP8 KV gives the same model but for the scale bytes (exact
    // 128x128 FP32 blocks here, one byte per 128 weights there) and MTP acceptance.
    let mut m = load_with(
        "DeepSeek-V3",
        &ImportOptions {
            kv_dtype: Some(Dtype::Fp8),
            ..Default::default()
        },
    );
    let shipped: Model =
        toml::from_str(include_str!("../../scenarios/models/deepseek-v3.toml")).unwrap();
    assert_eq!(m.moe.as_ref().unwrap().scale_block, 4096);
    m.moe.as_mut().unwrap().scale_block = 128;
    m.dense_scale_block = 128;
    m.mtp = shipped.mtp.clone();
    assert_eq!(m.attention, shipped.attention);
    assert_eq!(m.moe, shipped.moe);
    assert_eq!(m.dense_ffn, shipped.dense_ffn);
    assert_eq!(m.layers, shipped.layers);
    assert_eq!(m.kv, shipped.kv);
    assert_eq!((m.hidden, m.vocab), (shipped.hidden, shipped.vocab));
    assert_eq!(
        (m.dispatch_dtype, m.combine_dtype),
        (shipped.dispatch_dtype, shipped.combine_dtype)
    );
}

#[test]
fn deepseek_v32_imports_its_indexer() {
    let m = load("DeepSeek-V3.2");
    let i = m.attention.indexer.as_ref().unwrap();
    assert_eq!((i.heads, i.head_dim, i.top_k), (64, 128, 2048));
    assert!(m
        .layers
        .iter()
        .all(|g| g.attention == AttentionKind::Sparse));
}

#[test]
fn an_unknown_architecture_names_the_supported_ones_and_the_fields() {
    let e = import(
        "x/config.json",
        r#"{"architectures": ["FalconForCausalLM"], "hidden_size": 8}"#,
        &ImportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("FalconForCausalLM is not one twin imports"),
        "{e}"
    );
    assert!(
        e.contains("Qwen3MoeForCausalLM") && e.contains("GptOssForCausalLM"),
        "{e}"
    );
    assert!(e.contains("num_key_value_heads"), "{e}");
    let e = import("x/config.json", "{not json", &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("x/config.json: not valid JSON"), "{e}");
    let e = import(
        "x/config.json",
        r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "vocab_size": "big"}"#,
        &ImportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("`vocab_size` must be a non-negative integer"),
        "{e}"
    );
}

/// The shipped imported model files are what `twin model import` writes today:
/// regenerate them with the command in each file's header.
#[test]
fn shipped_imported_models_are_current() {
    let shipped: &[(&str, &str, &str)] = &[
        (
            "llama-3.1-8b",
            "Llama-3.1-8B",
            include_str!("../../scenarios/models/llama-3.1-8b.toml"),
        ),
        (
            "llama-3.1-70b",
            "Llama-3.1-70B",
            include_str!("../../scenarios/models/llama-3.1-70b.toml"),
        ),
        (
            "mixtral-8x7b",
            "Mixtral-8x7B-v0.1",
            include_str!("../../scenarios/models/mixtral-8x7b.toml"),
        ),
        (
            "qwen3-32b",
            "Qwen3-32B",
            include_str!("../../scenarios/models/qwen3-32b.toml"),
        ),
        (
            "qwen3-30b-a3b",
            "Qwen3-30B-A3B",
            include_str!("../../scenarios/models/qwen3-30b-a3b.toml"),
        ),
        (
            "qwen3-235b-a22b-fp8",
            "Qwen3-235B-A22B-FP8",
            include_str!("../../scenarios/models/qwen3-235b-a22b-fp8.toml"),
        ),
        (
            "gpt-oss-120b",
            "gpt-oss-120b",
            include_str!("../../scenarios/models/gpt-oss-120b.toml"),
        ),
        (
            "kimi-k2",
            "Kimi-K2-Instruct",
            include_str!("../../scenarios/models/kimi-k2.toml"),
        ),
        (
            "glm-4.5",
            "GLM-4.5",
            include_str!("../../scenarios/models/glm-4.5.toml"),
        ),
    ];
    for (name, dir, text) in shipped {
        let m = load_with(
            dir,
            &ImportOptions {
                name: Some(name.to_string()),
                ..Default::default()
            },
        );
        let cmd =
            format!("twin model import tests/fixtures/models-hf/{dir}/config.json --name {name}");
        assert_eq!(&file_text(&m, &cmd).unwrap(), text, "scenarios/models/{name}.toml: rerun `{cmd} --out scenarios/models/{name}.toml --force`");
    }
}

/// The token mixer of every layer of the config `text`, imported.
fn attention_kinds(text: String) -> Vec<AttentionKind> {
    import("t/config.json", &text, &ImportOptions::default())
        .unwrap()
        .expand_layers()
        .iter()
        .map(|l| l.attention)
        .collect()
}

/// No verbatim Qwen2 or Mistral config is in the fixtures: these small ones, written
/// here, check how their sliding-window keys are read (transformers' rules: Qwen2
/// slides from `max_window_layers` on when `use_sliding_window`; Mistral slides on
/// every layer when `sliding_window` is set).
#[test]
fn qwen2_and_mistral_sliding_window_rules() {
    let base = |arch: &str, extra: &str| {
        format!(
            r#"{{"architectures": ["{arch}"], "hidden_size": 512, "vocab_size": 1000,
            "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
            "intermediate_size": 1024, "torch_dtype": "bfloat16"{extra}}}"#
        )
    };
    use AttentionKind::{Dense as D, Window as W};
    let q = attention_kinds(base(
        "Qwen2ForCausalLM",
        r#", "sliding_window": 64, "use_sliding_window": true, "max_window_layers": 2"#,
    ));
    assert_eq!(q, vec![D, D, W, W]);
    let off = attention_kinds(base(
        "Qwen2ForCausalLM",
        r#", "sliding_window": 64, "use_sliding_window": false, "max_window_layers": 2"#,
    ));
    assert_eq!(off, vec![D; 4]);
    assert_eq!(
        attention_kinds(base("MistralForCausalLM", r#", "sliding_window": 64"#)),
        vec![W; 4]
    );
    assert_eq!(
        attention_kinds(base("MistralForCausalLM", r#", "sliding_window": null"#)),
        vec![D; 4]
    );
    // Head width from hidden / heads when head_dim is absent: 64; KV 2 x 2 x 64 x 2 B.
    let m = import(
        "t/config.json",
        &base("Qwen2ForCausalLM", ""),
        &ImportOptions::default(),
    )
    .unwrap();
    assert_eq!(
        (m.attention.qk_head_dim, m.attention.kv_entry_bytes),
        (64, 512.0)
    );
    // A layer_types list of the wrong length is refused.
    let e = import(
        "t/config.json",
        &base("Qwen3ForCausalLM", r#", "layer_types": ["full_attention"]"#),
        &ImportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("lists 1 layers but num_hidden_layers is 4"),
        "{e}"
    );
}

/// Qwen3-Next's published config gives no `layer_types`, only `full_attention_interval`
/// (its Hugging Face card; transformers' `Qwen3NextConfig` derives the list: a layer is
/// linear attention unless its 1-based index is a multiple of the interval). A small
/// one written here: 8 layers at an interval of 4 are 3 linear, 1 full, twice; without
/// the key, transformers' default 4; a listed `layer_types` still wins.
#[test]
fn qwen3_next_layers_follow_the_full_attention_interval() {
    let cfg = |extra: &str| {
        format!(
            r#"{{"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
            "hidden_size": 256, "vocab_size": 1000, "num_hidden_layers": 8,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
            "intermediate_size": 512, "moe_intermediate_size": 64,
            "shared_expert_intermediate_size": 64, "num_experts": 8,
            "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "linear_num_key_heads": 2, "linear_num_value_heads": 4,
            "linear_key_head_dim": 32, "linear_value_head_dim": 32,
            "linear_conv_kernel_dim": 4, "torch_dtype": "bfloat16"{extra}}}"#
        )
    };
    use AttentionKind::{Dense as D, Linear as L};
    let every_fourth = vec![L, L, L, D, L, L, L, D];
    assert_eq!(
        attention_kinds(cfg(r#", "full_attention_interval": 4"#)),
        every_fourth
    );
    assert_eq!(attention_kinds(cfg("")), every_fourth);
    assert_eq!(
        attention_kinds(cfg(r#", "full_attention_interval": 2"#)),
        vec![L, D, L, D, L, D, L, D]
    );
    let listed = r#", "full_attention_interval": 4, "layer_types": ["full_attention", "linear_attention", "linear_attention", "linear_attention", "full_attention", "linear_attention", "linear_attention", "linear_attention"]"#;
    assert_eq!(attention_kinds(cfg(listed)), vec![D, L, L, L, D, L, L, L]);
}

/// Llama's and Mixtral's tokenizers add a beginning-of-sequence token to every prompt;
/// Qwen's and gpt-oss's add none (their `bos_token_id` in `config.json` is there all the
/// same), and their imports' provenance has no such line.
#[test]
fn llama_and_mixtral_prompts_carry_one_special_token() {
    for (name, tokens) in [
        ("Llama-3.1-8B", 1),
        ("Llama-3.1-70B", 1),
        ("Mixtral-8x7B-v0.1", 1),
        ("Qwen3-32B", 0),
        ("gpt-oss-120b", 0),
    ] {
        let m = load(name);
        assert_eq!(m.prompt_special_tokens, tokens, "{name}");
        assert_eq!(
            m.provenance.contains_key("prompt_special_tokens"),
            tokens > 0,
            "{name}"
        );
    }
}
