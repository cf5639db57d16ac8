//! A group's steps: forming one (requests joining the batch, prefill chunks, the
//! decode batch priced as pieces), and applying one that finished (prefill progress;
//! the decode batch's own progress is `decode.rs`'s).

use super::clock::{ns_to_secs, secs_to_ns};
use super::config::Mode;
use super::pool::{GroupId, Role};
use super::rack::{Event, Rack};
use super::request::ReqId;
use super::SimError;
use crate::cost::{Op, Phase, ReqSlice, StepCost, StepShape};

impl Rack<'_> {
    /// Forms group `g`'s next step from what is ready and starts it (nothing if the
    /// group is stepping or has nothing to do).
    pub(super) fn try_step(&mut self, g: GroupId) -> Result<(), SimError> {
        let grp = self.pools.group(g);
        if grp.busy {
            return Ok(());
        }
        let role = grp.role;
        if role != Role::Prefill {
            self.join_ready(g);
        }
        let mut cost = StepCost::default();
        // Formed ahead (async scheduling): while the step that just ended ran, from the
        // requests there were when it started; else (and when that finds nothing to
        // do: an idle engine schedules what arrives at once) now.
        let taken = self.take_in(g);
        let grp = self.pools.group(g);
        let ahead = self.pools.pool_of(g).ahead && grp.last_end_ns == self.now && self.now > 0;
        let cutoff = if ahead { grp.last_start_ns } else { self.now };
        let (mut prefill, mut decode) = self.form_work(g, role, cutoff.min(taken), &mut cost);
        if ahead && !(prefill || decode) {
            (prefill, decode) = self.form_work(g, role, self.now.min(taken), &mut cost);
        }
        self.pools.group_mut(g).decode_in_step = decode;
        if !(prefill || decode) {
            return Ok(());
        }
        self.launched_ahead(g, ahead, &mut cost);
        // A device that idled pays its wake-up (the cost model's; none for GPUs).
        let idle_s = ns_to_secs(self.now.saturating_sub(self.pools.group(g).last_end_ns));
        let wake_s = self.pools.pool_of(g).cost.wake_s(idle_s);
        if self.steps.is_some() {
            self.log_step(g, &cost, wake_s);
        }
        self.start_step(g, &cost, wake_s)
    }

    /// A step formed ahead (`ahead`) is launched while the last one runs: its host
    /// launches (where it launches them) outrun the GPU only by what they exceed its own
    /// GPU time and the last step's GPU time left after that step's launches (the
    /// group's `launch_slack_s`), which this step's then sets for the next.
    fn launched_ahead(&mut self, g: GroupId, ahead: bool, cost: &mut StepCost) {
        let grp = self.pools.group_mut(g);
        let slack = if ahead { grp.launch_slack_s } else { 0.0 };
        let exposed = cost.op(Op::Launch);
        let gpu = cost.step_s - exposed - cost.op(Op::Overhead);
        let (left, next) = launched_with_slack(cost.host_launch_s, cost.host_serial_s, gpu, slack);
        if cost.host_launch_s > 0.0 {
            cost.step_s -= exposed - left;
            cost.op_s[Op::Launch.index()] = left;
        }
        grp.launch_slack_s = next;
    }

    /// When the scheduler last took in new requests, as of the step group `g` forms now
    /// (`serving.scheduler_recv_interval`, SGLang's `SchedulerRecvSkipper`): the step
    /// that just ended counts one towards the interval if it only decoded, the whole
    /// interval if it had prefill work; an engine that was idle, or has no request
    /// running to decode, takes them at once (SGLang's idle loop spins through the
    /// interval). Without an interval: now.
    fn take_in(&mut self, g: GroupId) -> u64 {
        let every = self.sc.serving.scheduler_recv_interval.unwrap_or(1);
        let now = self.now;
        if every <= 1 {
            return now;
        }
        let grp = self.pools.group_mut(g);
        let ended = grp.last_end_ns == now && now > 0;
        let running = grp
            .ranks
            .iter()
            .any(|r| r.dec.n > 0 || !r.joining.is_empty());
        let add = if ended && running && grp.step_prefill.is_empty() {
            1
        } else {
            every
        };
        grp.recv_count = grp.recv_count.saturating_add(add);
        if grp.recv_count >= every {
            grp.recv_count = 0;
            grp.recv_ns = now;
        }
        grp.recv_ns
    }

    /// The step's prefill part (requests that arrived by `cutoff`) and decode part,
    /// priced as one step (a mixed one when it has both: one forward pass over all its
    /// tokens): whether each has work. SGLang's prefill-first policy runs a step with
    /// prefill work alone.
    fn form_work(
        &mut self,
        g: GroupId,
        role: Role,
        cutoff: u64,
        cost: &mut StepCost,
    ) -> (bool, bool) {
        let took = role != Role::Decode && self.form_prefill(g, cutoff);
        let held = role != Role::Decode && self.holds_prompts(g, took);
        let prefill = took && !held;
        let pauses = prefill && self.pools.pool_of(g).prefill_pauses_decode();
        let decode = role != Role::Prefill && !pauses && self.form_decode(g);
        if prefill || decode {
            *cost = self.price_work(g, prefill, decode);
        }
        (prefill, decode)
    }

    /// Whether the scheduler holds back the prompts `form_prefill` just took (`took`:
    /// whether it took any): a DEP group with attention-DP balance by its rule
    /// ([`Self::adp_holds`]), which counts every step, prompts or not; any other by
    /// batch waiting (TensorRT-LLM waits for a fuller batch only without attention DP).
    fn holds_prompts(&mut self, g: GroupId, took: bool) -> bool {
        let balanced = self.sc.serving.adp_balance == Some(true);
        if balanced && self.pools.group(g).ranks.len() > 1 {
            self.adp_holds(g)
        } else {
            took && self.batch_waits(g)
        }
    }

    /// TensorRT-LLM's attention-DP balance (`PyExecutor._balance_adp_requests`), every
    /// step: where every rank has prompts to take and room to decode them, the wait for
    /// them ends, and while every rank decodes the prompts are still held
    /// `serving.adp_batching_iters` steps (10) for fuller batches; else they are held,
    /// unless `serving.adp_timeout_iters` steps (50) have passed or some rank is not
    /// decoding. The wait's count runs on steps without prompts too (TensorRT-LLM counts
    /// every iteration), so a prompt that arrives waits for what is left of it. Held,
    /// the step's prefill work is dropped.
    fn adp_holds(&mut self, g: GroupId) -> bool {
        let serving = &self.sc.serving;
        let timeout = serving.adp_timeout_iters.unwrap_or(50);
        let batching = serving.adp_batching_iters.unwrap_or(10);
        let max_batch = self.pools.pool_of(g).cfg.max_batch_per_rank;
        let grp = self.pools.group_mut(g);
        // One pass over the step's chunks: the ranks that have a prompt in it.
        let mut prompted = vec![false; grp.ranks.len()];
        for w in &grp.step_prefill {
            prompted[w.0 as usize] = true;
        }
        let every_prompt = prompted.iter().all(|&p| p);
        let every_room = grp.ranks.iter().all(|r| r.dec.n < max_batch);
        let every_decodes = grp.ranks.iter().all(|r| r.dec.n > 0);
        let hold = if every_prompt && every_room {
            grp.adp_wait_count = 0;
            if every_decodes && grp.adp_batching_count < batching {
                grp.adp_batching_count += 1;
                true
            } else {
                if every_decodes {
                    grp.adp_batching_count = 0;
                }
                false
            }
        } else {
            grp.adp_wait_count += 1;
            if grp.adp_wait_count >= timeout || !every_decodes {
                grp.adp_wait_count = 0;
                false
            } else {
                true
            }
        };
        if hold {
            grp.step_prefill.clear();
        }
        hold
    }

    /// Whether the scheduler holds the prompts `form_prefill` just took back for a
    /// fuller context batch (TensorRT-LLM's batch waiting, `PyExecutor._waiting_requests`:
    /// only while requests are decoding): until it has held them
    /// `serving.batch_wait_iters` steps, or their prompt tokens and the decode tokens
    /// reach `serving.batch_wait_tokens_ratio` of the step's budget. Held, the step's
    /// prefill work is dropped and the count goes up; released, the count restarts.
    fn batch_waits(&mut self, g: GroupId) -> bool {
        let serving = &self.sc.serving;
        let iters = serving.batch_wait_iters.unwrap_or(0);
        let ratio = serving.batch_wait_tokens_ratio.unwrap_or(0.0);
        if iters == 0 && ratio <= 0.0 {
            return false;
        }
        let budget = self.pools.pool_of(g).cfg.chunk_tokens_per_rank as f64;
        let per_decode = 1 + self.mtp.draft_tokens as u64;
        let grp = self.pools.group_mut(g);
        let decoding: u64 = grp.ranks.iter().map(|r| r.dec.n as u64).sum();
        if decoding == 0 {
            return false;
        }
        // Per rank, as each rank's scheduler counts its own step.
        let ranks = grp.ranks.len().max(1) as f64;
        let prompts: u64 = grp.step_prefill.iter().map(|w| w.2 as u64).sum();
        let tokens = (prompts + decoding * per_decode) as f64 / ranks;
        if grp.batch_wait_count >= iters || (ratio > 0.0 && tokens >= ratio * budget) {
            grp.batch_wait_count = 0;
            return false;
        }
        grp.batch_wait_count += 1;
        grp.step_prefill.clear();
        true
    }

    /// The cost model's price of the step `form_prefill` and `form_decode` formed:
    /// its prefill chunks (`slices`), its decode batch (`decode_slices`), or both in
    /// one mixed step.
    fn price_work(&self, g: GroupId, prefill: bool, decode: bool) -> StepCost {
        let pool = self.pools.pool_of(g);
        let dep = pool.cfg.dep as usize;
        let decodes = &self.decode_slices[..dep];
        let shape = if prefill {
            StepShape {
                phase: Phase::Prefill,
                ranks: &self.slices[..dep],
                decode_ranks: if decode { decodes } else { &[] },
                draft_tokens: if decode { self.mtp.draft_tokens } else { 0 },
            }
        } else {
            StepShape {
                phase: Phase::Decode,
                ranks: decodes,
                decode_ranks: &[],
                draft_tokens: self.mtp.draft_tokens,
            }
        };
        pool.cost.step(&shape)
    }

    /// Records the step group `g` starts now (`Record::steps`).
    fn log_step(&mut self, g: GroupId, cost: &StepCost, wake_s: f64) {
        let grp = self.pools.group(g);
        let record = super::rack::SimStep {
            pool: self.pools.pool_of(g).name,
            group: g.0,
            start_s: ns_to_secs(self.now),
            step_s: cost.step_s + wake_s,
            prefill_tokens: grp.step_prefill.iter().map(|w| w.2 as u64).sum(),
            prefill_chunks: grp.step_prefill.len() as u32,
            prompts_done: grp
                .step_prefill
                .iter()
                .filter(|w| {
                    let req = self.reqs.get(w.1);
                    req.uncached() - req.prefill.computed == w.2
                })
                .count() as u32,
            decode_requests: if grp.decode_in_step {
                grp.ranks.iter().map(|r| r.dec.n).sum()
            } else {
                0
            },
        };
        if let Some(v) = &mut self.steps {
            v.push(record);
        }
    }

    /// Requests whose KV arrived join the batch at the step boundary, while it has room.
    fn join_ready(&mut self, g: GroupId) {
        let max_batch = self.pools.pool_of(g).cfg.max_batch_per_rank as usize;
        for r in 0..self.pools.group(g).ranks.len() {
            loop {
                let rank = &mut self.pools.group_mut(g).ranks[r];
                if rank.dec.n as usize >= max_batch {
                    break;
                }
                let Some(id) = rank.joining.pop_front() else {
                    break;
                };
                self.join_decode(g, r, id);
            }
        }
    }

    /// The step's prefill chunks: each rank works through its queue in order within its
    /// token and request budgets, as the pool's scheduler shares them with decode
    /// (`super::scheduler`), taking requests that reached the scheduler by `cutoff`
    /// (through the front end: not when the client sent them), into `slices`; false if
    /// there are none.
    fn form_prefill(&mut self, g: GroupId, cutoff: u64) -> bool {
        let pool = self.pools.pool_of(g);
        let (dep, sim_dep) = (pool.cfg.dep as usize, pool.sim_dep as usize);
        let chunk_tokens = pool.cfg.chunk_tokens_per_rank;
        let max_prefill = pool.cfg.max_prefill_requests_per_rank;
        let (sched, mixed) = (pool.scheduler, pool.mixed_chunk);
        let max_running = if sched.prefill_holds_slot() {
            pool.cfg.max_batch_per_rank as usize
        } else {
            usize::MAX
        };
        let mut work = std::mem::take(&mut self.pools.group_mut(g).step_prefill);
        work.clear();
        for r in 0..sim_dep {
            let slices = &mut self.slices[r];
            slices.clear();
            let rank = &self.pools.group(g).ranks[r];
            let mut budget =
                sched.prefill_budget(chunk_tokens, rank.dec.n, self.mtp.draft_tokens, mixed);
            let mut n = 0;
            // `running`: the requests holding a slot before this one.
            for (running, &id) in (rank.batch_slots_taken()..).zip(rank.prefill_q.iter()) {
                let req = self.reqs.get(id);
                let full = budget == 0 || n >= max_prefill || running >= max_running;
                if full || req.ingress_ns > cutoff {
                    break;
                }
                let remaining = req.uncached() - req.prefill.computed;
                if remaining == 0 {
                    continue;
                }
                let Some(chunk) = sched.chunk(remaining, budget, chunk_tokens, n == 0) else {
                    break;
                };
                slices.push(ReqSlice {
                    new_tokens: chunk,
                    context_tokens: req.prefill.cached as u64 + req.prefill.computed as u64,
                    count: 1,
                });
                work.push((r as u32, id, chunk));
                budget -= chunk;
                n += 1;
            }
        }
        let any = !work.is_empty();
        if any {
            repeat_ranks(&mut self.slices, sim_dep, dep);
        }
        self.pools.group_mut(g).step_prefill = work;
        any
    }

    /// The step's decode part: each piece of a rank's batch as (at most) two slices
    /// whose contexts sum exactly to the piece's, into `decode_slices`; false if no
    /// rank has a running request.
    fn form_decode(&mut self, g: GroupId) -> bool {
        let pool = self.pools.pool_of(g);
        let (dep, sim_dep) = (pool.cfg.dep as usize, pool.sim_dep as usize);
        let grp = self.pools.group(g);
        let step = grp.dstep;
        let mut decode = false;
        for r in 0..sim_dep {
            let slices = &mut self.decode_slices[r];
            slices.clear();
            for p in &grp.ranks[r].dec.pieces {
                if p.n == 0 {
                    continue;
                }
                let total = p.context(step, self.mtp.mu);
                let (mean, extra) = (total / p.n, total % p.n);
                if extra > 0 {
                    slices.push(ReqSlice {
                        new_tokens: 1,
                        context_tokens: mean + 1,
                        count: extra as u32,
                    });
                }
                slices.push(ReqSlice {
                    new_tokens: 1,
                    context_tokens: mean,
                    count: (p.n - extra) as u32,
                });
            }
            decode |= !slices.is_empty();
        }
        if decode {
            repeat_ranks(&mut self.decode_slices, sim_dep, dep);
        }
        decode
    }

    /// Starts a step of `cost` now; its statistics count if it lies in the window.
    fn start_step(&mut self, g: GroupId, cost: &StepCost, wake_s: f64) -> Result<(), SimError> {
        let pool = self.pools.pool_of_mut(g);
        if !(cost.step_s.is_finite() && cost.step_s >= 0.0) {
            return Err(SimError::BadCost {
                pool: pool.name,
                step_s: cost.step_s,
                why: crate::validate::non_finite_step(cost).unwrap_or_default(),
            });
        }
        let dur = secs_to_ns(cost.step_s + wake_s).max(self.min_step_ns);
        let end = self.now.saturating_add(dur);
        if self.window.holds(self.now, end) {
            let st = &mut pool.stats;
            st.steps += 1;
            st.step_s += cost.step_s + wake_s;
            st.wake_s += wake_s;
            st.balanced_s += cost.balanced_step_s.min(cost.step_s) + wake_s;
            for (a, b) in st.op_s.iter_mut().zip(cost.op_s.iter()) {
                *a += *b;
            }
            st.busy_ns += dur;
        }
        let grp = self.pools.group_mut(g);
        grp.busy = true;
        grp.last_start_ns = self.now;
        self.q.push(end, Event::StepDone(g));
        Ok(())
    }

    /// The cost model's time for a prefill alone on one rank of the `role` pool's group.
    pub(super) fn estimate_prefill_s(&mut self, role: Role, uncached: u64, cached: u64) -> f64 {
        let pool = self.pools.pool(role);
        let dep = pool.cfg.dep as usize;
        for s in &mut self.slices[..dep] {
            s.clear();
        }
        self.slices[0].push(ReqSlice {
            new_tokens: uncached.min(u32::MAX as u64) as u32,
            context_tokens: cached,
            count: 1,
        });
        let c = pool.cost.step(&StepShape {
            phase: Phase::Prefill,
            ranks: &self.slices[..dep],
            decode_ranks: &[],
            draft_tokens: 0,
        });
        if c.step_s.is_finite() && c.step_s > 0.0 {
            c.step_s
        } else {
            0.0
        }
    }

    /// Group `g`'s step ended now: apply its prefill and decode progress, then form the
    /// next one.
    pub(super) fn on_step_done(&mut self, g: GroupId) -> Result<(), SimError> {
        let now = self.now;
        let grp = self.pools.group_mut(g);
        grp.busy = false;
        grp.last_end_ns = now;
        grp.last_step_ns = now.saturating_sub(grp.last_start_ns);
        // Counted only where the API server's streams cost it time (`super::frontend`).
        let streams = self.frontend.chunk_s_per_server > 0.0;
        let decoded: u64 = if streams && grp.decode_in_step {
            grp.ranks.iter().map(|r| r.dec.n as u64).sum()
        } else {
            0
        };
        let in_window = self.window.ends_in(now);
        self.prefill_progress(g, in_window)?;
        if streams {
            // The chunks it streams: a token to each request it decoded or whose prompt
            // it finished, on every rank (the simulated ones stand for the group's).
            let pool = self.pools.pool_of(g);
            let ranks = self.pools.group(g).ranks.len().max(1) as f64;
            let chunks =
                (decoded + self.finished.len() as u64) as f64 * pool.cfg.dep as f64 / ranks;
            self.pools.group_mut(g).last_chunks = chunks;
        }
        if self.pools.group(g).decode_in_step {
            self.decode_progress(g, in_window)?;
        }
        self.kick(g);
        Ok(())
    }

    /// The step's prefill chunks are computed; requests whose prompt is done move on.
    fn prefill_progress(&mut self, g: GroupId, in_window: bool) -> Result<(), SimError> {
        let role = self.pools.group(g).role;
        let work = std::mem::take(&mut self.pools.group_mut(g).step_prefill);
        let mut finished = std::mem::take(&mut self.finished);
        finished.clear();
        for &(r, id, chunk) in &work {
            let req = self.reqs.get_mut(id);
            req.prefill.computed += chunk;
            debug_assert!(
                req.prefill.computed <= req.uncached(),
                "more prompt tokens computed than the prompt left uncached"
            );
            let done = req.prefill.computed == req.uncached();
            let (cached, w) = (req.prefill.cached as u64, req.w());
            // A preempted request's prompt was counted the first time it was computed.
            let recompute = req.prefill.recompute > 0;
            let rank = self.pools.rank_mut(g, r);
            rank.prefill_tokens -= chunk as u64;
            if role == Role::Mixed {
                rank.kv_held += chunk as u64;
            }
            if done {
                finished.push((r, id));
            }
            if recompute {
                self.acc.tokens_recomputed += chunk as u64 * w;
                continue;
            }
            self.acc.uncached_tokens_prefilled += chunk as u64 * w;
            if done {
                self.acc.cached_tokens_credited += cached * w;
            }
            if in_window {
                let st = &mut self.pools.pool_mut(role).stats;
                st.uncached_tokens += chunk as u64 * w;
                if done {
                    st.cached_tokens += cached * w;
                }
            }
        }
        self.pools.group_mut(g).step_prefill = work;
        for &(r, id) in &finished {
            self.prefill_done(g, r, id)?;
        }
        self.finished = finished;
        if role == Role::Mixed {
            for r in 0..self.pools.group(g).ranks.len() as u32 {
                self.note_kv(g, r);
            }
        }
        Ok(())
    }

    /// A request's prompt is computed on rank `r` of group `g`: its blocks enter the
    /// instance's prefix cache, and it goes to decode (or completes, prefill-only).
    fn prefill_done(&mut self, g: GroupId, r: u32, id: ReqId) -> Result<(), SimError> {
        let req = self.reqs.get_mut(id);
        let rank = self.pools.rank_mut(g, r);
        rank.prefill_q.retain(|&s| s != id);
        rank.est_load_s = (rank.est_load_s - req.prefill.est_s).max(0.0);
        // Only full blocks are reusable: a partial last block's identity would also
        // name the full block a longer prompt has there. The whole prompt is written
        // (the cached prefix was just used too, so it is stamped again; a radix walk,
        // not a per-block cost).
        let prompt = req.prefill.prompt;
        let full = ((req.input as u64 / self.id_tokens) as usize).min(prompt.len());
        let inst = self.pools.instance(g);
        if let Some(c) = self.pools.pool_of_mut(g).prefix.as_mut() {
            c.insert(inst, &prompt.prefix(full));
        }
        req.prefill.done = true;
        let role = self.pools.group(g).role;
        self.pools.pool_mut(role).waiting -= 1;
        if role == Role::Mixed {
            req.decode.group = g;
            req.decode.rank = r;
            // A preempted request's first token came before.
            if self.pools.pool_of(g).scheduler.first_token_at_prefill()
                && req.decode.first_token_ns.is_none()
            {
                req.decode.first_token_ns = Some(self.now);
            }
            self.pools.rank_mut(g, r).joining.push_back(id);
        } else if self.sc.serving.mode == Mode::PrefillOnly {
            // The faked decode side ends the request with its first token: its output
            // is not produced or counted, but its session continues as if it were.
            let req = self.reqs.release(id);
            self.complete(&req, false);
        } else {
            self.route_decode(id);
        }
        Ok(())
    }
}

