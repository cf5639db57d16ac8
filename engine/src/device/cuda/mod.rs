//! The CUDA device: the kernels compiled with NVRTC to a CUBIN for the GPU at hand (once
//! per kernel and architecture per process, and in `TWIN_KERNEL_CACHE` when set; see
//! `kernels::nvrtc`), launched through cudarc on one stream; buffers in device memory;
//! calibration kernels timed with CUDA events (`calib`).
//!
//! Opening checks, in order: the driver library loads (`libcuda.so`), a context can be
//! created on the ordinal, NVRTC loads. Every driver error names the kernel (or the
//! cuBLAS call) it came from.
//!
//! Not run here: this machine and CI have no GPU. It is compiled, and its kernels are
//! compiled to CUBINs for sm_90 and sm_100 by the kernels' NVRTC test; the CPU twins
//! they mirror are checked against references. `scripts/gpu-check.sh` runs it on a GPU.

mod calib;

use super::{AttnCall, AttnSel, Backend, Buf, DevWeights, DeviceInfo, Dt, IndexerCall, Slots};
use crate::op::OpSpec;
use crate::stats::{Stats, TimingConfig};
use crate::{EngineError, Result};
use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use kernels::live::{validate_rows, Group};
use kernels::{
    AttnProblem, GatherProblem, IndexerOutput, IndexerProblem, KernelSource, MoeProblem,
    WeightDtype,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Heads per attention block (`HPB` in mla_decode.cu).
const ATTN_HEADS_PER_BLOCK: usize = 16;
/// Fewest positions per split of the split-KV attention decode.
const MIN_SPLIT_POSITIONS: usize = 128;

/// NVRTC target for a compute capability: a CUBIN for exactly this GPU (`sm_XY`).
pub fn arch_for(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

/// A driver error, named by the kernel (or call) it came from.
fn kerr(kernel: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Kernel {
        kernel: kernel.to_string(),
        msg: e.to_string(),
    }
}

enum DevStore {
    F32(CudaSlice<f32>),
    I32(CudaSlice<i32>),
    U8(CudaSlice<u8>),
}

/// Buffers, ops and timing on one GPU.
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// NVRTC target, `sm_XY` of this GPU.
    arch: String,
    sm_count: u32,
    info: DeviceInfo,
    modules: HashMap<&'static str, Arc<CudaModule>>,
    bufs: Slots<DevStore>,
}

// SAFETY: the device is used by one thread at a time (it is moved into a rank's worker
// thread); the context and stream handles are thread-safe in cudarc.
unsafe impl Send for CudaDevice {}

fn bad(what: impl Into<String>) -> EngineError {
    EngineError::BadOp {
        op: "serve (cuda)".into(),
        reason: what.into(),
    }
}

fn grid1(n: usize, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u64).div_ceil(block as u64).max(1) as u32, 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The grid of the split-KV attention decode (`mla_decode_*`).
fn attn_grid(splits: usize, rows: usize, heads: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            splits as u32,
            rows as u32,
            (heads as u32).div_ceil(ATTN_HEADS_PER_BLOCK as u32),
        ),
        block_dim: (32 * ATTN_HEADS_PER_BLOCK as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The grid of `mla_decode_combine`: one warp per (head, row).
fn combine_grid(rows: usize, heads: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (heads as u32, rows as u32, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl CudaDevice {
    /// Opens GPU `ordinal`: the driver library, a context and NVRTC checked, in order.
    pub fn open(ordinal: usize) -> Result<CudaDevice> {
        // SAFETY: only dlopen attempts.
        if !unsafe { sys::is_culib_present() } {
            return Err(EngineError::NoDriver(
                "the dynamic loader could not open libcuda.so / libcuda.so.1 (is an NVIDIA driver installed?)".into(),
            ));
        }
        let dev_err = |msg: String| EngineError::Device { ordinal, msg };
        let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| dev_err("the CUDA driver library is incomplete (missing symbol)".into()))?
            .map_err(|e| dev_err(format!("cannot create a context: {e}")))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| dev_err(e.to_string()))?;
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        let l2 = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .unwrap_or(50 << 20);
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .unwrap_or(132);
        let mut ver: std::ffi::c_int = 0;
        // SAFETY: writes one int.
        let driver = match unsafe { sys::cuDriverGetVersion(&mut ver) } {
            sys::CUresult::CUDA_SUCCESS => {
                format!("CUDA driver {}.{}", ver / 1000, (ver % 1000) / 10)
            }
            _ => "CUDA driver (version unknown)".into(),
        };
        // One stream only: cudarc's per-buffer event tracking (for multi-stream safety)
        // would add event records to every timed launch.
        // SAFETY: every launch and copy of this backend goes to the default stream.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        let b = CudaDevice {
            arch: arch_for(major, minor),
            sm_count: sms.max(1) as u32,
            info: DeviceInfo {
                device: format!("cuda:{ordinal}: {name} (sm_{major}{minor})"),
                driver,
                cache_bytes: l2.max(1) as u64,
                rotation_cap_bytes: calib::MEM_CAP,
            },
            ctx,
            stream,
            modules: HashMap::new(),
            bufs: Slots::new(),
        };
        // Fail at open, not at the first kernel, when NVRTC (and a kernel cache) is missing.
        kernels::nvrtc::compile_cached(&kernels::COPY, &b.arch)?;
        Ok(b)
    }

    /// The function `entry` of kernel `k` (compiled and loaded on first use).
    fn func(&mut self, k: &'static KernelSource, entry: &str) -> Result<CudaFunction> {
        let module = match self.modules.get(k.id) {
            Some(m) => m.clone(),
            None => {
                let cubin = kernels::nvrtc::compile_cached(k, &self.arch)?;
                let m = self
                    .ctx
                    .load_module(Ptx::from_binary(cubin))
                    .map_err(|e| kerr(k.id, format!("loading module: {e}")))?;
                self.modules.insert(k.id, m.clone());
                m
            }
        };
        module
            .load_function(entry)
            .map_err(|e| kerr(entry, format!("loading function: {e}")))
    }

    fn up<T: cudarc::driver::DeviceRepr + Copy + Default>(
        &self,
        kernel: &str,
        v: &[T],
    ) -> Result<CudaSlice<T>> {
        // Zero-length allocations are avoided: a one-element placeholder stands in.
        if v.is_empty() {
            return self
                .stream
                .clone_htod(&[T::default()])
                .map_err(|e| kerr(kernel, e));
        }
        self.stream.clone_htod(v).map_err(|e| kerr(kernel, e))
    }

    fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        kernel: &str,
        n: usize,
    ) -> Result<CudaSlice<T>> {
        self.stream
            .alloc_zeros(n.max(1))
            .map_err(|e| kerr(kernel, e))
    }

    fn down<T: cudarc::driver::DeviceRepr>(
        &self,
        kernel: &str,
        s: &CudaSlice<T>,
        n: usize,
    ) -> Result<Vec<T>> {
        let mut v = self.stream.clone_dtoh(s).map_err(|e| kerr(kernel, e))?;
        v.truncate(n);
        Ok(v)
    }

    /// Times `launch(i)` with CUDA events around each call, after warm-up.
    fn time_gpu(
        &self,
        cfg: &TimingConfig,
        kernel: &str,
        mut launch: impl FnMut(usize) -> Result<()>,
    ) -> Result<Stats> {
        let mut i = 0;
        for _ in 0..cfg.warmup {
            launch(i)?;
            i += 1;
        }
        self.stream.synchronize().map_err(|e| kerr(kernel, e))?;
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let wall = Instant::now();
        let mut samples = Vec::with_capacity(cfg.reps);
        for _ in 0..cfg.reps.max(1) {
            let start = self
                .stream
                .record_event(flags)
                .map_err(|e| kerr(kernel, e))?;
            launch(i)?;
            i += 1;
            let end = self
                .stream
                .record_event(flags)
                .map_err(|e| kerr(kernel, e))?;
            end.synchronize().map_err(|e| kerr(kernel, e))?;
            let ms = start.elapsed_ms(&end).map_err(|e| kerr(kernel, e))?;
            samples.push(ms as f64 / 1e3);
            if samples.len() >= cfg.min_reps && wall.elapsed().as_secs_f64() > cfg.max_seconds {
                break;
            }
        }
        Ok(Stats::from_samples(&samples))
    }

    /// Splits of the split-KV attention decode over `rows` rows of `heads` heads reading
    /// at most `positions` positions: at least MIN_SPLIT_POSITIONS positions per split,
    /// and about four blocks per SM over the whole grid.
    fn attn_splits(&self, rows: usize, heads: usize, positions: usize) -> usize {
        let blocks_per_split = rows * heads.div_ceil(ATTN_HEADS_PER_BLOCK);
        let max_splits = (4 * self.sm_count as usize)
            .div_ceil(blocks_per_split.max(1))
            .max(1);
        positions.div_ceil(MIN_SPLIT_POSITIONS).clamp(1, max_splits)
    }

    fn ptr(&self, b: Buf) -> Result<u64> {
        let s = &self.stream;
        match self.bufs.get(b.id()) {
            Some(DevStore::F32(v)) if b.dt == Dt::F32 => Ok(dptr(s, v)),
            Some(DevStore::I32(v)) if b.dt == Dt::I32 => Ok(dptr(s, v)),
            Some(DevStore::U8(v)) if b.dt == Dt::U8 => Ok(dptr(s, v)),
            _ => Err(bad(format!(
                "buffer {} is not allocated with type {:?}",
                b.id(),
                b.dt
            ))),
        }
    }

    fn f(&mut self, entry: &str) -> Result<CudaFunction> {
        let k = if entry.starts_with("mla_") {
            &kernels::MLA_DECODE
        } else if entry.starts_with("dsa_") || entry == "block_topk" {
            &kernels::INDEXER
        } else {
            &kernels::LIVE
        };
        self.func(k, entry)
    }

    /// Launches `entry` with `args` pushed in order (device pointers as u64, scalars).
    fn launch(&mut self, entry: &str, cfg: LaunchConfig, args: &[Arg]) -> Result<()> {
        let f = self.f(entry)?;
        let mut lb = self.stream.launch_builder(&f);
        for a in args {
            match a {
                Arg::P(p) => lb.arg(p),
                Arg::I(i) => lb.arg(i),
                Arg::L(l) => lb.arg(l),
                Arg::F(x) => lb.arg(x),
            };
        }
        // SAFETY: every caller passes the argument list of `entry` in `live.cu`,
        // `mla_decode.cu` or `indexer.cu`, with buffers validated against the shapes.
        unsafe { lb.launch(cfg) }.map_err(|e| kerr(entry, e))?;
        Ok(())
    }
}

