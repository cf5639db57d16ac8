//! A request's way through the ranks: admission by KV, the prefill's end, the hand-over
//! to decode, release and completion.

use super::*;

impl Scheduler {
    /// Mixed rank: admit pending requests in order while KV allows.
    pub(super) fn admit_mixed(&mut self, g: usize, r: usize) {
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

    pub(super) fn admit(&mut self, g: usize, r: usize, out: &mut Vec<Action>) {
        match self.groups[g].role {
            Role::Mixed => self.admit_mixed(g, r),
            Role::Decode => self.admit_decode(g, r, out),
            Role::Prefill => {}
        }
    }

    /// A request's prefill is complete: its full prompt blocks enter the prefix cache;
    /// it joins the decode batch here (mixed) or is routed to a decode rank.
    pub(super) fn prefill_finished(
        &mut self,
        g: usize,
        r: usize,
        id: u32,
        now: f64,
        out: &mut Vec<Action>,
    ) {
        let rank = &mut self.groups[g].ranks[r];
        rank.prefill_q.retain(|&x| x != id);
        self.waiting_entry = self.waiting_entry.saturating_sub(1);
        let q = &mut self.reqs[id as usize];
        q.prefill_done_s = Some(now);
        if q.gen_tokens.is_empty() {
            // Blocks the prefill wrote whole (the last prompt token is the decode's).
            let full =
                ((Self::prefill_len(q) as u64 / TRACE_BLOCK_TOKENS) as usize).min(q.blocks.len());
            let ppb = TRACE_BLOCK_TOKENS as usize / self.cfg.page;
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

    /// Decode rank: admit pending requests in order while the batch has room and the
    /// KV fits; each starts its KV transfer.
    pub(super) fn admit_decode(&mut self, g: usize, r: usize, out: &mut Vec<Action>) {
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

    pub(super) fn release(&mut self, g: usize, r: usize, id: u32) {
        let rank = &mut self.groups[g].ranks[r];
        let q = &mut self.reqs[id as usize];
        rank.kv.release(&q.private);
        rank.kv.unhold(&q.held);
        rank.reserved = rank.reserved.saturating_sub(q.reserved);
        q.private.clear();
        q.held.clear();
        q.table.clear();
    }

    pub(super) fn finish(&mut self, g: usize, r: usize, id: u32, now: f64, out: &mut Vec<Action>) {
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
}
