//! KV pages of one rank and its prefix cache.
//!
//! Pages of `page` tokens are handed to requests (block tables). The prefix cache keeps
//! the pages of full prompt blocks (`TRACE_BLOCK_TOKENS` tokens, the Mooncake `hash_ids`
//! granularity) keyed by the block's hash: a later prompt whose leading blocks have the
//! same hashes reuses those pages instead of recomputing them (the hashes chain: block
//! `i` only matches after blocks `0..i` did). Cached pages are reference-counted; pages
//! that no request holds stay cached until an allocation needs them, least recently
//! used first.

use std::collections::{BTreeSet, HashMap};

/// One cached block: its pages, how many requests hold it, when it was last used.
#[derive(Debug, Clone)]
struct Entry {
    pages: Vec<u32>,
    refs: u32,
    stamp: u64,
}

/// Pages and prefix cache of one rank.
#[derive(Debug, Clone)]
pub struct KvPages {
    page: usize,
    pages_per_block: usize,
    free: Vec<u32>,
    total: usize,
    cache: HashMap<u64, Entry>,
    /// (stamp, hash) of cached blocks nobody holds: eviction candidates, oldest first.
    idle: BTreeSet<(u64, u64)>,
    clock: u64,
}

impl KvPages {
    /// `total` pages of `page` tokens; `block_tokens` must be a multiple of `page`.
    pub fn new(total: usize, page: usize, block_tokens: usize) -> KvPages {
        assert!(
            page > 0 && block_tokens.is_multiple_of(page),
            "blocks are whole pages"
        );
        KvPages {
            page,
            pages_per_block: block_tokens / page,
            // Pop from the end: low page ids first.
            free: (0..total as u32).rev().collect(),
            total,
            cache: HashMap::new(),
            idle: BTreeSet::new(),
            clock: 0,
        }
    }

    pub fn page_tokens(&self) -> usize {
        self.page
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// Pages free now or held only by the cache (evictable).
    pub fn available(&self) -> usize {
        self.free.len() + self.idle.len() * self.pages_per_block
    }

    /// Pages holding data: held by requests or cached.
    pub fn used(&self) -> usize {
        self.total - self.free.len()
    }

    /// Pages covering `tokens` tokens.
    pub fn pages_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.page)
    }

    /// Leading blocks of `blocks` present in the cache (without touching them).
    pub fn peek(&self, blocks: &[u64]) -> usize {
        blocks
            .iter()
            .take_while(|h| self.cache.contains_key(h))
            .count()
    }

    /// Takes `n` pages, evicting idle cached blocks (least recently used first) when
    /// the free list is short; `None` (and nothing taken) when there are not enough.
    pub fn alloc(&mut self, n: usize) -> Option<Vec<u32>> {
        if n > self.available() {
            return None;
        }
        while self.free.len() < n {
            let (stamp, hash) = *self
                .idle
                .iter()
                .next()
                .expect("available counted idle blocks");
            self.idle.remove(&(stamp, hash));
            let e = self.cache.remove(&hash).expect("idle blocks are cached");
            self.free.extend(e.pages);
        }
        let at = self.free.len() - n;
        Some(self.free.split_off(at).into_iter().rev().collect())
    }

    /// Returns pages a request held privately.
    pub fn release(&mut self, pages: &[u32]) {
        self.free.extend_from_slice(pages);
    }

    /// Takes a hold on the first `n` blocks (all cached: call after `peek`) and returns
    /// their pages in order.
    pub fn acquire(&mut self, blocks: &[u64]) -> Vec<u32> {
        self.clock += 1;
        let mut pages = Vec::with_capacity(blocks.len() * self.pages_per_block);
        for h in blocks {
            let e = self.cache.get_mut(h).expect("acquire cached blocks only");
            if e.refs == 0 {
                self.idle.remove(&(e.stamp, *h));
            }
            e.refs += 1;
            e.stamp = self.clock;
            pages.extend_from_slice(&e.pages);
        }
        pages
    }

    /// Drops a hold on cached blocks (they stay cached).
    pub fn unhold(&mut self, blocks: &[u64]) {
        self.clock += 1;
        for h in blocks {
            if let Some(e) = self.cache.get_mut(h) {
                e.refs = e.refs.saturating_sub(1);
                e.stamp = self.clock;
                if e.refs == 0 {
                    self.idle.insert((e.stamp, *h));
                }
            }
        }
    }

    /// Registers the pages of a request's full prompt blocks under their hashes, the
    /// request keeping its hold on them. `pages` are the request's pages in order;
    /// blocks already cached (the request's own hits, or another copy) keep their
    /// entry, and the request's duplicate pages stay private. Returns the blocks the
    /// request now holds through the cache (every block of `blocks`) and the pages that
    /// remain private to it.
    pub fn insert(&mut self, blocks: &[u64], pages: &[u32], held: usize) -> Vec<u32> {
        self.clock += 1;
        let ppb = self.pages_per_block;
        let mut private = Vec::new();
        for (i, h) in blocks.iter().enumerate() {
            let span = &pages[i * ppb..(i + 1) * ppb];
            if i < held {
                continue; // acquired from the cache already
            }
            match self.cache.get_mut(h) {
                Some(e) => {
                    if e.refs == 0 {
                        self.idle.remove(&(e.stamp, *h));
                    }
                    e.refs += 1;
                    e.stamp = self.clock;
                    private.extend_from_slice(span);
                }
                None => {
                    self.cache.insert(
                        *h,
                        Entry {
                            pages: span.to_vec(),
                            refs: 1,
                            stamp: self.clock,
                        },
                    );
                }
            }
        }
        private.extend_from_slice(&pages[blocks.len() * ppb..]);
        private
    }

    /// Invariant check for tests: every page is free, cached or held privately
    /// (`private` = pages held outside the cache by requests).
    pub fn check(&self, private: usize) -> Result<(), PagesError> {
        let cached: usize = self.cache.values().map(|e| e.pages.len()).sum();
        if self.free.len() + cached + private != self.total {
            return Err(PagesError::Lost {
                free: self.free.len(),
                cached,
                private,
                total: self.total,
            });
        }
        let idle = self.cache.values().filter(|e| e.refs == 0).count();
        if idle != self.idle.len() {
            return Err(PagesError::Idle {
                idle,
                listed: self.idle.len(),
            });
        }
        Ok(())
    }
}

