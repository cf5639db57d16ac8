//! The CUDA device: the kernels compiled with NVRTC to a CUBIN for the GPU at hand (once
//! per kernel and architecture per process, and in `TWIN_KERNEL_CACHE` when set; see
//! `kernels::nvrtc`), launched through cudarc on one stream; buffers in device memory;
//! calibration kernels timed with CUDA events (`calib`).
//!
//! Opening checks, in order: the driver library loads (`libcuda.so`), a context can be
//! created on the ordinal, NVRTC loads. Every driver error names the kernel (or the
//! cuBLAS call) it came from.
//!
//! Not run in CI (no GPU there). It is compiled, and its kernels are compiled to CUBINs
//! for sm_90 and sm_100 by the kernels' NVRTC test; the CPU twins they mirror are
//! checked against references. `scripts/gpu-check.sh` runs it on a GPU (last on an H200,
//! 2026-12-04: docs/measured/live-gpu-h200-2026-12-04).

mod calib;
mod context;
mod launch;
mod lt;
mod quant;

pub use context::arch_for;
pub use context::CudaDevice;
use context::*;
pub use launch::LaunchCosts;

use super::{AttnCall, AttnSel, Backend, Buf, DevWeights, DeviceInfo, Dt, IndexerCall, Slots};
use crate::op::OpSpec;
use crate::stats::{Stats, TimingConfig};
use crate::{EngineError, Result};
use cudarc::driver::{CudaSlice, CudaStream, LaunchConfig};
use kernels::live::{validate_rows, Group};
use kernels::{AttnProblem, GatherProblem, IndexerOutput, IndexerProblem, MoeProblem, WeightDtype};
use std::sync::Arc;

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

    fn asynchronous(&self) -> bool {
        true
    }

    fn mark(&mut self) -> Result<()> {
        let e = match self.spare_marks.pop() {
            Some(e) => e,
            None => self
                .ctx
                .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| kerr("mark", e))?,
        };
        e.record(&self.stream).map_err(|e| kerr("mark", e))?;
        self.marks.push(e);
        Ok(())
    }

    fn take_marks(&mut self) -> Result<Vec<f64>> {
        self.sync()?;
        let marks = std::mem::take(&mut self.marks);
        let mut out = Vec::with_capacity(marks.len());
        if let Some(first) = marks.first() {
            for m in &marks {
                // SAFETY: both events were recorded on this device's stream, which the
                // sync above has drained, and live (in `marks`) until the loop ends.
                // The raw call skips cudarc's per-pair synchronise and context bind,
                // host time a traced step would otherwise spend after every pass.
                let ms = unsafe {
                    cudarc::driver::result::event::elapsed(first.cu_event(), m.cu_event())
                }
                .map_err(|e| kerr("take_marks", e))?;
                out.push(f64::from(ms) * 1e-3);
            }
        }
        self.spare_marks.extend(marks);
        Ok(out)
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
            _ => a.longest,
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

    fn run_fp8_quant(&mut self, x: &[u16]) -> Result<(Vec<u8>, f32)> {
        if !x.len().is_multiple_of(8) {
            return Err(EngineError::BadOp {
                op: "fp8_quant".into(),
                reason: format!("{} values: a multiple of 8 is required", x.len()),
            });
        }
        let k = "fp8_quant";
        let xd = self.up(k, x)?;
        let q = self.zeros::<u8>(k, x.len())?;
        let op = self.fp8_quant(dptr(&self.stream, &xd), x.len())?;
        op.launch(&self.stream, dptr(&self.stream, &q))?;
        let codes = self.down(k, &q, x.len())?;
        let s = self.down(k, &op.scale, 1)?;
        Ok((codes, s[0]))
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
            marks: Vec::new(),
            spare_marks: Vec::new(),
            lt_weights: None,
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
