//! Serde helpers for fields that default to one or to yes (and, for one, are left out of
//! output when they are).

pub fn one() -> u32 {
    1
}

pub fn is_one(x: &u32) -> bool {
    *x == 1
}

pub fn yes() -> bool {
    true
}
