//! Measurement points: which op, at which shape and dtype, and what was measured.

use crate::stats::Stats;
use crate::{EngineError, Result};
use kernels::{AttnModeKind, WeightDtype};

/// Where an Engram table lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GatherPlacement {
    /// Host memory in 4 KiB pages (`MADV_NOHUGEPAGE`).
    Host4k,
    /// Host memory in 2 MiB transparent huge pages (`MADV_HUGEPAGE`), when available.
    Host2m,
    /// GPU device memory.
    Device,
    /// Pinned host memory mapped into the GPU's address space (zero-copy).
    Mapped,
}

impl GatherPlacement {
    pub fn name(self) -> &'static str {
        match self {
            GatherPlacement::Host4k => "host4k",
            GatherPlacement::Host2m => "host2m",
            GatherPlacement::Device => "device",
            GatherPlacement::Mapped => "mapped",
        }
    }

    /// Nominal page size (the page the address translation works in).
    pub fn page_bytes(self) -> u64 {
        match self {
            GatherPlacement::Host4k | GatherPlacement::Mapped => 4096,
            GatherPlacement::Host2m | GatherPlacement::Device => 2 << 20,
        }
    }
}

/// Shape of the MoE expert kernel: `experts` experts of `n_out` x `k_in` weights in
/// `dtype`, each applied to `tokens` tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeShape {
    pub dtype: WeightDtype,
    pub tokens: usize,
    pub experts: usize,
    pub n_out: usize,
    pub k_in: usize,
}

impl MoeShape {
    /// A seeded random problem of this shape (every expert hit by every token).
    pub fn problem(&self, seed: u64) -> kernels::MoeProblem {
        kernels::MoeProblem::random(
            self.dtype,
            self.experts,
            self.experts,
            self.tokens,
            self.n_out,
            self.k_in,
            seed,
        )
    }
}

/// One measurable operation with its shape.
#[derive(Debug, Clone, PartialEq)]
pub enum OpSpec {
    /// MoE expert FFN in the decode regime (few tokens per expert): weight streaming.
    MoeDecode(MoeShape),
    /// The same kernel with many tokens per expert: a grouped GEMM.
    GroupedGemm(MoeShape),
    /// Latent-cache attention decode.
    Attention {
        mode: AttnModeKind,
        batch: usize,
        heads: usize,
        dim: usize,
        context: usize,
        page: usize,
    },
    /// DSA indexer scores plus top-k.
    Indexer {
        batch: usize,
        heads: usize,
        dim: usize,
        positions: usize,
        topk: usize,
    },
    /// Random row gather from a table.
    Gather {
        placement: GatherPlacement,
        table_bytes: u64,
        row_bytes: usize,
        rows: usize,
    },
    /// Dispatch/combine all-to-all of `bytes` per peer. With one peer (one device) this
    /// is a device-local copy. More peers need NCCL (TODO: `ncclSend`/`ncclRecv` pairs in a
    /// group over the communicator of `peers` GPUs; not implemented, we have one GPU).
    AllToAll { bytes: u64, peers: usize },
    /// Reference: streaming read of `bytes` (achievable memory bandwidth).
    StreamRead { bytes: u64 },
    /// Reference: dense f32 GEMM `m x k` by `k x n` (achievable GEMM rate).
    Gemm { m: usize, n: usize, k: usize },
}

/// Identity of a measurement point: what the CSV's `op`, `shape`, `dtype` columns hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Point {
    pub op: String,
    /// `key=value` pairs joined by `;`, in a fixed order.
    pub shape: String,
    pub dtype: String,
}

/// A timed point.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    pub point: Point,
    pub stats: Stats,
    /// Bytes moved and flops done by one run.
    pub bytes: u64,
    pub flops: u64,
    pub achieved_bytes_per_s: f64,
    pub achieved_flops_per_s: f64,
    /// Free-form facts about the run (for example `thp=madvise huge_pct=100`).
    pub note: String,
}

impl Measurement {
    pub fn new(point: Point, stats: Stats, bytes: u64, flops: u64, note: String) -> Self {
        let t = stats.median_s;
        let rate = |x: u64| if t > 0.0 { x as f64 / t } else { 0.0 };
        Measurement {
            point,
            stats,
            bytes,
            flops,
            achieved_bytes_per_s: rate(bytes),
            achieved_flops_per_s: rate(flops),
            note,
        }
    }
}