/// A kernel argument.
enum Arg {
    /// Device pointer.
    P(u64),
    I(i32),
    L(i64),
    F(f32),
}

fn check(b: Buf, offset: usize, len: usize) -> Result<()> {
    if offset + len > b.len {
        return Err(bad(format!(
            "access {offset}..{} outside buffer of {}",
            offset + len,
            b.len
        )));
    }
    Ok(())
}

macro_rules! rw {
    ($write:ident, $read:ident, $t:ty, $variant:ident) => {
        fn $write(&mut self, b: Buf, offset: usize, data: &[$t]) -> Result<()> {
            check(b, offset, data.len())?;
            let s = self.stream.clone();
            match self.bufs.get_mut(b.id()) {
                Some(DevStore::$variant(v)) => s
                    .memcpy_htod(data, &mut v.slice_mut(offset..offset + data.len()))
                    .map_err(|e| kerr("memcpy_htod", e)),
                _ => Err(bad(format!("buffer {} has another type", b.id()))),
            }
        }
        fn $read(&mut self, b: Buf, offset: usize, len: usize) -> Result<Vec<$t>> {
            check(b, offset, len)?;
            let s = self.stream.clone();
            match self.bufs.get(b.id()) {
                Some(DevStore::$variant(v)) => {
                    let mut out = vec![<$t>::default(); len];
                    s.memcpy_dtoh(&v.slice(offset..offset + len), &mut out)
                        .map_err(|e| kerr("memcpy_dtoh", e))?;
                    s.synchronize().map_err(|e| kerr("memcpy_dtoh", e))?;
                    Ok(out)
                }
                _ => Err(bad(format!("buffer {} has another type", b.id()))),
            }
        }
    };
}

