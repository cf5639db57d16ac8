//! The rules file: kernel names (regular expressions, first match wins) to in-situ
//! categories, and the names of the CPU and GPU ranges that mark layers.
//!
//! The shipped file (`calibration/rules/kernels.toml`) is embedded; a user's file of the
//! same form is tried before it ([`Rules::with_user_file`]).

use super::error::{Result, TraceError};
use regex::Regex;
use serde::Deserialize;
use spec::insitu::Category;
use std::path::Path;

/// The shipped rules file, as text.
pub const SHIPPED: &str = include_str!("../../rules/kernels.toml");
/// The name the shipped file goes by in errors and reports.
pub const SHIPPED_NAME: &str = "calibration/rules/kernels.toml";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    structure: RawStructure,
    #[serde(default)]
    rule: Vec<RawRule>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStructure {
    #[serde(default)]
    layer_ranges: Vec<String>,
    #[serde(default)]
    layer_ops: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(rename = "match")]
    pattern: String,
    category: String,
}

/// One rule: a name pattern and its category, with where it was written.
#[derive(Debug, Clone)]
pub struct Rule {
    pub pattern: Regex,
    pub category: Category,
    /// `FILE rule N` (1-based), for reports.
    pub origin: String,
}

/// The rules in the order they are tried, and the structure patterns.
#[derive(Debug, Clone)]
pub struct Rules {
    pub rules: Vec<Rule>,
    /// Range names that are one layer each.
    pub layer_ranges: Vec<Regex>,
    /// CPU ops that run once per layer; the first with instances in a trace is used.
    pub layer_ops: Vec<Regex>,
}

impl Rules {
    /// The shipped rules alone.
    pub fn shipped() -> Result<Rules> {
        parse(SHIPPED, SHIPPED_NAME)
    }

    /// `path`'s rules, then the shipped ones (a user's rule wins over a shipped one; a
    /// user's structure patterns are tried first too).
    pub fn with_user_file(path: &Path) -> Result<Rules> {
        let text = std::fs::read_to_string(path).map_err(|error| TraceError::Io {
            path: path.to_path_buf(),
            error,
        })?;
        let mut user = parse(&text, &path.display().to_string())?;
        let shipped = Rules::shipped()?;
        user.rules.extend(shipped.rules);
        user.layer_ranges.extend(shipped.layer_ranges);
        user.layer_ops.extend(shipped.layer_ops);
        Ok(user)
    }

    /// The category of the first rule matching `name`.
    pub fn classify(&self, name: &str) -> Option<Category> {
        self.rules
            .iter()
            .find(|r| r.pattern.is_match(name))
            .map(|r| r.category)
    }
}

