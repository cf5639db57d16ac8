//! Pools, groups and ranks. A pool is a set of identical DEP groups ("instances")
//! with one role; a group has `dep` ranks that step in lock-step; a rank holds queues
//! and a running decode batch. Pools are addressed by role (`Pools::pool(Role)`): a run
//! has at most one pool per role (disaggregated: prefill and decode; aggregated: mixed;
//! prefill-only: prefill).

use super::cache::PrefixCache;
use super::config::{Mode, PoolConfig, ServingScenario};
use super::metrics::PoolStats;
use super::request::ReqId;
use super::scheduler::Scheduler;
use super::PoolCost;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// What a pool's steps do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Prefill only; finished prompts go to the decode pool (or complete, prefill-only).
    Prefill,
    /// Decode only; requests arrive by KV transfer.
    Decode,
    /// Prefill chunks and decode in the same steps (aggregated mode).
    Mixed,
}

/// A group's index among all groups of the run (pools hold consecutive ranges).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) struct GroupId(pub u32);

/// Running requests of one context piece on a rank, as sums.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Piece {
    pub n: u64,
    pub input: u64,
    pub join_steps: u64,
}

impl Piece {
    /// Context tokens of the piece's requests at decode step `step`: inputs plus the
    /// expected yield (`mu` tokens per step) of the steps each has run.
    pub fn context(&self, step: u64, mu: f64) -> u64 {
        self.input + round_nonneg(mu * (self.n * step - self.join_steps) as f64)
    }
}

/// `x.round() as u64` for a finite `0 <= x < 2^63`, without a libm call: half away
/// from zero, as `f64::round`.
#[inline]
pub(crate) fn round_nonneg(x: f64) -> u64 {
    let t = x as u64;
    // `x - t` is exact: t <= x < t + 1 (and x is whole from 2^52 on).
    if x - t as f64 >= 0.5 {
        t + 1
    } else {
        t
    }
}

/// A rank's running decode batch.
#[derive(Debug, Default, Clone)]
pub(crate) struct DecodeSet {
    pub n: u32,
    pub measured: u32,
    /// Input + output of the running requests (their KV reservation).
    pub reserved: u64,
    pub pieces: Vec<Piece>,
}

impl DecodeSet {
    pub fn context(&self, step: u64, mu: f64) -> u64 {
        self.pieces.iter().map(|p| p.context(step, mu)).sum()
    }

    /// The running requests' inputs (with any output they recomputed).
    pub fn inputs(&self) -> u64 {
        self.pieces.iter().map(|p| p.input).sum()
    }

    /// KV tokens the running requests have added by decoding since they joined, at
    /// decode step `step`: the context beyond their inputs.
    pub fn growth(&self, step: u64, mu: f64) -> u64 {
        self.pieces
            .iter()
            .map(|p| p.context(step, mu) - p.input)
            .sum()
    }

    /// The batch's sums agree: its pieces hold its `n` requests and their inputs,
    /// within what it reserved, and an empty batch holds nothing. Asserted (debug
    /// builds) where a request joins and where it leaves.
    pub fn conserved(&self) -> bool {
        let n: u64 = self.pieces.iter().map(|p| p.n).sum();
        let input: u64 = self.pieces.iter().map(|p| p.input).sum();
        n == u64::from(self.n)
            && self.measured <= self.n
            && input <= self.reserved
            && (self.n > 0 || (self.reserved == 0 && input == 0))
    }
}

