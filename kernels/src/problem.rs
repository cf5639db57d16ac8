//! Host-side inputs of every kernel, in the kernels' memory layouts, with validation
//! and seeded random generators.

use crate::dtype::INT4_GROUP;
use crate::{shape_err, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Expert weight format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WeightDtype {
    Bf16,
    Fp8,
    /// Packed signed 4-bit, one f32 scale per 32 weights.
    Int4,
}

impl WeightDtype {
    pub const ALL: [WeightDtype; 3] = [WeightDtype::Bf16, WeightDtype::Fp8, WeightDtype::Int4];

    /// The format's name: its element type's (`spec::dtype::Dtype::name`).
    pub fn name(self) -> &'static str {
        self.element().name()
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Bytes of weights for a `rows x cols` matrix (scales excluded).
    pub fn weight_bytes(self, rows: usize, cols: usize) -> usize {
        match self {
            WeightDtype::Bf16 => rows * cols * 2,
            WeightDtype::Fp8 => rows * cols,
            WeightDtype::Int4 => rows * cols / 2,
        }
    }

    /// Number of f32 scales for a `rows x cols` matrix.
    pub fn scale_count(self, rows: usize, cols: usize) -> usize {
        match self {
            WeightDtype::Bf16 => 0,
            WeightDtype::Fp8 => rows,
            WeightDtype::Int4 => rows * cols / INT4_GROUP,
        }
    }

    /// Kernel entry point in `moe_expert.cu`.
    pub fn moe_entry(self) -> &'static str {
        match self {
            WeightDtype::Bf16 => "moe_gemv_bf16",
            WeightDtype::Fp8 => "moe_gemv_fp8",
            WeightDtype::Int4 => "moe_gemv_int4",
        }
    }
}

/// MoE expert FFN for decode: `y[e, t] = W[expert_ids[e]] x[e, t]`.
#[derive(Debug, Clone)]
pub struct MoeProblem {
    pub dtype: WeightDtype,
    pub n_experts: usize,
    /// Output rows per expert (N).
    pub n_out: usize,
    /// Input features (K); a multiple of 256.
    pub k_in: usize,
    /// `W[n_experts][n_out][k_in]` in `dtype`.
    pub weights: Vec<u8>,
    /// fp8: `[n_experts][n_out]`; int4: `[n_experts][n_out][k_in/32]`; bf16: empty.
    pub scales: Vec<f32>,
    /// Touched experts, each in `0..n_experts`.
    pub expert_ids: Vec<i32>,
    /// Tokens per touched expert.
    pub tokens: usize,
    /// `x[touched][tokens][k_in]`.
    pub x: Vec<f32>,
}

impl MoeProblem {
    pub fn touched(&self) -> usize {
        self.expert_ids.len()
    }

    pub fn output_len(&self) -> usize {
        self.touched() * self.tokens * self.n_out
    }

    pub fn validate(&self) -> Result<()> {
        let k = "moe_expert";
        if self.k_in == 0 || !self.k_in.is_multiple_of(256) {
            return shape_err(
                k,
                format!("k_in = {} must be a positive multiple of 256", self.k_in),
            );
        }
        if self.n_out == 0 || self.tokens == 0 || self.expert_ids.is_empty() {
            return shape_err(k, "n_out, tokens and touched experts must be positive");
        }
        let wb = self
            .dtype
            .weight_bytes(self.n_experts * self.n_out, self.k_in);
        if self.weights.len() != wb {
            return shape_err(
                k,
                format!("weights: {} bytes, expected {wb}", self.weights.len()),
            );
        }
        let sc = self
            .dtype
            .scale_count(self.n_experts * self.n_out, self.k_in);
        if self.scales.len() != sc {
            return shape_err(
                k,
                format!("scales: {} values, expected {sc}", self.scales.len()),
            );
        }
        if let Some(e) = self
            .expert_ids
            .iter()
            .find(|&&e| e < 0 || e as usize >= self.n_experts)
        {
            return shape_err(k, format!("expert id {e} outside 0..{}", self.n_experts));
        }
        let xl = self.touched() * self.tokens * self.k_in;
        if self.x.len() != xl {
            return shape_err(k, format!("x: {} values, expected {xl}", self.x.len()));
        }
        Ok(())
    }

