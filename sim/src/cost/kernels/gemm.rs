//! GEMM time from a tile model, grounded in DeepGEMM's published H800 tables.
//!
//! A GEMM kernel splits its `M x N` output (per group) into `BM x BN` tiles, runs them
//! on the SMs in waves, and streams its operands from HBM:
//! - tile choice: the fewest waves over the SMs, then the smallest tile that keeps that
//!   wave count (the best last-wave fill), as wave-minimising libraries (DeepGEMM,
//!   CUTLASS heuristics) choose; 64-row tiles when M <= 64, 128 or 256 above;
//! - a tile's main loop takes, per 128-wide K block, the longer of its MMA time at the
//!   SM's share of the tensor rate and loading its A and B blocks at the SM's load
//!   bandwidth; its epilogue costs `epilogue_k` extra K elements of MMA;
//! - fewer tiles than SMs: the K loop is split over the idle SMs (split-K/stream-K,
//!   as CUTLASS and cuBLAS do for skinny GEMMs; no DeepGEMM table shape needs it);
//! - compute time = waves x tile time; memory time = the operands and output
//!   (`M K + N K + 2 M N` per group, as DeepGEMM counts) at HBM bandwidth; the two
//!   overlap imperfectly: `t = (t_c^p + t_m^p)^(1/p) + fixed`.
//!
//! At decode sizes (at most [`SMALL_M_MAX`] rows per group) the engines also have
//! small-M kernels, and take whichever is faster ([`small_m`]): the operands swapped
//! (swap-AB, `transposeMmaOutput`), so the weight's rows fill the MMA's 64- or 128-wide
//! M side and the tokens its narrow N side (8, 16 or 32), with the K loop spread over
//! every SM (stream-K / split-K; the FP32 partial sums meet in L2, at most rows x SMs x
//! 128 x 4 B, a few MB, and cost no HBM traffic). A 1-row GEMM then loads 8 rows of
//! activations per tile instead of 64 and streams its weights on every SM:
//! memory-bound, near the weight read. Sources: vLLM's SM90 FP8 dispatch (M in [1, 16]: 64x16x256 tiles with
//! swap-AB; `csrc/quantization/w8a8/cutlass/c3x/scaled_mm_sm90_fp8_dispatch.cuh` at
//! 68f442eb), vLLM 0.24's block-FP8 dispatch (FlashInfer's swap-AB kernel below M = 32,
//! DeepGEMM above: AIConfigurator's `collector/vllm/collect_gemm.py` at 095f58a5 reads
//! it so), TensorRT-LLM's Blackwell GEMMs (`tile128x8x256 ...
//! splitK4_transposeMmaOutput` in `cpp/tensorrt_llm/kernels/trtllmGenKernels/
//! gemmGatedAct`), the MoE kernels' token tiles of 8 to 64
//! (`calculate_tile_tokens_dim` in vLLM's FlashInfer TRT-LLM MoE path) and CUTLASS's
//! stream-K tile scheduler.
//!
//! Every GEMM of the step model goes through [`time`], and so does `twin kernel gemm`.

use crate::cost::params::{OpRate, TileParams};
use crate::cost::Bound;

/// How a GEMM's groups are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmKind {
    /// One matrix product.
    Dense,
    /// Grouped, rows of all groups concatenated, each group aligned to 128 rows (MoE
    /// prefill).
    Contiguous,
    /// Grouped, each group padded to the same row count (MoE decode with CUDA graphs).
    Masked,
}

impl GemmKind {
    pub fn name(self) -> &'static str {
        match self {
            GemmKind::Dense => "dense",
            GemmKind::Contiguous => "grouped-contiguous",
            GemmKind::Masked => "grouped-masked",
        }
    }
}

/// One GEMM (or grouped GEMM) to price.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemm {
    pub kind: GemmKind,
    /// Groups (1 for dense).
    pub groups: f64,
    /// Rows per group (tokens).
    pub m: f64,
    /// Output columns.
    pub n: f64,
    /// Reduction length.
    pub k: f64,
    /// Bytes per element of the activations (A).
    pub a_bytes: f64,
    /// Bytes per element of the weights (B), block scales included.
    pub b_bytes: f64,
    /// Bytes per output element.
    pub out_bytes: f64,
    /// Tensor throughput of the operand pair, flop/s (datasheet).
    pub rate: f64,
    /// Grouped GEMMs whose groups' row counts scatter around `m` (experts of unequal
    /// load): a group pads its last row tile, `m / BM + 1/2` tiles in expectation,
    /// instead of `ceil(m / BM)` for exact counts.
    pub rows_vary: bool,
}

