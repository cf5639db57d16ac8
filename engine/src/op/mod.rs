//! The engine's op registry: one shape struct per operation (name, measurement point,
//! bytes and flops, input generation), the [`OpSpec`] that names any of them, and
//! [`OPS`], the single list of ops that calibration reads (plans, `--ops` groups, which
//! ops get a fit). Backends only run and time what the shapes generate.

mod calib;
pub mod live;

pub use calib::{
    AttnShape, CopyShape, GatherShape, GemmShape, IndexerShape, MoeShape, StreamShape,
};
pub use live::{
    AddShape, ArgmaxShape, CombineShape, GateShape, GatherRowsShape, IndexerPagedShape,
    KvWriteShape, LinearShape, NormShape, SwigluShape,
};

use crate::stats::Stats;
use crate::Result;
use spec::call::CallOp;

/// Where an Engram table lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GatherPlacement {
    /// Host memory in 4 KiB pages (`MADV_NOHUGEPAGE`).
    Host4k,
    /// Host memory in 2 MiB transparent huge pages (`MADV_HUGEPAGE`), when available.
    Host2m,
    /// GPU device memory.
    Device,
    /// Pinned host memory mapped into the GPU's address space (zero-copy).
    Mapped,
}

impl GatherPlacement {
    pub fn name(self) -> &'static str {
        match self {
            GatherPlacement::Host4k => "host4k",
            GatherPlacement::Host2m => "host2m",
            GatherPlacement::Device => "device",
            GatherPlacement::Mapped => "mapped",
        }
    }

    /// Nominal page size (the page the address translation works in).
    pub fn page_bytes(self) -> u64 {
        match self {
            GatherPlacement::Host4k | GatherPlacement::Mapped => 4096,
            GatherPlacement::Host2m | GatherPlacement::Device => 2 << 20,
        }
    }
}

/// What every op's shape struct provides.
pub trait OpShape {
    /// Op name as written to the CSV (an entry of [`OPS`]).
    fn name(&self) -> &'static str;
    /// The measurement point: name, `key=value` shape and dtype.
    fn point(&self) -> Point;
    /// Bytes moved by one run.
    fn bytes(&self) -> u64;
    /// Flops done by one run.
    fn flops(&self) -> u64;
    /// Approximate bytes one run touches (for sizing rotation buffers).
    fn footprint_bytes(&self) -> u64;
    /// Rejects shapes the kernels cannot run (before any allocation).
    fn validate(&self) -> Result<()>;
    /// Input copies a measurement rotates over when the shape fixes it (the live
    /// model's ops rotate over one copy per layer that uses them, mirroring the run's
    /// cache reuse); `None` = sized to defeat the last-level cache.
    fn copies(&self) -> Option<usize> {
        None
    }
}

/// Why an op is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpRole {
    /// The device's peaks; every efficiency is a fraction of them.
    Reference,
    /// Measured by the default plans and fitted by a cost family (`calibration::families`).
    Calibration,
    /// An op of the live engine's model, measured by the live plan at the model's shapes
    /// and fitted per static shape (`calibration::live`).
    Live,
}

/// One entry of the op registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpInfo {
    pub name: &'static str,
    /// `--ops` group the op belongs to.
    pub group: &'static str,
    pub role: OpRole,
    pub about: &'static str,
}

const fn op(name: &'static str, group: &'static str, role: OpRole, about: &'static str) -> OpInfo {
    OpInfo {
        name,
        group,
        role,
        about,
    }
}

