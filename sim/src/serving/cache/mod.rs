//! The prefix caches of one pool's instances: prompt blocks (`TRACE_BLOCK_TOKENS` tokens
//! each) identified by hash, in HBM with an optional second tier in host memory
//! (blocks evicted from HBM move there; a host hit is promoted back).
//!
//! A lookup matches the longest run of leading blocks present in either tier: a block
//! is only usable if every block before it is (causal KV).
//!
//! Layout: one radix tree per pool (as SGLang's RadixAttention, shared): nodes hold runs
//! of blocks, a node's children are keyed by their first block, and each node records
//! which instances hold how many of its leading blocks (`Hold`). An agent session that
//! grows turn by turn extends one node, so a walk is a few node hops and a contiguous
//! compare, not one hash probe per block; and routing asks every instance at once in
//! one walk (`peek_all`), not one walk per instance.
//!
//! Each instance behaves as its own cache. Eviction is least-recently-used and
//! leaf-first, per block and per instance: every block a lookup matches or an insert
//! writes is stamped with the instance's tick; an instance's HBM evicts its block with
//! the oldest stamp among those with no child in its HBM (to host, or dropped without
//! one), and its host evicts the oldest among those with no child at all. So each
//! instance's blocks in HBM, and all its blocks, stay prefix-closed: no block outlives
//! its prefix. All blocks an instance holds of a node share one stamp (a partial match
//! splits the node), so evicting trims the tail of its least recently used leaf.
//! Candidates are kept from an instance's first eviction on: a cache that never fills
//! keeps no eviction order.
//! The tests check every instance against the block-by-block definition.
//!
//! Chained identities: when a block's identity names its whole prefix (the workloads'
//! generated identities, vLLM's block hashes, Mooncake's `hash_ids`; see
//! `Driver::chained_blocks`), equal identities at one position mean equal prefixes, so
//! a run matches up to its last common position if that position matches, and the
//! first mismatch is found by bisection: a walk reads a few blocks per node, not every
//! block. Without chaining every block is compared.

use super::prompt::Prompt;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

mod evict;
#[cfg(test)]
mod tests;

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

/// An eviction candidate: (stamp, node), oldest first.
type Candidates = BinaryHeap<Reverse<(u64, u32)>>;

const ROOT: u32 = 0;

/// What one instance holds of a node.
#[derive(Debug, Clone, Copy)]
struct Hold {
    /// The instance; `NOBODY` marks an empty inline slot.
    inst: u32,
    /// Leading blocks of the node's run it holds, either tier (> 0).
    held: u32,
    /// Of those, the leading blocks in HBM (the rest are on the host).
    hbm: u32,
    /// Children of the node it holds blocks of, and of those, with blocks in HBM.
    children: u32,
    hbm_children: u32,
    stamp: u64,
}

const NOBODY: u32 = u32::MAX;

impl Hold {
    fn new(inst: u32) -> Self {
        Hold {
            inst,
            held: 0,
            hbm: 0,
            children: 0,
            hbm_children: 0,
            stamp: 0,
        }
    }
    /// Its last HBM block has no HBM child: the next HBM eviction may take it.
    fn hbm_leaf(&self) -> bool {
        self.hbm > 0 && self.hbm_children == 0
    }
    /// Its last block is on the host and has no child: host eviction may take it.
    fn host_leaf(&self) -> bool {
        self.children == 0 && self.hbm < self.held
    }
}

/// The holds of a node, in no order: most nodes (a session's context) have one
/// holder, kept inline; shared prefixes spill the rest.
#[derive(Debug, Clone)]
struct Holds {
    first: Hold,
    more: Vec<Hold>,
}

impl Default for Holds {
    fn default() -> Self {
        Holds {
            first: Hold::new(NOBODY),
            more: Vec::new(),
        }
    }
}