/// The device a kernel runs on, as the kernel models need it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelDevice {
    pub sms: f64,
    pub hbm_bytes_per_s: f64,
    /// Dense FP8 tensor rate of the whole device (sets the per-SM load bandwidth).
    pub fp8_flops_per_s: f64,
}

impl KernelDevice {
    /// The device of hardware `hw`.
    #[inline]
    pub fn of(hw: &spec::hardware::Hardware) -> KernelDevice {
        KernelDevice {
            sms: hw.sms.max(1) as f64,
            hbm_bytes_per_s: hw.hbm.bytes_per_s,
            fp8_flops_per_s: hw.tensor.fp8_flops_per_s,
        }
    }
}

/// What one kernel costs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct KernelTime {
    pub s: f64,
    pub compute_s: f64,
    pub memory_s: f64,
    pub flops: f64,
    pub bytes: f64,
    pub bound: Bound,
}

/// `(a^p + b^p)^(1/p)`: 1 adds, large p tends to the maximum.
#[inline]
pub fn soft_max(a: f64, b: f64, p: f64) -> f64 {
    if a <= 0.0 {
        return b.max(0.0);
    }
    if b <= 0.0 {
        return a;
    }
    if p == 1.0 {
        return a + b;
    }
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    hi * (1.0 + (lo / hi).powf(p)).powf(1.0 / p)
}

/// `(a^p + b^p)^(1/p)` for one `p`, from a table of `(1 + r^p)^(1/p)` over the square
/// root of the ratio `r` of the smaller to the larger (smooth there for p >= 1; 257
/// points, linear interpolation, relative error below 1e-5), so the step model prices
/// a GEMM without calling `powf`.
#[derive(Debug, Clone, PartialEq)]
pub struct SoftMax {
    p: f64,
    table: Vec<f64>,
}

impl SoftMax {
    const N: usize = 256;

    pub fn new(p: f64) -> SoftMax {
        let table = if p == 1.0 {
            Vec::new()
        } else {
            (0..=Self::N)
                .map(|i| {
                    let x = i as f64 / Self::N as f64;
                    soft_max(1.0, x * x, p)
                })
                .collect()
        };
        SoftMax { p, table }
    }

    pub fn of(&self, a: f64, b: f64) -> f64 {
        if a <= 0.0 {
            return b.max(0.0);
        }
        if b <= 0.0 {
            return a;
        }
        if self.p == 1.0 {
            return a + b;
        }
        let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
        let x = (lo / hi).sqrt() * Self::N as f64;
        let i = (x as usize).min(Self::N - 1);
        let f = x - i as f64;
        hi * (self.table[i] + f * (self.table[i + 1] - self.table[i]))
    }
}

/// Tile rows and columns and the number of waves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tiling {
    pub bm: f64,
    pub bn: f64,
    pub waves: f64,
    /// Output tiles in all.
    pub tiles: f64,
}

/// `x.ceil()` for `0 <= x < 2^52`, inline (the portable x86-64 target has no rounding
/// instruction, and `f64::ceil` becomes a library call on the hot path).
#[inline]
fn ceil(x: f64) -> f64 {
    let t = x as i64 as f64;
    if t < x {
        t + 1.0
    } else {
        t
    }
}

/// `x.floor()` for `0 <= x < 2^52`, inline.
#[inline]
fn floor(x: f64) -> f64 {
    x as i64 as f64
}

const BN_MIN: f64 = 16.0;
const BN_MAX: f64 = 160.0;
const BN_STEP: f64 = 8.0;

/// Row tiles of one group of `m` rows in tiles of `bm`.
fn row_tiles(m: f64, bm: f64, rows_vary: bool) -> f64 {
    if rows_vary {
        (m / bm + 0.5).max(1.0)
    } else {
        ceil(m / bm).max(1.0)
    }
}

