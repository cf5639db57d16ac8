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
use crate::op::live::attn_key;
use crate::{EngineError, Result};
use kernels::live::Group;
use kernels::AttnModeKind;
use spec::call::Call;

/// Records a traced call (`Executor::rec`), building the [`Call`] only when tracing
/// is on: an untraced pass allocates nothing for its trace (and, on an asynchronous
/// device, never waits for its calls).
macro_rules! rec {
    ($s:expr, $call:expr) => {
        if $s.trace.is_some() {
            let c = $call;
            $s.rec(c)?;
        }
    };
}

mod attention;
mod exchange;
mod kv;
mod load;
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
    cfg: LiveModel,
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
    /// Per traced call: the clock reading at its end and its layer (-1 outside the
    /// layers: embedding, LM head, MTP drafts).
    trace_at: Vec<(f64, i32)>,
    /// Per traced call, its host side on an asynchronous device (see [`HostSide`]).
    trace_side: Vec<Option<HostSide>>,
    /// The pass's marks on the host clock (just before and just after recording each):
    /// its start mark, then one per traced call of the pass.
    pass_marks: Vec<(f64, f64)>,
    /// The layer the pass is in (-1 outside the layers).
    layer: i32,
}

/// A traced call with its times on the executor's trace clock (seconds since
/// [`trace_epoch`] on the wall clock): its end, and its duration (the op and the host
/// work since the call before it, or since the pass started), and its layer (-1
/// outside the layers).
#[derive(Debug, Clone, PartialEq)]
pub struct TracedCall {
    pub call: Call,
    pub end_s: f64,
    pub dur_s: f64,
    pub layer: i32,
    /// On an asynchronous device, the host's side of the call; `None` on the CPU.
    pub host: Option<HostSide>,
}

/// The host's side of a call traced on an asynchronous device, from the host clock read
/// around each mark: `gap_s`, the host's time from the end of the mark before the call
/// to the start of the call's own (issuing the call), and `mark_s`, what recording the
/// mark before it cost the host. On a device that waits for the host, a call's time
/// from the mark before it to its own is about its `gap_s` plus the longer of its
/// kernel and the recording of its own mark (the next call's `mark_s`); untraced, about
/// `gap_s` plus its kernel. Kept raw in the trace, so that what tracing adds can be
/// told from what the call costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostSide {
    pub gap_s: f64,
    pub mark_s: f64,
}

/// Host sides of a pass's calls from its marks on the host clock (`marks[0]` the pass's
/// start mark, `marks[i + 1]` call `i`'s; each (just before, just after) recording).
fn host_sides(marks: &[(f64, f64)]) -> Vec<HostSide> {
    marks
        .windows(2)
        .map(|w| HostSide {
            gap_s: w[1].0 - w[0].1,
            mark_s: w[0].1 - w[0].0,
        })
        .collect()
}

/// A pass's call times from its device marks (`marks[0]` the pass's start, `marks[i + 1]`
/// call `i`'s end, seconds on the device's timeline): each call's duration is the time
/// from the mark before it, and its end on the host clock is `now` (read once the
/// device was done) less the time from its mark to the last one.
fn times_from_marks(
    marks: &[f64],
    now: f64,
    durs: &mut [f64],
    ends: &mut [(f64, i32)],
) -> Result<()> {
    let calls = durs.len();
    if marks.len() != calls + 1 || ends.len() != calls {
        return Err(bad(format!(
            "{} timeline marks for {calls} traced calls and the pass's start",
            marks.len()
        )));
    }
    let last = marks[calls];
    for i in 0..calls {
        durs[i] = marks[i + 1] - marks[i];
        ends[i].0 = now - (last - marks[i + 1]);
    }
    Ok(())
}

/// The instant the executors' wall trace clock counts from (the first reading of it in
/// this process).
pub fn trace_epoch() -> std::time::Instant {
    static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *T0.get_or_init(std::time::Instant::now)
}

fn bad(what: impl Into<String>) -> EngineError {
    EngineError::BadOp {
        op: "forward".into(),
        reason: what.into(),
    }
}

/// The device tables of a pass's rows: sequence lengths, block table, KV slots.
#[derive(Debug, Clone, Copy)]
struct RowTables {
    lens: Buf,
    table: Buf,
    slots: Buf,
}

/// What a layer hands the next: the residual delta still to add, and the indexer's
/// last selection.
#[derive(Debug, Default)]
struct Carry {
    delta: Option<Buf>,
    sel: Option<Buf>,
}

