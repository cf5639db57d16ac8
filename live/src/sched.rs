//! The live scheduler: which requests each step of each group runs. Pure logic (no
//! threads, no clock): the run loop (`run.rs`) feeds it arrivals and finished steps and
//! executes the plans it forms.
//!
//! It follows the simulator's serving semantics (`sim::serving`), so that a simulation
//! of the same scenario predicts it:
//! - routing: prefill instance by prefix affinity (queued prefill tokens plus this
//!   request's weighted uncached tokens there), least load or round robin; a rank of
//!   the instance by least queued tokens (mixed pools: least requests); decode rank by
//!   least requests, round robin or least tokens;
//! - continuous batching with chunked prefill: each step, every rank works through its
//!   prefill queue in order within `chunk_tokens_per_rank` and
//!   `max_prefill_requests_per_rank`, and runs every request of its decode batch;
//!   requests join the batch at a step boundary while it has fewer than
//!   `max_batch_per_rank`; a mixed step runs the prefill pass, then the decode pass;
//! - admission (policy `reserve`, the simulator's): a request is admitted when the
//!   rank's reserved KV plus its input, output and drafts fit `kv_capacity_tokens_per_rank`,
//!   in arrival order, and its pages are allocated then, so decode never runs out;
//!   policy `vllm` (aggregated only) admits by free pages for the prompt and allocates
//!   decode pages on demand, preempting the most recently admitted request (recomputed
//!   later) when a rank runs out;
//! - prefix cache keyed by the prompt's block hashes (`blocks.rs`): looked up at
//!   arrival (the hit blocks are held from then on), full prompt blocks inserted when
//!   the prefill finishes;
//! - the first token comes from the first decode step (the prefill computes the KV of
//!   every prompt token but the last; the decode pass starts from the last one);
//! - MTP: each decode row set is the last token plus the drafts; how many drafts a step
//!   accepts follows the declared rule (`accepted`), the emitted tokens are the
//!   accepted drafts plus the target model's token, capped at the request's output.

use crate::blocks::KvPages;
use engine::serve::{Seq, SeqOut};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sim::serving::core::hash_words;
use sim::serving::{
    DecodeRouter, Mode, NewRequest, Origin, PrefillRank, PrefillRouter, ServingScenario,
    BLOCK_TOKENS,
};
use std::collections::VecDeque;
use std::sync::Arc;

/// How KV is admitted and what happens when it runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvPolicy {
    /// The simulator's: input + output reserved at admission; no preemption.
    Reserve,
    /// vLLM's: pages for the prompt at admission, decode pages on demand, preemption
    /// (recompute) when a rank runs out. Aggregated mode only.
    Vllm,
}

/// The pool a group belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Prefill,
    Decode,
    Mixed,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
            Role::Mixed => "mixed",
        }
    }
}

/// Where a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for admission on a mixed rank, or for a decode rank (disaggregated).
    Pending,
    /// In a prefill queue.
    Prefill,
    /// KV on its way to the decode rank.
    Transfer,
    /// Ready to join the decode batch.
    Joining,
    Running,
    Done,
}

#[derive(Debug, Clone)]
pub struct Req {
    pub id: u32,
    pub origin: Origin,
    pub arrival_s: f64,
    pub input: u32,
    pub output: u32,
    pub blocks: Arc<Vec<u64>>,
    /// Leading prompt tokens found in the prefix cache.
    pub cached: u32,
    /// Prompt tokens prefilled beyond the cached ones.
    pub computed: u32,
    pub state: State,
    pub pf: (usize, usize),
    pub dec: (usize, usize),
    /// Block table on the rank holding the request's KV now, and how it holds it.
    pub table: Vec<u32>,
    pub held: Vec<u64>,
    pub private: Vec<u32>,
    /// Disaggregated: the prefill rank's pages, released once the KV left.
    pub pf_private: Vec<u32>,
    /// Decode: tokens in KV, the last token, the drafts, steps done.
    pub pos: usize,
    pub last: u32,
    pub drafts: Vec<u32>,
    pub dsteps: u32,
    pub generated: u32,
    /// Generated tokens (for recomputation after a preemption).
    pub gen_tokens: Vec<u32>,
    pub reserved: u64,
    pub prefill_start_s: Option<f64>,
    pub prefill_done_s: Option<f64>,
    pub token_times: Vec<f64>,
    pub finish_s: Option<f64>,
    pub preemptions: u32,
    pub transfer_bytes: u64,
}

