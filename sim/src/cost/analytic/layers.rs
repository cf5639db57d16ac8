//! The model compiled once for pricing: attention classes, the layer sequence by type,
//! every GEMM's shape, the per-token element-wise traffic and the kernel counts.

use crate::cost::kernels::a2a::{self, Fanout, Routing};
use crate::cost::kernels::gemm::SoftMax;
use crate::cost::kernels::skew;
use crate::cost::CostParams;
use crate::cost::Layout;
use spec::model::{AttentionKind, FfnKind, Layer};
use spec::{hardware::Hardware, model::Model};

mod classes;
mod elementwise;
mod gemms;
use elementwise::Elementwise;
pub(super) use gemms::GemmSpec;
use gemms::{
    dense, dense_ffn_gemms, lm_head_gemm, mla_gemms, moe_gemms, projection_gemms, MoeGemms,
};

/// Layers that cost the same per token.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct AttnClass {
    pub kind: AttentionKind,
    pub count: f64,
    pub ratio: f64,
    pub has_indexer: bool,
    pub window_branch: bool,
    /// The layer group whose own attention shape the class has (None: `[attention]`).
    pub shape: Option<u32>,
    /// Priced with the model's own projections (`Compiled::proj`) and its MLA path;
    /// otherwise with `proj` (a group's own shape, a recurrent mixer, none).
    pub main: bool,
    /// Its own projections per GPU (empty when `main`).
    pub proj: Vec<GemmSpec>,
    /// Bytes of one layer's projection weights per GPU (when not `main`).
    pub proj_bytes: f64,
    /// The share of a token's KV (or a request's state) one GPU holds and reads.
    pub kv_share: f64,
    /// Bytes of one cached entry and of one sliding-window entry (whole, before
    /// `kv_share`).
    pub entry_bytes: f64,
    pub window_entry_bytes: f64,
    /// Tokens a local layer attends over: the window, or the chunk.
    pub span: u64,
    /// Attention flops per query-key pair (absorbed and un-absorbed widths) and per
    /// query for sinks.
    pub pair_flops: f64,
    pub pair_flops_unabsorbed: f64,
    pub sink_flops: f64,
    /// Recurrent mixers, per GPU: the state one request keeps in one layer, bytes of
    /// inputs and outputs per token, flops per token at decode and at prefill, and the
    /// prefill kernel's chunk.
    pub state_bytes: f64,
    /// One chunk's state as the chunked prefill kernel writes and reads it, per GPU.
    pub chunk_state_bytes: f64,
    pub io_bytes: f64,
    pub decode_flops: f64,
    pub prefill_flops: f64,
    pub chunk: f64,
    /// Element-wise bytes per token before the router, its kernels, and the
    /// element-wise ones among them.
    pub elem_bytes: f64,
    pub kernels: f64,
    pub elem_kernels: f64,
}

/// The FFN of a layer type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum TypeFfn {
    Moe,
    /// A dense FFN: its width's index in `Compiled::dense_ffns`.
    Dense(usize),
    None,
}

/// A distinct (attention class, FFN) pair; the step is priced per type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct LayerType {
    pub class: usize,
    pub moe: bool,
    pub ffn: TypeFfn,
    pub count: f64,
}

/// Replay of cached context in window layers: how many layers replay how many tokens.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ReplayLayer {
    pub cap_tokens: u64,
    pub kind: AttentionKind,
    pub ratio: f64,
    pub has_indexer: bool,
}

