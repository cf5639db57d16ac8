//! A request's stay in a rank's decode batch: joining it (its steps drawn), each decode
//! step's progress (first tokens, inter-token gaps, the requests whose last step it
//! was), leaving it (finished, or preempted where KV is allocated on demand and runs
//! short: `Scheduler::kv_on_demand`), and the requests still running when the run ends.

use super::pool::{GroupId, Role};
use super::rack::Rack;
use super::request::{ReqId, Request};
use super::SimError;
use std::cmp::Reverse;

impl Rack<'_> {
    /// A request joins rank `r`'s running batch at the group's current decode step:
    /// its steps are drawn now, and it finishes at the end of the last of them.
    pub(super) fn join_decode(&mut self, g: GroupId, r: usize, id: ReqId) {
        let step = self.pools.group(g).dstep;
        self.stints += 1;
        let stint = self.stints;
        let req = self.reqs.get_mut(id);
        let (input, output, measured) = (req.prompt_tokens(), req.output, req.measured);
        // Its KV at the end, its input and whole output (a recomputed output is part of
        // its context now and no longer ahead of it).
        let full = req.input as u64 + output as u64;
        // The tokens still to decode: all, or all but the one its prefill sampled (at
        // least one step: a one-token answer then decodes one token more than asked);
        // after a preemption, those it had not produced.
        let left = if req.prefill.recompute > 0 {
            output - req.decode.generated
        } else {
            output - (req.decode.first_token_ns.is_some() && output > 1) as u32
        };
        let steps = match &self.mtp.keyed {
            Some((seed, acc)) => {
                super::mtp::keyed_steps_for(left, *seed, req.serial, acc, acc.len())
            }
            None => self.mtp.yield_.steps_for(left, &mut self.mtp.rng),
        } as u64;
        let piece = self
            .pools
            .pool_of(g)
            .breakpoints
            .partition_point(|&b| b <= input) as u32;
        req.decode.running = true;
        req.decode.join_step = step;
        req.decode.piece = piece;
        req.decode.joined_context = input;
        req.decode.stint = stint;
        let grp = self.pools.group_mut(g);
        let rank = &mut grp.ranks[r];
        rank.kv_held -= input;
        if rank.on_demand {
            rank.runs.push((id, stint));
        }
        let d = &mut rank.dec;
        d.n += 1;
        d.measured += measured as u32;
        d.reserved += full;
        let p = &mut d.pieces[piece as usize];
        p.n += 1;
        p.input += input;
        p.join_steps += step;
        debug_assert!(d.conserved(), "a join broke the batch's sums");
        grp.finishing.push(Reverse((step + steps - 1, id, stint)));
        grp.joined.push(id);
    }

    /// The step's decode progress: first tokens of the requests that joined it, the
    /// inter-token gap of every other measured request, and the requests whose last
    /// step it was; then ranks admit what now fits.
    pub(super) fn decode_progress(&mut self, g: GroupId, in_window: bool) -> Result<(), SimError> {
        let now = self.now;
        // Every request stands for the rack's copies (`Pool::copies`).
        let copies = self.pools.pool_of(g).copies as u64;
        let grp = self.pools.group_mut(g);
        let step = grp.dstep;
        if in_window && grp.window_first_step.is_none() {
            grp.window_first_step = Some(step);
        }
        let prev_end = std::mem::replace(&mut grp.last_decode_end_ns, now);
        let measured: u64 = grp.ranks.iter().map(|r| r.dec.measured as u64).sum();
        let mut joined_measured = 0u64;
        for &id in &grp.joined {
            let req = self.reqs.get_mut(id);
            match req.decode.first_token_ns {
                None => req.decode.first_token_ns = Some(now),
                // Its first token came with its last prompt chunk: its first gap runs
                // from then, not from the last decode step (which may be long before,
                // when prefill steps ran alone in between); after a preemption, from
                // its last token before it.
                Some(first) => {
                    let since = if req.prefill.recompute > 0 {
                        req.decode.last_token_ns
                    } else {
                        first
                    };
                    if in_window && req.measured {
                        self.m.itl_ms.record_n((now - since) as f64 / 1e6, copies);
                    }
                }
            }
            joined_measured += req.measured as u64;
        }
        grp.joined.clear();
        if in_window {
            self.m.itl_ms.record_n(
                (now - prev_end) as f64 / 1e6,
                (measured - joined_measured) * copies,
            );
        }
        while let Some(&Reverse((last, id, stint))) = self.pools.group(g).finishing.peek() {
            if last > step {
                break;
            }
            self.pools.group_mut(g).finishing.pop();
            let current = self
                .reqs
                .get_live(id)
                .is_some_and(|q| q.decode.running && q.decode.stint == stint);
            if current {
                self.finish(id, g)?;
            } else if !self.pools.group(g).ranks.iter().any(|r| r.on_demand) {
                // Only a preemption leaves a finish behind.
                return Err(SimError::Invariant(format!(
                    "a finish at decode step {last} of group {} names request {} in no batch",
                    g.0, id.0
                )));
            }
        }
        let grp = self.pools.group_mut(g);
        grp.dstep += 1;
        let role = grp.role;
        for r in 0..grp.ranks.len() as u32 {
            if self.pools.group(g).ranks[r as usize].on_demand {
                self.preempt_over(g, r);
            }
            self.note_kv(g, r);
            if role == Role::Mixed {
                self.admit_mixed(g, r);
            } else {
                self.admit_decode(g, r);
            }
        }
        Ok(())
    }

    /// Decode steps a running request has completed, and how many of them ended in the
    /// measured window, with its group's step counter at `done_steps`.
    fn decode_steps(&self, req: &Request<'_>, done_steps: u64) -> (u64, u64) {
        let grp = self.pools.group(req.decode.group);
        let steps = done_steps - req.decode.join_step;
        let in_window = grp.window_first_step.map_or(0, |w| {
            done_steps.saturating_sub(w.max(req.decode.join_step))
        });
        (steps, in_window)
    }

    /// Takes a running request out of its rank's batch; its `generated` tokens not
    /// counted before (of `steps` decode steps, `in_window` of them in the measured
    /// window) count as emitted, the window's share of them in the pool's throughput.
    fn leave_batch(&mut self, id: ReqId, steps: u64, in_window: u64) {
        let q = self.reqs.get_mut(id);
        q.decode.running = false;
        let (input, output, w) = (q.input as u64, q.output as u64, q.w());
        let generated = (q.decode.generated - q.decode.counted) as u64;
        q.decode.counted = q.decode.generated;
        let d = &mut self.pools.rank_mut(q.decode.group, q.decode.rank).dec;
        d.n -= 1;
        d.measured -= q.measured as u32;
        d.reserved -= input + output;
        let p = &mut d.pieces[q.decode.piece as usize];
        p.n -= 1;
        p.input -= q.decode.joined_context;
        p.join_steps -= q.decode.join_step;
        debug_assert!(d.conserved(), "a leave broke the batch's sums");
        debug_assert!(
            q.decode.generated as u64 <= output,
            "more tokens emitted than asked for"
        );
        self.acc.output_tokens_emitted += generated * w;
        self.m.mtp_steps += steps * w;
        self.m.mtp_tokens += generated * w;
        if let Some(counted) = (generated * in_window).checked_div(steps) {
            self.pools.pool_of_mut(q.decode.group).stats.output_tokens += counted * w;
        }
    }

    /// A request's last decode step (in group `g`) ended now.
    fn finish(&mut self, id: ReqId, g: GroupId) -> Result<(), SimError> {
        let done_steps = self.pools.group(g).dstep + 1;
        let (steps, in_window) = self.decode_steps(self.reqs.get(id), done_steps);
        let req = self.reqs.get_mut(id);
        req.decode.generated = req.output;
        req.decode.last_token_ns = self.now;
        self.leave_batch(id, steps, in_window);
        let req = self.reqs.release(id);
        if !req.prefill.done || req.decode.group != g {
            return Err(SimError::Invariant(format!(
                "request finished in group {} but decoded in group {} (prefill done: {})",
                g.0, req.decode.group.0, req.prefill.done
            )));
        }
        let cap = self.pools.pool_of(g).kv_cap;
        let rank = self.pools.rank_mut(g, req.decode.rank);
        rank.kv_reserved -= req.decode.kv_reserved;
        debug_assert!(rank.kv_within(cap), "KV released below what the rank holds");
        self.complete(&req, true);
        Ok(())
    }

    /// Output tokens running request `q` has produced after `steps` decode steps of its
    /// stay in the batch: those it had when it joined and the expected yield of the
    /// steps, short of its last.
    fn generated_after(&self, q: &Request<'_>, steps: u64) -> u32 {
        let yielded = (self.mtp.mu * steps as f64).round() as u64;
        (q.decode.generated as u64 + yielded).min((q.output as u64).saturating_sub(1)) as u32
    }

    /// A rank that allocates KV on demand, past its capacity at the group's decode step:
    /// preempts its newest running requests until what its admitted requests hold fits
    /// (vLLM V1's recompute preemption, `Scheduler::kv_on_demand`).
    fn preempt_over(&mut self, g: GroupId, r: u32) {
        let cap = self.pools.pool_of(g).kv_cap;
        let (step, mu) = (self.pools.group(g).dstep, self.mtp.mu);
        loop {
            let rank = self.pools.rank_mut(g, r);
            if rank.kv_reserved + rank.dec.growth(step, mu) <= cap {
                break;
            }
            let Some((id, stint)) = rank.runs.pop() else {
                break;
            };
            let live = |q: &Request<'_>| q.decode.running && q.decode.stint == stint;
            if self.reqs.get_live(id).is_some_and(live) {
                self.preempt(g, r, id);
            }
        }
        // Requests that left since they joined are stale: drop them now and then.
        let rank = self.pools.rank_mut(g, r);
        if rank.runs.len() > 2 * rank.dec.n as usize + 64 {
            let reqs = &self.reqs;
            rank.runs.retain(|&(id, stint)| {
                reqs.get_live(id)
                    .is_some_and(|q| q.decode.running && q.decode.stint == stint)
            });
        }
    }

    /// Preempts running request `id` of rank `r` of group `g` at the group's decode step:
    /// it leaves the batch with the tokens it produced (emitted: the client has them),
    /// frees its KV, and waits at the head of the rank's queue to recompute its input
    /// and that output before it decodes on.
    fn preempt(&mut self, g: GroupId, r: u32, id: ReqId) {
        let done_steps = self.pools.group(g).dstep;
        let q = self.reqs.get(id);
        let (steps, in_window) = self.decode_steps(q, done_steps);
        // Its first stay counts the token its prefill sampled too.
        let sampled =
            q.prefill.recompute == 0 && self.pools.pool_of(g).scheduler.first_token_at_prefill();
        let generated =
            (self.generated_after(q, steps) + sampled as u32).min(q.output.saturating_sub(1));
        // Its first token at least: a preempted request is told from a fresh one by the
        // output it recomputes.
        debug_assert!(generated > 0, "a preempted request has produced no token");
        self.reqs.get_mut(id).decode.generated = generated;
        self.leave_batch(id, steps, in_window);
        let now = self.now;
        let req = self.reqs.get_mut(id);
        req.decode.last_token_ns = now;
        let (freed, w) = (req.decode.kv_reserved, req.w());
        req.decode.kv_reserved = 0;
        req.prefill.recompute = generated;
        req.prefill.cached = 0;
        req.prefill.computed = 0;
        req.prefill.done = false;
        req.prefill.est_s = 0.0;
        let pending = req.kv_reserve();
        let rank = self.pools.rank_mut(g, r);
        rank.kv_reserved -= freed;
        rank.pending.push_front(id);
        rank.pending_kv += pending;
        let pool = self.pools.pool_of_mut(g);
        pool.waiting += 1;
        if self.window.ends_in(now) {
            pool.stats.preemptions += w;
        }
        self.acc.preemptions += w;
    }

    /// At the end of the run: requests still decoding leave their batches with the
    /// expected yield of the steps they ran.
    pub(super) fn settle_running(&mut self) {
        let running: Vec<ReqId> = self
            .reqs
            .iter()
            .filter(|(_, q)| q.decode.running)
            .map(|(id, _)| id)
            .collect();
        for id in running {
            let q = self.reqs.get(id);
            let done_steps = self.pools.group(q.decode.group).dstep;
            let (steps, in_window) = self.decode_steps(q, done_steps);
            let generated = self.generated_after(q, steps);
            self.reqs.get_mut(id).decode.generated = generated;
            self.leave_batch(id, steps, in_window);
        }
    }
}
