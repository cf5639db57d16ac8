//! What a row's deployment served beyond its label: the checkpoint's own formats,
//! the KV cache, the server settings of InferenceX's per-model scripts, and those
//! AIConfigurator's generator writes for the gap analysis's deployments.

use super::Row;
use crate::record::*;

/// The model config twin prices a checkpoint with (relative to the corpus file), and
/// the checkpoint's own formats (gemm, routed experts) where the label alone would
/// mislead.
pub(super) struct Checkpoint {
    pub config: &'static str,
    pub moe: bool,
    /// The checkpoint's native FP8 is 128x128 blocks.
    fp8_block: bool,
    /// Routed experts in MXFP4 whatever the label (gpt-oss).
    pub mxfp4_experts: bool,
    /// Width of one routed expert's FFN (`moe_intermediate_size`), 0 without experts.
    pub expert_ffn: u32,
}

pub(super) fn checkpoint(model_path: &str) -> Option<Checkpoint> {
    let c = |config, moe, fp8_block, mxfp4_experts, expert_ffn| Checkpoint {
        config,
        moe,
        fp8_block,
        mxfp4_experts,
        expert_ffn,
    };
    Some(match model_path {
        "meta-llama/Llama-3.1-70B" => c("models/Llama-3.1-70B/config.json", false, false, false, 0),
        "meta-llama/Llama-3.1-8B-Instruct" | "nvidia/Llama-3.1-8B-Instruct-FP8" => {
            c("models/Llama-3.1-8B/config.json", false, false, false, 0)
        }
        "Qwen/Qwen3-32B" | "nvidia/Qwen3-32B-NVFP4" => {
            c("models/Qwen3-32B/config.json", false, false, false, 0)
        }
        "Qwen/Qwen3-235B-A22B-FP8" => c(
            "models/Qwen3-235B-A22B-FP8/config.json",
            true,
            true,
            false,
            1536,
        ),
        "openai/gpt-oss-120b" => c("models/gpt-oss-120b/config.json", true, false, true, 2880),
        "MiniMaxAI/MiniMax-M2.5" => c("models/MiniMax-M2.5/config.json", true, true, false, 1536),
        "Qwen/Qwen3.5-397B-A17B" => c(
            "models/Qwen3.5-397B-A17B/config.json",
            true,
            true,
            false,
            1024,
        ),
        _ => return None,
    })
}

/// A quantization label read as a format, and the note when the checkpoint decides.
pub(super) fn format_of(
    label: &str,
    ck: &Checkpoint,
    notes: &mut Vec<String>,
) -> Result<Format, String> {
    Ok(match label {
        "" | "bf16" | "fp16" | "float16" => Format::Bf16,
        "fp8" if ck.fp8_block => {
            notes.push(
                "quantization label `fp8` read as the checkpoint's own 128x128-block FP8".into(),
            );
            Format::Fp8Block
        }
        "fp8" | "fp8_static" | "fp8_per_tensor" => Format::Fp8Tensor,
        "fp8_block" => Format::Fp8Block,
        "nvfp4" | "fp4" => Format::Nvfp4,
        "mxfp4" | "w4a16_mxfp4" | "w4a8_mxfp4_fp8" => Format::Mxfp4,
        "int4_wo" | "w4a16" | "awq" | "gptq" => Format::Int4,
        other => return Err(format!("quantization `{other}` is not a format twin knows")),
    })
}

/// The KV cache format InferenceX's server scripts set, by model and engine (their
/// `--kv-cache-dtype`): `None` where the script leaves the engine's default. gpt-oss
/// on vLLM: FP8 on B200 from 2025-12-05 (`gptoss_fp4_b200.sh`, `kv-cache-dtype: fp8`
/// since InferenceX 25506e87), the engine's default on Hopper (`gptoss_fp4_h{100,200}.sh`
/// set none); on TensorRT-LLM, FP8 on B200 from 2025-10-20 (`gptoss_fp4_b200_trt.sh`,
/// `kv_cache_config: dtype: fp8` since ac1998a5; the H200 script's is `auto`). A row
/// without a date is taken as measured after.
pub(super) fn inferencex_kv(
    model_path: &str,
    engine: EngineName,
    system: &str,
    measured: Option<&str>,
) -> Option<Format> {
    match (model_path, engine) {
        ("MiniMaxAI/MiniMax-M2.5", EngineName::Vllm) => {
            minimax_vllm_april(system, measured).then_some(Format::Fp8Tensor)
        }
        ("Qwen/Qwen3.5-397B-A17B", EngineName::Sglang) | ("meta-llama/Llama-3.1-70B", _) => {
            Some(Format::Fp8Tensor)
        }
        ("openai/gpt-oss-120b", EngineName::Vllm)
            if system == "b200_sxm" && measured.is_none_or(|d| d >= "2025-12-05") =>
        {
            Some(Format::Fp8Tensor)
        }
        ("openai/gpt-oss-120b", EngineName::Trtllm)
            if system == "b200_sxm" && measured.is_none_or(|d| d >= "2025-10-20") =>
        {
            Some(Format::Fp8Tensor)
        }
        _ => None,
    }
}

