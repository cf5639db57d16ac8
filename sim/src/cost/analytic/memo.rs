//! Remembered prices of the step model's GEMMs, exactly.
//!
//! A step prices the same weight GEMMs (projections, MLA absorption, router, shared
//! expert, dense FFN, LM head) at row counts that repeat from step to step: a rank's
//! tokens are whole numbers (halves for a micro-batch), and a decode rank carries a few
//! hundred at most. The tile model is a search over tile shapes, so each price is
//! worth remembering: a table per GEMM, indexed by twice the row count, filled the
//! first time a row count is priced. The group's routed experts are remembered the
//! same way, by the group's routed tokens (their grouped GEMMs depend on nothing else
//! in a step). Row counts that are not multiples of one half, or above the tables'
//! reach, are priced afresh; so a price read from a table is the price the tile model
//! gives, bit for bit.
//!
//! The tables fill lazily from any thread (planner candidates price steps in
//! parallel): an entry is written once with its value, and a reader that finds it
//! empty computes the same value itself.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::cost::Bound;

/// Row counts up to this many tokens are remembered (at half-token resolution).
const MAX_ROWS: usize = 16_384;
const ENTRIES: usize = 2 * MAX_ROWS + 1;

/// Seconds as bits (0: not yet priced) and bound codes, by twice the row count.
type Cells = (Box<[AtomicU64]>, Box<[AtomicU8]>);

/// One lazily allocated table of prices by twice the row count.
#[derive(Default)]
struct Table {
    cells: OnceLock<Cells>,
}

impl Table {
    fn cells(&self) -> &Cells {
        self.cells.get_or_init(|| {
            (
                (0..ENTRIES).map(|_| AtomicU64::new(0)).collect(),
                (0..ENTRIES).map(|_| AtomicU8::new(0)).collect(),
            )
        })
    }

    /// The price at `rows`, from the table or from `price` (then remembered).
    #[inline]
    fn get(&self, rows: f64, price: impl FnOnce() -> (f64, Bound)) -> (f64, Bound) {
        let Some(i) = index(rows) else {
            return price();
        };
        let (s, b) = self.cells();
        let bits = s[i].load(Ordering::Acquire);
        if bits != 0 {
            return (f64::from_bits(bits), bound_of(b[i].load(Ordering::Relaxed)));
        }
        let (v, bound) = price();
        if v.to_bits() != 0 {
            // The bound first: a reader that sees the seconds sees the bound too.
            b[i].store(bound_code(bound), Ordering::Relaxed);
            s[i].store(v.to_bits(), Ordering::Release);
        }
        (v, bound)
    }
}

/// The table index of `rows` when it is a multiple of one half within reach.
#[inline]
fn index(rows: f64) -> Option<usize> {
    let twice = rows * 2.0;
    if !(0.0..ENTRIES as f64).contains(&twice) {
        return None;
    }
    let i = twice as usize;
    (i as f64 == twice).then_some(i)
}

fn bound_code(b: Bound) -> u8 {
    match b {
        Bound::None => 0,
        Bound::Compute => 1,
        Bound::Memory => 2,
        Bound::Link => 3,
        Bound::Latency => 4,
    }
}

fn bound_of(c: u8) -> Bound {
    match c {
        1 => Bound::Compute,
        2 => Bound::Memory,
        3 => Bound::Link,
        4 => Bound::Latency,
        _ => Bound::None,
    }
}

/// The tables of one cost model: one per numbered weight GEMM, and one per phase and
/// skew for the routed experts.
pub(super) struct Memo {
    gemms: Box<[Table]>,
    /// Index: `phase (0 prefill, 1 decode) * 2 + skewed`.
    experts: [Table; 4],
}

impl Memo {
    pub fn new(gemms: usize) -> Memo {
        Memo {
            gemms: (0..gemms).map(|_| Table::default()).collect(),
            experts: Default::default(),
        }
    }

    /// The price of numbered GEMM `slot` at `rows` rows.
    #[inline]
    pub fn gemm(
        &self,
        slot: usize,
        rows: f64,
        price: impl FnOnce() -> (f64, Bound),
    ) -> (f64, Bound) {
        match self.gemms.get(slot) {
            Some(t) => t.get(rows, price),
            None => price(),
        }
    }

    /// The routed experts' price (seconds, bound) when the group routes `tokens`.
    #[inline]
    pub fn experts(
        &self,
        decode: bool,
        skewed: bool,
        tokens: f64,
        price: impl FnOnce() -> (f64, Bound),
    ) -> (f64, Bound) {
        self.experts[decode as usize * 2 + skewed as usize].get(tokens, price)
    }
}

/// A copy starts with empty tables (a copy's owner may change what prices depend on).
impl Clone for Memo {
    fn clone(&self) -> Memo {
        Memo::new(self.gemms.len())
    }
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memo")
            .field("gemms", &self.gemms.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn only_halves_within_reach_have_an_index() {
        assert_eq!(index(0.0), Some(0));
        assert_eq!(index(3.0), Some(6));
        assert_eq!(index(3.5), Some(7));
        assert_eq!(index(3.25), None);
        assert_eq!(index(-1.0), None);
        assert_eq!(index(MAX_ROWS as f64), Some(2 * MAX_ROWS));
        assert_eq!(index(MAX_ROWS as f64 + 0.5), None);
        assert_eq!(index(f64::NAN), None);
    }

    #[test]
    fn a_price_is_computed_once_per_row_count_and_read_back_exactly() {
        let memo = Memo::new(2);
        let calls = Cell::new(0);
        let price = |m: f64| {
            calls.set(calls.get() + 1);
            (
                1e-6 * m + 0.1 / 3.0,
                if m > 4.0 {
                    Bound::Compute
                } else {
                    Bound::Memory
                },
            )
        };
        let a = memo.gemm(1, 3.0, || price(3.0));
        let b = memo.gemm(1, 3.0, || price(3.0));
        assert_eq!(a, b);
        assert_eq!(a.0.to_bits(), price(3.0).0.to_bits());
        assert_eq!(calls.get(), 2, "the second read came from the table");
        assert_eq!(memo.gemm(1, 8.5, || price(8.5)).1, Bound::Compute);
        assert_eq!(memo.gemm(1, 8.5, || price(8.5)).1, Bound::Compute);
        assert_eq!(calls.get(), 3);
        // Off the half grid and out of range: priced every time; other slots apart.
        memo.gemm(1, 8.25, || price(8.25));
        memo.gemm(1, 8.25, || price(8.25));
        memo.gemm(0, 3.0, || price(3.0));
        memo.gemm(7, 3.0, || price(3.0));
        assert_eq!(calls.get(), 7);
        // A copy starts empty.
        let copy = memo.clone();
        copy.gemm(1, 3.0, || price(3.0));
        assert_eq!(calls.get(), 8);
    }
}
