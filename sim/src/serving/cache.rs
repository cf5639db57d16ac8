//! Prefix cache of one instance: prompt blocks (`BLOCK_TOKENS` tokens each) identified
//! by hash, kept least-recently-used in HBM with an optional second tier in host memory
//! (blocks evicted from HBM move there; a host hit is promoted back).
//!
//! A lookup matches the longest run of leading blocks present in either tier: a block
//! is only usable if every block before it is (causal KV).

use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Hbm,
    Host,
}

#[derive(Debug, Clone, Default)]
struct Lru {
    by_stamp: BTreeMap<u64, u64>,
    capacity_blocks: u64,
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
    map: HashMap<u64, (Tier, u64)>,
    hbm: Lru,
    host: Lru,
    clock: u64,
}

impl PrefixCache {
    pub fn new(hbm_blocks: u64, host_blocks: u64) -> Self {
        PrefixCache {
            map: HashMap::new(),
            hbm: Lru {
                by_stamp: BTreeMap::new(),
                capacity_blocks: hbm_blocks,
            },
            host: Lru {
                by_stamp: BTreeMap::new(),
                capacity_blocks: host_blocks,
            },
            clock: 0,
        }
    }

    pub fn hbm_blocks(&self) -> u64 {
        self.hbm.by_stamp.len() as u64
    }

    pub fn host_blocks(&self) -> u64 {
        self.host.by_stamp.len() as u64
    }

    /// Leading blocks present, without touching recency (for routing).
    pub fn peek(&self, blocks: &[u64]) -> u64 {
        blocks
            .iter()
            .take_while(|b| self.map.contains_key(b))
            .count() as u64
    }

    /// Leading blocks present; touches them (host hits move to HBM).
    pub fn lookup(&mut self, blocks: &[u64]) -> Hit {
        let n = self.peek(blocks) as usize;
        let host = blocks[..n]
            .iter()
            .filter(|b| matches!(self.map.get(b), Some((Tier::Host, _))))
            .count() as u64;
        for &b in &blocks[..n] {
            self.touch_into_hbm(b);
        }
        Hit {
            blocks: n as u64,
            host_blocks: host,
        }
    }

    /// Records the blocks of a computed prompt (most recently used).
    pub fn insert(&mut self, blocks: &[u64]) {
        for &b in blocks {
            self.touch_into_hbm(b);
        }
    }

    fn touch_into_hbm(&mut self, b: u64) {
        if self.hbm.capacity_blocks == 0 {
            return;
        }
        self.clock += 1;
        let stamp = self.clock;
        if let Some((tier, old)) = self.map.remove(&b) {
            match tier {
                Tier::Hbm => self.hbm.by_stamp.remove(&old),
                Tier::Host => self.host.by_stamp.remove(&old),
            };
        }
        self.map.insert(b, (Tier::Hbm, stamp));
        self.hbm.by_stamp.insert(stamp, b);
        while self.hbm.by_stamp.len() as u64 > self.hbm.capacity_blocks {
            let Some((_, victim)) = self.hbm.by_stamp.pop_first() else {
                break;
            };
            self.map.remove(&victim);
            if self.host.capacity_blocks > 0 {
                self.clock += 1;
                self.map.insert(victim, (Tier::Host, self.clock));
                self.host.by_stamp.insert(self.clock, victim);
                while self.host.by_stamp.len() as u64 > self.host.capacity_blocks {
                    let Some((_, gone)) = self.host.by_stamp.pop_first() else {
                        break;
                    };
                    self.map.remove(&gone);
                }
            }
        }
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
