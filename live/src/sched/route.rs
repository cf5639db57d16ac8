//! Routing: a request's prefill instance and rank, and its decode group and rank, by
//! the scenario's router (the simulator's policies).

use super::*;

impl Scheduler {
    pub(super) fn group_load(&self, g: usize) -> u64 {
        self.groups[g]
            .ranks
            .iter()
            .map(|r| r.prefill_tokens + r.running.len() as u64)
            .sum()
    }

    pub(super) fn route_prefill(&mut self, req: &Req) -> usize {
        let range = self.entry.clone();
        let n = range.len() as u64;
        match self.sc().router.prefill {
            PrefillRouter::RoundRobin => {
                let g = range.start + (self.rr.0 % n) as usize;
                self.rr.0 += 1;
                g
            }
            PrefillRouter::LeastLoad => range.min_by_key(|&g| (self.group_load(g), g)).unwrap_or(0),
            PrefillRouter::PrefixAffinity => {
                let w = self.sc().router.prefill_recompute_weight;
                let input = req.input as u64;
                let mut best = (f64::INFINITY, range.start);
                for g in range {
                    let hit = self.groups[g]
                        .ranks
                        .iter()
                        .map(|r| r.kv.peek(&req.blocks))
                        .max()
                        .unwrap_or(0) as u64;
                    let uncached = input - (hit * BLOCK_TOKENS).min(input - 1);
                    let work = self.group_load(g) as f64 + w * uncached as f64;
                    if work < best.0 {
                        best = (work, g);
                    }
                }
                best.1
            }
        }
    }

    pub(super) fn pick_rank(&self, g: usize) -> usize {
        let grp = &self.groups[g];
        let mut best = (u64::MAX, 0);
        for (i, r) in grp.ranks.iter().enumerate() {
            let load = match (grp.role, self.sc().router.prefill_rank) {
                (Role::Mixed, _) | (_, PrefillRank::LeastRequests) => r.requests() as u64,
                // LeastCost needs a cost model the live engine does not have: the
                // queued tokens stand in.
                (_, PrefillRank::LeastTokens | PrefillRank::LeastCost) => r.prefill_tokens,
            };
            if load < best.0 {
                best = (load, i);
            }
        }
        best.1
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
        let dep = self.sc().serving.decode.dep as usize;
        let total = self.decode.len() * dep;
        let (g, r) = match self.sc().router.decode {
            DecodeRouter::RoundRobin => {
                let i = (self.rr.1 % total as u64) as usize;
                self.rr.1 += 1;
                (self.decode.start + i / dep, i % dep)
            }
            DecodeRouter::LeastRequests | DecodeRouter::LeastTokens => {
                let by_tokens = self.sc().router.decode == DecodeRouter::LeastTokens;
                let mut best = (u64::MAX, self.decode.start, 0);
                for g in self.decode.clone() {
                    for (ri, rk) in self.groups[g].ranks.iter().enumerate() {
                        let load = if by_tokens {
                            rk.reserved
                                + rk.pending
                                    .iter()
                                    .map(|&s| self.kv_need(&self.reqs[s as usize]))
                                    .sum::<u64>()
                        } else {
                            rk.requests() as u64
                        };
                        if load < best.0 {
                            best = (load, g, ri);
                        }
                    }
                }
                (best.1, best.2)
            }
        };
        self.waiting_decode += 1;
        let q = &mut self.reqs[id as usize];
        q.dec = (g, r);
        q.state = State::Pending;
        self.groups[g].ranks[r].pending.push_back(id);
        self.admit_decode(g, r, out);
    }
}
