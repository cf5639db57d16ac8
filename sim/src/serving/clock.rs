//! The simulator's clock: integer time and a totally ordered event queue.
//!
//! Invariant: events pop in (time, class, sequence) order. `class` makes same-time
//! priorities explicit (a step that ends frees capacity before arrivals at that instant
//! are placed; a group's next step is formed after everything else at that instant);
//! `sequence` is the insertion counter, so equal (time, class) pop first-in first-out.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Simulated time in integer nanoseconds.
pub type Nanos = u64;

pub const NS_PER_S: f64 = 1e9;

/// Seconds (finite, non-negative) to nanoseconds, rounded; saturates at `u64::MAX`.
pub fn secs_to_ns(s: f64) -> Nanos {
    if s.is_nan() || s <= 0.0 {
        return 0;
    }
    let ns = (s * NS_PER_S).round();
    if ns >= u64::MAX as f64 {
        u64::MAX
    } else {
        ns as u64
    }
}

pub fn ns_to_secs(ns: Nanos) -> f64 {
    ns as f64 / NS_PER_S
}

/// An event that knows its same-time class: at equal times, lower classes pop first.
/// The simulator's events derive it from their variant (`rack::Event::class`), so the
/// priority cannot drift from the event it belongs to.
pub trait Classed {
    fn class(&self) -> u8;
}

/// The ordering key of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventKey {
    pub time_ns: Nanos,
    pub class: u8,
    pub seq: u64,
}

impl EventKey {
    /// The key as one integer with the same order: time, class, sequence (below 2^56).
    fn packed(&self) -> u128 {
        debug_assert!(self.seq < 1 << 56);
        (self.time_ns as u128) << 64 | (self.class as u128) << 56 | self.seq as u128
    }

    fn unpacked(k: u128) -> Self {
        EventKey {
            time_ns: (k >> 64) as u64,
            class: (k >> 56) as u8,
            seq: k as u64 & ((1 << 56) - 1),
        }
    }
}

struct Entry<E> {
    key: u128,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap is a max-heap: reverse so the smallest key pops first.
        other.key.cmp(&self.key)
    }
}

/// A min-queue of events keyed by (time, class, insertion sequence).
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    next_seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }
}

impl<E: Classed> EventQueue<E> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules `event` at `time_ns` (its class from `event.class()`); returns its key.
    pub fn push(&mut self, time_ns: Nanos, event: E) -> EventKey {
        let key = EventKey {
            time_ns,
            class: event.class(),
            seq: self.next_seq,
        };
        self.next_seq += 1;
        self.heap.push(Entry {
            key: key.packed(),
            event,
        });
        key
    }

    pub fn pop(&mut self) -> Option<(EventKey, E)> {
        self.heap
            .pop()
            .map(|e| (EventKey::unpacked(e.key), e.event))
    }

    pub fn peek_key(&self) -> Option<EventKey> {
        self.heap.peek().map(|e| EventKey::unpacked(e.key))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::collections::BTreeMap;

    /// A test event: its class and a label.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Ev<T>(u8, T);

    impl<T> Classed for Ev<T> {
        fn class(&self) -> u8 {
            self.0
        }
    }

    /// Model-based check: the heap pops exactly what a BTreeMap keyed the same way
    /// yields, under a random mix of pushes and pops with many ties.
    #[test]
    fn event_queue_matches_btreemap_model() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut q = EventQueue::new();
        let mut model: BTreeMap<EventKey, Ev<u32>> = BTreeMap::new();
        let mut now = 0u64;
        for i in 0..20_000u32 {
            if rng.random_bool(0.55) {
                let t = now + rng.random_range(0..5u64);
                let class = rng.random_range(0..3u8);
                let key = q.push(t, Ev(class, i));
                model.insert(key, Ev(class, i));
            } else {
                let got = q.pop();
                let want = model.pop_first();
                assert_eq!(got, want);
                if let Some((k, _)) = got {
                    assert!(k.time_ns >= now, "time ran backwards");
                    now = k.time_ns;
                }
            }
            assert_eq!(q.len(), model.len());
        }
        while let Some(want) = model.pop_first() {
            assert_eq!(q.pop(), Some(want));
        }
        assert!(q.is_empty());
    }

    #[test]
    fn same_time_orders_by_class_then_insertion() {
        let mut q = EventQueue::new();
        q.push(10, Ev(2, "arrival-a"));
        q.push(10, Ev(0, "step-done"));
        q.push(5, Ev(9, "early"));
        q.push(10, Ev(2, "arrival-b"));
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, e)| e.1)).collect();
        assert_eq!(order, ["early", "step-done", "arrival-a", "arrival-b"]);
    }
}
