//! The one device trait, [`Backend`], implemented once for the CPU ([`CpuDevice`]: the
//! kernels' CPU twins on rayon, host buffers) and once for CUDA ([`CudaDevice`]: the
//! kernels compiled with NVRTC, device buffers, one stream). It serves both users of a
//! device:
//! * serving (`serve::exec`, written once against it, as `serve::ServeDevice`): buffers
//!   addressed by handles ([`Buf`]) and the live model's ops over them;
//! * calibration: every calibration kernel run on host inputs (the correctness tests) and
//!   timed (`measure`), the live model's ops timed through the serving ops.
//!
//! [`Device`] names a device on the command line and opens it: CUDA only after a runtime
//! check (the driver library loads, a context is created, NVRTC loads), otherwise a clear
//! error, never a panic.

pub mod cpu;
pub mod cuda;

pub use cpu::CpuDevice;
pub use cuda::CudaDevice;

use crate::op::{Measurement, OpSpec};
use crate::stats::{Stats, TimingConfig};
use crate::{EngineError, Result};
use kernels::live::Group;
use kernels::{AttnProblem, GatherProblem, IndexerOutput, IndexerProblem, MoeProblem, WeightDtype};

/// A compute device named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl Device {
    /// `cpu` or `cuda:N` (`cuda` alone means `cuda:0`).
    pub fn parse(s: &str) -> Result<Device> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("cpu") {
            return Ok(Device::Cpu);
        }
        if t.eq_ignore_ascii_case("cuda") {
            return Ok(Device::Cuda(0));
        }
        match t.split_once(':') {
            Some((k, n)) if k.eq_ignore_ascii_case("cuda") => n
                .parse()
                .map(Device::Cuda)
                .map_err(|_| EngineError::BadDevice(s.to_string())),
            _ => Err(EngineError::BadDevice(s.to_string())),
        }
    }

    /// Opens the device. For CUDA this checks that the driver library loads, a context
    /// can be created and NVRTC loads; each failure is an error naming the cause.
    pub fn open(&self) -> Result<Box<dyn Backend>> {
        match *self {
            Device::Cpu => Ok(Box::new(CpuDevice::new())),
            Device::Cuda(n) => Ok(Box::new(CudaDevice::open(n)?)),
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// What a device is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Human-readable device (CPU model and threads, or GPU name and compute capability).
    pub device: String,
    /// Driver / runtime description (CUDA driver version, or OS kernel for the CPU).
    pub driver: String,
    /// Last-level cache bytes (L3 on a CPU, L2 on a GPU) used to size input rotation.
    pub cache_bytes: u64,
    /// Memory the rotation copies of one op may use (host memory on a CPU, device
    /// memory on a GPU).
    pub rotation_cap_bytes: u64,
}

/// Element type of a device buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dt {
    F32,
    I32,
    U8,
}

/// A buffer on a device: `len` elements of `dt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buf {
    id: u32,
    pub len: usize,
    pub dt: Dt,
}

impl Buf {
    /// A handle for device implementations (`id` indexes their buffer table).
    pub fn new(id: u32, len: usize, dt: Dt) -> Buf {
        Buf { id, len, dt }
    }
    pub fn id(&self) -> usize {
        self.id as usize
    }
}

/// Weight matrices on a device (see `kernels::live::WeightsRef`).
#[derive(Debug, Clone, Copy)]
pub struct DevWeights {
    pub dtype: WeightDtype,
    pub experts: usize,
    pub n_out: usize,
    pub k_in: usize,
    pub weights: Buf,
    pub scales: Buf,
}

/// Which positions an attention call reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnSel {
    Dense,
    /// The first `topk` entries per row of an i32 buffer `[rows][topk]`.
    Sparse {
        topk: usize,
        indices: Buf,
    },
    Window(usize),
}

/// One attention call over a paged latent cache (`kernels::AttnArgs` on a device).
#[derive(Debug, Clone, Copy)]
pub struct AttnCall {
    pub rows: usize,
    pub heads: usize,
    pub dim: usize,
    pub page_size: usize,
    pub max_pages: usize,
    pub q: Buf,
    pub kv: Buf,
    pub kv_scale: Buf,
    pub block_table: Buf,
    pub seq_lens: Buf,
    /// The longest of `seq_lens`, at least 1 (the caller knows it on the host: a device
    /// sizes its split-KV grid by it without reading `seq_lens` back, which would wait
    /// for the device mid-pass).
    pub longest: usize,
    pub softmax_scale: f32,
    pub sel: AttnSel,
    pub out: Buf,
}

/// Indexer scores over a paged key cache, then the top-k positions per row.
#[derive(Debug, Clone, Copy)]
pub struct IndexerCall {
    pub rows: usize,
    pub heads: usize,
    pub dim: usize,
    pub page_size: usize,
    pub max_pages: usize,
    pub n_pos: usize,
    pub topk: usize,
    pub q: Buf,
    pub w: Buf,
    pub keys: Buf,
    pub key_scale: Buf,
    pub block_table: Buf,
    pub seq_lens: Buf,
    /// f32 `[rows][n_pos]` workspace.
    pub scores: Buf,
    /// i32 `[rows][topk]` output.
    pub out: Buf,
}