/// Parses one rules file; `file` names it in errors.
pub fn parse(text: &str, file: &str) -> Result<Rules> {
    let err = |rule: String, msg: String| TraceError::Rules {
        file: file.to_string(),
        rule,
        msg,
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        err(
            "not a rules file".to_string(),
            e.to_string().trim_end().replace('\n', " "),
        )
    })?;
    let mut rules = Vec::with_capacity(raw.rule.len());
    for (i, r) in raw.rule.into_iter().enumerate() {
        let what = format!("rule {} (match = {:?})", i + 1, r.pattern);
        let pattern = Regex::new(&r.pattern)
            .map_err(|e| err(what.clone(), format!("bad regular expression: {e}")))?;
        let category = match Category::from_key(&r.category) {
            Some(c) if c.is_derived() => {
                return Err(err(
                    what,
                    format!(
                        "category {:?} is derived from the timeline, not given to kernels",
                        r.category
                    ),
                ))
            }
            Some(c) => c,
            None => {
                let keys: Vec<&str> = Category::ALL
                    .iter()
                    .filter(|c| !c.is_derived())
                    .map(|c| c.key())
                    .collect();
                return Err(err(
                    what,
                    format!(
                        "unknown category {:?} (one of: {})",
                        r.category,
                        keys.join(", ")
                    ),
                ));
            }
        };
        rules.push(Rule {
            pattern,
            category,
            origin: format!("{file} rule {}", i + 1),
        });
    }
    let compile = |list: Vec<String>, key: &str| -> Result<Vec<Regex>> {
        list.into_iter()
            .enumerate()
            .map(|(i, p)| {
                Regex::new(&p).map_err(|e| {
                    err(
                        format!("structure.{key}[{i}] ({p:?})"),
                        format!("bad regular expression: {e}"),
                    )
                })
            })
            .collect()
    };
    Ok(Rules {
        rules,
        layer_ranges: compile(raw.structure.layer_ranges, "layer_ranges")?,
        layer_ops: compile(raw.structure.layer_ops, "layer_ops")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_file_parses_and_maps_known_names() {
        let r = Rules::shipped().unwrap();
        let cases = [
            ("twin::dispatch_barrier", Category::DispatchBarrier),
            ("live::attn_decode", Category::Attention),
            ("live::linear", Category::Gemm),
            ("live::rmsnorm", Category::Elementwise),
            ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*)", Category::DispatchBarrier),
            ("void deep_ep::intranode::cached_notify_combine<8>(void**)", Category::CombineBarrier),
            ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*)", Category::Dispatch),
            ("void deep_ep::intranode::combine<nv_bfloat16, 8, 768>(nv_bfloat16*)", Category::Combine),
            ("void deep_ep::internode_ll::dispatch<true, 3, 7168>(void*)", Category::Dispatch),
            ("void deep_ep::internode_ll::combine<false, 3, 7168>(void*)", Category::Combine),
            ("void deep_gemm::fp8_gemm_kernel<4096u, 7168u, 128u, 128u, 128u, 1u, 8u, 128u, (deep_gemm::GemmType)1>(float*)", Category::Moe),
            ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<0u, 4096u, 7168u, 1u, 128u, 128u, 128u, 1u, 8u, 128u, 128u, 1u, false, deep_gemm::GemmType::Normal>(float*)", Category::Gemm),
            ("void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64, 64, 8>>(Flash_fwd_mla_params)", Category::Attention),
            ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", Category::Allreduce),
            ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", Category::Allreduce),
            ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)", Category::Allreduce),
            // As SGLang traces show DeepGEMM's SM90 kernel: the gemm type is a template argument.
            ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<(cute::UMMA::Major)0, 0u, 4096u, 8192u, 1u, 256u, (deep_gemm::GemmType)1>(float*)", Category::Moe),
            ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<(cute::UMMA::Major)0, 0u, 4096u, 8192u, 1u, 256u, (deep_gemm::GemmType)0>(float*)", Category::Gemm),
            ("void deep_ep::internode_ll::clean_low_latency_buffer<32>(int*, int)", Category::DispatchBarrier),
            ("void sglang::cross_device_reduce_1stage<__half, 8>(sglang::RankData*)", Category::Allreduce),
            ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>>>>>>(Params)", Category::Attention),
            ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<KernelTraits>(Params)", Category::Attention),
            ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*)", Category::Elementwise),
            ("fused_moe_kernel", Category::Moe),
            ("triton_poi_fused_add_0", Category::Elementwise),
            ("Memcpy HtoD (Pinned -> Device)", Category::Memcpy),
            ("Memset (Device)", Category::Memcpy),
        ];
        for (name, want) in cases {
            assert_eq!(r.classify(name), Some(want), "{name}");
        }
        assert_eq!(r.classify("mystery_kernel_42"), None);
    }

    #[test]
    fn errors_name_the_file_the_rule_and_the_reason() {
        let bad = "[[rule]]\nmatch = 'a'\ncategory = \"gemm\"\n[[rule]]\nmatch = '(('\ncategory = \"gemm\"\n";
        let e = parse(bad, "mine.toml").unwrap_err().to_string();
        assert!(
            e.starts_with("mine.toml: rule 2 (match = \"((\"): bad regular expression"),
            "{e}"
        );
        let e = parse("[[rule]]\nmatch = 'a'\ncategory = \"flops\"\n", "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mine.toml: rule 1") && e.contains("unknown category \"flops\""),
            "{e}"
        );
        let e = parse("[[rule]]\nmatch = 'a'\ncategory = \"bubble\"\n", "m.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("derived"), "{e}");
        let e = parse("[[rule]]\npattern = 'a'\n", "m.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("m.toml: not a rules file:"), "{e}");
    }
}
