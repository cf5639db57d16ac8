//! Dense GEMMs timed through cuBLASLt, the production library (`twin calibrate
//! --tables-out`): what a serving engine's linear layers reach on this GPU, not what
//! twin's own kernels do. The weights are `N x K` row-major (as a linear layer holds
//! them), the activations `M x K`, the output `M x N` in BF16; in cuBLASLt's
//! column-major words `D (N x M) = W^T-stored (K x N, transposed) x X (K x M)`, the "TN"
//! layout FP8 requires. FP8 is E4M3 with per-tensor scales: the weights' a constant
//! 1.0, the activations' computed from BF16 before every GEMM by twin's dynamic
//! quantization kernels (`quant.rs`), timed with it as a production FP8 linear layer runs
//! (vLLM's `Fp8LinearMethod`; AIConfigurator's FP8 GEMM rows time that layer).
//! cuBLASLt picks its own algorithm (the heuristic's first); each call is timed with
//! CUDA events, weights and activations rotated over copies larger than the L2.

use super::context::{kerr, time_events, CudaDevice};
use super::dptr;
use super::quant::Fp8Quant;
use crate::library::{LibraryFormat, LibraryGemm};
use crate::stats::{Stats, TimingConfig};
use crate::{EngineError, Result};
use cudarc::cublaslt::{result as lt, sys};
use cudarc::driver::CudaSlice;
use std::ffi::c_void;
use std::mem::size_of;

/// cuBLASLt's workspace (NVIDIA's recommendation for Hopper and later: 32 MiB).
const WORKSPACE_BYTES: usize = 32 << 20;

/// What cuBLASLt names a call that fails.
const NAME: &str = "cublaslt_matmul";

/// Descriptors freed on drop, whatever path leaves the function.
struct Descs {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: Vec<sys::cublasLtMatrixLayout_t>,
    pref: sys::cublasLtMatmulPreference_t,
    handle: sys::cublasLtHandle_t,
}

impl Drop for Descs {
    fn drop(&mut self) {
        // SAFETY: each was created below and is destroyed once; failures cannot be
        // reported from a drop and leak at most a descriptor.
        unsafe {
            for l in &self.layouts {
                let _ = lt::destroy_matrix_layout(*l);
            }
            if !self.desc.is_null() {
                let _ = lt::destroy_matmul_desc(self.desc);
            }
            if !self.pref.is_null() {
                let _ = lt::destroy_matmul_pref(self.pref);
            }
            if !self.handle.is_null() {
                let _ = lt::destroy_handle(self.handle);
            }
        }
    }
}

fn lterr(what: &str, e: impl std::fmt::Display) -> EngineError {
    kerr(NAME, format!("{what}: {e}"))
}

/// Elements drawn before the pattern repeats: an LM head's weights are a billion
/// elements, and drawing each would take seconds per shape.
const PERIOD: usize = 1 << 20;

/// Seeded bytes of a format's elements, finite and of unit scale: BF16 from f32 in
/// [-1, 1], E4M3 with exponents below the NaN pattern; a period of [`PERIOD`]
/// elements repeated (a GEMM's time does not depend on its values' order).
fn operand_bytes(format: LibraryFormat, elements: usize, seed: u64) -> Vec<u8> {
    let period = drawn_bytes(format, elements.min(PERIOD), seed);
    let total = elements * format.bytes();
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        let take = (total - out.len()).min(period.len());
        out.extend_from_slice(&period[..take]);
    }
    out
}

fn drawn_bytes(format: LibraryFormat, elements: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    match format {
        LibraryFormat::Bf16 => (0..elements)
            .flat_map(|_| {
                let v = (next() % 2001) as f32 / 1000.0 - 1.0;
                ((v.to_bits() >> 16) as u16).to_le_bytes()
            })
            .collect(),
        LibraryFormat::Fp8 => (0..elements)
            .map(|_| {
                let r = next();
                // sign | exponent 0..=13 | mantissa: never 0x7f / 0xff (NaN).
                ((r & 0x80) as u8) | (((r >> 8) % 14) as u8) << 3 | ((r >> 16) & 7) as u8
            })
            .collect(),
    }
}

