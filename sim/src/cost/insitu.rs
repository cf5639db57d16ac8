//! In-situ terms: how kernels behave inside a running deployment, beside their
//! isolated benchmarks.
//!
//! A deployment runs its kernels slower than their unit benchmarks: the communication
//! kernels keep their SMs for the whole prefill step, a notify/barrier kernel waits for
//! every rank before each normal dispatch and combine, small kernels cost a few
//! microseconds however few bytes they move, and in decode the low-latency kernels'
//! send and receive halves run on the compute stream. Each term here is one of those,
//! with its source in `docs/step-pricing.md`; the per-class `factor`s are what remains,
//! fitted to an in-situ breakdown (`scenarios/published/in-situ-deepseek-h800.csv`, or
//! `twin calibrate --from-trace` of a user's own trace). All defaults are the isolated
//! prices: factor 1, no floor, no barrier, SMs held only while the kernels run.
//!
//! [`InSituLayer`] is one MoE layer of a priced step as the in-situ breakdown reports
//! it (both micro-batches together, per stream and category), the form a trace or a
//! published breakdown is compared with.

use serde::{Deserialize, Serialize};
use spec::insitu::{Category, LayerBreakdown, Stream};

/// Residual factors of one phase's compute kernels: in-situ time over the isolated
/// price once the physical terms are counted. Prefill (compute-bound GEMMs and
/// attention beside communication) and decode (memory-bound kernels) behave apart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Factors {
    #[serde(default = "unit")]
    pub moe: f64,
    #[serde(default = "unit")]
    pub attention: f64,
    #[serde(default = "unit")]
    pub gemm: f64,
    #[serde(default = "unit")]
    pub elementwise: f64,
}

impl Default for Factors {
    fn default() -> Self {
        Factors {
            moe: 1.0,
            attention: 1.0,
            gemm: 1.0,
            elementwise: 1.0,
        }
    }
}

/// In-situ terms of a hardware file's `[cost]` keys `in_situ.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct InSitu {
    /// Where the values come from (empty: isolated-kernel prices, or set by hand).
    #[serde(default)]
    pub source: String,
    /// Share of the prefill step for which the normal all-to-all kernels hold their
    /// `comm_sms` SMs away from compute: 0 while they run (isolated), 1 for the whole
    /// step (DeepSeek's deployment: every compute kernel on 108 of 132 SMs).
    #[serde(default)]
    pub sm_hold: f64,
    /// Least seconds an element-wise kernel takes, however few bytes it moves.
    #[serde(default)]
    pub kernel_floor_s: f64,
    /// The notify/barrier before each normal (prefill) dispatch and combine of one
    /// micro-batch, on the communication stream, as a share of that micro-batch's
    /// compute in the layer: a barrier waits for the slowest rank, and ranks drift
    /// apart in proportion to the work between two barriers.
    #[serde(default)]
    pub barrier_frac: f64,
    /// Share of the residual factors that applies to a step without all-to-all (a
    /// tensor-parallel replica, one GPU): 1 = all of them. Factors fitted on an
    /// expert-parallel deployment, whose kernels run beside communication kernels and a
    /// second micro-batch, need not describe kernels that run one after another like
    /// their benchmarks; a fit to such a deployment's own trace applies in full.
    #[serde(default = "unit")]
    pub tp_residuals: f64,
    /// Share of `kernel_floor_s` that holds in a step without all-to-all: 1 = all of
    /// it. A floor fitted to an expert-parallel deployment's profile, its small
    /// kernels held beside DeepEP's, need not hold for kernels replayed one after
    /// another in one CUDA graph. Apart from `tp_residuals`, which a fit of factors to
    /// a tensor-parallel deployment sets to 1.
    #[serde(default = "unit")]
    pub tp_floor: f64,
    /// Seconds the send and receive kernels of one low-latency (decode) dispatch, and
    /// of one combine, spend on the compute stream.
    #[serde(default)]
    pub ll_dispatch_s: f64,
    #[serde(default)]
    pub ll_combine_s: f64,
    /// Normal (prefill) dispatch and combine: in-situ time over the isolated price.
    #[serde(default = "unit")]
    pub dispatch: f64,
    #[serde(default = "unit")]
    pub combine: f64,
    #[serde(default)]
    pub prefill: Factors,
    #[serde(default)]
    pub decode: Factors,
}

fn unit() -> f64 {
    1.0
}

impl InSitu {
    /// The keys `CostParams::set` accepts under `in_situ.`.
    pub const KEYS: [&'static str; 17] = [
        "sm_hold",
        "kernel_floor_s",
        "barrier_frac",
        "ll_dispatch_s",
        "ll_combine_s",
        "tp_residuals",
        "tp_floor",
        "dispatch",
        "combine",
        "prefill.moe",
        "prefill.attention",
        "prefill.gemm",
        "prefill.elementwise",
        "decode.moe",
        "decode.attention",
        "decode.gemm",
        "decode.elementwise",
    ];