/// Everything about the model and layout that does not change from step to step.
#[derive(Debug, Clone)]
pub(super) struct Compiled {
    pub layers: f64,
    pub moe_layers: f64,
    /// Linear-attention (gated DeltaNet) layers.
    pub linear_layers: f64,
    /// Dense FFN layers, per width of `dense_ffns`.
    pub dense_ffn_layers: Vec<f64>,
    pub classes: Vec<AttnClass>,
    pub types: Vec<LayerType>,
    /// Type index of every layer, in order.
    pub sequence: Vec<u8>,
    pub replay: Vec<ReplayLayer>,
    /// Attention projections before the router (q, kv, o), every layer.
    pub proj: Vec<GemmSpec>,
    /// Absorbed MLA at decode: per-head query and output absorption (batched GEMMs).
    pub absorb: Vec<GemmSpec>,
    /// Un-absorbed MLA at prefill: the latent KV's up-projection per context token.
    pub kv_up: Option<GemmSpec>,
    pub router: Option<GemmSpec>,
    pub shared: Vec<GemmSpec>,
    /// The dense FFNs' gate+up and down GEMMs, one pair per width (the model's first).
    pub dense_ffns: Vec<Vec<GemmSpec>>,
    /// Routed experts: gate+up, then down (groups set per step).
    pub experts: Vec<GemmSpec>,
    pub lm_head: GemmSpec,
    /// Weight GEMMs with a memo slot (`number_gemms`).
    pub gemm_slots: usize,
    /// Per-token element-wise bytes per layer: before the router, and after it (MoE
    /// and dense FFN layers).
    pub elem_attn_bytes: f64,
    pub elem_moe_bytes: f64,
    /// A dense FFN's element-wise bytes per token, per width.
    pub elem_dense_bytes: Vec<f64>,
    /// Element-wise bytes per routed token-expert pair (activation and quantisation).
    pub elem_pair_bytes: f64,
    /// Kernels per layer: before the router, MoE FFN, dense FFN; and per step.
    pub kernels_attn: f64,
    pub kernels_moe: f64,
    pub kernels_dense: f64,
    pub kernels_step: f64,
    /// Element-wise kernels among them: before the router, on the MoE layer's token
    /// side (top-k, the shared expert's activation), per routed pair (quantisation and
    /// activation), in a dense FFN.
    pub elem_kernels_attn: f64,
    pub elem_kernels_moe: f64,
    pub elem_kernels_pair: f64,
    pub elem_kernels_dense: f64,
    /// Attention flops per causal query-key pair: absorbed (decode, sparse) and
    /// un-absorbed (dense prefill of MLA) head widths.
    pub pair_flops_absorbed: f64,
    /// Attention sinks: one more softmax term per query and head (its exponential and
    /// its share of the sum, counted as 2 flops), no KV read; 0 without sinks.
    pub sink_flops_per_query: f64,
    pub pair_flops_unabsorbed: f64,
    pub indexer_flops_per_pair: f64,
    pub expert_params: f64,
    pub expert_bytes: f64,
    pub experts_per_rank: f64,
    pub redundant_per_rank: f64,
    /// GPUs the routed experts are spread over whole (DEP: the group; TP with expert
    /// parallelism: the TP GPUs; TP with sliced experts: 1, every GPU holds a slice of
    /// each).
    pub expert_ranks: f64,
    /// Tokens move between ranks by all-to-all (DEP of two or more); tensor-parallel
    /// GPUs hold every token and sum partial outputs by all-reduce instead, and one
    /// GPU alone moves nothing.
    pub a2a: bool,
    /// Tensor-parallel GPUs (1 = none) and the share of a token's KV bytes each reads.
    pub tp: f64,
    pub kv_share: f64,
    /// All-reduces per layer (two with TP: after attention and after the FFN) and the
    /// bytes each sums per token.
    pub allreduces_per_layer: f64,
    /// All-reduces of one pass through the layers (a layer without a token mixer or
    /// without an FFN has one partial output fewer to sum).
    pub allreduces_per_pass: f64,
    /// Layers of one pass that have a token mixer (attention or its like): where a
    /// layer-wide QK norm all-reduces under tensor parallelism.
    pub mixer_layers_per_pass: f64,
    pub allreduce_bytes_per_token: f64,
    /// Dispatch/combine: fanout per token, bytes per copy (normal and low-latency
    /// dispatch, combine).
    pub fanout: Fanout,
    pub copy_normal: f64,
    pub copy_ll: f64,
    pub copy_combine: f64,
    /// Expected hottest-rank load over the mean from expert popularity, and the
    /// expected maximum of DEP standard normals (sampling noise).
    pub popularity_skew: f64,
    pub z_dep: f64,
    pub attn_proj_params: f64,
    pub attn_proj_bytes: f64,
    pub shared_params: f64,
    pub shared_bytes: f64,
    /// Bytes of one dense FFN per GPU, per width.
    pub dense_ffn_bytes: Vec<f64>,
    /// Token-mixer projection bytes of all layers per GPU.
    pub mixer_bytes: f64,
    pub lm_head_bytes: f64,
    /// Soft maxima of the GEMM tile model and the low-latency all-to-all.
    pub roof_tile: SoftMax,
    pub roof_ll: SoftMax,
}

