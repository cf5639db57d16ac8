//! Routing: a request's prefill instance and rank, and its decode group and rank, by
//! the scenario's router. The placements are `sim::serving::router`'s functions over
//! the live scheduler's own load view (`group_load`, the prefix hits, `RankView`).

use super::*;
use sim::serving::router::{self, RankLoad};

/// What the rank routers read of a live rank: its queues, and the KV its requests
/// need (`Scheduler::kv_need`).
struct RankView<'a> {
    sched: &'a Scheduler,
    rank: &'a Rank,
}

impl RankLoad for RankView<'_> {
    fn requests(&self) -> u64 {
        self.rank.requests() as u64
    }
    fn prefill_tokens(&self) -> u64 {
        self.rank.prefill_tokens
    }
    /// `LeastCost` needs a cost model the live engine does not have: the queued tokens
    /// stand in.
    fn est_load_s(&self) -> f64 {
        self.rank.prefill_tokens as f64
    }
    fn kv_tokens(&self) -> u64 {
        let pending = self.rank.pending.iter();
        let need = pending.map(|&s| self.sched.kv_need(&self.sched.reqs[s as usize]));
        self.rank.reserved + need.sum::<u64>()
    }
}

impl Scheduler {
    pub(super) fn group_load(&self, g: usize) -> u64 {
        self.groups[g]
            .ranks
            .iter()
            .map(|r| r.prefill_tokens + r.running.len() as u64)
            .sum()
    }

    fn rank_views(&self, g: usize) -> impl Iterator<Item = RankView<'_>> {
        let view = move |rank| RankView { sched: self, rank };
        self.groups[g].ranks.iter().map(view)
    }

    /// The entry pool's group for a new request (`router::prefill_instance`).
    pub(super) fn route_prefill(&mut self, req: &Req) -> usize {
        let range = self.entry.clone();
        let loads: Vec<u64> = range.clone().map(|g| self.group_load(g)).collect();
        let mut hits = Vec::new();
        if self.sc().router.prefill == PrefillRouter::PrefixAffinity {
            let hit = |g: usize| {
                let peeks = self.groups[g].ranks.iter().map(|r| r.kv.peek(&req.blocks));
                peeks.max().unwrap_or(0) as u64
            };
            hits.extend(range.clone().map(hit));
        }
        let placed = self.rr.0;
        let i = router::prefill_instance(
            &self.sc().router,
            placed,
            req.input as u64,
            &loads,
            &hits,
            TRACE_BLOCK_TOKENS,
        );
        self.rr.0 += 1;
        range.start + i
    }

    /// The rank of group `g` a new request is queued on (`router::prefill_rank`).
    pub(super) fn pick_rank(&self, g: usize) -> usize {
        let mixed = self.groups[g].role == Role::Mixed;
        router::prefill_rank(self.sc().router.prefill_rank, mixed, self.rank_views(g)) as usize
    }

    pub(super) fn route_decode(&mut self, id: u32, out: &mut Vec<Action>) {
        let need = self.kv_need(&self.reqs[id as usize]);
        let cap = self.cfg.kv_cap.1;
        if need > cap || self.waiting_decode >= self.sc().serving.decode.max_queued_requests as u64
        {
            let (g, r) = self.reqs[id as usize].pf;
            self.release(g, r, id);
            let q = &mut self.reqs[id as usize];
            q.state = State::Done;
            self.dropped += 1;
            self.live -= 1;
            out.push(Action::End {
                origin: q.origin,
                completed: false,
                context: 0,
            });
            return;
        }
        let (g, r) = self.decode_rank();
        self.waiting_decode += 1;
        let q = &mut self.reqs[id as usize];
        q.dec = (g, r);
        q.state = State::Pending;
        self.groups[g].ranks[r].pending.push_back(id);
        self.admit_decode(g, r, out);
    }

    /// The decode (group, rank) a prefilled request goes to (`router::decode_rank_in`).
    fn decode_rank(&mut self) -> (usize, usize) {
        let dep = self.sc().serving.decode.dep as usize;
        let ranks = self.decode.clone().flat_map(|g| self.rank_views(g));
        let policy = self.sc().router.decode;
        let (i, r) = router::decode_rank_in(policy, self.rr.1, self.decode.len(), dep, ranks);
        self.rr.1 += 1;
        (self.decode.start + i, r as usize)
    }
}