    /// The residual factors among them (`KEYS` from `dispatch` on): what a fit of
    /// in-situ times over twin's price with the physical terms sets.
    pub fn residual_keys() -> &'static [&'static str] {
        &Self::KEYS[7..]
    }

    /// The isolated-kernel prices (every factor 1, no term).
    pub fn isolated() -> InSitu {
        InSitu {
            dispatch: 1.0,
            combine: 1.0,
            tp_residuals: 1.0,
            tp_floor: 1.0,
            ..InSitu::default()
        }
    }

    /// One line: where the in-situ terms come from, or that the prices are
    /// isolated-kernel ones (`forward`'s line, on `hardware`).
    pub fn source_line(&self, hardware: &str) -> String {
        if self.is_isolated() {
            format!(
                "in situ: none for {hardware}: isolated-kernel prices (no in-situ data for this hardware; `twin calibrate --from-trace` fits them from a trace)"
            )
        } else if self.source.is_empty() {
            "in situ: terms set by hand (`--set cost.in_situ.*`)".to_string()
        } else {
            format!("in situ: {}", self.source)
        }
    }

    /// Whether every term is the isolated price.
    pub fn is_isolated(&self) -> bool {
        *self
            == InSitu {
                source: self.source.clone(),
                tp_residuals: self.tp_residuals,
                tp_floor: self.tp_floor,
                ..InSitu::isolated()
            }
    }

    /// The factors of `phase`.
    pub fn factors(&self, decode: bool) -> &Factors {
        if decode {
            &self.decode
        } else {
            &self.prefill
        }
    }

    /// The factors of `phase` as they apply to a step with all-to-all (`a2a`) or
    /// without: without, each factor's departure from 1 scaled by `tp_residuals`.
    pub fn factors_of_step(&self, decode: bool, a2a: bool) -> Factors {
        let f = *self.factors(decode);
        if a2a || self.tp_residuals == 1.0 {
            return f;
        }
        let w = self.tp_residuals;
        let s = |x: f64| 1.0 + (x - 1.0) * w;
        Factors {
            moe: s(f.moe),
            attention: s(f.attention),
            gemm: s(f.gemm),
            elementwise: s(f.elementwise),
        }
    }

    /// The field behind `key`, and whether it is a share in [0, 1] (else a factor
    /// or seconds, both non-negative).
    pub(crate) fn slot(&mut self, key: &str) -> Option<(&mut f64, bool)> {
        Some(match key {
            "sm_hold" => (&mut self.sm_hold, true),
            "kernel_floor_s" => (&mut self.kernel_floor_s, false),
            "barrier_frac" => (&mut self.barrier_frac, true),
            "ll_dispatch_s" => (&mut self.ll_dispatch_s, false),
            "ll_combine_s" => (&mut self.ll_combine_s, false),
            "tp_residuals" => (&mut self.tp_residuals, true),
            "tp_floor" => (&mut self.tp_floor, true),
            "dispatch" => (&mut self.dispatch, false),
            "combine" => (&mut self.combine, false),
            _ => {
                let (p, k) = key.split_once('.')?;
                let f = match p {
                    "prefill" => &mut self.prefill,
                    "decode" => &mut self.decode,
                    _ => return None,
                };
                let v = match k {
                    "moe" => &mut f.moe,
                    "attention" => &mut f.attention,
                    "gemm" => &mut f.gemm,
                    "elementwise" => &mut f.elementwise,
                    _ => return None,
                };
                (v, false)
            }
        })
    }

    /// Multiplies the in-situ terms behind category `c` by `f` (the residual factors of
    /// both phases; the low-latency kernels' compute-stream time with the dispatch and
    /// combine; the barrier share with the barriers); false for a category no in-situ
    /// term prices (indexer, all-reduce, copies, gathers, bubbles, launch gaps).
    pub fn scale(&mut self, c: Category, f: f64) -> bool {
        let both = |a: &mut f64, b: &mut f64| {
            *a *= f;
            *b *= f;
        };
        match c {
            Category::Moe => both(&mut self.prefill.moe, &mut self.decode.moe),
            Category::Attention => both(&mut self.prefill.attention, &mut self.decode.attention),
            Category::Gemm => both(&mut self.prefill.gemm, &mut self.decode.gemm),
            Category::Elementwise => {
                both(&mut self.prefill.elementwise, &mut self.decode.elementwise)
            }
            Category::Dispatch => both(&mut self.dispatch, &mut self.ll_dispatch_s),
            Category::Combine => both(&mut self.combine, &mut self.ll_combine_s),
            Category::DispatchBarrier | Category::CombineBarrier => {
                self.barrier_frac = (self.barrier_frac * f).min(1.0)
            }
            _ => return false,
        }
        true
    }

    /// Element-wise seconds of `kernels` kernels moving bytes for `bytes_s` seconds
    /// in a step with all-to-all, with the phase's factor.
    #[inline]
    pub fn elementwise_s(&self, bytes_s: f64, kernels: f64, decode: bool) -> f64 {
        self.elementwise_with(bytes_s, kernels, self.factors(decode).elementwise, true)
    }

    /// Element-wise seconds with the floor per kernel of a step with all-to-all
    /// (`a2a`) or without, and `factor`.
    #[inline]
    pub fn elementwise_with(&self, bytes_s: f64, kernels: f64, factor: f64, a2a: bool) -> f64 {
        if bytes_s <= 0.0 {
            return 0.0;
        }
        bytes_s.max(kernels * self.kernel_floor_of_step(a2a)) * factor
    }

    /// The least seconds of an element-wise kernel in a step with all-to-all (`a2a`),
    /// or without: there, its share `tp_floor`.
    #[inline]
    pub fn kernel_floor_of_step(&self, a2a: bool) -> f64 {
        if a2a {
            self.kernel_floor_s
        } else {
            self.kernel_floor_s * self.tp_floor
        }
    }

    /// How much longer compute runs on the SMs the communication kernels leave it,
    /// held for `sm_hold` of the step: `1 / (1 - share * sm_hold)`.
    #[inline]
    pub fn compute_stretch(&self, sm_share: f64) -> f64 {
        1.0 / (1.0 - (sm_share * self.sm_hold).min(0.95))
    }
}

