//! MTP speculative decoding yield: how many tokens a request emits per decode step,
//! and how many steps a request needs for its output.
//!
//! With `n` draft tokens and per-position acceptance `a_1..a_n` (`a_i`: draft `i` is
//! accepted given every draft before it was), a step emits `K` tokens with
//! `P(K >= 1) = 1` and `P(K >= k) = a_1 * .. * a_{k-1}` for `k = 2..=n+1`. Steps are
//! independent, so the steps a request needs for `T` tokens is the first `s` with
//! `K_1 + .. + K_s >= T`. `steps_for` draws it exactly, in three kinds of draws:
//! - while more than a block's maximum remains, the request cannot finish inside a
//!   block, so the sum of a block of steps is drawn at once from its convolved
//!   distribution (blocks of `BIG_BLOCK` steps, then of `BLOCK`);
//! - what remains then (at most `BLOCK` steps' maximum) is finished in one draw from
//!   the distribution of the steps it takes, tabulated for every remainder.
//!
//! A 1,000-token output at ~3 tokens a step then costs ~8 draws instead of ~330.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use spec::model::Model;

use super::config::ServingScenario;
use super::SimError;

/// How a simulated request's MTP acceptances are drawn (`serving.mtp.draws`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum MtpDraws {
    /// From the run's `mtp` stream, in the order requests start decoding (fast: a
    /// 1,000-token output costs a handful of draws; see the module's notes).
    #[default]
    Sampled,
    /// Each decode step of each request from a stream of its own, keyed by the run's
    /// seed, the request's arrival number and the step ([`keyed_accepted`]): `twin
    /// live`'s rule. Two runs that see the same requests then see the same
    /// acceptances whatever their timing (`twin validate live` simulates a run so);
    /// one draw per request per step.
    PerRequest,
}

/// Drafts accepted at decode step `step` (from 0) of the request that arrived
/// `req`-th (from 0) in a run of seed `seed`: draft `i` is accepted when the ones
/// before it were and a uniform draw from the (seed, request, step) stream falls below
/// `acceptance[i]`. The declared rule of `twin live` (random weights make a real
/// acceptance meaningless), which [`MtpDraws::PerRequest`] simulates.
pub fn keyed_accepted(seed: u64, req: u32, step: u32, acceptance: &[f64], drafts: usize) -> usize {
    let key = crate::serving::streams::hash_words(&[seed, 0x6d7470, req as u64, step as u64]);
    let mut rng = ChaCha8Rng::seed_from_u64(key);
    let mut a = 0;
    for i in 0..drafts {
        let u: f64 = rng.random();
        if u < acceptance.get(i).copied().unwrap_or(0.0) {
            a += 1;
        } else {
            break;
        }
    }
    a
}

/// Decode steps the `req`-th request needs for `tokens` tokens under
/// [`keyed_accepted`]: the first `s` with `(1 + a_0) + .. + (1 + a_{s-1}) >= tokens`
/// (at least one).
pub fn keyed_steps_for(tokens: u32, seed: u64, req: u32, acceptance: &[f64], drafts: usize) -> u32 {
    let mut left = tokens.max(1) as i64;
    let mut steps = 0u32;
    while left > 0 {
        left -= 1 + keyed_accepted(seed, req, steps, acceptance, drafts) as i64;
        steps += 1;
    }
    steps
}

/// Steps drawn at once while the request cannot finish within them.
const BLOCK: u32 = 16;
const BIG_BLOCK: u32 = 64;
/// Most tokens per step for which the block sums and the tail are tabulated (beyond,
/// steps are drawn one at a time).
const MAX_TABULATED: u32 = 16;

#[derive(Debug, Clone)]
pub struct MtpYield {
    /// Tokens per step: `step_cdf[j] = P(K <= 1 + j)`.
    step_cdf: Cdf,
    /// Tokens per block of `BLOCK` (`BIG_BLOCK`) steps: `cdf[j] = P(sum <= BLOCK + j)`.
    block_cdf: Cdf,
    big_block_cdf: Cdf,
    /// `tail[L - 1]`: the steps to emit `L` tokens, `L = 1..=BLOCK * max_per_step`:
    /// `cdf[j] = P(steps <= tail_min(L) + j)`.
    tail: Vec<Cdf>,
    max_per_step: u32,
    mean: f64,
}

