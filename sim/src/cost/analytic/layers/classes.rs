//! The attention classes and layer types of a model: which layers cost the same per
//! token, and what each class's token mixer is made of (the model's own attention, a
//! group's own attention shape, a recurrent mixer, or none).

use super::{dense, elementwise, AttnClass, Compiled, LayerType, Split, TypeFfn};
use spec::model::{AttentionKind, FfnKind, Layer};
use spec::{hardware::Hardware, model::Model};

/// A class's identity: kind, compression, indexer, window branch, own shape (the
/// same shape, whichever group it is written in).
fn same_class(model: &Model, x: &AttnClass, l: &Layer, shape: Option<u32>) -> bool {
    let shape_of =
        |g: Option<u32>| g.and_then(|g| model.layers[g as usize].attention_shape.as_ref());
    x.kind == l.attention
        && x.ratio == l.compress_ratio as f64
        && x.has_indexer == l.has_indexer
        && x.window_branch == (l.window_branch && l.attention != AttentionKind::Window)
        && shape_of(x.shape) == shape_of(shape)
}

/// A class with its identity set and its costs still to fill (`fill`).
fn blank(l: &Layer, shape: Option<u32>) -> AttnClass {
    AttnClass {
        kind: l.attention,
        count: 1.0,
        ratio: l.compress_ratio as f64,
        has_indexer: l.has_indexer,
        window_branch: l.window_branch && l.attention != AttentionKind::Window,
        shape,
        main: true,
        proj: Vec::new(),
        proj_bytes: 0.0,
        kv_share: 1.0,
        entry_bytes: 0.0,
        window_entry_bytes: 0.0,
        span: 0,
        pair_flops: 0.0,
        pair_flops_unabsorbed: 0.0,
        sink_flops: 0.0,
        state_bytes: 0.0,
        chunk_state_bytes: 0.0,
        io_bytes: 0.0,
        decode_flops: 0.0,
        prefill_flops: 0.0,
        chunk: 1.0,
        elem_bytes: 0.0,
        kernels: 0.0,
        elem_kernels: 0.0,
    }
}

/// The FFN of layer `l` of `model`, with `widths` the dense widths in order.
fn type_ffn(model: &Model, l: &Layer, widths: &mut Vec<u32>) -> TypeFfn {
    match l.ffn {
        FfnKind::Moe => TypeFfn::Moe,
        FfnKind::None => TypeFfn::None,
        FfnKind::Dense => {
            let w = model.ffn_width_of(&model.layers[l.group as usize]);
            TypeFfn::Dense(match widths.iter().position(|x| *x == w) {
                Some(i) => i,
                None => {
                    widths.push(w);
                    widths.len() - 1
                }
            })
        }
    }
}

/// The attention classes, the layer types and every layer's type index, in order.
pub(super) fn layer_types(
    model: &Model,
    expanded: &[Layer],
) -> (Vec<AttnClass>, Vec<LayerType>, Vec<u8>) {
    let mut classes: Vec<AttnClass> = Vec::new();
    let mut types: Vec<LayerType> = Vec::new();
    let mut sequence = Vec::with_capacity(expanded.len());
    // Dense widths in the order `dense_widths` finds them: the model's own first.
    let mut widths: Vec<u32> = model.dense_ffn.iter().map(|d| d.ffn).collect();
    for l in expanded {
        let g = &model.layers[l.group as usize];
        let shape = g.attention_shape.as_ref().map(|_| l.group);
        let ci = match classes.iter().position(|x| same_class(model, x, l, shape)) {
            Some(i) => {
                classes[i].count += 1.0;
                i
            }
            None => {
                classes.push(blank(l, shape));
                classes.len() - 1
            }
        };
        let ffn = type_ffn(model, l, &mut widths);
        let ti = match types.iter().position(|t| t.class == ci && t.ffn == ffn) {
            Some(i) => {
                types[i].count += 1.0;
                i
            }
            None => {
                types.push(LayerType {
                    class: ci,
                    moe: ffn == TypeFfn::Moe,
                    ffn,
                    count: 1.0,
                });
                types.len() - 1
            }
        };
        sequence.push(ti as u8);
    }
    (classes, types, sequence)
}