/// Buffers, the live model's ops and the calibration kernels on one device.
pub trait Backend: Send {
    /// What the device is.
    fn info(&self) -> &DeviceInfo;
    /// What runs the ops (CPU model and threads, or GPU).
    fn describe(&self) -> String {
        format!("{} ({})", self.info().device, self.info().driver)
    }

    // Buffers.
    /// A buffer of `len` elements; its contents are unspecified until written.
    fn alloc(&mut self, dt: Dt, len: usize) -> Result<Buf>;
    fn free(&mut self, b: Buf);
    fn write_f32(&mut self, b: Buf, offset: usize, data: &[f32]) -> Result<()>;
    fn write_i32(&mut self, b: Buf, offset: usize, data: &[i32]) -> Result<()>;
    fn write_u8(&mut self, b: Buf, offset: usize, data: &[u8]) -> Result<()>;
    fn read_f32(&mut self, b: Buf, offset: usize, len: usize) -> Result<Vec<f32>>;
    fn read_i32(&mut self, b: Buf, offset: usize, len: usize) -> Result<Vec<i32>>;
    fn read_u8(&mut self, b: Buf, offset: usize, len: usize) -> Result<Vec<u8>>;
    /// Waits for every op issued so far (a no-op on the CPU).
    fn sync(&mut self) -> Result<()>;
    /// Whether ops return before they finish (a GPU stream, `true`) or when done (the
    /// CPU). A traced forward pass on such a device times its calls by [`Backend::mark`]s
    /// on the device's own timeline, not by the host's clock (which sees launches only).
    fn asynchronous(&self) -> bool {
        false
    }
    /// Records a mark on the device's timeline once the ops issued so far are done,
    /// without waiting for them (an asynchronous device; a no-op on the CPU).
    fn mark(&mut self) -> Result<()> {
        Ok(())
    }
    /// Waits for the device, then returns the seconds from the first mark recorded
    /// since the last take to each mark, in order (the first is 0; empty when none),
    /// and forgets them.
    fn take_marks(&mut self) -> Result<Vec<f64>> {
        Ok(Vec::new())
    }

    // The live model's ops over buffers.
    /// `y[r] = W[expert] x[r]` for the rows of each group (rows in no group untouched).
    fn linear(&mut self, w: &DevWeights, groups: &[Group], x: Buf, y: Buf) -> Result<()>;
    /// `x += delta` (when given), `out = rmsnorm(x) * weight` per row of `weight.len`.
    fn rmsnorm(
        &mut self,
        x: Buf,
        delta: Option<Buf>,
        weight: Buf,
        out: Buf,
        eps: f32,
    ) -> Result<()>;
    fn swiglu(&mut self, gu: Buf, out: Buf, ffn: usize) -> Result<()>;
    fn gate_topk(&mut self, logits: Buf, experts: usize, k: usize, ids: Buf, w: Buf) -> Result<()>;
    fn gather_rows(&mut self, src: Buf, dim: usize, idx: Buf, out: Buf) -> Result<()>;
    fn moe_combine(
        &mut self,
        y: Buf,
        dim: usize,
        slots: Buf,
        w: Buf,
        k: usize,
        out: Buf,
    ) -> Result<()>;
    fn add(&mut self, x: Buf, y: Buf) -> Result<()>;
    fn kv_write(&mut self, src: Buf, dim: usize, slots: Buf, cache: Buf, scales: Buf)
        -> Result<()>;
    fn attention(&mut self, a: &AttnCall) -> Result<()>;
    fn indexer(&mut self, a: &IndexerCall) -> Result<()>;
    fn argmax(&mut self, logits: Buf, n: usize, out: Buf) -> Result<()>;

    // Calibration: the kernels on host inputs, and their timing.
    /// `y` of the MoE expert FFN (`[touched][tokens][n_out]`).
    fn run_moe(&mut self, p: &MoeProblem) -> Result<Vec<f32>>;
    /// Attention decode output (`[batch][heads][dim]`).
    fn run_attention(&mut self, p: &AttnProblem) -> Result<Vec<f32>>;
    /// Indexer scores and top-k.
    fn run_indexer(&mut self, p: &IndexerProblem) -> Result<IndexerOutput>;
    /// Gathered rows.
    fn run_gather(&mut self, p: &GatherProblem) -> Result<Vec<u8>>;
    /// Dynamic per-tensor FP8 (E4M3) codes of BF16 values and their scale
    /// (`x.len() % 8 == 0`): the activation quantization of an FP8 linear layer.
    fn run_fp8_quant(&mut self, x: &[u16]) -> Result<(Vec<u8>, f32)>;
    /// Device-local copy of `src` (through device memory on a GPU).
    fn run_copy(&mut self, src: &[u8]) -> Result<Vec<u8>>;
    /// Another handle on this device (context, stream, compiled kernels) with no
    /// buffers: what a measurement allocates there is freed when it is dropped.
    fn scratch(&self) -> Box<dyn Backend>;
    /// Times a calibration kernel (`op` is no live-model op: those are timed through
    /// the serving ops) over `copies` input copies: its statistics and a note.
    fn time_kernel(
        &mut self,
        op: &OpSpec,
        cfg: &TimingConfig,
        copies: usize,
    ) -> Result<(Stats, String)>;

