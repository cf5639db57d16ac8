//! Prefix cache of one instance: prompt blocks (`BLOCK_TOKENS` tokens each) identified
//! by hash, kept least-recently-used in HBM with an optional second tier in host memory
//! (blocks evicted from HBM move there; a host hit is promoted back).
//!
//! A lookup matches the longest run of leading blocks present in either tier: a block
//! is only usable if every block before it is (causal KV).

/// Block identities are already hashes (or small trace ids): one multiply-xorshift
/// mix is enough, much cheaper than SipHash, and deterministic.
#[inline(always)]
fn mix(b: u64) -> u64 {
    let x = b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^ (x >> 29)
}

/// Marks an empty slot (node indices stay below it).
const EMPTY: u32 = u32::MAX;

/// Block -> node map: open addressing with linear probing over (block, node) pairs, so
/// a probe reads one slot (one cache line) instead of a control byte and then a
/// bucket. Deletion shifts the following run back (no tombstones).
#[derive(Debug, Clone)]
struct BlockMap {
    slots: Vec<(u64, u32)>,
    len: usize,
}

impl Default for BlockMap {
    fn default() -> Self {
        BlockMap {
            slots: vec![(0, EMPTY); 16],
            len: 0,
        }
    }
}

impl BlockMap {
    #[inline(always)]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    #[inline(always)]
    fn find(&self, b: u64) -> Result<usize, usize> {
        let mask = self.mask();
        let mut i = mix(b) as usize & mask;
        loop {
            let (k, v) = self.slots[i];
            if v == EMPTY {
                return Err(i);
            }
            if k == b {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    fn get(&self, b: &u64) -> Option<&u32> {
        match self.find(*b) {
            Ok(i) => Some(&self.slots[i].1),
            Err(_) => None,
        }
    }

    /// Hints the CPU to load `b`'s home slot (a later probe then overlaps the miss).
    #[inline(always)]
    fn prefetch(&self, b: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let i = mix(b) as usize & self.mask();
            // SAFETY: `i` is in bounds; a prefetch has no architectural effect.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(self.slots.as_ptr().add(i) as *const i8);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = b;
    }

    #[inline]
    fn contains_key(&self, b: &u64) -> bool {
        self.find(*b).is_ok()
    }

    fn insert(&mut self, b: u64, v: u32) {
        debug_assert!(v != EMPTY);
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        match self.find(b) {
            Ok(i) => self.slots[i].1 = v,
            Err(i) => {
                self.slots[i] = (b, v);
                self.len += 1;
            }
        }
    }

    fn grow(&mut self) {
        let n = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, vec![(0, EMPTY); n]);
        for (k, v) in old {
            if v != EMPTY {
                if let Err(i) = self.find(k) {
                    self.slots[i] = (k, v);
                }
            }
        }
    }

    fn remove(&mut self, b: &u64) {
        let Ok(mut i) = self.find(*b) else {
            return;
        };
        let mask = self.mask();
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let (k, v) = self.slots[j];
            if v == EMPTY {
                break;
            }
            let home = mix(k) as usize & mask;
            // Move slot j back to i unless its home lies cyclically in (i, j].
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !stays {
                self.slots[i] = self.slots[j];
                i = j;
            }
        }
        self.slots[i] = (0, EMPTY);
        self.len -= 1;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Hbm,
    Host,
}

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Node {
    hash: u64,
    tier: Tier,
    prev: u32,
    next: u32,
}

/// A doubly linked recency list over the node slab: head = least recently used.
#[derive(Debug, Clone)]
struct List {
    head: u32,
    tail: u32,
    len: u64,
    capacity_blocks: u64,
}

impl List {
    fn new(capacity_blocks: u64) -> Self {
        List {
            head: NIL,
            tail: NIL,
            len: 0,
            capacity_blocks,
        }
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

/// O(1) per block touched: a hash map from block to a slab node, and one intrusive
/// LRU list per tier.
#[derive(Debug, Clone)]
pub struct PrefixCache {
    map: BlockMap,
    nodes: Vec<Node>,
    free: Vec<u32>,
    hbm: List,
    host: List,
    /// Scratch for `lookup` (node of each leading block found).
    found: Vec<u32>,
    /// Blocks dropped from the map so far (a node index may then be reused).
    drops: u64,
}

impl PrefixCache {
    pub fn new(hbm_blocks: u64, host_blocks: u64) -> Self {
        PrefixCache {
            map: BlockMap::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            hbm: List::new(hbm_blocks),
            host: List::new(host_blocks),
            found: Vec::new(),
            drops: 0,
        }
    }

    pub fn hbm_blocks(&self) -> u64 {
        self.hbm.len
    }

    pub fn host_blocks(&self) -> u64 {
        self.host.len
    }

    /// Leading blocks present, without touching recency (for routing).
    pub fn peek(&self, blocks: &[u64]) -> u64 {
        const AHEAD: usize = 8;
        for &b in blocks.iter().take(AHEAD) {
            self.map.prefetch(b);
        }
        for (k, b) in blocks.iter().enumerate() {
            if let Some(&next) = blocks.get(k + AHEAD) {
                self.map.prefetch(next);
            }
            if !self.map.contains_key(b) {
                return k as u64;
            }
        }
        blocks.len() as u64
    }

    /// Leading blocks present; touches them (host hits move to HBM).
    pub fn lookup(&mut self, blocks: &[u64]) -> Hit {
        let mut n = 0;
        let mut host = 0;
        let mut found = std::mem::take(&mut self.found);
        found.clear();
        for b in blocks {
            match self.map.get(b) {
                Some(&i) => {
                    if self.nodes[i as usize].tier == Tier::Host {
                        host += 1;
                    }
                    found.push(i);
                    n += 1;
                }
                None => break,
            }
        }
        let drops = self.drops;
        for (k, &i) in found.iter().enumerate() {
            // An earlier promotion in this loop may have evicted a later block when HBM
            // holds fewer blocks than the prefix; re-resolve by hash then. Until a block
            // leaves the map, every node found is still that block's.
            if self.drops == drops
                || (self.nodes[i as usize].hash == blocks[k]
                    && self.map.get(&blocks[k]) == Some(&i))
            {
                self.touch_node(i);
            } else {
                self.touch_into_hbm(blocks[k]);
            }
        }
        self.found = found;
        Hit {
            blocks: n,
            host_blocks: host,
        }
    }

    /// Records the blocks of a computed prompt (most recently used).
    pub fn insert(&mut self, blocks: &[u64]) {
        for &b in blocks {
            self.touch_into_hbm(b);
        }
    }

    fn list(&mut self, tier: Tier) -> &mut List {
        match tier {
            Tier::Hbm => &mut self.hbm,
            Tier::Host => &mut self.host,
        }
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next, tier) = {
            let n = &self.nodes[i as usize];
            (n.prev, n.next, n.tier)
        };
        if prev != NIL {
            self.nodes[prev as usize].next = next;
        } else {
            self.list(tier).head = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        } else {
            self.list(tier).tail = prev;
        }
        self.list(tier).len -= 1;
    }

    fn push_back(&mut self, i: u32, tier: Tier) {
        let tail = self.list(tier).tail;
        {
            let n = &mut self.nodes[i as usize];
            n.tier = tier;
            n.prev = tail;
            n.next = NIL;
        }
        if tail != NIL {
            self.nodes[tail as usize].next = i;
        } else {
            self.list(tier).head = i;
        }
        let l = self.list(tier);
        l.tail = i;
        l.len += 1;
    }

    fn pop_front(&mut self, tier: Tier) -> Option<u32> {
        let head = self.list(tier).head;
        if head == NIL {
            return None;
        }
        self.unlink(head);
        Some(head)
    }

    fn touch_node(&mut self, i: u32) {
        if self.hbm.capacity_blocks == 0 {
            return;
        }
        self.unlink(i);
        self.push_back(i, Tier::Hbm);
        self.evict();
    }

    fn touch_into_hbm(&mut self, b: u64) {
        if self.hbm.capacity_blocks == 0 {
            return;
        }
        if let Some(&i) = self.map.get(&b) {
            self.touch_node(i);
            return;
        }
        let node = Node {
            hash: b,
            tier: Tier::Hbm,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.map.insert(b, i);
        self.push_back(i, Tier::Hbm);
        self.evict();
    }

    fn evict(&mut self) {
        while self.hbm.len > self.hbm.capacity_blocks {
            let Some(v) = self.pop_front(Tier::Hbm) else {
                break;
            };
            if self.host.capacity_blocks > 0 {
                self.push_back(v, Tier::Host);
                while self.host.len > self.host.capacity_blocks {
                    let Some(g) = self.pop_front(Tier::Host) else {
                        break;
                    };
                    self.drop_node(g);
                }
            } else {
                self.drop_node(v);
            }
        }
    }

    fn drop_node(&mut self, i: u32) {
        let h = self.nodes[i as usize].hash;
        self.map.remove(&h);
        self.free.push(i);
        self.drops += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The obvious model: two vectors ordered least- to most-recently used.
    #[derive(Default)]
    struct Naive {
        hbm: Vec<u64>,
        host: Vec<u64>,
        hbm_cap: usize,
        host_cap: usize,
    }

    impl Naive {
        fn present(&self, b: u64) -> bool {
            self.hbm.contains(&b) || self.host.contains(&b)
        }
        fn touch(&mut self, b: u64) {
            if self.hbm_cap == 0 {
                return;
            }
            self.hbm.retain(|&x| x != b);
            self.host.retain(|&x| x != b);
            self.hbm.push(b);
            while self.hbm.len() > self.hbm_cap {
                let v = self.hbm.remove(0);
                if self.host_cap > 0 {
                    self.host.push(v);
                    while self.host.len() > self.host_cap {
                        self.host.remove(0);
                    }
                }
            }
        }
        fn lookup(&mut self, blocks: &[u64]) -> Hit {
            let n = blocks.iter().take_while(|&&b| self.present(b)).count();
            let host = blocks[..n].iter().filter(|b| self.host.contains(b)).count() as u64;
            for &b in &blocks[..n] {
                self.touch(b);
            }
            Hit {
                blocks: n as u64,
                host_blocks: host,
            }
        }
    }

    #[test]
    fn matches_naive_lru_model() {
        for (hbm_cap, host_cap) in [(8usize, 0usize), (8, 16), (1, 3), (40, 0), (0, 5)] {
            let mut rng = ChaCha8Rng::seed_from_u64(hbm_cap as u64 * 100 + host_cap as u64);
            let mut cache = PrefixCache::new(hbm_cap as u64, host_cap as u64);
            let mut naive = Naive {
                hbm_cap,
                host_cap,
                ..Default::default()
            };
            for _ in 0..3000 {
                // Prompts: a few shared prefixes extended by random suffixes.
                let root = rng.random_range(0..4u64);
                let len = rng.random_range(1..12usize);
                let blocks: Vec<u64> = (0..len)
                    .map(|i| {
                        if i < 3 {
                            root * 1000 + i as u64
                        } else {
                            rng.random_range(0..30u64) + 10_000
                        }
                    })
                    .collect();
                if rng.random_bool(0.5) {
                    assert_eq!(
                        cache.peek(&blocks),
                        blocks.iter().take_while(|&&b| naive.present(b)).count() as u64
                    );
                    assert_eq!(
                        cache.lookup(&blocks),
                        naive.lookup(&blocks),
                        "caps {hbm_cap}/{host_cap}"
                    );
                } else {
                    cache.insert(&blocks);
                    for &b in &blocks {
                        naive.touch(b);
                    }
                }
                assert_eq!(cache.hbm_blocks() as usize, naive.hbm.len());
                assert_eq!(cache.host_blocks() as usize, naive.host.len());
                assert!(
                    cache.hbm_blocks() as usize <= hbm_cap
                        && cache.host_blocks() as usize <= host_cap
                );
            }
        }
    }
}
