//! The executor: runs forward passes of the model (`serve::model`) over a paged KV cache
//! on a [`ServeDevice`], for one rank of a DEP group.
//!
//! A forward pass is either a prefill (rows = prompt tokens of chunks; KV written, no
//! logits) or a decode step (rows = the last token and the draft tokens of each
//! sequence; KV written, logits and argmax for every row, then the MTP head drafts the
//! next step's tokens). Which drafts a decode step accepts is decided by the caller (the
//! live scheduler's declared rule) and passed in: the executor emits the accepted drafts
//! and the target model's token after them, and drafts from the last accepted row.
//!
//! With several ranks, each runs its own requests' attention and exchanges MoE tokens
//! with the others through an [`Exchange`] (dispatch to the rank owning each expert,
//! combine back); every rank takes part in every exchange, with or without rows.
//!
//! Tracing records one [`Call`] per device op; the simulator's fitted cost model
//! (`sim::cost::fitted`) composes the same calls for a step, checked by a test of the
//! `live` crate.

use super::device::{AttnCall, AttnSel, Buf, DevWeights, Dt, IndexerCall, ServeDevice};
use super::model::*;
use crate::op::live::{attention_call, copy_call, Call};
use crate::op::{
    AddShape, ArgmaxShape, CombineShape, GateShape, GatherRowsShape, KvWriteShape, LinearShape,
    NormShape, SwigluShape,
};
use crate::{EngineError, Result};
use kernels::live::Group;
use kernels::AttnModeKind;
use std::sync::{Arc, Condvar, Mutex};

/// One sequence's rows in a forward pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seq {
    /// Input tokens of the rows, at positions `start..start + tokens.len()`.
    pub tokens: Vec<u32>,
    pub start: usize,
    /// The sequence's KV pages (block table), covering every position up to the last row.
    pub pages: Vec<u32>,
    /// Decode: drafts accepted this step (`tokens = [last, draft_1..draft_n]`).
    pub accept: Option<usize>,
}

/// What a decode step produced for one sequence.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SeqOut {
    /// Accepted drafts, then the target model's token after them.
    pub emitted: Vec<u32>,
    /// Draft tokens for the next step.
    pub drafts: Vec<u32>,
}

/// MoE token exchange between the ranks of a DEP group.
pub trait Exchange {
    fn rank(&self) -> usize;
    fn ranks(&self) -> usize;
    /// Sends `out[d]` to rank `d`; returns what each rank sent here, by source rank.
    fn all_to_all(&mut self, out: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>>;
    /// This rank failed: release the others from any exchange (they return an error).
    fn abort(&mut self) {}
}

/// The exchange of a group of one rank.
pub struct Solo;

impl Exchange for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn ranks(&self) -> usize {
        1
    }
    fn all_to_all(&mut self, out: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
        Ok(out)
    }
}

struct Boxes {
    mail: Vec<Vec<f32>>,
    arrived: usize,
    generation: u64,
    aborted: bool,
}

/// All-to-all between rank threads through shared mailboxes and a barrier that an
/// aborting rank releases.
#[derive(Clone)]
pub struct ThreadExchange {
    rank: usize,
    ranks: usize,
    shared: Arc<(Mutex<Boxes>, Condvar)>,
}

impl ThreadExchange {
    /// One endpoint per rank.
    pub fn group(ranks: usize) -> Vec<ThreadExchange> {
        let shared = Arc::new((
            Mutex::new(Boxes {
                mail: vec![Vec::new(); ranks * ranks],
                arrived: 0,
                generation: 0,
                aborted: false,
            }),
            Condvar::new(),
        ));
        (0..ranks)
            .map(|rank| ThreadExchange {
                rank,
                ranks,
                shared: shared.clone(),
            })
            .collect()
    }

    /// Waits until every rank has arrived (or one aborted), holding the lock between.
    fn wait_all<'a>(
        &self,
        mut g: std::sync::MutexGuard<'a, Boxes>,
    ) -> Result<std::sync::MutexGuard<'a, Boxes>> {
        let cv = &self.shared.1;
        let gen = g.generation;
        g.arrived += 1;
        if g.arrived == self.ranks {
            g.arrived = 0;
            g.generation += 1;
            cv.notify_all();
        } else {
            while g.generation == gen && !g.aborted {
                g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
            }
        }
        if g.aborted {
            return Err(EngineError::Unsupported(
                "another rank of the DEP group failed".into(),
            ));
        }
        Ok(g)
    }
}

impl Exchange for ThreadExchange {
    fn rank(&self) -> usize {
        self.rank
    }
    fn ranks(&self) -> usize {
        self.ranks
    }
    fn all_to_all(&mut self, out: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
        let mut g = self.shared.0.lock().unwrap_or_else(|e| e.into_inner());
        for (d, m) in out.into_iter().enumerate() {
            g.mail[self.rank * self.ranks + d] = m;
        }
        // Everyone has posted; collect; everyone has collected (mailboxes free again).
        let mut g = self.wait_all(g)?;
        let recv = (0..self.ranks)
            .map(|s| std::mem::take(&mut g.mail[s * self.ranks + self.rank]))
            .collect();
        drop(self.wait_all(g)?);
        Ok(recv)
    }
    fn abort(&mut self) {
        let (lock, cv) = &*self.shared;
        lock.lock().unwrap_or_else(|e| e.into_inner()).aborted = true;
        cv.notify_all();
    }
}

