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

mod attention;
mod exchange;
mod kv;
mod moe;
mod mtp;

pub use exchange::{Exchange, Solo, ThreadExchange};
pub use moe::group_by_expert;

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
}
