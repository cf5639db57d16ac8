//! Prefix cache of one instance: prompt blocks (`BLOCK_TOKENS` tokens each) identified
//! by hash, in HBM with an optional second tier in host memory (blocks evicted from HBM
//! move there; a host hit is promoted back).
//!
//! A lookup matches the longest run of leading blocks present in either tier: a block
//! is only usable if every block before it is (causal KV).
//!
//! Layout: a radix tree (as SGLang's RadixAttention) whose nodes hold runs of blocks;
//! a node's children are keyed by their first block. An agent session that grows turn
//! by turn extends one node, so a lookup is a few node hops and a contiguous compare,
//! not one hash probe per block.
//!
//! Eviction is least-recently-used and leaf-first, per block: every block a lookup
//! matches or an insert writes is stamped with the operation's tick; HBM evicts the
//! block with the oldest stamp among those with no child in HBM (to host, or dropped
//! without one), and host evicts the oldest among those with no child at all. So the
//! blocks in HBM, and all blocks present, stay prefix-closed: no block outlives its
//! prefix. All blocks of a node share one stamp (a partial match splits the node), so
//! evicting trims the tail of the least recently used leaf node.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// Block identities are already hashes (or small trace ids): one multiply-xorshift
/// mix is enough, much cheaper than SipHash, and deterministic.
#[inline(always)]
fn mix(b: u64) -> u64 {
    let x = b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^ (x >> 29)
}

/// Hasher for (node, first block) keys.
#[derive(Default)]
struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        mix(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix(self.0 ^ b as u64);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = mix(self.0 ^ i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = mix(self.0 ^ i);
    }
}

type Children = HashMap<(u32, u64), u32, BuildHasherDefault<MixHasher>>;

const ROOT: u32 = 0;

#[derive(Debug, Clone, Default)]
struct Node {
    /// The blocks, in prompt order; `run[..hbm]` are in HBM, the rest on the host.
    run: Vec<u64>,
    /// Its key under its parent (its first block).
    key: u64,
    hbm: usize,
    parent: u32,
    children: u32,
    /// Children with at least one block in HBM.
    hbm_children: u32,
    stamp: u64,
    alive: bool,
}

impl Node {
    /// Its last HBM block has no HBM child: the next HBM eviction may take it.
    fn hbm_leaf(&self) -> bool {
        self.hbm > 0 && self.hbm_children == 0
    }
    /// Its last block is on the host and has no child: host eviction may take it.
    fn host_leaf(&self) -> bool {
        self.children == 0 && self.hbm < self.run.len()
    }
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hit {
    /// Leading blocks present (either tier).
    pub blocks: u64,
    /// Of those, blocks found in the host tier.
    pub host_blocks: u64,
}

#[derive(Debug, Clone)]
pub struct PrefixCache {
    nodes: Vec<Node>,
    free: Vec<u32>,
    children: Children,
    hbm_cap: u64,
    host_cap: u64,
    hbm_len: u64,
    host_len: u64,
    tick: u64,
    /// Eviction candidates (stamp, node), checked when popped (stale entries skipped).
    hbm_heap: BinaryHeap<Reverse<(u64, u32)>>,
    host_heap: BinaryHeap<Reverse<(u64, u32)>>,
    /// Scratch: the nodes of the path just walked.
    path: Vec<u32>,
}

impl PrefixCache {
    pub fn new(hbm_blocks: u64, host_blocks: u64) -> Self {
        PrefixCache {
            nodes: vec![Node {
                alive: true,
                ..Node::default()
            }],
            free: Vec::new(),
            children: Children::default(),
            hbm_cap: hbm_blocks,
            host_cap: host_blocks,
            hbm_len: 0,
            host_len: 0,
            tick: 0,
            hbm_heap: BinaryHeap::new(),
            host_heap: BinaryHeap::new(),
            path: Vec::new(),
        }
    }