impl Holds {
    fn iter(&self) -> impl Iterator<Item = &Hold> {
        std::iter::once(&self.first)
            .filter(|h| h.inst != NOBODY)
            .chain(&self.more)
    }
    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Hold> {
        std::iter::once(&mut self.first)
            .filter(|h| h.inst != NOBODY)
            .chain(&mut self.more)
    }
    fn get(&self, inst: u32) -> Option<&Hold> {
        if self.first.inst == inst {
            return Some(&self.first);
        }
        self.more.iter().find(|h| h.inst == inst)
    }
    fn get_mut(&mut self, inst: u32) -> Option<&mut Hold> {
        if self.first.inst == inst {
            return Some(&mut self.first);
        }
        self.more.iter_mut().find(|h| h.inst == inst)
    }
    /// The hold of `inst`, added empty if it has none.
    fn entry(&mut self, inst: u32) -> &mut Hold {
        if self.first.inst == inst {
            return &mut self.first;
        }
        if self.first.inst == NOBODY {
            self.first = Hold::new(inst);
            return &mut self.first;
        }
        match self.more.iter().position(|h| h.inst == inst) {
            Some(k) => &mut self.more[k],
            None => {
                self.more.push(Hold::new(inst));
                self.more.last_mut().unwrap()
            }
        }
    }
    fn retain(&mut self, mut keep: impl FnMut(&Hold) -> bool) {
        self.more.retain(&mut keep);
        if self.first.inst != NOBODY && !keep(&self.first) {
            self.first = self.more.pop().unwrap_or(Hold::new(NOBODY));
        }
    }
    fn is_empty(&self) -> bool {
        self.first.inst == NOBODY
    }
}

/// A run of blocks and who holds it. The run is blocks `start..start + len` of `src`:
/// `start` is the node's depth in blocks, and every prompt that passes through the
/// node has the same blocks there, so any of them can serve as its source. Laid out so
/// a walk's reads (the inline hold, the last block, the length) share a cache line.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
struct Node<'a> {
    holds: Holds,
    /// The run's last block (a chained walk compares only this, usually).
    last: u64,
    start: u32,
    /// As long as the longest hold.
    len: u32,
    src: Prompt<'a>,
    /// Its key under its parent (its first block).
    key: u64,
    parent: u32,
    /// Children in the tree (of any instance).
    children: u32,
    alive: bool,
}

impl<'a> Node<'a> {
    fn new(src: Prompt<'a>, start: usize, len: usize, parent: u32) -> Self {
        let mut nd = Node {
            holds: Holds::default(),
            last: 0,
            start: start as u32,
            len: len as u32,
            src,
            key: 0,
            parent,
            children: 0,
            alive: true,
        };
        nd.key = nd.block(0);
        nd.set_last();
        nd
    }
    fn len(&self) -> usize {
        self.len as usize
    }
    /// The run's block `j`.
    fn block(&self, j: usize) -> u64 {
        self.src.get(self.start as usize + j)
    }
    fn hold(&self, inst: u32) -> Option<&Hold> {
        self.holds.get(inst)
    }
    fn hold_mut(&mut self, inst: u32) -> Option<&mut Hold> {
        self.holds.get_mut(inst)
    }
    /// Keeps `last` in step after the run changed.
    fn set_last(&mut self) {
        self.last = if self.len > 0 {
            self.block(self.len() - 1)
        } else {
            0
        };
    }
}

/// One instance's tiers and eviction order.
#[derive(Debug, Clone, Default)]
struct Instance {
    hbm_len: u64,
    host_len: u64,
    tick: u64,
    /// Whether the heaps hold its eviction candidates: from its first eviction on
    /// (until then nothing needs an order, so nothing is pushed).
    tracking: bool,
    /// Eviction candidates (stamp, node), checked when popped (stale entries skipped).
    hbm_heap: Candidates,
    host_heap: Candidates,
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hit {
    /// Leading blocks present (either tier).
    pub blocks: u64,
    /// Of those, blocks found in the host tier.
    pub host_blocks: u64,
}

/// The prefix caches of a pool's instances (`0..instances`), each of `hbm_blocks` in
/// HBM and `host_blocks` on the host.
#[derive(Debug, Clone)]
pub struct PrefixCache<'a> {
    nodes: Vec<Node<'a>>,
    free: Vec<u32>,
    children: Children,
    hbm_cap: u64,
    host_cap: u64,
    inst: Vec<Instance>,
    /// Scratch: the nodes of the path just walked, and how many of each's blocks.
    path: Vec<(u32, usize)>,
    /// Scratch of `peek_all`: the depth down to which each instance held every block.
    full_depth: Vec<u32>,
    /// Block identities name their whole prefix (see the module docs).
    chained: bool,
}

