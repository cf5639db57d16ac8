//! Shapes of the live model's ops (`serve::exec` runs them; `calibrate --plan live`
//! measures them at the model's shapes), each with the [`Call`] it stands for (defined
//! in `spec::call`: the op, its static key and its variables). The serving executor
//! records a `Call` per op when tracing; calibration fits one cost function per (op,
//! key) over the variables; the simulator's fitted cost model (`sim::cost::fitted`)
//! prices the same calls.

use super::{OpShape, Point};
use crate::serve::device::{Buf, Dt, IndexerCall, ServeDevice};
use crate::stats::{Stats, TimingConfig};
use crate::{EngineError, Result};
use kernels::live::{Group, Weights};
use kernels::WeightDtype;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use spec::call::AttnKey;
use spec::call::Call;
use spec::live_model::{AttnKind, IndexerConfig};

fn bad<T>(op: &str, reason: impl Into<String>) -> Result<T> {
    Err(EngineError::BadOp {
        op: op.into(),
        reason: reason.into(),
    })
}

fn rand_f32(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// Grouped linear layer: `rows` rows split evenly over `groups` of the `experts` weight
/// matrices (`n x k` each); `groups = 1` is a dense layer.
///
/// A measurement holds one table of `experts` matrices and cycles through it: run `c`
/// uses `groups` matrices starting at `c * groups`, so a matrix is used again only after
/// the whole table, as a model's weights are used again only after the whole step
/// (`experts` is sized by the plan to the step's weights), while the input rows stay
/// hot, as a forward pass's activations are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearShape {
    pub dtype: WeightDtype,
    pub n: usize,
    pub k: usize,
    pub groups: usize,
    pub rows: usize,
    /// Weight matrices in the table.
    pub experts: usize,
    /// Runs a measurement cycles through (each with its own groups of the table).
    pub copies: usize,
}

impl LinearShape {
    /// The groups of run `c`: rows split evenly over `groups` consecutive matrices of the
    /// table, starting at `c * groups`.
    pub fn groups_of(&self, c: usize) -> Vec<Group> {
        let mut groups = Vec::with_capacity(self.groups);
        let mut start = 0;
        for g in 0..self.groups {
            let rows = (self.rows * (g + 1) / self.groups - self.rows * g / self.groups) as u32;
            groups.push(Group {
                expert: ((c * self.groups + g) % self.experts) as u32,
                start,
                rows,
            });
            start += rows;
        }
        groups
    }

    /// Seeded weights (the table) and input rows.
    pub fn inputs(&self, seed: u64) -> (Weights, Vec<f32>) {
        let w = Weights::random_moderate(self.dtype, self.experts, self.n, self.k, seed);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
        (w, rand_f32(&mut rng, self.rows * self.k))
    }

    pub fn call(&self) -> Call {
        Call::linear(
            self.dtype.element(),
            self.n,
            self.k,
            self.groups as u64,
            self.rows as u64,
        )
    }
}

impl OpShape for LinearShape {
    fn name(&self) -> &'static str {
        "linear"
    }
    fn point(&self) -> Point {
        Point::new(
            self.name(),
            &[
                ("n", self.n as u64),
                ("k", self.k as u64),
                ("groups", self.groups as u64),
                ("rows", self.rows as u64),
                ("experts", self.experts as u64),
                ("copies", self.copies as u64),
            ],
            self.dtype.name(),
        )
    }
    fn bytes(&self) -> u64 {
        let per =
            self.dtype.weight_bytes(self.n, self.k) + 4 * self.dtype.scale_count(self.n, self.k);
        (self.groups * per + 4 * self.rows * (self.n + self.k)) as u64
    }
    fn flops(&self) -> u64 {
        2 * (self.rows * self.n * self.k) as u64
    }
    fn footprint_bytes(&self) -> u64 {
        (self.experts * self.dtype.weight_bytes(self.n, self.k) + 4 * self.rows * (self.n + self.k))
            as u64
    }
    fn validate(&self) -> Result<()> {
        if self.n == 0 || self.k == 0 || !self.k.is_multiple_of(256) {
            return bad(self.name(), "n positive and k a positive multiple of 256");
        }
        if self.groups == 0 || self.groups > self.experts || self.rows < self.groups {
            return bad(self.name(), "1 <= groups <= experts and groups <= rows");
        }
        Ok(())
    }
    fn copies(&self) -> Option<usize> {
        Some(self.copies)
    }
}

