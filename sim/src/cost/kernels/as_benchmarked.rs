//! One kernel priced as its public micro-benchmark runs it, with the benchmark's own
//! accounting of flops and bytes, so a prediction compares with the published figure:
//! DeepGEMM (`2 M N K` flops, `M K + K N + 2 M N` bytes per group), DeepEP (normal:
//! logical RDMA bytes per (token, node) pair, or NVLink bytes received per rank;
//! low-latency: bytes per routed expert), TensorRT-LLM's one-sided all-to-all (as the
//! low-latency kernels), FlashMLA (`s_q * sum(s_k) * h_q * (d + d_v) * 2` flops) and
//! cuDNN's causal SDPA (unmasked pairs only), NCCL's all-reduce (bus bytes, `2 (n - 1)
//! / n` of the buffer). `twin kernel` prints these.

use super::a2a::{self, Links, Routing};
use super::attention::{self, AttnKernel};
use super::gemm::{self, Gemm, GemmKind, KernelDevice, KernelTime};
use crate::cost::{CostParams, Phase};
use spec::dtype::Dtype;
use spec::hardware::Hardware;

/// What a benchmark reports.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Benchmarked {
    pub time_s: f64,
    pub flops: f64,
    /// Bytes by the benchmark's own rule (logical where the source counts so).
    pub bytes: f64,
    pub kernel: KernelTime,
}

impl Benchmarked {
    pub fn tflops(&self) -> f64 {
        if self.time_s > 0.0 {
            self.flops / self.time_s / 1e12
        } else {
            0.0
        }
    }
    pub fn gb_s(&self) -> f64 {
        if self.time_s > 0.0 {
            self.bytes / self.time_s / 1e9
        } else {
            0.0
        }
    }
}

#[allow(clippy::too_many_arguments)]
/// A DeepGEMM-style GEMM: `groups` x (`m` x `k`) by (`k` x `n`), operands in `dtype`
/// (FP8 with 1x128 / 128x128 FP32 scales), BF16 output.
pub fn gemm(
    hw: &Hardware,
    p: &CostParams,
    kind: GemmKind,
    groups: f64,
    m: f64,
    n: f64,
    k: f64,
    dtype: Dtype,
) -> Benchmarked {
    let scale = if dtype.bytes() <= 1.0 {
        4.0 / (128.0 * 128.0)
    } else {
        0.0
    };
    let g = Gemm {
        kind,
        groups,
        m,
        n,
        k,
        a_bytes: dtype.bytes(),
        b_bytes: dtype.bytes() + scale,
        out_bytes: 2.0,
        rate: hw.tensor.flops_per_s(dtype),
        rows_vary: false,
    };
    let rate = if kind == GemmKind::Dense {
        &p.gemm
    } else {
        &p.moe
    };
    let mut kt = gemm::time(
        &g,
        &KernelDevice::of(hw),
        rate,
        &p.tile,
        &gemm::SoftMax::new(p.tile.overlap_p),
    );
    // The benchmarks' narrow formats carry 128x128 block scales (DeepGEMM's).
    let block = if dtype.bytes() <= 1.0 { 128 } else { 0 };
    let format = crate::cost::tables::format::Format::of_gemm(dtype, dtype, block);
    let table = format.and_then(|f| p.tables.as_ref()?.price_gemm(hw, f, &g));
    if let Some(s) = table {
        // The measured tables' price has no compute and memory parts of its own.
        (kt.s, kt.compute_s, kt.memory_s) = (s * p.table_draw.gemm, 0.0, 0.0);
    }
    Benchmarked {
        time_s: kt.s,
        flops: kt.flops,
        // DeepGEMM's rule: one byte per FP8 operand element, two per output element.
        bytes: groups * (m * k + k * n + 2.0 * m * n),
        kernel: kt,
    }
}

/// Which all-to-all kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommKernel {
    Normal,
    LowLatency,
}

/// An expert-parallel dispatch or combine benchmark.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct A2a {
    pub kernel: CommKernel,
    pub combine: bool,
    pub ep: f64,
    /// Tokens per rank.
    pub tokens: f64,
    pub hidden: f64,
    pub routing: Routing,
    /// Element type of the payload (dispatch FP8 carries FP32 scales per 128).
    pub dtype: Dtype,
    /// Metadata bytes per copy (DeepEP low-latency dispatch: 16).
    pub meta: f64,
}