/// The pmf of the sum of `count` independent draws of `pmf` (index 0: all at their
/// least).
fn convolved(pmf: &[f64], count: u32) -> Vec<f64> {
    let mut sum = vec![1.0];
    for _ in 0..count {
        let mut next = vec![0.0; sum.len() + pmf.len() - 1];
        for (i, &b) in sum.iter().enumerate() {
            for (j, &p) in pmf.iter().enumerate() {
                next[i + j] += b * p;
            }
        }
        sum = next;
    }
    sum
}

/// Fewest steps that can emit `tokens` at `max` tokens a step.
fn tail_min(tokens: u32, max: u32) -> u32 {
    tokens.div_ceil(max)
}

/// For each `L = 1..=limit`, the pmf of the steps to emit `L` tokens, from
/// `steps = tail_min(L)`: `P(steps = s) = P(T_{s-1} < L) - P(T_s < L)`, where `T_s`
/// (the tokens of `s` steps, at least `s`) is convolved step by step.
fn tail_pmfs(pmf: &[f64], limit: u32) -> Vec<Vec<f64>> {
    let max = pmf.len() as u32;
    let limit = limit as usize;
    // below[s][L] = P(T_s < L) for L = 0..=limit.
    let mut below = Vec::with_capacity(limit + 1);
    // T_0 = 0; `least` is T_s's least value (index 0 of `dist`).
    let mut dist = vec![1.0f64];
    for least in 0..=limit {
        let mut b = vec![0.0f64; limit + 1];
        let mut acc = 0.0f64;
        for (l, x) in b.iter_mut().enumerate() {
            // P(T_s < l) = sum over values v < l.
            if l > least && l - 1 - least < dist.len() {
                acc += dist[l - 1 - least];
            }
            *x = acc.min(1.0);
        }
        below.push(b);
        let mut next = vec![0.0; dist.len() + pmf.len() - 1];
        for (i, &d) in dist.iter().enumerate() {
            for (j, &p) in pmf.iter().enumerate() {
                next[i + j] += d * p;
            }
        }
        dist = next;
    }
    (1..=limit)
        .map(|l| {
            let lo = tail_min(l as u32, max) as usize;
            (lo..=l)
                .map(|s| (below[s - 1][l] - below[s][l]).max(0.0))
                .collect()
        })
        .collect()
}

fn cdf(pmf: &[f64]) -> Vec<f64> {
    let mut acc = 0.0;
    pmf.iter()
        .map(|p| {
            acc += p;
            acc
        })
        .collect()
}

/// A CDF with a guide table (Chen and Asau's): `guide[j]` is the first entry above
/// `j / n` (`n` guide entries), so the first entry above any `u >= j / n` is at or
/// after it: a draw scans a step or two instead of bisecting.
#[derive(Debug, Clone)]
struct Cdf {
    cdf: Vec<f64>,
    guide: Vec<u32>,
}

/// Guide entries per CDF entry.
const GUIDE_PER_ENTRY: usize = 4;

impl Cdf {
    fn new(pmf: &[f64]) -> Self {
        let cdf = cdf(pmf);
        let n = cdf.len() * GUIDE_PER_ENTRY;
        let guide = (0..n)
            .map(|j| cdf.partition_point(|&c| c <= j as f64 / n as f64) as u32)
            .collect();
        Cdf { cdf, guide }
    }

    /// Index of the first CDF entry above `u` in `[0, 1)` (the last one if rounding
    /// left the CDF below 1): the binary search's answer, from the guide's start.
    #[inline]
    fn draw(&self, u: f64) -> u32 {
        // One guide entry back: `u * len` may round up across an entry's boundary.
        let j = ((u * self.guide.len() as f64) as usize).min(self.guide.len());
        let mut i = self.guide[j.saturating_sub(1)] as usize;
        while i < self.cdf.len() && self.cdf[i] <= u {
            i += 1;
        }
        let i = i.min(self.cdf.len() - 1) as u32;
        debug_assert_eq!(
            i,
            self.cdf
                .partition_point(|&c| c <= u)
                .min(self.cdf.len() - 1) as u32
        );
        i
    }
}