/// Per-rank queues and KV.
#[derive(Debug)]
pub struct Rank {
    pub prefill_q: VecDeque<u32>,
    pub prefill_tokens: u64,
    pub pending: VecDeque<u32>,
    pub transferring: u32,
    pub joining: VecDeque<u32>,
    pub running: Vec<u32>,
    pub reserved: u64,
    pub kv: KvPages,
}

impl Rank {
    fn requests(&self) -> usize {
        self.prefill_q.len()
            + self.pending.len()
            + self.transferring as usize
            + self.joining.len()
            + self.running.len()
    }
}

#[derive(Debug)]
pub struct Group {
    pub role: Role,
    pub ranks: Vec<Rank>,
    pub busy: bool,
}

/// One rank's part of a step.
#[derive(Debug, Clone, Default)]
pub struct RankPlan {
    pub prefill: Vec<Seq>,
    pub decode: Vec<Seq>,
    /// Request of each prefill and decode sequence.
    pub prefill_reqs: Vec<(u32, u32)>,
    pub decode_reqs: Vec<u32>,
}

/// A step of a group.
#[derive(Debug, Clone)]
pub struct StepPlan {
    pub group: usize,
    pub ranks: Vec<RankPlan>,
    pub drafts: usize,
}

/// What the caller must do after an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Tell the workload driver that a request ended.
    End {
        origin: Origin,
        completed: bool,
        context: u64,
    },
    /// Move request `req`'s KV (`pages` on prefill rank `from`) to `to_pages` on decode
    /// rank `to`.
    Transfer {
        req: u32,
        from: (usize, usize),
        pages: Vec<u32>,
        to: (usize, usize),
        to_pages: Vec<u32>,
    },
}

/// What the scheduler is built from.
#[derive(Debug, Clone)]
pub struct SchedConfig {
    pub scenario: ServingScenario,
    pub policy: KvPolicy,
    pub page: usize,
    pub vocab: usize,
    pub drafts: usize,
    pub acceptance: Vec<f64>,
    pub seed: u64,
    /// KV capacity per rank (tokens) of the prefill and decode (or mixed) pools.
    pub kv_cap: (u64, u64),
    /// Prefix-cache space per rank (tokens) on prefill / mixed ranks.
    pub cache_tokens: u64,
}

pub struct Scheduler {
    pub cfg: SchedConfig,
    pub groups: Vec<Group>,
    pub reqs: Vec<Req>,
    /// Groups of the entry pool (prefill or mixed) and of the decode pool.
    entry: std::ops::Range<usize>,
    decode: std::ops::Range<usize>,
    waiting_entry: u64,
    waiting_decode: u64,
    live: u64,
    rr: (u64, u64),
    pub dropped: u64,
    pub preemptions: u64,
}

/// The prompt token at position `pos`: a hash of its block's identity and offset, so
/// equal block hashes mean equal tokens (the prefix cache's KV is valid to reuse).
pub fn prompt_token(blocks: &[u64], pos: usize, vocab: usize) -> u32 {
    let b = blocks
        .get(pos / BLOCK_TOKENS as usize)
        .copied()
        .unwrap_or(0);
    (hash_words(&[b, (pos % BLOCK_TOKENS as usize) as u64]) % vocab as u64) as u32
}

/// Drafts accepted by decode step `step` of request `req` under the declared rule: the
/// i-th draft is accepted when the ones before it were and a uniform draw from the
/// run's `mtp` stream for (request, step) falls below `acceptance[i]` (random weights
/// make real acceptance meaningless; this reproduces the scenario's acceptance rates).
pub fn accepted(seed: u64, req: u32, step: u32, acceptance: &[f64], drafts: usize) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64(hash_words(&[seed, 0x6d7470, req as u64, step as u64]));
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

