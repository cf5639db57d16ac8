//! Named random streams derived from one seed, and the stable hashes behind them
//! (prefix-block identities use them too).

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// splitmix64's finaliser: a stable 64-bit mix.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A stable hash of a seed and a byte string (independent of platform and Rust
/// version, unlike `std`'s `DefaultHasher`).
pub fn stable_hash(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = splitmix64(seed ^ 0x5E_ED0F_7A1E);
    for chunk in bytes.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = splitmix64(h ^ u64::from_le_bytes(word));
    }
    splitmix64(h ^ bytes.len() as u64)
}

/// The state `hash_words` starts from.
pub(crate) const HASH_WORDS_SEED: u64 = 0x243F_6A88_85A3_08D3;

/// Hash of a short tuple of integers (prefix-block identities).
pub fn hash_words(words: &[u64]) -> u64 {
    let mut h = HASH_WORDS_SEED;
    for &w in words {
        h = splitmix64(h ^ w);
    }
    h
}

/// The random stream named `name` under `seed`: every stream in a run is derived this
/// way, so adding a stream never shifts another.
pub fn stream(seed: u64, name: &str) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(stable_hash(seed, name.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn streams_are_stable_and_distinct() {
        // Pinned value: changing the derivation changes every seeded result.
        assert_eq!(stable_hash(0, b""), stable_hash(0, b""));
        assert_ne!(stable_hash(1, b"workload"), stable_hash(2, b"workload"));
        assert_ne!(stable_hash(1, b"workload"), stable_hash(1, b"mtp"));
        let a: u64 = stream(42, "x").random();
        let b: u64 = stream(42, "x").random();
        let c: u64 = stream(42, "y").random();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
    }
}
