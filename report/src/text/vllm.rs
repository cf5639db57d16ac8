//! `vllm serve` command lines for a planned deployment: a starting point, not a tuned
//! configuration. The flags are vLLM's long-standing ones (`--data-parallel-size`,
//! `--enable-expert-parallel`, `--max-num-seqs`, `--max-num-batched-tokens`,
//! `--speculative-config`, `--kv-transfer-config`, `--enable-eplb` with
//! `--num-redundant-experts`); no vLLM source was at hand to check them against the
//! latest release, so check them against the version you deploy.

use serde::Serialize;
use sim::plan::Candidate;
use sim::serving::Mode;

/// One pool's command line and how many instances run it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolCommand {
    /// `prefill`, `decode` or `aggregated`.
    pub role: String,
    pub instances: u32,
    /// GPUs one instance spans (its data- or tensor-parallel size).
    pub gpus_per_instance: u32,
    pub command: String,
}

/// The command lines of `c` serving `model` (the model file's name; replace `$MODEL`
/// with its Hugging Face id or a local path).
pub fn commands(c: &Candidate, moe: bool) -> Vec<PoolCommand> {
    let kv = r#"--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'"#;
    let spec = |k: u32| {
        if k == 0 {
            String::new()
        } else {
            format!(
                r#" --speculative-config '{{"method":"deepseek_mtp","num_speculative_tokens":{k}}}'"#
            )
        }
    };
    let eplb = |r: u32| {
        if r == 0 {
            String::new()
        } else {
            format!(" --enable-eplb --num-redundant-experts {r}")
        }
    };
    // A DEP group: data-parallel attention with experts spread over it (a dense model:
    // data-parallel replicas); a TP replica: every layer split over its GPUs; one GPU:
    // no parallel flags.
    let ep = if moe { " --enable-expert-parallel" } else { "" };
    let layout = |p: &sim::plan::PoolChoice| {
        if p.tp > 1 {
            format!("--tensor-parallel-size {}", p.tp)
        } else if p.dep > 1 {
            format!("--data-parallel-size {}{ep}", p.dep)
        } else {
            String::new()
        }
    };
    let lead = |f: String| if f.is_empty() { f } else { format!(" {f}") };
    let mut out = Vec::new();
    if let Some(p) = &c.prefill {
        out.push(PoolCommand {
            role: "prefill".into(),
            instances: p.instances,
            gpus_per_instance: p.dep * p.tp.max(1),
            command: format!(
                "vllm serve \"$MODEL\"{} --max-num-batched-tokens {}{} {kv}",
                lead(layout(p)),
                p.chunk_tokens_per_rank,
                eplb(p.redundant_experts)
            ),
        });
    }
    let d = &c.decode;
    let (role, tokens, kv) = match c.mode {
        Mode::Aggregated => ("aggregated", d.chunk_tokens_per_rank, String::new()),
        _ => (
            "decode",
            d.max_batch_per_rank * (1 + c.mtp_draft_tokens),
            format!(" {kv}"),
        ),
    };
    out.push(PoolCommand {
        role: role.into(),
        instances: d.instances,
        gpus_per_instance: d.dep * d.tp.max(1),
        command: format!(
            "vllm serve \"$MODEL\"{} --max-num-seqs {} --max-num-batched-tokens {tokens}{}{}{kv}",
            lead(layout(d)),
            d.max_batch_per_rank,
            eplb(d.redundant_experts),
            spec(c.mtp_draft_tokens)
        ),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sim::plan::PoolChoice;

    #[test]
    fn disaggregated_commands_carry_the_sizes() {
        let pool = |instances, dep, r| PoolChoice {
            hardware: "gb300".into(),
            instances,
            dep,
            tp: 1,
            redundant_experts: r,
            max_batch_per_rank: 128,
            chunk_tokens_per_rank: 8192,
        };
        let c = Candidate {
            mode: Mode::Disaggregated,
            prefill: Some(pool(20, 2, 0)),
            decode: pool(1, 32, 32),
            mtp_draft_tokens: 3,
            load_scale: 1.0,
        };
        let v = commands(&c, true);
        assert_eq!(
            (v[0].role.as_str(), v[0].instances, v[0].gpus_per_instance),
            ("prefill", 20, 2)
        );
        assert!(v[0].command.contains(
            "--data-parallel-size 2 --enable-expert-parallel --max-num-batched-tokens 8192"
        ));
        assert!(!v[0].command.contains("speculative"));
        let d = &v[1].command;
        assert!(d.contains("--data-parallel-size 32") && d.contains("--max-num-seqs 128"));
        // 128 requests x (1 + 3 drafts) tokens per step.
        assert!(d.contains("--max-num-batched-tokens 512"));
        assert!(
            d.contains(r#""num_speculative_tokens":3"#) && d.contains("--num-redundant-experts 32")
        );
        assert!(d.contains("NixlConnector"));
        // A TP8 decode replica: one instance of 8 GPUs, tensor-parallel.
        let mut tp = c.clone();
        tp.decode.dep = 1;
        tp.decode.tp = 8;
        let v = commands(&tp, true);
        assert_eq!(v[1].gpus_per_instance, 8);
        assert!(v[1]
            .command
            .contains("--tensor-parallel-size 8 --max-num-seqs 128"));
        assert!(!v[1].command.contains("--data-parallel-size"));
    }

    #[test]
    fn dense_models_get_no_expert_flags_and_one_gpu_no_parallel_flags() {
        let pool = |dep, tp| PoolChoice {
            hardware: "h100".into(),
            instances: 8 / (dep * tp),
            dep,
            tp,
            redundant_experts: 0,
            max_batch_per_rank: 256,
            chunk_tokens_per_rank: 8192,
        };
        let c = |dep, tp| Candidate {
            mode: Mode::Aggregated,
            prefill: None,
            decode: pool(dep, tp),
            mtp_draft_tokens: 0,
            load_scale: 1.0,
        };
        // Eight one-GPU replicas: no parallel flags at all.
        let v = commands(&c(1, 1), false);
        assert_eq!(
            (v[0].role.as_str(), v[0].instances, v[0].gpus_per_instance),
            ("aggregated", 8, 1)
        );
        assert!(
            v[0].command
                .starts_with("vllm serve \"$MODEL\" --max-num-seqs 256"),
            "{}",
            v[0].command
        );
        // A dense model's data parallelism has no experts to spread.
        let v = commands(&c(2, 1), false);
        assert!(
            v[0].command
                .contains("--data-parallel-size 2 --max-num-seqs"),
            "{}",
            v[0].command
        );
        assert!(!v[0].command.contains("expert"));
        // A MoE model's does.
        let v = commands(&c(2, 1), true);
        assert!(v[0]
            .command
            .contains("--data-parallel-size 2 --enable-expert-parallel"));
        assert!(!v[0].command.contains("NixlConnector"));
    }
}