/// The tile choice: fewest waves, then the least padded work at that wave count.
pub fn tiling(kind: GemmKind, groups: f64, m: f64, n: f64, sms: f64, rows_vary: bool) -> Tiling {
    // 256-row tiles only pay where 128-row ones need more than one row of tiles.
    let rows: &[f64] = match kind {
        GemmKind::Contiguous => &[128.0],
        _ if m <= 64.0 => &[64.0],
        GemmKind::Masked => &[128.0],
        GemmKind::Dense if m * groups <= 128.0 => &[128.0],
        GemmKind::Dense => &[128.0, 256.0],
    };
    let mut best: Option<(f64, f64, Tiling)> = None;
    for &bm in rows {
        let bn_max = if bm <= 128.0 { BN_MAX } else { 128.0 };
        let m_tiles = row_tiles(m, bm, rows_vary) * groups;
        let waves = ceil(m_tiles * ceil(n / bn_max) / sms).max(1.0);
        // Columns of tiles that still fit that many waves, and the narrowest tile
        // covering N with them.
        let cols = floor(waves * sms / m_tiles).max(1.0);
        let bn = (ceil(n / cols / BN_STEP) * BN_STEP).clamp(BN_MIN, bn_max);
        let waves = ceil(m_tiles * ceil(n / bn) / sms).max(1.0);
        let work = waves * bm * bn;
        let t = Tiling {
            bm,
            bn,
            waves,
            tiles: m_tiles * ceil(n / bn),
        };
        if best.is_none_or(|(w, x, _)| (waves, work) < (w, x)) {
            best = Some((waves, work, t));
        }
    }
    best.map(|b| b.2).expect("at least one tile height")
}

/// Rows per group up to which the small-M (swap-AB) kernels compete: vLLM 0.24 sends
/// block-FP8 GEMMs below M = 32 to FlashInfer's swap-AB kernel, and 32 tokens are the
/// widest N side twin gives them. Above it the row tiles of [`tiling`] stand alone, so
/// DeepGEMM's published shapes (M >= 64) price as before.
pub const SMALL_M_MAX: f64 = 32.0;

/// Token widths (the MMA's N side) of the small-M tiles.
const SMALL_M_TOKENS: [f64; 3] = [8.0, 16.0, 32.0];
/// Weight rows (the MMA's M side) of the small-M tiles: one Hopper warpgroup's 64, or
/// a Blackwell 128-row MMA.
const SMALL_M_WEIGHT_ROWS: [f64; 2] = [64.0, 128.0];

/// The rates tiles run at: the device's MMA flop/s at full-tile efficiency, and one
/// SM's operand-load bytes/s.
#[derive(Debug, Clone, Copy, PartialEq)]
struct SmRates {
    flops: f64,
    load: f64,
}

/// The row-tiled kernel of [`tiling`] (64-, 128- or 256-row tiles), split-K over idle
/// SMs when there are fewer tiles than SMs.
fn row_tiled(g: &Gemm, dev: &KernelDevice, tile: &TileParams, sm: SmRates) -> f64 {
    let t = tiling(g.kind, g.groups, g.m, g.n, dev.sms, g.rows_vary);
    let small = if t.bm <= 64.0 {
        tile.small_tile_eff
    } else {
        1.0
    };
    let flops_per_sm = sm.flops * small / dev.sms;
    let k_blocks = g.k / 128.0;
    let mma = 2.0 * t.bm * t.bn * 128.0 / flops_per_sm;
    let load = (t.bm * g.a_bytes + t.bn * g.b_bytes) * 128.0 / sm.load;
    let split = floor(dev.sms / t.tiles).clamp(1.0, ceil(k_blocks).max(1.0));
    let tile_s =
        k_blocks / split * mma.max(load) + tile.epilogue_k * 2.0 * t.bm * t.bn / flops_per_sm;
    t.waves * tile_s
}

