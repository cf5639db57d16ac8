//! A model as the cost model sees it: a schedule of layer kinds with the sizes that
//! decide weight bytes, flops and KV traffic. Loaded from a scenario's `models/*.toml`.

use crate::dtype::{ByteSize, Dtype};
use crate::serde_defaults::one;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub hidden: u32,
    pub vocab: u32,
    /// Embedding and LM-head weights.
    pub embedding_dtype: Dtype,
    /// The layer schedule, in order; groups repeat `count` times.
    pub layers: Vec<LayerGroup>,
    pub attention: Attention,
    #[serde(default)]
    pub moe: Option<Moe>,
    #[serde(default)]
    pub dense_ffn: Option<DenseFfn>,
    pub kv: Kv,
    #[serde(default)]
    pub engram: Option<Engram>,
    #[serde(default)]
    pub mhc: Option<Mhc>,
    #[serde(default)]
    pub mtp: Option<Mtp>,
    /// Linear-attention layers' table (`linear` layers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear_attention: Option<crate::state::LinearAttention>,
    /// Mamba-2 layers' table (`mamba` layers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba: Option<crate::state::Mamba>,
    /// Parameters of a vision (or audio) encoder shipped with the model: named, not
    /// priced (its tokens reach the model as input tokens); 0 = none.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub vision_params: f64,
    /// Data type of tokens sent to experts (dispatch) and back (combine).
    pub dispatch_dtype: Dtype,
    pub combine_dtype: Dtype,
    /// The LM head shares the embedding table's weights (one copy in memory).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tied_embeddings: bool,
    /// The longest sequence, prompt plus output tokens, the model's positions reach:
    /// its config's `max_position_embeddings`, which vLLM's default `max_model_len` and
    /// SGLang's `context_length` follow. Absent: not known, so no limit unless the
    /// scenario sets `serving.max_model_len`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_position_embeddings: Option<u64>,
    /// Tokens the model's tokenizer adds to every prompt it encodes (Llama 3's
    /// `<|begin_of_text|>`): a benchmark client records a prompt's length without them,
    /// and the server runs them (`twin validate bench` and `validate runs` add them to
    /// each recorded prompt). 0: none.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub prompt_special_tokens: u32,
    /// Weights per one-byte scale of the GEMMs outside the routed experts (attention
    /// projections, shared experts, dense FFN); 0 = none (BF16, per-tensor FP8). The
    /// default, 128, counts DeepSeek's FP8 128x128 block scales as one byte per 128
    /// weights (an approximation the shipped DeepSeek files were fitted with).
    #[serde(
        default = "default_dense_scale_block",
        skip_serializing_if = "is_default_dense_scale_block"
    )]
    pub dense_scale_block: u32,
    #[serde(default)]
    pub provenance: BTreeMap<String, String>,
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

fn default_dense_scale_block() -> u32 {
    128
}

fn is_default_dense_scale_block(v: &u32) -> bool {
    *v == 128
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FfnKind {
    Dense,
    Moe,
    /// No FFN: the layer is its mixer alone (Nemotron-H's Mamba and attention layers,
    /// a DeciLM layer whose FFN is a no-op).
    None,
}

/// How a layer attends to its context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionKind {
    /// Dense attention over every cached entry (DeepSeek-V3 MLA).
    Dense,
    /// An indexer scores every (compressed) position; attention reads the top-k.
    Sparse,
    /// Dense attention over entries compressed `compress_ratio`:1.
    Compressed,
    /// Sliding window only.
    Window,
    /// Local attention within fixed chunks of `attention.chunk` tokens (Llama-4's
    /// chunked attention): a query attends to the tokens of its own chunk only.
    Chunked,
    /// Linear attention with a recurrent state per request (gated DeltaNet, as in
    /// Qwen3-Next and Qwen3.5): the `[linear_attention]` table.
    Linear,
    /// A Mamba-2 state-space mixer (Nemotron-H): the `[mamba]` table.
    Mamba,
    /// No token mixer: the layer is its FFN alone.
    None,
}

