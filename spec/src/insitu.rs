//! The words of an in-situ breakdown: where one layer's time goes inside a running
//! deployment, by stream and op category.
//!
//! A profiler trace of a real run (`calibration::trace`), a published per-layer
//! breakdown (a CSV of category times), and twin's own prediction of a step (the
//! analytic model's in-situ layer) all come out as a [`LayerBreakdown`], so that one can
//! be fitted to or checked against another category by category.

use serde::{Deserialize, Serialize};

/// The stream a category's time is spent on. In prefill the normal all-to-all kernels
/// run on their own (communication) stream beside compute; in decode the low-latency
/// kernels' send and receive halves run on the compute stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Compute,
    Comm,
}

impl Stream {
    pub const ALL: [Stream; 2] = [Stream::Compute, Stream::Comm];

    pub fn key(self) -> &'static str {
        match self {
            Stream::Compute => "compute",
            Stream::Comm => "comm",
        }
    }

    pub fn from_key(key: &str) -> Option<Stream> {
        Stream::ALL.into_iter().find(|s| s.key() == key)
    }
}

/// What a slice of a layer's time is: an op class (the kernels a rules file maps to
/// it), or one of the two derived categories, a stream's idle time inside the layer
/// (`bubble`) and the gaps between kernels a CUDA graph or the host leaves (`launch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Routed-expert grouped GEMMs.
    Moe,
    /// Core attention over the KV cache (MLA, FlashAttention, FlashInfer, ...).
    Attention,
    /// Sparse-attention indexer scores.
    Indexer,
    /// Dense projections, shared experts, gate, LM head: every GEMM that is not a
    /// routed expert's.
    Gemm,
    /// Norms, RoPE, activations, quantisation, top-k, permutes, copies inside a layer.
    Elementwise,
    /// All-to-all dispatch (its data movement).
    Dispatch,
    /// The notify / synchronisation kernel before a dispatch.
    DispatchBarrier,
    /// All-to-all combine.
    Combine,
    /// The notify / synchronisation kernel before a combine.
    CombineBarrier,
    /// Tensor-parallel all-reduce (NCCL, custom one- and two-shot kernels).
    Allreduce,
    /// Host-device and device-device copies.
    Memcpy,
    /// Host-memory table gathers (Engram).
    Gather,
    /// A stream idle inside the layer while the other stream works.
    Bubble,
    /// Gaps between kernels on a stream with nothing running on the other.
    Launch,
}

impl Category {
    pub const ALL: [Category; 14] = [
        Category::Moe,
        Category::Attention,
        Category::Indexer,
        Category::Gemm,
        Category::Elementwise,
        Category::Dispatch,
        Category::DispatchBarrier,
        Category::Combine,
        Category::CombineBarrier,
        Category::Allreduce,
        Category::Memcpy,
        Category::Gather,
        Category::Bubble,
        Category::Launch,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Category::Moe => "moe",
            Category::Attention => "attention",
            Category::Indexer => "indexer",
            Category::Gemm => "gemm",
            Category::Elementwise => "elementwise",
            Category::Dispatch => "dispatch",
            Category::DispatchBarrier => "dispatch_barrier",
            Category::Combine => "combine",
            Category::CombineBarrier => "combine_barrier",
            Category::Allreduce => "allreduce",
            Category::Memcpy => "memcpy",
            Category::Gather => "gather",
            Category::Bubble => "bubble",
            Category::Launch => "launch",
        }
    }

    pub fn from_key(key: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.key() == key)
    }

    /// Whether kernels of this category move data between GPUs.
    pub fn is_communication(self) -> bool {
        matches!(
            self,
            Category::Dispatch
                | Category::DispatchBarrier
                | Category::Combine
                | Category::CombineBarrier
                | Category::Allreduce
        )
    }

    /// Whether the category is derived from a stream's timeline (idle time), not from
    /// kernels.
    pub fn is_derived(self) -> bool {
        matches!(self, Category::Bubble | Category::Launch)
    }
}

/// One category's seconds on one stream, per layer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub stream: Stream,
    pub category: Category,
    pub seconds: f64,
}

/// Where one (average) layer's time goes: seconds per stream and category, and the
/// layer's wall time. `layers` is how many layers it is the mean of.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LayerBreakdown {
    pub layers: f64,
    pub layer_s: f64,
    pub entries: Vec<Entry>,
}

impl LayerBreakdown {
    /// Seconds of `category` on `stream` (0 when absent).
    pub fn get(&self, stream: Stream, category: Category) -> f64 {
        self.entries
            .iter()
            .filter(|e| e.stream == stream && e.category == category)
            .map(|e| e.seconds)
            .sum()
    }

    /// Seconds of `category` over both streams.
    pub fn category(&self, category: Category) -> f64 {
        Stream::ALL.iter().map(|&s| self.get(s, category)).sum()
    }

    /// Seconds on `stream`, every category (bubbles included).
    pub fn stream(&self, stream: Stream) -> f64 {
        self.entries
            .iter()
            .filter(|e| e.stream == stream)
            .map(|e| e.seconds)
            .sum()
    }

    /// Adds `seconds` to `category` on `stream`.
    pub fn add(&mut self, stream: Stream, category: Category, seconds: f64) {
        match self
            .entries
            .iter_mut()
            .find(|e| e.stream == stream && e.category == category)
        {
            Some(e) => e.seconds += seconds,
            None => self.entries.push(Entry {
                stream,
                category,
                seconds,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_sums_add_up() {
        for c in Category::ALL {
            assert_eq!(Category::from_key(c.key()), Some(c));
        }
        assert_eq!(Category::from_key("nope"), None);
        let mut b = LayerBreakdown::default();
        b.add(Stream::Compute, Category::Moe, 2.0);
        b.add(Stream::Compute, Category::Moe, 1.0);
        b.add(Stream::Comm, Category::Dispatch, 4.0);
        b.add(Stream::Compute, Category::Bubble, 0.5);
        assert_eq!(b.get(Stream::Compute, Category::Moe), 3.0);
        assert_eq!(b.stream(Stream::Compute), 3.5);
        assert_eq!(b.category(Category::Dispatch), 4.0);
        assert_eq!(b.entries.len(), 3);
    }
}
