//! The numbers the analytic cost model multiplies datasheets by. Defaults are documented
//! one by one; hardware files replace them with values fitted to public kernel
//! benchmarks (`scenarios/published/kernels-public.csv`) or to a deployment's published
//! figures, and a calibration profile replaces them with values measured on a real
//! device (as fractions of that device's own measured peaks, so they carry to other
//! hardware through datasheet ratios).

use super::insitu::InSitu;
use serde::{Deserialize, Serialize};

/// How well one operation uses the hardware, and what it costs regardless of size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OpRate {
    /// Achieved fraction of the datasheet memory bandwidth (HBM, or the host link for
    /// host-resident data, or the link for communication).
    pub mem_eff: f64,
    /// Achieved fraction of the datasheet tensor throughput for the operation's dtype.
    pub compute_eff: f64,
    /// Fixed cost per launch of the operation, seconds.
    pub fixed_s: f64,
}

impl OpRate {
    pub const fn new(mem_eff: f64, compute_eff: f64, fixed_s: f64) -> Self {
        OpRate {
            mem_eff,
            compute_eff,
            fixed_s,
        }
    }
}

/// The tile model of a GEMM kernel (see `kernels::gemm`): how one output tile's time
/// depends on its shape, shared by dense and grouped GEMMs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TileParams {
    /// Bytes one SM loads into shared memory per flop of its dense FP8 tensor rate:
    /// the operand-load bandwidth per SM as a fraction of its arithmetic, which binds
    /// thin tiles (assumed to carry across architectures: the memory system keeps the
    /// tensor cores fed at the same balance).
    pub load_bytes_per_flop: f64,
    /// The epilogue (writing the tile) costs as much as this many extra K elements of
    /// the tile's main loop.
    pub epilogue_k: f64,
    /// Tensor throughput of a 64-row tile (one math warpgroup) against a full one.
    pub small_tile_eff: f64,
    /// Sharpness of the soft roofline `(t_compute^p + t_memory^p)^(1/p)`: compute and
    /// memory overlap imperfectly (p = 1: they add; p -> infinity: the larger binds).
    pub overlap_p: f64,
}

/// Low-latency (decode) all-to-all kernels: one copy per routed expert, RDMA to other
/// NVLink domains, NVLink inside one (DeepEP low-latency, TensorRT-LLM one-sided).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LowLatency {
    /// Fraction of the NVLink bandwidth the NVLink leg reaches.
    pub nvlink_eff: f64,
    /// Fraction of the NIC bandwidth the RDMA leg reaches.
    pub rdma_eff: f64,
    /// Fixed latency of one dispatch / one combine, seconds.
    pub dispatch_s: f64,
    pub combine_s: f64,
    /// Extra latency per peer rank (signalling that grows with the group), seconds.
    pub per_peer_s: f64,
    /// Sharpness of the soft maximum of latency and transfer time (1: they add).
    pub overlap_p: f64,
}

/// Kernel launches: CUDA graphs replay a step's kernels with a small gap each; eager
/// launches cost host time per kernel, which binds when kernels are short.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// Host time per eager kernel launch, seconds.
    pub eager_s: f64,
    /// GPU-side gap per kernel inside a CUDA graph, seconds.
    pub graph_node_s: f64,
    /// Fixed cost of launching one graph, seconds.
    pub graph_s: f64,
    /// Host time per MoE layer of OpenAI's `triton_kernels` experts (routing and
    /// `matmul_ogs` prepared and launched from Python) in a step launched from the host,
    /// seconds: where the deployment runs them (`moe_kernel` Triton, the engines' usual
    /// kernel for MXFP4 experts on Hopper). See [`TRITON_MOE_HOST_S`].
    #[serde(default = "triton_moe_host_s")]
    pub triton_moe_s: f64,
    /// Host time per linear-attention layer (gated DeltaNet: its chunked Triton
    /// kernels prepared and launched from Python) in a step launched from the host,
    /// seconds, which the step waits for in full: the layer's kernels wait on the host
    /// (it reads their chunk layout back), so it adds to the GPU time instead of
    /// running ahead of it. See [`LINEAR_ATTN_HOST_S`].
    #[serde(default = "linear_attn_host_s")]
    pub linear_attn_s: f64,
    /// Steps of at most this many tokens a rank replay CUDA graphs, prefill and mixed
    /// steps too (vLLM's piecewise graphs up to its largest capture size); larger ones,
    /// decode steps too, are launched from the host. 0: decode steps replay graphs and
    /// prefill steps are launched from the host, at any size (the layout's flags).
    #[serde(default)]
    pub graph_tokens: f64,
}