    // Provided.
    /// Uploads host f32 data into a new buffer.
    fn upload_f32(&mut self, data: &[f32]) -> Result<Buf> {
        let b = self.alloc(Dt::F32, data.len())?;
        self.write_f32(b, 0, data)?;
        Ok(b)
    }
    fn upload_i32(&mut self, data: &[i32]) -> Result<Buf> {
        let b = self.alloc(Dt::I32, data.len())?;
        self.write_i32(b, 0, data)?;
        Ok(b)
    }
    fn upload_u8(&mut self, data: &[u8]) -> Result<Buf> {
        let b = self.alloc(Dt::U8, data.len())?;
        self.write_u8(b, 0, data)?;
        Ok(b)
    }
    /// Uploads weights.
    fn upload_weights(&mut self, w: &kernels::live::Weights) -> Result<DevWeights> {
        Ok(DevWeights {
            dtype: w.dtype,
            experts: w.experts,
            n_out: w.n_out,
            k_in: w.k_in,
            weights: self.upload_u8(&w.weights)?,
            scales: self.upload_f32(&w.scales)?,
        })
    }
}

impl dyn Backend + '_ {
    /// Times `op` and reports its statistics and achieved rates: a live-model op through
    /// the serving ops (`op::live::measure_on`, on a scratch handle, so its inputs are
    /// freed after it), any other by the device's own timing loop
    /// (`Backend::time_kernel`).
    pub fn measure(&mut self, op: &OpSpec, cfg: &TimingConfig) -> Result<Measurement> {
        let copies = op.prepare(cfg, self.info().cache_bytes, self.info().rotation_cap_bytes)?;
        let (stats, note) = if op.is_live() {
            let mut scratch = self.scratch();
            let stats = crate::op::live::measure_on(scratch.as_mut(), op, cfg, copies)?;
            (stats, String::new())
        } else {
            self.time_kernel(op, cfg, copies)?
        };
        Ok(Measurement::new(
            op.point(),
            stats,
            op.bytes(),
            op.flops(),
            note,
        ))
    }
}

/// The error of `Backend::time_kernel` for an op that is no calibration kernel.
pub(crate) fn not_a_kernel(op: &OpSpec) -> EngineError {
    EngineError::BadOp {
        op: op.name().into(),
        reason: "a live-model op, timed through the serving ops".into(),
    }
}

/// Buffers by id: a freed id is handed out again.
pub(crate) struct Slots<T> {
    slots: Vec<Option<T>>,
    free_ids: Vec<u32>,
}

impl<T> Slots<T> {
    pub(crate) fn new() -> Self {
        Slots {
            slots: Vec::new(),
            free_ids: Vec::new(),
        }
    }

    /// Stores `v` under a free id.
    pub(crate) fn insert(&mut self, v: T) -> u32 {
        match self.free_ids.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(v);
                id
            }
            None => {
                self.slots.push(Some(v));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Takes `id`'s value out, keeping the id taken (`put` returns it).
    pub(crate) fn take(&mut self, id: usize) -> Option<T> {
        self.slots.get_mut(id).and_then(|s| s.take())
    }

    pub(crate) fn put(&mut self, id: usize, v: T) {
        self.slots[id] = Some(v);
    }

    /// Frees `id`, returning its value.
    pub(crate) fn remove(&mut self, id: usize) -> Option<T> {
        let v = self.take(id)?;
        self.free_ids.push(id as u32);
        Some(v)
    }

    pub(crate) fn get(&self, id: usize) -> Option<&T> {
        self.slots.get(id).and_then(|s| s.as_ref())
    }

    pub(crate) fn get_mut(&mut self, id: usize) -> Option<&mut T> {
        self.slots.get_mut(id).and_then(|s| s.as_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_devices() {
        assert_eq!(Device::parse("cpu").unwrap(), Device::Cpu);
        assert_eq!(Device::parse("cuda:1").unwrap(), Device::Cuda(1));
        assert_eq!(Device::parse("CUDA").unwrap(), Device::Cuda(0));
        for bad in ["gpu", "cuda:x", "cuda:-1", ""] {
            let e = Device::parse(bad).unwrap_err();
            assert!(e.to_string().contains("expected `cpu` or `cuda:N`"), "{e}");
        }
        assert_eq!(Device::Cuda(3).to_string(), "cuda:3");
    }
}