/// Categories an [`InSituLayer`] holds, in display order.
pub const LAYER_CATEGORIES: [Category; 11] = [
    Category::Moe,
    Category::Attention,
    Category::Indexer,
    Category::Gemm,
    Category::Elementwise,
    Category::Gather,
    Category::Dispatch,
    Category::DispatchBarrier,
    Category::Combine,
    Category::CombineBarrier,
    Category::Allreduce,
];

/// One MoE layer of a priced step (the middle one), both micro-batches together:
/// seconds per stream and category, the stream's idle time inside the layer
/// (`bubble`), launch gaps, and the layer's wall time. Plain numbers, so that a step
/// price carries it without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct InSituLayer {
    /// Indexed like [`LAYER_CATEGORIES`].
    pub compute: [f64; 11],
    pub comm: [f64; 11],
    pub compute_bubble_s: f64,
    /// Idle time of the communication stream (0 when there is none).
    pub comm_bubble_s: f64,
    /// Gaps between kernels the graph or the host leaves in this layer.
    pub launch_s: f64,
    pub layer_s: f64,
    /// Whether a communication stream runs beside compute (normal kernels).
    pub comm_stream: bool,
}

impl InSituLayer {
    pub fn index(c: Category) -> Option<usize> {
        LAYER_CATEGORIES.iter().position(|&x| x == c)
    }

    /// Adds `s` seconds of `c` on `stream`.
    pub fn add(&mut self, stream: Stream, c: Category, s: f64) {
        if let Some(i) = Self::index(c) {
            match stream {
                Stream::Compute => self.compute[i] += s,
                Stream::Comm => self.comm[i] += s,
            }
        }
    }

    /// Seconds of `c` on `stream` (bubbles and launch gaps included).
    pub fn get(&self, stream: Stream, c: Category) -> f64 {
        match (c, stream) {
            (Category::Bubble, Stream::Compute) => self.compute_bubble_s,
            (Category::Bubble, Stream::Comm) => self.comm_bubble_s,
            (Category::Launch, Stream::Compute) => self.launch_s,
            (Category::Launch, Stream::Comm) => 0.0,
            _ => Self::index(c).map_or(0.0, |i| match stream {
                Stream::Compute => self.compute[i],
                Stream::Comm => self.comm[i],
            }),
        }
    }

    /// Busy seconds of `stream`'s kernels.
    pub fn busy(&self, stream: Stream) -> f64 {
        match stream {
            Stream::Compute => self.compute.iter().sum(),
            Stream::Comm => self.comm.iter().sum(),
        }
    }