struct LayerW {
    attn_norm: Buf,
    ffn_norm: Buf,
    wq: DevWeights,
    wkv: DevWeights,
    /// Indexer projections: queries, head weights, key.
    idx: Option<(DevWeights, DevWeights, DevWeights)>,
    wo: DevWeights,
    ffn: FfnW,
}

enum FfnW {
    Moe {
        gate: DevWeights,
        w13: DevWeights,
        w2: DevWeights,
        shared: Option<(DevWeights, DevWeights)>,
    },
    Dense {
        w13: DevWeights,
        w2: DevWeights,
    },
}

struct MtpW {
    norm_h: Buf,
    norm_e: Buf,
    proj: DevWeights,
    ffn_norm: Buf,
    w13: DevWeights,
    w2: DevWeights,
    out_norm: Buf,
}

struct LayerCache {
    kv: Buf,
    kv_scale: Buf,
    keys: Option<(Buf, Buf)>,
}

/// One rank's model, KV cache and device.
pub struct Executor {
    cfg: ModelConfig,
    rank: usize,
    ranks: usize,
    dev: Box<dyn ServeDevice>,
    embed: Buf,
    layers: Vec<LayerW>,
    final_norm: Buf,
    lm_head: DevWeights,
    mtp: Option<MtpW>,
    cache: Vec<LayerCache>,
    pages: usize,
    trace: Option<Vec<Call>>,
    /// Seconds each traced call took, host work since the call before included.
    trace_s: Vec<f64>,
    /// Clock reading at the last traced call (seconds; wall or thread CPU).
    last: f64,
    /// Trace times by the thread's CPU clock (one-thread ranks) instead of the wall.
    cpu_clock: bool,
}

fn bad(what: impl Into<String>) -> EngineError {
    EngineError::BadOp {
        op: "forward".into(),
        reason: what.into(),
    }
}

/// Host-side layout of a forward pass's rows.
struct Rows {
    n: usize,
    /// Sequence length each row sees (its position + 1).
    lens: Vec<i32>,
    max_pages: usize,
    table: Vec<i32>,
    slots: Vec<i32>,
    tokens: Vec<i32>,
}

