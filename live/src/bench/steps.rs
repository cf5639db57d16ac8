//! The server's steps read back from a benchmark file's token times, and set beside
//! twin's.
//!
//! A streaming client records when each token of each request arrived (`start_times`,
//! `ttfts`, `itls`). A server that batches its requests sends one token to each of them
//! per step (its first token to a request whose prompt the step finished), so the
//! tokens of all requests fall into bursts, one a step. Read back, a burst says what the
//! step did that the client can see (how many prompts it finished, how many requests it
//! decoded) and the time since the burst before says how long it took. Partial prompt
//! chunks are invisible from the client: a step that only advanced a prompt reads as a
//! decode step, longer; twin's steps are classed the same way, by what a client would
//! see of them.

use super::Bench;
use serde::Serialize;
use sim::cost::{CostModel, Phase, ReqSlice, StepShape};
use sim::serving::SimStep;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// One step of the server, read back from the tokens its client received.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadStep {
    /// When its tokens arrived, seconds after the run's first send.
    pub at_s: f64,
    /// Seconds since the burst before it.
    pub gap_s: f64,
    /// Requests whose first token it sent (prompts it finished).
    pub prompts_done: usize,
    /// Requests it sent a later token to (requests it decoded).
    pub decodes: usize,
    /// Whether a request it decoded also had a token in the step before: the server
    /// was stepping throughout, so `gap_s` is the step's time (not an idle spell, and
    /// not a front end's delay before a first prompt).
    pub continued: bool,
}

/// What a file's token times say, read in one pass ([`Bench::read_back`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ReadBack {
    pub steps: ReadSteps,
    pub decodes: Vec<ReadDecode>,
    pub front_end: Option<FrontEndBounds>,
}

/// A decode step read back whole: its time and each request's KV context.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadDecode {
    pub gap_s: f64,
    pub contexts: Vec<u64>,
}

/// The steps of a benchmark file: those read, and what was left out.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadSteps {
    pub steps: Vec<ReadStep>,
    /// Bursts that came sooner than a quarter of the median gap between a request's
    /// tokens after the burst before: tokens a stalled stream delivered late, not steps.
    pub bunched: usize,
}

/// Why a file's steps cannot be read back.
pub fn unreadable(bench: &Bench) -> Option<&'static str> {
    if bench.requests.iter().any(|r| r.sent_s.is_none()) {
        Some("the file records no send times (`start_times`)")
    } else if bench.tokens_per_gap > 1.0 {
        Some("the server streamed several tokens per chunk")
    } else if bench.requests.iter().all(|r| r.itls_s.is_empty()) {
        Some("no request has a second token")
    } else {
        None
    }
}

/// A burst of tokens: when it began, the prompts it finished, the requests it decoded,
/// and whether a request it decoded had its last token in the burst before.
struct Burst {
    t: f64,
    firsts: usize,
    decodes: usize,
    continued: bool,
    /// The KV context each request it decoded computed its token on (the prompt and
    /// the tokens before the one fed in).
    decoded: Vec<u64>,
}

/// A file's bursts, each request's first-token burst, and the median gap between a
/// request's tokens.
struct Bursts {
    bursts: Vec<Burst>,
    first_of: Vec<usize>,
    median_gap: f64,
}

/// The front end a file's token times allow: each request that came through it
/// between two steps bounds it (see [`Bench::front_end_bounds`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FrontEndBounds {
    /// The 90th percentile of the lower bounds, and how many there are.
    pub lower_s: f64,
    pub lower_n: usize,
    /// The least of the upper bounds, and how many there are.
    pub upper_s: f64,
    pub upper_n: usize,
}

/// The next token of one request: when, whose, and which (0 its first).
#[derive(Debug, PartialEq)]
struct Next {
    t: f64,
    i: usize,
    j: usize,
}

impl Eq for Next {}

impl PartialOrd for Next {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Next {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.t
            .total_cmp(&other.t)
            .then(self.i.cmp(&other.i))
            .then(self.j.cmp(&other.j))
    }
}

/// A file's tokens in the order they arrived (ties: by request), merged from each
/// request's own: (time after the first send, request, the KV context its token was
/// computed on, none for a first token). Memory goes with the requests, not the
/// tokens.
pub(super) struct Events<'a> {
    bench: &'a Bench,
    heap: BinaryHeap<Reverse<Next>>,
}

