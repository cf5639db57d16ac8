//! What a model holds, as `twin model show` says it to check a model file (or an
//! imported config) against its model card: parameters (total, active per token),
//! weight bytes by part and dtype, the attention as a card names it, KV bytes per token
//! and the KV cache's dtype, the state a request keeps, and the layers by kind and as a
//! pattern.

use serde_json::Value;
use spec::dtype::Dtype;
use spec::model::{AttentionKind, FfnKind, Model};
use spec::weights::Weights;

/// KV bytes per token at a dtype `--kv-dtype` asks for: (the dtype, bytes per layer
/// entry, bytes per token).
pub type KvAt = (Dtype, f64, f64);

/// `model`'s KV bytes per token were its cache held in `d`.
pub fn kv_at(m: &Model, d: Dtype) -> KvAt {
    let entry = m.attention.kv_dim as f64 * d.bytes();
    (d, entry, m.kv_bytes_per_token_at(entry))
}

/// `model show`'s text.
pub fn show_text(m: &Model, kv_at: Option<KvAt>) -> String {
    let g = |x: f64| format!("{:.2}B", x / 1e9);
    let mut s = format!("model: {}\n", m.name);
    if !m.description.is_empty() {
        s += &format!("  {}\n", m.description);
    }
    s += &weights_text(&m.weights());
    s += &format!("attention: {}\n", attention_name(m));
    s += &format!(
        "KV per token: {:.0} B ({:.0} B per layer entry)\n",
        m.kv.bytes_per_token, m.attention.kv_entry_bytes
    );
    s += &format!("KV cache: {}\n", kv_dtype_line(m));
    if let Some((d, entry, b)) = kv_at {
        s += &format!("KV per token at {d}: {b:.0} B ({entry:.0} B per layer entry)\n");
    }
    for l in state_lines(m) {
        s += &format!("{l}\n");
    }
    let kinds: Vec<String> = m
        .layers_by_kind()
        .iter()
        .map(|(at, f, c)| format!("{c} x {}", kind_name(*at, *f)))
        .collect();
    s += &format!("layers: {} ({})\n", m.layer_count(), kinds.join(", "));
    if m.layers.len() > 1 || m.layers.iter().any(|g| g.count > 1) {
        s += &format!("pattern: {}\n", pattern_line(m));
    }
    if m.vision_params > 0.0 {
        s += &format!(
            "vision tower: {} parameters, not priced\n",
            g(m.vision_params)
        );
    }
    s
}

fn kind_name(a: AttentionKind, f: FfnKind) -> String {
    let attn = match a {
        AttentionKind::Dense => "full attention",
        AttentionKind::Sparse => "sparse attention",
        AttentionKind::Compressed => "compressed attention",
        AttentionKind::Window => "sliding-window attention",
        AttentionKind::Chunked => "chunked attention",
        AttentionKind::Linear => "linear attention",
        AttentionKind::Mamba => "Mamba-2",
        AttentionKind::None => "",
    };
    let ffn = match f {
        FfnKind::Dense => "dense FFN",
        FfnKind::Moe => "MoE FFN",
        FfnKind::None => "",
    };
    match (attn.is_empty(), ffn.is_empty()) {
        (false, false) => format!("{attn} + {ffn}"),
        (true, false) => ffn.to_string(),
        (false, true) => attn.to_string(),
        (true, true) => "identity".to_string(),
    }
}

/// A layer in a few letters, for the pattern line: its mixer and its FFN.
fn short(a: AttentionKind, ratio: u32, f: FfnKind) -> String {
    let attn = match a {
        AttentionKind::Dense => "attn".to_string(),
        AttentionKind::Sparse => format!(
            "sparse{}",
            if ratio > 1 {
                format!("/{ratio}")
            } else {
                String::new()
            }
        ),
        AttentionKind::Compressed => format!("comp/{ratio}"),
        AttentionKind::Window => "swa".to_string(),
        AttentionKind::Chunked => "chunk".to_string(),
        AttentionKind::Linear => "linear".to_string(),
        AttentionKind::Mamba => "mamba".to_string(),
        AttentionKind::None => String::new(),
    };
    let ffn = match f {
        FfnKind::Dense => "mlp",
        FfnKind::Moe => "moe",
        FfnKind::None => "",
    };
    match (attn.is_empty(), ffn.is_empty()) {
        (false, false) => format!("{attn}+{ffn}"),
        (true, _) => ffn.to_string(),
        (false, true) => attn,
    }
}