/// A small-M kernel with tiles of `bt` tokens by `bw` weight rows (swap-AB), its K
/// blocks spread evenly over every SM (stream-K): each SM runs `ceil(units / SMs)`
/// blocks of 128 K and the epilogues of its share of tiles.
fn small_m(g: &Gemm, dev: &KernelDevice, tile: &TileParams, sm: SmRates, bt: f64, bw: f64) -> f64 {
    let flops_per_sm = sm.flops * tile.small_tile_eff / dev.sms;
    let row_tiles = row_tiles(g.m, bt, g.rows_vary) * g.groups;
    let tiles = row_tiles * ceil(g.n / bw);
    let k_blocks = g.k / 128.0;
    let mma = 2.0 * bt * bw * 128.0 / flops_per_sm;
    let load = (bt * g.a_bytes + bw * g.b_bytes) * 128.0 / sm.load;
    let blocks_per_sm = ceil(tiles * k_blocks / dev.sms).max(1.0);
    let epilogues = ceil(tiles / dev.sms);
    blocks_per_sm * mma.max(load) + epilogues * tile.epilogue_k * 2.0 * bt * bw / flops_per_sm
}

/// Prices one GEMM on `dev` with efficiency `rate` (mem_eff of HBM, compute_eff of the
/// tensor rate at the best tile, fixed_s per launch), tile constants `tile`, and
/// `roof` the soft maximum at `tile.overlap_p`: the faster of the row-tiled kernel and,
/// at most [`SMALL_M_MAX`] rows per group, the small-M kernels.
pub fn time(
    g: &Gemm,
    dev: &KernelDevice,
    rate: &OpRate,
    tile: &TileParams,
    roof: &SoftMax,
) -> KernelTime {
    if g.m <= 0.0 || g.n <= 0.0 || g.k <= 0.0 || g.groups <= 0.0 {
        return KernelTime::default();
    }
    debug_assert_eq!(
        roof.p, tile.overlap_p,
        "the soft maximum of another exponent"
    );
    let sm = SmRates {
        flops: g.rate * rate.compute_eff,
        load: tile.load_bytes_per_flop * dev.fp8_flops_per_s / dev.sms,
    };
    let bytes =
        g.groups * (g.m * g.k * g.a_bytes + g.k * g.n * g.b_bytes + g.m * g.n * g.out_bytes);
    let memory_s = bytes / (dev.hbm_bytes_per_s * rate.mem_eff);
    let mut compute_s = row_tiled(g, dev, tile, sm);
    if g.m <= SMALL_M_MAX {
        for bt in SMALL_M_TOKENS {
            for bw in SMALL_M_WEIGHT_ROWS {
                compute_s = compute_s.min(small_m(g, dev, tile, sm, bt, bw));
            }
        }
    }
    let s = roof.of(compute_s, memory_s);
    KernelTime {
        s: s + rate.fixed_s,
        compute_s,
        memory_s,
        flops: 2.0 * g.groups * g.m * g.n * g.k,
        bytes,
        bound: if compute_s > memory_s {
            Bound::Compute
        } else {
            Bound::Memory
        },
    }
}

#[cfg(test)]
#[allow(clippy::field_reassign_with_default)]
mod tests {
    use super::*;

    // Per SM: 1e13 flop/s, and 1e13 * load_bytes_per_flop B/s of operand loads.
    const DEV: KernelDevice = KernelDevice {
        sms: 100.0,
        hbm_bytes_per_s: 1e12,
        fp8_flops_per_s: 1e15,
    };

    fn ideal() -> (OpRate, TileParams) {
        (
            OpRate::new(1.0, 1.0, 0.0),
            TileParams {
                load_bytes_per_flop: 0.1,
                epilogue_k: 0.0,
                small_tile_eff: 1.0,
                overlap_p: 1e9,
            },
        )
    }

    /// `g` priced on `DEV` at rates `r` and tile constants `t`.
    fn priced(g: Gemm, r: &OpRate, t: &TileParams) -> KernelTime {
        time(&g, &DEV, r, t, &SoftMax::new(t.overlap_p))
    }

    fn fp8(kind: GemmKind, groups: f64, m: f64, n: f64, k: f64) -> Gemm {
        Gemm {
            kind,
            groups,
            m,
            n,
            k,
            a_bytes: 1.0,
            b_bytes: 1.0,
            out_bytes: 2.0,
            rate: 1e15,
            rows_vary: false,
        }
    }

    #[test]
    fn inline_rounding_matches_the_library() {
        for x in [0.0, 0.3, 1.0, 1.5, 2.0, 127.9999, 128.0, 1e12 + 0.5] {
            assert_eq!(ceil(x), x.ceil(), "{x}");
            assert_eq!(floor(x), x.floor(), "{x}");
        }
    }