    pub fn hbm_blocks(&self) -> u64 {
        self.hbm_len
    }

    pub fn host_blocks(&self) -> u64 {
        self.host_len
    }

    /// Walks `blocks` down the tree: the nodes fully matched (in `path`, when given),
    /// then the node matched partway and how far (`None` if the walk ended on a node
    /// boundary), and the blocks matched in all.
    #[inline]
    fn walk(
        &self,
        blocks: &[u64],
        mut path: Option<&mut Vec<u32>>,
    ) -> (Option<(u32, usize)>, usize) {
        let mut node = ROOT;
        let mut pos = 0;
        while pos < blocks.len() {
            let Some(&child) = self.children.get(&(node, blocks[pos])) else {
                break;
            };
            let run = &self.nodes[child as usize].run;
            let rest = &blocks[pos..];
            // A full match is the common case: compare with memcmp first.
            let k = run.len().min(rest.len());
            let m = if run[..k] == rest[..k] {
                k
            } else {
                run.iter().zip(rest).take_while(|(a, b)| a == b).count()
            };
            pos += m;
            if m < run.len() {
                return (Some((child, m)), pos);
            }
            if let Some(p) = path.as_deref_mut() {
                p.push(child);
            }
            node = child;
        }
        (None, pos)
    }

    /// Leading blocks present, without touching recency (for routing).
    pub fn peek(&self, blocks: &[u64]) -> u64 {
        self.walk(blocks, None).1 as u64
    }

    /// Leading blocks present; stamps them and brings host blocks back to HBM.
    pub fn lookup(&mut self, blocks: &[u64]) -> Hit {
        if self.hbm_cap == 0 {
            return Hit {
                blocks: self.peek(blocks),
                host_blocks: 0,
            };
        }
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        let (partial, n) = self.walk(blocks, Some(&mut path));
        if let Some((node, m)) = partial {
            path.push(self.split(node, m));
        }
        let host: usize = path
            .iter()
            .map(|&i| {
                let nd = &self.nodes[i as usize];
                nd.run.len() - nd.hbm
            })
            .sum();
        self.touch_path(&path);
        self.path = path;
        self.evict();
        Hit {
            blocks: n as u64,
            host_blocks: host as u64,
        }
    }

    /// Records a computed prompt's blocks (the whole prompt, most recently used).
    pub fn insert(&mut self, blocks: &[u64]) {
        if self.hbm_cap == 0 || blocks.is_empty() {
            return;
        }
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        let (partial, n) = self.walk(blocks, Some(&mut path));
        if let Some((node, m)) = partial {
            path.push(self.split(node, m));
        }
        let rest = &blocks[n..];
        if !rest.is_empty() {
            let last = path.last().copied().unwrap_or(ROOT);
            let ln = &self.nodes[last as usize];
            if last != ROOT && ln.children == 0 && ln.hbm == ln.run.len() {
                // Extend the leaf in place (a session's next turn).
                self.nodes[last as usize].run.extend_from_slice(rest);
                self.nodes[last as usize].hbm += rest.len();
                self.hbm_len += rest.len() as u64;
            } else {
                let i = self.new_node(last, rest.to_vec());
                path.push(i);
            }
        }
        self.touch_path(&path);
        self.path = path;
        self.evict();
    }

    /// Places a node in the slab (reusing a freed slot).
    fn alloc(&mut self, node: Node) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    fn new_node(&mut self, parent: u32, run: Vec<u64>) -> u32 {
        let len = run.len();
        let first = run[0];
        let node = Node {
            run,
            key: first,
            hbm: len,
            parent,
            children: 0,
            hbm_children: 0,
            stamp: 0,
            alive: true,
        };
        let i = self.alloc(node);
        self.children.insert((parent, first), i);
        let p = &mut self.nodes[parent as usize];
        p.children += 1;
        p.hbm_children += 1;
        self.hbm_len += len as u64;
        i
    }

