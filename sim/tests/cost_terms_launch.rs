//! Kernel launches, each against a value derived by hand: CUDA graphs in decode, eager
//! launches from the host in prefill, graphs of prefill steps up to the largest one
//! captured, and the host time of OpenAI's `triton_kernels` experts. The GPU, model and
//! cost parameters are `terms`' (round numbers, ideal efficiencies).

mod terms;

use sim::cost::Op;
use terms::*;

/// The ideal terms with a graph of 10 us and 1 us a node, 1 ms a kernel launched from
/// the host, and graphs of prefill and mixed steps up to `graph_tokens` a rank.
fn launch_terms(graph_tokens: f64) -> sim::cost::CostParams {
    let mut p = ideal();
    p.launch.graph_s = 10e-6;
    p.launch.graph_node_s = 1e-6;
    p.launch.eager_s = 1e-3;
    p.launch.graph_tokens = graph_tokens;
    p
}

/// A step's launches, `host_s` on the host, outrun its GPU time by what they exceed it.
fn launched(s: &sim::cost::StepCost, host_s: f64) {
    close(s.op(Op::Launch), host_s - (s.step_s - s.op(Op::Launch)));
}

#[test]
fn launches_by_graph_or_eager() {
    // Kernels per layer: 6 element-wise and norm kernels + 2 projections + 2 for FP8
    // quantisation + 1 attention + 8 for the MoE FFN = 19; per step 5: 24 kernels.
    // CUDA graphs in decode: 10 us per graph + 24 x 1 us = 34 us.
    let c = cm(model(), 1, false, launch_terms(0.0));
    let s = decode(&c, 1, 0, 0);
    assert_eq!(s.kernels, 24.0);
    close(s.op(Op::Launch), 34e-6);
    // Eager prefill: 24 launches of 1 ms on the host outrun the GPU by 24 ms minus the
    // GPU's own time.
    launched(&prefill(&c, 10, 0), 24e-3);
}

#[test]
fn triton_experts_cost_the_host_a_layer_outside_graphs() {
    // The unit model's one MoE layer with OpenAI's triton_kernels experts: a step
    // launched from the host costs it 24 kernels x 1 us + 1 MoE layer x 5 ms = 5.024 ms
    // of host time, which binds over the GPU's microseconds.
    let mut p = ideal();
    p.launch.eager_s = 1e-6;
    p.launch.triton_moe_s = 5e-3;
    p.moe_kernel = Some(spec::kernel::MoeKernel::Triton);
    let c = cm(model(), 1, false, p.clone());
    let s = prefill(&c, 10, 0);
    let gpu = s.step_s - s.op(Op::Launch);
    launched(&s, 5.024e-3);
    // Decode replays CUDA graphs (0 s a graph and a node in the ideal terms): no host.
    assert_eq!(decode(&c, 1, 0, 0).op(Op::Launch), 0.0);
    // The engine's usual kernel: 24 us of launches, under the GPU's time.
    p.moe_kernel = None;
    let c = cm(model(), 1, false, p.clone());
    close(prefill(&c, 10, 0).op(Op::Launch), (24e-6 - gpu).max(0.0));
}

#[test]
fn steps_within_the_largest_graph_replay_it_larger_ones_are_launched() {
    // Graphs up to 16 tokens a rank (vLLM's piecewise graphs): a 10-token prefill
    // replays one (10 us + 24 x 1 us = 34 us), a 20-token one launches 24 kernels of
    // 1 ms from the host; a decode step of 20 requests too.
    let c = cm(model(), 1, false, launch_terms(16.0));
    close(prefill(&c, 10, 0).op(Op::Launch), 34e-6);
    launched(&prefill(&c, 20, 0), 24e-3);
    close(decode(&c, 16, 0, 0).op(Op::Launch), 34e-6);
    launched(&decode(&c, 20, 0, 0), 24e-3);
}
