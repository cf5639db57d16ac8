//! Serde helpers for fields that default to one (and are left out of output when they are).

pub(crate) fn one() -> u32 {
    1
}

pub(crate) fn is_one(x: &u32) -> bool {
    *x == 1
}