/// Every op the engine measures, in a stable order. Calibration reads this list (plans,
/// `--ops`, fitted ops); nothing else lists op names. The ops the live model calls are
/// named by their `CallOp` (`spec::call`), the one list of them.
pub const OPS: [OpInfo; 20] = [
    op(
        "ref_stream_read",
        "ref",
        OpRole::Reference,
        "streaming read: achievable memory bandwidth",
    ),
    op(
        "ref_gemm",
        "ref",
        OpRole::Reference,
        "dense f32 GEMM: achievable GEMM rate",
    ),
    op(
        "moe_decode",
        "moe",
        OpRole::Calibration,
        "MoE expert FFN, few tokens per expert: weight streaming",
    ),
    op(
        "grouped_gemm",
        "moe",
        OpRole::Calibration,
        "MoE expert FFN, many tokens per expert",
    ),
    op(
        CallOp::AttnDense.name(),
        "attention",
        OpRole::Calibration,
        "latent-cache attention over every position",
    ),
    op(
        CallOp::AttnSparse.name(),
        "attention",
        OpRole::Calibration,
        "latent-cache attention over top-k positions",
    ),
    op(
        CallOp::AttnWindow.name(),
        "attention",
        OpRole::Calibration,
        "latent-cache attention over a sliding window",
    ),
    op(
        "indexer",
        "indexer",
        OpRole::Calibration,
        "sparse-attention indexer scores and top-k",
    ),
    op(
        "gather",
        "gather",
        OpRole::Calibration,
        "random row gather from a large table (Engram)",
    ),
    op(
        CallOp::Copy.name(),
        "copy",
        OpRole::Calibration,
        "device-local copy: the one-device dispatch/combine stand-in",
    ),
    op(
        CallOp::Linear.name(),
        "live",
        OpRole::Live,
        "grouped linear layer (projections, experts, LM head)",
    ),
    op(
        CallOp::Rmsnorm.name(),
        "live",
        OpRole::Live,
        "RMSNorm with a fused residual add",
    ),
    op(
        CallOp::Swiglu.name(),
        "live",
        OpRole::Live,
        "SwiGLU activation",
    ),
    op(
        CallOp::GateTopk.name(),
        "live",
        OpRole::Live,
        "softmax gating and top-k expert choice",
    ),
    op(
        CallOp::GatherRows.name(),
        "live",
        OpRole::Live,
        "row gather (embedding lookup, MoE token permutation)",
    ),
    op(
        CallOp::MoeCombine.name(),
        "live",
        OpRole::Live,
        "weighted sum of expert outputs back into token rows",
    ),
    op(CallOp::Add.name(), "live", OpRole::Live, "element-wise add"),
    op(
        CallOp::KvWrite.name(),
        "live",
        OpRole::Live,
        "fp8 quantisation of new KV entries into cache pages",
    ),
    op(
        CallOp::IndexerPaged.name(),
        "live",
        OpRole::Live,
        "indexer scores over a paged key cache and top-k",
    ),
    op(
        CallOp::Argmax.name(),
        "live",
        OpRole::Live,
        "greedy sampling",
    ),
];

/// The registry entry of `name`.
pub fn op_info(name: &str) -> Option<&'static OpInfo> {
    OPS.iter().find(|o| o.name == name)
}

/// Every op name of a role, in registry order.
pub fn op_names(role: OpRole) -> Vec<&'static str> {
    OPS.iter()
        .filter(|o| o.role == role)
        .map(|o| o.name)
        .collect()
}

/// One measurable operation with its shape.
#[derive(Debug, Clone, PartialEq)]
pub enum OpSpec {
    /// MoE expert FFN in the decode regime (few tokens per expert): weight streaming.
    MoeDecode(MoeShape),
    /// The same kernel with many tokens per expert: a grouped GEMM.
    GroupedGemm(MoeShape),
    /// Latent-cache attention (decode rows, or causal prefill rows).
    Attention(AttnShape),
    /// DSA indexer scores plus top-k.
    Indexer(IndexerShape),
    /// Random row gather from a table.
    Gather(GatherShape),
    /// Dispatch/combine all-to-all of `bytes` per peer; one peer = a device-local copy.
    AllToAll(CopyShape),
    /// Reference: streaming read (achievable memory bandwidth).
    StreamRead(StreamShape),
    /// Reference: dense f32 GEMM (achievable GEMM rate).
    Gemm(GemmShape),
    Linear(LinearShape),
    Rmsnorm(NormShape),
    Swiglu(SwigluShape),
    GateTopk(GateShape),
    GatherRows(GatherRowsShape),
    MoeCombine(CombineShape),
    Add(AddShape),
    KvWrite(KvWriteShape),
    IndexerPaged(IndexerPagedShape),
    Argmax(ArgmaxShape),
}

