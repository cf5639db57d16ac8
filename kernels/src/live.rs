//! Kernels of the live serving engine's model (besides attention and the indexer, which
//! it shares with calibration): grouped linear layers over bf16/fp8/int4 weights,
//! RMSNorm with a fused residual add, SwiGLU, softmax gating with top-k, row gathers,
//! the MoE combine, element-wise add, KV-cache writes (fp8 quantisation into pages) and
//! argmax. Each has a CPU twin (`cpu::live`), a naive reference (`reference::live`) and a
//! CUDA kernel (`cuda/live.cu`); the argument checks below are shared by all three.

use crate::dtype::INT4_GROUP;
use crate::problem::{moderate_bf16, WeightDtype};
use crate::{shape_err, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `experts` weight matrices of `n_out x k_in` in `dtype`, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct WeightsRef<'a> {
    pub dtype: WeightDtype,
    pub experts: usize,
    pub n_out: usize,
    /// A multiple of 256.
    pub k_in: usize,
    /// `[experts][n_out][k_in]` in `dtype`.
    pub weights: &'a [u8],
    /// fp8: `[experts][n_out]`; int4: `[experts][n_out][k_in/32]`; bf16: empty.
    pub scales: &'a [f32],
}

impl WeightsRef<'_> {
    pub fn validate(&self) -> Result<()> {
        let k = "linear";
        if self.k_in == 0 || !self.k_in.is_multiple_of(256) || self.n_out == 0 || self.experts == 0
        {
            return shape_err(
                k,
                format!(
                    "n_out = {}, experts = {} must be positive and k_in = {} a positive multiple of 256",
                    self.n_out, self.experts, self.k_in
                ),
            );
        }
        let wb = self
            .dtype
            .weight_bytes(self.experts * self.n_out, self.k_in);
        let sc = self.dtype.scale_count(self.experts * self.n_out, self.k_in);
        if self.weights.len() != wb || self.scales.len() != sc {
            return shape_err(
                k,
                format!(
                    "weights {} bytes / scales {} (expected {wb} / {sc})",
                    self.weights.len(),
                    self.scales.len()
                ),
            );
        }
        Ok(())
    }
}

/// Owned weights (random from a seed for the live model and for measurements).
#[derive(Debug, Clone)]
pub struct Weights {
    pub dtype: WeightDtype,
    pub experts: usize,
    pub n_out: usize,
    pub k_in: usize,
    pub weights: Vec<u8>,
    pub scales: Vec<f32>,
}

impl Weights {
    /// Random weights whose decoded values have a standard deviation of about
    /// `std` (uniform in +-`std`*sqrt(3) for bf16; fp8/int4 scaled to the same range).
    pub fn random(
        dtype: WeightDtype,
        experts: usize,
        n_out: usize,
        k_in: usize,
        std: f32,
        seed: u64,
    ) -> Weights {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let rows = experts * n_out;
        let a = std * 3f32.sqrt();
        let (weights, scales) = match dtype {
            WeightDtype::Bf16 => {
                let mut w = Vec::with_capacity(2 * rows * k_in);
                for _ in 0..rows * k_in {
                    let v: f32 = rng.random_range(-a..a);
                    w.extend_from_slice(&crate::dtype::f32_to_bf16(v).to_le_bytes());
                }
                (w, Vec::new())
            }
            WeightDtype::Fp8 => {
                // Moderate fp8 magnitudes are in [1/4, 4): scale rows to +-a.
                let mut w = vec![0u8; rows * k_in];
                rng.fill(&mut w[..]);
                w.iter_mut()
                    .for_each(|b| *b = crate::problem::moderate_fp8(*b));
                (w, vec![a / 4.0; rows])
            }
            WeightDtype::Int4 => {
                let mut w = vec![0u8; rows * k_in / 2];
                rng.fill(&mut w[..]);
                (w, vec![a / 8.0; rows * k_in / INT4_GROUP])
            }
        };
        Weights {
            dtype,
            experts,
            n_out,
            k_in,
            weights,
            scales,
        }
    }