fn shape(pairs: &[(&str, u64)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

impl OpSpec {
    /// Op name as written to the CSV.
    pub fn name(&self) -> &'static str {
        match self {
            OpSpec::MoeDecode(_) => "moe_decode",
            OpSpec::GroupedGemm(_) => "grouped_gemm",
            OpSpec::Attention {
                mode: AttnModeKind::Dense,
                ..
            } => "attn_dense",
            OpSpec::Attention {
                mode: AttnModeKind::Sparse(_),
                ..
            } => "attn_sparse",
            OpSpec::Attention {
                mode: AttnModeKind::Window(_),
                ..
            } => "attn_window",
            OpSpec::Indexer { .. } => "indexer",
            OpSpec::Gather { .. } => "gather",
            OpSpec::AllToAll { .. } => "copy",
            OpSpec::StreamRead { .. } => "ref_stream_read",
            OpSpec::Gemm { .. } => "ref_gemm",
        }
    }

    pub fn point(&self) -> Point {
        let (shape, dtype) = match self {
            OpSpec::MoeDecode(s) | OpSpec::GroupedGemm(s) => (
                shape(&[
                    ("tokens", s.tokens as u64),
                    ("experts", s.experts as u64),
                    ("n", s.n_out as u64),
                    ("k", s.k_in as u64),
                ]),
                s.dtype.name(),
            ),
            OpSpec::Attention {
                mode,
                batch,
                heads,
                dim,
                context,
                page,
            } => {
                let mut p = vec![
                    ("batch", *batch as u64),
                    ("heads", *heads as u64),
                    ("dim", *dim as u64),
                    ("context", *context as u64),
                    ("page", *page as u64),
                ];
                match mode {
                    AttnModeKind::Dense => {}
                    AttnModeKind::Sparse(k) => p.push(("topk", *k as u64)),
                    AttnModeKind::Window(w) => p.push(("window", *w as u64)),
                }
                (shape(&p), "fp8")
            }
            OpSpec::Indexer {
                batch,
                heads,
                dim,
                positions,
                topk,
            } => (
                shape(&[
                    ("batch", *batch as u64),
                    ("heads", *heads as u64),
                    ("dim", *dim as u64),
                    ("positions", *positions as u64),
                    ("topk", *topk as u64),
                ]),
                "fp8",
            ),
            OpSpec::Gather {
                placement,
                table_bytes,
                row_bytes,
                rows,
            } => (
                format!(
                    "placement={};{}",
                    placement.name(),
                    shape(&[
                        ("table_bytes", *table_bytes),
                        ("row_bytes", *row_bytes as u64),
                        ("rows", *rows as u64),
                        ("page", placement.page_bytes()),
                    ])
                ),
                "u8",
            ),
            OpSpec::AllToAll { bytes, peers } => {
                (shape(&[("bytes", *bytes), ("peers", *peers as u64)]), "u8")
            }
            OpSpec::StreamRead { bytes } => (shape(&[("bytes", *bytes)]), "u8"),
            OpSpec::Gemm { m, n, k } => (
                shape(&[("m", *m as u64), ("n", *n as u64), ("k", *k as u64)]),
                "f32",
            ),
        };
        Point {
            op: self.name().to_string(),
            shape,
            dtype: dtype.to_string(),
        }
    }

    /// Approximate bytes one run touches (for sizing rotation buffers).
    pub fn footprint_bytes(&self) -> u64 {
        match self {
            OpSpec::MoeDecode(s) | OpSpec::GroupedGemm(s) => {
                let MoeShape {
                    dtype,
                    tokens,
                    experts,
                    n_out,
                    k_in,
                } = s;
                (experts * (dtype.weight_bytes(*n_out, *k_in) + 4 * tokens * (n_out + k_in))) as u64
            }
            OpSpec::Attention {
                batch,
                dim,
                context,
                ..
            } => (batch * context * (dim + 4)) as u64,
            OpSpec::Indexer {
                batch,
                dim,
                positions,
                ..
            } => (batch * positions * (dim + 8)) as u64,
            OpSpec::Gather {
                row_bytes, rows, ..
            } => (2 * rows * row_bytes) as u64,
            OpSpec::AllToAll { bytes, peers } => 2 * bytes * *peers as u64,
            OpSpec::StreamRead { bytes } => *bytes,
            OpSpec::Gemm { m, n, k } => 4 * (m * k + k * n + m * n) as u64,
        }
    }

    /// Validates the op and returns how many copies of its inputs a measurement
    /// rotates over (enough to defeat a cache of `cache_bytes` when `cfg.rotate`,
    /// within `mem_cap` bytes): the common prologue of every backend's `measure`.
    pub fn prepare(
        &self,
        cfg: &crate::stats::TimingConfig,
        cache_bytes: u64,
        mem_cap: u64,
    ) -> Result<usize> {
        self.validate()?;
        Ok(if cfg.rotate {
            crate::rotation_copies(self.footprint_bytes(), cache_bytes, mem_cap)
        } else {
            1
        })
    }

    /// Rejects shapes the kernels cannot run (before any allocation).
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: &str| {
            Err(EngineError::BadOp {
                op: self.name().into(),
                reason: reason.into(),
            })
        };
        match self {
            OpSpec::MoeDecode(s) | OpSpec::GroupedGemm(s) => {
                let MoeShape {
                    tokens,
                    experts,
                    n_out,
                    k_in,
                    ..
                } = s;
                if *tokens == 0 || *experts == 0 || *n_out == 0 || *k_in == 0 || k_in % 256 != 0 {
                    return bad(
                        "tokens, experts, n must be positive and k a positive multiple of 256",
                    );
                }
            }
            OpSpec::Attention {
                mode,
                batch,
                heads,
                dim,
                context,
                page,
            } => {
                if *batch == 0
                    || *heads == 0
                    || *context == 0
                    || *page == 0
                    || dim % 32 != 0
                    || *dim > 512
                    || *dim == 0
                {
                    return bad("batch, heads, context, page must be positive; dim a multiple of 32 up to 512");
                }
                if matches!(mode, AttnModeKind::Sparse(0) | AttnModeKind::Window(0)) {
                    return bad("topk / window must be positive");
                }
            }
            OpSpec::Indexer {
                batch,
                heads,
                dim,
                positions,
                topk,
            } => {
                if *batch == 0
                    || *heads == 0
                    || *positions == 0
                    || *topk == 0
                    || dim % 32 != 0
                    || *dim > 512
                    || *dim == 0
                {
                    return bad(
                        "batch, heads, positions, topk positive; dim a multiple of 32 up to 512",
                    );
                }
                if heads * dim * 4 > 48 * 1024 {
                    return bad("heads * dim * 4 must fit 48 KiB of shared memory");
                }
            }
            OpSpec::Gather {
                table_bytes,
                row_bytes,
                rows,
                ..
            } => {
                if *row_bytes == 0
                    || row_bytes % 16 != 0
                    || *rows == 0
                    || *table_bytes < *row_bytes as u64
                {
                    return bad("row_bytes a positive multiple of 16, rows positive, table at least one row");
                }
            }
            OpSpec::AllToAll { bytes, peers } => {
                if *bytes == 0 || bytes % 16 != 0 || *peers == 0 {
                    return bad("bytes a positive multiple of 16, peers positive");
                }
                if *peers > 1 {
                    return Err(EngineError::Unsupported(format!(
                        "all-to-all over {peers} peers needs NCCL across GPUs; not implemented \
                         (TODO: NCCL send/recv groups). peers=1 measures the device-local copy"
                    )));
                }
            }
            OpSpec::StreamRead { bytes } => {
                if *bytes == 0 || bytes % 16 != 0 {
                    return bad("bytes must be a positive multiple of 16");
                }
            }
            OpSpec::Gemm { m, n, k } => {
                if *m == 0 || *n == 0 || *k == 0 {
                    return bad("m, n, k must be positive");
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_stable_and_distinct() {
        let a = OpSpec::MoeDecode(MoeShape {
            dtype: WeightDtype::Fp8,
            tokens: 1,
            experts: 8,
            n_out: 2048,
            k_in: 7168,
        });
        assert_eq!(a.point().op, "moe_decode");
        assert_eq!(a.point().shape, "tokens=1;experts=8;n=2048;k=7168");
        assert_eq!(a.point().dtype, "fp8");
        let g = OpSpec::Gather {
            placement: GatherPlacement::Host2m,
            table_bytes: 1 << 30,
            row_bytes: 256,
            rows: 4096,
        };
        assert_eq!(
            g.point().shape,
            "placement=host2m;table_bytes=1073741824;row_bytes=256;rows=4096;page=2097152"
        );
        let s = OpSpec::Attention {
            mode: AttnModeKind::Sparse(2048),
            batch: 1,
            heads: 16,
            dim: 512,
            context: 65536,
            page: 64,
        };
        assert_eq!(s.name(), "attn_sparse");
        assert!(s.point().shape.ends_with("topk=2048"));
    }

    #[test]
    fn validation() {
        assert!(OpSpec::Gemm { m: 0, n: 1, k: 1 }.validate().is_err());
        assert!(OpSpec::MoeDecode(MoeShape {
            dtype: WeightDtype::Bf16,
            tokens: 1,
            experts: 1,
            n_out: 8,
            k_in: 100
        })
        .validate()
        .is_err());
        let e = OpSpec::AllToAll {
            bytes: 1024,
            peers: 4,
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("NCCL"), "{e}");
        assert!(OpSpec::AllToAll {
            bytes: 1024,
            peers: 1
        }
        .validate()
        .is_ok());
    }

    #[test]
    fn measurement_rates() {
        let st = Stats {
            median_s: 0.5,
            p10_s: 0.4,
            p90_s: 0.6,
            samples: 3,
        };
        let m = Measurement::new(
            OpSpec::StreamRead { bytes: 16 }.point(),
            st,
            100,
            10,
            String::new(),
        );
        assert_eq!(m.achieved_bytes_per_s, 200.0);
        assert_eq!(m.achieved_flops_per_s, 20.0);
    }
}