/// Host-side layout of a forward pass's rows.
struct Rows {
    n: usize,
    /// Sequence length each row sees (its position + 1).
    lens: Vec<i32>,
    /// The longest of `lens` (at least 1): the indexer's score width, and what a
    /// device sizes attention's split-KV grid by.
    longest: usize,
    max_pages: usize,
    table: Vec<i32>,
    slots: Vec<i32>,
    tokens: Vec<i32>,
}

/// Which rank of a DEP group an executor is, and what it holds: weights seeded from
/// `seed` (its shard of the routed experts) and a KV cache of `pages` pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub seed: u64,
    pub rank: usize,
    pub ranks: usize,
    pub pages: usize,
}

impl Executor {
    /// Builds rank `shard.rank` of `shard.ranks`: weights from `shard.seed` (this rank's
    /// expert shard), a KV cache of `shard.pages` pages.
    pub fn new(mut dev: Box<dyn ServeDevice>, cfg: LiveModel, shard: Shard) -> Result<Executor> {
        let Shard {
            seed,
            rank,
            ranks,
            pages,
        } = shard;
        let problems: Vec<String> = cfg
            .problems(ranks)
            .iter()
            .map(ToString::to_string)
            .collect();
        if !problems.is_empty() {
            return Err(bad(format!("model {}: {}", cfg.name, problems.join("; "))));
        }
        if rank >= ranks || pages == 0 {
            return Err(bad(
                "rank must be below ranks and the cache hold at least one page",
            ));
        }
        let w = load::Loader {
            cfg: &cfg,
            seed,
            rank,
            ranks,
        };
        let d = dev.as_mut();
        let layers = (0..cfg.layers.len())
            .map(|l| w.layer(d, l))
            .collect::<Result<Vec<_>>>()?;
        let mtp = w.mtp(d)?;
        let cache = w.cache(d, pages)?;
        let embed = upload_embedding(d, &cfg, seed)?;
        let final_norm = upload_ones(d, cfg.hidden)?;
        let lm_head = w.linear(d, LinearSpec::dense("lm_head", 0, cfg.vocab, cfg.hidden))?;
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
            trace_at: Vec::new(),
            trace_side: Vec::new(),
            pass_marks: Vec::new(),
            layer: -1,
        })
    }

    pub fn config(&self) -> &LiveModel {
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
        self.trace_s.clear();
        self.trace_at.clear();
        self.trace_side.clear();
    }

    /// The calls recorded since tracing started (or the last take).
    pub fn take_trace(&mut self) -> Vec<Call> {
        self.trace_s.clear();
        self.trace_at.clear();
        self.trace_side.clear();
        self.trace.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The calls recorded, each with the seconds since the call before it (or the
    /// forward pass's start): the op and the host work leading to it.
    pub fn take_timed_trace(&mut self) -> Vec<(Call, f64)> {
        let s = std::mem::take(&mut self.trace_s);
        self.take_trace().into_iter().zip(s).collect()
    }

    /// The calls recorded, each with its end, duration and layer (see [`TracedCall`]).
    pub fn take_trace_spans(&mut self) -> Vec<TracedCall> {
        let at = std::mem::take(&mut self.trace_at);
        let side = std::mem::take(&mut self.trace_side);
        self.take_timed_trace()
            .into_iter()
            .zip(at)
            .zip(side)
            .map(|(((call, dur_s), (end_s, layer)), host)| TracedCall {
                call,
                end_s,
                dur_s,
                layer,
                host,
            })
            .collect()
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
            trace_epoch().elapsed().as_secs_f64()
        }
    }

    /// Records a traced call at the clock's reading now; on an asynchronous device
    /// (a GPU stream) it records a mark on the device's timeline instead, and the pass
    /// fills in the call's times from the marks when it ends ([`Executor::forward`]).
    fn rec(&mut self, c: Call) -> Result<()> {
        let Some(t) = &mut self.trace else {
            return Ok(());
        };
        t.push(c);
        let (dur, at) = if self.dev.asynchronous() {
            self.host_mark()?;
            (f64::NAN, f64::NAN)
        } else {
            let now = self.clock();
            let dur = now - self.last;
            self.last = now;
            (dur, now)
        };
        self.trace_s.push(dur);
        self.trace_at.push((at, self.layer));
        self.trace_side.push(None);
        Ok(())
    }

    /// Records a mark on the device's timeline, and around it the host clock
    /// (`pass_marks`: what the host's side of each call is read from).
    fn host_mark(&mut self) -> Result<()> {
        let before = self.clock();
        self.dev.mark()?;
        self.pass_marks.push((before, self.clock()));
        Ok(())
    }

    fn alloc(&mut self, n: usize) -> Result<Buf> {
        self.dev.alloc(Dt::F32, n)
    }

    fn linear(&mut self, w: DevWeights, groups: &[Group], x: Buf, rows: usize) -> Result<Buf> {
        let y = self.alloc(rows * w.n_out)?;
        self.dev.linear(&w, groups, x, y)?;
        let covered: u32 = groups.iter().map(|g| g.rows).sum();
        let touched = groups.iter().filter(|g| g.rows > 0).count();
        rec!(
            self,
            Call::linear(
                w.dtype.element(),
                w.n_out,
                w.k_in,
                touched as u64,
                covered as u64,
            )
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
        rec!(
            self,
            Call::rmsnorm(dim, delta.is_some() as usize, rows as u64)
        );
        Ok(out)
    }

    fn swiglu(&mut self, gu: Buf, rows: usize, ffn: usize) -> Result<Buf> {
        let out = self.alloc(rows * ffn)?;
        self.dev.swiglu(gu, out, ffn)?;
        rec!(self, Call::swiglu(ffn, rows as u64));
        Ok(out)
    }

    fn gather(&mut self, src: Buf, dim: usize, idx: &[i32]) -> Result<Buf> {
        let ib = self.dev.upload_i32(idx)?;
        let out = self.alloc(idx.len() * dim)?;
        self.dev.gather_rows(src, dim, ib, out)?;
        self.dev.free(ib);
        rec!(self, Call::gather_rows(dim, idx.len() as u64));
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
            longest: 1,
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
        r.longest = r.lens.iter().copied().max().unwrap_or(1).max(1) as usize;
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
        let marked = self.trace.is_some() && self.dev.asynchronous();
        let first = self.trace_s.len();
        if marked {
            // Drain what was queued before the pass (and any marks a failed pass left),
            // so that the first call's time holds only its own work.
            self.dev.take_marks()?;
            self.pass_marks.clear();
            self.host_mark()?;
        }
        self.last = self.clock();
        self.layer = -1;
        let r = self.forward_inner(seqs, drafts, ex);
        if r.is_err() {
            ex.abort();
            return r;
        }
        if marked {
            self.times_from_marks(first)?;
        }
        r
    }

    /// Fills in the times of the pass's traced calls (from index `first`) from the
    /// device's marks: the pass's start mark, then one mark per call. A call's duration
    /// is the device time from the mark before it to its own (its kernel, and any wait
    /// of an idle device for the host's launch); its end is placed on the host clock by
    /// the last mark, read when the device is done.
    fn times_from_marks(&mut self, first: usize) -> Result<()> {
        let marks = self.dev.take_marks()?;
        let now = self.clock();
        times_from_marks(
            &marks,
            now,
            &mut self.trace_s[first..],
            &mut self.trace_at[first..],
        )?;
        for (slot, h) in self.trace_side[first..]
            .iter_mut()
            .zip(host_sides(&self.pass_marks))
        {
            *slot = Some(h);
        }
        self.last = now;
        Ok(())
    }

    fn forward_inner(
        &mut self,
        seqs: &[Seq],
        drafts: usize,
        ex: &mut dyn Exchange,
    ) -> Result<Vec<SeqOut>> {
        let decode = self.check_pass(seqs, drafts, ex)?;
        let rows = self.layout(seqs)?;
        let n = rows.n;
        let x = self.embed_rows(&rows)?;
        let tables = if n > 0 {
            Some(RowTables {
                lens: self.dev.upload_i32(&rows.lens)?,
                table: self.dev.upload_i32(&rows.table)?,
                slots: self.dev.upload_i32(&rows.slots)?,
            })
        } else {
            None
        };
        let mut carry = Carry::default();
        for l in 0..self.layers.len() {
            self.layer = l as i32;
            let h2 = match tables {
                Some(t) => Some(self.attention_block(l, x, &mut carry, &rows, t)?),
                None => None,
            };
            let out = self.ffn(l, h2, n, ex)?;
            if let Some(b) = h2 {
                self.dev.free(b);
            }
            if let Some(d) = carry.delta.replace(out) {
                self.dev.free(d);
            }
        }
        self.layer = -1;
        let outs = if decode {
            self.decode_outputs(seqs, &rows, x, carry.delta, drafts)?
        } else {
            Vec::new()
        };
        let mut bufs = vec![Some(x), carry.delta, carry.sel];
        if let Some(t) = tables {
            bufs.extend([t.lens, t.table, t.slots].map(Some));
        }
        for b in bufs.into_iter().flatten() {
            self.dev.free(b);
        }
        Ok(outs)
    }

    /// A pass is all prefill or all decode (each decode sequence bringing its last
    /// token and `drafts` drafts); returns whether it decodes.
    fn check_pass(&self, seqs: &[Seq], drafts: usize, ex: &dyn Exchange) -> Result<bool> {
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
        Ok(decode)
    }

    /// The rows' embeddings `[n][hidden]`.
    fn embed_rows(&mut self, rows: &Rows) -> Result<Buf> {
        let (n, h) = (rows.n, self.cfg.hidden);
        let x = self.alloc(n * h)?;
        if n > 0 {
            let tok = self.dev.upload_i32(&rows.tokens)?;
            self.dev.gather_rows(self.embed, h, tok, x)?;
            self.dev.free(tok);
            rec!(self, Call::gather_rows(h, n as u64));
        }
        Ok(x)
    }

    /// A decode pass's outputs: the final norm of `x` with the last `delta`, the LM
    /// head's targets after each sequence's accepted drafts, and the next drafts.
    fn decode_outputs(
        &mut self,
        seqs: &[Seq],
        rows: &Rows,
        x: Buf,
        delta: Option<Buf>,
        drafts: usize,
    ) -> Result<Vec<SeqOut>> {
        let n = rows.n;
        let mut outs = vec![SeqOut::default(); seqs.len()];
        if n == 0 {
            return Ok(outs);
        }
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
        Ok(outs)
    }

    fn argmax(&mut self, logits: Buf, rows: usize) -> Result<Vec<i32>> {
        let out = self.dev.alloc(Dt::I32, rows)?;
        self.dev.argmax(logits, self.cfg.vocab, out)?;
        rec!(self, Call::argmax(self.cfg.vocab, rows as u64));
        let v = self.dev.read_i32(out, 0, rows)?;
        self.dev.free(out);
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::{host_sides, times_from_marks, HostSide};

    /// The pass's start mark recorded from 1.0 to 1.5 us, call 0's from 4.0 to 6.0 us,
    /// call 1's from 6.5 to 7.0 us: call 0 took the host 2.5 us to issue after a 0.5 us
    /// mark, call 1 0.5 us after a 2 us mark.
    #[test]
    fn host_sides_split_issuing_from_marking() {
        let us = |a: f64, b: f64| (a * 1e-6, b * 1e-6);
        let sides = host_sides(&[us(1.0, 1.5), us(4.0, 6.0), us(6.5, 7.0)]);
        let want = [(2.5, 0.5), (0.5, 2.0)];
        assert_eq!(sides.len(), 2);
        for (HostSide { gap_s, mark_s }, (g, m)) in sides.iter().zip(want) {
            assert!((gap_s * 1e6 - g).abs() < 1e-9 && (mark_s * 1e6 - m).abs() < 1e-9);
        }
        assert!(host_sides(&[us(1.0, 2.0)]).is_empty());
    }

    /// Start mark at 0, calls ending at 10, 15 and 40 µs on the device; the host reads
    /// its clock (100 ms) once the device is done, so the last call ends at 100 ms and
    /// the first 30 µs before it.
    #[test]
    fn call_times_come_from_the_marks_between_them() {
        let marks = [0.0, 10e-6, 15e-6, 40e-6];
        let mut durs = [f64::NAN; 3];
        let mut ends = [(f64::NAN, 0), (f64::NAN, 1), (f64::NAN, -1)];
        times_from_marks(&marks, 0.1, &mut durs, &mut ends).unwrap();
        let want = [10e-6, 5e-6, 25e-6];
        for (d, w) in durs.iter().zip(want) {
            assert!((d - w).abs() < 1e-12, "{durs:?}");
        }
        assert!((ends[0].0 - (0.1 - 30e-6)).abs() < 1e-12);
        assert!((ends[1].0 - (0.1 - 25e-6)).abs() < 1e-12);
        assert_eq!(ends[2].0, 0.1);
        assert_eq!((ends[0].1, ends[2].1), (0, -1), "layers are kept");
        // A mark missing (or one too many) is an error, not a shifted trace.
        let err = times_from_marks(&marks[..3], 0.1, &mut durs, &mut ends).unwrap_err();
        assert!(err
            .to_string()
            .contains("3 timeline marks for 3 traced calls"));
    }
}