macro_rules! each_shape {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            OpSpec::MoeDecode($s) => $e,
            OpSpec::GroupedGemm($s) => $e,
            OpSpec::Attention($s) => $e,
            OpSpec::Indexer($s) => $e,
            OpSpec::Gather($s) => $e,
            OpSpec::AllToAll($s) => $e,
            OpSpec::StreamRead($s) => $e,
            OpSpec::Gemm($s) => $e,
            OpSpec::Linear($s) => $e,
            OpSpec::Rmsnorm($s) => $e,
            OpSpec::Swiglu($s) => $e,
            OpSpec::GateTopk($s) => $e,
            OpSpec::GatherRows($s) => $e,
            OpSpec::MoeCombine($s) => $e,
            OpSpec::Add($s) => $e,
            OpSpec::KvWrite($s) => $e,
            OpSpec::IndexerPaged($s) => $e,
            OpSpec::Argmax($s) => $e,
        }
    };
}

impl OpSpec {
    /// The shape behind the spec.
    pub fn shape(&self) -> &dyn OpShape {
        each_shape!(self, s => s)
    }

    /// Op name as written to the CSV.
    pub fn name(&self) -> &'static str {
        match self {
            // The MoE kernel is one shape measured in two regimes.
            OpSpec::MoeDecode(_) => "moe_decode",
            OpSpec::GroupedGemm(_) => "grouped_gemm",
            other => other.shape().name(),
        }
    }

    pub fn point(&self) -> Point {
        let mut p = self.shape().point();
        p.op = self.name().to_string();
        p
    }

    pub fn bytes(&self) -> u64 {
        self.shape().bytes()
    }

    pub fn flops(&self) -> u64 {
        self.shape().flops()
    }

    pub fn footprint_bytes(&self) -> u64 {
        self.shape().footprint_bytes()
    }

    pub fn validate(&self) -> Result<()> {
        self.shape().validate()
    }

    /// Whether the op runs on the serving device (`serve::ServeDevice`) rather than a
    /// backend's own kernel runner.
    pub fn is_live(&self) -> bool {
        op_info(self.name()).is_some_and(|o| o.role == OpRole::Live)
    }

    /// Validates the op and returns how many copies of its inputs a measurement
    /// rotates over: the shape's own count when it fixes one, else enough to defeat a
    /// cache of `cache_bytes` when `cfg.rotate`, within `mem_cap` bytes. The common
    /// prologue of every backend's `measure`.
    pub fn prepare(
        &self,
        cfg: &crate::stats::TimingConfig,
        cache_bytes: u64,
        mem_cap: u64,
    ) -> Result<usize> {
        self.validate()?;
        Ok(match (self.shape().copies(), cfg.rotate) {
            (Some(c), true) => c.max(1),
            (None, true) => crate::rotation_copies(self.footprint_bytes(), cache_bytes, mem_cap),
            (_, false) => 1,
        })
    }
}

impl OpSpec {
    /// The spec a CSV point describes, for the live model's ops and the ops they share
    /// with calibration (attention, copy); `None` for other ops or a malformed shape.
    pub fn from_point(p: &Point) -> Option<OpSpec> {
        let kv: std::collections::HashMap<&str, &str> = p
            .shape
            .split(';')
            .filter_map(|x| x.split_once('='))
            .collect();
        let n = |k: &str| kv.get(k).and_then(|v| v.parse::<usize>().ok());
        let attn = |mode| {
            Some(OpSpec::Attention(AttnShape {
                mode,
                batch: n("batch")?,
                heads: n("heads")?,
                dim: n("dim")?,
                context: n("context")?,
                page: n("page")?,
                new_tokens: n("new").unwrap_or(1),
                copies: n("copies"),
            }))
        };
        use kernels::AttnModeKind as M;
        Some(match p.op.as_str() {
            "attn_dense" => return attn(M::Dense),
            "attn_sparse" => return attn(M::Sparse(n("topk")?)),
            "attn_window" => return attn(M::Window(n("window")?)),
            "copy" => OpSpec::AllToAll(CopyShape {
                bytes: n("bytes")? as u64,
                peers: n("peers")?,
            }),
            _ => return live_from_point(&p.op, &p.dtype, &n),
        })
    }
}