fn triton_moe_host_s() -> f64 {
    TRITON_MOE_HOST_S
}

fn linear_attn_host_s() -> f64 {
    LINEAR_ATTN_HOST_S
}

/// Host time per MoE layer of the `triton_kernels` experts in a host-launched step
/// (`Launch::triton_moe_s`). Fitted: the TensorRT-LLM gpt-oss-120b records of the
/// training corpus on H200 (97 records, TRITON its MoE backend on Hopper), TTFT and TPOT
/// over a grid of values (docs/measured/runs-aic-2026-12-05.md); checked on vLLM's
/// records of the same experts on Hopper without Marlin, which no fit saw.
pub const TRITON_MOE_HOST_S: f64 = 2.0e-3;

/// Host time per linear-attention (gated DeltaNet) layer in a host-launched step, added
/// to the step (`Launch::linear_attn_s`). Fitted: SGLang's published time to first token
/// of Qwen3-Next-80B-A3B on two H200 (TP2) with prefill launched eagerly, one request at
/// a time, 1,024 / 2,048 / 4,096-token prompts: 99.17 / 101.52 / 127.20 ms (sglang PR
/// #13081, "without piecewise-cudagraph"), less twin's front end and prefill step of the
/// same, over its 36 linear-attention layers (the mean of the three; their spread +-6 ms
/// a step). No corpus record was fitted; checked on the corpus's Qwen3.5-397B-A17B runs
/// of SGLang (docs/measured/runs-aic-2026-12-05.md).
pub const LINEAR_ATTN_HOST_S: f64 = 1.63e-3;

