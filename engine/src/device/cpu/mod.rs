//! The CPU device: buffers are host vectors, the live model's ops and the calibration
//! kernels are the kernels' CPU twins on the calling thread's rayon pool, timed on the
//! host clock (`calib`).

mod calib;

pub use calib::last_level_cache_bytes;

use super::{AttnCall, AttnSel, Backend, Buf, DevWeights, DeviceInfo, Dt, IndexerCall, Slots};
use crate::op::OpSpec;
use crate::stats::{Stats, TimingConfig};
use crate::{EngineError, Result};
use kernels::cpu::{self, live as k};
use kernels::live::{Group, IndexerPagedArgs, WeightsRef};
use kernels::MoeProblem;
use kernels::{AttnArgs, AttnModeRef, AttnProblem, GatherProblem, IndexerOutput, IndexerProblem};
use std::sync::OnceLock;

enum Store {
    F32(Vec<f32>),
    I32(Vec<i32>),
    U8(Vec<u8>),
}

impl Store {
    fn dt(&self) -> Dt {
        match self {
            Store::F32(_) => Dt::F32,
            Store::I32(_) => Dt::I32,
            Store::U8(_) => Dt::U8,
        }
    }
    fn capacity(&self) -> usize {
        match self {
            Store::F32(v) => v.capacity(),
            Store::I32(v) => v.capacity(),
            Store::U8(v) => v.capacity(),
        }
    }
}

/// The CPU device: buffers are host vectors (freed ones are kept for reuse, so a step's
/// scratch allocations do not page-fault again), ops are the kernels' CPU twins on the
/// calling thread's rayon pool.
pub struct CpuDevice {
    slots: Slots<Store>,
    /// Freed storage kept for reuse, by type.
    spare: Vec<Store>,
    /// Read from /proc and /sys on first use.
    info: OnceLock<DeviceInfo>,
}

impl Default for CpuDevice {
    fn default() -> Self {
        Self::new()
    }
}

fn bad(what: impl Into<String>) -> EngineError {
    EngineError::BadOp {
        op: "serve".into(),
        reason: what.into(),
    }
}

impl CpuDevice {
    pub fn new() -> CpuDevice {
        CpuDevice {
            slots: Slots::new(),
            spare: Vec::new(),
            info: OnceLock::new(),
        }
    }

    fn take(&mut self, b: Buf) -> Result<Store> {
        self.slots
            .take(b.id())
            .ok_or_else(|| bad(format!("buffer {} is not allocated", b.id)))
    }

    fn put(&mut self, b: Buf, s: Store) {
        self.slots.put(b.id(), s);
    }

    /// Buffer `b` as a slice of `T` (an error if it is freed or of another type).
    fn view<T: Elem>(&self, b: Buf) -> Result<&[T]> {
        self.slots
            .get(b.id())
            .and_then(T::of)
            .map(|v| &v[..b.len])
            .ok_or_else(|| {
                bad(format!(
                    "buffer {} is not an allocated {} buffer",
                    b.id,
                    T::NAME
                ))
            })
    }
    fn f32s(&self, b: Buf) -> Result<&[f32]> {
        self.view(b)
    }
    fn i32s(&self, b: Buf) -> Result<&[i32]> {
        self.view(b)
    }
    fn u8s(&self, b: Buf) -> Result<&[u8]> {
        self.view(b)
    }

    /// Runs `f` with buffer `out` mutable (as `T`) and the rest of the device readable.
    fn with_out<T: Elem, R>(
        &mut self,
        out: Buf,
        f: impl FnOnce(&Self, &mut [T]) -> Result<R>,
    ) -> Result<R> {
        let mut s = self.take(out)?;
        let r = match T::of_mut(&mut s) {
            Some(v) => f(self, &mut v[..out.len]),
            None => Err(bad(format!("buffer {} is not {}", out.id, T::NAME))),
        };
        self.put(out, s);
        r
    }