/// The window layers that replay cached context, and how many tokens each replays.
fn replay_layers(model: &Model, expanded: &[Layer]) -> Vec<ReplayLayer> {
    let a = &model.attention;
    let mut replay = Vec::new();
    if let Some(r) = &a.replay {
        let window = a.window as u64;
        let n = expanded.len() as u64;
        for l in expanded.iter().filter(|l| l.window_branch) {
            let cap = if l.index < r.bounded_layers {
                r.bounded_tokens as u64
            } else {
                // Exact recompute: the top layer's window needs `window` tokens at
                // this layer for every layer above it (receptive field).
                window * (n - l.index as u64)
            };
            replay.push(ReplayLayer {
                cap_tokens: cap,
                kind: l.attention,
                ratio: l.compress_ratio as f64,
                has_indexer: l.has_indexer,
            });
        }
    }
    replay
}

/// What tensor parallelism splits: heads, dense layers by columns then rows
/// (Megatron style), and the routed experts unless they are spread whole.
#[derive(Debug, Clone, Copy)]
struct Split {
    /// Tensor-parallel GPUs (1 = none).
    tp: f64,
    /// Attention heads per GPU.
    heads: f64,
    /// The share of every routed expert one GPU holds, inverted: `tp` when TP slices
    /// the experts, 1 when each GPU holds whole ones (DEP, or TP with expert
    /// parallelism).
    slice: f64,
    /// The RoPE width of a query or key head.
    rope: f64,
    /// The GPUs the K and V projections split over: grouped-query attention splits by
    /// KV heads (up to their number); MLA's latent and MQA's one head stay whole.
    kv_split: f64,
}

impl Split {
    fn new(model: &Model, layout: &Layout) -> Split {
        let a = &model.attention;
        let tp = layout.tp.max(1) as f64;
        let rope = if a.kv_dim > a.value_dim {
            (a.kv_dim - a.value_dim) as f64
        } else {
            64f64.min(a.qk_head_dim as f64)
        };
        Split {
            tp,
            heads: a.heads as f64 / tp,
            slice: if tp > 1.0 && !layout.expert_parallel {
                tp
            } else {
                1.0
            },
            rope,
            kv_split: if a.kv_up_params == 0 && a.kv_heads > 1 {
                tp.min(a.kv_heads as f64)
            } else {
                1.0
            },
        }
    }
}

/// The dense FFN widths of the model's dense layers, the model's own first, and the
/// dense layers of each.
fn dense_widths(model: &Model) -> (Vec<u32>, Vec<f64>) {
    let mut widths: Vec<u32> = model.dense_ffn.iter().map(|d| d.ffn).collect();
    let mut layers = vec![0.0; widths.len()];
    for g in model.layers.iter().filter(|g| g.ffn == FfnKind::Dense) {
        let w = model.ffn_width_of(g);
        match widths.iter().position(|x| *x == w) {
            Some(i) => layers[i] += g.count as f64,
            None => {
                widths.push(w);
                layers.push(g.count as f64);
            }
        }
    }
    (widths, layers)
}

/// Where the routed experts live and how tokens reach them.
struct Experts {
    /// GPUs the routed experts are spread over whole (`Compiled::expert_ranks`).
    ranks: f64,
    per_rank: f64,
    redundant_per_rank: f64,
    fanout: Fanout,
    popularity_skew: f64,
}