impl<'a> Events<'a> {
    pub(super) fn new(bench: &'a Bench) -> Events<'a> {
        let heap = bench
            .requests
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                Some(Reverse(Next {
                    t: r.sent_s? + r.ttft_s,
                    i,
                    j: 0,
                }))
            })
            .collect();
        Events { bench, heap }
    }
}

impl Iterator for Events<'_> {
    type Item = (f64, usize, Option<u64>);

    fn next(&mut self) -> Option<Self::Item> {
        let Reverse(Next { t, i, j }) = self.heap.pop()?;
        let r = &self.bench.requests[i];
        if let Some(&g) = r.itls_s.get(j) {
            self.heap.push(Reverse(Next {
                t: t + g,
                i,
                j: j + 1,
            }));
        }
        // The step after the first token computes on the prompt's KV, each later one
        // on one token more.
        Some((t, i, (j > 0).then(|| r.input + j as u64 - 1)))
    }
}

/// The median gap between a request's tokens (of at most a million, evenly spaced
/// over the file, where it holds more). `None` without a gap.
fn median_gap(bench: &Bench) -> Option<f64> {
    let n: usize = bench.requests.iter().map(|r| r.itls_s.len()).sum();
    let stride = (n / 1_000_000).max(1);
    let mut gaps: Vec<f64> = bench
        .requests
        .iter()
        .flat_map(|r| r.itls_s.iter().copied())
        .step_by(stride)
        .collect();
    if gaps.is_empty() {
        return None;
    }
    let mid = gaps.len() / 2;
    Some(*gaps.select_nth_unstable_by(mid, f64::total_cmp).1)
}

impl Bench {
    /// Tokens that arrive within half the median gap between a request's tokens of the
    /// last one belong to one burst, unless a request already has a token in it (a
    /// request gets one token a step). With `contexts`, each burst keeps the KV
    /// context of every request it decoded.
    fn bursts(&self, contexts: bool) -> Option<Bursts> {
        if unreadable(self).is_some() {
            return None;
        }
        let median_gap = median_gap(self)?;
        let join = 0.5 * median_gap;
        let mut bursts: Vec<Burst> = Vec::new();
        let mut last_t = f64::NEG_INFINITY;
        // The burst each request's last token fell in, and its first.
        let mut last_burst: Vec<usize> = vec![usize::MAX; self.requests.len()];
        let mut first_of: Vec<usize> = vec![usize::MAX; self.requests.len()];
        for (t, i, context) in Events::new(self) {
            let k = bursts.len();
            let open = k > 0 && t - last_t <= join && last_burst[i] != k - 1;
            if !open {
                bursts.push(Burst {
                    t,
                    firsts: 0,
                    decodes: 0,
                    continued: false,
                    decoded: Vec::new(),
                });
            }
            let k = bursts.len() - 1;
            let b = &mut bursts[k];
            if let Some(context) = context {
                b.decodes += 1;
                b.continued |= k > 0 && last_burst[i] == k - 1;
                if contexts {
                    b.decoded.push(context);
                }
            } else {
                b.firsts += 1;
                first_of[i] = k;
            }
            last_burst[i] = k;
            last_t = t;
        }
        Some(Bursts {
            bursts,
            first_of,
            median_gap,
        })
    }

    /// The server's steps, read from when each request's tokens arrived (bursts, see
    /// [`Bench::bursts`]). `None` where [`unreadable`] says why.
    pub fn read_steps(&self) -> Option<ReadSteps> {
        Some(self.bursts(false)?.steps())
    }

    /// The decode steps read back whole, for pricing each exactly ([`ReadDecode`]).
    pub fn read_decodes(&self) -> Option<Vec<ReadDecode>> {
        Some(self.bursts(true)?.decodes())
    }

    /// The front end the file's token times allow ([`FrontEndBounds`]), for a server
    /// that forms each step when the one before starts (`ahead`) or when it ends.
    pub fn front_end_bounds(&self, ahead: bool) -> Option<FrontEndBounds> {
        self.bursts(false)?.front_end(self, ahead)
    }

    /// All three from one pass over the file's tokens: its steps, its decode steps
    /// read back whole, and the front end its token times allow.
    pub fn read_back(&self, ahead: bool) -> Option<ReadBack> {
        let b = self.bursts(true)?;
        Some(ReadBack {
            steps: b.steps(),
            decodes: b.decodes(),
            front_end: b.front_end(self, ahead),
        })
    }
}

