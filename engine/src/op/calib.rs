//! Shapes of the calibration ops (the analytic cost model's families) and the reference
//! peaks: name, point, bytes/flops and input generation of each.

use super::{GatherPlacement, OpShape, Point};
use crate::{EngineError, Result};
use kernels::{AttnModeKind, AttnProblem, IndexerProblem, WeightDtype};

fn bad<T>(op: &str, reason: &str) -> Result<T> {
    Err(EngineError::BadOp {
        op: op.into(),
        reason: reason.into(),
    })
}

/// Shape of the MoE expert kernel: `experts` experts of `n_out` x `k_in` weights in
/// `dtype`, each applied to `tokens` tokens (measured as `moe_decode` or `grouped_gemm`).
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

impl OpShape for MoeShape {
    fn name(&self) -> &'static str {
        "moe_decode"
    }
    fn point(&self) -> Point {
        Point::new(
            self.name(),
            &[
                ("tokens", self.tokens as u64),
                ("experts", self.experts as u64),
                ("n", self.n_out as u64),
                ("k", self.k_in as u64),
            ],
            self.dtype.name(),
        )
    }
    fn bytes(&self) -> u64 {
        let per_expert = self.dtype.weight_bytes(self.n_out, self.k_in)
            + 4 * self.dtype.scale_count(self.n_out, self.k_in);
        (self.experts * (per_expert + 4 * self.tokens * (self.k_in + self.n_out))) as u64
    }
    fn flops(&self) -> u64 {
        2 * (self.experts * self.tokens * self.n_out * self.k_in) as u64
    }
    fn footprint_bytes(&self) -> u64 {
        let MoeShape {
            dtype,
            tokens,
            experts,
            n_out,
            k_in,
        } = *self;
        (experts * (dtype.weight_bytes(n_out, k_in) + 4 * tokens * (n_out + k_in))) as u64
    }
    fn validate(&self) -> Result<()> {
        let MoeShape {
            tokens,
            experts,
            n_out,
            k_in,
            ..
        } = *self;
        if tokens == 0 || experts == 0 || n_out == 0 || k_in == 0 || k_in % 256 != 0 {
            return bad(
                self.name(),
                "tokens, experts, n must be positive and k a positive multiple of 256",
            );
        }
        Ok(())
    }
}

/// Latent-cache attention: `batch` requests with `context` cached positions, each
/// bringing `new_tokens` query rows (1 = decode; more = the causal rows of a prefill
/// chunk or an MTP verification, row `i` seeing `context + i + 1` positions).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnShape {
    pub mode: AttnModeKind,
    pub batch: usize,
    pub heads: usize,
    pub dim: usize,
    pub context: usize,
    pub page: usize,
    pub new_tokens: usize,
    /// Input copies to rotate over (the live plan: one per layer); `None` = sized to
    /// defeat the last-level cache.
    pub copies: Option<usize>,
}

impl AttnShape {
    /// Decode rows (one query per request).
    pub fn decode(
        mode: AttnModeKind,
        batch: usize,
        heads: usize,
        dim: usize,
        context: usize,
        page: usize,
    ) -> AttnShape {
        AttnShape {
            mode,
            batch,
            heads,
            dim,
            context,
            page,
            new_tokens: 1,
            copies: None,
        }
    }

    /// The seeded problem of this shape.
    pub fn problem(&self, seed: u64) -> AttnProblem {
        if self.new_tokens == 1 {
            AttnProblem::random(
                self.batch,
                self.heads,
                self.dim,
                self.context,
                self.page,
                self.mode,
                seed,
            )
        } else {
            AttnProblem::random_causal(
                self.batch,
                self.new_tokens,
                self.heads,
                self.dim,
                self.context,
                self.page,
                self.mode,
                seed,
            )
        }
    }

    /// Query rows.
    pub fn rows(&self) -> usize {
        self.batch * self.new_tokens
    }

    /// Cached positions the rows read (as the generated problem does).
    pub fn positions_read(&self) -> usize {
        if self.new_tokens == 1 {
            return match self.mode {
                AttnModeKind::Dense => self.batch * self.context,
                AttnModeKind::Window(w) => self.batch * w.min(self.context),
                // `AttnProblem::random` leaves every 17th index empty.
                AttnModeKind::Sparse(k) => self.batch * k - self.batch * k / 17,
            };
        }
        let per_request: usize = (1..=self.new_tokens)
            .map(|i| {
                let len = self.context + i;
                match self.mode {
                    AttnModeKind::Dense => len,
                    AttnModeKind::Window(w) => w.min(len),
                    AttnModeKind::Sparse(k) => k.min(len),
                }
            })
            .sum();
        self.batch * per_request
    }
}