/// Efficiency factors and fixed costs of every operation the cost model prices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostParams {
    /// Where these numbers come from ("analytic defaults", a profile path and hash).
    pub source: String,
    /// Routed-expert grouped GEMMs: mem_eff of HBM, compute_eff the tile model's peak
    /// fraction, fixed_s per launch.
    pub moe: OpRate,
    /// Dense GEMMs (projections, shared experts, dense FFN, LM head), the same way.
    pub gemm: OpRate,
    /// The tile model shared by dense and grouped GEMMs.
    pub tile: TileParams,
    /// Dense attention at decode (FlashMLA-class, absorbed MLA over the KV cache).
    pub attention: OpRate,
    /// Sparse (top-k) attention at decode, over the selected entries.
    pub attention_sparse: OpRate,
    /// Dense causal attention at prefill.
    pub attention_prefill: OpRate,
    /// Sparse attention at prefill.
    pub attention_sparse_prefill: OpRate,
    /// Causal prefill kernels waste work on diagonal tiles: the efficiency at a
    /// sequence of `s` tokens is `compute_eff * s / (s + prefill_diag_tokens)`.
    pub prefill_diag_tokens: f64,
    /// Sparse-attention indexer.
    pub indexer: OpRate,
    /// Recurrent mixers at decode (gated DeltaNet, Mamba-2): each request's state read
    /// and written back once per step, a few products per head.
    #[serde(default = "recurrent_default")]
    pub recurrent: OpRate,
    /// Recurrent mixers at prefill: the chunked algorithms (flash-linear-attention's
    /// chunked gated delta rule, Mamba-2's SSD).
    #[serde(default = "recurrent_prefill_default")]
    pub recurrent_prefill: OpRate,
    /// Engram gathers (mem_eff applies to the host link or HBM bandwidth).
    pub gather: OpRate,
    /// Normal (high-throughput, prefill) all-to-all: mem_eff of the NVLink leg,
    /// fixed_s per dispatch or combine.
    pub comm: OpRate,
    /// Fraction of the NIC bandwidth the normal kernels' RDMA leg reaches.
    pub comm_rdma_eff: f64,
    /// The DeepEP release priced, as a date `YYYYMMDD`: before its 2025-04-22 update
    /// (IBGDA, one QP per channel) the normal kernels' RDMA leg reaches
    /// `comm_rdma_eff_initial` instead (intranode speeds did not change).
    #[serde(default = "deepep_update")]
    pub deepep_release: f64,
    #[serde(default = "rdma_initial")]
    pub comm_rdma_eff_initial: f64,
    /// The FlashMLA release priced for dense decode attention, as a date `YYYYMMDD`:
    /// before its 2025-04-22 "performance update" the kernel reached 580 TFLOP/s on
    /// compute-bound work (its README), `attention_compute_eff_initial` of the tensor
    /// peak, instead of `attention.compute_eff` (660 TFLOP/s after). Its memory-bound
    /// figure (3000 GB/s) did not change.
    #[serde(default = "flashmla_update")]
    pub flashmla_release: f64,
    #[serde(default = "attention_initial")]
    pub attention_compute_eff_initial: f64,
    /// SMs the normal all-to-all kernels occupy while they run (taken from compute when
    /// they overlap it).
    pub comm_sms: f64,
    /// Low-latency (decode) all-to-all.
    pub ll: LowLatency,
    /// How kernels behave inside a running deployment beside their benchmarks
    /// (`[cost.in_situ]`; default: isolated-kernel prices).
    #[serde(default = "InSitu::isolated")]
    pub in_situ: InSitu,
    /// Tensor-parallel all-reduce of a layer's partial outputs: mem_eff of the NVLink
    /// (and NIC) bandwidth over the ring's traffic, fixed_s the latency of one
    /// all-reduce; compute_eff unused.
    #[serde(default = "allreduce_default")]
    pub allreduce: OpRate,
    /// Latency of one step of NCCL's ring all-reduce (its large benchmarks); the
    /// engines' one- and two-shot all-reduces do not pay it.
    #[serde(default)]
    pub allreduce_ring_step_s: f64,
    /// Element-wise and normalisation traffic (norms, RoPE, activations, quantisation,
    /// gating, mHC): mem_eff of HBM bandwidth; fixed_s unused (launches are counted).
    pub elementwise: OpRate,
    pub launch: Launch,
    /// Fixed cost per step (scheduling, sampling, host synchronisation), per phase.
    pub step_fixed_decode_s: f64,
    pub step_fixed_prefill_s: f64,
    /// Host work per request and how much of it hides under the GPU (`super::host`).
    #[serde(default)]
    pub host: super::host::Host,
    /// GPU memory left for the KV cache, by the serving engine's arithmetic
    /// (`super::memory`; default: twin's own).
    #[serde(default)]
    pub memory: super::memory::KvMemory,
    /// How sure these numbers are: each kernel class's price spread (a hardware file's
    /// `[cost.spread]`); empty: no spread known, no band.
    #[serde(default, skip_serializing_if = "super::spread::Spread::is_unknown")]
    pub spread: super::spread::Spread,
    /// Measured kernel tables of a serving engine on this GPU (`--engine`): where they
    /// cover an op (dense GEMMs by format, the engine's all-reduce), they price it
    /// instead of the parameters above.
    #[serde(skip)]
    pub tables: Option<std::sync::Arc<super::tables::KernelTables>>,
    /// A band's draw of the tables' prices (`super::spread`): the factor each family's
    /// tabled prices are multiplied by; 1 outside a band.
    #[serde(skip)]
    pub table_draw: super::tables::TableDraw,
    /// The routed-expert kernel the deployment runs instead of the engine's usual one
    /// for the experts' format (a scenario's `moe_kernel`): where the tables time it,
    /// its arithmetic rate bounds the experts' price from below.
    #[serde(skip)]
    pub moe_kernel: Option<spec::kernel::MoeKernel>,
    /// The parameters a user fixed (`--set cost.KEY=VALUE`, [`CostParams::pin`]), in
    /// order: [`CostParams::repin`] puts them back over what an engine's or a
    /// scenario's defaults put in after them, so a user's value outranks every default.
    #[serde(skip)]
    pub pinned: Vec<(String, f64)>,
}