/// The layer schedule in one line: runs of one kind (`3 linear+moe`), and a
/// repeating block of runs written once with its count (`(3 linear+moe, attn+moe) x 15`).
pub fn pattern_line(m: &Model) -> String {
    let mut runs: Vec<(String, u32)> = Vec::new();
    for l in m.expand_layers() {
        let k = short(l.attention, l.compress_ratio, l.ffn);
        match runs.last_mut() {
            Some((r, n)) if *r == k => *n += 1,
            _ => runs.push((k, 1)),
        }
    }
    let show = |rs: &[(String, u32)]| {
        rs.iter()
            .map(|(k, n)| {
                if *n > 1 {
                    format!("{n} {k}")
                } else {
                    k.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    // The shortest block that repeats from some start to the end, at least twice.
    for start in 0..runs.len().min(4) {
        let rest = &runs[start..];
        for p in 1..=rest.len() / 2 {
            if rest.len().is_multiple_of(p) && (p..rest.len()).all(|i| rest[i] == rest[i - p]) {
                let head = if start > 0 {
                    format!("{}, ", show(&runs[..start]))
                } else {
                    String::new()
                };
                return format!("{head}({}) x {}", show(&rest[..p]), rest.len() / p);
            }
        }
    }
    // Else, greedily, the block that repeats longest from each place.
    let mut out = Vec::new();
    let mut i = 0;
    while i < runs.len() {
        let best = (1..=8.min(runs.len() - i))
            .map(|p| {
                let r = (1..)
                    .take_while(|k| {
                        i + (k + 1) * p <= runs.len()
                            && runs[i + k * p..i + (k + 1) * p] == runs[i..i + p]
                    })
                    .count()
                    + 1;
                (p, r)
            })
            .filter(|(_, r)| *r >= 2)
            .max_by_key(|(p, r)| (p * r, std::cmp::Reverse(*p)));
        match best {
            Some((p, r)) => {
                out.push(format!("({}) x {r}", show(&runs[i..i + p])));
                i += p * r;
            }
            None => {
                out.push(show(&runs[i..i + 1]));
                i += 1;
            }
        }
    }
    out.join(", ")
}

/// `model show --json`: the figures as one object.
pub fn show_json(m: &Model, kv_at: Option<KvAt>) -> Value {
    let w = m.weights();
    let parts: Vec<_> = w
        .parts
        .iter()
        .map(|p| {
            serde_json::json!({"part": p.name, "dtype": p.dtype.name(), "params": p.params,
                "active_params": p.active, "bytes": p.bytes})
        })
        .collect();
    serde_json::json!({
        "model": m.name,
        "total_params": w.total(),
        "active_params": w.active(),
        "active_params_without_embedding": w.active_without_embedding(),
        "mtp_params": w.mtp_params,
        "weight_bytes": w.bytes(),
        "weight_bytes_by_dtype": w.bytes_by_dtype().iter().map(|(d, b)| (d.name().to_string(), *b)).collect::<std::collections::BTreeMap<_, _>>(),
        "kv_bytes_per_token": m.kv.bytes_per_token,
        "kv_cache": kv_dtype_line(m),
        "kv_bytes_per_token_at": kv_at.map(|(d, _, b)| serde_json::json!({"dtype": d.name(), "bytes": b})),
        "state_bytes_per_request": m.state_bytes_per_request(),
        "local_kv_bytes_per_request_max": m.local_kv_bytes(u64::MAX),
        "vision_params": m.vision_params,
        "layers": m.layers_by_kind().iter().map(|(at, f, c)| serde_json::json!({"kind": kind_name(*at, *f), "count": c})).collect::<Vec<_>>(),
        "layer_pattern": pattern_line(m),
        "parts": parts,
    })
}

/// The KV cache's element type (bytes per element of an entry, scales included) and
/// where it came from (the entry's provenance).
fn kv_dtype_line(m: &Model) -> String {
    let a = &m.attention;
    let per = if a.kv_dim > 0 {
        a.kv_entry_bytes / a.kv_dim as f64
    } else {
        0.0
    };
    let dtype = match per {
        x if x >= 3.5 => "fp32",
        x if x >= 1.75 => "bf16",
        x if x >= 0.9 => "fp8",
        x if x > 0.0 => "fp4",
        _ => "none",
    };
    let source = m
        .provenance
        .get("attention.kv_entry_bytes")
        .map_or("no provenance given", String::as_str);
    format!("{dtype} ({per:.3} B per element, scales included); {source}")
}

/// Bytes as MB or GB.
fn mb(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else {
        format!("{:.2} MB", b / 1e6)
    }
}

/// The state a request keeps beside its KV: recurrent states, and the KV of its
/// sliding-window and chunked layers (at most their span).
fn state_lines(m: &Model) -> Vec<String> {
    let mut out = Vec::new();
    let state = m.state_bytes_per_request();
    if state > 0.0 {
        let n = |k: AttentionKind| {
            m.expand_layers()
                .iter()
                .filter(|l| l.attention == k)
                .count()
        };
        let mut parts = Vec::new();
        if let Some(l) = &m.linear_attention {
            parts.push(format!(
                "{} linear-attention layers x {}",
                n(AttentionKind::Linear),
                mb(l.state_bytes())
            ));
        }
        if let Some(x) = &m.mamba {
            parts.push(format!(
                "{} Mamba-2 layers x {}",
                n(AttentionKind::Mamba),
                mb(x.state_bytes())
            ));
        }
        out.push(format!(
            "state per request: {} fixed ({}), reserved from the KV pool as {:.0} KV tokens",
            mb(state),
            parts.join(", "),
            (state / m.kv.bytes_per_token.max(1.0)).ceil()
        ));
    }
    let a = &m.attention;
    let span = m.local_kv_bytes(u64::MAX);
    if span > 0.0 {
        out.push(format!(
            "local KV per request: at most {} ({})",
            mb(span),
            [(a.window, "sliding window"), (a.chunk, "chunk")]
                .iter()
                .filter(|(t, _)| *t > 0)
                .map(|(t, what)| format!("{what} {t} tokens"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    out
}

/// The attention as a model card names it.
fn attention_name(m: &Model) -> String {
    let a = &m.attention;
    let mut s = if a.kv_up_params > 0 {
        format!(
            "MLA, {} heads, latent {} + rope {} per token",
            a.heads,
            a.value_dim,
            a.kv_dim.saturating_sub(a.value_dim)
        )
    } else if a.kv_heads >= a.heads {
        format!("MHA, {} heads of {}", a.heads, a.qk_head_dim)
    } else {
        format!(
            "GQA, {} query heads / {} KV heads of {}",
            a.heads, a.kv_heads, a.qk_head_dim
        )
    };
    if a.window > 0 {
        s.push_str(&format!(", sliding window {}", a.window));
    }
    if a.sinks {
        s.push_str(", attention sinks");
    }
    if let Some(i) = &a.indexer {
        s.push_str(&format!(", indexer top-{}", i.top_k));
    }
    s
}

/// `model show`'s parameter counts and weight bytes, overall and part by part.
fn weights_text(w: &Weights) -> String {
    let g = |x: f64| format!("{:.2}B", x / 1e9);
    let mut s = format!(
        "parameters: {} total, {} active per token ({} without the input embedding){}\n",
        g(w.total()),
        g(w.active()),
        g(w.active_without_embedding()),
        if w.mtp_params > 0.0 {
            format!("; MTP module {} more", g(w.mtp_params))
        } else {
            String::new()
        }
    );
    s += &format!(
        "  {:<16} {:>6} {:>10} {:>10} {:>10}\n",
        "part", "dtype", "params", "active", "GB"
    );
    for p in &w.parts {
        s += &format!(
            "  {:<16} {:>6} {:>10} {:>10} {:>10.2}\n",
            p.name,
            p.dtype.name(),
            g(p.params),
            g(p.active),
            p.bytes / 1e9
        );
    }
    let by: Vec<String> = w
        .bytes_by_dtype()
        .iter()
        .map(|(d, b)| format!("{} {:.1} GB", d.name(), b / 1e9))
        .collect();
    s + &format!(
        "weights: {:.1} GB with block scales ({})\n",
        w.bytes() / 1e9,
        by.join(", ")
    )
}
