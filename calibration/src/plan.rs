//! Measurement plans: the points `twin calibrate` measures per device and plan size.
//!
//! Sweeps (full plan; the quick plan takes a subset sized to finish in about a minute on
//! a 2-core CPU, or a few minutes on one GPU):
//! * MoE: tokens per expert 1..4096 (decode 1..64, grouped GEMM 128..4096), experts
//!   touched 1..64, bf16 / fp8 / int4 weights.
//! * Attention: context 1K..1M (dense), top-k 256..2048 (sparse), window 128..4096,
//!   latent dim 512, page size 64.
//! * Indexer: positions 4K..1M.
//! * Gather: table size from within to far beyond TLB reach, 4 KiB vs 2 MiB pages on a
//!   CPU, device vs host-mapped memory on a GPU, 256-byte rows.
//! * Copy (dispatch/combine stand-in): message size 64 KiB..1 GiB.
//! * References: streaming read and dense GEMM, for the device's own peaks.

use crate::{CalibrationError, Result};
use engine::op::{op_info, op_names, OpRole};
use engine::{
    AttnShape, CopyShape, Device, GatherPlacement, GatherShape, GemmShape, IndexerShape, MoeShape,
    OpSpec, StreamShape, OPS,
};
use kernels::{AttnModeKind, WeightDtype};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanSize {
    /// Tiny shapes exercising every op and fit (tests).
    Smoke,
    Quick,
    Full,
}