impl AttentionKind {
    /// The layer keeps a fixed-size recurrent state per request instead of KV.
    pub fn is_recurrent(self) -> bool {
        matches!(self, AttentionKind::Linear | AttentionKind::Mamba)
    }
    /// The layer caches K/V (or a latent) for every token of the context: what
    /// `kv.bytes_per_token` counts.
    pub fn caches_every_token(self) -> bool {
        matches!(
            self,
            AttentionKind::Dense | AttentionKind::Sparse | AttentionKind::Compressed
        )
    }
    /// The layer keeps at most a bounded span of tokens (a window or a chunk).
    pub fn is_local(self) -> bool {
        matches!(self, AttentionKind::Window | AttentionKind::Chunked)
    }
    /// A softmax attention over cached K/V (every kind but the recurrent ones and none).
    pub fn is_softmax(self) -> bool {
        !self.is_recurrent() && self != AttentionKind::None
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerGroup {
    pub count: u32,
    pub ffn: FfnKind,
    pub attention: AttentionKind,
    /// Tokens per stored KV entry (1 = uncompressed).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub compress_ratio: u32,
    /// The layer also has a sliding-window branch over the last `attention.window`
    /// tokens (DeepSeek-V4 style), whose KV is not kept in the global cache.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub window_branch: bool,
    /// Sparse layers only: reuses the top-k selection of the layer before (no indexer
    /// pass of its own), as with cross-layer KV sharing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shares_selection: bool,
    /// This group's own attention shape where it differs from `[attention]` (heads,
    /// widths, KV entry): Gemma-4's global layers, MiMo-V2's sliding-window layers. The
    /// weight and compute dtypes, window and chunk stay the model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_shape: Option<AttentionShape>,
    /// This group's dense FFN width where it differs from `dense_ffn.ffn` (DeciLM's
    /// per-layer widths).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ffn_width: Option<u32>,
}

/// A layer group's own grouped-query attention shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttentionShape {
    pub heads: u32,
    pub kv_heads: u32,
    /// Per-head query (and key) width.
    pub qk_head_dim: u32,
    /// Per-head value width.
    pub v_head_dim: u32,
    /// Width of the K/V projection's output per token (one projection when keys are
    /// the values: Gemma-4's `attention_k_eq_v`).
    pub kv_dim: u32,
    /// Bytes of one cached token of one layer, scales included.
    pub kv_entry_bytes: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attention {
    pub heads: u32,
    /// Per-head width of the score (query-key) product as computed at decode
    /// (absorbed MLA: kv_lora + rope).
    pub score_dim: u32,
    /// Per-head width of the value product as computed.
    pub value_dim: u32,
    /// Per-head query width before absorption (projection sizes).
    pub qk_head_dim: u32,
    pub v_head_dim: u32,
    pub q_lora: u32,
    /// Width of the per-token KV vector written by a layer (latent + rope).
    pub kv_dim: u32,
    /// KV heads the cache holds per token: 1 for MLA's latent or MQA, shared by every
    /// query head (tensor parallelism then keeps a whole copy on every GPU); more for
    /// grouped-query attention (split over up to that many GPUs).
    #[serde(default = "one")]
    pub kv_heads: u32,
    /// Up-projection parameters of the latent KV (MLA's W_UKV); 0 when absent.
    #[serde(default)]
    pub kv_up_params: u64,
    /// Low-rank output projection (grouped, V4 style); absent = full heads*v x hidden.
    #[serde(default)]
    pub o_lora: Option<u32>,
    /// Groups of the low-rank output (DeepSeek-V4's `o_groups`): each group's heads
    /// project to their own `o_lora` rank (a block-diagonal first projection), and the
    /// groups' ranks together project to the hidden state; absent = one group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub o_groups: Option<u32>,
    pub weight_dtype: Dtype,
    /// Arithmetic of the attention kernels (FP8 on FlashMLA-class kernels).
    pub compute_dtype: Dtype,
    /// Bytes read for one stored KV entry of one layer (with scales).
    pub kv_entry_bytes: f64,
    /// Sliding window, tokens; 0 = none.
    #[serde(default)]
    pub window: u32,
    /// A learned sink logit per head joins every softmax (gpt-oss): one more score
    /// per query and head, no KV.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sinks: bool,
    /// Bytes of one sliding-window KV entry.
    #[serde(default)]
    pub window_entry_bytes: f64,
    /// Chunk of chunked-attention layers, tokens; 0 = none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chunk: u32,
    /// The query projection also produces a sigmoid gate on the attention output
    /// (Qwen3-Next, Qwen3.5: `attn_output_gate`): heads x qk_head_dim more outputs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_gate: bool,
    /// The query and key RMSNorms span the layer's whole projection, every head
    /// together (MiniMax-M2's `qk_norm_type = "per_layer"`), not each head: split over
    /// tensor-parallel GPUs, each layer all-reduces the per-token sums of squares
    /// before normalising.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub layer_qk_norm: bool,
    #[serde(default)]
    pub indexer: Option<Indexer>,
    #[serde(default)]
    pub replay: Option<Replay>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Indexer {
    pub heads: u32,
    pub head_dim: u32,
    pub dtype: Dtype,
    /// Entries the main attention reads per query after selection.
    pub top_k: u32,
    /// Bytes of one indexer key (with scales).
    pub key_bytes: f64,
}

/// Recompute of cached context for sliding-window branches (their KV is not cached).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    /// Tokens of cached context a bounded layer recomputes.
    pub bounded_tokens: u32,
    /// Layers `[0, bounded_layers)` replay `bounded_tokens`; later window layers
    /// replay the whole in-request context of the step (unbounded).
    pub bounded_layers: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Moe {
    pub routed_experts: u32,
    pub shared_experts: u32,
    pub top_k: u32,
    pub expert_ffn: u32,
    pub weight_dtype: Dtype,
    /// Weights per one-byte block scale (FP4: 16 or 32); 0 = none.
    #[serde(default)]
    pub scale_block: u32,
    pub shared_weight_dtype: Dtype,
    /// Arithmetic of the expert GEMMs' activations (FP8 in DeepGEMM-class kernels, also
    /// with FP4 weights): the tensor rate is that of the wider of the two operands.
    #[serde(default = "fp8")]
    pub activation_dtype: Dtype,
    /// Expert groups for group-limited routing (DeepSeek-V3: 8), 1 = no limit.
    #[serde(default = "one")]
    pub groups: u32,
    /// Groups a token's experts may come from (DeepSeek-V3: 4).
    #[serde(default = "one")]
    pub topk_groups: u32,
    /// Coefficient of variation of expert popularity (persistent hot experts): the
    /// source of expert-load skew beyond a batch's sampling noise; 0 = uniform.
    pub expert_load_cv: f64,
    /// Routing forced uniform: every expert takes the same load, no popularity skew and
    /// no sampling noise (how profiling runs are made: DeepSeek's profile data
    /// "simulate[s] an absolutely balanced MoE routing strategy").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub balanced: bool,
    /// One fused kernel per MoE layer (DeepGEMM's Mega MoE): dispatch, expert GEMMs,
    /// activation and combine in one launch, communication overlapped with the GEMMs
    /// inside it.
    #[serde(default)]
    pub fused: bool,
    /// Width of the shared experts together where it is not `shared_experts x
    /// expert_ffn` (Qwen3.5's `shared_expert_intermediate_size`, Gemma-4's dense MLP
    /// beside its experts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_ffn: Option<u32>,
    /// Gated experts (gate, up and down projections: SwiGLU); false: up and down only
    /// (Nemotron-H's squared ReLU).
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub gated: bool,
    /// The routed experts work at this width instead of `hidden` (a latent MoE:
    /// Nemotron-3's `moe_latent_size`): tokens are projected down to it before the
    /// dispatch and back up after the combine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latent: Option<u32>,
}

impl Moe {
    /// Width of all shared experts together.
    pub fn shared_width(&self) -> u32 {
        self.shared_ffn
            .unwrap_or(self.shared_experts.saturating_mul(self.expert_ffn))
    }
    /// Weight matrices of one expert: 3 gated, 2 not.
    pub fn matrices(&self) -> f64 {
        if self.gated {
            3.0
        } else {
            2.0
        }
    }
}

fn yes() -> bool {
    true
}

fn is_yes(v: &bool) -> bool {
    *v
}

fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

fn fp8() -> Dtype {
    Dtype::Fp8
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenseFfn {
    pub ffn: u32,
    pub weight_dtype: Dtype,
    /// Gated (gate, up and down projections); false: up and down only.
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub gated: bool,
}

impl DenseFfn {
    /// Weight matrices: 3 gated, 2 not.
    pub fn matrices(&self) -> f64 {
        if self.gated {
            3.0
        } else {
            2.0
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kv {
    /// Global KV bytes per token, all layers together (capacity planning).
    pub bytes_per_token: f64,
}

/// Hash-addressed n-gram embedding tables (Engram).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Engram {
    /// Layer indices (0-based) that hold an Engram module.
    pub at_layers: Vec<u32>,
    pub orders: Vec<u32>,
    pub heads_per_order: u32,
    pub dim_per_order: u32,
    pub rows_per_table: u64,
    pub dtype: Dtype,
    /// Tables live in host memory and are gathered over the CPU-GPU link.
    pub host_resident: bool,
    pub page_size: ByteSize,
}

impl Engram {
    /// Bytes of one gathered row.
    pub fn row_bytes(&self) -> f64 {
        (self.dim_per_order / self.heads_per_order.max(1)) as f64 * self.dtype.bytes()
    }
    /// Gathers per token per module.
    pub fn gathers_per_token_per_module(&self) -> u64 {
        self.orders.len() as u64 * self.heads_per_order as u64
    }
    /// Bytes of all tables together.
    pub fn table_bytes(&self) -> f64 {
        self.at_layers.len() as f64
            * self.gathers_per_token_per_module() as f64
            * self.rows_per_table as f64
            * self.row_bytes()
    }
}

/// Manifold-constrained hyper-connections: `streams` residual streams per token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mhc {
    pub streams: u32,
    /// Fused single-pass kernels: (2n+2)d elements of traffic per layer, else (4n+4)d.
    pub fused: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mtp {
    /// Draft tokens per step by default (nextn).
    pub draft_tokens: u32,
    /// Acceptance of draft i given drafts before it were accepted.
    pub acceptance: Vec<f64>,
    /// Modules shipped (MiniMax-M2 ships 3, DeepSeek 1): what the parameter count of
    /// the MTP part multiplies; the draft passes price one module's layer each.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub modules: u32,
}

impl Mtp {
    /// Expected tokens emitted per step with `n` drafts: 1 + sum_i prod_{j<=i} a_j.
    pub fn expected_tokens_per_step(&self, n: u32) -> f64 {
        let mut p = 1.0;
        let mut total = 1.0;
        for i in 0..n as usize {
            p *= self.acceptance.get(i).copied().unwrap_or(0.0);
            total += p;
        }
        total
    }
}

/// One layer, expanded from the schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layer {
    pub index: u32,
    pub ffn: FfnKind,
    pub attention: AttentionKind,
    pub compress_ratio: u32,
    pub window_branch: bool,
    pub has_indexer: bool,
    pub engram: bool,
    /// The group it comes from (its own attention shape, FFN width).
    pub group: u32,
}

impl Model {
    /// Layers in all (saturating: counts are user input; `validate::model` bounds it).
    pub fn layer_count(&self) -> u32 {
        self.layers_where(|_| true)
    }

    /// Layers whose token mixer is linear attention (gated DeltaNet), from the groups.
    pub fn linear_attention_layers(&self) -> u32 {
        self.layers_where(|g| g.attention == AttentionKind::Linear)
    }

    /// Layers of the groups that pass `keep` (saturating).
    fn layers_where(&self, keep: impl Fn(&LayerGroup) -> bool) -> u32 {
        self.layers
            .iter()
            .filter(|g| keep(g))
            .fold(0u32, |a, g| a.saturating_add(g.count))
    }

    /// The schedule expanded layer by layer.
    pub fn expand_layers(&self) -> Vec<Layer> {
        let mut out = Vec::with_capacity(self.layer_count() as usize);
        let engram_layers: &[u32] = self
            .engram
            .as_ref()
            .map(|e| &e.at_layers[..])
            .unwrap_or(&[]);
        for (gi, g) in self.layers.iter().enumerate() {
            for _ in 0..g.count {
                let index = out.len() as u32;
                out.push(Layer {
                    index,
                    ffn: g.ffn,
                    attention: g.attention,
                    compress_ratio: g.compress_ratio.max(1),
                    window_branch: g.window_branch || g.attention == AttentionKind::Window,
                    has_indexer: g.attention == AttentionKind::Sparse && !g.shares_selection,
                    engram: engram_layers.contains(&index),
                    group: gi as u32,
                });
            }
        }
        out
    }

    /// Attention projection parameters of one layer.
    pub fn attention_params_per_layer(&self) -> f64 {
        let a = &self.attention;
        let h = self.hidden as f64;
        let q = if a.q_lora > 0 {
            h * a.q_lora as f64 + a.q_lora as f64 * a.heads as f64 * a.qk_head_dim as f64
        } else {
            h * a.heads as f64 * a.qk_head_dim as f64
        };
        let kv = h * a.kv_dim as f64 + a.kv_up_params as f64;
        let o = match a.o_lora {
            Some(r) => {
                let g = a.o_groups.unwrap_or(1).max(1) as f64;
                a.heads as f64 * a.v_head_dim as f64 * r as f64 + g * r as f64 * h
            }
            None => a.heads as f64 * a.v_head_dim as f64 * h,
        };
        let gate = if a.output_gate {
            h * a.heads as f64 * a.qk_head_dim as f64
        } else {
            0.0
        };
        q + kv + o + gate
    }

    /// Token-mixer parameters of one layer of group `g`: its attention projections
    /// (the model's, or the group's own shape), a linear-attention or Mamba layer's
    /// projections and convolution, or none.
    pub fn mixer_params(&self, g: &LayerGroup) -> f64 {
        let h = self.hidden as f64;
        match g.attention {
            AttentionKind::None => 0.0,
            AttentionKind::Linear => self
                .linear_attention
                .as_ref()
                .map_or(0.0, |l| l.params(self.hidden)),
            AttentionKind::Mamba => self.mamba.as_ref().map_or(0.0, |m| m.params(self.hidden)),
            _ => match &g.attention_shape {
                Some(s) => {
                    let gate = if self.attention.output_gate { 2.0 } else { 1.0 };
                    gate * h * s.heads as f64 * s.qk_head_dim as f64
                        + h * s.kv_dim as f64
                        + s.heads as f64 * s.v_head_dim as f64 * h
                }
                None => self.attention_params_per_layer(),
            },
        }
    }

    /// The dense FFN width of group `g` (its own, or `dense_ffn.ffn`).
    pub fn ffn_width_of(&self, g: &LayerGroup) -> u32 {
        g.ffn_width
            .or(self.dense_ffn.as_ref().map(|d| d.ffn))
            .unwrap_or(0)
    }

    /// The width the routed experts work at: the latent width, or `hidden`.
    pub fn expert_width(&self) -> u32 {
        self.moe
            .as_ref()
            .and_then(|m| m.latent)
            .unwrap_or(self.hidden)
    }

    /// Parameters of one routed expert (gate, up, down; up and down when not gated).
    pub fn expert_params(&self) -> f64 {
        self.moe
            .as_ref()
            .map(|m| m.matrices() * self.expert_width() as f64 * m.expert_ffn as f64)
            .unwrap_or(0.0)
    }

    /// Recurrent state one request keeps, all layers together, bytes: the
    /// linear-attention and Mamba layers' states and their convolution windows.
    pub fn state_bytes_per_request(&self) -> f64 {
        self.layers
            .iter()
            .map(|g| {
                g.count as f64
                    * match g.attention {
                        AttentionKind::Linear => self
                            .linear_attention
                            .as_ref()
                            .map_or(0.0, |l| l.state_bytes()),
                        AttentionKind::Mamba => {
                            self.mamba.as_ref().map_or(0.0, |m| m.state_bytes())
                        }
                        _ => 0.0,
                    }
            })
            .sum()
    }

    /// KV bytes one request of `tokens` tokens holds in its sliding-window and
    /// chunked layers (at most the window or the chunk per layer; engines free the
    /// blocks behind it).
    pub fn local_kv_bytes(&self, tokens: u64) -> f64 {
        let a = &self.attention;
        self.layers
            .iter()
            .map(|g| {
                let (span, entry) = match g.attention {
                    AttentionKind::Window => (a.window, a.window_entry_bytes),
                    AttentionKind::Chunked => (a.chunk, a.kv_entry_bytes),
                    _ => return 0.0,
                };
                let entry = g
                    .attention_shape
                    .as_ref()
                    .map_or(entry, |s| s.kv_entry_bytes);
                g.count as f64 * tokens.min(span as u64) as f64 * entry
            })
            .sum()
    }

    /// Bytes of one routed expert, block scales included.
    pub fn expert_bytes(&self) -> f64 {
        match &self.moe {
            Some(m) => {
                let p = self.expert_params();
                let scales = if m.scale_block > 0 {
                    p / m.scale_block as f64
                } else {
                    0.0
                };
                p * m.weight_dtype.bytes() + scales
            }
            None => 0.0,
        }
    }
}
