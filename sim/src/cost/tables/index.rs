//! Which fit prices what: the tables' fits filed by the step model's keys (a GEMM's
//! format, an MoE layer's format, load and gating, an attention layer's settings, an
//! all-reduce's GPU count), of an op's kernels the one with the most rows.

use super::family::Family;
use super::fit::Fit;
use super::format::Format;
use super::KernelTables;
use spec::kernel::MoeKernel;

/// Which fit prices what in the step model.
#[derive(Debug, Clone, Default)]
pub(super) struct Index {
    gemm: Vec<(Format, usize)>,
    allreduce: Vec<(i64, usize)>,
    /// MoE fits by format, load distribution (power-law exponent in hundredths, 0 =
    /// balanced) and gating.
    moe: Vec<(MoeKey, usize)>,
    /// The same by the kernel a deployment may choose instead (`moe_kernel`).
    moe_kernels: Vec<((MoeKey, MoeKernel), usize)>,
    /// Decode and prefill attention fits (GQA/MHA kernels) by their key's settings.
    attention: Vec<(AttnKey, usize)>,
}

/// Which attention fit prices a layer: decode or prefill, the head size, whether the
/// KV cache is FP8, whether the layer attends over a sliding window, and (prefill) FP8
/// arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnKey {
    pub family: Family,
    pub head_dim: u32,
    pub kv_fp8: bool,
    pub window: bool,
    pub fp8: bool,
}

/// An attention fit's key as the index holds it: decode `KERNEL, kv D, head H, full|window`,
/// prefill `KERNEL, D, kv D, head H, full|window`.
fn attention_key(family: Family, key: &str) -> Option<AttnKey> {
    let parts: Vec<&str> = key.rsplitn(5, ", ").collect();
    let dtype = |s: &str| match s {
        "fp8" => Some(true),
        "bf16" => Some(false),
        _ => None,
    };
    let (window, head, kv) = (parts.first()?, parts.get(1)?, parts.get(2)?);
    let fp8 = match family {
        Family::DecodeAttention => false,
        Family::PrefillAttention => dtype(parts.get(3)?)?,
        _ => return None,
    };
    Some(AttnKey {
        family,
        head_dim: head.strip_prefix("head ")?.parse().ok()?,
        kv_fp8: dtype(kv.strip_prefix("kv ")?)?,
        window: match *window {
            "window" => true,
            "full" => false,
            _ => return None,
        },
        fp8,
    })
}

/// Which MoE fit prices a layer: its format, the load distribution's power-law
/// exponent in hundredths (0 = balanced) and whether its experts are gated.
type MoeKey = (Format, i64, bool);

/// An MoE fit's key (`KERNEL, FORMAT, balanced|power law A, gated|non-gated`) as the
/// index holds it.
fn moe_key(key: &str) -> Option<MoeKey> {
    let parts: Vec<&str> = key.rsplitn(4, ", ").collect();
    let [gating, load, format, _kernel] = parts[..] else {
        return None;
    };
    let skew = match load {
        "balanced" => 0.0,
        l => l.strip_prefix("power law ")?.parse::<f64>().ok()?,
    };
    Some((
        Format::parse(format)?,
        (skew * 100.0).round() as i64,
        gating == "gated",
    ))
}

/// A GEMM fit's format, the first part of its key (`FORMAT, KERNEL`).
pub(super) fn gemm_format(fit: &Fit) -> Option<Format> {
    if fit.family != Family::Gemm {
        return None;
    }
    fit.key.split(',').next().and_then(Format::parse)
}

impl KernelTables {
    /// The GEMM fit of `format`: of its kernels, the one with the most rows (the
    /// engine's usual path for that format).
    pub fn gemm_fit(&self, format: Format) -> Option<&Fit> {
        let idx = self.index.get_or_init(|| self.build_index());
        self.filed(&idx.gemm, &format)
    }

    /// The all-reduce fit over `gpus`: the engine's own all-reduce (its CUDA-graph
    /// variant where it has one), else NCCL's in half precision.
    pub fn allreduce_fit(&self, gpus: f64) -> Option<&Fit> {
        let idx = self.index.get_or_init(|| self.build_index());
        self.filed(&idx.allreduce, &(gpus as i64))
    }

    /// The MoE fit of `format` under a load of power-law exponent `skew` (0 =
    /// balanced), gated or not: of its kernels, the one with the most rows.
    pub fn moe_fit(&self, format: Format, skew: f64, gated: bool) -> Option<&Fit> {
        let idx = self.index.get_or_init(|| self.build_index());
        self.filed(&idx.moe, &(format, (skew * 100.0).round() as i64, gated))
    }

