//! What an engine deploys where its tables timed something else: the format its
//! routed experts run in, and the dense-GEMM formats priced by another fit (its own
//! nearest, or another engine's of the same GPU) because the rows of their own time a
//! path a server does not run.

use super::fit::Fit;
use super::format::Format;
use super::index::gemm_format;
use super::KernelTables;
use spec::hardware::Hardware;
use std::sync::OnceLock;

/// A dense-GEMM format priced by another engine's tables of the same GPU, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Borrowed {
    pub format: Format,
    /// The lending tables, `engine version` (`vllm 0.24.0`).
    pub from: String,
    pub why: String,
}

impl KernelTables {
    /// How the deployment's own expert kernel `kernel` prices `model`'s routed experts
    /// on `hw`, in words for the cost model's line: the fit whose arithmetic rate bounds
    /// the price from below, or that the tables time no such kernel for the experts'
    /// format (then their usual kernel prices them alone).
    pub fn moe_kernel_line(
        &self,
        model: &spec::model::Model,
        hw: &Hardware,
        kernel: spec::kernel::MoeKernel,
    ) -> String {
        let name = kernel.name();
        let Some(m) = &model.moe else {
            return format!("moe_kernel {name}: the model has no routed experts");
        };
        let Some(format) = self.experts_format(m, hw) else {
            return format!("moe_kernel {name}: the tables time no experts of this format");
        };
        // The load the experts are priced under (`AnalyticCostModel::experts_table`).
        let fits = self.experts_fits(format, super::experts_skew(!m.balanced), Some(kernel));
        let Some((usual, own)) = fits else {
            return format!("moe_kernel {name}: the tables time no experts of this format");
        };
        match own {
            Some(f) if f.key != usual.key => format!(
                "routed experts on {name}: its arithmetic rate (compute_eff {:.3} of the {} fit) bounds their price from below",
                f.params.get("compute_eff").copied().unwrap_or(f64::NAN),
                f.key.split(", ").next().unwrap_or(&f.key)
            ),
            Some(_) => format!("routed experts on {name}, the tables' usual kernel for {} experts", format.name()),
            None => format!(
                "moe_kernel {name}: the tables time no {name} kernel for {} experts; their usual kernel prices them",
                format.name()
            ),
        }
    }

    /// The fits that price `format`'s routed experts (gated) under `skew`: the tables'
    /// usual kernel, and, where the deployment runs `kernel` and the tables time it,
    /// that kernel's fit (the usual one itself where it is the usual kernel).
    pub fn experts_fits(
        &self,
        format: Format,
        skew: f64,
        kernel: Option<spec::kernel::MoeKernel>,
    ) -> Option<(&Fit, Option<&Fit>)> {
        let usual = self.moe_fit(format, skew, true)?;
        let own = kernel.and_then(|k| self.moe_kernel_fit(format, skew, true, k));
        Some((usual, own))
    }

    /// The format the engine runs `moe`'s routed experts in on `hw`: the checkpoint's
    /// ([`Format::of_experts`]) as [`Self::deployed_experts_format`] deploys it; `None`
    /// where no table format is theirs.
    pub fn experts_format(&self, moe: &spec::model::Moe, hw: &Hardware) -> Option<Format> {
        let format = Format::of_experts(moe.weight_dtype, moe.scale_block, moe.activation_dtype)?;
        Some(self.deployed_experts_format(format, hw))
    }

    /// The format the engine runs a model's routed experts of `format` in on `hw`:
    /// TensorRT-LLM quantises the activations of MXFP4 experts to MXFP8 on Blackwell
    /// (GPUs with FP4 tensor cores); its BF16-activation path is Hopper's
    /// (`examples/models/core/gpt_oss/README.md`, MoE support matrix: "bf16 (Hopper) or
    /// mxfp8 (Blackwell)"; Blackwell's backends, CUTLASS and TRTLLM, take MXFP8). The
    /// tables' B200 `w4a16_mxfp4` rows time a path TensorRT-LLM does not deploy there,
    /// and untuned (AIConfigurator's collector skips the tactic cache for them): 618 us
    /// for 32 tokens of gpt-oss-120b on one B200, against 153 us for `w4a8_mxfp4`.
    /// Other engines and formats run as the checkpoint says (vLLM's default on
    /// Blackwell is the BF16-activation FlashInfer kernel).
    pub fn deployed_experts_format(&self, format: Format, hw: &Hardware) -> Format {
        let blackwell = hw.tensor.fp4_flops_per_s.is_some_and(|r| r > 0.0);
        if self.engine == "trtllm" && format == Format::W4a16Mxfp4 && blackwell {
            Format::W4a8Mxfp4
        } else {
            format
        }
    }