macro_rules! rows_shape {
    ($(#[$doc:meta])* $name:ident, $op:literal, { $($field:ident),* }, call: |$s0:ident| $call:expr,
     bytes: |$s:ident| $bytes:expr, flops: |$s2:ident| $flops:expr, check: |$s3:ident| $check:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub struct $name {
            pub rows: usize,
            $(pub $field: usize,)*
        }

        impl $name {
            pub fn call(&self) -> Call {
                let $s0 = self;
                $call
            }
        }

        impl OpShape for $name {
            fn name(&self) -> &'static str {
                $op
            }
            fn point(&self) -> Point {
                Point::new($op, &[("rows", self.rows as u64) $(, (stringify!($field), self.$field as u64))*], "f32")
            }
            fn bytes(&self) -> u64 {
                let $s = self;
                $bytes as u64
            }
            fn flops(&self) -> u64 {
                let $s2 = self;
                $flops as u64
            }
            fn footprint_bytes(&self) -> u64 {
                self.bytes()
            }
            /// One input set: a forward pass's activations are hot in cache.
            fn copies(&self) -> Option<usize> {
                Some(1)
            }
            fn validate(&self) -> Result<()> {
                let $s3 = self;
                if self.rows == 0 || !($check) {
                    return bad($op, concat!("rows positive and ", stringify!($check)));
                }
                Ok(())
            }
        }
    };
}

rows_shape!(
    /// RMSNorm of `rows` rows of `dim`, with the residual add when `residual` is 1.
    NormShape, "rmsnorm", { dim, residual }, call: |s| Call::rmsnorm(s.dim, s.residual, s.rows as u64),
    bytes: |s| 4 * s.rows * s.dim * (2 + 2 * s.residual), flops: |s| 4 * s.rows * s.dim,
    check: |s| s.dim > 0 && s.residual <= 1
);
rows_shape!(
    /// SwiGLU of `rows` rows of `2 * ffn` gate/up values.
    SwigluShape, "swiglu", { ffn }, call: |s| Call::swiglu(s.ffn, s.rows as u64),
    bytes: |s| 12 * s.rows * s.ffn, flops: |s| 6 * s.rows * s.ffn,
    check: |s| s.ffn > 0
);
rows_shape!(
    /// Softmax gating over `experts` and top-`topk` choice per row.
    GateShape, "gate_topk", { experts, topk }, call: |s| Call::gate_topk(s.experts, s.topk, s.rows as u64),
    bytes: |s| 4 * s.rows * (s.experts + 2 * s.topk), flops: |s| s.rows * s.experts * (2 + s.topk),
    check: |s| s.topk >= 1 && s.topk <= s.experts.min(32)
);
rows_shape!(
    /// Gather of `rows` rows of `dim` from a table of `table_rows` rows.
    GatherRowsShape, "gather_rows", { dim, table_rows },
    call: |s| Call::gather_rows(s.dim, s.rows as u64),
    bytes: |s| 8 * s.rows * s.dim + 4 * s.rows, flops: |_s| 0,
    check: |s| s.dim > 0 && s.table_rows > 0
);
rows_shape!(
    /// MoE combine of `topk` expert outputs of `dim` into each of `rows` rows.
    CombineShape, "moe_combine", { topk, dim }, call: |s| Call::moe_combine(s.topk, s.dim, s.rows as u64),
    bytes: |s| 4 * s.rows * s.dim * (2 + s.topk), flops: |s| 2 * s.rows * s.dim * s.topk,
    check: |s| s.topk > 0 && s.dim > 0
);
rows_shape!(
    /// `x += y` over `rows` rows of `dim`.
    AddShape, "add", { dim }, call: |s| Call::add(s.dim, s.rows as u64),
    bytes: |s| 12 * s.rows * s.dim, flops: |s| s.rows * s.dim,
    check: |s| s.dim > 0
);
rows_shape!(
    /// fp8 writes of `rows` rows of `dim` into a cache of `slots` entries.
    KvWriteShape, "kv_write", { dim, slots }, call: |s| Call::kv_write(s.dim, s.rows as u64),
    bytes: |s| s.rows * (5 * s.dim + 8), flops: |s| 2 * s.rows * s.dim,
    check: |s| s.dim > 0 && s.slots >= s.rows
);
rows_shape!(
    /// Argmax over `n` values per row.
    ArgmaxShape, "argmax", { n }, call: |s| Call::argmax(s.n, s.rows as u64),
    bytes: |s| 4 * s.rows * (s.n + 1), flops: |s| s.rows * s.n,
    check: |s| s.n > 0
);