    #[test]
    fn tiles_minimise_waves_then_padding() {
        // M = 64, N = 2000 on 100 SMs: one row of 64-row tiles; N / 160 -> 13 columns
        // fit one wave; the narrowest tile keeping one wave covers 2000 with 100
        // columns: 20 -> 24 (multiple of 8).
        let t = tiling(GemmKind::Dense, 1.0, 64.0, 2000.0, 100.0, false);
        assert_eq!((t.bm, t.bn, t.waves), (64.0, 24.0, 1.0));
        // M = 4096: 256-row tiles (16 rows) x 128 columns (16 for N = 2048) = 256 tiles,
        // 3 waves; 128-row tiles need 32 x 13 = 416 tiles at BN 160: 5 waves.
        let t = tiling(GemmKind::Dense, 1.0, 4096.0, 2048.0, 100.0, false);
        assert_eq!((t.bm, t.waves), (256.0, 3.0));
        // With 3 waves of 100 SMs, 300 / 16 = 18 columns: 2048 / 18 -> 120.
        assert_eq!(t.bn, 120.0);
    }

    #[test]
    fn compute_bound_gemm_by_hand() {
        // M = 4096, N = 2048, K = 1280 on the tiling above (256 x 120, 3 waves), ideal
        // rates: per SM 1e13 flop/s; a tile's K block of 128 takes
        // 2 * 256 * 120 * 128 / 1e13 = 0.786432 us; 10 blocks: 7.86432 us; 3 waves:
        // 23.59296 us. Memory: 4096*1280 + 1280*2048 + 2*4096*2048 = 24,641,536 B at
        // 1e12 B/s = 24.64 us > compute: memory-bound by a hair; with p -> inf the
        // larger binds.
        let (r, t) = ideal();
        let k = priced(fp8(GemmKind::Dense, 1.0, 4096.0, 2048.0, 1280.0), &r, &t);
        assert!((k.compute_s - 23.59296e-6).abs() < 1e-12, "{}", k.compute_s);
        assert!((k.memory_s - 24.641536e-6).abs() < 1e-12, "{}", k.memory_s);
        assert!((k.s - 24.641536e-6).abs() < 1e-12);
        assert_eq!(k.bound, Bound::Memory);
        assert_eq!(k.flops, 2.0 * 4096.0 * 2048.0 * 1280.0);
    }