#[derive(Default)]
pub(crate) struct Rank {
    /// Requests whose prefill runs here, in order.
    pub prefill_q: VecDeque<ReqId>,
    /// Uncached tokens still to compute in `prefill_q`.
    pub prefill_tokens: u64,
    /// Requests placed here, waiting for admission (a batch slot and KV room).
    pub pending: VecDeque<ReqId>,
    /// KV tokens the pending requests need (input + output each).
    pub pending_kv: u64,
    pub transferring: u32,
    /// Requests whose KV arrived, joining the batch at the next step boundary.
    pub joining: VecDeque<ReqId>,
    pub dec: DecodeSet,
    /// KV tokens reserved by admission: each admitted request's input and output, or,
    /// where KV is allocated on demand (`on_demand`), its prompt (input and any output
    /// it recomputes) alone, the running requests' growth since they joined on top.
    pub kv_reserved: u64,
    /// KV allocated as requests grow, the newest running request preempted when it
    /// runs short (`Scheduler::kv_on_demand`).
    pub on_demand: bool,
    /// The running requests in the order they joined, each with its stint (a request
    /// that left is found stale and skipped): the newest is preempted first.
    pub runs: Vec<(ReqId, u64)>,
    /// KV tokens held by requests not in the running batch (transferred or being
    /// prefilled in place); the batch's own use is estimated from `dec`.
    pub kv_held: u64,
    pub link_free_ns: u64,
    /// Estimated seconds of queued prefill work (`PrefillRank::LeastCost`).
    pub est_load_s: f64,
}

impl Rank {
    /// Requests on the rank in any state.
    pub fn requests(&self) -> usize {
        self.prefill_q.len()
            + self.pending.len()
            + self.transferring as usize
            + self.joining.len()
            + self.dec.n as usize
    }

    /// KV tokens in use: held, plus the running batch's context (at most what it
    /// reserved).
    pub fn kv_used(&self, step: u64, mu: f64) -> u64 {
        self.kv_held + self.dec.context(step, mu).min(self.dec.reserved)
    }

    /// KV tokens in use with each request that holds memory here also holding a fixed
    /// state of `state` KV-token equivalents (a hybrid model's recurrent state): the
    /// requests past admission, in the batch or on their way into it or prefilling.
    pub fn kv_used_with_state(&self, step: u64, mu: f64, state: u64) -> u64 {
        let holding = (self.requests() - self.pending.len()) as u64;
        self.kv_used(step, mu) + state.saturating_mul(holding)
    }

    /// The rank's KV accounting holds: what is held outside the batch and what the
    /// batch reserved lie within what admission reserved, and that within `cap`.
    /// Asserted (debug builds) where KV is reserved, observed and released.
    pub fn kv_within(&self, cap: u64) -> bool {
        if self.on_demand {
            return self.kv_held + self.dec.inputs() <= self.kv_reserved && self.kv_reserved <= cap;
        }
        self.kv_held + self.dec.reserved <= self.kv_reserved && self.kv_reserved <= cap
    }

    /// Requests in the batch or on their way into it (they hold a batch slot).
    pub fn batch_slots_taken(&self) -> usize {
        self.dec.n as usize + self.joining.len() + self.transferring as usize
    }
}

/// One DEP group (or TP replica): its ranks step together.
pub(crate) struct Group {
    pub role: Role,
    /// The group's first GPU, and GPUs per rank (the TP size).
    pub gpu_base: u64,
    pub rank_gpus: u64,
    pub ranks: Vec<Rank>,
    pub busy: bool,
    /// When the group's last step ended (0 before its first): how long it has idled
    /// when the next one starts.
    pub last_end_ns: u64,
    /// When its last step started.
    pub last_start_ns: u64,
    /// The last finished step's length and the chunks it streamed to clients (one a
    /// request it gave a token, over the whole group): the front end's load
    /// (`Pools::stream_rate`).
    pub last_step_ns: u64,
    pub last_chunks: f64,
    /// How long the last step's GPU work outlasted the host's launches of it: where
    /// steps are formed ahead, the host launches the next step's kernels meanwhile
    /// (`Simulation::launched_ahead`).
    pub launch_slack_s: f64,
    /// The scheduler's count towards its next take of new requests, and when it last
    /// took them (`serving.scheduler_recv_interval`).
    pub recv_count: u32,
    pub recv_ns: u64,
    /// Steps the scheduler has held ready prompts back for a fuller context batch
    /// (`serving.batch_wait_iters`).
    pub batch_wait_count: u32,
    /// Steps a balanced DEP group has held prompts waiting for every rank to have one,
    /// and held them since every rank had (`serving.adp_balance`).
    pub adp_wait_count: u32,
    pub adp_batching_count: u32,
    pub try_pending: bool,
    /// The current step's prefill work: (rank, request, chunk tokens).
    pub step_prefill: Vec<(u32, ReqId, u32)>,
    pub decode_in_step: bool,
    /// Index of the current (or next) decode step.
    pub dstep: u64,
    /// (last decode step, request, its stint) of the running requests, soonest first; an
    /// entry whose request left the batch since (preempted) is stale and skipped.
    pub finishing: BinaryHeap<Reverse<(u64, ReqId, u64)>>,
    /// Requests that joined the current decode step (their first token comes at its end).
    pub joined: Vec<ReqId>,
    pub last_decode_end_ns: u64,
    /// The first decode step that ended inside the measured window.
    pub window_first_step: Option<u64>,
}