/// Indexer over a paged key cache: `requests` requests with `context` cached positions
/// each bring `new_tokens` rows (row `i` scores `context + i + 1` positions), then the
/// top-`topk` positions of each row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IndexerPagedShape {
    pub requests: usize,
    pub new_tokens: usize,
    pub context: usize,
    pub heads: usize,
    pub dim: usize,
    pub topk: usize,
    pub page: usize,
    pub copies: usize,
}

impl IndexerPagedShape {
    pub fn rows(&self) -> usize {
        self.requests * self.new_tokens
    }
    /// Positions scored over all rows.
    pub fn positions(&self) -> usize {
        self.requests
            * (self.new_tokens * self.context + self.new_tokens * (self.new_tokens + 1) / 2)
    }
    pub fn call(&self) -> Call {
        let ix = IndexerConfig {
            heads: self.heads,
            dim: self.dim,
            topk: self.topk,
        };
        Call::indexer_paged(ix, self.page, self.rows() as u64, self.positions() as u64)
    }
}

impl OpShape for IndexerPagedShape {
    fn name(&self) -> &'static str {
        "indexer_paged"
    }
    fn point(&self) -> Point {
        Point::new(
            self.name(),
            &[
                ("requests", self.requests as u64),
                ("new", self.new_tokens as u64),
                ("context", self.context as u64),
                ("heads", self.heads as u64),
                ("dim", self.dim as u64),
                ("topk", self.topk as u64),
                ("page", self.page as u64),
                ("copies", self.copies as u64),
            ],
            "fp8",
        )
    }
    fn bytes(&self) -> u64 {
        (self.positions() * (self.dim + 12)
            + 4 * self.rows() * (self.heads * (self.dim + 1) + self.topk)) as u64
    }
    fn flops(&self) -> u64 {
        2 * (self.positions() * self.heads * self.dim) as u64
    }
    fn footprint_bytes(&self) -> u64 {
        (self.requests * (self.context + self.new_tokens) * (self.dim + 4)) as u64
    }
    fn validate(&self) -> Result<()> {
        if self.requests == 0
            || self.new_tokens == 0
            || self.heads == 0
            || self.topk == 0
            || self.page == 0
            || self.dim == 0
            || !self.dim.is_multiple_of(32)
            || self.dim > 512
            || self.heads * self.dim * 4 > 48 * 1024
        {
            return bad(
                self.name(),
                "requests, new, heads, topk, page positive; dim a multiple of 32 up to 512; heads * dim * 4 <= 48 KiB",
            );
        }
        Ok(())
    }
    fn copies(&self) -> Option<usize> {
        Some(self.copies)
    }
}