    /// Runs `f` with buffers `a` and `b` mutable (as `A` and `B`) and the rest of the
    /// device readable; `not_a` is the error when `a` is not an `A` buffer.
    fn with_two_outs<A: Elem, B: Elem, R>(
        &mut self,
        a: Buf,
        b: Buf,
        not_a: &str,
        f: impl FnOnce(&Self, &mut [A], &mut [B]) -> Result<R>,
    ) -> Result<R> {
        let mut s = self.take(a)?;
        let r = match A::of_mut(&mut s) {
            Some(av) => self.with_out(b, |d, bv| f(d, &mut av[..a.len], bv)),
            None => Err(bad(not_a)),
        };
        self.put(a, s);
        r
    }

    fn weights<'a>(&'a self, w: &DevWeights) -> Result<WeightsRef<'a>> {
        Ok(WeightsRef {
            dtype: w.dtype,
            experts: w.experts,
            n_out: w.n_out,
            k_in: w.k_in,
            weights: self.u8s(w.weights)?,
            scales: self.f32s(w.scales)?,
        })
    }
}

/// An element type of CPU buffers.
trait Elem: Copy {
    const NAME: &'static str;
    fn of(s: &Store) -> Option<&Vec<Self>>;
    fn of_mut(s: &mut Store) -> Option<&mut Vec<Self>>;
}