impl Compiled {
    /// Fills the classes of `expanded` and the types and sequence over them.
    pub(super) fn add_classes(
        &mut self,
        hw: &Hardware,
        model: &Model,
        split: &Split,
        expanded: &[Layer],
    ) {
        let (mut classes, types, sequence) = layer_types(model, expanded);
        for c in classes.iter_mut() {
            self.fill(hw, model, split, c);
        }
        let ar = self.allreduces_per_layer / 2.0;
        let has_mixer = |t: &LayerType| classes[t.class].kind != AttentionKind::None;
        self.allreduces_per_pass = types
            .iter()
            .map(|t| {
                let mixer = if has_mixer(t) { ar } else { 0.0 };
                let ffn = if t.ffn == TypeFfn::None { 0.0 } else { ar };
                t.count * (mixer + ffn)
            })
            .sum();
        self.mixer_layers_per_pass = types.iter().filter(|t| has_mixer(t)).map(|t| t.count).sum();
        let main_layers: f64 = classes.iter().filter(|c| c.main).map(|c| c.count).sum();
        self.mixer_bytes = self.attn_proj_bytes * main_layers
            + classes
                .iter()
                .filter(|c| !c.main)
                .map(|c| c.count * c.proj_bytes)
                .sum::<f64>();
        self.classes = classes;
        self.types = types;
        self.sequence = sequence;
    }

    /// One class's costs: the model's attention (`main`), a group's own shape, a
    /// recurrent mixer, or none.
    fn fill(&self, hw: &Hardware, model: &Model, split: &Split, c: &mut AttnClass) {
        let a = &model.attention;
        c.span = if c.kind == AttentionKind::Chunked {
            a.chunk
        } else {
            a.window
        } as u64;
        c.window_entry_bytes = a.window_entry_bytes;
        match c.kind {
            AttentionKind::None => {
                c.main = false;
                let ar = if split.tp > 1.0 { 1.0 } else { 0.0 };
                c.elem_bytes = 8.0 * model.hidden as f64;
                c.kernels = 1.0 + ar;
                c.elem_kernels = 1.0;
                c.kv_share = self.kv_share;
            }
            AttentionKind::Linear | AttentionKind::Mamba => {
                self.fill_recurrent(hw, model, split, c)
            }
            _ => match c.shape {
                Some(g) => self.fill_shaped(hw, model, split, g, c),
                None => {
                    c.kv_share = self.kv_share;
                    c.entry_bytes = a.kv_entry_bytes;
                    c.pair_flops = self.pair_flops_absorbed;
                    c.pair_flops_unabsorbed = self.pair_flops_unabsorbed;
                    c.sink_flops = self.sink_flops_per_query;
                    c.elem_bytes = self.elem_attn_bytes;
                    c.kernels = self.kernels_attn;
                    c.elem_kernels = self.elem_kernels_attn;
                }
            },
        }
    }