    /// Random weights of moderate magnitudes, fast to generate in bulk (for timing:
    /// random bits mapped to finite values, no control of their spread).
    pub fn random_moderate(
        dtype: WeightDtype,
        experts: usize,
        n_out: usize,
        k_in: usize,
        seed: u64,
    ) -> Weights {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let rows = experts * n_out;
        let mut w = vec![0u8; dtype.weight_bytes(rows, k_in)];
        rng.fill(&mut w[..]);
        match dtype {
            WeightDtype::Bf16 => w.chunks_exact_mut(2).for_each(|b| {
                let v = moderate_bf16(u16::from_le_bytes([b[0], b[1]]));
                b.copy_from_slice(&v.to_le_bytes());
            }),
            WeightDtype::Fp8 => w
                .iter_mut()
                .for_each(|b| *b = crate::problem::moderate_fp8(*b)),
            WeightDtype::Int4 => {}
        }
        Weights {
            dtype,
            experts,
            n_out,
            k_in,
            weights: w,
            scales: vec![0.05; dtype.scale_count(rows, k_in)],
        }
    }

    pub fn as_ref(&self) -> WeightsRef<'_> {
        WeightsRef {
            dtype: self.dtype,
            experts: self.experts,
            n_out: self.n_out,
            k_in: self.k_in,
            weights: &self.weights,
            scales: &self.scales,
        }
    }

    /// Bytes of one expert's weights and scales.
    pub fn expert_bytes(&self) -> usize {
        self.dtype.weight_bytes(self.n_out, self.k_in)
            + 4 * self.dtype.scale_count(self.n_out, self.k_in)
    }
}

/// Rows `[start, start + rows)` of the input go through expert `expert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    pub expert: u32,
    pub start: u32,
    pub rows: u32,
}

impl Group {
    /// One group over all `rows` rows with expert 0 (a dense layer).
    pub fn dense(rows: usize) -> Group {
        Group {
            expert: 0,
            start: 0,
            rows: rows as u32,
        }
    }

    /// Flattened `[expert, start, rows]` triples (the CUDA kernel's layout).
    pub fn flatten(groups: &[Group]) -> Vec<i32> {
        groups
            .iter()
            .flat_map(|g| [g.expert as i32, g.start as i32, g.rows as i32])
            .collect()
    }
}

/// Checks a grouped linear call: `x[rows][k_in]`, `y[rows][n_out]`, every group inside
/// the rows and naming an existing expert.
pub fn validate_linear(
    w: &WeightsRef<'_>,
    groups: &[Group],
    x_len: usize,
    y_len: usize,
) -> Result<usize> {
    w.validate()?;
    if !x_len.is_multiple_of(w.k_in) {
        return shape_err(
            "linear",
            format!("x has {x_len} values, not a multiple of k_in = {}", w.k_in),
        );
    }
    let rows = x_len / w.k_in;
    if y_len != rows * w.n_out {
        return shape_err(
            "linear",
            format!("y has {y_len} values, expected {}", rows * w.n_out),
        );
    }
    let mut spans: Vec<(u32, u32)> = groups.iter().map(|g| (g.start, g.start + g.rows)).collect();
    spans.sort_unstable();
    if spans.windows(2).any(|s| s[0].1 > s[1].0) {
        return shape_err(
            "linear",
            "groups overlap: each row belongs to at most one group",
        );
    }
    for g in groups {
        if g.expert as usize >= w.experts || (g.start + g.rows) as usize > rows {
            return shape_err(
                "linear",
                format!(
                    "group (expert {}, rows {}..{}) outside {} experts / {rows} rows",
                    g.expert,
                    g.start,
                    g.start + g.rows,
                    w.experts
                ),
            );
        }
    }
    Ok(rows)
}

/// Checks that `len` is `rows * dim` for a row-wise op.
pub fn validate_rows(kernel: &'static str, len: usize, dim: usize) -> Result<usize> {
    if dim == 0 || !len.is_multiple_of(dim) {
        return shape_err(kernel, format!("{len} values are not rows of {dim}"));
    }
    Ok(len / dim)
}

/// Largest finite fp8 e4m3 magnitude.
pub const FP8_MAX: f32 = 448.0;