    /// Bytes moved by one call: touched experts' weights and scales, x and y.
    pub fn bytes(&self) -> u64 {
        let per_expert = self.dtype.weight_bytes(self.n_out, self.k_in)
            + 4 * self.dtype.scale_count(self.n_out, self.k_in);
        (self.touched() * per_expert + 4 * self.x.len() + 4 * self.output_len()) as u64
    }

    pub fn flops(&self) -> u64 {
        2 * (self.touched() * self.tokens * self.n_out * self.k_in) as u64
    }

    /// Random problem; touched experts are distinct when `touched <= n_experts`.
    pub fn random(
        dtype: WeightDtype,
        n_experts: usize,
        touched: usize,
        tokens: usize,
        n_out: usize,
        k_in: usize,
        seed: u64,
    ) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut weights = vec![0u8; dtype.weight_bytes(n_experts * n_out, k_in)];
        rng.fill(&mut weights[..]);
        match dtype {
            WeightDtype::Bf16 => weights.chunks_exact_mut(2).for_each(|b| {
                let v = moderate_bf16(u16::from_le_bytes([b[0], b[1]]));
                b.copy_from_slice(&v.to_le_bytes());
            }),
            WeightDtype::Fp8 => weights.iter_mut().for_each(|b| *b = moderate_fp8(*b)),
            WeightDtype::Int4 => {} // every nibble is a valid weight
        }
        let scales = (0..dtype.scale_count(n_experts * n_out, k_in))
            .map(|_| rng.random_range(0.01f32..0.1))
            .collect();
        let mut ids: Vec<i32> = (0..n_experts as i32).collect();
        // Partial Fisher-Yates for distinct experts; repeat ids beyond n_experts.
        for i in 0..touched.min(n_experts) {
            let j = rng.random_range(i..n_experts);
            ids.swap(i, j);
        }
        let expert_ids: Vec<i32> = (0..touched).map(|i| ids[i % n_experts.max(1)]).collect();
        let x = (0..touched * tokens * k_in)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        MoeProblem {
            dtype,
            n_experts,
            n_out,
            k_in,
            weights,
            scales,
            expert_ids,
            tokens,
            x,
        }
    }
}

/// Which cached positions an attention decode reads.
#[derive(Debug, Clone, PartialEq)]
pub enum AttnMode {
    /// Every position `0..seq_len`.
    Dense,
    /// `indices[b * topk + i]`; entries `< 0` or `>= seq_len` are skipped.
    Sparse { topk: usize, indices: Vec<i32> },
    /// The last `window` positions.
    Window { window: usize },
}

impl AttnMode {
    pub fn name(&self) -> &'static str {
        match self {
            AttnMode::Dense => "dense",
            AttnMode::Sparse { .. } => "sparse",
            AttnMode::Window { .. } => "window",
        }
    }

    pub fn entry(&self) -> &'static str {
        match self {
            AttnMode::Dense => "mla_decode_dense",
            AttnMode::Sparse { .. } => "mla_decode_sparse",
            AttnMode::Window { .. } => "mla_decode_window",
        }
    }
}

/// Attention decode over a paged latent (MLA-like) fp8 KV cache.
#[derive(Debug, Clone)]
pub struct AttnProblem {
    pub batch: usize,
    pub heads: usize,
    /// Latent dimension; multiple of 32, at most 512.
    pub dim: usize,
    pub page_size: usize,
    pub n_pages: usize,
    /// `kv[n_pages][page_size][dim]` fp8 e4m3.
    pub kv: Vec<u8>,
    /// `kv_scale[n_pages][page_size]`.
    pub kv_scale: Vec<f32>,
    /// `block_table[batch][max_pages]`: page of each row's logical page.
    pub block_table: Vec<i32>,
    pub max_pages: usize,
    pub seq_lens: Vec<i32>,
    /// `q[batch][heads][dim]`.
    pub q: Vec<f32>,
    pub softmax_scale: f32,
    pub mode: AttnMode,
}

impl AttnProblem {
    pub fn output_len(&self) -> usize {
        self.batch * self.heads * self.dim
    }