/// Whether an InferenceX MiniMax-M2.5 vLLM row ran the scripts' settings of April 2026:
/// `--kv-cache-dtype fp8`, `--max-num-batched-tokens $((ISL * 2))` and
/// `--gpu-memory-utilization 0.90` (`minimaxm2.5_fp8_b200.sh` from bddbf403 of
/// 2026-04-03, with the move to vLLM 0.19.0; the NVFP4 and B300 scripts from their first
/// versions, 79bd988e and 340d7854/22d0f12f). Before, and on H100 and H200 at every date
/// of the corpus (`minimaxm2.5_fp8_h200.sh` at a3634634, 5e2c705d, 1d5cae14, 626932a1;
/// `_h100.sh` at ac0d2a85 and 626932a1), the scripts set neither: the KV cache in the
/// model's dtype (BF16: the checkpoint quantises no KV) and vLLM's default token budget.
/// A row without a date is taken as measured after.
fn minimax_vllm_april(system: &str, measured: Option<&str>) -> bool {
    match system {
        "b300_sxm" => true,
        "b200_sxm" => measured.is_none_or(|d| d >= "2026-04-03"),
        _ => false,
    }
}

/// The KV cache a TensorRT-LLM row serves by [`trtllm_checkpoint_kv`], with a note.
pub(super) fn trtllm_modelopt_kv(
    engine: EngineName,
    gemm: Format,
    notes: &mut Vec<String>,
) -> Option<Format> {
    let kv = trtllm_checkpoint_kv(engine, gemm)?;
    notes.push("KV cache: FP8, as a ModelOpt checkpoint carries it (kv_cache_quant_algo FP8) and TensorRT-LLM serves it".into());
    Some(kv)
}

/// The server settings of InferenceX's per-model scripts that change what a run
/// measures (`benchmarks/single_node/*.sh` at InferenceX 868ed43d, and ac1998a5 for
/// Llama-70B, and as of the row's date `measured` where they changed;
/// docs/runs-corpus.md): prefix caching is off in every one; the step's token budget and
/// the running cap where the script sets them.
pub(super) fn inferencex_settings(
    row: &Row,
    engine: EngineName,
    conc: u32,
    (measured, image): (Option<&str>, Option<&str>),
    notes: &mut Vec<String>,
) -> EngineSettings {
    let mut s = EngineSettings {
        prefix_caching: Some(false),
        ..Default::default()
    };
    match (row.model_path.as_str(), engine) {
        // From April 2026 ([`minimax_vllm_april`]): `--max-num-batched-tokens
        // $((ISL * 2))` and 0.90 of the memory. Before, vLLM's default budget, 0.95 of
        // the memory on B200 and H200, 0.90 with `--max-num-seqs 256` on H100; the B200
        // script then also turned off FlashInfer's and DeepGEMM's FP8 experts
        // (`VLLM_USE_FLASHINFER_MOE_FP8=0`, `VLLM_MOE_USE_DEEP_GEMM=0`: Triton's ran).
        ("MiniMaxAI/MiniMax-M2.5", EngineName::Vllm) => {
            let h100 = row.system == "h100_sxm";
            if minimax_vllm_april(&row.system, measured) {
                s.max_batched_tokens = Some(2 * row.isl);
                s.memory_fraction = Some(0.90);
            } else {
                s.memory_fraction = Some(if h100 { 0.90 } else { 0.95 });
                s.max_running = h100.then_some(256);
                if row.system == "b200_sxm" {
                    notes.push("experts: Triton's FP8 kernel (the script of the row's date sets VLLM_USE_FLASHINFER_MOE_FP8=0 and VLLM_MOE_USE_DEEP_GEMM=0), which vLLM's B200 tables do not time: priced by the usual one".into());
                }
            }
        }
        // `max-num-batched-tokens: 8192`; gpt-oss on B200 also exports
        // `VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1` (`gptoss_fp4_b200.sh`, every version
        // from eb282d8f of 2025-09-27): its MXFP4 experts take MXFP8 activations. On
        // H100 and H200 the scripts export `VLLM_MXFP4_USE_MARLIN=1` from 4e52ed4c of
        // 2026-01-02 (PR #327, with the move to vLLM 0.13.0): the experts run Marlin's
        // kernels, not the Triton ones vLLM picks by default there.
        ("openai/gpt-oss-120b", EngineName::Vllm) => {
            s.max_batched_tokens = Some(8192);
            if row.system == "b200_sxm" {
                s.expert_activations_fp8 = Some(true);
            }
            if matches!(row.system.as_str(), "h100_sxm" | "h200_sxm")
                // Rows without a version were measured in 2025, before it.
                && spec::version::major_minor(&row.backend_version).is_some_and(|v| v >= (0, 13))
            {
                s.moe_kernel = Some(spec::kernel::MoeKernel::Marlin);
            }
        }
        ("meta-llama/Llama-3.1-70B", EngineName::Vllm) => {
            s.max_batched_tokens = Some(8192);
        }
        // `--max_num_tokens 16384`; at 1k/1k below TP8 the scripts' config also holds
        // prompts back for a fuller batch (`batch_wait_timeout_iters: 20`,
        // `batch_wait_max_tokens_ratio: 0.9`, `70b_fp{8,4}_{h200,b200}_trt_*.sh` from
        // 1b563c85 of 2025-09-18 until their removal on 2025-10-29, the rows' date).
        ("meta-llama/Llama-3.1-70B", EngineName::Trtllm) => {
            s.max_batched_tokens = Some(16384);
            if row.isl == 1024 && row.osl == 1024 && row.tp_size.is_some_and(|t| t < 8) {
                s.batch_wait_iters = Some(20);
                s.batch_wait_tokens_ratio = Some(0.9);
            }
        }
        // `gptoss_fp4_{b200,h200}_trt.sh` (InferenceX 34bc7c40 and 187f5756): `--max_num_tokens
        // 20000`, `free_gpu_memory_fraction: 0.85`; its running cap (`--max_batch_size`
        // 512 on B200, the concurrency on H200) never binds a closed loop of at most 512.
        // With attention DP the B200 script adds `attention_dp_config: enable_balance:
        // true` (every version from ef819f57 of 2025-09-18; the H200 one runs no DP).
        // Both scripts export `TRTLLM_ENABLE_PDL=1` from 28e5a01e (2025-09-19) on; the
        // GB200 Dynamo script (the disaggregated rows) does not.
        ("openai/gpt-oss-120b", EngineName::Trtllm) => {
            s.max_batched_tokens = Some(20000);
            s.memory_fraction = Some(0.85);
            if matches!(row.system.as_str(), "b200_sxm" | "h200_sxm")
                && measured.is_none_or(|d| d >= "2025-09-19")
            {
                s.pdl = Some(true);
            }
            if row.system == "b200_sxm" && row.attention_dp_size.is_some_and(|d| d > 1) {
                s.adp_balance = Some(true);
            }
        }
        ("Qwen/Qwen3.5-397B-A17B", EngineName::Sglang) => {
            qwen35_sglang(&mut s, row, conc, image, notes);
        }
        _ => {}
    }
    s
}