/// The static key of an attention call in the kernels' `mode`.
pub fn attn_key(mode: kernels::AttnModeKind, heads: usize, dim: usize, page: usize) -> AttnKey {
    let (kind, limit) = match mode {
        kernels::AttnModeKind::Dense => (AttnKind::Dense, 0),
        kernels::AttnModeKind::Sparse(k) => (AttnKind::Sparse, k),
        kernels::AttnModeKind::Window(w) => (AttnKind::Window, w),
    };
    AttnKey {
        kind,
        limit,
        heads,
        dim,
        page,
    }
}

impl super::AttnShape {
    pub fn call(&self) -> Call {
        let key = attn_key(self.mode, self.heads, self.dim, self.page);
        Call::attention(key, self.rows() as u64, self.positions_read() as u64)
    }
}

impl super::CopyShape {
    pub fn call(&self) -> Call {
        Call::copy(self.bytes)
    }
}

impl super::OpSpec {
    /// The call a measurement of a live-model op stands for (`None` for ops the live
    /// model does not run).
    pub fn call(&self) -> Option<Call> {
        use super::OpSpec as S;
        Some(match self {
            S::Attention(s) => s.call(),
            S::AllToAll(s) => s.call(),
            S::Linear(s) => s.call(),
            S::Rmsnorm(s) => s.call(),
            S::Swiglu(s) => s.call(),
            S::GateTopk(s) => s.call(),
            S::GatherRows(s) => s.call(),
            S::MoeCombine(s) => s.call(),
            S::Add(s) => s.call(),
            S::KvWrite(s) => s.call(),
            S::IndexerPaged(s) => s.call(),
            S::Argmax(s) => s.call(),
            _ => return None,
        })
    }
}

/// An op set up on a device for timing: `run(dev, i)` runs copy `i % copies`.
type Runner = Box<dyn FnMut(&mut dyn ServeDevice, usize) -> Result<()>>;

/// Random paged cache of `pages` pages: (entries, scales).
fn random_cache(rng: &mut ChaCha8Rng, slots: usize, dim: usize) -> (Vec<u8>, Vec<f32>) {
    let mut kv = vec![0u8; slots * dim];
    rng.fill(&mut kv[..]);
    kv.iter_mut().for_each(|b| *b = kernels::moderate_fp8(*b));
    (
        kv,
        (0..slots).map(|_| rng.random_range(0.5f32..1.5)).collect(),
    )
}

/// Uploads `copies` seeded input sets of a live op to `dev` and returns the runner.
fn prepare(dev: &mut dyn ServeDevice, spec: &super::OpSpec, copies: usize) -> Result<Runner> {
    use super::OpSpec as S;
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let rng = &mut rng;
    match *spec {
        S::Linear(s) => prepare_linear(dev, s, copies),
        S::Rmsnorm(s) => prepare_rmsnorm(dev, rng, s, copies),
        S::Swiglu(s) => prepare_swiglu(dev, rng, s, copies),
        S::GateTopk(s) => prepare_gate(dev, rng, s, copies),
        S::GatherRows(s) => prepare_gather(dev, rng, s, copies),
        S::MoeCombine(s) => prepare_combine(dev, rng, s, copies),
        S::Add(s) => prepare_add(dev, rng, s, copies),
        S::KvWrite(s) => prepare_kv_write(dev, rng, s, copies),
        S::Argmax(s) => prepare_argmax(dev, rng, s, copies),
        S::IndexerPaged(s) => prepare_indexer(dev, rng, s, copies),
        _ => bad(spec.name(), "not an op of the serving device"),
    }
}

/// `n` random values in [-1, 1) on the device.
fn upload_random(dev: &mut dyn ServeDevice, rng: &mut ChaCha8Rng, n: usize) -> Result<Buf> {
    dev.upload_f32(&rand_f32(rng, n))
}

