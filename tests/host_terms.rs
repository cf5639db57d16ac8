//! The host terms twin ships, each against the published figures it was fitted to,
//! refitted here through twin's own pricing: a change to the prefill step's price of
//! the fitted deployment fails this until the constant is refitted.

mod common;
use common::*;

/// The architecture fields of Qwen/Qwen3-Next-80B-A3B-Instruct's `config.json` (its
/// Hugging Face card; transformers' `Qwen3NextConfig`, whose docstring names that
/// checkpoint, has the same values for these keys): 48 layers, a full-attention layer
/// every 4th (36 gated DeltaNet layers), 512 experts, 10 routed and 1 shared a token.
const QWEN3_NEXT: &str = r#"{
  "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
  "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16,
  "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 5120,
  "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
  "num_experts": 512, "num_experts_per_tok": 10, "decoder_sparse_step": 1,
  "mlp_only_layers": [], "norm_topk_prob": true, "full_attention_interval": 4,
  "linear_num_key_heads": 16, "linear_num_value_heads": 32,
  "linear_key_head_dim": 128, "linear_value_head_dim": 128,
  "linear_conv_kernel_dim": 4, "partial_rotary_factor": 0.25,
  "rope_theta": 10000000, "rms_norm_eps": 1e-06, "hidden_act": "silu",
  "vocab_size": 151936, "max_position_embeddings": 262144,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16"
}"#;

/// `twin forward ARGS --json`'s step, milliseconds.
fn step_ms(args: &[&str]) -> f64 {
    let mut all = vec!["forward"];
    all.extend(args);
    all.push("--json");
    json(&twin(&all))["step_ms"].as_f64().unwrap()
}

/// `launch.linear_attn_s` is the fit of SGLang's published time to first token of
/// Qwen3-Next-80B-A3B on two H200 (TP2), prefill launched eagerly, one request at a
/// time (`sglang.bench_serving --max-concurrency 1`, one output token): 99.17, 101.52
/// and 127.20 ms at 1,024, 2,048 and 4,096 prompt tokens (sglang PR #13081, "without
/// piecewise-cudagraph"). Less twin's front end (SGLang's, 12 ms) and its prefill step
/// of the same without the term, over the 36 linear-attention layers, the mean of the
/// three: 1.63 ms a layer. With it, twin's time to first token is within 7% of each.
#[test]
fn the_linear_attention_host_term_is_the_fit_of_sglangs_eager_prefill() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(&config, QWEN3_NEXT).unwrap();
    let config = config.display().to_string();
    let prefill_ms = |tokens: u32, term: &[&str]| {
        let tokens = tokens.to_string();
        let mut args: Vec<&str> =
            "--hardware h200 --engine sglang --tp 2 --phase prefill --requests 1"
                .split(' ')
                .collect();
        args.extend(["--model", &config, "--new-tokens", &tokens]);
        args.extend(term);
        step_ms(&args)
    };
    let frontend_ms = 12.0;
    let layers = 36.0;
    let published = [(1024, 99.17), (2048, 101.52), (4096, 127.20)];
    let fit_ms = published
        .iter()
        .map(|&(n, ttft)| {
            (ttft - frontend_ms - prefill_ms(n, &["--set", "cost.launch.linear_attn_s=0"])) / layers
        })
        .sum::<f64>()
        / published.len() as f64;
    let shipped_ms = 1e3 * sim::cost::params::LINEAR_ATTN_HOST_S;
    assert!(
        (fit_ms - shipped_ms).abs() < 0.01,
        "refit launch.linear_attn_s: the published figures now give {fit_ms:.4} ms a layer, twin ships {shipped_ms:.4}"
    );
    for (n, ttft) in published {
        let ours = frontend_ms + prefill_ms(n, &[]);
        assert!(
            (ours / ttft - 1.0).abs() < 0.07,
            "{n} tokens: {ours:.1} ms against {ttft}"
        );
    }
}

/// vLLM launches decode steps of more than its largest CUDA graph, 512 tokens a rank by
/// default, from the host: gpt-oss-120b's 600-request decode on H100 TP8 pays its
/// Triton experts' host time, 2 ms a MoE layer over 36 layers (a 72 ms floor). A
/// deployment that captures larger graphs says so with `--set
/// cost.launch.graph_tokens=1024`, which the engine's default must not overwrite: the
/// same step then replays a graph, far under that floor.
#[test]
fn a_set_graph_size_outranks_the_engines_default() {
    let decode_ms = |extra: &[&str]| {
        let mut args: Vec<&str> =
            "--hardware h100 --model gpt-oss-120b --engine vllm --tp 8 --phase decode --requests 600"
                .split(' ')
                .collect();
        args.extend(extra);
        step_ms(&args)
    };
    let launched = decode_ms(&[]);
    let graphed = decode_ms(&["--set", "cost.launch.graph_tokens=1024"]);
    assert!(launched > 72.0, "{launched} ms");
    assert!(graphed < 20.0, "{graphed} ms");
}

/// Every `--set cost.*` outranks what an engine's or a deployment's defaults put in
/// after it: `--pdl` zeroes a graph's gap between kernels (`launch.graph_node_s`), and
/// vLLM before 0.14.0, which forms each step after the last ends, exposes the host's
/// work whole (`host.overlap` 0); a user's value of either holds.
#[test]
fn a_set_cost_parameter_outranks_every_engine_default() {
    let decode_ms = |engine: &str, extra: &[&str]| {
        let mut args: Vec<&str> =
            "--hardware h100 --model llama-3.1-8b --phase decode --requests 64"
                .split(' ')
                .collect();
        args.extend(["--engine", engine]);
        args.extend(extra);
        step_ms(&args)
    };
    let pdl = decode_ms("trtllm", &["--pdl"]);
    let gapped = decode_ms(
        "trtllm",
        &["--pdl", "--set", "cost.launch.graph_node_s=2e-5"],
    );
    assert!(
        gapped > pdl + 2.0,
        "PDL {pdl} ms, with a set 20 us gap {gapped} ms"
    );
    let exposed = decode_ms("vllm@0.12.0", &[]);
    let hidden = decode_ms("vllm@0.12.0", &["--set", "cost.host.overlap=1"]);
    assert!(
        hidden < exposed,
        "exposed {exposed} ms, overlapped {hidden} ms"
    );
}