impl Default for CostParams {
    /// Analytic defaults. Each is a first-order figure from public kernel benchmarks
    /// (`shared/reference/kernel-benchmarks-public.md`); hardware files replace most of
    /// them with values fitted to the kernel table:
    /// - GEMM tile model (gemm, moe, tile): DeepGEMM's H800 FP8 tables reach 0.78 of
    ///   dense peak at the best shape and 0.80 of HBM bandwidth at M=64; the tile
    ///   constants are of that order (fitted per architecture in the hardware files).
    /// - attention 0.90 / 0.67: FlashMLA dense decode, 3000 GB/s of 3350 and 660 of
    ///   989 TFLOP/s on H800. attention_sparse 0.90 / 0.41: FlashMLA sparse FP8 decode,
    ///   410 TFLOP/s. attention_prefill 0.62: cuDNN DSV3 prefill attention on H200,
    ///   612-640 TFLOP/s of 989. attention_sparse_prefill 0.65: FlashMLA sparse
    ///   prefill, 640 TFLOP/s on H800.
    /// - indexer 0.85 / 0.60: DeepGEMM's FP8 MQA-logits kernels, no published figure;
    ///   assumed slightly below attention.
    /// - recurrent 0.80 / 0.20, recurrent_prefill 0.80 / 0.30: no kernel benchmark of
    ///   flash-linear-attention's or mamba_ssm's inference kernels gives a fraction of
    ///   peak; assumed. A decode step streams each request's state through HBM once
    ///   each way, as element-wise kernels stream theirs (0.85 of HBM there), slightly
    ///   below it for the state's strided per-head tiles; the per-head products are
    ///   thin (one token against a 128 x 128 state), so their arithmetic runs far from
    ///   the tensor peak. The chunked prefill algorithms run their products on tensor
    ///   cores, but as several kernels over 64- to 256-token chunks with 64- to
    ///   128-wide heads: well below dense attention's 0.62 (the Mamba-2 paper puts SSD
    ///   at about the speed of FlashAttention-2 at 2K tokens while doing fewer flops).
    /// - gather.mem_eff 0.40: random 256-byte rows reach well under half of a link's
    ///   streaming bandwidth; assumed.
    /// - comm 0.65 of NVLink, comm_rdma_eff 0.87 of the NIC, comm_sms 20: DeepEP normal
    ///   kernels on H800 (153-158 GB/s logical intranode, 43-58 GB/s internode; 20 SMs,
    ///   the library default and the V3 report's figure).
    /// - ll: DeepEP low-latency kernels on H800: 0.85 of the NIC, 24 us per dispatch
    ///   and 18 us per combine.
    /// - allreduce 0.80 of NVLink, 5 us per all-reduce (the hardware files fit both to
    ///   NCCL rows of the kernel table, and the ring step to its 72-rank rows): tuned
    ///   NCCL small-message
    ///   all-reduce takes 2.3 us on 8 H200 and 3 us on 8 B200 (NVIDIA/nccl issue
    ///   #1940) and 5.2-8 us on 4 GB200 (nccl-tests issue #333);
    ///   an engine's all-reduce inside a CUDA graph sits between (assumed 5 us). Large
    ///   all-reduces reach 0.93 of NVLink on an NVL72 rack (busbw 834 of 900 GB/s at
    ///   4 GiB); the serving sizes (0.1-10 MB) reach less (assumed 0.80).
    /// - elementwise.mem_eff 0.85: bandwidth-bound kernels reach 0.80-0.90 of HBM
    ///   (DeepGEMM M=64 rows, FlashMLA memory-bound decode).
    /// - launch: 4.7 us host time per eager kernel (Triton launch on GB200), 0.58 us per
    ///   graph node and 15 us per graph (CUDA-graph replay probe).
    /// - step_fixed_*: scheduling, sampling and synchronisation per engine step; no
    ///   public figure, assumed (0.3 ms decode, 1 ms prefill).
    fn default() -> Self {
        CostParams {
            source: "analytic defaults".to_string(),
            moe: OpRate::new(1.0, 0.75, 1.5e-6),
            gemm: OpRate::new(1.0, 0.75, 1.5e-6),
            tile: TileParams {
                load_bytes_per_flop: 0.0075,
                epilogue_k: 260.0,
                small_tile_eff: 0.66,
                overlap_p: 1.5,
            },
            attention: OpRate::new(0.90, 0.67, 3e-6),
            attention_sparse: OpRate::new(0.90, 0.41, 3e-6),
            attention_prefill: OpRate::new(0.90, 0.62, 3e-6),
            attention_sparse_prefill: OpRate::new(0.90, 0.65, 3e-6),
            prefill_diag_tokens: 0.0,
            indexer: OpRate::new(0.85, 0.60, 3e-6),
            recurrent: recurrent_default(),
            recurrent_prefill: recurrent_prefill_default(),
            gather: OpRate::new(0.40, 0.0, 2e-6),
            comm: OpRate::new(0.65, 0.0, 0.0),
            comm_rdma_eff: 0.87,
            deepep_release: deepep_update(),
            comm_rdma_eff_initial: rdma_initial(),
            flashmla_release: flashmla_update(),
            attention_compute_eff_initial: attention_initial(),
            comm_sms: 20.0,
            ll: LowLatency {
                nvlink_eff: 0.65,
                rdma_eff: 0.85,
                dispatch_s: 24e-6,
                combine_s: 18e-6,
                per_peer_s: 0.0,
                overlap_p: 1.0,
            },
            in_situ: InSitu::isolated(),
            allreduce: allreduce_default(),
            allreduce_ring_step_s: 4e-6,
            elementwise: OpRate::new(0.85, 0.0, 0.0),
            launch: Launch {
                eager_s: 4.7e-6,
                graph_node_s: 0.58e-6,
                graph_s: 15e-6,
                triton_moe_s: TRITON_MOE_HOST_S,
                linear_attn_s: LINEAR_ATTN_HOST_S,
                graph_tokens: 0.0,
            },
            step_fixed_decode_s: 300e-6,
            step_fixed_prefill_s: 1e-3,
            host: super::host::Host::default(),
            memory: super::memory::KvMemory::default(),
            spread: super::spread::Spread::default(),
            tables: None,
            table_draw: Default::default(),
            moe_kernel: None,
            pinned: Vec::new(),
        }
    }
}