    /// Splits `node` after its first `m` blocks (0 < m < len); returns the head, which
    /// keeps the node's place under its parent; the tail becomes its only child.
    fn split(&mut self, node: u32, m: usize) -> u32 {
        let (parent, first, stamp) = {
            let nd = &self.nodes[node as usize];
            (nd.parent, nd.run[0], nd.stamp)
        };
        let head_run = self.nodes[node as usize].run[..m].to_vec();
        let hbm = self.nodes[node as usize].hbm;
        let head = Node {
            run: head_run,
            key: first,
            hbm: hbm.min(m),
            parent,
            children: 1,
            hbm_children: (hbm > m) as u32,
            stamp,
            alive: true,
        };
        let h = self.alloc(head);
        // The tail keeps its node index, so its children's keys stay valid.
        let tail = &mut self.nodes[node as usize];
        tail.run.drain(..m);
        tail.hbm = hbm.saturating_sub(m);
        tail.parent = h;
        let tail_first = tail.run[0];
        tail.key = tail_first;
        self.children.insert((parent, first), h);
        self.children.insert((h, tail_first), node);
        h
    }

    /// Stamps every node of a matched path with a new tick and brings it into HBM.
    fn touch_path(&mut self, path: &[u32]) {
        self.tick += 1;
        let t = self.tick;
        for &i in path {
            let (was, len, parent) = {
                let nd = &mut self.nodes[i as usize];
                nd.stamp = t;
                let was = nd.hbm;
                nd.hbm = nd.run.len();
                (was, nd.run.len(), nd.parent)
            };
            if was < len {
                self.hbm_len += (len - was) as u64;
                self.host_len -= (len - was) as u64;
                if was == 0 {
                    self.nodes[parent as usize].hbm_children += 1;
                }
            }
        }
        // Candidates: the path's last node is the only one that can be a leaf.
        if let Some(&last) = path.last() {
            self.push_candidates(last);
        }
        self.compact_heaps();
    }

    fn push_candidates(&mut self, i: u32) {
        if i == ROOT {
            return;
        }
        let nd = &self.nodes[i as usize];
        if nd.hbm_leaf() {
            self.hbm_heap.push(Reverse((nd.stamp, i)));
        }
        if nd.host_leaf() {
            self.host_heap.push(Reverse((nd.stamp, i)));
        }
    }

    /// Drops stale heap entries once they outnumber the nodes (bounds memory).
    fn compact_heaps(&mut self) {
        let limit = 2 * self.nodes.len() + 1024;
        for host in [false, true] {
            let heap = if host {
                &mut self.host_heap
            } else {
                &mut self.hbm_heap
            };
            if heap.len() > limit {
                let nodes = &self.nodes;
                let mut v = std::mem::take(heap).into_vec();
                v.retain(|Reverse((s, i))| {
                    let nd = &nodes[*i as usize];
                    nd.alive && nd.stamp == *s && if host { nd.host_leaf() } else { nd.hbm_leaf() }
                });
                v.sort_unstable();
                v.dedup();
                *heap = BinaryHeap::from(v);
            }
        }
    }

    /// The least recently used eviction candidate of a tier (host or HBM), skipping
    /// entries made stale by a later stamp or a change of shape.
    fn pop_candidate(&mut self, host: bool) -> Option<u32> {
        loop {
            let heap = if host {
                &mut self.host_heap
            } else {
                &mut self.hbm_heap
            };
            let Reverse((s, i)) = heap.pop()?;
            let nd = &self.nodes[i as usize];
            let leaf = if host { nd.host_leaf() } else { nd.hbm_leaf() };
            if nd.alive && nd.stamp == s && leaf {
                return Some(i);
            }
        }
    }