impl Experts {
    fn new(hw: &Hardware, model: &Model, layout: &Layout, tp: f64) -> Experts {
        let ranks = if tp > 1.0 {
            if layout.expert_parallel {
                tp
            } else {
                1.0
            }
        } else {
            layout.dep.max(1) as f64
        };
        let Some(m) = &model.moe else {
            return Experts {
                ranks,
                per_rank: 0.0,
                redundant_per_rank: 0.0,
                fanout: Fanout::default(),
                popularity_skew: 1.0,
            };
        };
        let routing = Routing {
            experts: m.routed_experts as f64,
            top_k: m.top_k as f64,
            groups: m.groups.max(1) as f64,
            topk_groups: m.topk_groups.max(1) as f64,
        };
        let d = layout.dep.max(1);
        Experts {
            ranks,
            per_rank: m.routed_experts as f64 / ranks,
            redundant_per_rank: layout.redundant_experts as f64 / ranks,
            fanout: a2a::fanout(&routing, d as f64, hw.nvlink_domain_gpus.max(1) as f64),
            popularity_skew: skew::popularity_skew(
                m.routed_experts,
                ranks as u32,
                layout.redundant_experts,
                m.expert_load_cv,
            ),
        }
    }
}

/// Weights per GPU, parameters and bytes, outside the routed experts.
struct Weights {
    attn_proj_params: f64,
    shared_params: f64,
    shared_bytes: f64,
    lm_head_params: f64,
}

impl Weights {
    fn new(model: &Model, split: &Split) -> Weights {
        let tp = split.tp;
        let a = &model.attention;
        let h = model.hidden as f64;
        // The down-projections to the latents stay whole under TP; grouped-query K and
        // V split by KV heads.
        let whole = h * (a.kv_dim as f64 + if a.q_lora > 0 { a.q_lora as f64 } else { 0.0 });
        let rest = (model.attention_params_per_layer() - whole) / tp;
        let attn_proj_params = if split.kv_split > 1.0 {
            // No q latent here (grouped-query attention has none).
            whole / split.kv_split + rest
        } else {
            whole + rest
        };
        let (shared_params, shared_bytes) = match &model.moe {
            Some(m) => {
                let p = match (m.shared_ffn, m.latent) {
                    (None, None) => 3.0 * h * m.expert_ffn as f64 * m.shared_experts as f64 / tp,
                    // The latent projections run whole on every GPU.
                    _ => {
                        m.matrices() * h * m.shared_width() as f64 / tp
                            + 2.0 * h * m.latent.unwrap_or(0) as f64
                    }
                };
                (p, p * m.shared_weight_dtype.bytes())
            }
            None => (0.0, 0.0),
        };
        Weights {
            attn_proj_params,
            shared_params,
            shared_bytes,
            lm_head_params: model.vocab as f64 * h / tp,
        }
    }
}

/// The dense FFNs per width: GEMMs, element-wise bytes per token, bytes per GPU and
/// layers.
struct DenseFfns {
    gemms: Vec<Vec<GemmSpec>>,
    elem_bytes: Vec<f64>,
    bytes: Vec<f64>,
    layers: Vec<f64>,
}

impl DenseFfns {
    fn new(hw: &Hardware, model: &Model, tp: f64) -> DenseFfns {
        let h = model.hidden as f64;
        let (widths, layers) = dense_widths(model);
        let d = model.dense_ffn.as_ref();
        let bytes = |w: u32| {
            d.map(|d| d.matrices() * h * w as f64 * d.weight_dtype.bytes() / tp)
                .unwrap_or(0.0)
        };
        DenseFfns {
            gemms: widths
                .iter()
                .map(|w| dense_ffn_gemms(hw, model, *w as f64, tp))
                .collect(),
            elem_bytes: widths
                .iter()
                .map(|w| elementwise::dense_bytes(model, *w as f64, tp))
                .collect(),
            bytes: widths.iter().map(|w| bytes(*w)).collect(),
            layers,
        }
    }
}

/// Attention flops of one query-key pair and of one query's sinks.
struct PairFlops {
    absorbed: f64,
    sink_per_query: f64,
    unabsorbed: f64,
    indexer_per_pair: f64,
}

