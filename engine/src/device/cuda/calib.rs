//! The CUDA device's calibration kernels: their inputs uploaded as typed device slices,
//! their launches, and their timing with CUDA events.
//!
//! Multi-GPU all-to-all (NCCL) is not implemented: `OpSpec::AllToAll` with more than one
//! peer is rejected by validation. TODO (needs 2+ GPUs): one communicator per device via
//! `cudarc::nccl::Comm::from_devices`, then per peer `send`/`recv` of `bytes` inside a
//! group (`group_start`/`group_end`), timed with events on each device's stream.

use super::{attn_grid, combine_grid, dptr, kerr, CudaDevice};
use crate::device::not_a_kernel;
use crate::op::{AttnShape, CopyShape, GatherShape, GemmShape, IndexerShape, MoeShape};
use crate::stats::{Stats, TimingConfig};
use crate::{EngineError, GatherPlacement, OpSpec, Result};
use cudarc::driver::{sys, CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use kernels::{AttnMode, AttnProblem, IndexerProblem, MoeProblem};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Device memory the rotation copies of one op may use.
pub(super) const MEM_CAP: u64 = 8 << 30;
const GATHER_INDEX_SETS: usize = 4;

pub(super) struct DevMoe {
    pub(super) w: CudaSlice<u8>,
    pub(super) s: CudaSlice<f32>,
    pub(super) ids: CudaSlice<i32>,
    pub(super) x: CudaSlice<f32>,
    pub(super) y: CudaSlice<f32>,
    pub(super) n_out: i32,
    pub(super) k_in: i32,
    pub(super) tokens: i32,
    pub(super) touched: u32,
    pub(super) out_len: usize,
}

pub(super) struct DevAttn {
    pub(super) q: CudaSlice<f32>,
    pub(super) kv: CudaSlice<u8>,
    pub(super) kv_scale: CudaSlice<f32>,
    pub(super) block_table: CudaSlice<i32>,
    pub(super) seq_lens: CudaSlice<i32>,
    pub(super) indices: CudaSlice<i32>,
    pub(super) ws_m: CudaSlice<f32>,
    pub(super) ws_l: CudaSlice<f32>,
    pub(super) ws_acc: CudaSlice<f32>,
    pub(super) out: CudaSlice<f32>,
    pub(super) splits: i32,
    pub(super) batch: u32,
    pub(super) heads: i32,
    pub(super) dim: i32,
    pub(super) page_size: i32,
    pub(super) max_pages: i32,
    pub(super) topk: i32,
    pub(super) window: i32,
    pub(super) scale: f32,
    pub(super) out_len: usize,
}

pub(super) struct DevIndexer {
    pub(super) q: CudaSlice<f32>,
    pub(super) w: CudaSlice<f32>,
    pub(super) keys: CudaSlice<u8>,
    pub(super) key_scale: CudaSlice<f32>,
    pub(super) scores: CudaSlice<f32>,
    pub(super) idx: CudaSlice<i32>,
    pub(super) batch: u32,
    pub(super) heads: i32,
    pub(super) dim: i32,
    pub(super) n_pos: i32,
    pub(super) topk: i32,
}

impl CudaDevice {
    pub(super) fn upload_moe(&self, p: &MoeProblem) -> Result<DevMoe> {
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

    pub(super) fn launch_moe(&self, f: &CudaFunction, d: &mut DevMoe) -> Result<()> {
        let cfg = LaunchConfig {
            // moe_expert.cu: MOE_WARPS (4) warps a block, MOE_ROWS (4) rows a warp.
            grid_dim: ((d.n_out as u32).div_ceil(16), d.touched, 1),
            block_dim: (128, 1, 1),
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

    pub(super) fn upload_attn(&self, p: &AttnProblem) -> Result<DevAttn> {
        p.validate()?;
        let k = "mla_decode";
        let (topk, window, indices): (usize, usize, &[i32]) = match &p.mode {
            AttnMode::Dense => (0, 0, &[]),
            AttnMode::Sparse { topk, indices } => (*topk, 0, indices),
            AttnMode::Window { window } => (0, *window, &[]),
        };
        let longest = (0..p.batch)
            .map(|b| p.positions(b).len())
            .max()
            .unwrap_or(0)
            .max(1);
        let n_index = match &p.mode {
            AttnMode::Sparse { topk, .. } => *topk,
            _ => longest,
        };
        let splits = self.attn_splits(p.batch, p.heads, n_index);
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

    pub(super) fn launch_attn(
        &self,
        f: &CudaFunction,
        combine: &CudaFunction,
        d: &mut DevAttn,
    ) -> Result<()> {
        let cfg = attn_grid(d.splits as usize, d.batch as usize, d.heads as usize);
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
        let cfg = combine_grid(d.batch as usize, d.heads as usize);
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

    pub(super) fn upload_indexer(&self, p: &IndexerProblem) -> Result<DevIndexer> {
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

    pub(super) fn launch_indexer(
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
    pub(super) fn launch_gather(
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

    pub(super) fn launch_copy(
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

/// The launch of `stream_read` over `n16` 16-byte words in `blocks` blocks.
fn stream_read_grid(blocks: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl CudaDevice {
    /// Times the calibration kernel `op` over `copies` input copies: its statistics and
    /// a note (a gather's placement, cuBLAS for the GEMM).
    pub(super) fn time_on_gpu(
        &mut self,
        op: &OpSpec,
        cfg: &TimingConfig,
        copies: usize,
    ) -> Result<(Stats, String)> {
        let plain = |st: Stats| (st, String::new());
        Ok(match *op {
            OpSpec::MoeDecode(s) | OpSpec::GroupedGemm(s) => plain(self.time_moe(&s, cfg, copies)?),
            OpSpec::Attention(s) => plain(self.time_attention(&s, cfg, copies)?),
            OpSpec::Indexer(s) => plain(self.time_indexer(&s, cfg, copies)?),
            OpSpec::Gather(s) => {
                let st = self.time_gather(&s, cfg)?;
                (st, format!("placement={}", s.placement.name()))
            }
            OpSpec::AllToAll(s) => plain(self.time_copy(&s, cfg, copies)?),
            OpSpec::StreamRead(s) => plain(self.time_stream_read(s.bytes, cfg, copies)?),
            OpSpec::Gemm(g) => (self.time_gemm(&g, cfg)?, "cublas f32".into()),
            ref live => return Err(not_a_kernel(live)),
        })
    }

    fn time_moe(&mut self, s: &MoeShape, cfg: &TimingConfig, copies: usize) -> Result<Stats> {
        let f = self.func(&kernels::MOE_EXPERT, s.dtype.moe_entry())?;
        let mut devs = Vec::with_capacity(copies);
        for c in 0..copies {
            devs.push(self.upload_moe(&s.problem(c as u64))?);
        }
        self.time_gpu(cfg, "moe_expert", |i| {
            self.launch_moe(&f, &mut devs[i % copies])
        })
    }

    fn time_attention(
        &mut self,
        s: &AttnShape,
        cfg: &TimingConfig,
        copies: usize,
    ) -> Result<Stats> {
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
        })
    }

    fn time_indexer(
        &mut self,
        s: &IndexerShape,
        cfg: &TimingConfig,
        copies: usize,
    ) -> Result<Stats> {
        let fs = self.func(&kernels::INDEXER, "dsa_indexer_scores")?;
        let ft = self.func(&kernels::INDEXER, "block_topk")?;
        let mut devs = Vec::with_capacity(copies);
        for c in 0..copies {
            devs.push(self.upload_indexer(&s.problem(c as u64))?);
        }
        self.time_gpu(cfg, "indexer", |i| {
            self.launch_indexer(&fs, &ft, &mut devs[i % copies])
        })
    }

    /// A gather from a table in device memory or in pinned host memory mapped into the
    /// device's address space.
    fn time_gather(&mut self, s: &GatherShape, cfg: &TimingConfig) -> Result<Stats> {
        let f = self.func(&kernels::GATHER, "engram_gather")?;
        let k = "engram_gather";
        let n_rows = s.table_rows();
        let len = n_rows * s.row_bytes;
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        let sets: Vec<CudaSlice<u64>> = (0..GATHER_INDEX_SETS)
            .map(|_| self.up(k, &kernels::random_indices(&mut rng, n_rows, s.rows)))
            .collect::<Result<_>>()?;
        let mut out = self.zeros::<u8>(k, s.rows * s.row_bytes)?;
        let (n, rb) = (s.rows as i64, s.row_bytes as i32);
        let mut time_from = |dev: &Self, table: u64| {
            dev.time_gpu(cfg, k, |i| {
                dev.launch_gather(&f, table, &sets[i % GATHER_INDEX_SETS], &mut out, n, rb)
            })
        };
        match s.placement {
            GatherPlacement::Device => {
                let table = self.zeros::<u8>(k, len)?;
                time_from(self, dptr(&self.stream, &table))
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
                    sys::cuMemHostGetDevicePointer_v2(&mut t, hp as *mut std::ffi::c_void, 0)
                };
                if r != sys::CUresult::CUDA_SUCCESS {
                    return Err(kerr(k, format!("cuMemHostGetDevicePointer: {r:?}")));
                }
                let st = time_from(self, t)?;
                drop(host);
                Ok(st)
            }
            other => Err(EngineError::Unsupported(format!(
                "gather placement {} is host-only; the CUDA backend has device and mapped",
                other.name()
            ))),
        }
    }

    fn time_copy(&mut self, s: &CopyShape, cfg: &TimingConfig, copies: usize) -> Result<Stats> {
        let f = self.func(&kernels::COPY, "device_copy")?;
        let n = s.bytes as usize;
        let srcs: Vec<CudaSlice<u8>> = (0..copies)
            .map(|_| self.zeros::<u8>("device_copy", n))
            .collect::<Result<_>>()?;
        let mut dsts: Vec<CudaSlice<u8>> = (0..copies)
            .map(|_| self.zeros::<u8>("device_copy", n))
            .collect::<Result<_>>()?;
        self.time_gpu(cfg, "device_copy", |i| {
            self.launch_copy(&f, &srcs[i % copies], &mut dsts[i % copies], n)
        })
    }

    fn time_stream_read(&mut self, bytes: u64, cfg: &TimingConfig, copies: usize) -> Result<Stats> {
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
            let mut b = self.stream.launch_builder(&f);
            b.arg(&bufs[i % copies]).arg(&mut sink).arg(&n16);
            // SAFETY: matches stream_read; sink holds one word per thread.
            unsafe { b.launch(stream_read_grid(blocks)) }.map_err(|e| kerr("stream_read", e))?;
            Ok(())
        })
    }

    fn time_gemm(&mut self, g: &GemmShape, cfg: &TimingConfig) -> Result<Stats> {
        use cudarc::cublas::{sys::cublasOperation_t, CudaBlas, Gemm, GemmConfig};
        let GemmShape { m, n, k } = *g;
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
        self.time_gpu(cfg, kn, |_| {
            // SAFETY: buffers sized m*k, k*n, m*n as the config states.
            unsafe { blas.gemm(gc, &db, &da, &mut dc) }.map_err(|e| kerr(kn, e))
        })
    }
}