    /// The MoE fit of `format`, load and gating whose kernel is `kernel` (its key's
    /// kernel part names it), of several such the one with the most rows; `None` where
    /// the tables did not time that kernel.
    pub fn moe_kernel_fit(
        &self,
        format: Format,
        skew: f64,
        gated: bool,
        kernel: MoeKernel,
    ) -> Option<&Fit> {
        let idx = self.index.get_or_init(|| self.build_index());
        let key = ((format, (skew * 100.0).round() as i64, gated), kernel);
        self.filed(&idx.moe_kernels, &key)
    }

    /// The attention fit of `key`: of its kernels, the one with the most rows.
    pub fn attention_fit(&self, key: &AttnKey) -> Option<&Fit> {
        let idx = self.index.get_or_init(|| self.build_index());
        self.filed(&idx.attention, key)
    }

    /// Files fit `i` under `key` in `list`, unless a fit with at least as many rows is
    /// there already (of an op's kernels, the engine's usual path has the most rows).
    fn keep_most_rows<K: PartialEq>(&self, list: &mut Vec<(K, usize)>, key: K, i: usize) {
        let rows = |j: usize| self.fits[j].fit.rows + self.fits[j].check.rows;
        match list.iter_mut().find(|(k, _)| *k == key) {
            Some(e) if rows(e.1) >= rows(i) => {}
            Some(e) => e.1 = i,
            None => list.push((key, i)),
        }
    }

    /// The fit filed under `key` in one of the index's lists.
    fn filed<'s, K: PartialEq>(&'s self, list: &[(K, usize)], key: &K) -> Option<&'s Fit> {
        list.iter()
            .find(|(k, _)| k == key)
            .map(|&(_, i)| &self.fits[i])
    }

    pub(super) fn build_index(&self) -> Index {
        let mut gemm: Vec<(Format, usize)> = Vec::new();
        let mut allreduce: Vec<(i64, usize, u8)> = Vec::new();
        let mut moe: Vec<(MoeKey, usize)> = Vec::new();
        let mut moe_kernels: Vec<((MoeKey, MoeKernel), usize)> = Vec::new();
        let mut attention: Vec<(AttnKey, usize)> = Vec::new();
        for (i, f) in self.fits.iter().enumerate() {
            match f.family {
                Family::DecodeAttention | Family::PrefillAttention => {
                    if let Some(key) = attention_key(f.family, &f.key) {
                        self.keep_most_rows(&mut attention, key, i);
                    }
                }
                Family::Moe => {
                    if let Some(key) = moe_key(&f.key) {
                        self.keep_most_rows(&mut moe, key, i);
                        let kernel = f.key.split(", ").next().unwrap_or_default();
                        for k in MoeKernel::ALL {
                            if kernel.to_lowercase().contains(k.name()) {
                                self.keep_most_rows(&mut moe_kernels, (key, k), i);
                            }
                        }
                    }
                }
                Family::Gemm => {
                    if let Some(fmt) = gemm_format(f) {
                        self.keep_most_rows(&mut gemm, fmt, i);
                    }
                }
                Family::Collective => {
                    // `<library> all_reduce x<gpus>`.
                    let Some((lib, rest)) = f.key.split_once(" all_reduce x") else {
                        continue;
                    };
                    let Ok(g) = rest.parse::<f64>() else { continue };
                    let rank = if lib.starts_with("nccl") {
                        if lib == "nccl half" {
                            1
                        } else {
                            0
                        }
                    } else if lib.contains("eager") {
                        2
                    } else {
                        3
                    };
                    match allreduce.iter_mut().find(|(x, _, _)| *x == g as i64) {
                        Some(e) if e.2 >= rank => {}
                        Some(e) => (e.1, e.2) = (i, rank),
                        None => allreduce.push((g as i64, i, rank)),
                    }
                }
            }
        }
        Index {
            gemm,
            allreduce: allreduce.into_iter().map(|(g, i, _)| (g, i)).collect(),
            moe,
            moe_kernels,
            attention,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_keys_read_as_the_fitter_writes_them() {
        let d = attention_key(
            Family::DecodeAttention,
            "vllm_flash_attn_fa3, kv fp8, head 64, window",
        )
        .unwrap();
        assert_eq!(
            d,
            AttnKey {
                family: Family::DecodeAttention,
                head_dim: 64,
                kv_fp8: true,
                window: true,
                fp8: false
            }
        );
        let p = attention_key(
            Family::PrefillAttention,
            "torch_flow, fp8, kv bf16, head 128, full",
        )
        .unwrap();
        assert_eq!(
            (p.head_dim, p.kv_fp8, p.window, p.fp8),
            (128, false, false, true)
        );
        assert!(attention_key(Family::DecodeAttention, "k, kv int4, head 64, full").is_none());
        assert!(attention_key(Family::Gemm, "k, kv bf16, head 64, full").is_none());
    }
}