    /// The problem as a borrowed view (what the kernels consume).
    pub fn args(&self) -> AttnArgs<'_> {
        AttnArgs {
            batch: self.batch,
            heads: self.heads,
            dim: self.dim,
            page_size: self.page_size,
            max_pages: self.max_pages,
            kv: &self.kv,
            kv_scale: &self.kv_scale,
            block_table: &self.block_table,
            seq_lens: &self.seq_lens,
            q: &self.q,
            softmax_scale: self.softmax_scale,
            mode: match &self.mode {
                AttnMode::Dense => AttnModeRef::Dense,
                AttnMode::Sparse { topk, indices } => AttnModeRef::Sparse {
                    topk: *topk,
                    indices,
                },
                AttnMode::Window { window } => AttnModeRef::Window { window: *window },
            },
        }
    }

    pub fn validate(&self) -> Result<()> {
        self.args().validate()
    }

    /// Positions of row `b` that the mode reads, in kernel order.
    pub fn positions(&self, b: usize) -> Vec<usize> {
        self.args().positions(b)
    }

    /// Cache slot (page * page_size + offset) of position `p` of row `b`.
    pub fn slot(&self, b: usize, p: usize) -> usize {
        self.args().slot(b, p)
    }

    /// Positions read over all rows.
    pub fn positions_read(&self) -> usize {
        self.args().positions_read()
    }

    /// Bytes moved: KV entries read (with scales, once per row as a head-sharing
    /// kernel would), q, o and sparse indices.
    pub fn bytes(&self) -> u64 {
        let kv = self.positions_read() * (self.dim + 4);
        let idx = match &self.mode {
            AttnMode::Sparse { indices, .. } => 4 * indices.len(),
            _ => 0,
        };
        (kv + 8 * self.output_len() + idx) as u64
    }

    /// q.k and p.v per head and position.
    pub fn flops(&self) -> u64 {
        4 * (self.positions_read() * self.heads * self.dim) as u64
    }

    /// Random problem. Pages are assigned to rows in a shuffled order so the block
    /// table is not the identity. Every row has `seq_len` positions.
    pub fn random(
        batch: usize,
        heads: usize,
        dim: usize,
        seq_len: usize,
        page_size: usize,
        mode_kind: AttnModeKind,
        seed: u64,
    ) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let max_pages = seq_len.div_ceil(page_size).max(1);
        let n_pages = batch * max_pages;
        let mut pages: Vec<i32> = (0..n_pages as i32).collect();
        for i in (1..n_pages).rev() {
            let j = rng.random_range(0..=i);
            pages.swap(i, j);
        }
        let kv = random_fp8(&mut rng, n_pages * page_size * dim);
        let kv_scale = (0..n_pages * page_size)
            .map(|_| rng.random_range(0.5f32..1.5))
            .collect();
        let q = (0..batch * heads * dim)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let mode = match mode_kind {
            AttnModeKind::Dense => AttnMode::Dense,
            AttnModeKind::Window(window) => AttnMode::Window { window },
            AttnModeKind::Sparse(topk) => {
                let indices = (0..batch * topk)
                    .map(|i| {
                        if i % 17 == 16 {
                            -1
                        } else {
                            rng.random_range(0..seq_len.max(1)) as i32
                        }
                    })
                    .collect();
                AttnMode::Sparse { topk, indices }
            }
        };
        AttnProblem {
            batch,
            heads,
            dim,
            page_size,
            n_pages,
            kv,
            kv_scale,
            block_table: pages,
            max_pages,
            seq_lens: vec![seq_len as i32; batch],
            q,
            softmax_scale: 1.0 / (dim as f32).sqrt(),
            mode,
        }
    }
}