/// The whole group's ranks for the cost model: the `sim_dep` simulated ranks' slices
/// repeated up to `dep` (one copy of the rack simulated: every copy of a rank has the
/// same batch); nothing to do when they are equal.
fn repeat_ranks(slices: &mut [Vec<ReqSlice>], sim_dep: usize, dep: usize) {
    let (sim, rest) = slices[..dep].split_at_mut(sim_dep);
    for (j, dst) in rest.iter_mut().enumerate() {
        dst.clone_from(&sim[j % sim_dep]);
    }
}

/// A host-launched step's launches, `host_s` of them able to run ahead of the GPU and
/// `serial_s` that the step waits for in full, with `gpu_s` of its own GPU time and
/// `slack_s` of the last step's GPU time spare after that step's launches: the seconds
/// they add to the step (what runs ahead outruns both GPU times by, and all of the
/// serial part), and the spare GPU time this step leaves the next.
fn launched_with_slack(host_s: f64, serial_s: f64, gpu_s: f64, slack_s: f64) -> (f64, f64) {
    (
        crate::cost::host_launch_exposed_s(host_s, serial_s, gpu_s, slack_s),
        (gpu_s - host_s).max(0.0),
    )
}

#[cfg(test)]
mod tests {
    use super::launched_with_slack;

    /// By hand: 10 ms of launches over 6 ms of GPU time and 3 ms of the last step's
    /// spare outrun them by 1 ms, and the 2 ms the step waits on the host add whole:
    /// 3 ms, no spare left; 5 ms of launches under 6 ms of GPU time add only the 2 ms
    /// and leave 1 ms spare, whatever the last step left.
    #[test]
    fn launches_outrun_both_gpu_times_and_the_serial_part_adds_whole() {
        let close = |a: (f64, f64), b: (f64, f64)| {
            assert!(
                (a.0 - b.0).abs() < 1e-15 && (a.1 - b.1).abs() < 1e-15,
                "{a:?} != {b:?}"
            );
        };
        close(launched_with_slack(10e-3, 2e-3, 6e-3, 3e-3), (3e-3, 0.0));
        close(launched_with_slack(5e-3, 2e-3, 6e-3, 0.0), (2e-3, 1e-3));
        close(launched_with_slack(5e-3, 2e-3, 6e-3, 4e-3), (2e-3, 1e-3));
        close(launched_with_slack(5e-3, 0.0, 6e-3, 0.0), (0.0, 1e-3));
    }
}