/// DeepEP's 2025-04-22 update, the release the kernel table's DeepEP rows time.
pub const DEEPEP_UPDATE: f64 = 20250422.0;

fn deepep_update() -> f64 {
    DEEPEP_UPDATE
}

/// The initial release's EP32 rows (44/47 GB/s) against the update's (58/57) put it at
/// about 0.78 of `comm_rdma_eff`'s 0.87; the hardware files fit it to those rows.
fn rdma_initial() -> f64 {
    0.68
}

/// FlashMLA's 2025-04-22 performance update, the release the kernel table's dense
/// decode rows time.
pub const FLASHMLA_UPDATE: f64 = 20250422.0;

fn flashmla_update() -> f64 {
    FLASHMLA_UPDATE
}

/// 580 against the update's 660 TFLOP/s on H800 (FlashMLA README) puts the initial
/// release at about 0.88 of `attention.compute_eff`'s 0.67; the hardware files fit it to
/// that row.
fn attention_initial() -> f64 {
    0.59
}

impl CostParams {
    /// Dense decode attention's rates for the FlashMLA release priced.
    #[inline]
    pub fn dense_decode_attention(&self) -> OpRate {
        let mut r = self.attention;
        if self.flashmla_release < FLASHMLA_UPDATE {
            r.compute_eff = self.attention_compute_eff_initial;
        }
        r
    }

    /// The RDMA efficiency of the normal kernels of the release priced.
    #[inline]
    pub fn normal_rdma_eff(&self) -> f64 {
        if self.deepep_release < DEEPEP_UPDATE {
            self.comm_rdma_eff_initial
        } else {
            self.comm_rdma_eff
        }
    }
}

fn recurrent_default() -> OpRate {
    OpRate::new(0.80, 0.20, 3e-6)
}

fn recurrent_prefill_default() -> OpRate {
    OpRate::new(0.80, 0.30, 3e-6)
}

fn allreduce_default() -> OpRate {
    OpRate::new(0.80, 1.0, 5e-6)
}

/// What kind of value a key holds, for range checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A fraction in (0, 1].
    Fraction,
    /// Seconds in [0, 1).
    Seconds,
    /// A positive number (rates, exponents, counts).
    Positive,
    /// A number >= 0.
    NonNegative,
    /// A share in [0, 1].
    Share,
}