/// A runner over `copies` input sets, made in turn by `make`: run `i` runs `run` on set
/// `i % copies`.
fn rotate<T: 'static>(
    dev: &mut dyn ServeDevice,
    copies: usize,
    mut make: impl FnMut(&mut dyn ServeDevice) -> Result<T>,
    run: impl Fn(&mut dyn ServeDevice, &T) -> Result<()> + 'static,
) -> Result<Runner> {
    let sets = (0..copies).map(|_| make(dev)).collect::<Result<Vec<T>>>()?;
    Ok(Box::new(move |dev, i| run(dev, &sets[i % sets.len()])))
}

fn prepare_linear(dev: &mut dyn ServeDevice, s: LinearShape, copies: usize) -> Result<Runner> {
    let (w, x) = s.inputs(0);
    let dw = dev.upload_weights(&w)?;
    drop(w);
    let xb = dev.upload_f32(&x)?;
    let y = dev.alloc(Dt::F32, s.rows * s.n)?;
    let sets: Vec<Vec<Group>> = (0..copies).map(|c| s.groups_of(c)).collect();
    Ok(Box::new(move |dev, i| {
        dev.linear(&dw, &sets[i % sets.len()], xb, y)
    }))
}

fn prepare_rmsnorm(
    dev: &mut dyn ServeDevice,
    rng: &mut ChaCha8Rng,
    s: NormShape,
    copies: usize,
) -> Result<Runner> {
    let make = |dev: &mut dyn ServeDevice| {
        let x = upload_random(dev, rng, s.rows * s.dim)?;
        let d = if s.residual == 1 {
            Some(upload_random(dev, rng, s.rows * s.dim)?)
        } else {
            None
        };
        let w = dev.upload_f32(&vec![1.0; s.dim])?;
        Ok((x, d, w, dev.alloc(Dt::F32, s.rows * s.dim)?))
    };
    rotate(dev, copies, make, |dev, &(x, d, w, o)| {
        dev.rmsnorm(x, d, w, o, 1e-6)
    })
}

fn prepare_swiglu(
    dev: &mut dyn ServeDevice,
    rng: &mut ChaCha8Rng,
    s: SwigluShape,
    copies: usize,
) -> Result<Runner> {
    let make = |dev: &mut dyn ServeDevice| {
        let gu = upload_random(dev, rng, 2 * s.rows * s.ffn)?;
        Ok((gu, dev.alloc(Dt::F32, s.rows * s.ffn)?))
    };
    rotate(dev, copies, make, move |dev, &(gu, o)| {
        dev.swiglu(gu, o, s.ffn)
    })
}

fn prepare_gate(
    dev: &mut dyn ServeDevice,
    rng: &mut ChaCha8Rng,
    s: GateShape,
    copies: usize,
) -> Result<Runner> {
    let make = |dev: &mut dyn ServeDevice| {
        let l = upload_random(dev, rng, s.rows * s.experts)?;
        let ids = dev.alloc(Dt::I32, s.rows * s.topk)?;
        Ok((l, ids, dev.alloc(Dt::F32, s.rows * s.topk)?))
    };
    rotate(dev, copies, make, move |dev, &(l, ids, w)| {
        dev.gate_topk(l, s.experts, s.topk, ids, w)
    })
}

fn prepare_gather(
    dev: &mut dyn ServeDevice,
    rng: &mut ChaCha8Rng,
    s: GatherRowsShape,
    copies: usize,
) -> Result<Runner> {
    let table = upload_random(dev, rng, s.table_rows * s.dim)?;
    let make = |dev: &mut dyn ServeDevice| {
        let idx: Vec<i32> = (0..s.rows)
            .map(|_| rng.random_range(0..s.table_rows as i32))
            .collect();
        Ok((dev.upload_i32(&idx)?, dev.alloc(Dt::F32, s.rows * s.dim)?))
    };
    rotate(dev, copies, make, move |dev, &(idx, o)| {
        dev.gather_rows(table, s.dim, idx, o)
    })
}