impl Executor {
    /// Builds rank `rank` of `ranks`: weights from `seed` (this rank's expert shard),
    /// a KV cache of `pages` pages.
    pub fn new(
        mut dev: Box<dyn ServeDevice>,
        cfg: ModelConfig,
        seed: u64,
        rank: usize,
        ranks: usize,
        pages: usize,
    ) -> Result<Executor> {
        let problems = cfg.problems(ranks);
        if !problems.is_empty() {
            return Err(bad(format!("model {}: {}", cfg.name, problems.join("; "))));
        }
        if rank >= ranks || pages == 0 {
            return Err(bad(
                "rank must be below ranks and the cache hold at least one page",
            ));
        }
        let d = dev.as_mut();
        let (h, lat) = (cfg.hidden, cfg.latent);
        let local = cfg.local_experts(ranks);
        let mut layers = Vec::with_capacity(cfg.layers.len());
        for (l, lc) in cfg.layers.iter().enumerate() {
            let lin = |d: &mut dyn ServeDevice, name: &str, n: usize, k: usize| {
                upload_linear(d, &cfg, seed, name, l, 0..1, n, k)
            };
            let idx = match (lc.has_indexer, cfg.indexer) {
                (true, Some(ix)) => Some((
                    lin(d, "idx_q", ix.heads * ix.dim, h)?,
                    lin(d, "idx_w", ix.heads, h)?,
                    lin(d, "idx_k", ix.dim, h)?,
                )),
                _ => None,
            };
            let ffn = match (lc.moe, cfg.moe) {
                (true, Some(m)) => {
                    let shard = rank * local..(rank + 1) * local;
                    FfnW::Moe {
                        gate: lin(d, "gate", m.experts, h)?,
                        w13: upload_linear(
                            d,
                            &cfg,
                            seed,
                            "w13",
                            l,
                            shard.clone(),
                            2 * m.expert_ffn,
                            h,
                        )?,
                        w2: upload_linear(d, &cfg, seed, "w2", l, shard, h, m.expert_ffn)?,
                        shared: if m.shared_ffn > 0 {
                            Some((
                                lin(d, "shared_w13", 2 * m.shared_ffn, h)?,
                                lin(d, "shared_w2", h, m.shared_ffn)?,
                            ))
                        } else {
                            None
                        },
                    }
                }
                _ => FfnW::Dense {
                    w13: lin(d, "w13", 2 * cfg.dense_ffn, h)?,
                    w2: lin(d, "w2", h, cfg.dense_ffn)?,
                },
            };
            layers.push(LayerW {
                attn_norm: upload_ones(d, h)?,
                ffn_norm: upload_ones(d, h)?,
                wq: lin(d, "wq", cfg.heads * lat, h)?,
                wkv: lin(d, "wkv", lat, h)?,
                idx,
                wo: lin(d, "wo", h, cfg.heads * lat)?,
                ffn,
            });
        }
        let mtp = if cfg.mtp_ffn > 0 {
            let lin = |d: &mut dyn ServeDevice, name: &str, n: usize, k: usize| {
                upload_linear(d, &cfg, seed, name, usize::MAX, 0..1, n, k)
            };
            Some(MtpW {
                norm_h: upload_ones(d, h)?,
                norm_e: upload_ones(d, h)?,
                proj: lin(d, "mtp_proj", h, h)?,
                ffn_norm: upload_ones(d, h)?,
                w13: lin(d, "mtp_w13", 2 * cfg.mtp_ffn, h)?,
                w2: lin(d, "mtp_w2", h, cfg.mtp_ffn)?,
                out_norm: upload_ones(d, h)?,
            })
        } else {
            None
        };
        let slots = pages * cfg.page_size;
        let mut cache = Vec::with_capacity(cfg.layers.len());
        for lc in &cfg.layers {
            let keys = match (lc.has_indexer, cfg.indexer) {
                (true, Some(ix)) => {
                    Some((d.alloc(Dt::U8, slots * ix.dim)?, d.alloc(Dt::F32, slots)?))
                }
                _ => None,
            };
            cache.push(LayerCache {
                kv: d.alloc(Dt::U8, slots * lat)?,
                kv_scale: d.alloc(Dt::F32, slots)?,
                keys,
            });
        }
        let embed = upload_embedding(d, &cfg, seed)?;
        let final_norm = upload_ones(d, h)?;
        let lm_head = upload_linear(d, &cfg, seed, "lm_head", 0, 0..1, cfg.vocab, h)?;
        Ok(Executor {
            cfg,
            rank,
            ranks,
            dev,
            embed,
            layers,
            final_norm,
            lm_head,
            mtp,
            cache,
            pages,
            trace: None,
            trace_s: Vec::new(),
            last: 0.0,
            cpu_clock: false,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    pub fn pages(&self) -> usize {
        self.pages
    }

    pub fn describe(&self) -> String {
        self.dev.describe()
    }

    /// Starts (or stops) recording the op calls of forward passes.
    pub fn set_trace(&mut self, on: bool) {
        self.trace = if on { Some(Vec::new()) } else { None };
    }

    /// The calls recorded since tracing started (or the last take).
    pub fn take_trace(&mut self) -> Vec<Call> {
        self.trace_s.clear();
        self.trace.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The calls recorded, each with the seconds since the call before it (or the
    /// forward pass's start): the op and the host work leading to it.
    pub fn take_timed_trace(&mut self) -> Vec<(Call, f64)> {
        let s = std::mem::take(&mut self.trace_s);
        self.take_trace().into_iter().zip(s).collect()
    }

    /// Times traced calls by the calling thread's CPU clock (`true`; for one-thread
    /// ranks: what other processes take of the core is left out) or the wall clock.
    pub fn set_trace_clock(&mut self, cpu: bool) {
        self.cpu_clock = cpu;
    }

    fn clock(&self) -> f64 {
        if self.cpu_clock {
            crate::stats::thread_cpu_s()
        } else {
            static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            T0.get_or_init(std::time::Instant::now)
                .elapsed()
                .as_secs_f64()
        }
    }

    fn rec(&mut self, c: Call) {
        if self.trace.is_some() {
            let now = self.clock();
            self.trace_s.push(now - self.last);
            self.last = now;
            if let Some(t) = &mut self.trace {
                t.push(c);
            }
        }
    }

    fn alloc(&mut self, n: usize) -> Result<Buf> {
        self.dev.alloc(Dt::F32, n)
    }

    fn linear(&mut self, w: DevWeights, groups: &[Group], x: Buf, rows: usize) -> Result<Buf> {
        let y = self.alloc(rows * w.n_out)?;
        self.dev.linear(&w, groups, x, y)?;
        let covered: u32 = groups.iter().map(|g| g.rows).sum();
        self.rec(
            LinearShape {
                dtype: w.dtype,
                n: w.n_out,
                k: w.k_in,
                groups: groups.iter().filter(|g| g.rows > 0).count(),
                rows: covered as usize,
                experts: w.experts,
                copies: 1,
            }
            .call(),
        );
        Ok(y)
    }

    fn dense(&mut self, w: DevWeights, x: Buf, rows: usize) -> Result<Buf> {
        self.linear(w, &[Group::dense(rows)], x, rows)
    }

    fn norm(&mut self, x: Buf, delta: Option<Buf>, weight: Buf, rows: usize) -> Result<Buf> {
        let dim = weight.len;
        let out = self.alloc(rows * dim)?;
        self.dev.rmsnorm(x, delta, weight, out, NORM_EPS)?;
        self.rec(
            NormShape {
                rows,
                dim,
                residual: delta.is_some() as usize,
            }
            .call(),
        );
        Ok(out)
    }

    fn swiglu(&mut self, gu: Buf, rows: usize, ffn: usize) -> Result<Buf> {
        let out = self.alloc(rows * ffn)?;
        self.dev.swiglu(gu, out, ffn)?;
        self.rec(SwigluShape { rows, ffn }.call());
        Ok(out)
    }

    fn gather(&mut self, src: Buf, dim: usize, idx: &[i32]) -> Result<Buf> {
        let ib = self.dev.upload_i32(idx)?;
        let out = self.alloc(idx.len() * dim)?;
        self.dev.gather_rows(src, dim, ib, out)?;
        self.dev.free(ib);
        self.rec(
            GatherRowsShape {
                rows: idx.len(),
                dim,
                table_rows: src.len / dim,
            }
            .call(),
        );
        Ok(out)
    }

    fn free(&mut self, bufs: &[Buf]) {
        for &b in bufs {
            self.dev.free(b);
        }
    }

    fn layout(&self, seqs: &[Seq]) -> Result<Rows> {
        let p = self.cfg.page_size;
        let mut r = Rows {
            n: 0,
            lens: Vec::new(),
            max_pages: 1,
            table: Vec::new(),
            slots: Vec::new(),
            tokens: Vec::new(),
        };
        for s in seqs {
            let end = s.start + s.tokens.len();
            if s.pages.len() * p < end {
                return Err(bad(format!(
                    "a sequence of {end} positions has {} pages of {p}",
                    s.pages.len()
                )));
            }
            if let Some(&pg) = s.pages.iter().find(|&&pg| pg as usize >= self.pages) {
                return Err(bad(format!(
                    "page {pg} outside the cache's {} pages",
                    self.pages
                )));
            }
            r.max_pages = r.max_pages.max(end.div_ceil(p));
            for (i, &t) in s.tokens.iter().enumerate() {
                if t as usize >= self.cfg.vocab {
                    return Err(bad(format!("token {t} outside the vocabulary")));
                }
                let pos = s.start + i;
                r.lens.push(pos as i32 + 1);
                r.slots
                    .push((s.pages[pos / p] as usize * p + pos % p) as i32);
                r.tokens.push(t as i32);
            }
        }
        r.n = r.lens.len();
        for s in seqs {
            for _ in 0..s.tokens.len() {
                r.table
                    .extend((0..r.max_pages).map(|i| s.pages.get(i).map_or(0, |&pg| pg as i32)));
            }
        }
        Ok(r)
    }

    /// One forward pass over `seqs` (all prefill, or all decode with `drafts` draft
    /// tokens per sequence). Prefill returns empty outputs.
    pub fn forward(
        &mut self,
        seqs: &[Seq],
        drafts: usize,
        ex: &mut dyn Exchange,
    ) -> Result<Vec<SeqOut>> {
        self.last = self.clock();
        let r = self.forward_inner(seqs, drafts, ex);
        if r.is_err() {
            ex.abort();
        }
        r
    }

    fn forward_inner(
        &mut self,
        seqs: &[Seq],
        drafts: usize,
        ex: &mut dyn Exchange,
    ) -> Result<Vec<SeqOut>> {
        let decode = seqs.first().is_some_and(|s| s.accept.is_some());
        for s in seqs {
            if s.accept.is_some() != decode {
                return Err(bad("a forward pass is all prefill or all decode"));
            }
            if let Some(a) = s.accept {
                if s.tokens.len() != 1 + drafts || a > drafts {
                    return Err(bad(format!(
                        "a decode sequence brings {} tokens and accepts {a} with {drafts} drafts",
                        s.tokens.len()
                    )));
                }
            }
        }
        if ex.ranks() != self.ranks || ex.rank() != self.rank {
            return Err(bad("exchange and executor disagree on the rank"));
        }
        let rows = self.layout(seqs)?;
        let n = rows.n;
        let h = self.cfg.hidden;
        let x = self.alloc(n * h)?;
        if n > 0 {
            let tok = self.dev.upload_i32(&rows.tokens)?;
            self.dev.gather_rows(self.embed, h, tok, x)?;
            self.dev.free(tok);
            self.rec(
                GatherRowsShape {
                    rows: n,
                    dim: h,
                    table_rows: self.cfg.vocab,
                }
                .call(),
            );
        }
        let (lens, table, slots) = if n > 0 {
            (
                Some(self.dev.upload_i32(&rows.lens)?),
                Some(self.dev.upload_i32(&rows.table)?),
                Some(self.dev.upload_i32(&rows.slots)?),
            )
        } else {
            (None, None, None)
        };
        let mut delta: Option<Buf> = None;
        let mut sel: Option<Buf> = None;
        for l in 0..self.layers.len() {
            let h2 = if n > 0 {
                let (Some(lens), Some(table), Some(slots)) = (lens, table, slots) else {
                    unreachable!("uploaded when rows exist")
                };
                Some(self.attention_block(l, x, &mut delta, &mut sel, &rows, lens, table, slots)?)
            } else {
                None
            };
            let out = self.ffn(l, h2, n, ex)?;
            if let Some(b) = h2 {
                self.dev.free(b);
            }
            if let Some(d) = delta.replace(out) {
                self.dev.free(d);
            }
        }
        let mut outs = vec![SeqOut::default(); if decode { seqs.len() } else { 0 }];
        if decode && n > 0 {
            let fin = self.norm(x, delta, self.final_norm, n)?;
            let logits = self.dense(self.lm_head, fin, n)?;
            let targets = self.argmax(logits, n)?;
            self.free(&[fin, logits]);
            let mut base = Vec::with_capacity(seqs.len());
            let mut row = 0;
            for (s, o) in seqs.iter().zip(outs.iter_mut()) {
                let a = s.accept.unwrap_or(0);
                o.emitted.extend_from_slice(&s.tokens[1..=a]);
                o.emitted.push(targets[row + a] as u32);
                base.push((row + a) as i32);
                row += s.tokens.len();
            }
            if drafts > 0 {
                let last: Vec<i32> = outs
                    .iter()
                    .map(|o| *o.emitted.last().unwrap_or(&0) as i32)
                    .collect();
                let d = self.draft(x, &base, &last, drafts)?;
                for (o, dd) in outs.iter_mut().zip(d) {
                    o.drafts = dd;
                }
            }
        }
        for b in [Some(x), delta, sel, lens, table, slots]
            .into_iter()
            .flatten()
        {
            self.dev.free(b);
        }
        Ok(outs)
    }

    fn argmax(&mut self, logits: Buf, rows: usize) -> Result<Vec<i32>> {
        let out = self.dev.alloc(Dt::I32, rows)?;
        self.dev.argmax(logits, self.cfg.vocab, out)?;
        self.rec(
            ArgmaxShape {
                rows,
                n: self.cfg.vocab,
            }
            .call(),
        );
        let v = self.dev.read_i32(out, 0, rows)?;
        self.dev.free(out);
        Ok(v)
    }

    /// Attention half of layer `l`: returns the FFN input (`x` updated with the
    /// attention output as its residual).
    #[allow(clippy::too_many_arguments)]
    fn attention_block(
        &mut self,
        l: usize,
        x: Buf,
        delta: &mut Option<Buf>,
        sel: &mut Option<Buf>,
        rows: &Rows,
        lens: Buf,
        table: Buf,
        slots: Buf,
    ) -> Result<Buf> {
        let n = rows.n;
        let (heads, lat, page) = (self.cfg.heads, self.cfg.latent, self.cfg.page_size);
        let lc = self.cfg.layers[l];
        let (attn_norm, ffn_norm, wq, wkv, idx, wo) = {
            let w = &self.layers[l];
            (w.attn_norm, w.ffn_norm, w.wq, w.wkv, w.idx, w.wo)
        };
        let hn = self.norm(x, *delta, attn_norm, n)?;
        let q = self.dense(wq, hn, n)?;
        let kvv = self.dense(wkv, hn, n)?;
        let (kv, kv_scale, keys) = {
            let c = &self.cache[l];
            (c.kv, c.kv_scale, c.keys)
        };
        self.dev.kv_write(kvv, lat, slots, kv, kv_scale)?;
        self.rec(
            KvWriteShape {
                rows: n,
                dim: lat,
                slots: kv_scale.len,
            }
            .call(),
        );
        let mut tmp = vec![hn, q, kvv];
        if let (Some((wiq, wiw, wik)), Some(ix), Some((ikeys, iscale))) =
            (idx, self.cfg.indexer, keys)
        {
            let iq = self.dense(wiq, hn, n)?;
            let iw = self.dense(wiw, hn, n)?;
            let ik = self.dense(wik, hn, n)?;
            self.dev.kv_write(ik, ix.dim, slots, ikeys, iscale)?;
            self.rec(
                KvWriteShape {
                    rows: n,
                    dim: ix.dim,
                    slots: iscale.len,
                }
                .call(),
            );
            let n_pos = rows.lens.iter().copied().max().unwrap_or(1).max(1) as usize;
            let scores = self.alloc(n * n_pos)?;
            let out = self.dev.alloc(Dt::I32, n * ix.topk)?;
            self.dev.indexer(&IndexerCall {
                rows: n,
                heads: ix.heads,
                dim: ix.dim,
                page_size: page,
                max_pages: rows.max_pages,
                n_pos,
                topk: ix.topk,
                q: iq,
                w: iw,
                keys: ikeys,
                key_scale: iscale,
                block_table: table,
                seq_lens: lens,
                scores,
                out,
            })?;
            let positions: usize = rows.lens.iter().map(|&l| l as usize).sum();
            self.rec(Call {
                op: "indexer_paged",
                dtype: "",
                key: crate::op::live::indexer_key(ix.heads, ix.dim, ix.topk, page),
                vars: vec![("rows", n as u64), ("positions", positions as u64)],
            });
            if let Some(old) = sel.replace(out) {
                self.dev.free(old);
            }
            tmp.extend([iq, iw, ik, scores]);
        }
        let o = self.alloc(n * heads * lat)?;
        let main = match lc.attention {
            AttnKind::Dense => AttnModeKind::Dense,
            AttnKind::Window => AttnModeKind::Window(self.cfg.window),
            AttnKind::Sparse => AttnModeKind::Sparse(self.cfg.indexer.map_or(1, |i| i.topk)),
        };
        self.attend(main, *sel, q, o, rows, lens, table, l)?;
        if lc.window_branch && lc.attention != AttnKind::Window {
            let o2 = self.alloc(n * heads * lat)?;
            self.attend(
                AttnModeKind::Window(self.cfg.window),
                None,
                q,
                o2,
                rows,
                lens,
                table,
                l,
            )?;
            self.dev.add(o, o2)?;
            self.rec(
                AddShape {
                    rows: n,
                    dim: heads * lat,
                }
                .call(),
            );
            tmp.push(o2);
        }
        let a = self.dense(wo, o, n)?;
        let h2 = self.norm(x, Some(a), ffn_norm, n)?;
        tmp.extend([o, a]);
        self.free(&tmp);
        if let Some(d) = delta.take() {
            self.dev.free(d);
        }
        Ok(h2)
    }

    #[allow(clippy::too_many_arguments)]
    fn attend(
        &mut self,
        mode: AttnModeKind,
        sel: Option<Buf>,
        q: Buf,
        out: Buf,
        rows: &Rows,
        lens: Buf,
        table: Buf,
        l: usize,
    ) -> Result<()> {
        let s = match (mode, sel) {
            (AttnModeKind::Dense, _) => AttnSel::Dense,
            (AttnModeKind::Window(w), _) => AttnSel::Window(w),
            (AttnModeKind::Sparse(k), Some(indices)) => AttnSel::Sparse { topk: k, indices },
            (AttnModeKind::Sparse(_), None) => {
                return Err(bad("sparse attention before any indexer"))
            }
        };
        let (heads, lat, page) = (self.cfg.heads, self.cfg.latent, self.cfg.page_size);
        let c = &self.cache[l];
        let call = AttnCall {
            rows: rows.n,
            heads,
            dim: lat,
            page_size: page,
            max_pages: rows.max_pages,
            q,
            kv: c.kv,
            kv_scale: c.kv_scale,
            block_table: table,
            seq_lens: lens,
            softmax_scale: 1.0 / (lat as f32).sqrt(),
            sel: s,
            out,
        };
        self.dev.attention(&call)?;
        let positions: usize = rows
            .lens
            .iter()
            .map(|&len| {
                let len = len as usize;
                match mode {
                    AttnModeKind::Dense => len,
                    AttnModeKind::Sparse(k) => k.min(len),
                    AttnModeKind::Window(w) => w.min(len),
                }
            })
            .sum();
        self.rec(attention_call(mode, heads, lat, page, rows.n, positions));
        Ok(())
    }

    /// FFN of layer `l` over `n` rows of `h2` (absent when this rank has no rows; it
    /// still takes part in the exchanges). Returns the FFN output `[n][hidden]`.
    fn ffn(&mut self, l: usize, h2: Option<Buf>, n: usize, ex: &mut dyn Exchange) -> Result<Buf> {
        let h = self.cfg.hidden;
        let (gate, w13, w2, shared) = match &self.layers[l].ffn {
            FfnW::Dense { w13, w2 } => {
                let (w13, w2) = (*w13, *w2);
                let Some(x) = h2 else { return self.alloc(0) };
                let gu = self.dense(w13, x, n)?;
                let act = self.swiglu(gu, n, self.cfg.dense_ffn)?;
                let y = self.dense(w2, act, n)?;
                self.free(&[gu, act]);
                return Ok(y);
            }
            FfnW::Moe {
                gate,
                w13,
                w2,
                shared,
            } => (*gate, *w13, *w2, *shared),
        };
        let m = self.cfg.moe.ok_or_else(|| bad("MoE layer without [moe]"))?;
        let k = m.top_k;
        let (ids_h, gw) = match h2 {
            Some(x) => {
                let logits = self.dense(gate, x, n)?;
                let ids = self.dev.alloc(Dt::I32, n * k)?;
                let gw = self.alloc(n * k)?;
                self.dev.gate_topk(logits, m.experts, k, ids, gw)?;
                self.rec(
                    GateShape {
                        rows: n,
                        experts: m.experts,
                        topk: k,
                    }
                    .call(),
                );
                let ids_h = self.dev.read_i32(ids, 0, n * k)?;
                self.free(&[logits, ids]);
                (ids_h, Some(gw))
            }
            None => (Vec::new(), None),
        };
        let (yr, slots) = if self.ranks == 1 {
            self.experts_local(h2, &ids_h, n, k, w13, w2, m.expert_ffn)?
        } else {
            self.experts_exchanged(h2, &ids_h, n, k, w13, w2, m.expert_ffn, ex)?
        };
        let Some(x) = h2 else {
            self.dev.free(yr);
            return self.alloc(0);
        };
        let out = match shared {
            Some((s13, s2)) => {
                let gu = self.dense(s13, x, n)?;
                let act = self.swiglu(gu, n, m.shared_ffn)?;
                let y = self.dense(s2, act, n)?;
                self.free(&[gu, act]);
                y
            }
            None => {
                let y = self.alloc(n * h)?;
                self.dev.write_f32(y, 0, &vec![0.0; n * h])?;
                y
            }
        };
        let sb = self.dev.upload_i32(&slots)?;
        let gw = gw.expect("gate weights exist with rows");
        self.dev.moe_combine(yr, h, sb, gw, k, out)?;
        self.rec(
            CombineShape {
                rows: n,
                topk: k,
                dim: h,
            }
            .call(),
        );
        self.free(&[sb, gw, yr]);
        Ok(out)
    }

    /// One rank holds every expert: permute rows by expert on the device, run each
    /// touched expert on its rows; returns the outputs (expert order) and the slot of
    /// each (row, choice) among them.
    #[allow(clippy::too_many_arguments)]
    fn experts_local(
        &mut self,
        h2: Option<Buf>,
        ids: &[i32],
        n: usize,
        k: usize,
        w13: DevWeights,
        w2: DevWeights,
        ffn: usize,
    ) -> Result<(Buf, Vec<i32>)> {
        let h = self.cfg.hidden;
        let Some(x) = h2 else {
            return Ok((self.alloc(0)?, Vec::new()));
        };
        let (order, groups) = group_by_expert(ids, w13.experts);
        // order[i] = (row, choice) entry placed i-th; gather its row.
        let perm: Vec<i32> = order.iter().map(|&e| (e / k) as i32).collect();
        let xp = self.gather(x, h, &perm)?;
        let gu = self.linear(w13, &groups, xp, n * k)?;
        let act = self.swiglu(gu, n * k, ffn)?;
        let yp = self.linear(w2, &groups, act, n * k)?;
        let mut slots = vec![0i32; n * k];
        for (i, &e) in order.iter().enumerate() {
            slots[e] = i as i32;
        }
        self.free(&[xp, gu, act]);
        Ok((yp, slots))
    }

    /// Experts spread over the group: dispatch each (row, choice) to the rank holding
    /// its expert, run the local experts, combine back. Returns outputs in (row,
    /// choice) order and their slots (an empty buffer when this rank has no rows).
    #[allow(clippy::too_many_arguments)]
    fn experts_exchanged(
        &mut self,
        h2: Option<Buf>,
        ids: &[i32],
        n: usize,
        k: usize,
        w13: DevWeights,
        w2: DevWeights,
        ffn: usize,
        ex: &mut dyn Exchange,
    ) -> Result<(Buf, Vec<i32>)> {
        let h = self.cfg.hidden;
        let local = w13.experts;
        let xh = match h2 {
            Some(x) => self.dev.read_f32(x, 0, n * h)?,
            None => Vec::new(),
        };
        // Dispatch: per destination, [local expert id, row...] records in entry order.
        let mut send = vec![Vec::new(); self.ranks];
        for (e, &id) in ids.iter().enumerate() {
            let d = id as usize / local;
            send[d].push((id as usize % local) as f32);
            send[d].extend_from_slice(&xh[(e / k) * h..(e / k + 1) * h]);
        }
        let sent: usize = send.iter().map(|v| v.len()).sum();
        let recv = ex.all_to_all(send)?;
        let got: usize = recv.iter().map(|v| v.len()).sum();
        self.rec(copy_call(4 * (sent + got)));
        // Local experts over everything received, grouped by expert.
        let mut ids_in = Vec::new();
        let mut src_of = Vec::new();
        for (s, v) in recv.iter().enumerate() {
            for (i, rec) in v.chunks_exact(h + 1).enumerate() {
                ids_in.push(rec[0] as i32);
                src_of.push((s, i));
            }
        }
        let m = ids_in.len();
        let mut back = vec![Vec::new(); self.ranks];
        if m > 0 {
            let (order, groups) = group_by_expert(&ids_in, local);
            let mut xp = Vec::with_capacity(m * h);
            for &e in &order {
                let (s, i) = src_of[e];
                xp.extend_from_slice(&recv[s][i * (h + 1) + 1..(i + 1) * (h + 1)]);
            }
            let xb = self.dev.upload_f32(&xp)?;
            let gu = self.linear(w13, &groups, xb, m)?;
            let act = self.swiglu(gu, m, ffn)?;
            let yb = self.linear(w2, &groups, act, m)?;
            let y = self.dev.read_f32(yb, 0, m * h)?;
            self.free(&[xb, gu, act, yb]);
            // Results back to each source in its record order.
            let mut pos = vec![0usize; m];
            for (i, &e) in order.iter().enumerate() {
                pos[e] = i;
            }
            for (e, &(s, _)) in src_of.iter().enumerate() {
                back[s].extend_from_slice(&y[pos[e] * h..(pos[e] + 1) * h]);
            }
        }
        let sent: usize = back.iter().map(|v| v.len()).sum();
        let mine = ex.all_to_all(back)?;
        let got: usize = mine.iter().map(|v| v.len()).sum();
        self.rec(copy_call(4 * (sent + got)));
        // Reassemble in (row, choice) order: each destination answered in send order.
        let mut next = vec![0usize; self.ranks];
        let mut yr = Vec::with_capacity(n * k * h);
        for &id in ids {
            let d = id as usize / local;
            let i = next[d];
            next[d] += 1;
            yr.extend_from_slice(&mine[d][i * h..(i + 1) * h]);
        }
        let slots = (0..(n * k) as i32).collect();
        if yr.is_empty() {
            return Ok((self.alloc(0)?, slots));
        }
        Ok((self.dev.upload_f32(&yr)?, slots))
    }

    /// The MTP head: `drafts` passes from the residual rows `base` of `x` and the last
    /// emitted tokens; returns each sequence's drafts.
    fn draft(
        &mut self,
        x: Buf,
        base: &[i32],
        last: &[i32],
        drafts: usize,
    ) -> Result<Vec<Vec<u32>>> {
        let Some(w) = self.mtp.as_ref().map(|m| {
            (
                m.norm_h, m.norm_e, m.proj, m.ffn_norm, m.w13, m.w2, m.out_norm,
            )
        }) else {
            return Err(bad(format!(
                "model {} has no MTP head but {drafts} drafts were asked",
                self.cfg.name
            )));
        };
        let (norm_h, norm_e, proj, ffn_norm, w13, w2, out_norm) = w;
        let (h, b) = (self.cfg.hidden, base.len());
        let mut hb = self.gather(x, h, base)?;
        let mut e = self.gather(self.embed, h, last)?;
        let mut out = vec![Vec::with_capacity(drafts); b];
        for i in 0..drafts {
            let en = self.norm(e, None, norm_e, b)?;
            let hn = self.norm(hb, None, norm_h, b)?;
            self.dev.add(en, hn)?;
            self.rec(AddShape { rows: b, dim: h }.call());
            let m = self.dense(proj, en, b)?;
            let mn = self.norm(m, None, ffn_norm, b)?;
            let gu = self.dense(w13, mn, b)?;
            let act = self.swiglu(gu, b, self.cfg.mtp_ffn)?;
            let f = self.dense(w2, act, b)?;
            let on = self.norm(m, Some(f), out_norm, b)?;
            let logits = self.dense(self.lm_head, on, b)?;
            let d = self.argmax(logits, b)?;
            for (o, &t) in out.iter_mut().zip(&d) {
                o.push(t as u32);
            }
            self.free(&[en, hn, mn, gu, act, f, on, logits, hb, e]);
            hb = m;
            e = if i + 1 < drafts {
                self.gather(self.embed, h, &d)?
            } else {
                self.alloc(0)?
            };
        }
        self.free(&[hb, e]);
        Ok(out)
    }

    /// The cache buffers of layer `l` a hand-over moves, with their entry width (0 for
    /// the f32 scales): latent entries and scales, indexer keys and scales.
    fn kv_parts(&self, l: usize) -> Vec<(Buf, usize)> {
        let c = &self.cache[l];
        let mut parts = vec![(c.kv, self.cfg.latent), (c.kv_scale, 0)];
        if let (Some((k, s)), Some(ix)) = (c.keys, self.cfg.indexer) {
            parts.push((k, ix.dim));
            parts.push((s, 0));
        }
        parts
    }

    /// KV bytes of `pages` (every layer's entries and scales, indexer keys included),
    /// for handing a request over to another group.
    pub fn export_kv(&mut self, pages: &[u32]) -> Result<Vec<u8>> {
        let p = self.cfg.page_size;
        let mut out = Vec::with_capacity(pages.len() * p * self.cfg.kv_bytes_per_token());
        for l in 0..self.cache.len() {
            for (buf, width) in self.kv_parts(l) {
                for &pg in pages {
                    let pg = pg as usize;
                    if pg >= self.pages {
                        return Err(bad(format!("page {pg} outside the cache")));
                    }
                    if width > 0 {
                        out.extend(self.dev.read_u8(buf, pg * p * width, p * width)?);
                    } else {
                        for v in self.dev.read_f32(buf, pg * p, p)? {
                            out.extend_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Writes KV bytes exported by [`Executor::export_kv`] into `pages`.
    pub fn import_kv(&mut self, pages: &[u32], bytes: &[u8]) -> Result<()> {
        let p = self.cfg.page_size;
        if bytes.len() != pages.len() * p * self.cfg.kv_bytes_per_token() {
            return Err(bad(format!(
                "KV hand-over of {} bytes for {} pages (expected {})",
                bytes.len(),
                pages.len(),
                pages.len() * p * self.cfg.kv_bytes_per_token()
            )));
        }
        let mut at = 0;
        for l in 0..self.cache.len() {
            for (buf, width) in self.kv_parts(l) {
                for &pg in pages {
                    let pg = pg as usize;
                    if pg >= self.pages {
                        return Err(bad(format!("page {pg} outside the cache")));
                    }
                    if width > 0 {
                        self.dev
                            .write_u8(buf, pg * p * width, &bytes[at..at + p * width])?;
                        at += p * width;
                    } else {
                        let v: Vec<f32> = bytes[at..at + 4 * p]
                            .chunks_exact(4)
                            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                            .collect();
                        self.dev.write_f32(buf, pg * p, &v)?;
                        at += 4 * p;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Counting sort of (row, choice) entries by expert: the entry order (indices into
/// `ids`) and one group per touched expert over consecutive positions.
pub fn group_by_expert(ids: &[i32], experts: usize) -> (Vec<usize>, Vec<Group>) {
    let mut count = vec![0u32; experts];
    for &e in ids {
        count[e as usize] += 1;
    }
    let mut start = vec![0u32; experts + 1];
    for e in 0..experts {
        start[e + 1] = start[e] + count[e];
    }
    let mut next = start.clone();
    let mut order = vec![0usize; ids.len()];
    for (i, &e) in ids.iter().enumerate() {
        order[next[e as usize] as usize] = i;
        next[e as usize] += 1;
    }
    let groups = (0..experts)
        .filter(|&e| count[e] > 0)
        .map(|e| Group {
            expert: e as u32,
            start: start[e],
            rows: count[e],
        })
        .collect();
    (order, groups)
}