impl CostParams {
    /// Every key `set` accepts.
    pub const KEYS: [&'static str; 84] = [
        "moe.mem_eff",
        "moe.compute_eff",
        "moe.fixed_s",
        "gemm.mem_eff",
        "gemm.compute_eff",
        "gemm.fixed_s",
        "tile.load_bytes_per_flop",
        "tile.epilogue_k",
        "tile.small_tile_eff",
        "tile.overlap_p",
        "attention.mem_eff",
        "attention.compute_eff",
        "attention.fixed_s",
        "attention_sparse.mem_eff",
        "attention_sparse.compute_eff",
        "attention_sparse.fixed_s",
        "attention_prefill.mem_eff",
        "attention_prefill.compute_eff",
        "attention_prefill.fixed_s",
        "attention_sparse_prefill.mem_eff",
        "attention_sparse_prefill.compute_eff",
        "attention_sparse_prefill.fixed_s",
        "prefill_diag_tokens",
        "indexer.mem_eff",
        "indexer.compute_eff",
        "indexer.fixed_s",
        "recurrent.mem_eff",
        "recurrent.compute_eff",
        "recurrent.fixed_s",
        "recurrent_prefill.mem_eff",
        "recurrent_prefill.compute_eff",
        "recurrent_prefill.fixed_s",
        "gather.mem_eff",
        "gather.compute_eff",
        "gather.fixed_s",
        "comm.mem_eff",
        "comm.compute_eff",
        "comm.fixed_s",
        "comm_rdma_eff",
        "deepep_release",
        "comm_rdma_eff_initial",
        "flashmla_release",
        "attention_compute_eff_initial",
        "comm_sms",
        "ll.nvlink_eff",
        "ll.rdma_eff",
        "ll.dispatch_s",
        "ll.combine_s",
        "ll.per_peer_s",
        "ll.overlap_p",
        "allreduce.mem_eff",
        "allreduce.compute_eff",
        "allreduce.fixed_s",
        "allreduce_ring_step_s",
        "elementwise.mem_eff",
        "elementwise.compute_eff",
        "elementwise.fixed_s",
        "launch.eager_s",
        "launch.graph_node_s",
        "launch.graph_s",
        "launch.triton_moe_s",
        "launch.linear_attn_s",
        "launch.graph_tokens",
        "step_fixed_decode_s",
        "step_fixed_prefill_s",
        "host.per_request_s",
        "host.overlap",
        "host.gap_s",
        "in_situ.sm_hold",
        "in_situ.kernel_floor_s",
        "in_situ.tp_floor",
        "in_situ.barrier_frac",
        "in_situ.ll_dispatch_s",
        "in_situ.ll_combine_s",
        "in_situ.dispatch",
        "in_situ.combine",
        "in_situ.prefill.moe",
        "in_situ.prefill.attention",
        "in_situ.prefill.gemm",
        "in_situ.prefill.elementwise",
        "in_situ.decode.moe",
        "in_situ.decode.attention",
        "in_situ.decode.gemm",
        "in_situ.decode.elementwise",
    ];

    fn slot(&mut self, key: &str) -> Option<(&mut f64, Kind)> {
        use Kind::*;
        let (group, field) = match key.split_once('.') {
            Some((g, f)) => (g, Some(f)),
            None => (key, None),
        };
        let Some(f) = field else {
            return self.top_slot(group);
        };
        match group {
            "host" => self.host_slot(f),
            "in_situ" => self
                .in_situ
                .slot(f)
                .map(|(v, share)| (v, if share { Share } else { NonNegative })),
            "tile" => self.tile_slot(f),
            "ll" => self.ll_slot(f),
            "launch" => self.launch_slot(f),
            _ => rate_slot(self.rate_group(group)?, f),
        }
    }