/// The spec of a live-model op's point (`n` reads its shape's numbers).
fn live_from_point(op: &str, dtype: &str, n: &dyn Fn(&str) -> Option<usize>) -> Option<OpSpec> {
    Some(match op {
        "linear" => OpSpec::Linear(LinearShape {
            dtype: kernels::WeightDtype::parse(dtype)?,
            n: n("n")?,
            k: n("k")?,
            groups: n("groups")?,
            rows: n("rows")?,
            experts: n("experts")?,
            copies: n("copies")?,
        }),
        "rmsnorm" => OpSpec::Rmsnorm(NormShape {
            rows: n("rows")?,
            dim: n("dim")?,
            residual: n("residual")?,
        }),
        "swiglu" => OpSpec::Swiglu(SwigluShape {
            rows: n("rows")?,
            ffn: n("ffn")?,
        }),
        "gate_topk" => OpSpec::GateTopk(GateShape {
            rows: n("rows")?,
            experts: n("experts")?,
            topk: n("topk")?,
        }),
        "gather_rows" => OpSpec::GatherRows(GatherRowsShape {
            rows: n("rows")?,
            dim: n("dim")?,
            table_rows: n("table_rows")?,
        }),
        "moe_combine" => OpSpec::MoeCombine(CombineShape {
            rows: n("rows")?,
            topk: n("topk")?,
            dim: n("dim")?,
        }),
        "add" => OpSpec::Add(AddShape {
            rows: n("rows")?,
            dim: n("dim")?,
        }),
        "kv_write" => OpSpec::KvWrite(KvWriteShape {
            rows: n("rows")?,
            dim: n("dim")?,
            slots: n("slots")?,
        }),
        "argmax" => OpSpec::Argmax(ArgmaxShape {
            rows: n("rows")?,
            n: n("n")?,
        }),
        "indexer_paged" => OpSpec::IndexerPaged(IndexerPagedShape {
            requests: n("requests")?,
            new_tokens: n("new")?,
            context: n("context")?,
            heads: n("heads")?,
            dim: n("dim")?,
            topk: n("topk")?,
            page: n("page")?,
            copies: n("copies")?,
        }),
        _ => return None,
    })
}

/// Identity of a measurement point: what the CSV's `op`, `shape`, `dtype` columns hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Point {
    pub op: String,
    /// `key=value` pairs joined by `;`, in a fixed order.
    pub shape: String,
    pub dtype: String,
}

impl Point {
    /// A point from numeric `key=value` pairs.
    pub fn new(op: &str, pairs: &[(&str, u64)], dtype: &str) -> Point {
        Point {
            op: op.to_string(),
            shape: shape_text(pairs),
            dtype: dtype.to_string(),
        }
    }
}