impl AttnProblem {
    /// Random causal problem: `requests` requests with `context` cached positions each
    /// bring `new_tokens` query rows; row `i` of a request sees `context + i + 1`
    /// positions (its own included), through the request's block table (pages shuffled).
    /// Sparse rows read `min(topk, seq_len)` random positions of their own prefix (the
    /// rest of the row's indices are -1), as after an indexer's selection.
    #[allow(clippy::too_many_arguments)]
    pub fn random_causal(
        requests: usize,
        new_tokens: usize,
        heads: usize,
        dim: usize,
        context: usize,
        page_size: usize,
        mode_kind: AttnModeKind,
        seed: u64,
    ) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let seq = context + new_tokens;
        let max_pages = seq.div_ceil(page_size).max(1);
        let n_pages = requests * max_pages;
        let mut pages: Vec<i32> = (0..n_pages as i32).collect();
        for i in (1..n_pages).rev() {
            let j = rng.random_range(0..=i);
            pages.swap(i, j);
        }
        let batch = requests * new_tokens;
        let mut block_table = Vec::with_capacity(batch * max_pages);
        let mut seq_lens = Vec::with_capacity(batch);
        for r in 0..requests {
            for i in 0..new_tokens {
                block_table.extend_from_slice(&pages[r * max_pages..(r + 1) * max_pages]);
                seq_lens.push((context + i + 1) as i32);
            }
        }
        let kv = random_fp8(&mut rng, n_pages * page_size * dim);
        let kv_scale = (0..n_pages * page_size)
            .map(|_| rng.random_range(0.5f32..1.5))
            .collect();
        let q = (0..batch * heads * dim)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let mode = match mode_kind {
            AttnModeKind::Dense => AttnMode::Dense,
            AttnModeKind::Window(window) => AttnMode::Window { window },
            AttnModeKind::Sparse(topk) => {
                let mut indices = vec![-1i32; batch * topk];
                for (b, &len) in seq_lens.iter().enumerate() {
                    let len = len as usize;
                    for x in indices[b * topk..b * topk + topk.min(len)].iter_mut() {
                        *x = rng.random_range(0..len) as i32;
                    }
                }
                AttnMode::Sparse { topk, indices }
            }
        };
        AttnProblem {
            batch,
            heads,
            dim,
            page_size,
            n_pages,
            kv,
            kv_scale,
            block_table,
            max_pages,
            seq_lens,
            q,
            softmax_scale: 1.0 / (dim as f32).sqrt(),
            mode,
        }
    }
}

/// Mode and its size, for generators and measurement plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnModeKind {
    Dense,
    /// top-k
    Sparse(usize),
    /// window
    Window(usize),
}

/// Which positions a borrowed attention call reads (see [`AttnMode`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AttnModeRef<'a> {
    Dense,
    Sparse { topk: usize, indices: &'a [i32] },
    Window { window: usize },
}

/// Attention decode over a paged latent fp8 cache, borrowed: the layout of
/// [`AttnProblem`] without owning the cache, so a serving engine can run it over its own
/// KV pages. Every row has its own `seq_lens` entry and block-table row, so the rows of
/// one call may belong to different requests or be the causal query rows of a prefill.
#[derive(Debug, Clone, Copy)]
pub struct AttnArgs<'a> {
    pub batch: usize,
    pub heads: usize,
    pub dim: usize,
    pub page_size: usize,
    pub max_pages: usize,
    /// `kv[n_pages][page_size][dim]` fp8 e4m3.
    pub kv: &'a [u8],
    /// `kv_scale[n_pages][page_size]`.
    pub kv_scale: &'a [f32],
    /// `block_table[batch][max_pages]`.
    pub block_table: &'a [i32],
    pub seq_lens: &'a [i32],
    /// `q[batch][heads][dim]`.
    pub q: &'a [f32],
    pub softmax_scale: f32,
    pub mode: AttnModeRef<'a>,
}

