//! The handoff from prefill to decode: the decode router's placement, the decode
//! rank's admission (a batch slot and KV room for input + output, reserved up front),
//! and the KV transfer over the destination rank's ingress link (NVLink inside a
//! domain, the scale-out network across), queued per destination rank.

use super::clock::secs_to_ns;
use super::pool::{GroupId, Role};
use super::rack::{Event, Rack};
use super::request::ReqId;
use super::router;
use spec::hardware::Link;

impl Rack<'_> {
    /// A prefilled request goes to a decode rank (`router::decode_rank`), or is dropped
    /// if no rank could ever hold it or the decode pool's queue is full.
    pub(super) fn route_decode(&mut self, id: ReqId) {
        let pool = self.pools.pool(Role::Decode);
        let need = self.reqs.get(id).kv_reserve();
        if need > pool.kv_cap || pool.full() {
            let req = self.reqs.release(id);
            self.acc.input_tokens_dropped_after_prefill += req.input as u64 * req.w();
            self.drop_request(req.origin, req.measured, req.w());
            return;
        }
        let groups = self.pools.groups_of(pool);
        let (i, r) = router::decode_rank(self.sc.router.decode, pool.placed, groups);
        let g = GroupId(pool.groups.start + i as u32);
        let pool = self.pools.pool_mut(Role::Decode);
        pool.placed += 1;
        pool.waiting += 1;
        let req = self.reqs.get_mut(id);
        req.decode.group = g;
        req.decode.rank = r;
        let rank = self.pools.rank_mut(g, r);
        rank.pending.push_back(id);
        rank.pending_kv += need;
        self.admit_decode(g, r);
    }

    /// The link a transfer from `src_gpu` to `dst_gpu` uses.
    fn link(&self, src_gpu: u64, dst_gpu: u64) -> &Link {
        if src_gpu / self.domain_gpus == dst_gpu / self.domain_gpus {
            &self.hw.nvlink
        } else {
            &self.hw.scaleout
        }
    }

    /// Decode rank admits waiting requests in order while it has a batch slot and KV
    /// room; each admitted request's KV transfer starts on the rank's ingress link.
    pub(super) fn admit_decode(&mut self, g: GroupId, r: u32) {
        let pool = self.pools.pool_of(g);
        if pool.role != Role::Decode {
            return;
        }
        let cap = pool.kv_cap;
        let max_batch = pool.cfg.max_batch_per_rank as usize;
        let sc = self.sc;
        let kt = &sc.serving.kv_transfer;
        let dst_gpu = self.pools.group(g).first_gpu(r);
        loop {
            let rank = &self.pools.group(g).ranks[r as usize];
            let Some(&id) = rank.pending.front() else {
                break;
            };
            let req = self.reqs.get(id);
            let need = req.kv_reserve();
            if rank.batch_slots_taken() >= max_batch || rank.kv_reserved + need > cap {
                break;
            }
            let input = req.input;
            // Its recurrent state and local layers' KV travel with its KV.
            let extra = req.kv_extra;
            let src_gpu = self
                .pools
                .group(req.prefill.group)
                .first_gpu(req.prefill.rank);
            let link = self.link(src_gpu, dst_gpu);
            let bytes = self.kv_bytes_per_token * (input as f64 + extra as f64);
            let bw = (link.bytes_per_s * kt.link_efficiency).max(1.0);
            let serial = secs_to_ns(bytes / bw);
            let latency = secs_to_ns(link.latency_s + kt.setup_s);
            let now = self.now;
            let rank = self.pools.rank_mut(g, r);
            rank.pending.pop_front();
            rank.pending_kv -= need;
            rank.kv_reserved += need;
            rank.kv_held += input as u64;
            rank.transferring += 1;
            debug_assert!(
                rank.kv_within(cap),
                "KV admitted past the decode rank's capacity"
            );
            let start = rank.link_free_ns.max(now);
            rank.link_free_ns = start.saturating_add(serial);
            let done = rank.link_free_ns.saturating_add(latency);
            self.pools.pool_mut(Role::Decode).waiting -= 1;
            let req = self.reqs.get_mut(id);
            req.decode.kv_reserved = need;
            let w = req.w();
            self.m.transfers += w;
            self.m.transfer_bytes += bytes * w as f64;
            if self.window.starts_in(now) {
                self.m.transfer_ms.record_n((done - now) as f64 / 1e6, w);
            }
            self.note_kv(g, r);
            self.q.push(done, Event::TransferDone(id));
        }
    }

    /// A request's KV arrived: it joins its rank's batch at the next step boundary.
    pub(super) fn on_transfer_done(&mut self, id: ReqId) {
        let d = &self.reqs.get(id).decode;
        let (g, r) = (d.group, d.rank);
        let rank = self.pools.rank_mut(g, r);
        rank.transferring -= 1;
        rank.joining.push_back(id);
        self.kick(g);
    }
}