/// The cuBLASLt handle, descriptors and chosen algorithm of one GEMM shape.
fn plan(
    g: &LibraryGemm,
    (a_scale, b_scale): (u64, u64),
) -> Result<(Descs, sys::cublasLtMatmulHeuristicResult_t)> {
    let (m, n, k) = (g.m as u64, g.n as u64, g.k as u64);
    let ab_type = match g.format {
        LibraryFormat::Bf16 => sys::cudaDataType_t::CUDA_R_16BF,
        LibraryFormat::Fp8 => sys::cudaDataType_t::CUDA_R_8F_E4M3,
    };
    let mut d = Descs {
        desc: std::ptr::null_mut(),
        layouts: Vec::new(),
        pref: std::ptr::null_mut(),
        handle: lt::create_handle()
            .map_err(|e| lterr("cublasLtCreate (is libcublasLt.so on the library path?)", e))?,
    };
    d.desc = lt::create_matmul_desc(
        sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        sys::cudaDataType_t::CUDA_R_32F,
    )
    .map_err(|e| lterr("matmul descriptor", e))?;
    set_desc_attributes(d.desc, g.format, (a_scale, b_scale))?;
    for (t, rows, cols, ld) in [
        (ab_type, k, n, k as i64),
        (ab_type, k, m, k as i64),
        (sys::cudaDataType_t::CUDA_R_16BF, n, m, n as i64),
    ] {
        d.layouts.push(
            lt::create_matrix_layout(t, rows, cols, ld).map_err(|e| lterr("matrix layout", e))?,
        );
    }
    d.pref = lt::create_matmul_pref().map_err(|e| lterr("preference", e))?;
    set_workspace_preference(d.pref)?;
    let (la, lb, lc) = (d.layouts[0], d.layouts[1], d.layouts[2]);
    // SAFETY: the descriptors are live; the heuristic reads them only.
    let heur = unsafe { lt::get_matmul_algo_heuristic(d.handle, d.desc, la, lb, lc, lc, d.pref) }
        .map_err(|e| {
        lterr(
            &format!(
                "no cuBLASLt algorithm for a {} GEMM M={m} N={n} K={k} on this GPU",
                g.format.table_name()
            ),
            e,
        )
    })?;
    Ok((d, heur))
}

/// Sets the matmul descriptor's attributes: A transposed and, for FP8, the scale pointers.
fn set_desc_attributes(
    desc: sys::cublasLtMatmulDesc_t,
    format: LibraryFormat,
    (a_scale, b_scale): (u64, u64),
) -> Result<()> {
    let set = |attr: sys::cublasLtMatmulDescAttributes_t, p: *const c_void, size: usize| {
        // SAFETY: `p` points at `size` readable bytes of the attribute's type.
        unsafe { lt::set_matmul_desc_attribute(desc, attr, p, size) }
            .map_err(|e| lterr("matmul attribute", e))
    };
    // cublasOperation_t as the library's int: CUBLAS_OP_T = 1.
    let trans: i32 = 1;
    set(
        sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
        (&trans) as *const _ as *const c_void,
        size_of::<i32>(),
    )?;
    if format == LibraryFormat::Fp8 {
        for (attr, ptr) in [
            (
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                a_scale,
            ),
            (
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                b_scale,
            ),
        ] {
            set(attr, (&ptr) as *const _ as *const c_void, size_of::<u64>())?;
        }
    }
    Ok(())
}

/// Caps the preference's workspace at [`WORKSPACE_BYTES`].
fn set_workspace_preference(pref: sys::cublasLtMatmulPreference_t) -> Result<()> {
    let ws = WORKSPACE_BYTES;
    // SAFETY: writes one usize attribute.
    unsafe {
        lt::set_matmul_pref_attribute(
            pref,
            sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            (&ws) as *const _ as *const c_void,
            size_of::<usize>(),
        )
    }
    .map_err(|e| lterr("preference", e))
}

/// Launches per timed replay: a graph (or an eager run) of this many GEMMs back to
/// back, weights rotated over the copies, as AIConfigurator's collectors time a CUDA
/// graph of several GEMM ops (`collector/helper.py` `benchmark_with_power`: six ops, a
/// graph, the replay's time over the ops): a GEMM's table time is its time in a stream
/// of kernels, not one launch's host round trip.
const LAUNCHES_MIN: usize = 8;
const LAUNCHES_MAX: usize = 64;

/// The weight copies of the last timed `(format, n, k)`: the plan is walked shape by
/// shape over the token counts, so each weight matrix is drawn and uploaded once.
pub(crate) struct LtWeights {
    key: (LibraryFormat, usize, usize),
    copies: Vec<CudaSlice<u8>>,
}

