//! The flags of the runs commands ask for, each declared once with its help, and the
//! typed requests they make: `twin simulate`'s ([`SimulateArgs`] -> [`RunRequest`]),
//! `twin forward`'s ([`forward::ForwardArgs`] -> [`StepRequest`]) and `twin kernel`'s
//! ([`kernel::KernelArgs`] -> [`KernelRequest`]). The binary's commands flatten them
//! (`plan`, `sweep`, `validate` and `calibrate` too); `validate published` parses the
//! published tables' command lines with them, and the fuzz tests random ones. Only with
//! the `clap` feature.
//!
//! [`RunRequest`]: crate::RunRequest
//! [`StepRequest`]: crate::step::StepRequest
//! [`KernelRequest`]: crate::kernel::KernelRequest

use clap::Args;

pub mod forward;
pub mod kernel;

/// A simulation run of a scenario: `twin simulate`'s arguments, which `twin validate`
/// also parses from the published tables' commands.
#[derive(Debug, Clone, Default, Args)]
pub struct SimulateArgs {
    /// Scenario name (`twin list`) or path to a scenario TOML
    /// [default: gb300-nvl72-v4.1-flash-agentx].
    pub scenario: Option<String>,
    /// Seed of every random stream (default: the scenario's `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Simulated seconds, warm-up included (default: the scenario's `duration_s`).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Override any field: `serving.decode.dep=32`, `workload.agentx.sessions=2048`,
    /// `model.mtp.draft_tokens=1`, `hardware.nvlink.bytes_per_s=1.8e12`,
    /// `cost.moe.mem_eff=0.9`, `workload=poisson`, `serving.max_model_len=32768` (the
    /// longest prompt + output accepted; default: the model's max_position_embeddings;
    /// longer requests are refused and counted), `serving.gpu_memory_utilization=0.95`
    /// (the engine's memory knob: its KV pool by its own arithmetic),
    /// `serving.kv_block_tokens=64` (the engine's prefix-cache block: a cached prefix is
    /// whole blocks; default vLLM 16, SGLang 1, TensorRT-LLM 32, twin's own 512)
    /// (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// The coarse model: simulate one of K identical copies of the rack, each request
    /// standing for K (`--set fidelity.cohort=K`; README, "Fidelity": its error).
    #[arg(long, value_name = "K")]
    pub cohort: Option<u32>,
    /// Print one JSON object (report, resolved scenario, seed, twin version).
    #[arg(long)]
    pub json: bool,
    /// Request trace for trace-replay workloads: Mooncake JSONL, Azure LLM inference
    /// CSV, BurstGPT CSV or a `vllm bench serve --save-detailed` result (detected from
    /// its first line, or --trace-format).
    #[arg(long, value_name = "PATH")]
    pub trace: Option<String>,
    /// The --trace file's format, where its first line does not show it.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub trace_format: Option<crate::trace_formats::TraceFormat>,
    #[command(flatten)]
    pub pricing: PricingArgs,
    /// Simulate a benchmark client's run exactly as it sends it, instead of the
    /// scenario's workload: `'vllm --num-prompts 640 --max-concurrency 64
    /// --random-input-len 8192 --random-output-len 1024 --random-range-ratio 0.8'`
    /// (also `sglang ...` with `bench_serving`'s flags, `aiperf ...`). Every request
    /// counts, TTFT runs from its send, the run ends with the last (docs/engine-schedulers.md).
    #[arg(long, value_name = "'CLIENT FLAGS'")]
    pub bench: Option<String>,
    /// Compare P/D splits: one run per decode-group DEP (e.g. `16,24,32,48`), the
    /// prefill pool's instances filling the rest of the scenario's GPUs.
    #[arg(long, value_name = "DEPS", value_delimiter = ',')]
    pub decode_deps: Vec<u32>,
}

/// What prices the steps beside the hardware file: a calibration profile and the serving
/// engine's measured kernel tables (`simulate`, `plan`, `forward`, `validate bench`).
#[derive(Debug, Clone, Default, Args)]
pub struct PricingArgs {
    /// Calibration profile whose measured efficiencies and fixed costs price the steps,
    /// layered over the hardware file's fitted `[cost]` (`twin calibrate --out DIR`
    /// writes DIR/profile.toml); or the in-situ factors of a trace, layered the same
    /// way (`twin calibrate --from-trace FILE --deployment ... --out SECTION`).
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<String>,
    /// Serving engine whose measured kernel tables price the GPU's dense GEMMs,
    /// all-reduce, routed experts and GQA/MHA attention: `trtllm`, `vllm`, with a version as
    /// `trtllm@1.3.0rc20` (default: the shipped one), or a profile path from `twin
    /// calibrate --from-tables`; `twin`: twin's own kernel model (default: the
    /// scenario's `engine`, else `twin`). An engine or version without tables on the
    /// GPU (`sglang`; `vllm` on a100) keeps its scheduler and host terms and prices
    /// kernels by the nearest shipped tables (SGLang by vLLM's) or twin's own model,
    /// said in the cost model's line.
    #[arg(long, value_name = "ENGINE[@VERSION]")]
    pub engine: Option<String>,
    /// Price with physics alone: leave out the terms fitted to measured runs that
    /// otherwise correct an engine's steps (scenarios/runs/fitted.toml,
    /// docs/runs-corpus.md).
    #[arg(long)]
    pub physics_only: bool,
    /// Price with a GPU profile (`--profile`) or kernel-table path (`--engine PATH`)
    /// even when an operation of the steps costs more than 3x the reference price of
    /// the same GPU and shapes (the shipped tables, or twin's kernel model): without
    /// it such a profile is refused, naming the operation and the ratio.
    #[arg(long)]
    pub allow_slow_profile: bool,
}

impl PricingArgs {
    /// The flags as the request's pricing.
    pub fn pricing(&self) -> crate::Pricing {
        crate::Pricing {
            profile: self.profile.clone(),
            engine: self.engine.clone(),
            physics_only: self.physics_only,
            allow_slow_profile: self.allow_slow_profile,
        }
    }
}

impl SimulateArgs {
    /// The run these arguments ask for, typed: `--set` parsed and split once, `--cohort`
    /// as the first scenario override (a `--set fidelity.cohort` after it wins).
    pub fn request(&self) -> anyhow::Result<crate::RunRequest> {
        use crate::{Overrides, RunRequest, TraceSource};
        Ok(RunRequest {
            scenario: self.scenario.clone(),
            seed: self.seed,
            duration: self.duration,
            sets: Overrides::with_cohort(self.cohort, &self.set)?,
            pricing: self.pricing.pricing(),
            trace: self.trace.as_ref().map(|path| TraceSource {
                path: path.clone(),
                format: self.trace_format,
            }),
            bench: self.bench.clone(),
        })
    }
}