/// Prices `b` and counts its bytes as the benchmark does: normal kernels across NVLink
/// domains report logical RDMA bytes (one copy per token and domain reached, own
/// domain included), inside one domain NVLink bytes received per rank (own copies
/// included); low-latency kernels count one copy per routed expert.
pub fn a2a(hw: &Hardware, p: &CostParams, b: &A2a) -> Benchmarked {
    let copy = a2a::copy_bytes(b.hidden, b.dtype.bytes(), b.meta);
    let domain = hw.nvlink_domain_gpus.max(1) as f64;
    let links = Links {
        nvlink_bytes_per_s: hw.nvlink.bytes_per_s,
        nic_bytes_per_s: hw.scaleout.bytes_per_s,
    };
    let fan = a2a::fanout(&b.routing, b.ep, domain);
    let (leg, logical) = match b.kernel {
        CommKernel::Normal => {
            let leg = a2a::normal(b.tokens, copy, &fan, b.ep, &links, p, 1.0);
            let logical = if fan.domains > 1.0 || b.ep > domain {
                b.tokens * fan.domains * copy
            } else {
                b.tokens * fan.ranks * copy
            };
            (leg, logical)
        }
        CommKernel::LowLatency => {
            let fixed = if b.combine {
                p.ll.combine_s
            } else {
                p.ll.dispatch_s
            };
            let k = b.routing.top_k;
            let roof = gemm::SoftMax::new(p.ll.overlap_p);
            let send = a2a::LowLatencySend {
                tokens: b.tokens,
                top_k: k,
                bytes: copy,
                fixed_s: fixed,
                recv_skew: 1.0,
            };
            let leg = a2a::low_latency(&send, b.ep, domain, &links, p, &roof);
            (leg, b.tokens * k * copy)
        }
    };
    Benchmarked {
        time_s: leg.s,
        flops: 0.0,
        bytes: logical,
        kernel: KernelTime {
            s: leg.s,
            memory_s: leg.nvlink_s.max(leg.rdma_s),
            bound: crate::cost::Bound::Link,
            ..Default::default()
        },
    }
}

/// An all-reduce of `bytes` over `gpus` GPUs, with NCCL's bus bytes (`gb_s` is its
/// busbw).
/// `ring`: NCCL's ring algorithm (a latency per step) instead of an engine's one- or
/// two-shot kernel.
pub fn allreduce(hw: &Hardware, p: &CostParams, gpus: f64, bytes: f64, ring: bool) -> Benchmarked {
    let step = if ring { p.allreduce_ring_step_s } else { 0.0 };
    let s = match p.tables.as_ref().filter(|_| !ring) {
        Some(t) => t.price_allreduce(hw, gpus, bytes).map_or_else(
            || super::allreduce::ring(bytes, gpus, hw, &p.allreduce, step),
            |s| s * p.table_draw.allreduce,
        ),
        None => super::allreduce::ring(bytes, gpus, hw, &p.allreduce, step),
    };
    Benchmarked {
        time_s: s,
        flops: 0.0,
        bytes: super::allreduce::bus_bytes(bytes, gpus),
        kernel: KernelTime {
            s,
            memory_s: s - p.allreduce.fixed_s,
            bound: if s - p.allreduce.fixed_s > p.allreduce.fixed_s {
                crate::cost::Bound::Link
            } else {
                crate::cost::Bound::Latency
            },
            ..Default::default()
        },
    }
}

/// An attention kernel benchmark.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attn {
    pub phase: Phase,
    pub kernel: AttnKernel,
    pub batch: f64,
    pub heads: f64,
    /// Query tokens per sequence (decode: 1 + MTP; prefill: the sequence).
    pub q_tokens: f64,
    /// Keys per sequence (decode: context; prefill: the sequence, causal).
    pub context: f64,
    /// Sparse: entries each query attends to.
    pub top_k: f64,
    pub d_qk: f64,
    pub d_v: f64,
    /// Bytes of one cached KV entry (decode) or one key+value row per head (prefill).
    pub kv_bytes: f64,
    /// Attention arithmetic.
    pub dtype: Dtype,
}

/// Prices an attention benchmark with FlashMLA's (decode, sparse prefill) or cuDNN's
/// (causal dense prefill) accounting.
pub fn attention(hw: &Hardware, p: &CostParams, a: &Attn) -> Benchmarked {
    let hq = a.heads;
    let (pairs_per_seq, kv_bytes) = match (a.phase, a.kernel) {
        (Phase::Decode, AttnKernel::Dense) => (a.q_tokens * a.context, a.context * a.kv_bytes),
        (Phase::Decode, AttnKernel::Sparse) => (
            a.q_tokens * a.top_k,
            (a.top_k * a.q_tokens).min(a.context) * a.kv_bytes,
        ),
        (Phase::Prefill, AttnKernel::Sparse) => (a.q_tokens * a.top_k, a.context * a.kv_bytes),
        // Causal: query i sees keys 0..=i of the sequence.
        (Phase::Prefill, AttnKernel::Dense) => (
            a.q_tokens * (a.q_tokens + 1.0) / 2.0,
            a.context * a.kv_bytes * hq,
        ),
        // No benchmark times a recurrent mixer (`twin kernel` offers none): its state
        // (`kv_bytes`) read and written once.
        (_, AttnKernel::Recurrent) => (0.0, 2.0 * a.kv_bytes),
    };
    let flops = a.batch * 2.0 * hq * pairs_per_seq * (a.d_qk + a.d_v);
    // Queries in and outputs out in BF16.
    let qo = a.batch * a.q_tokens * hq * (a.d_qk + a.d_v) * 2.0;
    let bytes = a.batch * kv_bytes + qo;
    let work = attention::AttnWork {
        kernel: a.kernel,
        phase: a.phase,
        bytes,
        flops,
        seq_tokens: a.q_tokens,
    };
    let kt = attention::time(p, &work, hw.hbm.bytes_per_s, hw.tensor.flops_per_s(a.dtype));
    let time_s = kt.s + attention::rate(p, a.kernel, a.phase).fixed_s;
    Benchmarked {
        time_s,
        flops,
        bytes,
        kernel: kt,
    }
}
