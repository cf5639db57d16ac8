//! Forming a group's step (prefill chunks under the token budget, the decode batch,
//! KV growth and preemption) and applying a finished one.

use super::*;

impl Scheduler {
    /// Tokens the prefill computes for a request: prompt positions (and regenerated
    /// output after a preemption) before the last one.
    pub(super) fn prefill_len(q: &Req) -> u32 {
        q.input - 1 + q.gen_tokens.len() as u32
    }

    /// Token at position `pos` of a request's sequence (prompt, then generated).
    pub(super) fn token_at(&self, q: &Req, pos: usize) -> u32 {
        if pos < q.input as usize {
            prompt_token(&q.blocks, pos, self.cfg.vocab)
        } else {
            q.gen_tokens[pos - q.input as usize]
        }
    }

    /// Forms group `g`'s next step (`None` when it has nothing to run).
    pub fn form_step(&mut self, g: usize, now: f64, out: &mut Vec<Action>) -> Option<StepPlan> {
        if self.groups[g].busy {
            return None;
        }
        let role = self.groups[g].role;
        let pool = self.pool_of(g).clone();
        let dep = self.groups[g].ranks.len();
        let mut plan = StepPlan {
            group: g,
            ranks: vec![RankPlan::default(); dep],
            drafts: self.cfg.drafts,
        };
        for r in 0..dep {
            if role != Role::Prefill {
                while self.groups[g].ranks[r].running.len() < pool.max_batch_per_rank as usize {
                    let Some(id) = self.groups[g].ranks[r].joining.pop_front() else {
                        break;
                    };
                    self.reqs[id as usize].state = State::Running;
                    self.groups[g].ranks[r].running.push(id);
                }
            }
            if role != Role::Decode {
                self.finish_empty_prefills(g, r, now, out);
                self.form_prefill(g, r, &pool, now, &mut plan.ranks[r]);
            }
            if role != Role::Prefill {
                self.form_decode(g, r, &mut plan.ranks[r]);
            }
        }
        if plan
            .ranks
            .iter()
            .all(|p| p.prefill.is_empty() && p.decode.is_empty())
        {
            return None;
        }
        self.groups[g].busy = true;
        Some(plan)
    }

    /// Requests whose whole prompt but the last token was cached have no prefill to
    /// run: they go on at once.
    pub(super) fn finish_empty_prefills(
        &mut self,
        g: usize,
        r: usize,
        now: f64,
        out: &mut Vec<Action>,
    ) {
        let done: Vec<u32> = self.groups[g].ranks[r]
            .prefill_q
            .iter()
            .copied()
            .filter(|&id| {
                let q = &self.reqs[id as usize];
                q.cached + q.computed >= Self::prefill_len(q)
            })
            .collect();
        for id in done {
            self.reqs[id as usize].prefill_start_s.get_or_insert(now);
            self.prefill_finished(g, r, id, now, out);
        }
    }

    pub(super) fn form_prefill(
        &mut self,
        g: usize,
        r: usize,
        pool: &sim::serving::PoolConfig,
        now: f64,
        plan: &mut RankPlan,
    ) {
        let mut budget = pool.chunk_tokens_per_rank;
        let mut n = 0;
        let queue: Vec<u32> = self.groups[g].ranks[r].prefill_q.iter().copied().collect();
        for id in queue {
            if budget == 0 || n >= pool.max_prefill_requests_per_rank {
                break;
            }
            let q = &self.reqs[id as usize];
            let total = Self::prefill_len(q);
            let start = q.cached + q.computed;
            if start >= total {
                continue;
            }
            // A prefill-pool request gets its prompt's pages when first scheduled.
            if self.groups[g].role == Role::Prefill
                && q.table.len() * self.cfg.page < total as usize
            {
                let rank = &mut self.groups[g].ranks[r];
                let want = rank.kv.pages_for(total as usize) - q.table.len();
                let Some(pages) = rank.kv.alloc(want) else {
                    break; // in order: wait for pages
                };
                let q = &mut self.reqs[id as usize];
                q.table.extend_from_slice(&pages);
                q.private.extend_from_slice(&pages);
            }
            let q = &self.reqs[id as usize];
            let chunk = (total - start).min(budget);
            let tokens = (start..start + chunk)
                .map(|p| self.token_at(q, p as usize))
                .collect();
            plan.prefill.push(Seq {
                tokens,
                start: start as usize,
                pages: q.table.clone(),
                accept: None,
            });
            plan.prefill_reqs.push((id, chunk));
            let q = &mut self.reqs[id as usize];
            q.prefill_start_s.get_or_insert(now);
            budget -= chunk;
            n += 1;
        }
    }

