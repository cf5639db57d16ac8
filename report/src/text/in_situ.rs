//! The in-situ words `forward` prints: where the in-situ terms of a price come from
//! (one line, always), and one layer as an in-situ breakdown reports it.

use serde_json::json;
use sim::cost::insitu::{InSituLayer, LAYER_CATEGORIES};
use spec::insitu::{Category, Stream};
use std::fmt::Write as _;

/// The categories of `stream` with time in `l`, bubbles and launch gaps last.
fn entries(l: &InSituLayer, stream: Stream) -> Vec<(Category, f64)> {
    LAYER_CATEGORIES
        .into_iter()
        .chain([Category::Bubble, Category::Launch])
        .map(|c| (c, l.get(stream, c)))
        .filter(|&(_, s)| s > 0.0)
        .collect()
}

/// The layer as a table: ms per stream and category, and the layer's wall time.
pub fn render_layer(out: &mut String, l: &InSituLayer, two_batch: bool) {
    writeln!(
        out,
        "\nin-situ layer ({}), ms:",
        if two_batch {
            "the middle layer, both micro-batches"
        } else {
            "one MoE layer"
        }
    )
    .unwrap();
    writeln!(out, "{:<8} {:<17} {:>9}", "stream", "category", "ms").unwrap();
    for stream in Stream::ALL {
        if stream == Stream::Comm && !l.comm_stream {
            continue;
        }
        let mut sum = 0.0;
        for (c, s) in entries(l, stream) {
            sum += s;
            writeln!(out, "{:<8} {:<17} {:>9.3}", stream.key(), c.key(), s * 1e3).unwrap();
        }
        writeln!(
            out,
            "{:<8} {:<17} {:>9.3}",
            stream.key(),
            "total",
            sum * 1e3
        )
        .unwrap();
    }
    writeln!(
        out,
        "{:<8} {:<17} {:>9.3}",
        "layer",
        "overall",
        l.layer_s * 1e3
    )
    .unwrap();
}

/// The layer as JSON: `{layer_ms, compute: {category: ms}, comm: {...}}`.
pub fn layer_json(l: &InSituLayer) -> serde_json::Value {
    let side = |stream: Stream| {
        let mut m = serde_json::Map::new();
        for (c, s) in entries(l, stream) {
            m.insert(c.key().into(), json!(s * 1e3));
        }
        serde_json::Value::Object(m)
    };
    json!({
        "layer_ms": l.layer_s * 1e3,
        "compute": side(Stream::Compute),
        "comm": if l.comm_stream { side(Stream::Comm) } else { json!({}) },
    })
}