impl Group {
    pub fn new(role: Role, gpu_base: u64, rank_gpus: u64, ranks: Vec<Rank>) -> Self {
        Group {
            role,
            gpu_base,
            rank_gpus,
            ranks,
            busy: false,
            last_end_ns: 0,
            last_start_ns: 0,
            last_step_ns: 0,
            last_chunks: 0.0,
            launch_slack_s: 0.0,
            recv_count: 0,
            recv_ns: 0,
            batch_wait_count: 0,
            adp_wait_count: 0,
            adp_batching_count: 0,
            try_pending: false,
            step_prefill: Vec::new(),
            decode_in_step: false,
            dstep: 0,
            finishing: BinaryHeap::new(),
            joined: Vec::new(),
            last_decode_end_ns: 0,
            window_first_step: None,
        }
    }

    /// The first GPU of rank `r` (a TP rank's GPUs each receive their share of a KV
    /// transfer over their own links, in parallel).
    pub fn first_gpu(&self, r: u32) -> u64 {
        self.gpu_base + r as u64 * self.rank_gpus
    }

    /// Queued prefill work: uncached tokens queued plus running decode requests.
    pub fn prefill_load(&self) -> u64 {
        self.ranks
            .iter()
            .map(|r| r.prefill_tokens + r.dec.n as u64)
            .sum()
    }
}

pub(crate) struct Pool<'a> {
    pub name: &'static str,
    pub role: Role,
    pub cfg: PoolConfig,
    pub cost: &'a dyn PoolCost,
    pub groups: std::ops::Range<u32>,
    pub kv_cap: u64,
    /// The cost model's decode context breakpoints (pieces = breakpoints + 1).
    pub breakpoints: Vec<u64>,
    /// The prefix caches of the pool's instances (none in a decode pool).
    pub prefix: Option<PrefixCache<'a>>,
    /// Ranks of a simulated group: the DEP size, or its share in one copy of the rack
    /// (`fidelity.cohort`; the cost model is shown the whole group, the simulated
    /// ranks repeated).
    pub sim_dep: u32,
    /// Instances each simulated group stands for (its steps count this many times).
    pub group_copies: u32,
    /// Copies of the rack each simulated request and queue stands for.
    pub copies: u32,
    /// Requests waiting in the pool (queued for prefill or decode admission).
    pub waiting: u64,
    /// Requests placed so far (round-robin routing).
    pub placed: u64,
    pub stats: PoolStats,
    /// How a mixed pool forms its steps (`serving.scheduler`; twin's own elsewhere).
    pub scheduler: Scheduler,
    /// Whether its steps are formed while the previous one runs (`serving.async_scheduling`).
    pub ahead: bool,
    /// Whether a step with prefill work runs the decode batch too, its tokens taken from
    /// the step's budget first, where the scheduler would pause decode
    /// (`serving.mixed_chunk`: SGLang's `--enable-mixed-chunk`).
    pub mixed_chunk: bool,
}