impl Scheduler {
    pub fn new(cfg: SchedConfig) -> Scheduler {
        let sc = &cfg.scenario;
        let mut groups = Vec::new();
        let ppb = BLOCK_TOKENS as usize / cfg.page;
        let mut add = |role: Role, pool: &sim::serving::PoolConfig, cap: u64, cache: u64| {
            let start = groups.len();
            for _ in 0..pool.instances {
                let ranks = (0..pool.dep)
                    .map(|_| {
                        let pages = (cap as usize).div_ceil(cfg.page)
                            + (cache as usize).div_ceil(cfg.page * ppb) * ppb;
                        Rank {
                            prefill_q: VecDeque::new(),
                            prefill_tokens: 0,
                            pending: VecDeque::new(),
                            transferring: 0,
                            joining: VecDeque::new(),
                            running: Vec::new(),
                            reserved: 0,
                            kv: KvPages::new(pages, cfg.page, BLOCK_TOKENS as usize),
                        }
                    })
                    .collect();
                groups.push(Group {
                    role,
                    ranks,
                    busy: false,
                });
            }
            start..groups.len()
        };
        let (entry, decode) = match sc.serving.mode {
            Mode::Aggregated => {
                let e = add(
                    Role::Mixed,
                    &sc.serving.decode,
                    cfg.kv_cap.1,
                    cfg.cache_tokens,
                );
                (e.clone(), e.end..e.end)
            }
            _ => {
                let e = add(
                    Role::Prefill,
                    &sc.serving.prefill,
                    cfg.kv_cap.0,
                    cfg.cache_tokens,
                );
                let d = add(Role::Decode, &sc.serving.decode, cfg.kv_cap.1, 0);
                (e, d)
            }
        };
        Scheduler {
            cfg,
            groups,
            reqs: Vec::new(),
            entry,
            decode,
            waiting_entry: 0,
            waiting_decode: 0,
            live: 0,
            rr: (0, 0),
            dropped: 0,
            preemptions: 0,
        }
    }

    fn sc(&self) -> &ServingScenario {
        &self.cfg.scenario
    }

    /// Requests alive (queued, prefilling, decoding).
    pub fn live(&self) -> u64 {
        self.live
    }

    fn entry_pool(&self) -> &sim::serving::PoolConfig {
        match self.groups[self.entry.start].role {
            Role::Mixed => &self.sc().serving.decode,
            _ => &self.sc().serving.prefill,
        }
    }

    fn pool_of(&self, g: usize) -> &sim::serving::PoolConfig {
        match self.groups[g].role {
            Role::Prefill => &self.sc().serving.prefill,
            _ => &self.sc().serving.decode,
        }
    }

    fn kv_cap(&self, g: usize) -> u64 {
        match self.groups[g].role {
            Role::Prefill => self.cfg.kv_cap.0,
            _ => self.cfg.kv_cap.1,
        }
    }

    /// KV a decoding request needs: input, output and the positions drafts write.
    fn kv_need(&self, r: &Req) -> u64 {
        r.input as u64 + r.output as u64 + self.cfg.drafts as u64
    }

    /// A request arrives at `now`. Returns the driver notification when it is dropped.
    pub fn arrive(&mut self, now: f64, nr: NewRequest) -> Vec<Action> {
        let id = self.reqs.len() as u32;
        let limits = &self.sc().limits;
        let entry_q = self.entry_pool().max_queued_requests as u64;
        let mixed = self.groups[self.entry.start].role == Role::Mixed;
        let mut req = Req {
            id,
            origin: nr.origin,
            arrival_s: now,
            input: nr.input_tokens.max(1),
            output: nr.output_tokens.max(1),
            blocks: Arc::new((0..nr.prompt.len()).map(|i| nr.prompt.get(i)).collect()),
            cached: 0,
            computed: 0,
            state: State::Prefill,
            pf: (0, 0),
            dec: (0, 0),
            table: Vec::new(),
            held: Vec::new(),
            private: Vec::new(),
            pf_private: Vec::new(),
            pos: 0,
            last: 0,
            drafts: Vec::new(),
            dsteps: 0,
            generated: 0,
            gen_tokens: Vec::new(),
            reserved: 0,
            prefill_start_s: None,
            prefill_done_s: None,
            token_times: Vec::new(),
            finish_s: None,
            preemptions: 0,
            transfer_bytes: 0,
        };
        let too_big = mixed && self.kv_need(&req) > self.cfg.kv_cap.1;
        if self.live >= limits.max_live_requests || self.waiting_entry >= entry_q || too_big {
            req.state = State::Done;
            req.finish_s = Some(now);
            let origin = req.origin;
            self.reqs.push(req);
            self.dropped += 1;
            return vec![Action::End {
                origin,
                completed: false,
                context: 0,
            }];
        }
        self.live += 1;
        self.waiting_entry += 1;
        let g = self.route_prefill(&req);
        let r = self.pick_rank(g);
        // Prefix cache: the leading cached blocks, held from now on. A request never
        // writes into a cached block: at most the blocks before its last token.
        let rank = &mut self.groups[g].ranks[r];
        let usable = ((req.input as u64 - 1) / BLOCK_TOKENS) as usize;
        let hits = rank.kv.peek(&req.blocks[..usable.min(req.blocks.len())]);
        req.held = req.blocks[..hits].to_vec();
        req.table = rank.kv.acquire(&req.held);
        req.cached = (hits as u64 * BLOCK_TOKENS) as u32;
        req.pf = (g, r);
        if mixed {
            req.state = State::Pending;
            rank.pending.push_back(id);
        } else {
            rank.prefill_q.push_back(id);
            rank.prefill_tokens += (req.input - 1 - req.cached) as u64;
        }
        self.reqs.push(req);
        if mixed {
            self.admit_mixed(g, r);
        }
        Vec::new()
    }

