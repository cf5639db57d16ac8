//! The CUDA context of one GPU: opening it (driver, context, NVRTC), the compiled
//! kernels' modules, device buffers, uploads and downloads, launches with their
//! argument checks, and timing with CUDA events.

use super::super::{Buf, DeviceInfo, Dt, Slots};
use super::dptr;
use crate::stats::{Stats, TimingConfig};
use crate::{EngineError, Result};
use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig,
    PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use kernels::KernelSource;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Heads per attention block (`HPB` in mla_decode.cu).
pub(super) const ATTN_HEADS_PER_BLOCK: usize = 16;
/// Fewest positions per split of the split-KV attention decode.
pub(super) const MIN_SPLIT_POSITIONS: usize = 128;

/// NVRTC target for a compute capability: a CUBIN for exactly this GPU (`sm_XY`).
pub fn arch_for(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

/// A driver error, named by the kernel (or call) it came from.
pub(super) fn kerr(kernel: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Kernel {
        kernel: kernel.to_string(),
        msg: e.to_string(),
    }
}

pub(super) enum DevStore {
    F32(CudaSlice<f32>),
    I32(CudaSlice<i32>),
    U8(CudaSlice<u8>),
}

/// Buffers, ops and timing on one GPU.
pub struct CudaDevice {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    /// NVRTC target, `sm_XY` of this GPU.
    pub(super) arch: String,
    pub(super) sm_count: u32,
    pub(super) info: DeviceInfo,
    pub(super) modules: HashMap<&'static str, Arc<CudaModule>>,
    pub(super) bufs: Slots<DevStore>,
    /// Timeline marks recorded since the last take (`Backend::mark`), and spent events
    /// kept for reuse.
    pub(super) marks: Vec<CudaEvent>,
    pub(super) spare_marks: Vec<CudaEvent>,
    /// cuBLASLt's weight copies of the last library GEMM shape (`lt.rs`).
    pub(super) lt_weights: Option<super::lt::LtWeights>,
}

// SAFETY: the device is used by one thread at a time (it is moved into a rank's worker
// thread); the context and stream handles are thread-safe in cudarc.
unsafe impl Send for CudaDevice {}

pub(super) fn bad(what: impl Into<String>) -> EngineError {
    EngineError::BadOp {
        op: "serve (cuda)".into(),
        reason: what.into(),
    }
}

pub(super) fn grid1(n: usize, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u64).div_ceil(block as u64).max(1) as u32, 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The grid of the split-KV attention decode (`mla_decode_*`).
pub(super) fn attn_grid(splits: usize, rows: usize, heads: usize) -> LaunchConfig {
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
pub(super) fn combine_grid(rows: usize, heads: usize) -> LaunchConfig {
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
                rotation_cap_bytes: super::calib::MEM_CAP,
            },
            ctx,
            stream,
            modules: HashMap::new(),
            bufs: Slots::new(),
            marks: Vec::new(),
            spare_marks: Vec::new(),
            lt_weights: None,
        };
        // Fail at open, not at the first kernel, when NVRTC (and a kernel cache) is missing.
        kernels::nvrtc::compile_cached(&kernels::COPY, &b.arch)?;
        Ok(b)
    }

    /// The function `entry` of kernel `k` (compiled and loaded on first use).
    pub(super) fn func(&mut self, k: &'static KernelSource, entry: &str) -> Result<CudaFunction> {
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

    pub(super) fn up<T: cudarc::driver::DeviceRepr + Copy + Default>(
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

    pub(super) fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        kernel: &str,
        n: usize,
    ) -> Result<CudaSlice<T>> {
        self.stream
            .alloc_zeros(n.max(1))
            .map_err(|e| kerr(kernel, e))
    }

    pub(super) fn down<T: cudarc::driver::DeviceRepr>(
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
    pub(super) fn time_gpu(
        &self,
        cfg: &TimingConfig,
        kernel: &str,
        launch: impl FnMut(usize) -> Result<()>,
    ) -> Result<Stats> {
        time_events(&self.stream, cfg, kernel, 1, launch)
    }

    /// Splits of the split-KV attention decode over `rows` rows of `heads` heads reading
    /// at most `positions` positions: at least MIN_SPLIT_POSITIONS positions per split,
    /// and about four blocks per SM over the whole grid.
    pub(super) fn attn_splits(&self, rows: usize, heads: usize, positions: usize) -> usize {
        let blocks_per_split = rows * heads.div_ceil(ATTN_HEADS_PER_BLOCK);
        let max_splits = (4 * self.sm_count as usize)
            .div_ceil(blocks_per_split.max(1))
            .max(1);
        positions.div_ceil(MIN_SPLIT_POSITIONS).clamp(1, max_splits)
    }

    pub(super) fn ptr(&self, b: Buf) -> Result<u64> {
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

    pub(super) fn f(&mut self, entry: &str) -> Result<CudaFunction> {
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
    pub(super) fn launch(&mut self, entry: &str, cfg: LaunchConfig, args: &[Arg]) -> Result<()> {
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

/// Times `launch(i)` on `stream` with CUDA events around each call, after
/// `cfg.warmup` calls: a sample is a call's time over the `per_call` operations it
/// runs (a CUDA graph of several GEMMs, say), until `cfg.reps` samples or, past
/// `cfg.min_reps`, `cfg.max_seconds`.
pub(super) fn time_events(
    stream: &Arc<CudaStream>,
    cfg: &TimingConfig,
    kernel: &str,
    per_call: usize,
    mut launch: impl FnMut(usize) -> Result<()>,
) -> Result<Stats> {
    let mut i = 0;
    for _ in 0..cfg.warmup {
        launch(i)?;
        i += 1;
    }
    stream.synchronize().map_err(|e| kerr(kernel, e))?;
    let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let wall = Instant::now();
    let mut samples = Vec::with_capacity(cfg.reps);
    for _ in 0..cfg.reps.max(1) {
        let start = stream.record_event(flags).map_err(|e| kerr(kernel, e))?;
        launch(i)?;
        i += 1;
        let end = stream.record_event(flags).map_err(|e| kerr(kernel, e))?;
        end.synchronize().map_err(|e| kerr(kernel, e))?;
        let ms = start.elapsed_ms(&end).map_err(|e| kerr(kernel, e))?;
        samples.push(ms as f64 / 1e3 / per_call.max(1) as f64);
        if samples.len() >= cfg.min_reps && wall.elapsed().as_secs_f64() > cfg.max_seconds {
            break;
        }
    }
    Ok(Stats::from_samples(&samples))
}

/// A kernel argument.
pub(super) enum Arg {
    /// Device pointer.
    P(u64),
    I(i32),
    L(i64),
    F(f32),
}

pub(super) fn check(b: Buf, offset: usize, len: usize) -> Result<()> {
    if offset + len > b.len {
        return Err(bad(format!(
            "access {offset}..{} outside buffer of {}",
            offset + len,
            b.len
        )));
    }
    Ok(())
}