fn prepare_combine(
    dev: &mut dyn ServeDevice,
    rng: &mut ChaCha8Rng,
    s: CombineShape,
    copies: usize,
) -> Result<Runner> {
    let make = |dev: &mut dyn ServeDevice| {
        let y = upload_random(dev, rng, s.rows * s.topk * s.dim)?;
        let slots: Vec<i32> = (0..(s.rows * s.topk) as i32).collect();
        let w = upload_random(dev, rng, s.rows * s.topk)?;
        let o = upload_random(dev, rng, s.rows * s.dim)?;
        Ok((y, dev.upload_i32(&slots)?, w, o))
    };
    rotate(dev, copies, make, move |dev, &(y, sl, w, o)| {
        dev.moe_combine(y, s.dim, sl, w, s.topk, o)
    })
}

fn prepare_add(
    dev: &mut dyn ServeDevice,
    rng: &mut ChaCha8Rng,
    s: AddShape,
    copies: usize,
) -> Result<Runner> {
    let make = |dev: &mut dyn ServeDevice| {
        let x = upload_random(dev, rng, s.rows * s.dim)?;
        Ok((x, upload_random(dev, rng, s.rows * s.dim)?))
    };
    rotate(dev, copies, make, |dev, &(x, y)| dev.add(x, y))
}

fn prepare_kv_write(
    dev: &mut dyn ServeDevice,
    rng: &mut ChaCha8Rng,
    s: KvWriteShape,
    copies: usize,
) -> Result<Runner> {
    let make = |dev: &mut dyn ServeDevice| {
        let src = upload_random(dev, rng, s.rows * s.dim)?;
        let mut slots: Vec<i32> = (0..s.slots as i32).collect();
        for i in 0..s.rows {
            let j = rng.random_range(i..s.slots);
            slots.swap(i, j);
        }
        slots.truncate(s.rows);
        let cache = dev.alloc(Dt::U8, s.slots * s.dim)?;
        let scales = dev.alloc(Dt::F32, s.slots)?;
        Ok((src, dev.upload_i32(&slots)?, cache, scales))
    };
    rotate(dev, copies, make, move |dev, &(src, sl, c, sc)| {
        dev.kv_write(src, s.dim, sl, c, sc)
    })
}

fn prepare_argmax(
    dev: &mut dyn ServeDevice,
    rng: &mut ChaCha8Rng,
    s: ArgmaxShape,
    copies: usize,
) -> Result<Runner> {
    let make = |dev: &mut dyn ServeDevice| {
        let l = upload_random(dev, rng, s.rows * s.n)?;
        Ok((l, dev.alloc(Dt::I32, s.rows)?))
    };
    rotate(dev, copies, make, move |dev, &(l, o)| dev.argmax(l, s.n, o))
}

fn prepare_indexer(
    dev: &mut dyn ServeDevice,
    rng: &mut ChaCha8Rng,
    s: IndexerPagedShape,
    copies: usize,
) -> Result<Runner> {
    let make = |dev: &mut dyn ServeDevice| indexer_inputs(dev, rng, &s);
    rotate(dev, copies, make, |dev, call| dev.indexer(call))
}

/// One seeded input set of a paged indexer call: a random key cache of every
/// request's pages, queries and head weights.
fn indexer_inputs(
    dev: &mut dyn ServeDevice,
    rng: &mut ChaCha8Rng,
    s: &IndexerPagedShape,
) -> Result<IndexerCall> {
    let seq = s.context + s.new_tokens;
    let max_pages = seq.div_ceil(s.page);
    let rows = s.rows();
    let n_pages = s.requests * max_pages;
    let (keys, scales) = random_cache(rng, n_pages * s.page, s.dim);
    let mut table = Vec::with_capacity(rows * max_pages);
    let mut lens = Vec::with_capacity(rows);
    for r in 0..s.requests {
        for i in 0..s.new_tokens {
            table.extend((0..max_pages).map(|p| (r * max_pages + p) as i32));
            lens.push((s.context + i + 1) as i32);
        }
    }
    Ok(IndexerCall {
        rows,
        heads: s.heads,
        dim: s.dim,
        page_size: s.page,
        max_pages,
        n_pos: seq,
        topk: s.topk,
        q: upload_random(dev, rng, rows * s.heads * s.dim)?,
        w: dev.upload_f32(
            &(0..rows * s.heads)
                .map(|_| rng.random_range(0.0f32..1.0))
                .collect::<Vec<_>>(),
        )?,
        keys: dev.upload_u8(&keys)?,
        key_scale: dev.upload_f32(&scales)?,
        block_table: dev.upload_i32(&table)?,
        seq_lens: dev.upload_i32(&lens)?,
        scores: dev.alloc(Dt::F32, rows * seq)?,
        out: dev.alloc(Dt::I32, rows * s.topk)?,
    })
}

