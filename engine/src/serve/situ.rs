//! Synthetic forward passes with their op calls timed: how calibration measures the live
//! engine's ops in their real context (weights, KV and activations as a forward pass
//! leaves them in the caches), independently of any run.
//!
//! One long synthetic prompt is prefilled first (untimed) on the cache's first pages;
//! each pass then reads that prompt up to its context through a block table that shares
//! its pages, and writes its own rows into private pages after it, so passes of any
//! context and batch need no further prefill.

use super::exec::{Executor, Seq, Solo};
use crate::op::live::Call;
use crate::{EngineError, Result};

/// A forward pass to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// A prefill chunk of `tokens` new tokens on `context` cached ones.
    Prefill { tokens: usize, context: usize },
    /// A decode step of `batch` requests at `context` tokens each.
    Decode { batch: usize, context: usize },
}

/// Runs every pass once untimed, then `reps` times traced; returns every traced call
/// with its time (the op and the host work leading to it).
pub fn timed_passes(
    exec: &mut Executor,
    passes: &[Pass],
    drafts: usize,
    reps: usize,
    seed: u64,
) -> Result<Vec<(Call, f64)>> {
    let cfg = exec.config().clone();
    let page = cfg.page_size;
    let round = |c: usize| c / page * page;
    let max_ctx = passes
        .iter()
        .map(|p| match *p {
            Pass::Prefill { context, .. } | Pass::Decode { context, .. } => round(context),
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
    let token =
        |i: usize| ((seed as usize).wrapping_mul(31).wrapping_add(i * 7919) % cfg.vocab) as u32;
    let base: Vec<u32> = (0..base_pages as u32).collect();
    // The shared prompt, untimed.
    let mut at = 0;
    while at < max_ctx {
        let n = 256.min(max_ctx - at);
        exec.forward(
            &[Seq {
                tokens: (at..at + n).map(token).collect(),
                start: at,
                pages: base.clone(),
                accept: None,
            }],
            0,
            &mut Solo,
        )?;
        at += n;
    }
    let seqs = |p: &Pass| -> (Vec<Seq>, usize) {
        let mut next = base_pages as u32;
        let mut take = |n: usize| {
            let v: Vec<u32> = (next..next + n as u32).collect();
            next += n as u32;
            v
        };
        match *p {
            Pass::Prefill { tokens, context } => {
                let c = round(context);
                let mut pages = base[..c / page].to_vec();
                pages.extend(take(tokens.div_ceil(page)));
                let s = Seq {
                    tokens: (c..c + tokens).map(token).collect(),
                    start: c,
                    pages,
                    accept: None,
                };
                (vec![s], 0)
            }
            Pass::Decode { batch, context } => {
                let c = round(context);
                let v = (0..batch)
                    .map(|b| {
                        let mut pages = base[..c / page].to_vec();
                        pages.extend(take((1 + drafts).div_ceil(page)));
                        Seq {
                            tokens: (0..1 + drafts).map(|i| token(c + b + i)).collect(),
                            start: c,
                            pages,
                            accept: Some(0),
                        }
                    })
                    .collect();
                (v, drafts)
            }
        }
    };
    let mut out = Vec::new();
    for p in passes {
        let (s, d) = seqs(p);
        exec.forward(&s, d, &mut Solo)?;
        exec.set_trace(true);
        for _ in 0..reps {
            exec.forward(&s, d, &mut Solo)?;
            out.extend(exec.take_timed_trace());
        }
        exec.set_trace(false);
    }
    Ok(out)
}