    #[test]
    fn soft_roofline_adds_at_p_one() {
        let (r, mut t) = ideal();
        t.overlap_p = 1.0;
        let k = priced(fp8(GemmKind::Dense, 1.0, 4096.0, 2048.0, 1280.0), &r, &t);
        assert!((k.s - (23.59296e-6 + 24.641536e-6)).abs() < 1e-12);
        assert!((soft_max(3.0, 4.0, 2.0) - 5.0).abs() < 1e-12);
        assert_eq!(soft_max(0.0, 4.0, 2.0), 4.0);
        // The table agrees with the formula.
        for p in [1.0, 1.5, 3.0, 1e9] {
            let t = SoftMax::new(p);
            for (a, b) in [
                (3.0, 4.0),
                (1.0, 1e-3),
                (5.0, 5.0),
                (2.0, 0.0),
                (1e-9, 7e-9),
            ] {
                let (x, y) = (t.of(a, b), soft_max(a, b, p));
                assert!((x - y).abs() <= 1e-5 * y, "p {p}: {a} {b}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn thin_tiles_are_load_bound_and_small_tiles_slower() {
        // One 64 x 24 tile column per SM (M = 64, N = 2000, K = 1280): MMA per block
        // 2*64*24*128/1e13 = 0.0393 us; loading (64 + 24) * 128 B at 1e13 * 1e-4 =
        // 1e9 B/s = 11.26 us: load-bound, 10 blocks = 112.64 us.
        let (r, mut t) = ideal();
        t.load_bytes_per_flop = 1e-4;
        let k = priced(fp8(GemmKind::Dense, 1.0, 64.0, 2000.0, 1280.0), &r, &t);
        assert!((k.compute_s - 112.64e-6).abs() < 1e-12, "{}", k.compute_s);
        assert_eq!(k.bound, Bound::Compute);
        // Half-rate 64-row tiles double the MMA part only.
        let (r, mut t) = ideal();
        t.small_tile_eff = 0.5;
        let a = priced(fp8(GemmKind::Dense, 1.0, 64.0, 2000.0, 1280.0), &r, &t);
        t.small_tile_eff = 1.0;
        let b = priced(fp8(GemmKind::Dense, 1.0, 64.0, 2000.0, 1280.0), &r, &t);
        assert!((a.compute_s - 2.0 * b.compute_s).abs() < 1e-15);
    }

    #[test]
    fn skinny_gemms_split_k_over_idle_sms() {
        // M = 64, N = 320, K = 12800 on 100 SMs: the narrowest tile (16 columns) gives
        // 20 tiles; 5 SMs share each tile's 100 K blocks: 20 blocks each. Load-bound
        // blocks ((64 + 16) * 128 B at 1e9 B/s = 10.24 us): 204.8 us, not 1024 us.
        let (r, mut t) = ideal();
        t.load_bytes_per_flop = 1e-4;
        let k = priced(fp8(GemmKind::Dense, 1.0, 64.0, 320.0, 12800.0), &r, &t);
        assert!((k.compute_s - 204.8e-6).abs() < 1e-12, "{}", k.compute_s);
    }

    /// A device whose SMs together load operands at 1.125x its HBM bandwidth (an
    /// A100-like balance): 100 SMs, 1e12 B/s, a 1.5e14 flop/s tensor rate for BF16 and
    /// FP8 alike, the H800 fit's load constant: `0.0075 * 1.5e14 / 100` = 1.125e10 B/s
    /// per SM.
    const THIN: KernelDevice = KernelDevice {
        sms: 100.0,
        hbm_bytes_per_s: 1e12,
        fp8_flops_per_s: 1.5e14,
    };

    fn bf16(m: f64) -> Gemm {
        Gemm {
            a_bytes: 2.0,
            b_bytes: 2.0,
            rate: 1.5e14,
            ..fp8(GemmKind::Dense, 1.0, m, 8192.0, 8192.0)
        }
    }

    #[test]
    fn one_row_gemms_stream_their_weights_on_small_m_tiles() {
        // Issue 38, item 6: a 1-row GEMM was padded to 64-row tiles and priced
        // compute-bound. M = 1, N = K = 8192, BF16 on THIN, ideal rates, p -> inf.
        let (r, mut t) = ideal();
        t.load_bytes_per_flop = 0.0075;
        let sm = SmRates {
            flops: 1.5e14,
            load: 1.125e10,
        };
        // Row tiles (before): one row of 64-row tiles; N / 160 = 52 columns fit one wave
        // of 100 SMs, the narrowest tile keeping it is ceil(8192 / 100 / 8) * 8 = 88
        // wide. A K block loads (64 x 2 + 88 x 2) x 128 = 38,912 B in 3.4588 us; 64
        // blocks: 221.36 us, above the 134.23 us of reading the weights.
        let rows = row_tiled(&bf16(1.0), &THIN, &t, sm);
        assert!((rows - 64.0 * 38_912.0 / 1.125e10).abs() < 1e-12);
        // Small-M tiles of 8 tokens by 128 weight rows: 64 tiles x 64 K blocks = 4096
        // blocks over 100 SMs, 41 each, of (8 x 2 + 128 x 2) x 128 = 34,816 B: 126.88
        // us.
        let small = small_m(&bf16(1.0), &THIN, &t, sm, 8.0, 128.0);
        assert!((small - 41.0 * 34_816.0 / 1.125e10).abs() < 1e-12);
        // The kernel takes the faster: memory-bound, at the weight read (operands
        // 8192 x 2 + 8192^2 x 2 + 8192 x 2 = 134,250,496 B at 1e12 B/s).
        let k = time(&bf16(1.0), &THIN, &r, &t, &SoftMax::new(t.overlap_p));
        assert_eq!(k.bound, Bound::Memory);
        assert!((k.compute_s - small).abs() < 1e-15);
        assert!((k.s - 134_250_496.0 / 1e12).abs() < 1e-12, "{}", k.s);
        // Up to 32 rows the small-M kernels compete; at 33 the row tiles stand alone.
        for m in [1.0, 4.0, 16.0] {
            let k = time(&bf16(m), &THIN, &r, &t, &SoftMax::new(t.overlap_p));
            assert_eq!(k.bound, Bound::Memory, "m = {m}");
        }
        let k33 = time(&bf16(33.0), &THIN, &r, &t, &SoftMax::new(t.overlap_p));
        assert_eq!(k33.compute_s, row_tiled(&bf16(33.0), &THIN, &t, sm));
    }

    #[test]
    fn small_m_tiles_leave_large_gemms_as_they_were() {
        // Above SMALL_M_MAX rows the price is the row-tiled kernel's alone, bit for bit
        // (DeepGEMM's published shapes have M >= 64).
        let (r, t) = ideal();
        let g = fp8(GemmKind::Dense, 1.0, 64.0, 2000.0, 1280.0);
        let k = priced(g, &r, &t);
        let sm = SmRates {
            flops: 1e15,
            load: 0.1 * 1e15 / 100.0,
        };
        let v = row_tiled(&g, &DEV, &t, sm);
        let memory_s = g.k * g.n + g.m * g.k + 2.0 * g.m * g.n;
        assert_eq!(k.compute_s, v);
        assert_eq!(k.s, soft_max(v, memory_s / 1e12, 1e9));
    }

    #[test]
    fn grouped_gemms_at_a_few_rows_per_expert_stream_their_weights() {
        // 64 experts of about 2 rows each (scattered counts), N = 4096, K = 2048, FP8 on
        // DEV with thin loads (1e9 B/s per SM, 1e11 B/s over the SMs, a tenth of HBM).
        // Row tiles: each expert pads its 2 rows to one 64-row tile; 64 x 26 tiles of
        // 160 columns run in 17 waves of 16 K blocks of (64 + 160) x 128 B at 1e9
        // B/s: 7.7988 ms. Small-M tiles pad them to 8 (m / 8 + 1/2 < 1: one tile per
        // expert), 128 weight rows wide: 64 x 32 = 2048 tiles x 16 K blocks over 100
        // SMs = 328 blocks of (8 + 128) x 128 B: 5.7098 ms.
        let (r, mut t) = ideal();
        t.load_bytes_per_flop = 1e-4;
        let mut g = fp8(GemmKind::Masked, 64.0, 2.0, 4096.0, 2048.0);
        g.rows_vary = true;
        let sm = SmRates {
            flops: 1e15,
            load: 1e9,
        };
        let small = small_m(&g, &DEV, &t, sm, 8.0, 128.0);
        assert!((small - 328.0 * 136.0 * 128.0 / 1e9).abs() < 1e-12);
        let k = priced(g, &r, &t);
        assert!(k.compute_s <= small);
        let rows = row_tiled(&g, &DEV, &t, sm);
        assert!(
            (rows - 17.0 * 16.0 * 224.0 * 128.0 / 1e9).abs() < 1e-12,
            "{rows}"
        );
    }

    #[test]
    fn groups_multiply_weights_and_tiles() {
        // Masked: 4 groups of 256 rows read 4 weight matrices; one group of 1024 rows
        // reads one: the grouped GEMM moves more bytes for the same flops.
        let (r, t) = ideal();
        let g4 = priced(fp8(GemmKind::Masked, 4.0, 256.0, 4096.0, 7168.0), &r, &t);
        let g1 = priced(fp8(GemmKind::Masked, 1.0, 1024.0, 4096.0, 7168.0), &r, &t);
        assert_eq!(g4.flops, g1.flops);
        assert!(g4.bytes > 3.0 * g1.bytes * 0.7);
        assert!(g4.s >= g1.s);
        assert_eq!(
            time(
                &fp8(GemmKind::Dense, 1.0, 0.0, 1.0, 1.0),
                &DEV,
                &r,
                &t,
                &SoftMax::new(t.overlap_p)
            )
            .s,
            0.0
        );
        // Scattered group sizes: 4 groups of 256 mean rows pad 2.5 tiles of 128 each.
        let t4 = tiling(GemmKind::Masked, 4.0, 256.0, 4096.0, 100.0, true);
        let t4x = tiling(GemmKind::Masked, 4.0, 256.0, 4096.0, 100.0, false);
        assert!(t4.waves * t4.bn >= t4x.waves * t4x.bn);
        assert_eq!(row_tiles(256.0, 128.0, true), 2.5);
        assert_eq!(row_tiles(10.0, 128.0, true), 1.0);
    }
}