    /// The slot of an undotted key (a parameter outside every group).
    fn top_slot(&mut self, key: &str) -> Option<(&mut f64, Kind)> {
        use Kind::*;
        match key {
            "prefill_diag_tokens" => Some((&mut self.prefill_diag_tokens, NonNegative)),
            "comm_rdma_eff" => Some((&mut self.comm_rdma_eff, Fraction)),
            "comm_rdma_eff_initial" => Some((&mut self.comm_rdma_eff_initial, Fraction)),
            "deepep_release" => Some((&mut self.deepep_release, Positive)),
            "flashmla_release" => Some((&mut self.flashmla_release, Positive)),
            "attention_compute_eff_initial" => {
                Some((&mut self.attention_compute_eff_initial, Fraction))
            }
            "comm_sms" => Some((&mut self.comm_sms, NonNegative)),
            "allreduce_ring_step_s" => Some((&mut self.allreduce_ring_step_s, Seconds)),
            "step_fixed_decode_s" => Some((&mut self.step_fixed_decode_s, Seconds)),
            "step_fixed_prefill_s" => Some((&mut self.step_fixed_prefill_s, Seconds)),
            _ => None,
        }
    }

    /// The slot of a `host.` key, by the part after the dot.
    fn host_slot(&mut self, f: &str) -> Option<(&mut f64, Kind)> {
        use Kind::*;
        let h = &mut self.host;
        match f {
            "per_request_s" => Some((&mut h.per_request_s, Seconds)),
            "overlap" => Some((&mut h.overlap, Share)),
            "gap_s" => Some((&mut h.gap_s, Seconds)),
            _ => None,
        }
    }

    /// The slot of a `tile.` key, by the part after the dot.
    fn tile_slot(&mut self, f: &str) -> Option<(&mut f64, Kind)> {
        use Kind::*;
        let t = &mut self.tile;
        match f {
            "load_bytes_per_flop" => Some((&mut t.load_bytes_per_flop, Positive)),
            "epilogue_k" => Some((&mut t.epilogue_k, NonNegative)),
            "small_tile_eff" => Some((&mut t.small_tile_eff, Fraction)),
            "overlap_p" => Some((&mut t.overlap_p, Positive)),
            _ => None,
        }
    }

    /// The slot of an `ll.` key, by the part after the dot.
    fn ll_slot(&mut self, f: &str) -> Option<(&mut f64, Kind)> {
        use Kind::*;
        let l = &mut self.ll;
        match f {
            "nvlink_eff" => Some((&mut l.nvlink_eff, Fraction)),
            "rdma_eff" => Some((&mut l.rdma_eff, Fraction)),
            "dispatch_s" => Some((&mut l.dispatch_s, Seconds)),
            "combine_s" => Some((&mut l.combine_s, Seconds)),
            "per_peer_s" => Some((&mut l.per_peer_s, Seconds)),
            "overlap_p" => Some((&mut l.overlap_p, Positive)),
            _ => None,
        }
    }

    /// The slot of a `launch.` key, by the part after the dot.
    fn launch_slot(&mut self, f: &str) -> Option<(&mut f64, Kind)> {
        use Kind::*;
        let l = &mut self.launch;
        match f {
            "eager_s" => Some((&mut l.eager_s, Seconds)),
            "graph_node_s" => Some((&mut l.graph_node_s, Seconds)),
            "graph_s" => Some((&mut l.graph_s, Seconds)),
            "triton_moe_s" => Some((&mut l.triton_moe_s, Seconds)),
            "linear_attn_s" => Some((&mut l.linear_attn_s, Seconds)),
            "graph_tokens" => Some((&mut l.graph_tokens, NonNegative)),
            _ => None,
        }
    }

    /// The operation rate a dotted key's group names (`moe`, `gemm`, ...), if any.
    fn rate_group(&mut self, group: &str) -> Option<&mut OpRate> {
        Some(match group {
            "moe" => &mut self.moe,
            "gemm" => &mut self.gemm,
            "attention" => &mut self.attention,
            "attention_sparse" => &mut self.attention_sparse,
            "attention_prefill" => &mut self.attention_prefill,
            "attention_sparse_prefill" => &mut self.attention_sparse_prefill,
            "indexer" => &mut self.indexer,
            "recurrent" => &mut self.recurrent,
            "recurrent_prefill" => &mut self.recurrent_prefill,
            "gather" => &mut self.gather,
            "comm" => &mut self.comm,
            "allreduce" => &mut self.allreduce,
            "elementwise" => &mut self.elementwise,
            _ => return None,
        })
    }