impl OpShape for AttnShape {
    fn name(&self) -> &'static str {
        match self.mode {
            AttnModeKind::Dense => "attn_dense",
            AttnModeKind::Sparse(_) => "attn_sparse",
            AttnModeKind::Window(_) => "attn_window",
        }
    }
    fn point(&self) -> Point {
        let mut p = vec![
            ("batch", self.batch as u64),
            ("heads", self.heads as u64),
            ("dim", self.dim as u64),
            ("context", self.context as u64),
            ("page", self.page as u64),
        ];
        match self.mode {
            AttnModeKind::Dense => {}
            AttnModeKind::Sparse(k) => p.push(("topk", k as u64)),
            AttnModeKind::Window(w) => p.push(("window", w as u64)),
        }
        if self.new_tokens != 1 {
            p.push(("new", self.new_tokens as u64));
        }
        if let Some(c) = self.copies {
            p.push(("copies", c as u64));
        }
        Point::new(self.name(), &p, "fp8")
    }
    fn bytes(&self) -> u64 {
        let idx = match self.mode {
            AttnModeKind::Sparse(k) => 4 * self.rows() * k,
            _ => 0,
        };
        (self.positions_read() * (self.dim + 4) + 8 * self.rows() * self.heads * self.dim + idx)
            as u64
    }
    fn flops(&self) -> u64 {
        4 * (self.positions_read() * self.heads * self.dim) as u64
    }
    fn footprint_bytes(&self) -> u64 {
        (self.batch * (self.context + self.new_tokens) * (self.dim + 4)) as u64
    }
    fn copies(&self) -> Option<usize> {
        self.copies
    }
    fn validate(&self) -> Result<()> {
        let AttnShape {
            mode,
            batch,
            heads,
            dim,
            context,
            page,
            new_tokens,
            ..
        } = *self;
        if batch == 0
            || heads == 0
            || new_tokens == 0
            || (new_tokens == 1 && context == 0)
            || page == 0
            || dim % 32 != 0
            || dim > 512
            || dim == 0
        {
            return bad(
                self.name(),
                "batch, heads, context, page, new tokens must be positive; dim a multiple of 32 up to 512",
            );
        }
        if matches!(mode, AttnModeKind::Sparse(0) | AttnModeKind::Window(0)) {
            return bad(self.name(), "topk / window must be positive");
        }
        Ok(())
    }
}

/// DSA indexer scores plus top-k over `positions` contiguous keys per row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IndexerShape {
    pub batch: usize,
    pub heads: usize,
    pub dim: usize,
    pub positions: usize,
    pub topk: usize,
}

impl IndexerShape {
    pub fn problem(&self, seed: u64) -> IndexerProblem {
        IndexerProblem::random(
            self.batch,
            self.heads,
            self.dim,
            self.positions,
            self.topk,
            seed,
        )
    }
}

impl OpShape for IndexerShape {
    fn name(&self) -> &'static str {
        "indexer"
    }
    fn point(&self) -> Point {
        Point::new(
            self.name(),
            &[
                ("batch", self.batch as u64),
                ("heads", self.heads as u64),
                ("dim", self.dim as u64),
                ("positions", self.positions as u64),
                ("topk", self.topk as u64),
            ],
            "fp8",
        )
    }
    fn bytes(&self) -> u64 {
        let (b, h, d, n, k) = (self.batch, self.heads, self.dim, self.positions, self.topk);
        (b * n * d + 4 * b * n + 4 * (b * h * d + b * h) + 8 * b * n + 4 * b * k) as u64
    }
    fn flops(&self) -> u64 {
        2 * (self.batch * self.positions * self.heads * self.dim) as u64
    }
    fn footprint_bytes(&self) -> u64 {
        (self.batch * self.positions * (self.dim + 8)) as u64
    }
    fn validate(&self) -> Result<()> {
        let IndexerShape {
            batch,
            heads,
            dim,
            positions,
            topk,
        } = *self;
        if batch == 0
            || heads == 0
            || positions == 0
            || topk == 0
            || dim % 32 != 0
            || dim > 512
            || dim == 0
        {
            return bad(
                self.name(),
                "batch, heads, positions, topk positive; dim a multiple of 32 up to 512",
            );
        }
        if heads * dim * 4 > 48 * 1024 {
            return bad(
                self.name(),
                "heads * dim * 4 must fit 48 KiB of shared memory",
            );
        }
        Ok(())
    }
}

/// Random row gather of `rows` rows of `row_bytes` from a table of `table_bytes`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GatherShape {
    pub placement: GatherPlacement,
    pub table_bytes: u64,
    pub row_bytes: usize,
    pub rows: usize,
}

impl GatherShape {
    /// Table rows (at least one).
    pub fn table_rows(&self) -> usize {
        ((self.table_bytes / self.row_bytes as u64) as usize).max(1)
    }
}

impl OpShape for GatherShape {
    fn name(&self) -> &'static str {
        "gather"
    }
    fn point(&self) -> Point {
        let mut p = Point::new(
            self.name(),
            &[
                ("table_bytes", self.table_bytes),
                ("row_bytes", self.row_bytes as u64),
                ("rows", self.rows as u64),
                ("page", self.placement.page_bytes()),
            ],
            "u8",
        );
        p.shape = format!("placement={};{}", self.placement.name(), p.shape);
        p
    }
    fn bytes(&self) -> u64 {
        (2 * self.rows * self.row_bytes + 8 * self.rows) as u64
    }
    fn flops(&self) -> u64 {
        0
    }
    fn footprint_bytes(&self) -> u64 {
        (2 * self.rows * self.row_bytes) as u64
    }
    fn validate(&self) -> Result<()> {
        if self.row_bytes == 0
            || self.row_bytes % 16 != 0
            || self.rows == 0
            || self.table_bytes < self.row_bytes as u64
        {
            return bad(
                self.name(),
                "row_bytes a positive multiple of 16, rows positive, table at least one row",
            );
        }
        Ok(())
    }
}