macro_rules! elem {
    ($t:ty, $variant:ident, $name:literal) => {
        impl Elem for $t {
            const NAME: &'static str = $name;
            fn of(s: &Store) -> Option<&Vec<$t>> {
                match s {
                    Store::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn of_mut(s: &mut Store) -> Option<&mut Vec<$t>> {
                match s {
                    Store::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}
elem!(f32, F32, "f32");
elem!(i32, I32, "i32");
elem!(u8, U8, "u8");

fn check_range(b: Buf, offset: usize, len: usize) -> Result<()> {
    if offset + len > b.len {
        return Err(bad(format!(
            "access {offset}..{} outside buffer {} of {}",
            offset + len,
            b.id,
            b.len
        )));
    }
    Ok(())
}

macro_rules! rw {
    ($write:ident, $read:ident, $t:ty) => {
        fn $write(&mut self, b: Buf, offset: usize, data: &[$t]) -> Result<()> {
            check_range(b, offset, data.len())?;
            self.with_out::<$t, _>(b, |_, v| {
                v[offset..offset + data.len()].copy_from_slice(data);
                Ok(())
            })
        }
        fn $read(&mut self, b: Buf, offset: usize, len: usize) -> Result<Vec<$t>> {
            check_range(b, offset, len)?;
            Ok(self.view::<$t>(b)?[offset..offset + len].to_vec())
        }
    };
}

impl Backend for CpuDevice {
    fn info(&self) -> &DeviceInfo {
        self.info.get_or_init(calib::host_info)
    }

    fn describe(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }

    fn alloc(&mut self, dt: Dt, len: usize) -> Result<Buf> {
        // Reuse the smallest spare of this type that is large enough.
        let pick = self
            .spare
            .iter()
            .enumerate()
            .filter(|(_, s)| s.dt() == dt && s.capacity() >= len)
            .min_by_key(|(_, s)| s.capacity())
            .map(|(i, _)| i);
        let mut store = match pick {
            Some(i) => self.spare.swap_remove(i),
            None => match dt {
                Dt::F32 => Store::F32(Vec::new()),
                Dt::I32 => Store::I32(Vec::new()),
                Dt::U8 => Store::U8(Vec::new()),
            },
        };
        // Contents are unspecified: keep old values, zero-fill only growth.
        match &mut store {
            Store::F32(v) => v.resize(len.max(v.len()), 0.0),
            Store::I32(v) => v.resize(len.max(v.len()), 0),
            Store::U8(v) => v.resize(len.max(v.len()), 0),
        }
        Ok(Buf::new(self.slots.insert(store), len, dt))
    }

    fn free(&mut self, b: Buf) {
        if let Some(s) = self.slots.remove(b.id()) {
            // Keep a bounded number of spares; large ones first out.
            self.spare.push(s);
            if self.spare.len() > 64 {
                let i = (0..self.spare.len())
                    .max_by_key(|&i| self.spare[i].capacity())
                    .unwrap_or(0);
                self.spare.swap_remove(i);
            }
        }
    }

    rw!(write_f32, read_f32, f32);
    rw!(write_i32, read_i32, i32);
    rw!(write_u8, read_u8, u8);

    fn sync(&mut self) -> Result<()> {
        Ok(())
    }

    fn linear(&mut self, w: &DevWeights, groups: &[Group], x: Buf, y: Buf) -> Result<()> {
        self.with_out(y, |d, y| {
            Ok(k::linear(&d.weights(w)?, groups, d.f32s(x)?, y)?)
        })
    }

    fn rmsnorm(
        &mut self,
        x: Buf,
        delta: Option<Buf>,
        weight: Buf,
        out: Buf,
        eps: f32,
    ) -> Result<()> {
        self.with_two_outs(x, out, "rmsnorm: x is not f32", |d, xv, o| {
            let delta = delta.map(|b| d.f32s(b)).transpose()?;
            Ok(k::rmsnorm(xv, delta, d.f32s(weight)?, o, eps)?)
        })
    }

    fn swiglu(&mut self, gu: Buf, out: Buf, ffn: usize) -> Result<()> {
        self.with_out(out, |d, o| Ok(k::swiglu(d.f32s(gu)?, o, ffn)?))
    }

    fn gate_topk(
        &mut self,
        logits: Buf,
        experts: usize,
        kk: usize,
        ids: Buf,
        w: Buf,
    ) -> Result<()> {
        self.with_two_outs::<f32, i32, _>(w, ids, "gate_topk: weights are not f32", |d, wv, idv| {
            Ok(k::gate_topk(d.f32s(logits)?, experts, kk, idv, wv)?)
        })
    }

    fn gather_rows(&mut self, src: Buf, dim: usize, idx: Buf, out: Buf) -> Result<()> {
        self.with_out(out, |d, o| {
            Ok(k::gather_rows(d.f32s(src)?, dim, d.i32s(idx)?, o)?)
        })
    }

    fn moe_combine(
        &mut self,
        y: Buf,
        dim: usize,
        slots: Buf,
        w: Buf,
        kk: usize,
        out: Buf,
    ) -> Result<()> {
        self.with_out(out, |d, o| {
            Ok(k::moe_combine(
                d.f32s(y)?,
                dim,
                d.i32s(slots)?,
                d.f32s(w)?,
                kk,
                o,
            )?)
        })
    }

    fn add(&mut self, x: Buf, y: Buf) -> Result<()> {
        self.with_out(x, |d, xv| Ok(k::add(xv, d.f32s(y)?)?))
    }

    fn kv_write(
        &mut self,
        src: Buf,
        dim: usize,
        slots: Buf,
        cache: Buf,
        scales: Buf,
    ) -> Result<()> {
        self.with_two_outs::<u8, f32, _>(cache, scales, "kv_write: cache is not u8", |d, cv, sv| {
            Ok(k::kv_write(d.f32s(src)?, dim, d.i32s(slots)?, cv, sv)?)
        })
    }

    fn attention(&mut self, a: &AttnCall) -> Result<()> {
        self.with_out(a.out, |d, o| {
            let mode = match a.sel {
                AttnSel::Dense => AttnModeRef::Dense,
                AttnSel::Window(w) => AttnModeRef::Window { window: w },
                AttnSel::Sparse { topk, indices } => AttnModeRef::Sparse {
                    topk,
                    indices: d.i32s(indices)?,
                },
            };
            let args = AttnArgs {
                batch: a.rows,
                heads: a.heads,
                dim: a.dim,
                page_size: a.page_size,
                max_pages: a.max_pages,
                kv: d.u8s(a.kv)?,
                kv_scale: d.f32s(a.kv_scale)?,
                block_table: d.i32s(a.block_table)?,
                seq_lens: d.i32s(a.seq_lens)?,
                q: d.f32s(a.q)?,
                softmax_scale: a.softmax_scale,
                mode,
            };
            Ok(cpu::attention_into(&args, o)?)
        })
    }

    fn indexer(&mut self, a: &IndexerCall) -> Result<()> {
        self.with_out(a.scores, |d, sc| {
            let args = IndexerPagedArgs {
                rows: a.rows,
                heads: a.heads,
                dim: a.dim,
                page_size: a.page_size,
                max_pages: a.max_pages,
                n_pos: a.n_pos,
                q: d.f32s(a.q)?,
                w: d.f32s(a.w)?,
                keys: d.u8s(a.keys)?,
                key_scale: d.f32s(a.key_scale)?,
                block_table: d.i32s(a.block_table)?,
                seq_lens: d.i32s(a.seq_lens)?,
            };
            Ok(k::indexer_paged_scores(&args, sc)?)
        })?;
        let sel = cpu::topk_prefix(
            self.f32s(a.scores)?,
            a.n_pos,
            self.i32s(a.seq_lens)?,
            a.topk,
        );
        self.write_i32(a.out, 0, &sel)
    }

    fn argmax(&mut self, logits: Buf, n: usize, out: Buf) -> Result<()> {
        self.with_out::<i32, _>(out, |d, o| Ok(k::argmax(d.f32s(logits)?, n, o)?))
    }

    fn run_moe(&mut self, p: &MoeProblem) -> Result<Vec<f32>> {
        Ok(cpu::moe(p)?)
    }

    fn run_attention(&mut self, p: &AttnProblem) -> Result<Vec<f32>> {
        Ok(cpu::attention(p)?)
    }

    fn run_indexer(&mut self, p: &IndexerProblem) -> Result<IndexerOutput> {
        Ok(cpu::indexer(p)?)
    }

    fn run_gather(&mut self, p: &GatherProblem) -> Result<Vec<u8>> {
        Ok(cpu::gather(p)?)
    }

    fn run_fp8_quant(&mut self, x: &[u16]) -> Result<(Vec<u8>, f32)> {
        Ok(kernels::cpu::fp8_quant(x)?)
    }

    fn run_copy(&mut self, src: &[u8]) -> Result<Vec<u8>> {
        let mut dst = vec![0u8; src.len()];
        cpu::copy(src, &mut dst)?;
        Ok(dst)
    }

    fn scratch(&self) -> Box<dyn Backend> {
        Box::new(CpuDevice::new())
    }

    fn time_kernel(
        &mut self,
        op: &OpSpec,
        cfg: &TimingConfig,
        copies: usize,
    ) -> Result<(Stats, String)> {
        calib::time_on_host(op, cfg, copies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_typed_bounded_and_reused() {
        let mut d = CpuDevice::new();
        let a = d.upload_f32(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(d.read_f32(a, 1, 2).unwrap(), vec![2.0, 3.0]);
        assert!(d.read_f32(a, 2, 2).is_err());
        assert!(d.read_i32(a, 0, 1).is_err());
        d.free(a);
        assert!(d.read_f32(a, 0, 1).is_err(), "freed");
        let b = d.alloc(Dt::F32, 2).unwrap();
        assert_eq!(b.id(), a.id(), "id reused");
        let y = d.upload_f32(&[10.0, 20.0]).unwrap();
        d.add(b, y).unwrap_or_else(|e| panic!("{e}"));
        let x = d.upload_f32(&[1.0, 1.0]).unwrap();
        d.add(x, y).unwrap();
        assert_eq!(d.read_f32(x, 0, 2).unwrap(), vec![11.0, 21.0]);
        let mut scratch = d.scratch();
        assert!(
            scratch.read_f32(x, 0, 2).is_err(),
            "a scratch handle has no buffers"
        );
    }
}
