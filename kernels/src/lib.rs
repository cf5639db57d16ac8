//! Kernels measured by `twin calibrate`.
//!
//! * CUDA C sources (`src/cuda/*.cu`), embedded as text and compiled at run time with
//!   NVRTC by the engine. Each source is self-contained: the shared helpers of
//!   `src/cuda/common.cuh` are prepended, so no include paths or CUDA headers are needed.
//! * A CPU twin of every kernel (`cpu`), computing the same result with rayon.
//! * A naive reference of every kernel (`reference`), used by tests to check both.
//!
//! Problem types (`problem`) hold host inputs in the kernels' memory layouts, so the
//! CPU twin, the reference and the CUDA kernels consume the same bytes.

pub mod cpu;
pub mod dtype;
pub mod live;
pub mod nvrtc;
pub mod problem;
pub mod reference;

pub use problem::*;

/// One CUDA source file and the `extern "C"` kernels it defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSource {
    /// Stable identifier (file stem), used in cache keys and error messages.
    pub id: &'static str,
    /// Complete CUDA C source (helpers prepended), ready for NVRTC.
    pub source: &'static str,
    /// Names of the `extern "C" __global__` functions in `source`.
    pub entry_points: &'static [&'static str],
}

macro_rules! cuda_source {
    ($file:literal) => {
        concat!(
            include_str!("cuda/common.cuh"),
            "\n#line 1 \"",
            $file,
            "\"\n",
            include_str!(concat!("cuda/", $file))
        )
    };
}

pub const MOE_EXPERT: KernelSource = KernelSource {
    id: "moe_expert",
    source: cuda_source!("moe_expert.cu"),
    entry_points: &["moe_gemv_bf16", "moe_gemv_fp8", "moe_gemv_int4"],
};

pub const MLA_DECODE: KernelSource = KernelSource {
    id: "mla_decode",
    source: cuda_source!("mla_decode.cu"),
    entry_points: &[
        "mla_decode_dense",
        "mla_decode_sparse",
        "mla_decode_window",
        "mla_decode_combine",
    ],
};

pub const INDEXER: KernelSource = KernelSource {
    id: "indexer",
    source: cuda_source!("indexer.cu"),
    entry_points: &[
        "dsa_indexer_scores",
        "dsa_indexer_scores_paged",
        "block_topk",
    ],
};

pub const GATHER: KernelSource = KernelSource {
    id: "gather",
    source: cuda_source!("gather.cu"),
    entry_points: &["engram_gather"],
};

pub const COPY: KernelSource = KernelSource {
    id: "copy",
    source: cuda_source!("copy.cu"),
    entry_points: &["device_copy", "stream_read"],
};

pub const LIVE: KernelSource = KernelSource {
    id: "live",
    source: cuda_source!("live.cu"),
    entry_points: &[
        "linear_bf16",
        "linear_fp8",
        "linear_int4",
        "rmsnorm",
        "swiglu",
        "gate_topk",
        "gather_rows",
        "moe_combine",
        "add",
        "kv_write",
        "argmax",
    ],
};

pub const FP8_QUANT: KernelSource = KernelSource {
    id: "fp8_quant",
    source: cuda_source!("fp8_quant.cu"),
    entry_points: &["fp8_amax", "fp8_quant"],
};

static ALL: [KernelSource; 7] = [
    MOE_EXPERT, MLA_DECODE, INDEXER, GATHER, COPY, LIVE, FP8_QUANT,
];

/// Every kernel source, in a stable order.
pub fn all() -> &'static [KernelSource] {
    &ALL
}

/// Looks a kernel source up by id.
pub fn by_id(id: &str) -> Option<&'static KernelSource> {
    ALL.iter().find(|k| k.id == id)
}