impl Bursts {
    /// The steps: every burst but those that came sooner than a quarter of the median
    /// gap after the one before (tokens delivered late), counted instead.
    fn steps(&self) -> ReadSteps {
        let bursts = &self.bursts;
        let mut steps = Vec::with_capacity(bursts.len());
        let mut bunched = 0;
        for (k, b) in bursts.iter().enumerate() {
            let gap_s = if k > 0 { b.t - bursts[k - 1].t } else { 0.0 };
            if k > 0 && gap_s < 0.25 * self.median_gap {
                bunched += 1;
                continue;
            }
            steps.push(ReadStep {
                at_s: b.t,
                gap_s,
                prompts_done: b.firsts,
                decodes: b.decodes,
                continued: b.continued,
            });
        }
        ReadSteps { steps, bunched }
    }

    /// The decode steps read back whole: the steps that ran back to back, finished no
    /// prompt and came no sooner than a quarter of the median gap after the one before
    /// (as [`Bursts::steps`] keeps them), each with its time and its requests' KV
    /// contexts (prompt and tokens before; empty unless the bursts kept them). A step
    /// that also carried a prompt's chunk reads as one of them, longer.
    fn decodes(&self) -> Vec<ReadDecode> {
        let bursts = &self.bursts;
        bursts
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(k, b)| {
                b.continued && b.firsts == 0 && b.t - bursts[k - 1].t >= 0.25 * self.median_gap
            })
            .map(|(k, b)| ReadDecode {
                gap_s: b.t - bursts[k - 1].t,
                contexts: b.decoded.clone(),
            })
            .collect()
    }

    /// The front end (from the client's send to the scheduler, and the first token's
    /// way back: what `serving.frontend_s` prices) that `bench`'s token times allow,
    /// for a server that forms each step when the one before starts (`ahead`, async
    /// scheduling) or when it ends. A request whose first token came with step k, where
    /// steps k - 2 to k (k - 1 to k when not ahead) ran back to back, was through the
    /// front end when step k was formed: the front end is at most that instant (the
    /// burst of the step before it, or of that step, as the client saw it) less its
    /// send. Where step k - 1 had room (it finished no prompt and took no longer than
    /// one and a half median gaps between a request's tokens: a decode step, no
    /// prompt's chunk in it), the request was not through when step k - 1 was formed:
    /// the front end is at least that instant less its send. The lower bounds' 90th
    /// percentile (a step that had no room all the same makes one too high) and the
    /// least upper bound. `None` where either kind of bound is missing.
    fn front_end(&self, bench: &Bench, ahead: bool) -> Option<FrontEndBounds> {
        let bursts = &self.bursts;
        let lag = if ahead { 2 } else { 1 };
        let (mut lower, mut upper) = (Vec::new(), Vec::new());
        for (r, &k) in bench.requests.iter().zip(&self.first_of) {
            let Some(sent) = r.sent_s else { continue };
            if k == usize::MAX || k < lag + 1 || !(k - lag..=k).all(|j| bursts[j].continued) {
                continue;
            }
            upper.push(bursts[k - lag].t - sent);
            let room = bursts[k - 1].firsts == 0
                && bursts[k - 1].t - bursts[k - 2].t <= 1.5 * self.median_gap;
            if room {
                lower.push(bursts[k - 1 - lag].t - sent);
            }
        }
        if lower.is_empty() || upper.is_empty() {
            return None;
        }
        lower.sort_by(f64::total_cmp);
        let p90 = lower[((lower.len() - 1) as f64 * 0.9).round() as usize];
        Some(FrontEndBounds {
            lower_s: p90,
            lower_n: lower.len(),
            upper_s: upper.iter().copied().fold(f64::INFINITY, f64::min),
            upper_n: upper.len(),
        })
    }
}

/// A kind of step as a client sees it: prompts finished and requests decoded.
pub fn kind(prompts_done: usize, decodes: usize) -> String {
    let bucket = |n: usize| crate::compare::size_bucket(n as u64, 4);
    let reqs = bucket(decodes);
    match prompts_done {
        0 => format!("decode, {reqs} req"),
        1 => format!("1 prompt done + {reqs} req"),
        p => format!("{} prompts done + {reqs} req", bucket(p)),
    }
}

