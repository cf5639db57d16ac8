//! A request's life in the rack: what it asked for, its prefill state and its decode
//! state (separate types: a request is in prefill, then in decode), and the slot store
//! that holds the live requests (`Slots::alloc` / `Slots::release`).

use super::clock::Nanos;
use super::pool::GroupId;
use super::prompt::Prompt;
use super::workload::{NewRequest, Origin};

/// A live request's slot in `Slots` (reused after the request ends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ReqId(pub u32);

pub(crate) struct Request<'a> {
    pub origin: Origin,
    /// When the client sent it: its latencies run from here.
    pub arrival_ns: Nanos,
    /// When it reached the engine's scheduler, through the front end
    /// (`serving.frontend_s` after `arrival_ns`): a step formed from what the scheduler
    /// held before then does not take it.
    pub ingress_ns: Nanos,
    /// Arrived inside the measured window (`Window::starts_in`): its latencies are
    /// recorded if it completes by the window's end.
    pub measured: bool,
    pub input: u32,
    pub output: u32,
    /// Requests this one stands for: one in each of the rack's `fidelity.cohort`
    /// identical copies (1 when exact).
    pub weight: u32,
    /// Its place in the run's arrivals, from 0 (dropped arrivals counted): the key of
    /// its per-request MTP draws (`MtpDraws::PerRequest`), as `twin live` numbers it.
    pub serial: u32,
    /// KV-token equivalents it holds beyond its tokens: a recurrent state and its
    /// sliding-window and chunked layers' KV (`Model::state_bytes_per_request`,
    /// `Model::local_kv_bytes`), at the model's KV bytes per token.
    pub kv_extra: u32,
    pub prefill: PrefillState<'a>,
    pub decode: DecodeState,
}

/// Where the request's prompt is computed, and how far.
pub(crate) struct PrefillState<'a> {
    /// The prompt's block identities.
    pub prompt: Prompt<'a>,
    /// Leading input tokens the instance's prefix cache held at arrival.
    pub cached: u32,
    /// Uncached tokens computed so far.
    pub computed: u32,
    /// Output tokens it had when it was preempted, recomputed with its input (0 until
    /// then: `Scheduler::kv_on_demand`).
    pub recompute: u32,
    pub done: bool,
    pub group: GroupId,
    pub rank: u32,
    /// The cost model's time for this prefill alone (`PrefillRank::LeastCost`; else 0).
    pub est_s: f64,
}

/// Where the request decodes, and how far.
#[derive(Default)]
pub(crate) struct DecodeState {
    pub group: GroupId,
    pub rank: u32,
    /// KV tokens reserved on the decode rank (input + output), 0 until admitted.
    pub kv_reserved: u64,
    pub generated: u32,
    /// Of `generated`, the tokens already counted as emitted (when it left a batch by
    /// preemption).
    pub counted: u32,
    pub first_token_ns: Option<Nanos>,
    pub last_token_ns: Nanos,
    /// In a decode batch: since the group's decode step `join_step`, in context piece
    /// `piece`.
    pub running: bool,
    pub join_step: u64,
    pub piece: u32,
    /// Its context when it joined: its input, and any output it recomputed.
    pub joined_context: u64,
    /// Which stay in a batch this is (unique in the run): a finish scheduled for an
    /// earlier one is stale.
    pub stint: u64,
}

impl<'a> Request<'a> {
    /// A request the workload created at `now`.
    pub fn new(nr: NewRequest<'a>, now: Nanos, measured: bool) -> Self {
        Request {
            origin: nr.origin,
            arrival_ns: now,
            ingress_ns: now,
            measured,
            input: nr.input_tokens,
            output: nr.output_tokens,
            weight: nr.weight.max(1),
            serial: 0,
            kv_extra: 0,
            prefill: PrefillState {
                prompt: nr.prompt,
                cached: 0,
                computed: 0,
                recompute: 0,
                done: false,
                group: GroupId(0),
                rank: 0,
                est_s: 0.0,
            },
            decode: DecodeState::default(),
        }
    }