    /// A group's own grouped-query attention shape.
    fn fill_shaped(&self, hw: &Hardware, model: &Model, split: &Split, g: u32, c: &mut AttnClass) {
        let s = model.layers[g as usize]
            .attention_shape
            .as_ref()
            .expect("a shaped class names a group with a shape");
        let a = &model.attention;
        let (h, tp) = (model.hidden as f64, split.tp);
        let heads = s.heads as f64 / tp;
        let kv_split = tp.min(s.kv_heads.max(1) as f64);
        let gate = if a.output_gate { 2.0 } else { 1.0 };
        let (aw, sb) = (a.weight_dtype, model.dense_scale_block);
        c.main = false;
        c.proj = vec![
            dense(
                hw,
                gate * heads * s.qk_head_dim as f64 + s.kv_dim as f64 / kv_split,
                h,
                aw,
                sb,
            ),
            dense(hw, h, heads * s.v_head_dim as f64, aw, sb),
        ];
        let params = gate * h * heads * s.qk_head_dim as f64
            + h * s.kv_dim as f64 / kv_split
            + heads * s.v_head_dim as f64 * h;
        c.proj_bytes = params * aw.bytes();
        c.kv_share = 1.0 / kv_split;
        c.entry_bytes = s.kv_entry_bytes;
        c.window_entry_bytes = s.kv_entry_bytes;
        c.pair_flops = 2.0 * heads * (s.qk_head_dim + s.v_head_dim) as f64;
        c.pair_flops_unabsorbed = c.pair_flops;
        c.sink_flops = if a.sinks { 2.0 * heads } else { 0.0 };
        let v = s.v_head_dim as f64;
        c.elem_bytes =
            elementwise::shaped_attention(model, heads, v, s.kv_dim as f64, s.kv_entry_bytes);
        c.kernels = self.kernels_attn;
        c.elem_kernels = self.elem_kernels_attn;
    }

    /// A gated DeltaNet or Mamba-2 mixer: its projections split by heads over TP, its
    /// state per request, and its kernels' arithmetic.
    fn fill_recurrent(&self, hw: &Hardware, model: &Model, split: &Split, c: &mut AttnClass) {
        let (h, tp) = (model.hidden as f64, split.tp);
        let (inner, out, heads, w, state, chunk_state, dec, pre, chunk) = match c.kind {
            AttentionKind::Linear => {
                let l = model
                    .linear_attention
                    .as_ref()
                    .expect("validated: linear table");
                let (i, o) = l.projection_widths();
                (
                    i,
                    o,
                    l.value_heads,
                    l.weight_dtype,
                    l.state_bytes(),
                    l.chunk_state_bytes(),
                    l.decode_flops_per_token(),
                    l.prefill_flops_per_token(),
                    l.chunk,
                )
            }
            _ => {
                let m = model.mamba.as_ref().expect("validated: mamba table");
                let (i, o) = m.projection_widths();
                (
                    i,
                    o,
                    m.heads,
                    m.weight_dtype,
                    m.state_bytes(),
                    m.chunk_state_bytes(),
                    m.decode_flops_per_token(),
                    m.prefill_flops_per_token(),
                    m.chunk,
                )
            }
        };
        // Heads split over TP (up to their number); each GPU keeps its heads' state.
        let share = 1.0 / tp.min(heads.max(1) as f64);
        let block = if w.bytes() < 2.0 {
            model.dense_scale_block
        } else {
            0
        };
        c.main = false;
        c.proj = vec![
            dense(hw, inner * share, h, w, block),
            dense(hw, h, out * share, w, block),
        ];
        c.proj_bytes = (inner + out) * h * share * w.bytes();
        c.kv_share = share;
        c.state_bytes = state * share;
        c.chunk_state_bytes = chunk_state * share;
        // The kernel reads its inputs (q, k, v, gates: BF16) and writes its output.
        c.io_bytes = 2.0 * (inner + out) * share;
        c.decode_flops = dec * share;
        c.prefill_flops = pre * share;
        c.chunk = chunk.max(1) as f64;
        c.elem_bytes = elementwise::recurrent_bytes(model, inner * share, out * share, w);
        let ar = if tp > 1.0 { 1.0 } else { 0.0 };
        // Two norms, the convolution, the gated norm; the two projections; the
        // all-reduce; quantisation of both projections' inputs at 8 bits.
        let quant = if w.bytes() <= 1.0 { 2.0 } else { 0.0 };
        c.kernels = 4.0 + 2.0 + ar + quant;
        c.elem_kernels = 4.0 + quant;
    }
}