/// `key=value` pairs joined by `;`.
pub fn shape_text(pairs: &[(&str, u64)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// A timed point.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    pub point: Point,
    pub stats: Stats,
    /// Bytes moved and flops done by one run.
    pub bytes: u64,
    pub flops: u64,
    pub achieved_bytes_per_s: f64,
    pub achieved_flops_per_s: f64,
    /// Free-form facts about the run (for example `thp=madvise huge_pct=100`).
    pub note: String,
}

impl Measurement {
    pub fn new(point: Point, stats: Stats, bytes: u64, flops: u64, note: String) -> Self {
        let t = stats.median_s;
        let rate = |x: u64| if t > 0.0 { x as f64 / t } else { 0.0 };
        Measurement {
            point,
            stats,
            bytes,
            flops,
            achieved_bytes_per_s: rate(bytes),
            achieved_flops_per_s: rate(flops),
            note,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels::{AttnModeKind, WeightDtype};

    /// Every op the live model calls has its registry entry, under the op's one name:
    /// a call the executor records can be timed and fitted.
    #[test]
    fn every_call_op_is_registered() {
        for c in CallOp::ALL {
            assert!(op_info(c.name()).is_some(), "{c} is not in OPS");
        }
    }

    #[test]
    fn points_are_stable_and_distinct() {
        let a = OpSpec::MoeDecode(MoeShape {
            dtype: WeightDtype::Fp8,
            tokens: 1,
            experts: 8,
            n_out: 2048,
            k_in: 7168,
        });
        assert_eq!(a.point().op, "moe_decode");
        assert_eq!(a.point().shape, "tokens=1;experts=8;n=2048;k=7168");
        assert_eq!(a.point().dtype, "fp8");
        let g = OpSpec::Gather(GatherShape {
            placement: GatherPlacement::Host2m,
            table_bytes: 1 << 30,
            row_bytes: 256,
            rows: 4096,
        });
        assert_eq!(
            g.point().shape,
            "placement=host2m;table_bytes=1073741824;row_bytes=256;rows=4096;page=2097152"
        );
        let s = OpSpec::Attention(AttnShape::decode(
            AttnModeKind::Sparse(2048),
            1,
            16,
            512,
            65536,
            64,
        ));
        assert_eq!(s.name(), "attn_sparse");
        assert!(s.point().shape.ends_with("topk=2048"));
    }

    #[test]
    fn live_points_parse_back_to_their_specs() {
        let mut specs = live::tests::tiny_live_ops();
        specs.push(OpSpec::Attention(AttnShape {
            mode: AttnModeKind::Window(16),
            batch: 2,
            heads: 4,
            dim: 64,
            context: 100,
            page: 16,
            new_tokens: 3,
            copies: Some(4),
        }));
        specs.push(OpSpec::Attention(AttnShape::decode(
            AttnModeKind::Sparse(8),
            1,
            2,
            64,
            50,
            16,
        )));
        specs.push(OpSpec::AllToAll(CopyShape {
            bytes: 4096,
            peers: 1,
        }));
        for s in specs {
            assert_eq!(OpSpec::from_point(&s.point()), Some(s.clone()), "{s:?}");
        }
        let gemm = OpSpec::Gemm(GemmShape { m: 1, n: 1, k: 1 });
        assert_eq!(OpSpec::from_point(&gemm.point()), None);
    }

    #[test]
    fn registry_names_every_spec_once() {
        let mut names: Vec<&str> = OPS.iter().map(|o| o.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), OPS.len());
        assert_eq!(
            op_names(OpRole::Reference),
            vec!["ref_stream_read", "ref_gemm"]
        );
        assert!(op_info("linear").is_some_and(|o| o.role == OpRole::Live));
        assert!(op_info("nope").is_none());
    }

    #[test]
    fn validation() {
        assert!(OpSpec::Gemm(GemmShape { m: 0, n: 1, k: 1 })
            .validate()
            .is_err());
        assert!(OpSpec::MoeDecode(MoeShape {
            dtype: WeightDtype::Bf16,
            tokens: 1,
            experts: 1,
            n_out: 8,
            k_in: 100
        })
        .validate()
        .is_err());
        let e = OpSpec::AllToAll(CopyShape {
            bytes: 1024,
            peers: 4,
        })
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("NCCL"), "{e}");
        assert!(OpSpec::AllToAll(CopyShape {
            bytes: 1024,
            peers: 1
        })
        .validate()
        .is_ok());
    }

    #[test]
    fn measurement_rates() {
        let st = Stats {
            median_s: 0.5,
            p10_s: 0.4,
            p90_s: 0.6,
            samples: 3,
        };
        let m = Measurement::new(
            OpSpec::StreamRead(StreamShape { bytes: 16 }).point(),
            st,
            100,
            10,
            String::new(),
        );
        assert_eq!(m.achieved_bytes_per_s, 200.0);
        assert_eq!(m.achieved_flops_per_s, 20.0);
    }
}