/// Qwen3.5-397B's InferenceX settings on SGLang.
///
/// `--mem-fraction-static 0.82`. The scripts' `--max-running-requests 128` (at
/// 868ed43d) never binds their closed loops of at most 128 users; the rows at 256
/// users ran the MTP config below, whose cap is the concurrency.
///
/// On Blackwell, `--scheduler-recv-interval 30` from 16 users up, 10 below
/// (`qwen3.5_{fp8,bf16,fp4}_b200.sh` from their first version, efd49e50 of
/// 2026-03-03, to 626932a1 of 2026-03-27, after the rows). The H200 script sets
/// none. The B300 rows of SGLang 0.5.9 ran before B300 scripts existed and are
/// taken as B200's; those of 0.5.10 ran the B300 configs added on 2026-04-17
/// with that image (`qwen3.5-{fp8,fp4,bf16}-b300-sglang`): the FP8 script
/// (c0f62a2e) polls every 10 iterations at every concurrency with
/// `--mem-fraction-static 0.8`, the NVFP4 one (8acbd08b) keeps the B200 rule
/// with 0.8, the BF16 one (32274d6c) the rule with 0.82.
///
/// The rows of image `lmsysorg/sglang:v0.5.9-cu130` (without `-amd64`) at TP4 with the
/// experts sliced over the four GPUs ran `qwen3.5-fp8-b200-sglang-mtp`, the only
/// config of InferenceX's `nvidia-master.yaml` with that image or that layout before
/// April 2026 (added by 35d4bb36, PR #898, merged 2026-03-20 22:08 UTC: the B200 rows'
/// `measured` stamp; the B300 rows of 2026-04-03 ran it on B300 runners, before any
/// B300 config): `qwen3.5_fp8_b200_mtp.sh` adds EAGLE speculative decoding on the
/// model's MTP layer (`--speculative-num-steps 3 --speculative-eagle-topk 1
/// --speculative-num-draft-tokens 4`: three chained drafts), `--mem-fraction-static
/// 0.8` and `--max-running-requests` the concurrency.
fn qwen35_sglang(
    s: &mut EngineSettings,
    row: &Row,
    conc: u32,
    image: Option<&str>,
    notes: &mut Vec<String>,
) {
    let b300_config = row.system == "b300_sxm" && row.silicon_data_source.contains("v0.5.10");
    let b300_fp8 = b300_config && row.precision == "fp8";
    let low_memory = b300_config && matches!(row.precision.as_str(), "fp8" | "fp4");
    s.memory_fraction = Some(if low_memory { 0.8 } else { 0.82 });
    s.scheduler_recv_interval = match row.system.as_str() {
        "h200_sxm" => None,
        _ if b300_fp8 => Some(10),
        _ => Some(if conc >= 16 { 30 } else { 10 }),
    };
    let mtp_config = image == Some("lmsysorg/sglang:v0.5.9-cu130")
        && row.precision == "fp8"
        && row.tp_size == Some(4)
        && row.moe_tp_size == Some(4);
    if mtp_config {
        s.memory_fraction = Some(0.8);
        s.max_running = Some(conc);
        s.speculative = Some(Speculative {
            method: SpecMethod::Mtp,
            draft_tokens: 3,
            acceptance: None,
        });
        notes.push("speculative decoding: EAGLE on the model's MTP layer, 3 chained drafts a step (InferenceX `qwen3.5-fp8-b200-sglang-mtp`, the only config of this image and layout; its acceptance is not in the row)".into());
    }
}