impl PairFlops {
    /// Works out the attention flops for `heads` heads per GPU.
    fn new(model: &Model, heads: f64) -> PairFlops {
        let a = &model.attention;
        let absorbed = 2.0 * heads * (a.score_dim + a.value_dim) as f64;
        PairFlops {
            absorbed,
            sink_per_query: if a.sinks { 2.0 * heads } else { 0.0 },
            unabsorbed: if a.kv_up_params > 0 {
                2.0 * heads * (a.qk_head_dim + a.v_head_dim) as f64
            } else {
                absorbed
            },
            indexer_per_pair: a
                .indexer
                .as_ref()
                .map(|i| 2.0 * i.heads as f64 * i.head_dim as f64)
                .unwrap_or(0.0),
        }
    }
}

/// The element-wise kernels per routed pair of an unfused MoE (2, else 0).
fn elem_kernels_pair(model: &Model) -> f64 {
    if model.moe.as_ref().is_some_and(|m| !m.fused) {
        2.0
    } else {
        0.0
    }
}

/// The pieces of `Compiled` that their own helpers build, before it is assembled.
struct Parts {
    split: Split,
    proj: Vec<GemmSpec>,
    absorb: Vec<GemmSpec>,
    kv_up: Option<GemmSpec>,
    moe: MoeGemms,
    elem: Elementwise,
    experts: Experts,
    weights: Weights,
    dense_ffns: DenseFfns,
    flops: PairFlops,
}

impl Parts {
    /// Builds the GEMMs, element-wise traffic, experts, weights and flops.
    fn new(hw: &Hardware, model: &Model, layout: &Layout, split: Split) -> Parts {
        let (tp, heads) = (split.tp, split.heads);
        let proj = projection_gemms(hw, model, &split);
        let (absorb, kv_up) = mla_gemms(hw, model, &split);
        let moe = moe_gemms(hw, model, &split);
        let elem = Elementwise::new(model, &split, proj.len());
        let experts = Experts::new(hw, model, layout, tp);
        let weights = Weights::new(model, &split);
        let dense_ffns = DenseFfns::new(hw, model, tp);
        let flops = PairFlops::new(model, heads);
        Parts {
            split,
            proj,
            absorb,
            kv_up,
            moe,
            elem,
            experts,
            weights,
            dense_ffns,
            flops,
        }
    }
}

impl Compiled {
    pub fn new(hw: &Hardware, model: &Model, layout: &Layout, params: &CostParams) -> Compiled {
        let expanded = model.expand_layers();
        let split = Split::new(model, layout);
        let parts = Parts::new(hw, model, layout, split);
        let mut compiled = Compiled::assemble(hw, model, layout, params, &expanded, parts);
        compiled.add_classes(hw, model, &split, &expanded);
        compiled.number_gemms();
        compiled
    }

