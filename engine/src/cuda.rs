//! CUDA backend: the kernels compiled with NVRTC to a CUBIN for the GPU at hand (once
//! per kernel and architecture per process, and in `TWIN_KERNEL_CACHE` when set; see
//! `kernels::nvrtc`), launched through cudarc, timed with CUDA events.
//!
//! Opening checks, in order: the driver library loads (`libcuda.so`), a context can be
//! created on the ordinal, NVRTC loads. Every driver error names the kernel (or the
//! cuBLAS call) it came from.
//!
//! Multi-GPU all-to-all (NCCL) is not implemented: `OpSpec::AllToAll` with more than one
//! peer is rejected by validation. TODO (needs 2+ GPUs): one communicator per device via
//! `cudarc::nccl::Comm::from_devices`, then per peer `send`/`recv` of `bytes` inside a
//! group (`group_start`/`group_end`), timed with events on each device's stream.

use crate::op::{CopyShape, GatherShape, GemmShape, StreamShape};
use crate::{
    Backend, DeviceInfo, EngineError, GatherPlacement, Measurement, OpSpec, Result, Stats,
    TimingConfig,
};
use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use kernels::{
    AttnMode, AttnProblem, GatherProblem, IndexerOutput, IndexerProblem, KernelSource, MoeProblem,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Device memory the rotation copies of one op may use.
const MEM_CAP: u64 = 8 << 30;
const GATHER_INDEX_SETS: usize = 4;
/// Heads per attention block (`HPB` in mla_decode.cu).
pub(crate) const ATTN_HEADS_PER_BLOCK: usize = 16;
/// Fewest positions per split of the split-KV attention decode.
pub(crate) const MIN_SPLIT_POSITIONS: usize = 128;

/// NVRTC target for a compute capability: a CUBIN for exactly this GPU (`sm_XY`).
pub fn arch_for(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

pub(crate) fn kerr(kernel: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Kernel {
        kernel: kernel.to_string(),
        msg: e.to_string(),
    }
}

pub struct CudaBackend {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    /// NVRTC target, `sm_XY` of this GPU.
    pub(crate) arch: String,
    pub(crate) sm_count: u32,
    info: DeviceInfo,
    modules: HashMap<&'static str, Arc<CudaModule>>,
}

impl CudaBackend {
    pub fn new(ordinal: usize) -> Result<CudaBackend> {
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
        let b = CudaBackend {
            arch: arch_for(major, minor),
            sm_count: sms.max(1) as u32,
            info: DeviceInfo {
                device: format!("cuda:{ordinal}: {name} (sm_{major}{minor})"),
                driver,
                cache_bytes: l2.max(1) as u64,
            },
            ctx,
            stream,
            modules: HashMap::new(),
        };
        // Fail at open, not at the first kernel, when NVRTC (and a kernel cache) is missing.
        kernels::nvrtc::compile_cached(&kernels::COPY, &b.arch)?;
        Ok(b)
    }

    /// Another handle on the same context, stream and loaded modules.
    pub(crate) fn share(&self) -> CudaBackend {
        CudaBackend {
            ctx: self.ctx.clone(),
            stream: self.stream.clone(),
            arch: self.arch.clone(),
            sm_count: self.sm_count,
            info: self.info.clone(),
            modules: self.modules.clone(),
        }
    }

    pub(crate) fn func(&mut self, k: &'static KernelSource, entry: &str) -> Result<CudaFunction> {
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
}

struct DevMoe {
    w: CudaSlice<u8>,
    s: CudaSlice<f32>,
    ids: CudaSlice<i32>,
    x: CudaSlice<f32>,
    y: CudaSlice<f32>,
    n_out: i32,
    k_in: i32,
    tokens: i32,
    touched: u32,
    out_len: usize,
}

struct DevAttn {
    q: CudaSlice<f32>,
    kv: CudaSlice<u8>,
    kv_scale: CudaSlice<f32>,
    block_table: CudaSlice<i32>,
    seq_lens: CudaSlice<i32>,
    indices: CudaSlice<i32>,
    ws_m: CudaSlice<f32>,
    ws_l: CudaSlice<f32>,
    ws_acc: CudaSlice<f32>,
    out: CudaSlice<f32>,
    splits: i32,
    batch: u32,
    heads: i32,
    dim: i32,
    page_size: i32,
    max_pages: i32,
    topk: i32,
    window: i32,
    scale: f32,
    out_len: usize,
}

struct DevIndexer {
    q: CudaSlice<f32>,
    w: CudaSlice<f32>,
    keys: CudaSlice<u8>,
    key_scale: CudaSlice<f32>,
    scores: CudaSlice<f32>,
    idx: CudaSlice<i32>,
    batch: u32,
    heads: i32,
    dim: i32,
    n_pos: i32,
    topk: i32,
}

impl CudaBackend {
    fn upload_moe(&self, p: &MoeProblem) -> Result<DevMoe> {
        p.validate()?;
        let k = "moe_expert";
        Ok(DevMoe {
            w: self.up(k, &p.weights)?,
            s: self.up(k, &p.scales)?,
            ids: self.up(k, &p.expert_ids)?,
            x: self.up(k, &p.x)?,
            y: self.zeros(k, p.output_len())?,
            n_out: p.n_out as i32,
            k_in: p.k_in as i32,
            tokens: p.tokens as i32,
            touched: p.touched() as u32,
            out_len: p.output_len(),
        })
    }

    fn launch_moe(&self, f: &CudaFunction, d: &mut DevMoe) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: ((d.n_out as u32).div_ceil(8), d.touched, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(&d.w)
            .arg(&d.s)
            .arg(&d.ids)
            .arg(&d.x)
            .arg(&mut d.y)
            .arg(&d.n_out)
            .arg(&d.k_in)
            .arg(&d.tokens);
        // SAFETY: argument list matches `moe_gemv_*` in moe_expert.cu; sizes validated.
        unsafe { b.launch(cfg) }.map_err(|e| kerr("moe_expert", e))?;
        Ok(())
    }

    fn upload_attn(&self, p: &AttnProblem) -> Result<DevAttn> {
        p.validate()?;
        let k = "mla_decode";
        let (topk, window, indices): (usize, usize, &[i32]) = match &p.mode {
            AttnMode::Dense => (0, 0, &[]),
            AttnMode::Sparse { topk, indices } => (*topk, 0, indices),
            AttnMode::Window { window } => (0, *window, &[]),
        };
        // Split-KV: at least MIN_SPLIT_POSITIONS positions per split, and about four
        // blocks per SM over the whole grid.
        let longest = (0..p.batch)
            .map(|b| p.positions(b).len())
            .max()
            .unwrap_or(0)
            .max(1);
        let n_index = match &p.mode {
            AttnMode::Sparse { topk, .. } => *topk,
            _ => longest,
        };
        let blocks_per_split = p.batch * p.heads.div_ceil(ATTN_HEADS_PER_BLOCK);
        let max_splits = (4 * self.sm_count as usize)
            .div_ceil(blocks_per_split)
            .max(1);
        let splits = n_index.div_ceil(MIN_SPLIT_POSITIONS).clamp(1, max_splits);
        let ws = p.batch * splits * p.heads;
        Ok(DevAttn {
            q: self.up(k, &p.q)?,
            kv: self.up(k, &p.kv)?,
            kv_scale: self.up(k, &p.kv_scale)?,
            block_table: self.up(k, &p.block_table)?,
            seq_lens: self.up(k, &p.seq_lens)?,
            indices: self.up(k, indices)?,
            ws_m: self.zeros(k, ws)?,
            ws_l: self.zeros(k, ws)?,
            ws_acc: self.zeros(k, ws * p.dim)?,
            out: self.zeros(k, p.output_len())?,
            splits: splits as i32,
            batch: p.batch as u32,
            heads: p.heads as i32,
            dim: p.dim as i32,
            page_size: p.page_size as i32,
            max_pages: p.max_pages as i32,
            topk: topk as i32,
            window: window as i32,
            scale: p.softmax_scale,
            out_len: p.output_len(),
        })
    }

    fn launch_attn(&self, f: &CudaFunction, combine: &CudaFunction, d: &mut DevAttn) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (
                d.splits as u32,
                d.batch,
                (d.heads as u32).div_ceil(ATTN_HEADS_PER_BLOCK as u32),
            ),
            block_dim: (32 * ATTN_HEADS_PER_BLOCK as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(&d.q)
            .arg(&d.kv)
            .arg(&d.kv_scale)
            .arg(&d.block_table)
            .arg(&d.seq_lens)
            .arg(&d.indices)
            .arg(&mut d.ws_m)
            .arg(&mut d.ws_l)
            .arg(&mut d.ws_acc)
            .arg(&d.heads)
            .arg(&d.dim)
            .arg(&d.page_size)
            .arg(&d.max_pages)
            .arg(&d.topk)
            .arg(&d.window)
            .arg(&d.scale)
            .arg(&d.splits);
        // SAFETY: argument list matches MLA_ARGS in mla_decode.cu; sizes validated; the
        // workspace holds batch * splits * heads entries.
        unsafe { b.launch(cfg) }.map_err(|e| kerr("mla_decode", e))?;
        let cfg = LaunchConfig {
            grid_dim: (d.heads as u32, d.batch, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(combine);
        b.arg(&d.ws_m)
            .arg(&d.ws_l)
            .arg(&d.ws_acc)
            .arg(&mut d.out)
            .arg(&d.heads)
            .arg(&d.dim)
            .arg(&d.splits);
        // SAFETY: matches mla_decode_combine.
        unsafe { b.launch(cfg) }.map_err(|e| kerr("mla_decode_combine", e))?;
        Ok(())
    }

    fn upload_indexer(&self, p: &IndexerProblem) -> Result<DevIndexer> {
        p.validate()?;
        let k = "indexer";
        Ok(DevIndexer {
            q: self.up(k, &p.q)?,
            w: self.up(k, &p.w)?,
            keys: self.up(k, &p.keys)?,
            key_scale: self.up(k, &p.key_scale)?,
            scores: self.zeros(k, p.batch * p.n_pos)?,
            idx: self.zeros(k, p.batch * p.topk)?,
            batch: p.batch as u32,
            heads: p.heads as i32,
            dim: p.dim as i32,
            n_pos: p.n_pos as i32,
            topk: p.topk as i32,
        })
    }

    fn launch_indexer(
        &self,
        fs: &CudaFunction,
        ft: &CudaFunction,
        d: &mut DevIndexer,
    ) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: ((d.n_pos as u32).div_ceil(8).max(1), d.batch, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: (d.heads * d.dim * 4) as u32,
        };
        let mut b = self.stream.launch_builder(fs);
        b.arg(&d.q)
            .arg(&d.w)
            .arg(&d.keys)
            .arg(&d.key_scale)
            .arg(&mut d.scores)
            .arg(&d.heads)
            .arg(&d.dim)
            .arg(&d.n_pos);
        // SAFETY: matches dsa_indexer_scores; shared memory validated <= 48 KiB.
        unsafe { b.launch(cfg) }.map_err(|e| kerr("dsa_indexer_scores", e))?;
        let cfg = LaunchConfig {
            grid_dim: (d.batch, 1, 1),
            block_dim: (1024, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(ft);
        b.arg(&d.scores).arg(&mut d.idx).arg(&d.n_pos).arg(&d.topk);
        // SAFETY: matches block_topk.
        unsafe { b.launch(cfg) }.map_err(|e| kerr("block_topk", e))?;
        Ok(())
    }

    /// Gather from a table at device address `table` (device memory or mapped host).
    fn launch_gather(
        &self,
        f: &CudaFunction,
        table: u64,
        idx: &CudaSlice<u64>,
        out: &mut CudaSlice<u8>,
        n: i64,
        row_bytes: i32,
    ) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: ((n as u32).div_ceil(8).max(1), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(&table).arg(idx).arg(out).arg(&n).arg(&row_bytes);
        // SAFETY: matches engram_gather; indices validated against the table.
        unsafe { b.launch(cfg) }.map_err(|e| kerr("engram_gather", e))?;
        Ok(())
    }

    fn launch_copy(
        &self,
        f: &CudaFunction,
        src: &CudaSlice<u8>,
        dst: &mut CudaSlice<u8>,
        bytes: usize,
    ) -> Result<()> {
        let n16 = (bytes / 16) as i64;
        let blocks = (n16 as u64)
            .div_ceil(256)
            .clamp(1, self.sm_count as u64 * 8) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(src).arg(dst).arg(&n16);
        // SAFETY: matches device_copy; both buffers hold `bytes` (a multiple of 16).
        unsafe { b.launch(cfg) }.map_err(|e| kerr("device_copy", e))?;
        Ok(())
    }
}

/// Device pointer of a tracked slice, as a plain address.
pub(crate) fn dptr<T>(stream: &Arc<CudaStream>, s: &CudaSlice<T>) -> u64 {
    use cudarc::driver::DevicePtr;
    let (p, _sync) = s.device_ptr(stream);
    p
}

impl Backend for CudaBackend {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn moe(&mut self, p: &MoeProblem) -> Result<Vec<f32>> {
        let f = self.func(&kernels::MOE_EXPERT, p.dtype.moe_entry())?;
        let mut d = self.upload_moe(p)?;
        self.launch_moe(&f, &mut d)?;
        self.down("moe_expert", &d.y, d.out_len)
    }

    fn attention(&mut self, p: &AttnProblem) -> Result<Vec<f32>> {
        let f = self.func(&kernels::MLA_DECODE, p.mode.entry())?;
        let c = self.func(&kernels::MLA_DECODE, "mla_decode_combine")?;
        let mut d = self.upload_attn(p)?;
        self.launch_attn(&f, &c, &mut d)?;
        self.down("mla_decode", &d.out, d.out_len)
    }

    fn indexer(&mut self, p: &IndexerProblem) -> Result<IndexerOutput> {
        let fs = self.func(&kernels::INDEXER, "dsa_indexer_scores")?;
        let ft = self.func(&kernels::INDEXER, "block_topk")?;
        let mut d = self.upload_indexer(p)?;
        self.launch_indexer(&fs, &ft, &mut d)?;
        Ok(IndexerOutput {
            scores: self.down("dsa_indexer_scores", &d.scores, p.batch * p.n_pos)?,
            topk: self.down("block_topk", &d.idx, p.batch * p.topk)?,
        })
    }

    fn gather(&mut self, p: &GatherProblem) -> Result<Vec<u8>> {
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

    fn copy(&mut self, src: &[u8]) -> Result<Vec<u8>> {
        if src.len() % 16 != 0 {
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

    fn measure(&mut self, op: &OpSpec, cfg: &TimingConfig) -> Result<Measurement> {
        let copies = op.prepare(cfg, self.info.cache_bytes, MEM_CAP)?;
        let mut note = String::new();
        let stats = match *op {
            OpSpec::MoeDecode(s) | OpSpec::GroupedGemm(s) => {
                let f = self.func(&kernels::MOE_EXPERT, s.dtype.moe_entry())?;
                let mut devs = Vec::with_capacity(copies);
                for c in 0..copies {
                    devs.push(self.upload_moe(&s.problem(c as u64))?);
                }
                self.time_gpu(cfg, "moe_expert", |i| {
                    self.launch_moe(&f, &mut devs[i % copies])
                })?
            }
            OpSpec::Attention(s) => {
                let p0 = s.problem(0);
                let f = self.func(&kernels::MLA_DECODE, p0.mode.entry())?;
                let comb = self.func(&kernels::MLA_DECODE, "mla_decode_combine")?;
                let mut devs = vec![self.upload_attn(&p0)?];
                drop(p0);
                for c in 1..copies {
                    devs.push(self.upload_attn(&s.problem(c as u64))?);
                }
                self.time_gpu(cfg, "mla_decode", |i| {
                    self.launch_attn(&f, &comb, &mut devs[i % copies])
                })?
            }
            OpSpec::Indexer(s) => {
                let fs = self.func(&kernels::INDEXER, "dsa_indexer_scores")?;
                let ft = self.func(&kernels::INDEXER, "block_topk")?;
                let mut devs = Vec::with_capacity(copies);
                for c in 0..copies {
                    devs.push(self.upload_indexer(&s.problem(c as u64))?);
                }
                self.time_gpu(cfg, "indexer", |i| {
                    self.launch_indexer(&fs, &ft, &mut devs[i % copies])
                })?
            }
            OpSpec::Gather(GatherShape {
                placement,
                table_bytes,
                row_bytes,
                rows,
            }) => {
                let f = self.func(&kernels::GATHER, "engram_gather")?;
                let k = "engram_gather";
                let n_rows = GatherShape {
                    placement,
                    table_bytes,
                    row_bytes,
                    rows,
                }
                .table_rows();
                let len = n_rows * row_bytes;
                let mut rng = ChaCha8Rng::seed_from_u64(42);
                let sets: Vec<CudaSlice<u64>> = (0..GATHER_INDEX_SETS)
                    .map(|_| self.up(k, &kernels::random_indices(&mut rng, n_rows, rows)))
                    .collect::<Result<_>>()?;
                let mut out = self.zeros::<u8>(k, rows * row_bytes)?;
                let n = rows as i64;
                let rb = row_bytes as i32;
                let st = match placement {
                    GatherPlacement::Device => {
                        let table = self.zeros::<u8>(k, len)?;
                        let t = dptr(&self.stream, &table);
                        self.time_gpu(cfg, k, |i| {
                            self.launch_gather(&f, t, &sets[i % GATHER_INDEX_SETS], &mut out, n, rb)
                        })?
                    }
                    GatherPlacement::Mapped => {
                        // SAFETY: the memory is filled below before any read.
                        let mut host = unsafe {
                            self.ctx
                                .alloc_pinned_with_flags::<u8>(len, sys::CU_MEMHOSTALLOC_DEVICEMAP)
                        }
                        .map_err(|e| kerr(k, format!("pinned mapped allocation: {e}")))?;
                        let hs = host.as_mut_slice().map_err(|e| kerr(k, e))?;
                        hs.fill(0x5a);
                        let hp = host.as_mut_ptr().map_err(|e| kerr(k, e))?;
                        let mut t: sys::CUdeviceptr = 0;
                        // SAFETY: `hp` is a live DEVICEMAP allocation.
                        let r = unsafe {
                            sys::cuMemHostGetDevicePointer_v2(
                                &mut t,
                                hp as *mut std::ffi::c_void,
                                0,
                            )
                        };
                        if r != sys::CUresult::CUDA_SUCCESS {
                            return Err(kerr(k, format!("cuMemHostGetDevicePointer: {r:?}")));
                        }
                        let st = self.time_gpu(cfg, k, |i| {
                            self.launch_gather(&f, t, &sets[i % GATHER_INDEX_SETS], &mut out, n, rb)
                        })?;
                        drop(host);
                        st
                    }
                    other => {
                        return Err(EngineError::Unsupported(format!(
                        "gather placement {} is host-only; the CUDA backend has device and mapped",
                        other.name()
                    )))
                    }
                };
                note = format!("placement={}", placement.name());
                st
            }
            OpSpec::AllToAll(CopyShape { bytes, .. }) => {
                let f = self.func(&kernels::COPY, "device_copy")?;
                let n = bytes as usize;
                let srcs: Vec<CudaSlice<u8>> = (0..copies)
                    .map(|_| self.zeros::<u8>("device_copy", n))
                    .collect::<Result<_>>()?;
                let mut dsts: Vec<CudaSlice<u8>> = (0..copies)
                    .map(|_| self.zeros::<u8>("device_copy", n))
                    .collect::<Result<_>>()?;
                self.time_gpu(cfg, "device_copy", |i| {
                    self.launch_copy(&f, &srcs[i % copies], &mut dsts[i % copies], n)
                })?
            }
            OpSpec::StreamRead(StreamShape { bytes }) => {
                let f = self.func(&kernels::COPY, "stream_read")?;
                let n = bytes as usize;
                let bufs: Vec<CudaSlice<u8>> = (0..copies)
                    .map(|_| self.zeros::<u8>("stream_read", n))
                    .collect::<Result<_>>()?;
                let n16 = (n / 16) as i64;
                let blocks = (n16 as u64)
                    .div_ceil(256)
                    .clamp(1, self.sm_count as u64 * 8) as u32;
                let mut sink = self.zeros::<u32>("stream_read", blocks as usize * 256)?;
                self.time_gpu(cfg, "stream_read", |i| {
                    let cfgl = LaunchConfig {
                        grid_dim: (blocks, 1, 1),
                        block_dim: (256, 1, 1),
                        shared_mem_bytes: 0,
                    };
                    let mut b = self.stream.launch_builder(&f);
                    b.arg(&bufs[i % copies]).arg(&mut sink).arg(&n16);
                    // SAFETY: matches stream_read; sink holds one word per thread.
                    unsafe { b.launch(cfgl) }.map_err(|e| kerr("stream_read", e))?;
                    Ok(())
                })?
            }
            OpSpec::Gemm(g) => {
                use cudarc::cublas::{sys::cublasOperation_t, CudaBlas, Gemm, GemmConfig};
                let GemmShape { m, n, k } = g;
                let kn = "cublas_sgemm";
                let blas = CudaBlas::new(self.stream.clone()).map_err(|e| kerr(kn, e))?;
                let (a, bm) = g.inputs();
                let da = self.up(kn, &a)?;
                let db = self.up(kn, &bm)?;
                let mut dc = self.zeros::<f32>(kn, m * n)?;
                // Row-major C = A B is column-major C^T = B^T A^T.
                let gc = GemmConfig {
                    transa: cublasOperation_t::CUBLAS_OP_N,
                    transb: cublasOperation_t::CUBLAS_OP_N,
                    m: n as i32,
                    n: m as i32,
                    k: k as i32,
                    alpha: 1.0f32,
                    lda: n as i32,
                    ldb: k as i32,
                    beta: 0.0f32,
                    ldc: n as i32,
                };
                note = "cublas f32".into();
                self.time_gpu(cfg, kn, |_| {
                    // SAFETY: buffers sized m*k, k*n, m*n as the config states.
                    unsafe { blas.gemm(gc, &db, &da, &mut dc) }.map_err(|e| kerr(kn, e))
                })?
            }
            ref live => {
                let mut dev = crate::serve::cuda::CudaDevice::from_backend(self)?;
                crate::op::live::measure_on(&mut dev, live, cfg, copies)?
            }
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
