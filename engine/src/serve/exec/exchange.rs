//! MoE token exchange between the ranks of a DEP group: one rank alone, or threads.

use crate::{EngineError, Result};
use std::sync::{Arc, Condvar, Mutex};

/// MoE token exchange between the ranks of a DEP group.
pub trait Exchange {
    fn rank(&self) -> usize;
    fn ranks(&self) -> usize;
    /// Sends `out[d]` to rank `d`; returns what each rank sent here, by source rank.
    fn all_to_all(&mut self, out: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>>;
    /// This rank failed: release the others from any exchange (they return an error).
    fn abort(&mut self) {}
}

/// The exchange of a group of one rank.
pub struct Solo;

impl Exchange for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn ranks(&self) -> usize {
        1
    }
    fn all_to_all(&mut self, out: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
        Ok(out)
    }
}

struct Boxes {
    mail: Vec<Vec<f32>>,
    arrived: usize,
    generation: u64,
    aborted: bool,
}

/// All-to-all between rank threads through shared mailboxes and a barrier that an
/// aborting rank releases.
#[derive(Clone)]
pub struct ThreadExchange {
    rank: usize,
    ranks: usize,
    shared: Arc<(Mutex<Boxes>, Condvar)>,
}

impl ThreadExchange {
    /// One endpoint per rank.
    pub fn group(ranks: usize) -> Vec<ThreadExchange> {
        let shared = Arc::new((
            Mutex::new(Boxes {
                mail: vec![Vec::new(); ranks * ranks],
                arrived: 0,
                generation: 0,
                aborted: false,
            }),
            Condvar::new(),
        ));
        (0..ranks)
            .map(|rank| ThreadExchange {
                rank,
                ranks,
                shared: shared.clone(),
            })
            .collect()
    }

    /// Waits until every rank has arrived (or one aborted), holding the lock between.
    fn wait_all<'a>(
        &self,
        mut g: std::sync::MutexGuard<'a, Boxes>,
    ) -> Result<std::sync::MutexGuard<'a, Boxes>> {
        let cv = &self.shared.1;
        let gen = g.generation;
        g.arrived += 1;
        if g.arrived == self.ranks {
            g.arrived = 0;
            g.generation += 1;
            cv.notify_all();
        } else {
            while g.generation == gen && !g.aborted {
                g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
            }
        }
        if g.aborted {
            return Err(EngineError::Unsupported(
                "another rank of the DEP group failed".into(),
            ));
        }
        Ok(g)
    }
}

impl Exchange for ThreadExchange {
    fn rank(&self) -> usize {
        self.rank
    }
    fn ranks(&self) -> usize {
        self.ranks
    }
    fn all_to_all(&mut self, out: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
        let mut g = self.shared.0.lock().unwrap_or_else(|e| e.into_inner());
        for (d, m) in out.into_iter().enumerate() {
            g.mail[self.rank * self.ranks + d] = m;
        }
        // Everyone has posted; collect; everyone has collected (mailboxes free again).
        let mut g = self.wait_all(g)?;
        let recv = (0..self.ranks)
            .map(|s| std::mem::take(&mut g.mail[s * self.ranks + self.rank]))
            .collect();
        drop(self.wait_all(g)?);
        Ok(recv)
    }
    fn abort(&mut self) {
        let (lock, cv) = &*self.shared;
        lock.lock().unwrap_or_else(|e| e.into_inner()).aborted = true;
        cv.notify_all();
    }
}
