//! One GPU and the fabric around it, as a scenario's `hardware` file describes it.
//! Every field is per GPU unless its name says otherwise.

use crate::dtype::{ByteSize, Dtype};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hardware {
    pub name: String,
    /// Free text shown in listings.
    #[serde(default)]
    pub description: String,
    pub hbm: Hbm,
    pub tensor: TensorRates,
    /// Streaming multiprocessors: GEMM tiles run on them in waves, and communication
    /// kernels take some of them.
    pub sms: u32,
    pub nvlink: Link,
    /// GPUs that share one NVLink domain (8 for HGX nodes, 72 for NVL72 racks).
    pub nvlink_domain_gpus: u32,
    /// Scale-out network (InfiniBand / Ethernet RDMA) per GPU.
    pub scaleout: Link,
    pub host: Host,
    pub tlb: Tlb,
    /// All-in power per GPU (GPU, its share of CPU, network, cooling), watts.
    pub power_w: f64,
    pub price: Price,
    /// The hardware whose kernel fits this one carries: every `[cost]` and
    /// `[cost.spread]` key this file does not set is taken from that hardware's file at
    /// load (with a `carried:` provenance), as the same fractions of this hardware's own
    /// datasheet peaks. For a GPU without public kernel benchmarks of its own; it must
    /// name a hardware that does not itself carry (no chains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernels_from: Option<String>,
    /// Engine cost parameters as seen on this hardware, overriding the analytic defaults
    /// (keys as in `CostParams::set`, e.g. `step_fixed_decode_s`, `moe.mem_eff`), and
    /// their spread (`[cost.spread]`).
    #[serde(default)]
    pub cost: CostTable,
    /// Where each number comes from: field path -> "published: ...", "derived: ...",
    /// "fitted: ...", or "assumed: ...".
    #[serde(default)]
    pub provenance: BTreeMap<String, String>,
}

/// A hardware file's `[cost]` table: cost parameters by key (it reads as that map), and
/// the `[cost.spread]` sub-table, the relative spread of each kernel class's price
/// (keys as in `sim::cost::Spread`; absent: no spread known).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CostTable {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<BTreeMap<String, f64>>,
    #[serde(flatten)]
    pub values: BTreeMap<String, f64>,
}

impl std::ops::Deref for CostTable {
    type Target = BTreeMap<String, f64>;
    fn deref(&self) -> &Self::Target {
        &self.values
    }
}

impl std::ops::DerefMut for CostTable {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.values
    }
}

impl<'a> IntoIterator for &'a CostTable {
    type Item = (&'a String, &'a f64);
    type IntoIter = std::collections::btree_map::Iter<'a, String, f64>;
    fn into_iter(self) -> Self::IntoIter {
        self.values.iter()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hbm {
    pub capacity: ByteSize,
    /// What a serving engine can use for weights, KV and activations.
    pub usable: ByteSize,
    /// Datasheet read bandwidth, bytes/s.
    pub bytes_per_s: f64,
}

/// Dense tensor-core throughput per data type, flop/s. `fp4` is absent on Hopper.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorRates {
    pub bf16_flops_per_s: f64,
    pub fp8_flops_per_s: f64,
    #[serde(default)]
    pub fp4_flops_per_s: Option<f64>,
}

impl TensorRates {
    /// The rate a GEMM with operands of `dtype` runs at: the fastest format the GPU has
    /// at or above that precision (FP4 weights on Hopper run as FP8).
    pub fn flops_per_s(&self, dtype: Dtype) -> f64 {
        match dtype {
            Dtype::Fp4 => self.fp4_flops_per_s.unwrap_or(self.fp8_flops_per_s),
            Dtype::Fp8 => self.fp8_flops_per_s,
            // Weight-only INT4 is dequantized and multiplied in BF16.
            Dtype::Bf16 | Dtype::Fp32 | Dtype::Int4 => self.bf16_flops_per_s,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// One direction, bytes/s.
    pub bytes_per_s: f64,
    /// One-way latency of a small message, seconds.
    pub latency_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Host (CPU) memory available per GPU.
    pub memory: ByteSize,
    /// CPU-GPU link, one direction, bytes/s (PCIe or NVLink-C2C).
    pub link_bytes_per_s: f64,
    /// Latency of one small GPU read of host memory, seconds.
    pub link_latency_s: f64,
}

/// The GPU's translation of host-memory addresses (for Engram tables in host memory).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tlb {
    /// Translation entries that cover host memory; reach = entries x page size.
    pub entries: u32,
    /// Extra time of one gather whose translation misses, amortised over the gathers
    /// in flight, seconds.
    pub miss_s: f64,
}

/// Cost of one GPU-hour under the SemiAnalysis TCO model, USD.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Price {
    pub hyperscaler_usd_per_gpu_hour: f64,
    pub neocloud_usd_per_gpu_hour: f64,
    pub rental_3yr_usd_per_gpu_hour: f64,
}

impl Price {
    pub fn usd_per_gpu_hour(&self, basis: PriceBasis) -> f64 {
        match basis {
            PriceBasis::Hyperscaler => self.hyperscaler_usd_per_gpu_hour,
            PriceBasis::Neocloud => self.neocloud_usd_per_gpu_hour,
            PriceBasis::Rental3yr => self.rental_3yr_usd_per_gpu_hour,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PriceBasis {
    #[default]
    Hyperscaler,
    Neocloud,
    Rental3yr,
}

impl PriceBasis {
    /// The basis as a scenario writes it (`price.basis`).
    pub fn name(self) -> &'static str {
        match self {
            PriceBasis::Hyperscaler => "hyperscaler",
            PriceBasis::Neocloud => "neocloud",
            PriceBasis::Rental3yr => "rental3yr",
        }
    }
}