    /// The layer in the shared vocabulary (zero entries left out).
    pub fn breakdown(&self) -> LayerBreakdown {
        let mut b = LayerBreakdown {
            layers: 1.0,
            layer_s: self.layer_s,
            entries: Vec::new(),
        };
        for stream in Stream::ALL {
            if stream == Stream::Comm && !self.comm_stream {
                continue;
            }
            for c in LAYER_CATEGORIES
                .into_iter()
                .chain([Category::Bubble, Category::Launch])
            {
                let s = self.get(stream, c);
                if s > 0.0 {
                    b.add(stream, c, s);
                }
            }
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_isolated_prices() {
        let s = InSitu::isolated();
        assert!(s.is_isolated());
        assert_eq!(s.elementwise_s(2e-6, 10.0, true), 2e-6);
        assert_eq!(s.compute_stretch(24.0 / 132.0), 1.0);
        let named = InSitu {
            source: "x".into(),
            ..InSitu::isolated()
        };
        assert!(named.is_isolated());
        let held = InSitu {
            sm_hold: 1.0,
            ..InSitu::isolated()
        };
        let mut set = InSitu::isolated();
        for k in InSitu::KEYS {
            *set.slot(k).expect(k).0 = 0.5;
        }
        assert!(!set.is_isolated());
        assert!(set.slot("prefill.speed").is_none() && set.slot("nope").is_none());
        assert_eq!(InSitu::residual_keys()[0], "dispatch");
        assert_eq!(InSitu::residual_keys().len(), 10);
        assert!(!held.is_isolated());
    }

    #[test]
    fn floor_and_stretch_by_hand() {
        // 10 kernels of at least 3 us each: a layer moving 5 us of bytes costs 30 us,
        // one moving 50 us costs 50; with factor 1.2, 36 and 60.
        let s = InSitu {
            kernel_floor_s: 3e-6,
            decode: Factors {
                elementwise: 1.2,
                ..Factors::default()
            },
            ..InSitu::isolated()
        };
        assert!((s.elementwise_s(5e-6, 10.0, true) - 36e-6).abs() < 1e-15);
        assert!((s.elementwise_s(50e-6, 10.0, true) - 60e-6).abs() < 1e-15);
        // The prefill factor is 1: the floor alone.
        assert!((s.elementwise_s(5e-6, 10.0, false) - 30e-6).abs() < 1e-15);
        // 33 of 132 SMs held for the whole step: compute runs on 99, 4/3 as long.
        let h = InSitu {
            sm_hold: 1.0,
            ..InSitu::isolated()
        };
        assert!((h.compute_stretch(33.0 / 132.0) - 4.0 / 3.0).abs() < 1e-12);
        // Held half the step: 1 / (1 - 0.125).
        let h = InSitu {
            sm_hold: 0.5,
            ..InSitu::isolated()
        };
        assert!((h.compute_stretch(0.25) - 1.0 / 0.875).abs() < 1e-12);
    }

    #[test]
    fn residuals_without_all_to_all_by_hand() {
        // Factors 1.4 (decode MoE) and 2.0 (decode element-wise); a step without
        // all-to-all takes a quarter of each departure from 1: 1.1 and 1.25; with
        // all-to-all the whole factor.
        let s = InSitu {
            tp_residuals: 0.25,
            tp_floor: 0.25,
            kernel_floor_s: 3e-6,
            decode: Factors {
                moe: 1.4,
                elementwise: 2.0,
                ..Factors::default()
            },
            ..InSitu::isolated()
        };
        let tp = s.factors_of_step(true, false);
        assert!((tp.moe - 1.1).abs() < 1e-12 && (tp.elementwise - 1.25).abs() < 1e-12);
        assert_eq!(tp.gemm, 1.0);
        assert_eq!(s.factors_of_step(true, true), s.decode);
        // Without all-to-all, a quarter of the floor (`tp_floor`): 10 kernels of 0.75 us
        // (7.5 us, above the 5 us the bytes take) at factor 1.25; with it, 10 kernels
        // of 3 us at factor 2.
        let ew = s.elementwise_with(5e-6, 10.0, tp.elementwise, false);
        assert!((ew - 9.375e-6).abs() < 1e-15, "{ew}");
        let ew = s.elementwise_with(5e-6, 10.0, s.decode.elementwise, true);
        assert!((ew - 60e-6).abs() < 1e-15, "{ew}");
        // Only the share set, every factor 1: still isolated prices.
        let only = InSitu {
            tp_residuals: 0.0,
            ..InSitu::isolated()
        };
        assert!(only.is_isolated());
    }

    #[test]
    fn layer_reads_back_by_stream_and_category() {
        let mut l = InSituLayer {
            comm_stream: true,
            layer_s: 10.0,
            compute_bubble_s: 1.0,
            ..Default::default()
        };
        l.add(Stream::Compute, Category::Moe, 5.0);
        l.add(Stream::Compute, Category::Gemm, 4.0);
        l.add(Stream::Comm, Category::Dispatch, 6.0);
        l.comm_bubble_s = 4.0;
        assert_eq!(l.busy(Stream::Compute), 9.0);
        let b = l.breakdown();
        assert_eq!(b.stream(Stream::Compute), 10.0);
        assert_eq!(b.stream(Stream::Comm), 10.0);
        assert_eq!(b.get(Stream::Comm, Category::Bubble), 4.0);
        assert_eq!(b.layer_s, 10.0);
    }
}