impl<'a> PrefixCache<'a> {
    /// `chained`: the block identities it will see name their whole prefix (then walks
    /// compare a few blocks per node instead of all).
    pub fn new(instances: usize, hbm_blocks: u64, host_blocks: u64, chained: bool) -> Self {
        PrefixCache {
            nodes: vec![Node::new(Prompt::Listed(&[0]), 0, 1, ROOT)],
            free: Vec::new(),
            children: Children::default(),
            hbm_cap: hbm_blocks,
            host_cap: host_blocks,
            inst: vec![Instance::default(); instances],
            path: Vec::new(),
            full_depth: vec![0; instances],
            chained,
        }
    }

    pub fn hbm_blocks(&self, inst: usize) -> u64 {
        self.inst[inst].hbm_len
    }

    pub fn host_blocks(&self, inst: usize) -> u64 {
        self.inst[inst].host_len
    }

    /// Leading blocks of `prompt` each instance holds, into `hits` (one per instance),
    /// in one walk and without touching recency (for routing).
    pub fn peek_all(&mut self, prompt: &Prompt<'_>, hits: &mut [u64]) {
        hits.fill(0);
        self.full_depth.fill(0);
        let mut node = ROOT;
        let mut pos = 0;
        let mut depth = 0u32;
        while pos < prompt.len() {
            let Some((child, len, m)) = self.next_match(node, prompt, pos) else {
                break;
            };
            let nd = &self.nodes[child as usize];
            depth += 1;
            for h in nd.holds.iter() {
                let i = h.inst as usize;
                if self.full_depth[i] == depth - 1 {
                    let got = (h.held as usize).min(m);
                    hits[i] += got as u64;
                    if got == len {
                        self.full_depth[i] = depth;
                    }
                }
            }
            pos += m;
            if m < len {
                break;
            }
            node = child;
        }
    }

    /// Leading blocks of `prompt` instance `inst` holds, without touching recency.
    pub fn peek(&self, inst: usize, prompt: &Prompt<'_>) -> u64 {
        let mut node = ROOT;
        let mut pos = 0;
        while pos < prompt.len() {
            let Some(child) = self.child(node, prompt, pos) else {
                break;
            };
            let nd = &self.nodes[child as usize];
            let Some(h) = nd.hold(inst as u32) else {
                break;
            };
            let m = self.common_prefix(nd, h.held as usize, prompt);
            pos += m;
            if m < nd.len() {
                break;
            }
            node = child;
        }
        pos as u64
    }

    /// Leading blocks of `prompt` instance `inst` holds; stamps them and brings host
    /// blocks back to its HBM.
    pub fn lookup(&mut self, inst: usize, prompt: &Prompt<'_>) -> Hit {
        let i = inst as u32;
        if self.hbm_cap == 0 {
            return Hit {
                blocks: self.peek(inst, prompt),
                host_blocks: 0,
            };
        }
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        let mut node = ROOT;
        let mut pos = 0;
        let mut host = 0;
        while pos < prompt.len() {
            let Some(child) = self.child(node, prompt, pos) else {
                break;
            };
            let nd = &self.nodes[child as usize];
            let Some(h) = nd.hold(i) else {
                break;
            };
            let (held, hbm) = (h.held as usize, h.hbm as usize);
            let m = self.common_prefix(nd, held, prompt);
            pos += m;
            if m < held {
                // Matched partway into what it holds: the matched head gets the new
                // stamp, the rest keeps its own.
                host += m - hbm.min(m);
                path.push((self.split(child, m), m));
                break;
            }
            host += held - hbm;
            path.push((child, held));
            if held < nd.len() {
                break; // it holds nothing below
            }
            node = child;
        }
        self.touch_path(i, &path);
        self.path = path;
        self.evict(i);
        Hit {
            blocks: pos as u64,
            host_blocks: host as u64,
        }
    }