/// One kind of step, measured and twin's: how many and their median time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepKind {
    pub kind: String,
    pub measured_steps: usize,
    pub measured_ms_p50: f64,
    pub twin_steps: usize,
    /// NaN where twin ran no such step.
    pub twin_ms_p50: f64,
}

/// The read steps that ran back to back (`continued`) beside twin's steps that decoded
/// (those run back to back in a busy engine), by kind, the kinds with the most
/// measured steps first; kinds twin ran but the file shows none of are left out.
pub fn beside(read: &ReadSteps, twin: &[SimStep]) -> Vec<StepKind> {
    let mut kinds: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for s in read.steps.iter().filter(|s| s.continued) {
        kinds
            .entry(kind(s.prompts_done, s.decodes))
            .or_default()
            .0
            .push(1e3 * s.gap_s);
    }
    for s in twin.iter().filter(|s| s.decode_requests > 0) {
        if let Some(k) = kinds.get_mut(&kind(s.prompts_done as usize, s.decode_requests as usize)) {
            k.1.push(1e3 * s.step_s);
        }
    }
    let mut out: Vec<StepKind> = kinds
        .into_iter()
        .map(|(kind, (m, t))| StepKind {
            kind,
            measured_steps: m.len(),
            measured_ms_p50: spec::stats::median(&m),
            twin_steps: t.len(),
            twin_ms_p50: spec::stats::median(&t),
        })
        .collect();
    out.sort_by(|a, b| {
        b.measured_steps
            .cmp(&a.measured_steps)
            .then(a.kind.cmp(&b.kind))
    });
    out
}

/// The decode steps read back, each priced exactly by a cost model: how far its
/// prices lie from the steps' measured times, and by batch size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecodesPriced {
    pub steps: usize,
    /// Mean absolute error of a step's price against its time.
    pub mape: f64,
    /// Signed error of the priced total against the measured total.
    pub bias: f64,
    pub kinds: Vec<DecodeKind>,
}

/// The decode steps of one batch size, measured and priced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecodeKind {
    pub kind: String,
    pub steps: usize,
    pub measured_ms_mean: f64,
    pub twin_ms_mean: f64,
}

/// Prices each read-back decode step by `model` at its batch (the requests dealt over
/// `ranks` ranks in turn, one token each at its KV context). `None` without steps.
pub fn price_decodes(
    model: &dyn CostModel,
    ranks: usize,
    decodes: &[ReadDecode],
) -> Option<DecodesPriced> {
    if decodes.is_empty() {
        return None;
    }
    let ranks = ranks.max(1);
    let mut kinds: BTreeMap<String, (usize, f64, f64)> = BTreeMap::new();
    let (mut ape, mut measured, mut priced) = (0.0, 0.0, 0.0);
    let mut slices: Vec<Vec<ReqSlice>> = vec![Vec::new(); ranks];
    for d in decodes {
        for r in &mut slices {
            r.clear();
        }
        for (j, &c) in d.contexts.iter().enumerate() {
            slices[j % ranks].push(ReqSlice::one(1, c));
        }
        let p = model
            .step(&StepShape {
                phase: Phase::Decode,
                ranks: &slices,
                decode_ranks: &[],
                draft_tokens: 0,
            })
            .step_s;
        ape += ((p - d.gap_s) / d.gap_s).abs();
        measured += d.gap_s;
        priced += p;
        let k = kinds.entry(kind(0, d.contexts.len())).or_default();
        k.0 += 1;
        k.1 += d.gap_s;
        k.2 += p;
    }
    let mut kinds: Vec<DecodeKind> = kinds
        .into_iter()
        .map(|(kind, (n, m, p))| DecodeKind {
            kind,
            steps: n,
            measured_ms_mean: 1e3 * m / n as f64,
            twin_ms_mean: 1e3 * p / n as f64,
        })
        .collect();
    kinds.sort_by(|a, b| b.steps.cmp(&a.steps).then(a.kind.cmp(&b.kind)));
    Some(DecodesPriced {
        steps: decodes.len(),
        mape: ape / decodes.len() as f64,
        bias: crate::compare::rel(priced, measured),
        kinds,
    })
}

#[cfg(test)]
#[path = "steps_tests.rs"]
mod tests;
