//! A group's steps: forming one (requests joining the batch, prefill chunks, the
//! decode batch priced as pieces), and applying one that finished (prefill progress,
//! first tokens, inter-token gaps, requests whose last step it was).

use super::clock::{ns_to_secs, secs_to_ns};
use super::config::Mode;
use super::pool::{GroupId, Role};
use super::rack::{Event, Rack};
use super::request::{ReqId, Request};
use super::SimError;
use crate::cost::{Phase, ReqSlice, StepCost, StepShape};
use std::cmp::Reverse;

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
        // A device that idled pays its wake-up (the cost model's; none for GPUs).
        let idle_s = ns_to_secs(self.now.saturating_sub(self.pools.group(g).last_end_ns));
        let wake_s = self.pools.pool_of(g).cost.wake_s(idle_s);
        if self.steps.is_some() {
            self.log_step(g, &cost, wake_s);
        }
        self.start_step(g, &cost, wake_s)
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

    /// A request joins rank `r`'s running batch at the group's current decode step:
    /// its steps are drawn now, and it finishes at the end of the last of them.
    fn join_decode(&mut self, g: GroupId, r: usize, id: ReqId) {
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

    /// Group `g`'s step ended now: apply its prefill and decode progress, then form the
    /// next one.
    pub(super) fn on_step_done(&mut self, g: GroupId) -> Result<(), SimError> {
        let grp = self.pools.group_mut(g);
        grp.busy = false;
        grp.last_end_ns = self.now;
        let in_window = self.window.ends_in(self.now);
        self.prefill_progress(g, in_window)?;
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

    /// The step's decode progress: first tokens of the requests that joined it, the
    /// inter-token gap of every other measured request, and the requests whose last
    /// step it was; then ranks admit what now fits.
    fn decode_progress(&mut self, g: GroupId, in_window: bool) -> Result<(), SimError> {
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

/// The whole group's ranks for the cost model: the `sim_dep` simulated ranks' slices
/// repeated up to `dep` (one copy of the rack simulated: every copy of a rank has the
/// same batch); nothing to do when they are equal.
fn repeat_ranks(slices: &mut [Vec<ReqSlice>], sim_dep: usize, dep: usize) {
    let (sim, rest) = slices[..dep].split_at_mut(sim_dep);
    for (j, dst) in rest.iter_mut().enumerate() {
        dst.clone_from(&sim[j % sim_dep]);
    }
}
