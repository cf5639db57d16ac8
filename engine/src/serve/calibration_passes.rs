//! Synthetic forward passes with their op calls timed (prefill chunks and decode batches
//! run through the executor, in rounds with fresh tokens), and the executor's wake-up
//! after idling: how calibration measures the live engine's ops in their real context
//! (weights, KV and activations as a forward pass leaves them in the caches),
//! independently of any run (`twin calibrate --plan live`).
//!
//! One long synthetic prompt is prefilled first (untimed) on the cache's first pages;
//! each pass then reads that prompt up to its context through a block table that shares
//! its pages, and writes its own rows into private pages after it, so passes of any
//! context and batch need no further prefill.

use super::exec::{Executor, Seq, Solo};
use crate::{EngineError, Result};
use spec::call::Call;

/// A forward pass to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// A prefill chunk of `tokens` new tokens on `context` cached ones.
    Prefill { tokens: usize, context: usize },
    /// A decode step of `batch` requests at `context` tokens each.
    Decode { batch: usize, context: usize },
}

/// Runs every pass once untimed, then `reps` traced rounds over all of them in turn;
/// returns every traced call with its time (the op and the host work leading to it).
pub fn timed_passes(
    exec: &mut Executor,
    passes: &[Pass],
    drafts: usize,
    reps: usize,
    seed: u64,
) -> Result<Vec<(Call, f64)>> {
    let synth = Synthetic::new(exec, passes, drafts, seed)?;
    synth.prefill_prompt(exec)?;
    // One untimed round, then `reps` traced rounds.
    for p in round_order(passes, reps) {
        let (s, d) = synth.seqs(p, reps);
        exec.forward(&s, d, &mut Solo)?;
    }
    let mut out = Vec::new();
    exec.set_trace(true);
    for rep in 0..reps {
        for p in round_order(passes, rep) {
            let (s, d) = synth.seqs(p, rep);
            exec.forward(&s, d, &mut Solo)?;
            out.extend(exec.take_timed_trace());
        }
    }
    exec.set_trace(false);
    Ok(out)
}

/// The synthetic tokens and KV pages of the passes: one shared prompt on the cache's
/// first pages, each pass's own rows on private pages after it.
struct Synthetic {
    page: usize,
    vocab: usize,
    seed: u64,
    drafts: usize,
    /// Tokens of the shared prompt: the longest context, in whole pages.
    max_ctx: usize,
    /// The shared prompt's pages.
    base: Vec<u32>,
}

impl Synthetic {
    /// Checks that the executor's cache holds the shared prompt and the largest pass.
    fn new(exec: &Executor, passes: &[Pass], drafts: usize, seed: u64) -> Result<Synthetic> {
        let cfg = exec.config();
        let page = cfg.page_size;
        let max_ctx = passes
            .iter()
            .map(|p| match *p {
                Pass::Prefill { context, .. } | Pass::Decode { context, .. } => {
                    context / page * page
                }
            })
            .max()
            .unwrap_or(0);
        let base_pages = max_ctx / page;
        let private = passes
            .iter()
            .map(|p| match *p {
                Pass::Prefill { tokens, .. } => tokens.div_ceil(page),
                Pass::Decode { batch, .. } => batch * (1 + drafts).div_ceil(page),
            })
            .max()
            .unwrap_or(0);
        if base_pages + private > exec.pages() {
            return Err(EngineError::BadOp {
                op: "calibration passes".into(),
                reason: format!(
                    "need {} KV pages, the executor has {}",
                    base_pages + private,
                    exec.pages()
                ),
            });
        }
        Ok(Synthetic {
            page,
            vocab: cfg.vocab,
            seed,
            drafts,
            max_ctx,
            base: (0..base_pages as u32).collect(),
        })
    }

    fn token(&self, i: usize) -> u32 {
        ((self.seed as usize).wrapping_mul(31).wrapping_add(i * 7919) % self.vocab) as u32
    }

    /// The shared prompt, untimed, in chunks of 256 tokens.
    fn prefill_prompt(&self, exec: &mut Executor) -> Result<()> {
        let mut at = 0;
        while at < self.max_ctx {
            let n = 256.min(self.max_ctx - at);
            exec.forward(
                &[Seq {
                    tokens: (at..at + n).map(|i| self.token(i)).collect(),
                    start: at,
                    pages: self.base.clone(),
                    accept: None,
                }],
                0,
                &mut Solo,
            )?;
            at += n;
        }
        Ok(())
    }

