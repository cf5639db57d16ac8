//! The fit of the in-situ table (`in-situ-deepseek-h800`): the in-situ terms of the H800
//! (`cost.in_situ.*`), each fitted to the one category of DeepSeek's H800 profile it
//! names, by the kernel table's least squares; the Hopper GPUs without an in-situ
//! breakdown of their own borrow them, marked `assumed`.

use crate::kernel_fit::{p, Group};

/// The table's name.
pub const TABLE: &str = "in-situ-deepseek-h800";

pub const GROUPS: &[Group] = &[Group {
    name: "in-situ terms (DeepSeek's H800 profile)",
    prefixes: &["prefill-", "decode-"],
    params: &[
        p("in_situ.prefill.moe", 0.3, 4.0),
        p("in_situ.prefill.attention", 0.3, 4.0),
        p("in_situ.prefill.gemm", 0.3, 4.0),
        p("in_situ.prefill.elementwise", 0.3, 8.0),
        p("in_situ.dispatch", 0.3, 4.0),
        p("in_situ.combine", 0.3, 4.0),
        p("in_situ.barrier_frac", 0.0, 0.5),
        p("in_situ.decode.moe", 0.3, 4.0),
        p("in_situ.decode.attention", 0.3, 4.0),
        p("in_situ.decode.gemm", 0.3, 4.0),
        p("in_situ.kernel_floor_s", 0.0, 2e-5),
        p("in_situ.ll_dispatch_s", 0.0, 5e-4),
        p("in_situ.ll_combine_s", 0.0, 5e-4),
    ],
    fitted_in: &["h800"],
    assumed_in: &["h100", "h200"],
    why_assumed: "the H800's in-situ fit to DeepSeek's H800 profile (the same SM90 die and kernels; no in-situ breakdown of this GPU is published)",
    not_borrowed: &[],
}];