impl CudaDevice {
    /// Times `g` through cuBLASLt: BF16 x BF16 -> BF16, or FP8 E4M3 x E4M3 -> BF16 with
    /// per-tensor scales; FP32 accumulation. A CUDA graph of [`LAUNCHES_MIN`]..
    /// [`LAUNCHES_MAX`] GEMMs on a stream of its own is replayed between CUDA events
    /// (eager back-to-back launches where the capture fails); the sample is the
    /// replay's time over its GEMMs.
    pub fn time_library_gemm(&mut self, g: &LibraryGemm, cfg: &TimingConfig) -> Result<Stats> {
        let (m, n, k) = (g.m, g.n, g.k);
        let elem = g.format.bytes();
        let rotate = |bytes: usize| {
            if cfg.rotate {
                crate::rotation_copies(bytes as u64, self.info.cache_bytes, super::calib::MEM_CAP)
            } else {
                1
            }
        };
        let (w_copies, x_copies) = (rotate(n * k * elem), rotate((n * k + m * k) * elem));
        self.upload_lt_weights(g, w_copies)?;
        let acts: Vec<CudaSlice<u8>> = (0..x_copies)
            .map(|i| self.up(NAME, &operand_bytes(g.format, m * k, 101 + i as u64)))
            .collect::<Result<_>>()?;
        let out = self.zeros::<u8>(NAME, m * n * 2)?;
        let workspace = self.zeros::<u8>(NAME, WORKSPACE_BYTES)?;
        let one = self.up(NAME, &[1.0f32])?;
        let quant = self.lt_fp8_input(g.format, m * k)?;
        let one_ptr = dptr(&self.stream, &one);
        let b_scale = quant.as_ref().map_or(one_ptr, |q| q.0.scale_ptr);
        let (d, heur) = plan(g, (one_ptr, b_scale))?;
        let weights = &self.lt_weights.as_ref().expect("uploaded above").copies;
        let wp: Vec<u64> = weights.iter().map(|b| dptr(&self.stream, b)).collect();
        let xp: Vec<u64> = acts.iter().map(|b| dptr(&self.stream, b)).collect();
        let out_ptr = dptr(&self.stream, &out);
        let ws_ptr = dptr(&self.stream, &workspace);
        // The uploads above ran on the default stream; the timing stream does not wait
        // for it (non-blocking).
        self.stream.synchronize().map_err(|e| kerr(NAME, e))?;
        let s = self.ctx.new_stream().map_err(|e| kerr(NAME, e))?;
        let stream = s.cu_stream() as sys::cudaStream_t;
        let what = format!("{} GEMM M={m} N={n} K={k}", g.format.table_name());
        let launches = wp.len().clamp(LAUNCHES_MIN, LAUNCHES_MAX);
        let run = |j: usize| -> Result<()> {
            if let Some((op, ..)) = &quant {
                op.launch(&s, xp[j % xp.len()])?;
            }
            let operands = (wp[j % wp.len()], xp[j % xp.len()]);
            matmul(&d, &heur, operands, (out_ptr, ws_ptr), stream, &what)
        };
        time_replays(&s, cfg, launches, &run)
    }

    /// Uploads `w_copies` weight copies for `g`'s `(format, n, k)`, unless the last
    /// ones uploaded already match.
    fn upload_lt_weights(&mut self, g: &LibraryGemm, w_copies: usize) -> Result<()> {
        let (n, k) = (g.n, g.k);
        let key = (g.format, n, k);
        if self
            .lt_weights
            .as_ref()
            .is_none_or(|w| w.key != key || w.copies.len() != w_copies)
        {
            self.lt_weights = None;
            let copies = (0..w_copies)
                .map(|i| self.up(NAME, &operand_bytes(g.format, n * k, 7 + i as u64)))
                .collect::<Result<_>>()?;
            self.lt_weights = Some(LtWeights { key, copies });
        }
        Ok(())
    }

    /// For FP8, the BF16 source activations and the op that quantizes them; None for BF16.
    fn lt_fp8_input(
        &mut self,
        format: LibraryFormat,
        elements: usize,
    ) -> Result<Option<(Fp8Quant, CudaSlice<u8>)>> {
        // FP8: the activations are quantized from BF16 before each GEMM (dynamic
        // per-tensor scale, `quant.rs`), as vLLM's FP8 linear layer runs and the shipped
        // tables' FP8 rows time it; the weights' scale is a constant 1.
        Ok(match format {
            LibraryFormat::Fp8 => {
                let src = self.up(NAME, &operand_bytes(LibraryFormat::Bf16, elements, 211))?;
                let op = self.fp8_quant(dptr(&self.stream, &src), elements)?;
                Some((op, src))
            }
            LibraryFormat::Bf16 => None,
        })
    }
}

