//! Kernel launches of a step: CUDA graphs replayed, or kernels launched from the host
//! (`launch.*` of the cost parameters), where the host's time binds over the GPU's.

use super::{AnalyticCostModel, Variant};
use crate::cost::Phase;

/// A step's launches: what they add to its GPU time, the host's launching seconds that
/// may run ahead of the GPU, and the host's seconds the step waits for in full (among
/// the first).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Launched {
    pub exposed_s: f64,
    pub host_s: f64,
    pub serial_s: f64,
}

/// Passes through the layers of a step run serially (1) or as two micro-batches (2).
fn passes(two: bool) -> f64 {
    if two {
        2.0
    } else {
        1.0
    }
}

impl AnalyticCostModel {
    /// Kernel launches of the target model in one step.
    pub(super) fn kernels(&self, two_batch: bool) -> f64 {
        let per_layer: f64 = self
            .compiled
            .types
            .iter()
            .map(|t| t.count * self.layer_kernels(t))
            .sum();
        self.compiled.kernels_step + per_layer * passes(two_batch)
    }

    /// The launches of a step whose GPU time is `gpu_s`: the seconds they add to it (a
    /// graph's replay; or, launched from the host, what the host's launches outrun the
    /// GPU by and what the step waits on the host for in full), and the host's
    /// launching seconds that may run ahead of the GPU (0 where it replays CUDA graphs).
    pub(super) fn launches(
        &self,
        phase: Phase,
        gpu_s: f64,
        kernels: f64,
        passes: f64,
        tokens: f64,
    ) -> Launched {
        let l = &self.params.launch;
        match self.host_launch_s(phase, kernels, passes, tokens) {
            Some((host, serial)) => Launched {
                exposed_s: crate::cost::host_launch_exposed_s(host, serial, gpu_s, 0.0),
                host_s: host,
                serial_s: serial,
            },
            None => Launched {
                exposed_s: l.graph_s + kernels * l.graph_node_s,
                host_s: 0.0,
                serial_s: 0.0,
            },
        }
    }

    /// The host's seconds launching a step of `kernels` kernels in `passes` passes
    /// through the layers (two micro-batches: 2) with `tokens` on its busiest rank, or
    /// `None` where it replays CUDA graphs: as the layout says for its phase, bounded by
    /// the largest graph captured where the engine captures prefill and mixed steps too
    /// (`launch.graph_tokens`: vLLM's piecewise graphs). Launched, each kernel costs
    /// `eager_s` and each MoE layer of OpenAI's `triton_kernels` experts
    /// `triton_moe_s`, which may run ahead of the GPU; and each linear-attention layer
    /// `linear_attn_s`, which the step waits for in full (the second figure).
    fn host_launch_s(
        &self,
        phase: Phase,
        kernels: f64,
        passes: f64,
        tokens: f64,
    ) -> Option<(f64, f64)> {
        let l = &self.params.launch;
        let within = l.graph_tokens > 0.0 && tokens <= l.graph_tokens;
        let graphs = match phase {
            Phase::Decode => self.layout.decode_graphs && (l.graph_tokens <= 0.0 || within),
            Phase::Prefill => self.layout.prefill_graphs || within,
        };
        let triton = self.params.moe_kernel == Some(spec::kernel::MoeKernel::Triton);
        let moe = if triton {
            passes * self.compiled.moe_layers
        } else {
            0.0
        };
        let serial = passes * self.compiled.linear_layers * l.linear_attn_s;
        (!graphs).then_some((kernels * l.eager_s + moe * l.triton_moe_s, serial))
    }

    /// The launches of variant `v` whose GPU time is `gpu_s`.
    pub(super) fn launches_of(&self, phase: Phase, v: &Variant, gpu_s: f64) -> Launched {
        let two = v.two_batch;
        let tokens = v.local.tokens * passes(two);
        self.launches(phase, gpu_s, self.kernels(two), passes(two), tokens)
    }

    /// The launch seconds of a step run serially or as two micro-batches (`two`) whose
    /// GPU time is `gpu_s`, with `tokens` on its busiest rank.
    pub(super) fn launch_two(&self, phase: Phase, gpu_s: f64, two: bool, tokens: f64) -> f64 {
        self.launches(phase, gpu_s, self.kernels(two), passes(two), tokens)
            .exposed_s
    }
}
