//! Each instance's eviction: least recently used, leaf-first, per block. Candidates
//! are (stamp, node) entries in the instance's heaps, checked when popped; they are
//! kept from the instance's first eviction on.

use super::{PrefixCache, ROOT};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

impl PrefixCache<'_> {
    pub(super) fn push_candidates(&mut self, i: u32, n: u32) {
        if n == ROOT || !self.inst[i as usize].tracking {
            return;
        }
        let Some(h) = self.nodes[n as usize].hold(i) else {
            return;
        };
        let inst = &mut self.inst[i as usize];
        if h.hbm_leaf() {
            inst.hbm_heap.push(Reverse((h.stamp, n)));
        }
        if h.host_leaf() {
            inst.host_heap.push(Reverse((h.stamp, n)));
        }
    }

    /// Whether `(s, n)` is still an eviction candidate of instance `i`'s tier.
    fn valid(&self, i: u32, host: bool, s: u64, n: u32) -> bool {
        let nd = &self.nodes[n as usize];
        nd.alive
            && nd
                .hold(i)
                .is_some_and(|h| h.stamp == s && if host { h.host_leaf() } else { h.hbm_leaf() })
    }

    /// Drops instance `i`'s stale heap entries once they outnumber the nodes (bounds
    /// memory).
    pub(super) fn compact_heaps(&mut self, i: u32) {
        let limit = 2 * self.nodes.len() + 1024;
        for host in [false, true] {
            let inst = &mut self.inst[i as usize];
            let heap = if host {
                &mut inst.host_heap
            } else {
                &mut inst.hbm_heap
            };
            if heap.len() > limit {
                let mut v = std::mem::take(heap).into_vec();
                v.retain(|Reverse((s, n))| self.valid(i, host, *s, *n));
                v.sort_unstable();
                v.dedup();
                let inst = &mut self.inst[i as usize];
                *(if host {
                    &mut inst.host_heap
                } else {
                    &mut inst.hbm_heap
                }) = BinaryHeap::from(v);
            }
        }
    }

    /// Instance `i`'s least recently used eviction candidate of a tier (host or HBM),
    /// skipping entries made stale by a later stamp or a change of shape.
    fn pop_candidate(&mut self, i: u32, host: bool) -> Option<u32> {
        loop {
            let inst = &mut self.inst[i as usize];
            let heap = if host {
                &mut inst.host_heap
            } else {
                &mut inst.hbm_heap
            };
            let Reverse((s, n)) = heap.pop()?;
            if self.valid(i, host, s, n) {
                return Some(n);
            }
        }
    }

    /// Instance `i`'s first eviction: its candidates are every node it holds that is a
    /// leaf of a tier (the heaps then stay current).
    fn start_tracking(&mut self, i: u32) {
        self.inst[i as usize].tracking = true;
        for n in 1..self.nodes.len() as u32 {
            if self.nodes[n as usize].alive {
                self.push_candidates(i, n);
            }
        }
    }

    pub(super) fn evict(&mut self, i: u32) {
        if self.inst[i as usize].hbm_len > self.hbm_cap && !self.inst[i as usize].tracking {
            self.start_tracking(i);
        }
        while self.inst[i as usize].hbm_len > self.hbm_cap {
            let Some(n) = self.pop_candidate(i, false) else {
                break;
            };
            let over = self.inst[i as usize].hbm_len - self.hbm_cap;
            let nd = &mut self.nodes[n as usize];
            let parent = nd.parent;
            let h = nd.hold_mut(i).expect("a candidate is held");
            let take = over.min(h.hbm as u64) as u32;
            if self.host_cap > 0 {
                h.hbm -= take;
                let emptied = h.hbm == 0;
                let inst = &mut self.inst[i as usize];
                inst.hbm_len -= take as u64;
                inst.host_len += take as u64;
                if emptied {
                    if parent != ROOT {
                        self.nodes[parent as usize]
                            .hold_mut(i)
                            .expect("parent held")
                            .hbm_children -= 1;
                    }
                    self.push_candidates(i, parent);
                }
                self.push_candidates(i, n);
                self.evict_host(i);
            } else {
                // No host tier: an HBM leaf's blocks are its tail; drop them.
                self.trim(i, n, take);
                self.inst[i as usize].hbm_len -= take as u64;
            }
        }
    }

    fn evict_host(&mut self, i: u32) {
        while self.inst[i as usize].host_len > self.host_cap {
            let Some(n) = self.pop_candidate(i, true) else {
                break;
            };
            let over = self.inst[i as usize].host_len - self.host_cap;
            let h = self.nodes[n as usize].hold(i).expect("a candidate is held");
            let take = over.min((h.held - h.hbm) as u64) as u32;
            self.trim(i, n, take);
            self.inst[i as usize].host_len -= take as u64;
        }
    }

    /// Removes the last `take` blocks instance `i` holds of leaf `n` (its hold, and the
    /// node once nobody holds it, go when empty).
    fn trim(&mut self, i: u32, n: u32, take: u32) {
        let nd = &mut self.nodes[n as usize];
        let parent = nd.parent;
        let h = nd.hold_mut(i).expect("a trimmed node is held");
        let had_hbm = h.hbm > 0;
        let keep = h.held - take;
        h.held = keep;
        h.hbm = h.hbm.min(keep);
        let lost_hbm = had_hbm && h.hbm == 0;
        if keep == 0 {
            nd.holds.retain(|h| h.inst != i);
        }
        // The run is as long as the longest hold (nodes below are held in full).
        let longest = nd.holds.iter().map(|h| h.held).max().unwrap_or(0);
        if longest < nd.len {
            debug_assert_eq!(nd.children, 0);
            nd.len = longest;
            nd.set_last();
        }
        if nd.holds.is_empty() {
            nd.alive = false;
            let key = nd.key;
            self.free.push(n);
            self.children.remove(&(parent, key));
            self.nodes[parent as usize].children -= 1;
        }
        if parent != ROOT {
            let p = self.nodes[parent as usize]
                .hold_mut(i)
                .expect("parent held");
            p.children -= (keep == 0) as u32;
            p.hbm_children -= lost_hbm as u32;
        }
        if keep > 0 {
            self.push_candidates(i, n);
        }
        if keep == 0 || lost_hbm {
            self.push_candidates(i, parent);
        }
    }
}
