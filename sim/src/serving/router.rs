//! Routing: pure functions from the router's configuration, the pool's state and the
//! request to a placement. They change nothing; the caller applies what they choose.
//! Ties go to the lowest index.
//!
//! The simulator's rack and the live scheduler (`live::sched`) both route with these
//! functions, each over its own load view: the per-instance loads and prefix hits as
//! slices, and each rank as a [`RankLoad`].

use super::config::{DecodeRouter, PrefillRank, PrefillRouter, RouterConfig};
use super::pool::{Group, Rank};

/// What the rank routers read of one rank.
pub trait RankLoad {
    /// Requests on the rank in any state.
    fn requests(&self) -> u64;
    /// Prefill tokens queued on the rank.
    fn prefill_tokens(&self) -> u64;
    /// Estimated seconds of the prefill work queued on the rank (`LeastCost`).
    fn est_load_s(&self) -> f64;
    /// KV tokens reserved on the rank plus those of the requests waiting for it
    /// (`LeastTokens`).
    fn kv_tokens(&self) -> u64;
}

impl<T: RankLoad + ?Sized> RankLoad for &T {
    fn requests(&self) -> u64 {
        (**self).requests()
    }
    fn prefill_tokens(&self) -> u64 {
        (**self).prefill_tokens()
    }
    fn est_load_s(&self) -> f64 {
        (**self).est_load_s()
    }
    fn kv_tokens(&self) -> u64 {
        (**self).kv_tokens()
    }
}

impl RankLoad for Rank {
    fn requests(&self) -> u64 {
        Rank::requests(self) as u64
    }
    fn prefill_tokens(&self) -> u64 {
        self.prefill_tokens
    }
    fn est_load_s(&self) -> f64 {
        self.est_load_s
    }
    fn kv_tokens(&self) -> u64 {
        self.kv_reserved + self.pending_kv
    }
}

/// The prefill instance (position in its pool) for a request of `input` tokens.
/// `loads[i]` is instance `i`'s queued prefill work (`Group::prefill_load`);
/// `hit_blocks[i]` the leading prompt blocks its prefix cache holds (read by
/// `PrefixAffinity` only), `block_tokens` tokens each; `placed` counts the pool's
/// earlier placements.
pub fn prefill_instance(
    cfg: &RouterConfig,
    placed: u64,
    input: u64,
    loads: &[u64],
    hit_blocks: &[u64],
    block_tokens: u64,
) -> usize {
    let n = loads.len();
    match cfg.prefill {
        PrefillRouter::RoundRobin => (placed % n as u64) as usize,
        PrefillRouter::LeastLoad => argmin(loads.iter().map(|&l| l as f64)),
        PrefillRouter::PrefixAffinity => {
            // Least expected work: the tokens queued ahead plus this request's own
            // uncached tokens there (weighted, see `prefill_recompute_weight`). A long
            // cached context keeps a session on its instance; a shared system prompt
            // alone does not pile every session onto the first instance that cached it.
            let w = cfg.prefill_recompute_weight;
            argmin(loads.iter().zip(hit_blocks).map(|(&load, &hit)| {
                let uncached = input - (hit * block_tokens).min(input - 1);
                load as f64 + w * uncached as f64
            }))
        }
    }
}

/// The rank of a prefill (or mixed) instance a request is queued on; it stays there
/// for all its chunks. A mixed pool balances requests whatever the policy.
pub fn prefill_rank<R: RankLoad>(
    policy: PrefillRank,
    mixed: bool,
    ranks: impl IntoIterator<Item = R>,
) -> u32 {
    argmin(ranks.into_iter().map(|rk| match (mixed, policy) {
        (true, _) | (_, PrefillRank::LeastRequests) => rk.requests() as f64,
        (_, PrefillRank::LeastTokens) => rk.prefill_tokens() as f64,
        (_, PrefillRank::LeastCost) => rk.est_load_s(),
    })) as u32
}

/// The decode (position in the pool, rank) a prefilled request goes to
/// (`decode_rank_in` over the pool's groups, `dep` ranks each as the first has).
pub(crate) fn decode_rank(policy: DecodeRouter, placed: u64, groups: &[Group]) -> (usize, u32) {
    let dep = groups.first().map_or(1, |g| g.ranks.len()).max(1);
    let ranks = groups.iter().flat_map(|g| g.ranks.iter());
    decode_rank_in(policy, placed, groups.len(), dep, ranks)
}

/// The decode (position in the pool, rank) a prefilled request goes to, among
/// `groups` groups of `dep` ranks each (`ranks`: group by group, in order); `placed`
/// counts the pool's earlier placements.
pub fn decode_rank_in<R: RankLoad>(
    policy: DecodeRouter,
    placed: u64,
    groups: usize,
    dep: usize,
    ranks: impl IntoIterator<Item = R>,
) -> (usize, u32) {
    let ranks = ranks.into_iter();
    let i = match policy {
        DecodeRouter::RoundRobin => (placed % (groups * dep) as u64) as usize,
        DecodeRouter::LeastRequests => argmin(ranks.map(|rk| rk.requests() as f64)),
        DecodeRouter::LeastTokens => argmin(ranks.map(|rk| rk.kv_tokens() as f64)),
    };
    (i / dep, (i % dep) as u32)
}