/// Expands an `--ops` list (op names or groups of the engine's registry,
/// `engine::OPS`) to op names. Reference ops are always included: every efficiency is
/// a fraction of them. Unknown names are an error.
pub fn expand_ops(list: &[String]) -> Result<Vec<&'static str>> {
    let mut out: Vec<&'static str> = op_names(OpRole::Reference);
    for name in list {
        let name = name.trim();
        let in_group: Vec<&'static str> = OPS
            .iter()
            .filter(|o| o.group == name)
            .map(|o| o.name)
            .collect();
        if !in_group.is_empty() {
            out.extend(in_group);
        } else if let Some(op) = op_info(name) {
            out.push(op.name);
        } else {
            let mut groups: Vec<&str> = OPS.iter().map(|o| o.group).collect();
            groups.dedup();
            return Err(CalibrationError::UnknownOp {
                name: name.to_string(),
                ops: OPS.iter().map(|o| o.name).collect::<Vec<_>>().join(", "),
                groups: groups.join(", "),
            });
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The plan for `device` and `size`, restricted to `ops` (all when `None`). References
/// come first so that a partial run still has its peaks.
pub fn plan(device: Device, size: PlanSize, ops: Option<&[&str]>) -> Vec<OpSpec> {
    let sizing = Sizing {
        gpu: matches!(device, Device::Cuda(_)),
        size,
    };
    let mut v = references(sizing);
    v.extend(moe(sizing));
    v.extend(attention(sizing));
    v.extend(indexer(sizing));
    v.extend(gather(sizing));
    v.extend(copies(sizing));
    if let Some(keep) = ops {
        v.retain(|o| keep.contains(&o.name()));
    }
    v
}

/// What a plan's points depend on: a GPU or a CPU, and the plan's size.
#[derive(Debug, Clone, Copy)]
struct Sizing {
    gpu: bool,
    size: PlanSize,
}

impl Sizing {
    /// The list for this plan size.
    fn pick(self, smoke: &[usize], quick: &[usize], full: &[usize]) -> Vec<usize> {
        match self.size {
            PlanSize::Smoke => smoke.to_vec(),
            PlanSize::Quick => quick.to_vec(),
            PlanSize::Full => full.to_vec(),
        }
    }
}

/// References: streaming reads and dense GEMMs, for the device's own peaks.
fn references(sizing: Sizing) -> Vec<OpSpec> {
    let Sizing { gpu, size } = sizing;
    let mut v = Vec::new();
    let stream = match (gpu, size) {
        (_, PlanSize::Smoke) => vec![1 << 20, 4 << 20],
        (false, _) => vec![128 << 20, 256 << 20],
        (true, _) => vec![1 << 30, 4 << 30],
    };
    for b in stream {
        v.push(OpSpec::StreamRead(StreamShape { bytes: b }));
    }
    let gemm = match (gpu, size) {
        (_, PlanSize::Smoke) => vec![32, 64],
        (false, PlanSize::Quick) => vec![256, 512],
        (false, PlanSize::Full) => vec![512, 1024],
        (true, PlanSize::Quick) => vec![4096, 8192],
        (true, PlanSize::Full) => vec![4096, 8192, 16384],
    };
    for s in gemm {
        v.push(OpSpec::Gemm(GemmShape { m: s, n: s, k: s }));
    }
    v
}

/// MoE decode (weight streaming) and grouped GEMMs (many tokens per expert).
fn moe(sizing: Sizing) -> Vec<OpSpec> {
    let Sizing { gpu, size } = sizing;
    let mut v = Vec::new();
    let pick = |smoke: &[usize], quick: &[usize], full: &[usize]| sizing.pick(smoke, quick, full);
    // (n_out, k_in) of one expert: DeepSeek-V3 sized on a GPU, smaller on a CPU.
    let (n, k) = match (gpu, size) {
        (_, PlanSize::Smoke) => (64, 256),
        (true, _) => (2048, 7168),
        (false, PlanSize::Quick) => (512, 2048),
        (false, PlanSize::Full) => (1024, 4096),
    };
    // MoE decode: weight streaming.
    let dtypes: Vec<WeightDtype> = WeightDtype::ALL.to_vec();
    for &dtype in &dtypes {
        for tokens in pick(&[1, 2], &[1, 2, 4], &[1, 2, 4, 8, 16, 32, 64]) {
            for experts in pick(
                &[1, 2],
                if gpu { &[1, 8, 32] } else { &[1, 4, 8] },
                if gpu { &[1, 8, 32, 64] } else { &[1, 4, 8, 16] },
            ) {
                v.push(OpSpec::MoeDecode(MoeShape {
                    dtype,
                    tokens,
                    experts,
                    n_out: n,
                    k_in: k,
                }));
            }
        }
    }
    // Grouped GEMM: many tokens per expert.
    let (gn, gk) = if gpu || size == PlanSize::Smoke {
        (n, k)
    } else {
        (256, 1024)
    };
    for tokens in pick(
        &[8, 16, 32],
        if gpu {
            &[256, 1024, 4096]
        } else {
            &[64, 128, 256]
        },
        if gpu {
            &[128, 256, 512, 1024, 2048, 4096]
        } else {
            &[64, 128, 256, 512]
        },
    ) {
        for experts in pick(&[1], &[1, 2], &[1, 2, 4]) {
            v.push(OpSpec::GroupedGemm(MoeShape {
                dtype: WeightDtype::Fp8,
                tokens,
                experts,
                n_out: gn,
                k_in: gk,
            }));
        }
    }
    v
}

/// Attention decode over the latent cache: dense, sparse (top-k) and windowed.
fn attention(sizing: Sizing) -> Vec<OpSpec> {
    let Sizing { gpu, size } = sizing;
    let mut v = Vec::new();
    let pick = |smoke: &[usize], quick: &[usize], full: &[usize]| sizing.pick(smoke, quick, full);
    // Attention decode over the latent cache.
    let dim = if size == PlanSize::Smoke { 64 } else { 512 };
    let heads = if gpu { 16 } else { 8 };
    let page = if size == PlanSize::Smoke { 16 } else { 64 };
    let batch = if gpu { 4 } else { 1 };
    let dense_ctx = match (gpu, size) {
        (_, PlanSize::Smoke) => vec![64, 128, 256],
        (false, PlanSize::Quick) => vec![1 << 10, 2 << 10, 4 << 10, 8 << 10],
        (false, PlanSize::Full) => vec![1 << 10, 4 << 10, 16 << 10, 64 << 10],
        (true, PlanSize::Quick) => vec![1 << 10, 16 << 10, 128 << 10, 1 << 20],
        (true, PlanSize::Full) => vec![1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20],
    };
    for context in dense_ctx {
        v.push(OpSpec::Attention(AttnShape::decode(
            AttnModeKind::Dense,
            batch,
            heads,
            dim,
            context,
            page,
        )));
    }
    let sparse_ctx = if size == PlanSize::Smoke {
        256
    } else if gpu {
        128 << 10
    } else {
        16 << 10
    };
    let at_sparse_ctx =
        |mode| OpSpec::Attention(AttnShape::decode(mode, batch, heads, dim, sparse_ctx, page));
    let topks = pick(
        &[16, 32, 64],
        &[256, 512, 1024, 2048],
        &[256, 512, 1024, 2048],
    );
    v.extend(
        topks
            .into_iter()
            .map(|topk| at_sparse_ctx(AttnModeKind::Sparse(topk))),
    );
    let windows = pick(
        &[16, 32, 64],
        &[128, 512, 1024, 2048],
        &[128, 256, 512, 1024, 2048, 4096],
    );
    v.extend(
        windows
            .into_iter()
            .map(|w| at_sparse_ctx(AttnModeKind::Window(w))),
    );
    v
}

/// The sparse-attention indexer over growing positions.
fn indexer(sizing: Sizing) -> Vec<OpSpec> {
    let Sizing { gpu, size } = sizing;
    let mut v = Vec::new();
    // Indexer.
    let idx_pos = match (gpu, size) {
        (_, PlanSize::Smoke) => vec![128, 256, 512],
        (false, PlanSize::Quick) => vec![2 << 10, 4 << 10, 8 << 10, 16 << 10],
        (false, PlanSize::Full) => vec![4 << 10, 16 << 10, 64 << 10, 128 << 10],
        (true, PlanSize::Quick) => vec![4 << 10, 64 << 10, 256 << 10, 1 << 20],
        (true, PlanSize::Full) => vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20],
    };
    let (ih, id, itopk) = if size == PlanSize::Smoke {
        (4, 64, 16)
    } else if gpu {
        (64, 128, 2048)
    } else {
        (16, 128, 512)
    };
    for positions in idx_pos {
        v.push(OpSpec::Indexer(IndexerShape {
            batch: 1,
            heads: ih,
            dim: id,
            positions,
            topk: itopk,
        }));
    }
    v
}

/// Gathers from tables within and far beyond TLB reach.
fn gather(sizing: Sizing) -> Vec<OpSpec> {
    let Sizing { gpu, size } = sizing;
    let mut v = Vec::new();
    // Gather: table sizes across TLB reach.
    let placements = if gpu {
        [GatherPlacement::Device, GatherPlacement::Mapped]
    } else {
        [GatherPlacement::Host4k, GatherPlacement::Host2m]
    };
    let tables: Vec<u64> = match (gpu, size) {
        (_, PlanSize::Smoke) => vec![1 << 20, 4 << 20, 16 << 20],
        (false, PlanSize::Quick) => vec![4 << 20, 32 << 20, 128 << 20, 512 << 20],
        (false, PlanSize::Full) => vec![4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30, 4 << 30],
        (true, PlanSize::Quick) => vec![64 << 20, 1 << 30, 8 << 30],
        (true, PlanSize::Full) => vec![64 << 20, 512 << 20, 4 << 30, 16 << 30],
    };
    let rows = match (gpu, size) {
        (_, PlanSize::Smoke) => 1024,
        (false, _) => 1 << 16,
        (true, _) => 1 << 20,
    };
    for placement in placements {
        for &table_bytes in &tables {
            v.push(OpSpec::Gather(GatherShape {
                placement,
                table_bytes,
                row_bytes: 256,
                rows,
            }));
        }
    }
    v
}

/// Copies: the one-device dispatch/combine stand-in.
fn copies(sizing: Sizing) -> Vec<OpSpec> {
    let Sizing { gpu, size } = sizing;
    let mut v = Vec::new();
    // Copy (one-device dispatch/combine stand-in).
    let msgs: Vec<u64> = match (gpu, size) {
        (_, PlanSize::Smoke) => vec![64 << 10, 256 << 10, 1 << 20],
        (false, PlanSize::Quick) => vec![64 << 10, 1 << 20, 8 << 20, 32 << 20],
        (false, PlanSize::Full) => vec![64 << 10, 256 << 10, 1 << 20, 8 << 20, 64 << 20, 256 << 20],
        (true, PlanSize::Quick) => vec![64 << 10, 1 << 20, 16 << 20, 256 << 20],
        (true, PlanSize::Full) => vec![64 << 10, 256 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30],
    };
    for bytes in msgs {
        v.push(OpSpec::AllToAll(CopyShape { bytes, peers: 1 }));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_valid_and_cover_every_op() {
        for device in [Device::Cpu, Device::Cuda(0)] {
            for size in [PlanSize::Smoke, PlanSize::Quick, PlanSize::Full] {
                let p = plan(device, size, None);
                for op in &p {
                    op.validate()
                        .unwrap_or_else(|e| panic!("{device} {size:?}: {e}"));
                }
                let measured = op_names(OpRole::Reference)
                    .into_iter()
                    .chain(op_names(OpRole::Calibration));
                for name in measured {
                    assert!(
                        p.iter().any(|o| o.name() == name),
                        "{device} {size:?} lacks {name}"
                    );
                }
                let mut pts: Vec<_> = p.iter().map(|o| o.point()).collect();
                pts.sort();
                let n = pts.len();
                pts.dedup();
                assert_eq!(pts.len(), n, "duplicate points in {device} {size:?}");
            }
        }
    }

    #[test]
    fn op_filter() {
        let ops = expand_ops(&["moe".into(), "gather".into()]).unwrap();
        assert_eq!(
            ops,
            vec![
                "gather",
                "grouped_gemm",
                "moe_decode",
                "ref_gemm",
                "ref_stream_read"
            ]
        );
        let p = plan(Device::Cpu, PlanSize::Quick, Some(&ops));
        assert!(p.iter().all(|o| ops.contains(&o.name())));
        assert!(expand_ops(&["nope".into()])
            .unwrap_err()
            .to_string()
            .contains("unknown op"));
    }
}
