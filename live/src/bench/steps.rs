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
use sim::serving::SimStep;
use std::collections::BTreeMap;

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

impl Bench {
    /// The server's steps, read from when each request's tokens arrived: tokens that
    /// arrive within half the median gap between a request's tokens of the last one
    /// belong to one step, unless a request already has a token in it (a request gets
    /// one token a step). `None` where [`unreadable`] says why.
    pub fn read_steps(&self) -> Option<ReadSteps> {
        if unreadable(self).is_some() {
            return None;
        }
        // (time, request, first token)
        let mut events: Vec<(f64, usize, bool)> = Vec::new();
        let mut gaps: Vec<f64> = Vec::new();
        for (i, r) in self.requests.iter().enumerate() {
            let mut t = r.sent_s? + r.ttft_s;
            events.push((t, i, true));
            for &g in &r.itls_s {
                t += g;
                events.push((t, i, false));
                gaps.push(g);
            }
        }
        events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        gaps.sort_by(f64::total_cmp);
        let median_gap = gaps[gaps.len() / 2];
        let join = 0.5 * median_gap;
        // Bursts: their first time, prompts finished, requests decoded, and whether a
        // request they decoded had its last token in the burst before.
        struct Burst {
            t: f64,
            firsts: usize,
            decodes: usize,
            continued: bool,
        }
        let mut bursts: Vec<Burst> = Vec::new();
        let mut last_t = f64::NEG_INFINITY;
        // The burst each request's last token fell in.
        let mut last_burst: Vec<usize> = vec![usize::MAX; self.requests.len()];
        for &(t, i, first) in &events {
            let k = bursts.len();
            let open = k > 0 && t - last_t <= join && last_burst[i] != k - 1;
            if !open {
                bursts.push(Burst {
                    t,
                    firsts: 0,
                    decodes: 0,
                    continued: false,
                });
            }
            let k = bursts.len() - 1;
            let b = &mut bursts[k];
            if first {
                b.firsts += 1;
            } else {
                b.decodes += 1;
                b.continued |= k > 0 && last_burst[i] == k - 1;
            }
            last_burst[i] = k;
            last_t = t;
        }
        let mut steps = Vec::with_capacity(bursts.len());
        let mut bunched = 0;
        for (k, b) in bursts.iter().enumerate() {
            let gap_s = if k > 0 { b.t - bursts[k - 1].t } else { 0.0 };
            if k > 0 && gap_s < 0.25 * median_gap {
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
        Some(ReadSteps { steps, bunched })
    }
}

/// A kind of step as a client sees it: prompts finished and requests decoded.
pub fn kind(prompts_done: usize, decodes: usize) -> String {
    let bucket = |n: usize| match n {
        0..=4 => n.to_string(),
        5..=8 => "5-8".to_string(),
        9..=16 => "9-16".to_string(),
        17..=32 => "17-32".to_string(),
        33..=64 => "33-64".to_string(),
        65..=128 => "65-128".to_string(),
        129..=256 => "129-256".to_string(),
        _ => ">256".to_string(),
    };
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

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
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
        .map(|(kind, (mut m, mut t))| StepKind {
            kind,
            measured_steps: m.len(),
            measured_ms_p50: median(&mut m),
            twin_steps: t.len(),
            twin_ms_p50: median(&mut t),
        })
        .collect();
    out.sort_by(|a, b| {
        b.measured_steps
            .cmp(&a.measured_steps)
            .then(a.kind.cmp(&b.kind))
    });
    out
}

#[cfg(test)]
#[path = "steps_tests.rs"]
mod tests;