impl Pool<'_> {
    /// Whether a step with prefill work runs no decode.
    pub fn prefill_pauses_decode(&self) -> bool {
        self.scheduler.prefill_pauses_decode() && !self.mixed_chunk
    }

    /// Too many requests already wait here: new ones are dropped.
    pub fn full(&self) -> bool {
        self.waiting.saturating_mul(self.copies as u64) >= self.cfg.max_queued_requests as u64
    }
}

/// The scheduler of a pool of `role`: the scenario's for the mixed pool, twin's own
/// elsewhere.
fn pool_scheduler(sc: &ServingScenario, role: Role) -> Scheduler {
    if role == Role::Mixed {
        sc.scheduler()
    } else {
        Scheduler::Twin
    }
}

/// `n` idle ranks, each with `pieces` empty decode context pieces, KV allocated on
/// demand or reserved.
fn empty_ranks(n: u32, pieces: usize, on_demand: bool) -> Vec<Rank> {
    (0..n)
        .map(|_| Rank {
            dec: DecodeSet {
                pieces: vec![Piece::default(); pieces],
                ..DecodeSet::default()
            },
            on_demand,
            ..Rank::default()
        })
        .collect()
}

/// The run's pools (in report order) and all their groups.
pub(crate) struct Pools<'a> {
    pub list: Vec<Pool<'a>>,
    pub groups: Vec<Group>,
}

impl<'a> Pools<'a> {
    /// The pools `sc`'s mode runs, priced by `prefill_cost` and `decode_cost` (the
    /// mixed pool by `decode_cost`), GPUs numbered prefill pool first; `chained`: the
    /// workload's block identities name their whole prefix; `block_tokens`: tokens per
    /// identity (the caches' capacities are counted in them).
    pub fn build(
        sc: &ServingScenario,
        prefill_cost: &'a dyn PoolCost,
        decode_cost: &'a dyn PoolCost,
        draft_tokens: u32,
        chained: bool,
        block_tokens: u64,
    ) -> Self {
        let s = &sc.serving;
        let specs: Vec<(&'static str, Role, &PoolConfig, &'a dyn PoolCost)> = match s.mode {
            Mode::Disaggregated => vec![
                ("prefill", Role::Prefill, &s.prefill, prefill_cost),
                ("decode", Role::Decode, &s.decode, decode_cost),
            ],
            Mode::Aggregated => vec![("mixed", Role::Mixed, &s.decode, decode_cost)],
            Mode::PrefillOnly => vec![("prefill", Role::Prefill, &s.prefill, prefill_cost)],
        };
        let mut pools = Pools {
            list: Vec::new(),
            groups: Vec::new(),
        };
        let mut gpu = 0u64;
        let copies = sc.copies();
        for (name, role, cfg, cost) in specs {
            let kv_cap = cfg
                .kv_capacity_tokens_per_rank
                .unwrap_or_else(|| cost.kv_capacity_tokens_per_rank())
                .max(1);
            let start = pools.groups.len() as u32;
            let breakpoints = cost.decode_context_breakpoints(draft_tokens);
            // One copy of the rack (`fidelity.cohort`): every `group_copies`-th
            // instance, each with its first `dep / rank_copies` ranks (validated).
            let (group_copies, rank_copies) = sc.pool_copies(cfg, copies).unwrap_or((1, 1));
            let sim_dep = cfg.dep / rank_copies;
            let tp = cfg.tp.max(1) as u64;
            let scheduler = pool_scheduler(sc, role);
            let on_demand = scheduler.kv_on_demand();
            for i in 0..cfg.instances / group_copies {
                let ranks = empty_ranks(sim_dep, breakpoints.len() + 1, on_demand);
                let base = gpu + (i * group_copies) as u64 * cfg.dep as u64 * tp;
                pools.groups.push(Group::new(role, base, tp, ranks));
            }
            gpu += cfg.instances as u64 * cfg.dep as u64 * tp;
            let prefix = (role != Role::Decode).then(|| {
                let hbm_tokens = cfg
                    .prefix_cache_tokens
                    .unwrap_or(kv_cap.saturating_mul(cfg.dep as u64))
                    / rank_copies as u64;
                PrefixCache::new(
                    (cfg.instances / group_copies) as usize,
                    hbm_tokens / block_tokens,
                    cfg.host_cache_tokens / block_tokens,
                    chained,
                )
            });
            pools.list.push(Pool {
                name,
                role,
                cfg: cfg.clone(),
                cost,
                groups: start..pools.groups.len() as u32,
                kv_cap,
                breakpoints,
                prefix,
                sim_dep,
                group_copies,
                copies,
                waiting: 0,
                placed: 0,
                stats: PoolStats::default(),
                scheduler,
                ahead: role == Role::Mixed && sc.schedules_ahead(),
                // Only where the scheduler would pause decode (SGLang's): the others
                // mix prefill and decode anyway.
                mixed_chunk: role == Role::Mixed
                    && sc.serving.mixed_chunk == Some(true)
                    && sc.scheduler().prefill_pauses_decode(),
            });
        }
        pools
    }