/// A broken invariant of the page pool ([`KvPages::check`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PagesError {
    #[error("pages: {free} free + {cached} cached + {private} private != {total}")]
    Lost {
        free: usize,
        cached: usize,
        private: usize,
        total: usize,
    },
    #[error("{idle} idle blocks, {listed} listed")]
    Idle { idle: usize, listed: usize },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_reused_held_and_evicted_lru() {
        // 2 pages per block, 10 pages.
        let mut kv = KvPages::new(10, 4, 8);
        let a = kv.alloc(5).unwrap(); // 2 full blocks + 1 page
        assert_eq!(a, vec![0, 1, 2, 3, 4]);
        let private = kv.insert(&[11, 12], &a, 0);
        assert_eq!(private, vec![4]);
        assert_eq!(kv.peek(&[11, 12, 13]), 2);
        assert_eq!(kv.peek(&[12]), 1);
        // A second request reuses block 11 only.
        assert_eq!(kv.acquire(&[11]), vec![0, 1]);
        kv.check(1).unwrap();
        // The first request ends: its private page returns, its blocks stay cached.
        kv.release(&private);
        kv.unhold(&[11, 12]);
        assert_eq!(kv.available(), 6 + 2, "block 12 idle, block 11 still held");
        kv.check(0).unwrap();
        // Allocation beyond the free list evicts the idle block 12.
        let b = kv.alloc(7).unwrap();
        assert_eq!(b.len(), 7);
        assert_eq!(kv.peek(&[11, 12]), 1);
        assert!(kv.alloc(2).is_none(), "one page free, block 11 is held");
        kv.check(7).unwrap();
        kv.unhold(&[11]);
        assert_eq!(kv.alloc(2).unwrap().len(), 2);
        assert_eq!(kv.peek(&[11]), 0);
    }

    #[test]
    fn duplicate_blocks_stay_private() {
        let mut kv = KvPages::new(8, 4, 8);
        let a = kv.alloc(2).unwrap();
        assert!(kv.insert(&[5], &a, 0).is_empty());
        let b = kv.alloc(2).unwrap();
        // The same block computed again elsewhere: the cached copy wins.
        assert_eq!(kv.insert(&[5], &b, 0), b);
        kv.check(2).unwrap();
    }
}
