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

/// A head width the attention and indexer kernels take: a positive multiple of 32 up
/// to 512.
pub(crate) fn kernel_dim_ok(dim: usize) -> bool {
    dim != 0 && dim.is_multiple_of(32) && dim <= 512
}

/// What a calibration shape declares of one run: every calibration shape's [`OpShape`]
/// is read from its facts (the one impl below) and its own check.
trait Calibration {
    fn facts(&self) -> Facts;
    /// Rejects shapes the kernels cannot run (before any allocation).
    fn check(&self) -> Result<()>;
}

/// A calibration op's name, measurement point, costs and input copies.
struct Facts {
    name: &'static str,
    /// A text pair leading the point's shape (a gather's placement).
    lead: Option<(&'static str, &'static str)>,
    /// The point's numeric `key=value` pairs, in order.
    pairs: Vec<(&'static str, u64)>,
    dtype: &'static str,
    bytes: u64,
    flops: u64,
    footprint_bytes: u64,
    copies: Option<usize>,
}

impl Facts {
    /// Facts with no leading text pair and no fixed copies.
    fn new(name: &'static str, pairs: Vec<(&'static str, u64)>, dtype: &'static str) -> Facts {
        Facts {
            name,
            lead: None,
            pairs,
            dtype,
            bytes: 0,
            flops: 0,
            footprint_bytes: 0,
            copies: None,
        }
    }

    fn costs(self, bytes: u64, flops: u64, footprint_bytes: u64) -> Facts {
        Facts {
            bytes,
            flops,
            footprint_bytes,
            ..self
        }
    }
}

impl<T: Calibration> OpShape for T {
    fn name(&self) -> &'static str {
        self.facts().name
    }
    fn point(&self) -> Point {
        let f = self.facts();
        let mut p = Point::new(f.name, &f.pairs, f.dtype);
        if let Some((k, v)) = f.lead {
            p.shape = format!("{k}={v};{}", p.shape);
        }
        p
    }
    fn bytes(&self) -> u64 {
        self.facts().bytes
    }
    fn flops(&self) -> u64 {
        self.facts().flops
    }
    fn footprint_bytes(&self) -> u64 {
        self.facts().footprint_bytes
    }
    fn validate(&self) -> Result<()> {
        self.check()
    }
    fn copies(&self) -> Option<usize> {
        self.facts().copies
    }
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

impl Calibration for MoeShape {
    fn facts(&self) -> Facts {
        let MoeShape {
            dtype,
            tokens,
            experts,
            n_out,
            k_in,
        } = *self;
        let per_expert = dtype.weight_bytes(n_out, k_in) + 4 * dtype.scale_count(n_out, k_in);
        let pairs = vec![
            ("tokens", tokens as u64),
            ("experts", experts as u64),
            ("n", n_out as u64),
            ("k", k_in as u64),
        ];
        Facts::new("moe_decode", pairs, dtype.name()).costs(
            (experts * (per_expert + 4 * tokens * (k_in + n_out))) as u64,
            2 * (experts * tokens * n_out * k_in) as u64,
            (experts * (dtype.weight_bytes(n_out, k_in) + 4 * tokens * (n_out + k_in))) as u64,
        )
    }
    fn check(&self) -> Result<()> {
        let MoeShape {
            tokens,
            experts,
            n_out,
            k_in,
            ..
        } = *self;
        if tokens == 0 || experts == 0 || n_out == 0 || k_in == 0 || k_in % 256 != 0 {
            return bad(
                "moe_decode",
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

impl Calibration for AttnShape {
    fn facts(&self) -> Facts {
        let name = match self.mode {
            AttnModeKind::Dense => "attn_dense",
            AttnModeKind::Sparse(_) => "attn_sparse",
            AttnModeKind::Window(_) => "attn_window",
        };
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
        let idx = match self.mode {
            AttnModeKind::Sparse(k) => 4 * self.rows() * k,
            _ => 0,
        };
        let read = self.positions_read();
        Facts {
            copies: self.copies,
            ..Facts::new(name, p, "fp8").costs(
                (read * (self.dim + 4) + 8 * self.rows() * self.heads * self.dim + idx) as u64,
                4 * (read * self.heads * self.dim) as u64,
                (self.batch * (self.context + self.new_tokens) * (self.dim + 4)) as u64,
            )
        }
    }
    fn check(&self) -> Result<()> {
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
            || !kernel_dim_ok(dim)
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

impl Calibration for IndexerShape {
    fn facts(&self) -> Facts {
        let (b, h, d, n, k) = (self.batch, self.heads, self.dim, self.positions, self.topk);
        let pairs = vec![
            ("batch", b as u64),
            ("heads", h as u64),
            ("dim", d as u64),
            ("positions", n as u64),
            ("topk", k as u64),
        ];
        Facts::new("indexer", pairs, "fp8").costs(
            (b * n * d + 4 * b * n + 4 * (b * h * d + b * h) + 8 * b * n + 4 * b * k) as u64,
            2 * (b * n * h * d) as u64,
            (b * n * (d + 8)) as u64,
        )
    }
    fn check(&self) -> Result<()> {
        let IndexerShape {
            batch,
            heads,
            dim,
            positions,
            topk,
        } = *self;
        if batch == 0 || heads == 0 || positions == 0 || topk == 0 || !kernel_dim_ok(dim) {
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

impl Calibration for GatherShape {
    fn facts(&self) -> Facts {
        let pairs = vec![
            ("table_bytes", self.table_bytes),
            ("row_bytes", self.row_bytes as u64),
            ("rows", self.rows as u64),
            ("page", self.placement.page_bytes()),
        ];
        Facts {
            lead: Some(("placement", self.placement.name())),
            ..Facts::new("gather", pairs, "u8").costs(
                (2 * self.rows * self.row_bytes + 8 * self.rows) as u64,
                0,
                (2 * self.rows * self.row_bytes) as u64,
            )
        }
    }
    fn check(&self) -> Result<()> {
        if self.row_bytes == 0
            || !self.row_bytes.is_multiple_of(16)
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

impl Calibration for CopyShape {
    fn facts(&self) -> Facts {
        let pairs = vec![("bytes", self.bytes), ("peers", self.peers as u64)];
        Facts::new("copy", pairs, "u8").costs(2 * self.bytes, 0, 2 * self.bytes * self.peers as u64)
    }
    fn check(&self) -> Result<()> {
        if self.bytes == 0 || !self.bytes.is_multiple_of(16) || self.peers == 0 {
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

impl Calibration for StreamShape {
    fn facts(&self) -> Facts {
        Facts::new("ref_stream_read", vec![("bytes", self.bytes)], "u8")
            .costs(self.bytes, 0, self.bytes)
    }
    fn check(&self) -> Result<()> {
        if self.bytes == 0 || !self.bytes.is_multiple_of(16) {
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

impl Calibration for GemmShape {
    fn facts(&self) -> Facts {
        let (m, n, k) = (self.m, self.n, self.k);
        let pairs = vec![("m", m as u64), ("n", n as u64), ("k", k as u64)];
        let bytes = 4 * (m * k + k * n + m * n) as u64;
        Facts::new("ref_gemm", pairs, "f32").costs(bytes, 2 * (m * n * k) as u64, bytes)
    }
    fn check(&self) -> Result<()> {
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