    /// Records that instance `inst` computed `prompt`'s blocks (the whole prompt, most
    /// recently used).
    pub fn insert(&mut self, inst: usize, prompt: &Prompt<'a>) {
        let i = inst as u32;
        if self.hbm_cap == 0 || prompt.is_empty() {
            return;
        }
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        let mut node = ROOT;
        let mut pos = 0;
        while pos < prompt.len() {
            let Some((child, len, m)) = self.next_match(node, prompt, pos) else {
                break;
            };
            let nd = &self.nodes[child as usize];
            pos += m;
            if m < len {
                let held = nd.hold(i).map_or(0, |h| h.held as usize);
                // A branch (the prompt goes on elsewhere) or a hold that goes on past
                // the prompt (it keeps its older stamp) needs a node boundary here.
                if pos < prompt.len() || held > m {
                    node = self.split(child, m);
                    path.push((node, m));
                } else {
                    path.push((child, m));
                }
                break;
            }
            path.push((child, len));
            node = child;
        }
        let rest = prompt.len() - pos;
        if rest > 0 {
            if node != ROOT && self.nodes[node as usize].children == 0 {
                // Extend the leaf in place (a session's next turn): this prompt has
                // the run's blocks too, and goes on.
                let nd = &mut self.nodes[node as usize];
                nd.src = *prompt;
                nd.len += rest as u32;
                nd.set_last();
                path.last_mut().expect("node is on the path").1 += rest;
            } else {
                let n = self.new_node(node, *prompt, pos, rest);
                path.push((n, rest));
            }
        }
        self.touch_path(i, &path);
        self.path = path;
        self.evict(i);
    }