/// Invalid problem shapes or inputs (caught before any kernel runs), and NVRTC
/// compilation failures.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KernelError {
    #[error("{kernel}: invalid shape: {reason}")]
    Shape {
        kernel: &'static str,
        reason: String,
    },
    #[error("NVRTC (libnvrtc.so) could not be loaded: {0}")]
    NoNvrtc(String),
    #[error("NVRTC compile of kernel {kernel} for {arch} failed:\n{log}")]
    Compile {
        kernel: String,
        arch: String,
        log: String,
    },
    #[error("kernel cache {path}: {msg}")]
    Cache { path: String, msg: String },
}

pub type Result<T> = std::result::Result<T, KernelError>;

pub(crate) fn shape_err<T>(kernel: &'static str, reason: impl Into<String>) -> Result<T> {
    Err(KernelError::Shape {
        kernel,
        reason: reason.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_points_appear_in_sources() {
        for k in all() {
            assert!(!k.entry_points.is_empty(), "{}", k.id);
            for e in k.entry_points {
                let decl = format!("__global__ void {e}(");
                assert!(k.source.contains(&decl), "{}: {e} not defined", k.id);
            }
            assert!(
                k.source.contains("fp8_e4m3_to_f32"),
                "{}: helpers missing",
                k.id
            );
        }
        assert_eq!(by_id("gather").map(|k| k.id), Some("gather"));
        assert!(by_id("nope").is_none());
    }
}

/// Comparison helpers shared by the kernel and engine tests.
pub mod check {
    /// Where two arrays first differ beyond a tolerance.
    #[derive(Debug, Clone, PartialEq, thiserror::Error)]
    pub enum Mismatch {
        #[error("length {got} != {want}")]
        Length { got: usize, want: usize },
        #[error("element {index}: got {got}, want {want} (atol {atol}, rtol {rtol})")]
        Element {
            index: usize,
            got: f32,
            want: f32,
            atol: f32,
            rtol: f32,
        },
    }

    /// `Ok` when `|got - want| <= atol + rtol * |want|` element-wise and lengths match;
    /// otherwise the first mismatch.
    pub fn close(got: &[f32], want: &[f32], atol: f32, rtol: f32) -> Result<(), Mismatch> {
        if got.len() != want.len() {
            return Err(Mismatch::Length {
                got: got.len(),
                want: want.len(),
            });
        }
        for (index, (&g, &w)) in got.iter().zip(want).enumerate() {
            let ok = (g - w).abs() <= atol + rtol * w.abs(); // false for NaN
            if !ok {
                return Err(Mismatch::Element {
                    index,
                    got: g,
                    want: w,
                    atol,
                    rtol,
                });
            }
        }
        Ok(())
    }

    /// Checks a top-k selection against the scores: same count of valid entries, no
    /// duplicates, and the selected scores (sorted) equal the `k` largest scores.
    /// Ties may be broken differently, so positions themselves are not compared.
    pub fn topk_valid(
        sel: &[i32],
        scores: &[f32],
        batch: usize,
        n_pos: usize,
        k: usize,
    ) -> Result<(), String> {
        if sel.len() != batch * k {
            return Err(format!("selection length {} != {}", sel.len(), batch * k));
        }
        for b in 0..batch {
            let row = &scores[b * n_pos..(b + 1) * n_pos];
            let s = &sel[b * k..(b + 1) * k];
            let mut picked: Vec<i32> = s.iter().copied().filter(|&i| i >= 0).collect();
            if picked.len() != k.min(n_pos) || s.iter().any(|&i| i < -1 || i >= n_pos as i32) {
                return Err(format!(
                    "row {b}: {} valid entries, want {}",
                    picked.len(),
                    k.min(n_pos)
                ));
            }
            picked.sort_unstable();
            picked.dedup();
            if picked.len() != k.min(n_pos) {
                return Err(format!("row {b}: duplicate positions"));
            }
            let mut got: Vec<f32> = picked.iter().map(|&i| row[i as usize]).collect();
            let mut all = row.to_vec();
            all.sort_by(|a, b| b.total_cmp(a));
            got.sort_by(|a, b| b.total_cmp(a));
            if got[..] != all[..got.len()] {
                return Err(format!("row {b}: selected scores are not the top {k}"));
            }
        }
        Ok(())
    }
}