impl AttnArgs<'_> {
    pub fn output_len(&self) -> usize {
        self.batch * self.heads * self.dim
    }

    pub fn n_pages(&self) -> usize {
        self.kv_scale.len() / self.page_size.max(1)
    }

    pub fn validate(&self) -> Result<()> {
        let k = "mla_decode";
        if self.dim == 0 || !self.dim.is_multiple_of(32) || self.dim > 512 {
            return shape_err(
                k,
                format!("dim = {} must be a multiple of 32 in 32..=512", self.dim),
            );
        }
        if self.batch == 0 || self.heads == 0 || self.page_size == 0 {
            return shape_err(k, "batch, heads and page_size must be positive");
        }
        let n_pages = self.n_pages();
        let slots = n_pages * self.page_size;
        if self.kv.len() != slots * self.dim || self.kv_scale.len() != slots {
            return shape_err(k, "kv / kv_scale sizes do not match n_pages * page_size");
        }
        if self.block_table.len() != self.batch * self.max_pages
            || self.seq_lens.len() != self.batch
        {
            return shape_err(k, "block_table or seq_lens size does not match batch");
        }
        if self.q.len() != self.output_len() {
            return shape_err(k, "q size does not match batch * heads * dim");
        }
        for (b, &len) in self.seq_lens.iter().enumerate() {
            if len < 0 || len as usize > self.max_pages * self.page_size {
                return shape_err(k, format!("seq_lens[{b}] = {len} exceeds the block table"));
            }
            let used = (len as usize).div_ceil(self.page_size);
            let row = &self.block_table[b * self.max_pages..b * self.max_pages + used];
            if row.iter().any(|&p| p < 0 || p as usize >= n_pages) {
                return shape_err(
                    k,
                    format!("block_table row {b} names a page outside 0..{n_pages}"),
                );
            }
        }
        match self.mode {
            AttnModeRef::Sparse { topk, indices } if indices.len() != self.batch * topk => {
                shape_err(k, "sparse indices size does not match batch * topk")
            }
            AttnModeRef::Window { window: 0 } => shape_err(k, "window must be positive"),
            _ => Ok(()),
        }
    }

    /// Positions of row `b` that the mode reads, in kernel order.
    pub fn positions(&self, b: usize) -> Vec<usize> {
        let len = self.seq_lens[b].max(0) as usize;
        match self.mode {
            AttnModeRef::Dense => (0..len).collect(),
            AttnModeRef::Sparse { topk, indices } => indices[b * topk..(b + 1) * topk]
                .iter()
                .filter(|&&p| p >= 0 && (p as usize) < len)
                .map(|&p| p as usize)
                .collect(),
            AttnModeRef::Window { window } => (len.saturating_sub(window)..len).collect(),
        }
    }

    /// Number of positions row `b` reads (without building the list).
    pub fn positions_count(&self, b: usize) -> usize {
        let len = self.seq_lens[b].max(0) as usize;
        match self.mode {
            AttnModeRef::Dense => len,
            AttnModeRef::Sparse { topk, indices } => indices[b * topk..(b + 1) * topk]
                .iter()
                .filter(|&&p| p >= 0 && (p as usize) < len)
                .count(),
            AttnModeRef::Window { window } => len.min(window),
        }
    }

    /// Cache slot (page * page_size + offset) of position `p` of row `b`.
    #[inline]
    pub fn slot(&self, b: usize, p: usize) -> usize {
        self.block_table[b * self.max_pages + p / self.page_size] as usize * self.page_size
            + p % self.page_size
    }

    /// Positions read over all rows.
    pub fn positions_read(&self) -> usize {
        (0..self.batch).map(|b| self.positions_count(b)).sum()
    }
}

/// Sparse-attention indexer scores plus top-k.
#[derive(Debug, Clone)]
pub struct IndexerProblem {
    pub batch: usize,
    pub heads: usize,
    /// Multiple of 32, at most 512.
    pub dim: usize,
    pub n_pos: usize,
    pub topk: usize,
    /// `q[batch][heads][dim]`.
    pub q: Vec<f32>,
    /// `w[batch][heads]`.
    pub w: Vec<f32>,
    /// `keys[batch][n_pos][dim]` fp8 e4m3.
    pub keys: Vec<u8>,
    /// `key_scale[batch][n_pos]`, positive.
    pub key_scale: Vec<f32>,
}

/// Output of the indexer: scores `[batch][n_pos]` and per-row top-k positions
/// `[batch][topk]` (unordered; -1 pads rows with fewer than `topk` positions).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexerOutput {
    pub scores: Vec<f32>,
    pub topk: Vec<i32>,
}

impl IndexerProblem {
    pub fn validate(&self) -> Result<()> {
        let k = "indexer";
        if self.dim == 0 || !self.dim.is_multiple_of(32) || self.dim > 512 {
            return shape_err(
                k,
                format!("dim = {} must be a multiple of 32 in 32..=512", self.dim),
            );
        }
        if self.heads == 0 || self.heads * self.dim * 4 > 48 * 1024 {
            return shape_err(
                k,
                "heads * dim * 4 bytes must be in 1..=48 KiB (shared memory)",
            );
        }
        if self.batch == 0 || self.topk == 0 {
            return shape_err(k, "batch and topk must be positive");
        }
        if self.q.len() != self.batch * self.heads * self.dim
            || self.w.len() != self.batch * self.heads
            || self.keys.len() != self.batch * self.n_pos * self.dim
            || self.key_scale.len() != self.batch * self.n_pos
        {
            return shape_err(k, "input sizes do not match batch, heads, dim, n_pos");
        }
        Ok(())
    }