    pub(super) fn form_decode(&mut self, g: usize, r: usize, plan: &mut RankPlan) {
        let k = self.cfg.drafts;
        if self.cfg.policy == KvPolicy::Vllm {
            self.grow_or_preempt(g, r);
        }
        let running = self.groups[g].ranks[r].running.clone();
        for id in running {
            let q = &self.reqs[id as usize];
            let a = accepted(self.cfg.seed, id, q.dsteps, &self.cfg.acceptance, k);
            let mut tokens = vec![q.last];
            tokens.extend(
                q.drafts
                    .iter()
                    .copied()
                    .chain(std::iter::repeat(q.last))
                    .take(k),
            );
            plan.decode.push(Seq {
                tokens,
                start: q.pos,
                pages: q.table.clone(),
                accept: Some(a),
            });
            plan.decode_reqs.push(id);
        }
    }

    /// `vllm` policy: every running request gets the pages its rows need; when the rank
    /// runs out, the most recently admitted one is preempted (its KV freed; it prefills
    /// again, generated tokens included, when readmitted).
    pub(super) fn grow_or_preempt(&mut self, g: usize, r: usize) {
        let k = self.cfg.drafts;
        let mut i = 0;
        while i < self.groups[g].ranks[r].running.len() {
            let id = self.groups[g].ranks[r].running[i];
            let q = &self.reqs[id as usize];
            let need = self.groups[g].ranks[r]
                .kv
                .pages_for(q.pos + k + 1)
                .saturating_sub(q.table.len());
            if need == 0 {
                i += 1;
                continue;
            }
            if let Some(p) = self.groups[g].ranks[r].kv.alloc(need) {
                let q = &mut self.reqs[id as usize];
                q.table.extend_from_slice(&p);
                q.private.extend_from_slice(&p);
                i += 1;
                continue;
            }
            // Preempt the last admitted (possibly this one) and retry.
            let victim = self.groups[g].ranks[r].running.pop().expect("non-empty");
            self.preempt(g, r, victim);
            if victim == id {
                continue;
            }
        }
    }

    pub(super) fn preempt(&mut self, g: usize, r: usize, id: u32) {
        let rank = &mut self.groups[g].ranks[r];
        let q = &mut self.reqs[id as usize];
        rank.kv.release(&q.private);
        rank.kv.unhold(&q.held);
        q.private.clear();
        q.held.clear();
        q.table.clear();
        q.cached = 0;
        q.computed = 0;
        q.pos = 0;
        q.drafts.clear();
        q.preemptions += 1;
        q.state = State::Pending;
        rank.pending.push_front(id);
        self.preemptions += 1;
    }

    /// Applies a finished step that ran from `start` to `end` (seconds) with each
    /// rank's decode outputs.
    pub fn step_done(&mut self, plan: &StepPlan, outs: &[Vec<SeqOut>], end: f64) -> Vec<Action> {
        let g = plan.group;
        self.groups[g].busy = false;
        let role = self.groups[g].role;
        let mut out = Vec::new();
        for (r, rp) in plan.ranks.iter().enumerate() {
            for &(id, chunk) in &rp.prefill_reqs {
                self.groups[g].ranks[r].prefill_tokens = self.groups[g].ranks[r]
                    .prefill_tokens
                    .saturating_sub(chunk as u64);
                let q = &mut self.reqs[id as usize];
                q.computed += chunk;
                if q.cached + q.computed >= Self::prefill_len(q) {
                    self.prefill_finished(g, r, id, end, &mut out);
                }
            }
            for (i, &id) in rp.decode_reqs.iter().enumerate() {
                if self.reqs[id as usize].state != State::Running {
                    continue; // preempted meanwhile
                }
                let o = &outs[r][i];
                let q = &mut self.reqs[id as usize];
                let a = rp.decode[i].accept.unwrap_or(0);
                let left = (q.output - q.generated) as usize;
                let emit = o.emitted.len().min(left);
                q.generated += emit as u32;
                q.gen_tokens.extend_from_slice(&o.emitted[..emit]);
                q.token_times.extend(std::iter::repeat_n(end, emit));
                q.pos += a + 1;
                q.last = *o.emitted.last().unwrap_or(&q.last);
                q.drafts = o.drafts.clone();
                q.dsteps += 1;
                if q.generated >= q.output {
                    self.finish(g, r, id, end, &mut out);
                }
            }
        }
        let _ = role;
        for r in 0..self.groups[g].ranks.len() {
            self.admit(g, r, &mut out);
        }
        out
    }
}