    /// The sequences of pass `p` in round `rep`, and its draft count. Tokens differ per
    /// rep, so routing picks other experts each time (a run's steps do not route alike
    /// twice).
    fn seqs(&self, p: &Pass, rep: usize) -> (Vec<Seq>, usize) {
        let salt = rep * 104_729;
        let tok = |i: usize| self.token(i + salt);
        let page = self.page;
        let mut next = self.base.len() as u32;
        let mut pages_of = |context: usize, n: usize| {
            let mut pages = self.base[..context / page].to_vec();
            pages.extend(next..next + n as u32);
            next += n as u32;
            pages
        };
        match *p {
            Pass::Prefill { tokens, context } => {
                let c = context / page * page;
                let s = Seq {
                    tokens: (c..c + tokens).map(tok).collect(),
                    start: c,
                    pages: pages_of(c, tokens.div_ceil(page)),
                    accept: None,
                };
                (vec![s], 0)
            }
            Pass::Decode { batch, context } => {
                let c = context / page * page;
                let v = (0..batch)
                    .map(|b| Seq {
                        tokens: (0..1 + self.drafts).map(|i| tok(c + b + i)).collect(),
                        start: c,
                        pages: pages_of(c, (1 + self.drafts).div_ceil(page)),
                        accept: Some(0),
                    })
                    .collect();
                (v, self.drafts)
            }
        }
    }
}

/// The passes of round `rep`: the prefill passes, then the decode passes, each kind in
/// an order that changes with the round, so a pass follows another of its kind (as a
/// run's decode steps follow one another) rather than repeating itself into caches it
/// warmed.
fn round_order(passes: &[Pass], rep: usize) -> Vec<&Pass> {
    let order = |prefill: bool| -> Vec<&Pass> {
        let kind: Vec<&Pass> = passes
            .iter()
            .filter(|p| matches!(p, Pass::Prefill { .. }) == prefill)
            .collect();
        let n = kind.len();
        let stride = (n / 2 + 1..).find(|k| gcd(*k, n.max(1)) == 1).unwrap_or(1);
        (0..n).map(|i| kind[(i * stride + rep) % n]).collect()
    };
    let mut v = order(true);
    v.extend(order(false));
    v
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The executor's wake-up after idling: a decode pass of one request (with `drafts`
/// drafts) after a short prompt, timed right after an identical pass (back to back),
/// then again after the thread slept `gap` seconds, for every gap, `reps` times.
/// Returns (gap_s, extra_s) per sample: after the gap, less back to back; wall clock,
/// as a run's steps are timed.
pub fn wake_samples(
    exec: &mut Executor,
    gaps_s: &[f64],
    reps: usize,
    drafts: usize,
    seed: u64,
) -> Result<Vec<(f64, f64)>> {
    let cfg = exec.config().clone();
    let page = cfg.page_size;
    let prompt = page;
    let pages_needed = (prompt + 1 + drafts).div_ceil(page);
    if pages_needed > exec.pages() {
        return Err(EngineError::BadOp {
            op: "wake-up passes".into(),
            reason: format!(
                "need {pages_needed} KV pages, the executor has {}",
                exec.pages()
            ),
        });
    }
    let pages: Vec<u32> = (0..pages_needed as u32).collect();
    let token =
        |i: usize| ((seed as usize).wrapping_mul(131).wrapping_add(i * 7907) % cfg.vocab) as u32;
    exec.forward(
        &[Seq {
            tokens: (0..prompt).map(token).collect(),
            start: 0,
            pages: pages.clone(),
            accept: None,
        }],
        0,
        &mut Solo,
    )?;
    let mut n = 0usize;
    let mut pass = |exec: &mut Executor| -> Result<f64> {
        n += 1;
        let s = [Seq {
            tokens: (0..1 + drafts)
                .map(|i| token(prompt + n * 17 + i))
                .collect(),
            start: prompt,
            pages: pages.clone(),
            accept: Some(0),
        }];
        let t = std::time::Instant::now();
        exec.forward(&s, drafts, &mut Solo)?;
        Ok(t.elapsed().as_secs_f64())
    };
    let mut out = Vec::new();
    for _ in 0..reps {
        for &gap in gaps_s {
            pass(exec)?;
            let steady = pass(exec)?;
            std::thread::sleep(std::time::Duration::from_secs_f64(gap.max(0.0)));
            let after = pass(exec)?;
            out.push((gap, after - steady));
        }
    }
    Ok(out)
}
