//! Interval arithmetic on integer-nanosecond timelines.

/// Merged, sorted, disjoint intervals `[start, end)`.
pub fn union(mut v: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    v.retain(|&(a, b)| b > a);
    v.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Total length of disjoint intervals.
pub fn length(v: &[(i64, i64)]) -> i64 {
    v.iter().map(|&(a, b)| b - a).sum()
}

/// Length of the intersection of two merged interval lists.
pub fn overlap(a: &[(i64, i64)], b: &[(i64, i64)]) -> i64 {
    let (mut i, mut j, mut total) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if hi > lo {
            total += hi - lo;
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    total
}

/// Length of `a` not covered by `b` (both merged).
pub fn minus(a: &[(i64, i64)], b: &[(i64, i64)]) -> i64 {
    length(a) - overlap(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_overlap_and_difference_by_hand() {
        let a = union(vec![(5, 8), (0, 3), (2, 4), (10, 10)]);
        assert_eq!(a, vec![(0, 4), (5, 8)]);
        assert_eq!(length(&a), 7);
        let b = union(vec![(3, 6), (7, 20)]);
        // a ∩ b = [3,4) + [5,6) + [7,8) = 3
        assert_eq!(overlap(&a, &b), 3);
        assert_eq!(minus(&a, &b), 4);
        assert_eq!(minus(&b, &a), 16 - 3);
    }
}