impl MtpYield {
    /// `acceptance[i]` for draft position `i + 1`; an empty slice means no MTP (one
    /// token per step). Rates are clamped to [0, 1].
    pub fn new(acceptance: &[f64]) -> Self {
        let n = acceptance.len();
        // P(K >= k) for k = 1..=n+1, then the pmf of K (index k-1).
        let mut at_least = vec![1.0; n + 2];
        for k in 2..=n + 1 {
            at_least[k] = at_least[k - 1] * acceptance[k - 2].clamp(0.0, 1.0);
        }
        let pmf: Vec<f64> = (1..=n + 1)
            .map(|k| at_least[k] - if k <= n { at_least[k + 1] } else { 0.0 })
            .collect();
        let mean = at_least[1..=n + 1].iter().sum();
        let max_per_step = n as u32 + 1;
        let tabulated = max_per_step > 1 && max_per_step <= MAX_TABULATED;
        let (block_cdf, big_block_cdf, tail) = if tabulated {
            (
                Cdf::new(&convolved(&pmf, BLOCK)),
                Cdf::new(&convolved(&pmf, BIG_BLOCK)),
                tail_pmfs(&pmf, BLOCK * max_per_step)
                    .iter()
                    .map(|p| Cdf::new(p))
                    .collect(),
            )
        } else {
            (Cdf::new(&[1.0]), Cdf::new(&[1.0]), Vec::new())
        };
        MtpYield {
            step_cdf: Cdf::new(&pmf),
            block_cdf,
            big_block_cdf,
            tail,
            max_per_step,
            mean,
        }
    }

    /// Expected tokens per request per step: 1 + sum of the products of acceptances.
    pub fn mean_tokens_per_step(&self) -> f64 {
        self.mean
    }

    /// Tokens one step emits for one request (before clamping to what remains).
    pub fn tokens_in_step<R: Rng>(&self, rng: &mut R) -> u32 {
        if self.max_per_step == 1 {
            return 1;
        }
        1 + self.step_cdf.draw(rng.random::<f64>())
    }

    /// Decode steps until a request has emitted `tokens` (at least one step).
    pub fn steps_for<R: Rng>(&self, tokens: u32, rng: &mut R) -> u32 {
        if self.max_per_step == 1 || tokens <= 1 {
            return tokens.max(1);
        }
        let mut left = tokens as i64;
        let mut steps = 0u32;
        if self.tail.is_empty() {
            while left > 0 {
                left -= self.tokens_in_step(rng) as i64;
                steps += 1;
            }
            return steps;
        }
        for (block, cdf) in [(BIG_BLOCK, &self.big_block_cdf), (BLOCK, &self.block_cdf)] {
            let block_max = (block * self.max_per_step) as i64;
            while left > block_max {
                left -= (block + cdf.draw(rng.random::<f64>())) as i64;
                steps += block;
            }
        }
        // 1 <= left <= BLOCK * max_per_step: the tail's steps in one draw.
        let l = left as u32;
        steps + tail_min(l, self.max_per_step) + self.tail[l as usize - 1].draw(rng.random::<f64>())
    }
}