/// Times a live op on a serving device: `cfg.warmup` untimed runs, then up to
/// `cfg.reps` timed runs, each followed by `dev.sync()`, on the host clock.
pub fn measure_on(
    dev: &mut dyn ServeDevice,
    spec: &super::OpSpec,
    cfg: &TimingConfig,
    copies: usize,
) -> Result<Stats> {
    spec.validate()?;
    let mut run = prepare(dev, spec, copies.max(1))?;
    crate::stats::time_settled(cfg, dev, |dev, i| run(dev, i), |dev| dev.sync())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::op::OpSpec;
    use crate::serve::device::CpuDevice;

    /// Every live op of the registry, at a tiny shape.
    pub fn tiny_live_ops() -> Vec<OpSpec> {
        vec![
            OpSpec::Linear(LinearShape {
                dtype: WeightDtype::Bf16,
                n: 16,
                k: 256,
                groups: 3,
                rows: 7,
                experts: 4,
                copies: 2,
            }),
            OpSpec::Rmsnorm(NormShape {
                rows: 3,
                dim: 64,
                residual: 1,
            }),
            OpSpec::Swiglu(SwigluShape { rows: 3, ffn: 32 }),
            OpSpec::GateTopk(GateShape {
                rows: 5,
                experts: 8,
                topk: 2,
            }),
            OpSpec::GatherRows(GatherRowsShape {
                rows: 5,
                dim: 16,
                table_rows: 9,
            }),
            OpSpec::MoeCombine(CombineShape {
                rows: 4,
                topk: 2,
                dim: 16,
            }),
            OpSpec::Add(AddShape { rows: 4, dim: 16 }),
            OpSpec::KvWrite(KvWriteShape {
                rows: 4,
                dim: 64,
                slots: 32,
            }),
            OpSpec::IndexerPaged(IndexerPagedShape {
                requests: 2,
                new_tokens: 3,
                context: 20,
                heads: 2,
                dim: 32,
                topk: 8,
                page: 16,
                copies: 2,
            }),
            OpSpec::Argmax(ArgmaxShape { rows: 3, n: 50 }),
        ]
    }

    #[test]
    fn every_live_op_measures_on_the_cpu_device() {
        let ops = tiny_live_ops();
        let mut live: Vec<&str> = ops.iter().map(|o| o.name()).collect();
        live.sort_unstable();
        let mut registry = crate::op::op_names(crate::OpRole::Live);
        registry.sort_unstable();
        assert_eq!(live, registry, "one tiny shape per live op of the registry");
        for op in &ops {
            let mut dev = CpuDevice::new();
            let st = measure_on(&mut dev, op, &TimingConfig::SMOKE, 2)
                .unwrap_or_else(|e| panic!("{op:?}: {e}"));
            assert!(st.median_s > 0.0 && op.bytes() > 0, "{op:?}");
            assert!(op.is_live());
        }
        let bad = OpSpec::Linear(LinearShape {
            dtype: WeightDtype::Bf16,
            n: 16,
            k: 100,
            groups: 1,
            rows: 1,
            experts: 1,
            copies: 1,
        });
        assert!(measure_on(&mut CpuDevice::new(), &bad, &TimingConfig::SMOKE, 1).is_err());
    }
}
