//! Every instance of the shared tree against the block-by-block definition of a
//! prefix cache.

use super::super::prompt::Generated;
use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// The definition, block by block, for one instance: each present block has a tier
/// and the tick of the last operation that matched or wrote it; eviction takes the
/// oldest block with no child in HBM (from HBM) or no child at all (from host).
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
    fn prefix(&self, blocks: &[u64]) -> usize {
        blocks
            .iter()
            .take_while(|b| self.present.contains_key(b))
            .count()
    }
    fn lookup(&mut self, blocks: &[u64]) -> Hit {
        self.learn(blocks);
        let n = self.prefix(blocks);
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

/// Every instance of a shared tree behaves as its own block-by-block cache: peeks
/// (one instance, or all in one walk), lookups and tier sizes, under random lookups
/// and inserts spread over the instances.
#[test]
fn every_instance_matches_the_block_by_block_definition() {
    for (hbm_cap, host_cap) in [
        (8usize, 0usize),
        (8, 16),
        (1, 3),
        (40, 0),
        (0, 5),
        (20, 7),
        (1000, 0),
    ] {
        for instances in [1usize, 3] {
            let seed = (hbm_cap * 100 + host_cap) as u64 * 10 + instances as u64;
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            // The cache keeps windows on the prompts it saw: they outlive it.
            let ops: Vec<(Vec<u64>, usize, bool)> = (0..1500)
                .map(|_| {
                    let blocks = prompt(&mut rng);
                    (blocks, rng.random_range(0..instances), rng.random_bool(0.5))
                })
                .collect();
            let chained = instances == 3;
            let mut cache = PrefixCache::new(instances, hbm_cap as u64, host_cap as u64, chained);
            let mut naive: Vec<Naive> = (0..instances)
                .map(|_| Naive {
                    hbm_cap,
                    host_cap,
                    ..Default::default()
                })
                .collect();
            let mut hits = vec![0; instances];
            for (op, (blocks, i, lookup)) in ops.iter().enumerate() {
                let (i, p) = (*i, Prompt::Listed(blocks));
                let at = format!("caps {hbm_cap}/{host_cap}, {instances} instances, op {op}");
                for n in &mut naive {
                    n.learn(blocks);
                }
                cache.peek_all(&p, &mut hits);
                for (k, n) in naive.iter().enumerate() {
                    let present = n.prefix(blocks) as u64;
                    assert_eq!(hits[k], present, "{at}: peek_all, instance {k}");
                    assert_eq!(cache.peek(k, &p), present, "{at}: peek {k}");
                }
                if *lookup {
                    assert_eq!(cache.lookup(i, &p), naive[i].lookup(blocks), "{at}");
                } else {
                    cache.insert(i, &p);
                    naive[i].insert(blocks);
                }
                for (k, n) in naive.iter().enumerate() {
                    assert_eq!(
                        (cache.hbm_blocks(k) as usize, cache.host_blocks(k) as usize),
                        (n.count(true), n.count(false)),
                        "{at}: instance {k}"
                    );
                    assert!(
                        cache.hbm_blocks(k) as usize <= hbm_cap
                            && cache.host_blocks(k) as usize <= host_cap
                    );
                }
            }
        }
    }
}

/// A session that grows turn by turn stays one node: lookups do not slow down
/// with the number of turns.
#[test]
fn a_growing_session_extends_one_node() {
    // Turn t's prompt: a shared system prompt (32 blocks), then 3 blocks per turn.
    let sys = [1u64, 7];
    let turn = |t: u32| Prompt::Generated(Generated::new(&sys, 32, &[2, 5], 32 + 3 * t));
    let mut cache = PrefixCache::new(1, 1 << 20, 0, true);
    cache.insert(0, &turn(0));
    for t in 1..=100 {
        let hit = cache.lookup(0, &turn(t));
        assert_eq!(hit.blocks, 32 + 3 * (t as u64 - 1));
        cache.insert(0, &turn(t));
    }
    // The root and one node: the prompt's leaf was extended every turn.
    assert_eq!(cache.nodes.iter().filter(|n| n.alive).count(), 2);
    assert_eq!(cache.hbm_blocks(0), 32 + 300);
}

/// Instances that share a system prompt share its node; each holds its own
/// sessions, and one walk tells every instance's hit.
#[test]
fn instances_share_common_prefixes() {
    let mut cache = PrefixCache::new(3, 1 << 20, 0, true);
    let session = |uid: u64| Prompt::Generated(Generated::new(&[1, 0], 32, &[2, uid], 42));
    cache.insert(0, &session(1));
    cache.insert(1, &session(2));
    cache.insert(1, &session(3));
    // Root, the system prompt, three sessions.
    assert_eq!(cache.nodes.iter().filter(|n| n.alive).count(), 5);
    let mut hits = vec![0; 3];
    cache.peek_all(&session(2), &mut hits);
    assert_eq!(hits, [32, 42, 0]);
    cache.peek_all(&session(1).prefix(20), &mut hits);
    assert_eq!(hits, [20, 20, 0]);
}