/// f32 to fp8 e4m3 by round-to-nearest-even on the bits, saturating at +-448 (NaN to
/// 0x7f). `kv_write.cu` implements the same steps, so both sides store identical bytes.
pub fn quantize_fp8(v: f32) -> u8 {
    if v.is_nan() {
        return 0x7f;
    }
    let sign = if v.is_sign_negative() { 0x80u8 } else { 0 };
    let a = v.abs();
    if a >= FP8_MAX {
        return sign | 0x7e;
    }
    if a < 0.015625 {
        // Subnormal (and zero): multiples of 2^-9; 8 is the smallest normal, 0x08.
        let m = (a * 512.0).round_ties_even() as u8;
        return sign | m;
    }
    let bits = a.to_bits();
    let mut e = ((bits >> 23) as i32) - 127;
    let mant = bits & 0x7f_ffff;
    let mut q = mant >> 20;
    let rem = mant & 0xf_ffff;
    if rem > 0x8_0000 || (rem == 0x8_0000 && q & 1 == 1) {
        q += 1;
    }
    if q == 8 {
        q = 0;
        e += 1;
    }
    let code = (((e + 7) as u32) << 3) | q;
    sign | code.min(0x7e) as u8
}

/// The per-row scale `kv_write` stores: `max |v| / 448`, or 1 for an all-zero row.
pub fn fp8_row_scale(row: &[f32]) -> f32 {
    let m = row.iter().fold(0f32, |m, v| m.max(v.abs()));
    if m > 0.0 && m.is_finite() {
        m / FP8_MAX
    } else {
        1.0
    }
}

/// Paged indexer scores: for query row `r` and position `p < seq_lens[r]`,
/// `score = sum_h w[r,h] * relu(key_scale(p) * q[r,h,:] . key(p))` with keys read from a
/// paged fp8 cache; positions at or past `seq_lens[r]` score `-inf`.
#[derive(Debug, Clone, Copy)]
pub struct IndexerPagedArgs<'a> {
    pub rows: usize,
    pub heads: usize,
    /// Multiple of 32, at most 512; `heads * dim * 4 <= 48 KiB`.
    pub dim: usize,
    pub page_size: usize,
    pub max_pages: usize,
    /// Score row length: at least every `seq_lens` entry.
    pub n_pos: usize,
    pub q: &'a [f32],
    pub w: &'a [f32],
    /// `keys[n_pages][page_size][dim]` fp8 e4m3 and `key_scale[n_pages][page_size]`.
    pub keys: &'a [u8],
    pub key_scale: &'a [f32],
    pub block_table: &'a [i32],
    pub seq_lens: &'a [i32],
}

impl IndexerPagedArgs<'_> {
    pub fn validate(&self) -> Result<()> {
        let k = "indexer_paged";
        if self.dim == 0 || !self.dim.is_multiple_of(32) || self.dim > 512 {
            return shape_err(
                k,
                format!("dim = {} must be a multiple of 32 in 32..=512", self.dim),
            );
        }
        if self.heads == 0 || self.heads * self.dim * 4 > 48 * 1024 || self.page_size == 0 {
            return shape_err(
                k,
                "heads positive, heads * dim * 4 <= 48 KiB, page_size positive",
            );
        }
        let slots = self.key_scale.len();
        if !slots.is_multiple_of(self.page_size) || self.keys.len() != slots * self.dim {
            return shape_err(k, "keys / key_scale sizes do not match pages of page_size");
        }
        if self.q.len() != self.rows * self.heads * self.dim
            || self.w.len() != self.rows * self.heads
            || self.block_table.len() != self.rows * self.max_pages
            || self.seq_lens.len() != self.rows
        {
            return shape_err(k, "q, w, block_table or seq_lens size does not match rows");
        }
        let n_pages = slots / self.page_size;
        for (r, &len) in self.seq_lens.iter().enumerate() {
            if len < 0
                || len as usize > self.n_pos
                || len as usize > self.max_pages * self.page_size
            {
                return shape_err(
                    k,
                    format!("seq_lens[{r}] = {len} exceeds n_pos or the block table"),
                );
            }
            let used = (len as usize).div_ceil(self.page_size);
            if self.block_table[r * self.max_pages..][..used]
                .iter()
                .any(|&p| p < 0 || p as usize >= n_pages)
            {
                return shape_err(
                    k,
                    format!("block_table row {r} names a page outside 0..{n_pages}"),
                );
            }
        }
        Ok(())
    }

    #[inline]
    pub fn slot(&self, r: usize, p: usize) -> usize {
        self.block_table[r * self.max_pages + p / self.page_size] as usize * self.page_size
            + p % self.page_size
    }

    /// Positions scored over all rows.
    pub fn positions(&self) -> usize {
        self.seq_lens.iter().map(|&l| l.max(0) as usize).sum()
    }
}