impl Backend for CudaDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn alloc(&mut self, dt: Dt, len: usize) -> Result<Buf> {
        let s = &self.stream;
        let n = len.max(1);
        let store = match dt {
            Dt::F32 => DevStore::F32(s.alloc_zeros(n).map_err(|e| kerr("alloc", e))?),
            Dt::I32 => DevStore::I32(s.alloc_zeros(n).map_err(|e| kerr("alloc", e))?),
            Dt::U8 => DevStore::U8(s.alloc_zeros(n).map_err(|e| kerr("alloc", e))?),
        };
        Ok(Buf::new(self.bufs.insert(store), len, dt))
    }

    fn free(&mut self, b: Buf) {
        self.bufs.remove(b.id());
    }

    rw!(write_f32, read_f32, f32, F32);
    rw!(write_i32, read_i32, i32, I32);
    rw!(write_u8, read_u8, u8, U8);

    fn sync(&mut self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| kerr("synchronize", e))
    }

    fn linear(&mut self, w: &DevWeights, groups: &[Group], x: Buf, y: Buf) -> Result<()> {
        let rows = validate_rows("linear", x.len, w.k_in)?;
        if y.len != rows * w.n_out || !w.k_in.is_multiple_of(256) {
            return Err(bad(
                "linear: y must be [rows][n_out] and k_in a multiple of 256",
            ));
        }
        if groups
            .iter()
            .any(|g| g.expert as usize >= w.experts || (g.start + g.rows) as usize > rows)
        {
            return Err(bad("linear: a group lies outside the rows or the experts"));
        }
        let live: Vec<Group> = groups.iter().copied().filter(|g| g.rows > 0).collect();
        if live.is_empty() {
            return Ok(());
        }
        let gbuf = self.upload_i32(&Group::flatten(&live))?;
        let entry = match w.dtype {
            WeightDtype::Bf16 => "linear_bf16",
            WeightDtype::Fp8 => "linear_fp8",
            WeightDtype::Int4 => "linear_int4",
        };
        let cfg = LaunchConfig {
            grid_dim: ((w.n_out as u32).div_ceil(8), live.len() as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let args = [
            Arg::P(self.ptr(w.weights)?),
            Arg::P(self.ptr(w.scales)?),
            Arg::P(self.ptr(gbuf)?),
            Arg::P(self.ptr(x)?),
            Arg::P(self.ptr(y)?),
            Arg::I(w.n_out as i32),
            Arg::I(w.k_in as i32),
        ];
        let r = self.launch(entry, cfg, &args);
        self.free(gbuf);
        r
    }

    fn rmsnorm(
        &mut self,
        x: Buf,
        delta: Option<Buf>,
        weight: Buf,
        out: Buf,
        eps: f32,
    ) -> Result<()> {
        let rows = validate_rows("rmsnorm", x.len, weight.len)?;
        if out.len != x.len || delta.is_some_and(|d| d.len != x.len) {
            return Err(bad("rmsnorm: x, delta and out must match"));
        }
        let d = match delta {
            Some(b) => self.ptr(b)?,
            None => 0,
        };
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let args = [
            Arg::P(self.ptr(x)?),
            Arg::P(d),
            Arg::P(self.ptr(weight)?),
            Arg::P(self.ptr(out)?),
            Arg::I(weight.len as i32),
            Arg::F(eps),
        ];
        self.launch("rmsnorm", cfg, &args)
    }

    fn swiglu(&mut self, gu: Buf, out: Buf, ffn: usize) -> Result<()> {
        let rows = validate_rows("swiglu", gu.len, 2 * ffn)?;
        if out.len != rows * ffn {
            return Err(bad("swiglu: out must be [rows][ffn]"));
        }
        let args = [
            Arg::P(self.ptr(gu)?),
            Arg::P(self.ptr(out)?),
            Arg::I(ffn as i32),
            Arg::L(out.len as i64),
        ];
        self.launch("swiglu", grid1(out.len, 256), &args)
    }

    fn gate_topk(&mut self, logits: Buf, experts: usize, k: usize, ids: Buf, w: Buf) -> Result<()> {
        let rows = validate_rows("gate_topk", logits.len, experts)?;
        if k == 0
            || k > 32
            || k > experts
            || experts > 256
            || ids.len != rows * k
            || w.len != rows * k
        {
            return Err(bad(
                "gate_topk: 1 <= k <= min(32, experts), experts <= 256, ids/w [rows][k]",
            ));
        }
        let args = [
            Arg::P(self.ptr(logits)?),
            Arg::P(self.ptr(ids)?),
            Arg::P(self.ptr(w)?),
            Arg::I(rows as i32),
            Arg::I(experts as i32),
            Arg::I(k as i32),
        ];
        self.launch("gate_topk", grid1(rows * 32, 256), &args)
    }

    fn gather_rows(&mut self, src: Buf, dim: usize, idx: Buf, out: Buf) -> Result<()> {
        let n_src = validate_rows("gather_rows", src.len, dim)?;
        if out.len != idx.len * dim {
            return Err(bad("gather_rows: out must be [indices][dim]"));
        }
        // Indices are device data; check them on the host (they are small).
        let ix = self.read_i32(idx, 0, idx.len)?;
        if ix.iter().any(|&i| i < 0 || i as usize >= n_src) {
            return Err(bad(format!(
                "gather_rows: an index lies outside 0..{n_src}"
            )));
        }
        let args = [
            Arg::P(self.ptr(src)?),
            Arg::P(self.ptr(idx)?),
            Arg::P(self.ptr(out)?),
            Arg::I(dim as i32),
            Arg::L(out.len as i64),
        ];
        self.launch("gather_rows", grid1(out.len, 256), &args)
    }

    fn moe_combine(
        &mut self,
        y: Buf,
        dim: usize,
        slots: Buf,
        w: Buf,
        k: usize,
        out: Buf,
    ) -> Result<()> {
        validate_rows("moe_combine", y.len, dim)?;
        let rows = validate_rows("moe_combine", out.len, dim)?;
        if slots.len != rows * k || w.len != rows * k {
            return Err(bad("moe_combine: slots and weights must be [rows][k]"));
        }
        let cfg = LaunchConfig {
            grid_dim: (rows.max(1) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let args = [
            Arg::P(self.ptr(y)?),
            Arg::P(self.ptr(slots)?),
            Arg::P(self.ptr(w)?),
            Arg::P(self.ptr(out)?),
            Arg::I(dim as i32),
            Arg::I(k as i32),
        ];
        self.launch("moe_combine", cfg, &args)
    }

    fn add(&mut self, x: Buf, y: Buf) -> Result<()> {
        if x.len != y.len {
            return Err(bad("add: x and y differ in length"));
        }
        let args = [
            Arg::P(self.ptr(x)?),
            Arg::P(self.ptr(y)?),
            Arg::L(x.len as i64),
        ];
        self.launch("add", grid1(x.len, 256), &args)
    }

    fn kv_write(
        &mut self,
        src: Buf,
        dim: usize,
        slots: Buf,
        cache: Buf,
        scales: Buf,
    ) -> Result<()> {
        let rows = validate_rows("kv_write", src.len, dim)?;
        if slots.len != rows || cache.len != scales.len * dim {
            return Err(bad(
                "kv_write: slots [rows], cache [slots][dim], scales [slots]",
            ));
        }
        let args = [
            Arg::P(self.ptr(src)?),
            Arg::P(self.ptr(slots)?),
            Arg::P(self.ptr(cache)?),
            Arg::P(self.ptr(scales)?),
            Arg::I(rows as i32),
            Arg::I(dim as i32),
        ];
        self.launch("kv_write", grid1(rows * 32, 256), &args)
    }

    fn attention(&mut self, a: &AttnCall) -> Result<()> {
        if a.dim == 0
            || !a.dim.is_multiple_of(32)
            || a.dim > 512
            || a.q.len != a.rows * a.heads * a.dim
        {
            return Err(bad(
                "attention: dim a multiple of 32 up to 512, q [rows][heads][dim]",
            ));
        }
        let (entry, topk, window, indices) = match a.sel {
            AttnSel::Dense => ("mla_decode_dense", 0, 0, 0),
            AttnSel::Sparse { topk, indices } => ("mla_decode_sparse", topk, 0, self.ptr(indices)?),
            AttnSel::Window(w) => ("mla_decode_window", 0, w, 0),
        };
        // Split-KV as the backend does: at least MIN_SPLIT_POSITIONS per split.
        let longest = match a.sel {
            AttnSel::Sparse { topk, .. } => topk,
            _ => {
                let lens = self.read_i32(a.seq_lens, 0, a.rows)?;
                lens.iter().map(|&l| l.max(0) as usize).max().unwrap_or(1)
            }
        };
        let splits = self.attn_splits(a.rows, a.heads, longest);
        let ws = a.rows * splits * a.heads;
        let ws_m = self.alloc(Dt::F32, ws)?;
        let ws_l = self.alloc(Dt::F32, ws)?;
        let ws_acc = self.alloc(Dt::F32, ws * a.dim)?;
        let cfg = attn_grid(splits, a.rows, a.heads);
        let args = [
            Arg::P(self.ptr(a.q)?),
            Arg::P(self.ptr(a.kv)?),
            Arg::P(self.ptr(a.kv_scale)?),
            Arg::P(self.ptr(a.block_table)?),
            Arg::P(self.ptr(a.seq_lens)?),
            Arg::P(indices),
            Arg::P(self.ptr(ws_m)?),
            Arg::P(self.ptr(ws_l)?),
            Arg::P(self.ptr(ws_acc)?),
            Arg::I(a.heads as i32),
            Arg::I(a.dim as i32),
            Arg::I(a.page_size as i32),
            Arg::I(a.max_pages as i32),
            Arg::I(topk as i32),
            Arg::I(window as i32),
            Arg::F(a.softmax_scale),
            Arg::I(splits as i32),
        ];
        let r = self.launch(entry, cfg, &args).and_then(|_| {
            let cfg = combine_grid(a.rows, a.heads);
            let args = [
                Arg::P(self.ptr(ws_m)?),
                Arg::P(self.ptr(ws_l)?),
                Arg::P(self.ptr(ws_acc)?),
                Arg::P(self.ptr(a.out)?),
                Arg::I(a.heads as i32),
                Arg::I(a.dim as i32),
                Arg::I(splits as i32),
            ];
            self.launch("mla_decode_combine", cfg, &args)
        });
        for b in [ws_m, ws_l, ws_acc] {
            self.free(b);
        }
        r
    }

    fn indexer(&mut self, a: &IndexerCall) -> Result<()> {
        if a.dim == 0 || !a.dim.is_multiple_of(32) || a.dim > 512 || a.heads * a.dim * 4 > 48 * 1024
        {
            return Err(bad(
                "indexer: dim a multiple of 32 up to 512, heads * dim * 4 <= 48 KiB",
            ));
        }
        if a.scores.len != a.rows * a.n_pos || a.out.len != a.rows * a.topk {
            return Err(bad("indexer: scores [rows][n_pos], out [rows][topk]"));
        }
        let cfg = LaunchConfig {
            grid_dim: ((a.n_pos as u32).div_ceil(8).max(1), a.rows as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: (a.heads * a.dim * 4) as u32,
        };
        let args = [
            Arg::P(self.ptr(a.q)?),
            Arg::P(self.ptr(a.w)?),
            Arg::P(self.ptr(a.keys)?),
            Arg::P(self.ptr(a.key_scale)?),
            Arg::P(self.ptr(a.block_table)?),
            Arg::P(self.ptr(a.seq_lens)?),
            Arg::P(self.ptr(a.scores)?),
            Arg::I(a.heads as i32),
            Arg::I(a.dim as i32),
            Arg::I(a.n_pos as i32),
            Arg::I(a.page_size as i32),
            Arg::I(a.max_pages as i32),
        ];
        self.launch("dsa_indexer_scores_paged", cfg, &args)?;
        let cfg = LaunchConfig {
            grid_dim: (a.rows as u32, 1, 1),
            block_dim: (1024, 1, 1),
            shared_mem_bytes: 0,
        };
        let args = [
            Arg::P(self.ptr(a.scores)?),
            Arg::P(self.ptr(a.out)?),
            Arg::I(a.n_pos as i32),
            Arg::I(a.topk as i32),
        ];
        self.launch("block_topk", cfg, &args)
    }

    fn argmax(&mut self, logits: Buf, n: usize, out: Buf) -> Result<()> {
        let rows = validate_rows("argmax", logits.len, n)?;
        if out.len != rows {
            return Err(bad("argmax: one output per row"));
        }
        let cfg = LaunchConfig {
            grid_dim: (rows.max(1) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let args = [
            Arg::P(self.ptr(logits)?),
            Arg::P(self.ptr(out)?),
            Arg::I(n as i32),
        ];
        self.launch("argmax", cfg, &args)
    }

    fn run_moe(&mut self, p: &MoeProblem) -> Result<Vec<f32>> {
        let f = self.func(&kernels::MOE_EXPERT, p.dtype.moe_entry())?;
        let mut d = self.upload_moe(p)?;
        self.launch_moe(&f, &mut d)?;
        self.down("moe_expert", &d.y, d.out_len)
    }

    fn run_attention(&mut self, p: &AttnProblem) -> Result<Vec<f32>> {
        let f = self.func(&kernels::MLA_DECODE, p.mode.entry())?;
        let c = self.func(&kernels::MLA_DECODE, "mla_decode_combine")?;
        let mut d = self.upload_attn(p)?;
        self.launch_attn(&f, &c, &mut d)?;
        self.down("mla_decode", &d.out, d.out_len)
    }

    fn run_indexer(&mut self, p: &IndexerProblem) -> Result<IndexerOutput> {
        let fs = self.func(&kernels::INDEXER, "dsa_indexer_scores")?;
        let ft = self.func(&kernels::INDEXER, "block_topk")?;
        let mut d = self.upload_indexer(p)?;
        self.launch_indexer(&fs, &ft, &mut d)?;
        Ok(IndexerOutput {
            scores: self.down("dsa_indexer_scores", &d.scores, p.batch * p.n_pos)?,
            topk: self.down("block_topk", &d.idx, p.batch * p.topk)?,
        })
    }

    fn run_gather(&mut self, p: &GatherProblem) -> Result<Vec<u8>> {
        p.validate()?;
        let f = self.func(&kernels::GATHER, "engram_gather")?;
        let k = "engram_gather";
        let table = self.up(k, &p.table)?;
        let idx = self.up(k, &p.indices)?;
        let mut out = self.zeros::<u8>(k, p.indices.len() * p.row_bytes)?;
        let t = dptr(&self.stream, &table);
        self.launch_gather(
            &f,
            t,
            &idx,
            &mut out,
            p.indices.len() as i64,
            p.row_bytes as i32,
        )?;
        self.down(k, &out, p.indices.len() * p.row_bytes)
    }

    fn run_copy(&mut self, src: &[u8]) -> Result<Vec<u8>> {
        if !src.len().is_multiple_of(16) {
            return Err(EngineError::BadOp {
                op: "copy".into(),
                reason: "length must be a multiple of 16".into(),
            });
        }
        let f = self.func(&kernels::COPY, "device_copy")?;
        let s = self.up("device_copy", src)?;
        let mut d = self.zeros::<u8>("device_copy", src.len())?;
        self.launch_copy(&f, &s, &mut d, src.len())?;
        self.down("device_copy", &d, src.len())
    }

    fn scratch(&self) -> Box<dyn Backend> {
        Box::new(CudaDevice {
            ctx: self.ctx.clone(),
            stream: self.stream.clone(),
            arch: self.arch.clone(),
            sm_count: self.sm_count,
            info: self.info.clone(),
            modules: self.modules.clone(),
            bufs: Slots::new(),
        })
    }

    fn time_kernel(
        &mut self,
        op: &OpSpec,
        cfg: &TimingConfig,
        copies: usize,
    ) -> Result<(Stats, String)> {
        self.time_on_gpu(op, cfg, copies)
    }
}

/// Device pointer of a tracked slice, as a plain address.
pub(crate) fn dptr<T>(stream: &Arc<CudaStream>, s: &CudaSlice<T>) -> u64 {
    use cudarc::driver::DevicePtr;
    let (p, _sync) = s.device_ptr(stream);
    p
}