    /// Length of the common prefix of `nd`'s first `k` blocks and `prompt`'s blocks at
    /// the same positions. With chained identities a match at one position implies a
    /// match at every position before it, so the last common position decides and a
    /// mismatch is found by bisection.
    #[inline]
    fn common_prefix(&self, nd: &Node<'_>, k: usize, prompt: &Prompt<'_>) -> usize {
        let at = nd.start as usize;
        let k = k.min(prompt.len() - at);
        let node_block = |j: usize| {
            if j + 1 == nd.len() {
                nd.last
            } else {
                nd.block(j)
            }
        };
        let m = if self.chained {
            if k == 0 || node_block(k - 1) == prompt.get(at + k - 1) {
                k
            } else {
                // Blocks before lo match, block hi does not: shrink to adjacent.
                let (mut lo, mut hi) = (0, k - 1);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if nd.block(mid) == prompt.get(at + mid) {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                lo
            }
        } else if let (Some(a), Some(b)) = (nd.src.as_listed(), prompt.as_listed()) {
            let (a, b) = (&a[at..at + k], &b[at..at + k]);
            // A full match is the common case: compare with memcmp first.
            if a == b {
                k
            } else {
                a.iter().zip(b).take_while(|(x, y)| x == y).count()
            }
        } else {
            (0..k)
                .take_while(|&j| nd.block(j) == prompt.get(at + j))
                .count()
        };
        debug_assert!(
            !self.chained
                || m == (0..k)
                    .take_while(|&j| nd.block(j) == prompt.get(at + j))
                    .count(),
            "block identities are not chained"
        );
        m
    }

    /// The child of `node` where `prompt` goes on at `pos`, its length in blocks, and
    /// how many of them `prompt` shares from `pos` (None: no child goes on with it).
    #[inline]
    fn next_match(
        &self,
        node: u32,
        prompt: &Prompt<'_>,
        pos: usize,
    ) -> Option<(u32, usize, usize)> {
        let child = self.child(node, prompt, pos)?;
        let nd = &self.nodes[child as usize];
        let len = nd.len();
        Some((child, len, self.common_prefix(nd, len, prompt)))
    }

    /// The child of `node` where `prompt` goes on at `pos`.
    #[inline]
    fn child(&self, node: u32, prompt: &Prompt<'_>, pos: usize) -> Option<u32> {
        self.children.get(&(node, prompt.get(pos))).copied()
    }

    /// Places a node in the slab (reusing a freed slot).
    fn alloc(&mut self, node: Node<'a>) -> u32 {
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

    /// A new child of `parent`: `len` blocks of `src` from `start` (no holds yet).
    fn new_node(&mut self, parent: u32, src: Prompt<'a>, start: usize, len: usize) -> u32 {
        let node = Node::new(src, start, len, parent);
        let key = node.key;
        let n = self.alloc(node);
        self.children.insert((parent, key), n);
        self.nodes[parent as usize].children += 1;
        n
    }

    /// Splits `node` after its first `m` blocks (0 < m < len); returns the head, which
    /// keeps the node's place under its parent; the tail becomes its only child. Each
    /// hold is cut the same way, keeping its stamp.
    fn split(&mut self, node: u32, m: usize) -> u32 {
        let m32 = m as u32;
        let nd = &mut self.nodes[node as usize];
        let mut head = Node::new(nd.src, nd.start as usize, m, nd.parent);
        head.children = 1;
        for h in nd.holds.iter() {
            *head.holds.entry(h.inst) = Hold {
                held: h.held.min(m32),
                hbm: h.hbm.min(m32),
                children: (h.held > m32) as u32,
                hbm_children: (h.hbm > m32) as u32,
                ..*h
            };
        }
        // The tail keeps its node index, so its children's keys stay valid.
        nd.start += m32;
        nd.len -= m32;
        nd.key = nd.block(0);
        nd.holds.retain(|h| h.held > m32);
        for h in nd.holds.iter_mut() {
            h.held -= m32;
            h.hbm = h.hbm.saturating_sub(m32);
        }
        let (parent, first, tail_first) = (head.parent, head.key, nd.key);
        let h = self.alloc(head);
        self.nodes[node as usize].parent = h;
        self.children.insert((parent, first), h);
        self.children.insert((h, tail_first), node);
        // A hold that ends in the head has a new leaf node there.
        let insts: Vec<u32> = self.nodes[h as usize]
            .holds
            .iter()
            .map(|h| h.inst)
            .collect();
        for inst in insts {
            self.push_candidates(inst, h);
        }
        h
    }

    /// Instance `i` now holds the first `held` blocks of each path node, all in HBM,
    /// stamped with a new tick.
    fn touch_path(&mut self, i: u32, path: &[(u32, usize)]) {
        let t = {
            let inst = &mut self.inst[i as usize];
            inst.tick += 1;
            inst.tick
        };
        for &(n, held) in path {
            let nd = &mut self.nodes[n as usize];
            let parent = nd.parent;
            let h = nd.holds.entry(i);
            let (was_held, was_hbm) = (h.held as usize, h.hbm as usize);
            debug_assert!(held >= was_held);
            h.held = held as u32;
            h.hbm = held as u32;
            h.stamp = t;
            let inst = &mut self.inst[i as usize];
            inst.hbm_len += (held - was_hbm) as u64;
            inst.host_len -= (was_held - was_hbm) as u64;
            if parent != ROOT && (was_held == 0 || was_hbm == 0) {
                let p = self.nodes[parent as usize]
                    .hold_mut(i)
                    .expect("a held node's parent is held");
                p.children += (was_held == 0) as u32;
                p.hbm_children += (was_hbm == 0) as u32;
            }
        }
        // Candidates: the path's last node is the only one that can be a leaf.
        if let Some(&(last, _)) = path.last() {
            self.push_candidates(i, last);
        }
        self.compact_heaps(i);
    }
}