    /// Whether the tables' per-tensor FP8 GEMMs were timed with dynamic activation
    /// quantisation, which a served checkpoint does not run. AIConfigurator's
    /// TensorRT-LLM collector (`collector/trtllm/collect_gemm.py`) loads an FP8
    /// `Linear` with a weight scale and no input scale, so TensorRT-LLM's
    /// `FP8QDQLinearMethod` drops the input scale after loading and quantises every
    /// input per tensor at run time (`quantize_e4m3_per_tensor`: an amax reduction
    /// over the whole activation, then the cast) before each GEMM. FP8 checkpoints
    /// served per tensor (ModelOpt's) carry static input scales: one fused cast, as
    /// the block-FP8 path's per-group quantisation is. Their fits show it: the
    /// per-tensor rows' fixed cost is 12 us a GEMM on every GPU, block FP8's 2-4 us,
    /// BF16's 3 us.
    fn per_tensor_fp8_rows_quantise_dynamically(&self) -> bool {
        self.engine == "trtllm"
    }

    /// Whether the tables' NVFP4 dense-GEMM rows time an untuned kernel, which a
    /// serving engine does not run. AIConfigurator's TensorRT-LLM collector
    /// (`collector/trtllm/collect_gemm.py` at 095f58a5) calls an NVFP4 `Linear` outside
    /// TensorRT-LLM's `autotune()` context, so its FP4 GEMM runs the runner's default
    /// tactic; a server autotunes every GEMM at warm-up. The rows show it: a floor of
    /// about 20 us a GEMM on B200 at every m up to 256 (vLLM's, timed with vLLM's own
    /// kernel selection: 11-13 us), and 60 us for Llama-3.1-70B's down projection at
    /// 8 tokens (vLLM's: 33 us), converging within 10% of vLLM's once compute-bound.
    pub fn nvfp4_rows_untuned(&self) -> bool {
        self.engine == "trtllm"
    }

    /// Prices `format`'s dense GEMMs by `donor`'s fit of it (another engine's tables of
    /// the same GPU), recorded with `why` for the cost model's line. False, and nothing
    /// changed, where the donor has no such fit or is of another GPU.
    pub fn borrow_gemm_fit(&mut self, format: Format, donor: &KernelTables, why: &str) -> bool {
        if donor.hardware != self.hardware {
            return false;
        }
        let Some(fit) = donor.gemm_fit(format).cloned() else {
            return false;
        };
        self.fits.retain(|f| gemm_format(f) != Some(format));
        self.fits.push(fit);
        self.borrowed.push(Borrowed {
            format,
            from: format!("{} {}", donor.engine, donor.version),
            why: why.to_string(),
        });
        self.index = OnceLock::new();
        true
    }

    /// The fit that prices dense GEMMs of `format`, and the format it was fitted to:
    /// the format's own, else its nearest measured one ([`Format::nearest_gemm`]).
    /// Per-tensor FP8 GEMMs of tables that timed them with dynamic quantisation are
    /// priced by the block-FP8 fit where there is one (same bytes and tensor rate, the
    /// activations cast once).
    pub fn gemm_fit_for(&self, format: Format) -> Option<(&Fit, Format)> {
        if format == Format::Fp8 && self.per_tensor_fp8_rows_quantise_dynamically() {
            if let Some(f) = self.gemm_fit(Format::Fp8Block) {
                return Some((f, Format::Fp8Block));
            }
        }
        match self.gemm_fit(format) {
            Some(f) => Some((f, format)),
            None => {
                let near = format.nearest_gemm()?;
                Some((self.gemm_fit(near)?, near))
            }
        }
    }

    /// The format's own GEMM fit where it bounds the price of a fit `by` another format
    /// from above too (the lesser of the two prices): a per-tensor FP8 GEMM priced by
    /// the block-FP8 fit (its own rows quantise the activations at run time), lower
    /// where m is large (the run-time quantisation a small share of the GEMM; block
    /// scaling slows the main loop). A static-scale GEMM does no more work than either.
    pub fn gemm_own_bound(&self, format: Format, by: Format) -> Option<&Fit> {
        (format == Format::Fp8 && by != format)
            .then(|| self.gemm_fit(format))
            .flatten()
    }

    /// Formats whose dense GEMMs the profile prices by another format's fit, as
    /// `(format, priced by)`, in words for the cost-model line.
    pub fn gemm_substitutes(&self) -> Vec<(Format, Format)> {
        [Format::Bf16, Format::Fp8, Format::Fp8Block, Format::Nvfp4]
            .into_iter()
            .filter_map(|f| match self.gemm_fit_for(f) {
                Some((_, by)) if by != f => Some((f, by)),
                _ => None,
            })
            .collect()
    }
}