/// Dispatch/combine all-to-all of `bytes` per peer. With one peer (one device) this is
/// a device-local copy. More peers need NCCL (TODO: `ncclSend`/`ncclRecv` pairs in a
/// group over the communicator of `peers` GPUs; not implemented, we have one GPU).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CopyShape {
    pub bytes: u64,
    pub peers: usize,
}

impl OpShape for CopyShape {
    fn name(&self) -> &'static str {
        "copy"
    }
    fn point(&self) -> Point {
        Point::new(
            self.name(),
            &[("bytes", self.bytes), ("peers", self.peers as u64)],
            "u8",
        )
    }
    fn bytes(&self) -> u64 {
        2 * self.bytes
    }
    fn flops(&self) -> u64 {
        0
    }
    fn footprint_bytes(&self) -> u64 {
        2 * self.bytes * self.peers as u64
    }
    fn validate(&self) -> Result<()> {
        if self.bytes == 0 || self.bytes % 16 != 0 || self.peers == 0 {
            return bad(
                self.name(),
                "bytes a positive multiple of 16, peers positive",
            );
        }
        if self.peers > 1 {
            return Err(EngineError::Unsupported(format!(
                "all-to-all over {} peers needs NCCL across GPUs; not implemented \
                 (TODO: NCCL send/recv groups). peers=1 measures the device-local copy",
                self.peers
            )));
        }
        Ok(())
    }
}

/// Reference: streaming read of `bytes`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamShape {
    pub bytes: u64,
}

impl OpShape for StreamShape {
    fn name(&self) -> &'static str {
        "ref_stream_read"
    }
    fn point(&self) -> Point {
        Point::new(self.name(), &[("bytes", self.bytes)], "u8")
    }
    fn bytes(&self) -> u64 {
        self.bytes
    }
    fn flops(&self) -> u64 {
        0
    }
    fn footprint_bytes(&self) -> u64 {
        self.bytes
    }
    fn validate(&self) -> Result<()> {
        if self.bytes == 0 || self.bytes % 16 != 0 {
            return bad(self.name(), "bytes must be a positive multiple of 16");
        }
        Ok(())
    }
}

/// Reference: dense f32 GEMM `m x k` by `k x n`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

impl GemmShape {
    /// Seeded `a[m][k]`, `b[k][n]` in [-1, 1).
    pub fn inputs(&self) -> (Vec<f32>, Vec<f32>) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let a = (0..self.m * self.k)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let b = (0..self.k * self.n)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        (a, b)
    }
}

impl OpShape for GemmShape {
    fn name(&self) -> &'static str {
        "ref_gemm"
    }
    fn point(&self) -> Point {
        Point::new(
            self.name(),
            &[
                ("m", self.m as u64),
                ("n", self.n as u64),
                ("k", self.k as u64),
            ],
            "f32",
        )
    }
    fn bytes(&self) -> u64 {
        4 * (self.m * self.k + self.k * self.n + self.m * self.n) as u64
    }
    fn flops(&self) -> u64 {
        2 * (self.m * self.n * self.k) as u64
    }
    fn footprint_bytes(&self) -> u64 {
        self.bytes()
    }
    fn validate(&self) -> Result<()> {
        if self.m == 0 || self.n == 0 || self.k == 0 {
            return bad(self.name(), "m, n, k must be positive");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_bytes_and_flops_match_the_generated_problems() {
        for mode in [
            AttnModeKind::Dense,
            AttnModeKind::Sparse(40),
            AttnModeKind::Window(37),
        ] {
            for new_tokens in [1, 5] {
                let s = AttnShape {
                    mode,
                    batch: 3,
                    heads: 4,
                    dim: 64,
                    context: 30,
                    page: 16,
                    new_tokens,
                    copies: None,
                };
                let p = s.problem(1);
                assert_eq!(
                    s.positions_read(),
                    p.positions_read(),
                    "{mode:?} {new_tokens}"
                );
                assert_eq!(s.flops(), p.flops());
                assert_eq!(s.bytes(), p.bytes(), "{mode:?} {new_tokens}");
            }
        }
        let m = MoeShape {
            dtype: WeightDtype::Int4,
            tokens: 3,
            experts: 2,
            n_out: 16,
            k_in: 256,
        };
        let p = m.problem(0);
        assert_eq!((m.bytes(), m.flops()), (p.bytes(), p.flops()));
        let i = IndexerShape {
            batch: 2,
            heads: 4,
            dim: 64,
            positions: 100,
            topk: 8,
        };
        let p = i.problem(0);
        assert_eq!((i.bytes(), i.flops()), (p.bytes(), p.flops()));
    }
}