/// The MTP draft tokens and acceptance rates: the scenario's, else the model's.
pub fn resolve_mtp(sc: &ServingScenario, model: &Model) -> Result<(u32, Vec<f64>), SimError> {
    let m = model.mtp.as_ref();
    let n = sc
        .serving
        .mtp
        .draft_tokens
        .or(m.map(|m| m.draft_tokens))
        .unwrap_or(0);
    let a = sc
        .serving
        .mtp
        .acceptance
        .clone()
        .or(m.map(|m| m.acceptance.clone()))
        .unwrap_or_default();
    if n as usize > a.len() {
        // A scenario written for a model with an MTP module, run with one that has none
        // (`--set model=...`): say so, and how to turn the drafts off.
        let why = if m.is_none() && sc.serving.mtp.acceptance.is_none() {
            format!(
                "serving.mtp.draft_tokens = {n}, but model {} has no MTP module to draft with: set serving.mtp.draft_tokens = 0 (`--set serving.mtp.draft_tokens=0`), or give the drafts' acceptance rates (serving.mtp.acceptance)",
                model.name
            )
        } else {
            format!(
                "serving.mtp: {n} draft tokens but {} acceptance rates (set serving.mtp.acceptance or model.mtp.acceptance)",
                a.len()
            )
        };
        return Err(SimError::InvalidScenario(vec![why]));
    }
    Ok((n, a))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keyed rule: deterministic per (seed, request, step) whatever the order of
    /// the calls; its acceptance rate is the declared one (20,000 draws at 0.7: within
    /// 0.02, about 6 sd); a second draft only when the first was accepted (0.7 * 0.5).
    #[test]
    fn keyed_draws_are_per_request_and_keep_the_rates() {
        let late = keyed_accepted(7, 3, 5, &[0.7], 1);
        for k in 0..5 {
            keyed_accepted(7, 3, k, &[0.7], 1);
        }
        assert_eq!(keyed_accepted(7, 3, 5, &[0.7], 1), late);
        let n = 20_000u32;
        let one: usize = (0..n)
            .map(|k| keyed_accepted(1, k % 97, k, &[0.7], 1))
            .sum();
        assert!((one as f64 / n as f64 - 0.7).abs() < 0.02, "{one}");
        let two = (0..n)
            .filter(|&k| keyed_accepted(1, k % 89, k, &[0.7, 0.5], 2) == 2)
            .count();
        assert!((two as f64 / n as f64 - 0.35).abs() < 0.02, "{two}");
        assert_eq!(keyed_accepted(1, 0, 0, &[1.0, 1.0], 2), 2);
        assert_eq!(keyed_accepted(1, 0, 0, &[0.0, 1.0], 2), 0);
    }

    /// `keyed_steps_for` counts the steps the rule's own draws take, one by one.
    #[test]
    fn keyed_steps_count_the_rule_step_by_step() {
        for req in 0..50 {
            for tokens in [1u32, 2, 11, 100] {
                let (mut left, mut s) = (tokens as i64, 0u32);
                while left > 0 {
                    left -= 1 + keyed_accepted(9, req, s, &[0.8, 0.6], 2) as i64;
                    s += 1;
                }
                assert_eq!(keyed_steps_for(tokens, 9, req, &[0.8, 0.6], 2), s);
            }
        }
        // No drafts: one token a step.
        assert_eq!(keyed_steps_for(11, 9, 0, &[], 0), 11);
    }

    #[test]
    fn certain_and_no_acceptance_are_exact() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let all = MtpYield::new(&[1.0, 1.0, 1.0]);
        assert_eq!(all.mean_tokens_per_step(), 4.0);
        assert_eq!(all.steps_for(1000, &mut rng), 250);
        assert_eq!(all.steps_for(1001, &mut rng), 251);
        let none = MtpYield::new(&[0.0, 0.0]);
        assert_eq!(none.mean_tokens_per_step(), 1.0);
        assert_eq!(none.steps_for(77, &mut rng), 77);
        let off = MtpYield::new(&[]);
        assert_eq!(off.steps_for(5, &mut rng), 5);
        assert_eq!(off.steps_for(0, &mut rng), 1);
    }

    /// The tail's distributions, hand-derived for K = 1 or 2 with probability 1/2 each:
    /// 2 tokens take 1 step (K = 2) or 2; 3 tokens take 2 steps unless both emit 1.
    #[test]
    fn tail_distributions_match_hand_derivation() {
        let t = tail_pmfs(&[0.5, 0.5], 4);
        assert_eq!(t[0], vec![1.0]);
        assert_eq!(t[1], vec![0.5, 0.5]);
        assert_eq!(t[2], vec![0.75, 0.25]);
        // 4 tokens: 2 steps if both emit 2 (1/4); 4 steps if the first three emit 1
        // each (1/8); 3 steps otherwise (5/8).
        assert_eq!(t[3], vec![0.25, 0.625, 0.125]);
        for p in &t {
            assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
    }

    /// The block draws give the same distribution of steps as stepping one at a time
    /// (compared on mean and variance over 20,000 requests each, seeded).
    #[test]
    fn block_draws_match_single_steps() {
        let y = MtpYield::new(&[0.8, 0.7, 0.6]);
        assert!((y.mean_tokens_per_step() - (1.0 + 0.8 + 0.56 + 0.336)).abs() < 1e-12);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let n = 20_000;
        let stats = |xs: &[f64]| {
            let m = xs.iter().sum::<f64>() / xs.len() as f64;
            let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / xs.len() as f64;
            (m, v)
        };
        for tokens in [3u32, 70, 1000] {
            let fast: Vec<f64> = (0..n)
                .map(|_| y.steps_for(tokens, &mut rng) as f64)
                .collect();
            let slow: Vec<f64> = (0..n)
                .map(|_| {
                    let (mut left, mut s) = (tokens as i64, 0);
                    while left > 0 {
                        left -= y.tokens_in_step(&mut rng) as i64;
                        s += 1;
                    }
                    s as f64
                })
                .collect();
            let (mf, vf) = stats(&fast);
            let (ms, vs) = stats(&slow);
            let se = (vs / n as f64).sqrt().max(1e-9);
            assert!((mf - ms).abs() < 5.0 * se, "{tokens}: mean {mf} vs {ms}");
            assert!(
                (vf - vs).abs() <= 0.1 * vs.max(0.05),
                "{tokens}: var {vf} vs {vs}"
            );
        }
    }
}