    /// Reads one parameter by key.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.clone().slot(key).map(|(v, _)| *v)
    }

    /// Sets one parameter by key; efficiencies must lie in [1e-6, 1], fixed costs in
    /// [0, 1 s), rates and exponents must be positive.
    pub fn set(&mut self, key: &str, value: f64) -> Result<(), ParamError> {
        let (slot, kind) = self
            .slot(key)
            .ok_or_else(|| ParamError::Unknown(key.to_string()))?;
        let bad = |kind| {
            Err(ParamError::OutOfRange {
                key: key.to_string(),
                value,
                kind,
            })
        };
        if !value.is_finite() {
            return Err(ParamError::NotFinite(key.to_string()));
        }
        match kind {
            // Below one in a million an efficiency is a typo, and prices steps at
            // absurd times.
            Kind::Fraction if !(1e-6..=1.0).contains(&value) => return bad(kind),
            Kind::Seconds if !(0.0..1.0).contains(&value) => return bad(kind),
            Kind::Positive if value <= 0.0 => return bad(kind),
            Kind::Share if !(0.0..=1.0).contains(&value) => return bad(kind),
            Kind::NonNegative if value < 0.0 => return bad(kind),
            _ => {}
        }
        *slot = value;
        Ok(())
    }

    /// Sets one parameter by key, as [`CostParams::set`], and keeps it: a later
    /// [`CostParams::repin`] puts it back.
    pub fn pin(&mut self, key: &str, value: f64) -> Result<(), ParamError> {
        self.set(key, value)?;
        self.pinned.push((key.to_string(), value));
        Ok(())
    }

    /// Puts back every pinned parameter, in the order pinned (each was checked when
    /// pinned).
    pub fn repin(&mut self) {
        for (key, value) in std::mem::take(&mut self.pinned) {
            self.set(&key, value)
                .expect("a pinned parameter was checked when pinned");
            self.pinned.push((key, value));
        }
    }
}

/// Why a cost parameter cannot be set (`CostParams::set`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    #[error("unknown cost parameter `{0}` (known: {known})", known = CostParams::KEYS.join(", "))]
    Unknown(String),
    #[error("cost parameter `{0}` must be a finite number")]
    NotFinite(String),
    #[error("{}", out_of_range(.key, *.value, *.kind))]
    OutOfRange { key: String, value: f64, kind: Kind },
}

/// A value outside its kind's range, in words.
fn out_of_range(key: &str, value: f64, kind: Kind) -> String {
    match kind {
        Kind::Fraction => format!("efficiency `{key}` = {value:e} must lie in [1e-6, 1]"),
        Kind::Seconds => format!("fixed cost `{key}` = {value} s must lie in [0, 1) seconds"),
        Kind::Positive => format!("cost parameter `{key}` = {value} must be positive"),
        Kind::Share => format!("share `{key}` = {value} must lie in [0, 1]"),
        Kind::NonNegative => format!("cost parameter `{key}` = {value} must not be negative"),
    }
}

/// Callers that report problems as text take the message.
impl From<ParamError> for String {
    fn from(e: ParamError) -> String {
        e.to_string()
    }
}

/// The slot of one operation rate's field (`mem_eff`, `compute_eff`, `fixed_s`).
fn rate_slot<'a>(rate: &'a mut OpRate, field: &str) -> Option<(&'a mut f64, Kind)> {
    match field {
        "mem_eff" => Some((&mut rate.mem_eff, Kind::Fraction)),
        "compute_eff" => Some((&mut rate.compute_eff, Kind::Fraction)),
        "fixed_s" => Some((&mut rate.fixed_s, Kind::Seconds)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_round_trips() {
        let mut p = CostParams::default();
        for (i, k) in CostParams::KEYS.iter().enumerate() {
            let v = if k.ends_with("_eff") || k.ends_with("_eff_initial") {
                0.3 + i as f64 / 200.0
            } else {
                i as f64 * 1e-6 + 1e-9
            };
            p.set(k, v).unwrap();
            assert_eq!(p.get(k), Some(v), "{k}");
        }
        assert!(p.set("moe.speed", 1.0).is_err());
        assert!(p.set("moe.mem_eff", 1.5).is_err());
        assert!(p.set("step_fixed_decode_s", -1.0).is_err());
        assert!(p.set("tile.overlap_p", 0.0).is_err());
        assert!(p.set("comm_sms", -2.0).is_err());
    }
}
