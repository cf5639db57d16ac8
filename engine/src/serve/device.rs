//! The device a served model runs on: buffers that live on the device (host memory for
//! the CPU, device memory for CUDA) addressed by handles, and the model's ops over them.
//! The executor (`serve::exec`) is written once against [`ServeDevice`]; the CPU
//! implementation runs the kernels' CPU twins, the CUDA one (`serve::cuda`) launches the
//! same kernels compiled with NVRTC.

use crate::{EngineError, Result};
use kernels::cpu::{self, live as k};
use kernels::live::{Group, IndexerPagedArgs, WeightsRef};
use kernels::{AttnArgs, AttnModeRef, WeightDtype};

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

/// Buffers and the model's ops on one device.
pub trait ServeDevice: Send {
    /// What runs the ops (CPU model and threads, or GPU).
    fn describe(&self) -> String;
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

/// The CPU device: buffers are host vectors (freed ones are kept for reuse, so a step's
/// scratch allocations do not page-fault again), ops are the kernels' CPU twins on the
/// calling thread's rayon pool.
pub struct CpuDevice {
    slots: Slots<Store>,
    /// Freed storage kept for reuse, by type.
    spare: Vec<Store>,
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

impl ServeDevice for CpuDevice {
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
        let mut xs = self.take(x)?;
        let r = (|| {
            let Store::F32(xv) = &mut xs else {
                return Err(bad("rmsnorm: x is not f32"));
            };
            self.with_out(out, |d, o| {
                let delta = delta.map(|b| d.f32s(b)).transpose()?;
                Ok(k::rmsnorm(
                    &mut xv[..x.len],
                    delta,
                    d.f32s(weight)?,
                    o,
                    eps,
                )?)
            })
        })();
        self.put(x, xs);
        r
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
        let mut ws = self.take(w)?;
        let r = (|| {
            let Store::F32(wv) = &mut ws else {
                return Err(bad("gate_topk: weights are not f32"));
            };
            self.with_out::<i32, _>(ids, |d, idv| {
                Ok(k::gate_topk(
                    d.f32s(logits)?,
                    experts,
                    kk,
                    idv,
                    &mut wv[..w.len],
                )?)
            })
        })();
        self.put(w, ws);
        r
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
        let mut cs = self.take(cache)?;
        let r = (|| {
            let Store::U8(cv) = &mut cs else {
                return Err(bad("kv_write: cache is not u8"));
            };
            self.with_out(scales, |d, sv| {
                Ok(k::kv_write(
                    d.f32s(src)?,
                    dim,
                    d.i32s(slots)?,
                    &mut cv[..cache.len],
                    sv,
                )?)
            })
        })();
        self.put(cache, cs);
        r
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
    }
}