/// The server settings AIConfigurator's config generator writes for an aggregated
/// deployment of the row's batch per attention replica (`batch_size`), which the
/// gap-analysis rows are read as having run (docs/runs-corpus.md, "The gap-analysis
/// rows"): the project is
/// AIConfigurator's own (`aic-auto-gap-analysis`) and its images are Dynamo's, which
/// that generator targets. An inference, said in a note; disaggregated rows keep the
/// engines' defaults (their prefill and decode workers were given different caps,
/// which one record's settings cannot hold).
///
/// - TensorRT-LLM (`generator/backends/trtllm.py` from 84ee71eb of 2025-09-30, then
///   `rule_plugin/trtllm.rule`): `max_batch_size` the batch, `max_num_tokens`
///   batch + ISL + 1500 (a multiple of 32 tokens from 1b41ea1b of 2026-01-29),
///   `free_gpu_memory_fraction` 0.80, chunked prefill off. The batch is the row's own:
///   the rules for comparing with AIConfigurator's predictions (`rule_plugin/benchmark`,
///   from 71bb3d00 of 2026-01-30) keep it where the production rules raise it to 512.
/// - vLLM (`rule_plugin/vllm.rule`; passed to `vllm serve` from 2cecd659 of
///   2026-01-08, before the rows' Dynamo 0.8.0 images): `--max-num-seqs` the batch,
///   `--max-num-batched-tokens` the batch + ISL + 1500 (the benchmark rules alike).
/// - SGLang: the template of 0.5.1.post1 passes no cap (the engine's defaults); the
///   later ones (`cli_args.j2`) `--max-prefill-tokens` ISL + 1500 and, from 07a37792 of
///   2026-01-19 (before the rows' Dynamo 0.8.0 images), `--enable-mixed-chunk`.
pub(super) fn gap_analysis_settings(
    row: &Row,
    engine: EngineName,
    measured: Option<&str>,
    notes: &mut Vec<String>,
) -> EngineSettings {
    let mut s = EngineSettings::default();
    let bs = row.batch_size.unwrap_or(0);
    if row.mode != "agg" || bs == 0 {
        return s;
    }
    // The step's budget of TensorRT-LLM and vLLM: the batch's decodes and one prompt.
    let budget = bs + row.isl + 1500;
    match engine {
        EngineName::Sglang if row.backend_version.trim() == "0.5.1.post1" => return s,
        EngineName::Sglang => {
            s.max_prefill_tokens = Some(row.isl + 1500);
            s.mixed_chunk = Some(true);
            notes.push(format!(
                "server settings: as AIConfigurator's config generator writes them (assumed for the gap analysis's deployments): at most {} prompt tokens a prefill batch, decode mixed into it",
                row.isl + 1500
            ));
            return s;
        }
        EngineName::Trtllm => {
            let rounded = measured.is_some_and(|d| d >= "2026-01-29");
            s.max_batched_tokens = Some(if rounded {
                budget.div_ceil(32) * 32
            } else {
                budget
            });
            s.memory_fraction = Some(0.80);
        }
        EngineName::Vllm => s.max_batched_tokens = Some(budget),
    }
    s.max_running = Some(bs);
    notes.push(format!(
        "server settings: as AIConfigurator's config generator writes them for a batch of {bs} (assumed for the gap analysis's deployments): {bs} running, {} tokens a step",
        s.max_batched_tokens.unwrap_or(0)
    ));
    s
}