/// Launches one cuBLASLt GEMM `D = W x X` on `stream` with the planned descriptors;
/// `(w, x)` and `(out, ws)` are device pointers.
fn matmul(
    d: &Descs,
    heur: &sys::cublasLtMatmulHeuristicResult_t,
    (w, x): (u64, u64),
    (out_ptr, ws_ptr): (u64, u64),
    stream: sys::cudaStream_t,
    what: &str,
) -> Result<()> {
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: A is K x N (ld K), B is K x M (ld K), D is N x M (ld N), each
    // allocated at that size by the caller in the layouts' types; the workspace is
    // WORKSPACE_BYTES; all live until the caller synchronises the stream.
    unsafe {
        lt::matmul(
            d.handle,
            d.desc,
            (&alpha) as *const f32 as *const c_void,
            (&beta) as *const f32 as *const c_void,
            w as *const c_void,
            d.layouts[0],
            x as *const c_void,
            d.layouts[1],
            out_ptr as *const c_void,
            d.layouts[2],
            out_ptr as *mut c_void,
            d.layouts[2],
            &heur.algo,
            ws_ptr as *mut c_void,
            WORKSPACE_BYTES,
            stream,
        )
    }
    .map_err(|e| lterr(what, e))
}

/// Times `launches` back-to-back calls of `run` on `s`: one eager call first, then
/// replays of a captured graph (or eager launches where the capture fails).
fn time_replays(
    s: &std::sync::Arc<cudarc::driver::CudaStream>,
    cfg: &TimingConfig,
    launches: usize,
    run: &dyn Fn(usize) -> Result<()>,
) -> Result<Stats> {
    // One eager GEMM first: cuBLASLt loads its kernel outside the capture.
    run(0)?;
    s.synchronize().map_err(|e| kerr(NAME, e))?;
    let graph = capture(s, launches, run);
    // At least one replay before timing (a graph's first launch uploads it).
    let warm = TimingConfig {
        warmup: cfg.warmup.max(1),
        ..*cfg
    };
    let stats = time_events(s, &warm, NAME, launches, |_| match &graph {
        Some(gr) => gr.launch().map_err(|e| kerr(NAME, e)),
        None => (0..launches).try_for_each(run),
    });
    drop(graph);
    s.synchronize().map_err(|e| kerr(NAME, e))?;
    stats
}

/// A CUDA graph of `launches` calls of `run` captured on `s`, or None where the capture
/// fails (the caller then launches eagerly); said once per process.
fn capture(
    s: &std::sync::Arc<cudarc::driver::CudaStream>,
    launches: usize,
    run: &dyn Fn(usize) -> Result<()>,
) -> Option<cudarc::driver::CudaGraph> {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    static SAID: std::sync::Once = std::sync::Once::new();
    let say = |why: String| {
        SAID.call_once(|| {
            spec::note::say(&format!(
                "note: cuBLASLt GEMMs timed eagerly, back to back (no CUDA graph: {why})"
            ))
        });
    };
    if let Err(e) = s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) {
        say(e.to_string());
        return None;
    }
    let launched = (0..launches).try_for_each(run);
    let ended = s.end_capture(CUgraphInstantiate_flags(0));
    match (launched, ended) {
        (Ok(()), Ok(Some(g))) => Some(g),
        (Err(e), _) => {
            say(e.to_string());
            None
        }
        (_, Err(e)) => {
            say(e.to_string());
            None
        }
        (_, Ok(None)) => {
            say("an empty graph".into());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_are_finite_and_of_unit_scale() {
        let b = operand_bytes(LibraryFormat::Bf16, 1000, 3);
        assert_eq!(b.len(), 2000);
        for c in b.chunks(2) {
            let v = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
            assert!(v.is_finite() && v.abs() <= 1.0, "{v}");
        }
        let f = operand_bytes(LibraryFormat::Fp8, PERIOD + 1000, 3);
        assert_eq!(f.len(), PERIOD + 1000);
        assert_eq!(f[PERIOD..], f[..1000]);
        // E4M3: exponent bits 6..3 below 0b1111 (at most 13 here): never NaN (0x7f, 0xff).
        assert!(f.iter().all(|&x| (x >> 3) & 0xf <= 13));
        assert!(f.iter().any(|&x| x & 0x80 != 0) && f.iter().any(|&x| x & 0x80 == 0));
    }
}