    fn group_load(&self, g: usize) -> u64 {
        self.groups[g]
            .ranks
            .iter()
            .map(|r| r.prefill_tokens + r.running.len() as u64)
            .sum()
    }

    fn route_prefill(&mut self, req: &Req) -> usize {
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

    fn pick_rank(&self, g: usize) -> usize {
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

    /// Mixed rank: admit pending requests in order while KV allows.
    fn admit_mixed(&mut self, g: usize, r: usize) {
        let cap = self.kv_cap(g);
        while let Some(&id) = self.groups[g].ranks[r].pending.front() {
            let need = self.kv_need(&self.reqs[id as usize]);
            let (input, cached, pos_end) = {
                let q = &self.reqs[id as usize];
                // Positions the request writes: its whole life under `reserve`, the
                // prompt (and what it had generated before a preemption) under `vllm`.
                let end = match self.cfg.policy {
                    KvPolicy::Reserve => need as usize,
                    KvPolicy::Vllm => q.input as usize + q.gen_tokens.len() + 1,
                };
                (q.input, q.cached, end)
            };
            let rank = &mut self.groups[g].ranks[r];
            if self.cfg.policy == KvPolicy::Reserve && rank.reserved + need > cap {
                break;
            }
            let have = self.reqs[id as usize].table.len();
            let want = rank.kv.pages_for(pos_end).saturating_sub(have);
            let Some(pages) = rank.kv.alloc(want) else {
                break;
            };
            rank.pending.pop_front();
            let uncached = (input - 1 - cached) as u64;
            rank.prefill_q.push_back(id);
            rank.prefill_tokens += uncached + self.reqs[id as usize].gen_tokens.len() as u64;
            if self.cfg.policy == KvPolicy::Reserve {
                rank.reserved += need;
            }
            let q = &mut self.reqs[id as usize];
            q.reserved = if self.cfg.policy == KvPolicy::Reserve {
                need
            } else {
                0
            };
            q.table.extend_from_slice(&pages);
            q.private.extend_from_slice(&pages);
            q.state = State::Prefill;
        }
    }

    /// Tokens the prefill computes for a request: prompt positions (and regenerated
    /// output after a preemption) before the last one.
    fn prefill_len(q: &Req) -> u32 {
        q.input - 1 + q.gen_tokens.len() as u32
    }

    /// Token at position `pos` of a request's sequence (prompt, then generated).
    fn token_at(&self, q: &Req, pos: usize) -> u32 {
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
    fn finish_empty_prefills(&mut self, g: usize, r: usize, now: f64, out: &mut Vec<Action>) {
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

    fn form_prefill(
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

    fn form_decode(&mut self, g: usize, r: usize, plan: &mut RankPlan) {
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
    fn grow_or_preempt(&mut self, g: usize, r: usize) {
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

    fn preempt(&mut self, g: usize, r: usize, id: u32) {
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

    fn admit(&mut self, g: usize, r: usize, out: &mut Vec<Action>) {
        match self.groups[g].role {
            Role::Mixed => self.admit_mixed(g, r),
            Role::Decode => self.admit_decode(g, r, out),
            Role::Prefill => {}
        }
    }

    /// A request's prefill is complete: its full prompt blocks enter the prefix cache;
    /// it joins the decode batch here (mixed) or is routed to a decode rank.
    fn prefill_finished(&mut self, g: usize, r: usize, id: u32, now: f64, out: &mut Vec<Action>) {
        let rank = &mut self.groups[g].ranks[r];
        rank.prefill_q.retain(|&x| x != id);
        self.waiting_entry = self.waiting_entry.saturating_sub(1);
        let q = &mut self.reqs[id as usize];
        q.prefill_done_s = Some(now);
        if q.gen_tokens.is_empty() {
            // Blocks the prefill wrote whole (the last prompt token is the decode's).
            let full = ((Self::prefill_len(q) as u64 / BLOCK_TOKENS) as usize).min(q.blocks.len());
            let ppb = BLOCK_TOKENS as usize / self.cfg.page;
            if full * ppb <= q.table.len() {
                let held = q.held.len();
                let private = rank.kv.insert(&q.blocks[..full], &q.table, held);
                q.held = q.blocks[..full.max(held)].to_vec();
                q.private = private;
            }
        }
        let pos = Self::prefill_len(q) as usize;
        q.pos = pos;
        q.last = if pos < q.input as usize {
            prompt_token(&q.blocks, pos, self.cfg.vocab)
        } else {
            q.gen_tokens[pos - q.input as usize]
        };
        q.drafts.clear();
        match self.groups[g].role {
            Role::Mixed => {
                q.state = State::Joining;
                q.dec = (g, r);
                self.groups[g].ranks[r].joining.push_back(id);
            }
            _ => self.route_decode(id, out),
        }
    }

    fn route_decode(&mut self, id: u32, out: &mut Vec<Action>) {
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

    /// Decode rank: admit pending requests in order while the batch has room and the
    /// KV fits; each starts its KV transfer.
    fn admit_decode(&mut self, g: usize, r: usize, out: &mut Vec<Action>) {
        let cap = self.cfg.kv_cap.1;
        let max_batch = self.sc().serving.decode.max_batch_per_rank as usize;
        loop {
            let rank = &self.groups[g].ranks[r];
            let Some(&id) = rank.pending.front() else {
                break;
            };
            let need = self.kv_need(&self.reqs[id as usize]);
            let in_batch = rank.running.len() + rank.joining.len() + rank.transferring as usize;
            if in_batch >= max_batch || rank.reserved + need > cap {
                break;
            }
            let rank = &mut self.groups[g].ranks[r];
            let Some(pages) = rank.kv.alloc(rank.kv.pages_for(need as usize)) else {
                break;
            };
            rank.pending.pop_front();
            rank.reserved += need;
            rank.transferring += 1;
            self.waiting_decode = self.waiting_decode.saturating_sub(1);
            let q = &mut self.reqs[id as usize];
            q.reserved = need;
            q.state = State::Transfer;
            let written = self.groups[q.pf.0].ranks[q.pf.1].kv.pages_for(q.pos);
            out.push(Action::Transfer {
                req: id,
                from: q.pf,
                pages: q.table[..written].to_vec(),
                to: (g, r),
                to_pages: pages[..written].to_vec(),
            });
            q.table = pages.clone();
            // The prefill rank's pages are released when the export is done.
            q.pf_private = std::mem::replace(&mut q.private, pages);
        }
    }

    /// The export of request `id`'s KV left its prefill rank: release them there.
    pub fn exported(&mut self, id: u32) {
        let (g, r) = self.reqs[id as usize].pf;
        let q = &mut self.reqs[id as usize];
        let rank = &mut self.groups[g].ranks[r];
        rank.kv.unhold(&q.held);
        q.held.clear();
        rank.kv.release(&q.pf_private);
        q.pf_private.clear();
    }

    /// The KV of request `id` arrived at its decode rank.
    pub fn transferred(&mut self, id: u32, bytes: u64) {
        let (g, r) = self.reqs[id as usize].dec;
        let rank = &mut self.groups[g].ranks[r];
        rank.transferring = rank.transferring.saturating_sub(1);
        rank.joining.push_back(id);
        let q = &mut self.reqs[id as usize];
        q.transfer_bytes = bytes;
        q.state = State::Joining;
    }

    fn release(&mut self, g: usize, r: usize, id: u32) {
        let rank = &mut self.groups[g].ranks[r];
        let q = &mut self.reqs[id as usize];
        rank.kv.release(&q.private);
        rank.kv.unhold(&q.held);
        rank.reserved = rank.reserved.saturating_sub(q.reserved);
        q.private.clear();
        q.held.clear();
        q.table.clear();
    }

    fn finish(&mut self, g: usize, r: usize, id: u32, now: f64, out: &mut Vec<Action>) {
        self.groups[g].ranks[r].running.retain(|&x| x != id);
        self.release(g, r, id);
        let q = &mut self.reqs[id as usize];
        q.state = State::Done;
        q.finish_s = Some(now);
        self.live -= 1;
        out.push(Action::End {
            origin: q.origin,
            completed: true,
            context: q.input as u64 + q.output as u64,
        });
    }

    /// Whether any group has queued work it could run.
    pub fn idle_groups(&self) -> Vec<usize> {
        (0..self.groups.len())
            .filter(|&g| !self.groups[g].busy)
            .collect()
    }

    /// KV pages in use and capacity per rank of group `g`.
    pub fn kv_use(&self, g: usize) -> Vec<(usize, usize)> {
        self.groups[g]
            .ranks
            .iter()
            .map(|r| (r.kv.used(), r.kv.total()))
            .collect()
    }
}