    /// The role of the pool arrivals enter: prefill, or the mixed pool.
    pub fn entry(&self) -> Role {
        self.list[0].role
    }

    pub fn pool(&self, role: Role) -> &Pool<'a> {
        self.list
            .iter()
            .find(|p| p.role == role)
            .expect("the mode runs a pool of this role")
    }

    pub fn pool_mut(&mut self, role: Role) -> &mut Pool<'a> {
        self.list
            .iter_mut()
            .find(|p| p.role == role)
            .expect("the mode runs a pool of this role")
    }

    /// The pools in report order.
    pub fn iter(&self) -> impl Iterator<Item = &Pool<'a>> {
        self.list.iter()
    }

    /// The groups of pool `p`, in order.
    pub fn groups_of(&self, p: &Pool<'_>) -> &[Group] {
        &self.groups[p.groups.start as usize..p.groups.end as usize]
    }

    pub fn group(&self, g: GroupId) -> &Group {
        &self.groups[g.0 as usize]
    }

    pub fn group_mut(&mut self, g: GroupId) -> &mut Group {
        &mut self.groups[g.0 as usize]
    }

    /// The pool a group belongs to.
    pub fn pool_of(&self, g: GroupId) -> &Pool<'a> {
        self.pool(self.group(g).role)
    }

    pub fn pool_of_mut(&mut self, g: GroupId) -> &mut Pool<'a> {
        let role = self.group(g).role;
        self.pool_mut(role)
    }

    /// Group `g`'s position in its pool (its instance index).
    pub fn instance(&self, g: GroupId) -> usize {
        (g.0 - self.pool_of(g).groups.start) as usize
    }

    pub fn rank_mut(&mut self, g: GroupId, r: u32) -> &mut Rank {
        &mut self.groups[g.0 as usize].ranks[r as usize]
    }

    /// Copies of the rack one is simulated of (`ServingScenario::copies`).
    pub fn copies(&self) -> u32 {
        self.list.first().map_or(1, |p| p.copies)
    }

    /// Chunks streamed to clients a second at `now`: each group's last step's, while
    /// its next runs or it has idled less than that step lasted.
    pub fn stream_rate(&self, now: u64) -> f64 {
        self.groups
            .iter()
            .filter(|g| g.last_step_ns > 0 && (g.busy || now - g.last_end_ns <= g.last_step_ns))
            .map(|g| g.last_chunks / (g.last_step_ns as f64 * 1e-9))
            .sum()
    }

    /// The largest DEP of any pool.
    pub fn max_dep(&self) -> usize {
        self.list
            .iter()
            .map(|p| p.cfg.dep as usize)
            .max()
            .unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_nonneg_is_f64_round() {
        let mut x = 0.0f64;
        for v in [
            0.0,
            0.5,
            1.5,
            2.5,
            0.49999999999999994,
            1e15 + 0.5,
            4503599627370495.5,
            123.456,
        ]
        .into_iter()
        .chain((0..10_000).map(|_| {
            x = (x * 1.37 + 0.731) % 1e9;
            x
        })) {
            assert_eq!(round_nonneg(v), v.round() as u64, "{v}");
        }
    }
}