    /// Puts the built parts together into a `Compiled`, before its classes and GEMM slots.
    fn assemble(
        hw: &Hardware,
        model: &Model,
        layout: &Layout,
        params: &CostParams,
        expanded: &[Layer],
        parts: Parts,
    ) -> Compiled {
        let a = &model.attention;
        let h = model.hidden as f64;
        let tp = parts.split.tp;
        let dispatch = model.dispatch_dtype.bytes();
        // The experts' tokens travel at the experts' width (a latent MoE's latent).
        let ew = model.expert_width() as f64;
        Compiled {
            layers: expanded.len() as f64,
            moe_layers: expanded.iter().filter(|l| l.ffn == FfnKind::Moe).count() as f64,
            linear_layers: model.linear_attention_layers() as f64,
            dense_ffn_layers: parts.dense_ffns.layers,
            classes: Vec::new(),
            types: Vec::new(),
            sequence: Vec::new(),
            replay: replay_layers(model, expanded),
            proj: parts.proj,
            absorb: parts.absorb,
            kv_up: parts.kv_up,
            router: parts.moe.router,
            shared: parts.moe.shared,
            dense_ffns: parts.dense_ffns.gemms,
            experts: parts.moe.experts,
            lm_head: lm_head_gemm(hw, model, tp),
            gemm_slots: 0,
            elem_attn_bytes: parts.elem.attn_bytes,
            elem_moe_bytes: parts.elem.moe_bytes,
            elem_dense_bytes: parts.dense_ffns.elem_bytes,
            elem_pair_bytes: parts.elem.pair_bytes,
            kernels_attn: parts.elem.kernels_attn,
            kernels_moe: parts.elem.kernels_moe,
            kernels_dense: parts.elem.kernels_dense,
            kernels_step: 5.0,
            elem_kernels_attn: parts.elem.elem_kernels_attn,
            elem_kernels_moe: parts.elem.elem_kernels_moe,
            elem_kernels_pair: elem_kernels_pair(model),
            elem_kernels_dense: parts.elem.elem_kernels_dense,
            pair_flops_absorbed: parts.flops.absorbed,
            sink_flops_per_query: parts.flops.sink_per_query,
            pair_flops_unabsorbed: parts.flops.unabsorbed,
            indexer_flops_per_pair: parts.flops.indexer_per_pair,
            expert_params: parts.moe.expert_params,
            expert_bytes: parts.moe.expert_bytes,
            experts_per_rank: parts.experts.per_rank,
            redundant_per_rank: parts.experts.redundant_per_rank,
            expert_ranks: parts.experts.ranks,
            a2a: tp <= 1.0 && layout.dep > 1,
            tp,
            kv_share: 1.0 / tp.min(a.kv_heads.max(1) as f64),
            allreduces_per_layer: if tp > 1.0 { 2.0 } else { 0.0 },
            allreduces_per_pass: 0.0,
            mixer_layers_per_pass: 0.0,
            allreduce_bytes_per_token: 2.0 * h,
            fanout: parts.experts.fanout,
            copy_normal: a2a::copy_bytes(ew, dispatch, 0.0),
            copy_ll: a2a::copy_bytes(ew, dispatch, 16.0),
            copy_combine: a2a::copy_bytes(ew, model.combine_dtype.bytes(), 0.0),
            popularity_skew: parts.experts.popularity_skew,
            z_dep: skew::expected_max_normal(parts.experts.ranks),
            attn_proj_params: parts.weights.attn_proj_params,
            attn_proj_bytes: parts.weights.attn_proj_params * a.weight_dtype.bytes(),
            shared_params: parts.weights.shared_params,
            shared_bytes: parts.weights.shared_bytes,
            dense_ffn_bytes: parts.dense_ffns.bytes,
            mixer_bytes: 0.0,
            lm_head_bytes: parts.weights.lm_head_params * model.embedding_dtype.bytes(),
            roof_tile: SoftMax::new(params.tile.overlap_p),
            roof_ll: SoftMax::new(params.ll.overlap_p),
        }
    }

    /// Gives each weight GEMM priced at a rank's row count its memo slot.
    fn number_gemms(&mut self) {
        let specs = self
            .proj
            .iter_mut()
            .chain(self.absorb.iter_mut())
            .chain(self.kv_up.iter_mut())
            .chain(self.router.iter_mut())
            .chain(self.shared.iter_mut())
            .chain(self.dense_ffns.iter_mut().flatten())
            .chain(std::iter::once(&mut self.lm_head))
            .chain(self.classes.iter_mut().flat_map(|c| c.proj.iter_mut()));
        let mut n = 0;
        for (i, g) in specs.enumerate() {
            g.slot = u8::try_from(i).ok();
            n = i + 1;
        }
        self.gemm_slots = n;
    }

    /// Kernels of one layer of type `t`.
    pub fn kernels_of(&self, t: &LayerType) -> f64 {
        let c = &self.classes[t.class];
        let attn = if c.kind == AttentionKind::None {
            0.0
        } else {
            1.0 + if c.window_branch { 1.0 } else { 0.0 } + if c.has_indexer { 2.0 } else { 0.0 }
        };
        c.kernels
            + attn
            + match t.ffn {
                TypeFfn::Moe => self.kernels_moe,
                TypeFfn::Dense(_) => self.kernels_dense,
                TypeFfn::None => 0.0,
            }
    }
}