/// Position of the first smallest value (0 when empty).
fn argmin(xs: impl Iterator<Item = f64>) -> usize {
    let mut best = (f64::INFINITY, 0);
    for (i, x) in xs.enumerate() {
        if x < best.0 {
            best = (x, i);
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::pool::Role;
    use crate::serving::request::ReqId;
    use crate::serving::workload::TRACE_BLOCK_TOKENS;

    fn cfg(prefill: PrefillRouter) -> RouterConfig {
        RouterConfig {
            prefill,
            prefill_recompute_weight: 2.0,
            ..RouterConfig::default()
        }
    }

    fn rank(prefill_tokens: u64, requests: usize, est_load_s: f64) -> Rank {
        Rank {
            prefill_tokens,
            prefill_q: (0..requests as u32).map(ReqId).collect(),
            est_load_s,
            ..Rank::default()
        }
    }

    #[test]
    fn prefill_round_robin_cycles() {
        let c = cfg(PrefillRouter::RoundRobin);
        let picks: Vec<usize> = (0..5)
            .map(|k| prefill_instance(&c, k, 1000, &[9, 0, 0], &[], TRACE_BLOCK_TOKENS))
            .collect();
        assert_eq!(picks, [0, 1, 2, 0, 1]);
    }

    #[test]
    fn prefill_least_load_takes_the_first_lightest() {
        let c = cfg(PrefillRouter::LeastLoad);
        assert_eq!(
            prefill_instance(&c, 0, 1000, &[5, 3, 3, 7], &[], TRACE_BLOCK_TOKENS),
            1
        );
    }

    /// Work there = queued + 2 x uncached. A 10-block (5120-token) prompt: instance 0
    /// holds nothing (0 + 2 x 5120 = 10240), instance 1 holds 8 blocks but has 5000
    /// queued (5000 + 2 x 1024 = 7048), instance 2 holds 2 blocks, idle
    /// (0 + 2 x 4096 = 8192): instance 1. A full hit still leaves one token to compute.
    #[test]
    fn prefix_affinity_weighs_queue_against_recompute() {
        let c = cfg(PrefillRouter::PrefixAffinity);
        assert_eq!(
            prefill_instance(&c, 0, 5120, &[0, 5000, 0], &[0, 8, 2], TRACE_BLOCK_TOKENS),
            1
        );
        // Instance 1 busier: 6200 + 2 x 1024 = 8248 > 8192, so instance 2.
        assert_eq!(
            prefill_instance(&c, 0, 5120, &[0, 6200, 0], &[0, 8, 2], TRACE_BLOCK_TOKENS),
            2
        );
        // Everything cached everywhere: one token each; the least loaded wins.
        assert_eq!(
            prefill_instance(&c, 0, 5120, &[4, 3, 9], &[10, 10, 10], TRACE_BLOCK_TOKENS),
            1
        );
    }

    #[test]
    fn prefill_rank_policies() {
        let ranks = [rank(100, 3, 0.5), rank(900, 1, 0.2), rank(50, 2, 0.9)];
        assert_eq!(prefill_rank(PrefillRank::LeastTokens, false, &ranks), 2);
        assert_eq!(prefill_rank(PrefillRank::LeastRequests, false, &ranks), 1);
        assert_eq!(prefill_rank(PrefillRank::LeastCost, false, &ranks), 1);
        // A mixed pool balances requests whatever the policy.
        assert_eq!(prefill_rank(PrefillRank::LeastTokens, true, &ranks), 1);
    }

    fn group(ranks: Vec<Rank>) -> Group {
        Group::new(Role::Decode, 0, 1, ranks)
    }

    #[test]
    fn decode_round_robin_walks_groups_then_ranks() {
        let groups = [
            group(vec![Rank::default(), Rank::default()]),
            group(vec![Rank::default(), Rank::default()]),
        ];
        let picks: Vec<(usize, u32)> = (0..5)
            .map(|k| decode_rank(DecodeRouter::RoundRobin, k, &groups))
            .collect();
        assert_eq!(picks, [(0, 0), (0, 1), (1, 0), (1, 1), (0, 0)]);
    }

    #[test]
    fn decode_least_requests_and_least_tokens() {
        let busy = |requests: u32, reserved: u64, pending_kv: u64| Rank {
            transferring: requests,
            kv_reserved: reserved,
            pending_kv,
            ..Rank::default()
        };
        let groups = [
            group(vec![busy(3, 100, 0), busy(2, 500, 0)]),
            group(vec![busy(2, 50, 100), busy(4, 10, 0)]),
        ];
        assert_eq!(decode_rank(DecodeRouter::LeastRequests, 0, &groups), (0, 1));
        // Tokens: 100, 500, 50 + 100 waiting, 10.
        assert_eq!(decode_rank(DecodeRouter::LeastTokens, 0, &groups), (1, 1));
    }
}