    /// Tokens its prefill computes: its input not found in the prefix cache, and any
    /// output it recomputes after a preemption.
    pub fn uncached(&self) -> u32 {
        self.input + self.prefill.recompute - self.prefill.cached
    }

    /// Its prompt's KV tokens: its input and any output it recomputes.
    pub fn prompt_tokens(&self) -> u64 {
        self.input as u64 + self.prefill.recompute as u64
    }

    /// KV tokens a rank that allocates on demand takes for it at admission: its prompt
    /// and the token equivalents of its fixed state and local layers' KV.
    pub fn kv_prompt_reserve(&self) -> u64 {
        self.prompt_tokens() + self.kv_extra as u64
    }

    /// KV tokens the request holds at most: its input and its whole output.
    pub fn kv_need(&self) -> u64 {
        self.input as u64 + self.output as u64
    }

    /// KV tokens a rank reserves for it: `kv_need` and the token equivalents of its
    /// fixed state and local layers' KV, as vLLM's hybrid allocator takes a request's
    /// state pages from the same pool as its KV blocks.
    pub fn kv_reserve(&self) -> u64 {
        self.kv_need() + self.kv_extra as u64
    }

    /// Requests it stands for, as a count.
    pub fn w(&self) -> u64 {
        self.weight as u64
    }
}

/// The live requests, by slot; freed slots are reused.
#[derive(Default)]
pub(crate) struct Slots<'a> {
    reqs: Vec<Option<Request<'a>>>,
    free: Vec<u32>,
    live: u64,
}

impl<'a> Slots<'a> {
    pub fn alloc(&mut self, r: Request<'a>) -> ReqId {
        self.live += 1;
        match self.free.pop() {
            Some(s) => {
                self.reqs[s as usize] = Some(r);
                ReqId(s)
            }
            None => {
                self.reqs.push(Some(r));
                ReqId((self.reqs.len() - 1) as u32)
            }
        }
    }

    /// Takes a request out of its slot (the counterpart of `alloc`).
    pub fn release(&mut self, id: ReqId) -> Request<'a> {
        let req = self.reqs[id.0 as usize].take().expect("live request");
        self.free.push(id.0);
        self.live -= 1;
        req
    }

    pub fn get(&self, id: ReqId) -> &Request<'a> {
        self.reqs[id.0 as usize].as_ref().expect("live request")
    }

    /// The request in slot `id`, if one lives there.
    pub fn get_live(&self, id: ReqId) -> Option<&Request<'a>> {
        self.reqs.get(id.0 as usize).and_then(|r| r.as_ref())
    }

    pub fn get_mut(&mut self, id: ReqId) -> &mut Request<'a> {
        self.reqs[id.0 as usize].as_mut().expect("live request")
    }

    /// Requests alive now.
    pub fn live(&self) -> u64 {
        self.live
    }

    /// The live requests in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (ReqId, &Request<'a>)> {
        self.reqs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|r| (ReqId(i as u32), r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(input: u32) -> Request<'static> {
        Request::new(
            NewRequest {
                input_tokens: input,
                output_tokens: 1,
                prompt: Prompt::Listed(&[]),
                origin: Origin::Open,
                prewarm_tokens: 0,
                held_tokens: 0,
                weight: 1,
            },
            0,
            false,
        )
    }

    #[test]
    fn slots_are_reused_last_freed_first() {
        let mut s = Slots::default();
        let a = s.alloc(req(1));
        let b = s.alloc(req(2));
        let c = s.alloc(req(3));
        assert_eq!((a, b, c), (ReqId(0), ReqId(1), ReqId(2)));
        assert_eq!(s.release(b).input, 2);
        assert_eq!(s.release(a).input, 1);
        assert_eq!(s.live(), 1);
        assert_eq!(s.alloc(req(4)), ReqId(0));
        assert_eq!(s.alloc(req(5)), ReqId(1));
        assert_eq!(s.alloc(req(6)), ReqId(3));
        let inputs: Vec<u32> = s.iter().map(|(_, r)| r.input).collect();
        assert_eq!(inputs, [4, 5, 3, 6]);
        assert_eq!(s.get(ReqId(2)).input, 3);
    }
}