    fn evict(&mut self) {
        while self.hbm_len > self.hbm_cap {
            let Some(i) = self.pop_candidate(false) else {
                break;
            };
            let nd = &self.nodes[i as usize];
            let take = ((self.hbm_len - self.hbm_cap) as usize).min(nd.hbm);
            if self.host_cap > 0 {
                let nd = &mut self.nodes[i as usize];
                nd.hbm -= take;
                self.hbm_len -= take as u64;
                self.host_len += take as u64;
                if nd.hbm == 0 {
                    let p = nd.parent;
                    self.nodes[p as usize].hbm_children -= 1;
                    self.push_candidates(p);
                }
                self.push_candidates(i);
                self.evict_host();
            } else {
                // No host tier: an HBM leaf's blocks are its tail; drop them.
                self.trim(i, take);
                self.hbm_len -= take as u64;
            }
        }
    }

    fn evict_host(&mut self) {
        while self.host_len > self.host_cap {
            let Some(i) = self.pop_candidate(true) else {
                break;
            };
            let nd = &self.nodes[i as usize];
            let take = ((self.host_len - self.host_cap) as usize).min(nd.run.len() - nd.hbm);
            self.trim(i, take);
            self.host_len -= take as u64;
        }
    }

    /// Removes the last `take` blocks of leaf `i` (removing the node when empty).
    fn trim(&mut self, i: u32, take: usize) {
        let nd = &mut self.nodes[i as usize];
        let had_hbm = nd.hbm > 0;
        let keep = nd.run.len() - take;
        nd.run.truncate(keep);
        nd.hbm = nd.hbm.min(keep);
        let (parent, key, lost_hbm) = (nd.parent, nd.key, had_hbm && nd.hbm == 0);
        if keep == 0 {
            nd.alive = false;
            self.free.push(i);
            self.children.remove(&(parent, key));
            self.nodes[parent as usize].children -= 1;
        } else {
            self.push_candidates(i);
        }
        if lost_hbm {
            self.nodes[parent as usize].hbm_children -= 1;
        }
        if keep == 0 || lost_hbm {
            self.push_candidates(parent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::collections::BTreeMap;

    /// The definition, block by block: each present block has a tier and the tick of
    /// the last operation that matched or wrote it; eviction takes the oldest block
    /// with no child in HBM (from HBM) or no child at all (from host).
    #[derive(Default)]
    struct Naive {
        /// block -> (in HBM, stamp)
        present: BTreeMap<u64, (bool, u64)>,
        parent: BTreeMap<u64, Option<u64>>,
        hbm_cap: usize,
        host_cap: usize,
        tick: u64,
    }

    impl Naive {
        fn learn(&mut self, blocks: &[u64]) {
            for (k, &b) in blocks.iter().enumerate() {
                let p = if k == 0 { None } else { Some(blocks[k - 1]) };
                assert_eq!(*self.parent.entry(b).or_insert(p), p, "ids are chained");
            }
        }
        fn count(&self, hbm: bool) -> usize {
            self.present.values().filter(|v| v.0 == hbm).count()
        }
        fn has_child(&self, b: u64, hbm_only: bool) -> bool {
            self.present
                .iter()
                .any(|(c, v)| (v.0 || !hbm_only) && self.parent[c] == Some(b))
        }
        fn lookup(&mut self, blocks: &[u64]) -> Hit {
            self.learn(blocks);
            let n = blocks
                .iter()
                .take_while(|b| self.present.contains_key(b))
                .count();
            let host = blocks[..n].iter().filter(|b| !self.present[b].0).count() as u64;
            if self.hbm_cap > 0 {
                self.tick += 1;
                for &b in &blocks[..n] {
                    self.present.insert(b, (true, self.tick));
                }
                self.evict();
            }
            Hit {
                blocks: n as u64,
                host_blocks: if self.hbm_cap > 0 { host } else { 0 },
            }
        }
        fn insert(&mut self, blocks: &[u64]) {
            self.learn(blocks);
            if self.hbm_cap == 0 || blocks.is_empty() {
                return;
            }
            self.tick += 1;
            for &b in blocks {
                self.present.insert(b, (true, self.tick));
            }
            self.evict();
        }
        fn evict(&mut self) {
            while self.count(true) > self.hbm_cap {
                let v = *self
                    .present
                    .iter()
                    .filter(|(b, v)| v.0 && !self.has_child(**b, true))
                    .min_by_key(|(b, v)| (v.1, **b))
                    .unwrap()
                    .0;
                if self.host_cap > 0 {
                    self.present.get_mut(&v).unwrap().0 = false;
                    while self.count(false) > self.host_cap {
                        let g = *self
                            .present
                            .iter()
                            .filter(|(b, v)| !v.0 && !self.has_child(**b, false))
                            .min_by_key(|(b, v)| (v.1, **b))
                            .unwrap()
                            .0;
                        self.present.remove(&g);
                    }
                } else {
                    self.present.remove(&v);
                }
            }
        }
    }

    /// A prompt: a walk down a small tree of chained block ids (each id names its
    /// whole prefix, as the workloads' ids do).
    fn prompt(rng: &mut ChaCha8Rng) -> Vec<u64> {
        let mut h = rng.random_range(0..3u64);
        let len = rng.random_range(1..14usize);
        (0..len)
            .map(|k| {
                let branch = if k < 3 { 0 } else { rng.random_range(0..3u64) };
                h = mix(h.wrapping_mul(31) ^ (branch << 8) ^ k as u64) | 1 << 63;
                h
            })
            .collect()
    }

    #[test]
    fn matches_the_block_by_block_definition() {
        for (hbm_cap, host_cap) in [
            (8usize, 0usize),
            (8, 16),
            (1, 3),
            (40, 0),
            (0, 5),
            (20, 7),
            (1000, 0),
        ] {
            let mut rng = ChaCha8Rng::seed_from_u64(hbm_cap as u64 * 100 + host_cap as u64);
            let mut cache = PrefixCache::new(hbm_cap as u64, host_cap as u64);
            let mut naive = Naive {
                hbm_cap,
                host_cap,
                ..Default::default()
            };
            for op in 0..1500 {
                let blocks = prompt(&mut rng);
                naive.learn(&blocks);
                let present = blocks
                    .iter()
                    .take_while(|b| naive.present.contains_key(b))
                    .count() as u64;
                assert_eq!(
                    cache.peek(&blocks),
                    present,
                    "caps {hbm_cap}/{host_cap} op {op}"
                );
                if rng.random_bool(0.5) {
                    assert_eq!(
                        cache.lookup(&blocks),
                        naive.lookup(&blocks),
                        "caps {hbm_cap}/{host_cap} op {op}"
                    );
                } else {
                    cache.insert(&blocks);
                    naive.insert(&blocks);
                }
                assert_eq!(
                    (cache.hbm_blocks() as usize, cache.host_blocks() as usize),
                    (naive.count(true), naive.count(false)),
                    "caps {hbm_cap}/{host_cap} op {op}"
                );
                assert!(
                    cache.hbm_blocks() as usize <= hbm_cap
                        && cache.host_blocks() as usize <= host_cap
                );
            }
        }
    }

    /// A session that grows turn by turn stays one node: lookups do not slow down
    /// with the number of turns.
    #[test]
    fn a_growing_session_extends_one_node() {
        let mut cache = PrefixCache::new(1 << 20, 0);
        let mut blocks: Vec<u64> = (0..32).collect(); // shared system prompt
        cache.insert(&blocks);
        for turn in 0..100u64 {
            let n = blocks.len();
            blocks.extend((0..3).map(|i| 1_000_000 + turn * 10 + i));
            let hit = cache.lookup(&blocks);
            assert_eq!(hit.blocks, n as u64);
            cache.insert(&blocks);
        }
        // The root and one node: the prompt's leaf was extended every turn.
        assert_eq!(cache.nodes.iter().filter(|n| n.alive).count(), 2);
        assert_eq!(cache.hbm_blocks(), 32 + 300);
    }
}
