//! Whether a measured run could have done the work its record states: the arithmetic
//! its throughput implies against the GPUs' dense peak.
//!
//! A run's tokens each pass through the model's active weights (two flops a weight; the
//! LM head's only for the tokens it samples, its outputs), so its throughput times
//! `2 x active parameters` is arithmetic its GPUs did at least, before attention. The best dense GEMMs reach about 0.78 of a GPU's datasheet peak
//! (DeepGEMM's FP8 GEMM on H800: up to 1550 TFLOPS against 2 x 989 dense;
//! shared/reference/kernel-benchmarks-public.md), and a serving step also decodes,
//! memory-bound. A record that implies more than [`PEAK_SHARE`] of its GPUs' peak did
//! not run as described: its prompts were cached, or shorter, or its figures are of
//! another run. It is still compared; the share says how far to trust it.

use corpus::{Load, Metric, RunRecord, Stat};
use spec::dtype::Dtype;
use spec::hardware::Hardware;
use spec::model::Model;

/// The share of the GPUs' dense peak above which a record's stated work is implausible.
pub const PEAK_SHARE: f64 = 0.8;

/// The share of its GPUs' dense peak (at its GEMMs' format) that a record's throughput
/// implies for its tokens' weight arithmetic alone: its measured total tokens/s, else
/// its requests/s times its mean prompt and output, else (a closed loop) its
/// concurrency over TTFT plus the output's TPOTs. `None` where neither is given or its
/// GPUs are not known.
pub fn implied_peak_share(rec: &RunRecord, model: &Model, hw: &Hardware) -> Option<f64> {
    let tokens = rec.client.input.mean() + rec.client.output.mean();
    let central = |m: Metric| {
        [Stat::Center, Stat::P50, Stat::Mean]
            .iter()
            .find_map(|&s| rec.figure(m, s))
    };
    let tok_s = rec
        .figure(Metric::TotalTokS, Stat::Value)
        .or_else(|| Some(rec.figure(Metric::RequestS, Stat::Value)? * tokens))
        .or_else(|| {
            let Load::ClosedLoop { concurrency } = rec.client.load else {
                return None;
            };
            let ttft = central(Metric::TtftMs)? / 1e3;
            let tpot = central(Metric::TpotMs)? / 1e3;
            let e2e = ttft + (rec.client.output.mean() - 1.0).max(0.0) * tpot;
            (e2e > 0.0).then(|| concurrency as f64 / e2e * tokens)
        })?;
    let gpus = rec.layout.gpus()? as f64;
    let dtype = match rec.model.gemm.key() {
        "nvfp4" | "mxfp4" => Dtype::Fp4,
        "fp8_tensor" | "fp8_block" => Dtype::Fp8,
        _ => Dtype::Bf16,
    };
    // Engines compute the logits of a prompt's last position only: the LM head's
    // weights count for the output tokens.
    let w = model.weights();
    let head = w.active_of("lm_head");
    let out_share = rec.client.output.mean() / tokens;
    let flops = tok_s * 2.0 * (w.active_without_embedding() - head + out_share * head);
    Some(flops / (gpus * hw.tensor.flops_per_s(dtype)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-3.1-8B (about 7.5e9 weights a token uses, without the embedding, 0.53e9 of
    /// them the LM head's, which only the 100 output tokens of 2,100 go through) on one
    /// H200 in FP8 (1.979e15 flop/s dense): 64 users, 2,000-token prompts and 100
    /// outputs, TTFT 121.7 ms and TPOT 9.74 ms (a gap-analysis row of the corpus): 64 /
    /// (0.1217 + 99 x 0.00974) = 58.4 requests/s, 122.7K tokens/s, 1.72 PFLOP/s: 0.87
    /// of the peak. At twice the TPOT the share halves, about.
    #[test]
    fn a_closed_loop_implies_its_weight_arithmetic() {
        let text = r#"{"schema":"twin.run.v1","id":"t","provenance":{"source":"hand"},
            "engine":{"name":"vllm"},
            "model":{"id":"meta-llama/Llama-3.1-8B-Instruct","config":"models/Llama-3.1-8B/config.json","gemm":"fp8_tensor"},
            "gpu":{"system":"h200_sxm","hardware":"h200"},
            "layout":{"mode":"aggregated","workers":{"count":1,"tp":1,"pp":1,"attention_dp":1,"moe_tp":1,"moe_ep":1}},
            "client":{"tool":"hand","load":{"kind":"closed_loop","concurrency":64},
                "input":{"dist":"fixed","tokens":2000},"output":{"dist":"fixed","tokens":100}},
            "measured":{"ttft_ms":{"center":121.7},"tpot_ms":{"center":9.74}}}"#;
        let rec: RunRecord = serde_json::from_str(text).unwrap();
        let model = scenario::load_model("llama-3.1-8b", &[]).unwrap();
        let hw = scenario::load_hardware("h200", &[]).unwrap();
        let w = model.weights();
        let head = w.active_of("lm_head");
        assert!(head > 0.0);
        let active = w.active_without_embedding() - head + head * 100.0 / 2100.0;
        let share = implied_peak_share(&rec, &model, &hw).unwrap();
        let want =
            64.0 / (0.1217 + 99.0 * 0.00974) * 2100.0 * 2.0 * active / hw.tensor.fp8_flops_per_s;
        assert!((share - want).abs() < 1e-12, "{share} {want}");
        assert!((share - 0.87).abs() < 0.01, "{share}");
        assert!(share > PEAK_SHARE, "{share}");
        let mut slow = rec.clone();
        slow.measured
            .get_mut(&Metric::TpotMs)
            .unwrap()
            .insert(Stat::Center, 19.48);
        let half = implied_peak_share(&slow, &model, &hw).unwrap();
        assert!(half < 0.55 * share && half > 0.45 * share, "{half} {share}");
        // A stated throughput wins over the latencies.
        let mut stated = rec;
        stated.measured.insert(
            Metric::TotalTokS,
            [(Stat::Value, 1000.0)].into_iter().collect(),
        );
        let s = implied_peak_share(&stated, &model, &hw).unwrap();
        assert!((s - 1000.0 * 2.0 * active / hw.tensor.fp8_flops_per_s).abs() < 1e-12);
    }
}