    /// Keys and scales read, queries, weights, scores written and read back by top-k,
    /// indices written.
    pub fn bytes(&self) -> u64 {
        (self.keys.len()
            + 4 * self.key_scale.len()
            + 4 * (self.q.len() + self.w.len())
            + 8 * self.batch * self.n_pos
            + 4 * self.batch * self.topk) as u64
    }

    pub fn flops(&self) -> u64 {
        2 * (self.batch * self.n_pos * self.heads * self.dim) as u64
    }

    pub fn random(
        batch: usize,
        heads: usize,
        dim: usize,
        n_pos: usize,
        topk: usize,
        seed: u64,
    ) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        IndexerProblem {
            batch,
            heads,
            dim,
            n_pos,
            topk,
            q: (0..batch * heads * dim)
                .map(|_| rng.random_range(-1.0f32..1.0))
                .collect(),
            w: (0..batch * heads)
                .map(|_| rng.random_range(0.0f32..1.0))
                .collect(),
            keys: random_fp8(&mut rng, batch * n_pos * dim),
            key_scale: (0..batch * n_pos)
                .map(|_| rng.random_range(0.5f32..1.5))
                .collect(),
        }
    }
}

/// Gather of `row_bytes`-byte rows: `out[i] = table[indices[i]]`.
#[derive(Debug, Clone)]
pub struct GatherProblem {
    pub table: Vec<u8>,
    /// A multiple of 16.
    pub row_bytes: usize,
    pub indices: Vec<u64>,
}

impl GatherProblem {
    pub fn rows(&self) -> usize {
        self.table.len() / self.row_bytes.max(1)
    }

    pub fn validate(&self) -> Result<()> {
        validate_gather(self.table.len(), self.row_bytes, &self.indices)
    }

    /// Rows read and written.
    pub fn bytes(&self) -> u64 {
        (2 * self.indices.len() * self.row_bytes + 8 * self.indices.len()) as u64
    }

    pub fn random(rows: usize, row_bytes: usize, n: usize, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut table = vec![0u8; rows * row_bytes];
        rng.fill(&mut table[..]);
        let indices = random_indices(&mut rng, rows, n);
        GatherProblem {
            table,
            row_bytes,
            indices,
        }
    }
}

/// Validates a gather over a table of `table_len` bytes.
pub fn validate_gather(table_len: usize, row_bytes: usize, indices: &[u64]) -> Result<()> {
    let k = "gather";
    if row_bytes == 0 || !row_bytes.is_multiple_of(16) {
        return shape_err(
            k,
            format!("row_bytes = {row_bytes} must be a positive multiple of 16"),
        );
    }
    let rows = (table_len / row_bytes) as u64;
    if let Some(i) = indices.iter().find(|&&i| i >= rows) {
        return shape_err(k, format!("index {i} outside the table's {rows} rows"));
    }
    Ok(())
}

/// `n` uniform random row indices in `0..rows`.
pub fn random_indices(rng: &mut ChaCha8Rng, rows: usize, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| rng.random_range(0..rows.max(1) as u64))
        .collect()
}

/// Maps random fp8 bits to a finite value with magnitude in [1/4, 4): keeps sign and
/// mantissa, forces the exponent field into 5..=8. Fast generation of realistic data.
#[inline]
pub fn moderate_fp8(b: u8) -> u8 {
    (b & 0x87) | ((5 + ((b >> 3) & 3)) << 3)
}

/// Maps random bf16 bits to a finite value with magnitude in [1/8, 2).
#[inline]
pub fn moderate_bf16(r: u16) -> u16 {
    (r & 0x807f) | ((124 + ((r >> 7) & 3)) << 7)
}

/// `n` random fp8 values of moderate magnitude.
pub fn random_fp8(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill(&mut v[..]);
    v.iter_mut().for_each(|b| *b = moderate_fp8(*b));
    v
}
