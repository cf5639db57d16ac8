//! A prompt's prefix-cache block identities (one per `TRACE_BLOCK_TOKENS` tokens, the last
//! possibly partial), computed on demand: a trace lists them; a generated workload
//! derives each from its owner (a system prompt, a session, a request) and position,
//! so no list is stored or copied, and a cache node's run is a window on a prompt.

use super::streams::splitmix64;

/// The hash state `hash_words(&[w..])` reaches after `words` (`streams::hash_words`
/// continues from it with the position).
fn hash_state(words: &[u64]) -> u64 {
    words
        .iter()
        .fold(super::streams::HASH_WORDS_SEED, |h, &w| splitmix64(h ^ w))
}

/// The block identities of one prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prompt<'a> {
    /// Listed identities (a trace record's `hash_ids`).
    Listed(&'a [u64]),
    /// Identities derived from owners and positions (see `Generated`).
    Generated(Generated),
}

/// Block `i` is `hash_words(&[shared.., i])` for the first `shared` blocks (a prefix
/// many prompts have) and `hash_words(&[own.., i])` after them, `len` blocks in all.
/// Each identity names its owner and position, so it names its whole prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generated {
    shared_state: u64,
    own_state: u64,
    shared: u32,
    len: u32,
}

impl Generated {
    /// `len` blocks: the first `shared` owned by `shared_owner`'s words, the rest by
    /// `own_owner`'s.
    pub fn new(shared_owner: &[u64], shared: u32, own_owner: &[u64], len: u32) -> Self {
        Generated {
            shared_state: hash_state(shared_owner),
            own_state: hash_state(own_owner),
            shared,
            len,
        }
    }
}

impl<'a> Prompt<'a> {
    pub fn len(&self) -> usize {
        match self {
            Prompt::Listed(b) => b.len(),
            Prompt::Generated(g) => g.len as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Block `i`'s identity (`i < len`).
    #[inline]
    pub fn get(&self, i: usize) -> u64 {
        match self {
            Prompt::Listed(b) => b[i],
            Prompt::Generated(g) => {
                debug_assert!(i < g.len as usize);
                let state = if (i as u32) < g.shared {
                    g.shared_state
                } else {
                    g.own_state
                };
                splitmix64(state ^ i as u64)
            }
        }
    }

    /// Its first `n` blocks (`n <= len`).
    pub fn prefix(&self, n: usize) -> Prompt<'a> {
        match *self {
            Prompt::Listed(b) => Prompt::Listed(&b[..n]),
            Prompt::Generated(g) => Prompt::Generated(Generated {
                len: n.min(g.len as usize) as u32,
                ..g
            }),
        }
    }

    /// The listed identities, if they are listed.
    pub fn as_listed(&self) -> Option<&'a [u64]> {
        match *self {
            Prompt::Listed(b) => Some(b),
            Prompt::Generated(_) => None,
        }
    }

    /// All identities, in order.
    pub fn to_vec(&self) -> Vec<u64> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }
}

/// The tokens a prompt of `input` tokens takes from a prefix cache that matched
/// `matched` leading tokens, counted in the engine's blocks of `block` tokens: whole
/// blocks within the first `input - 1` tokens (the last token is always computed;
/// vLLM then recomputes the whole block it lies in).
pub(crate) fn cached_tokens(matched: u64, input: u64, block: u64) -> u64 {
    let usable = matched.min(input.saturating_sub(1));
    usable / block.max(1) * block.max(1)
}

#[cfg(test)]
mod tests {
    use super::super::streams::hash_words;
    use super::*;

    /// Cached tokens in the engine's block, by hand: a 500-token shared prefix before
    /// a 600-token prompt is 31 whole vLLM blocks (496), 500 single SGLang tokens, 15
    /// TensorRT-LLM blocks (480) and no whole 512-token block. A prompt matched whole
    /// keeps its last token to compute: 1,000 matched of 1,000 gives 999 at one token,
    /// 992 (62 x 16) in vLLM's block, and 512 in twin's own, not 999.
    #[test]
    fn cached_tokens_are_whole_engine_blocks_within_input_minus_one() {
        let hit = |matched, block| cached_tokens(matched, 600, block);
        assert_eq!(
            [hit(500, 16), hit(500, 1), hit(500, 32), hit(500, 512)],
            [496, 500, 480, 0]
        );
        assert_eq!(cached_tokens(1000, 1000, 1), 999);
        assert_eq!(cached_tokens(1024, 1000, 16), 992);
        assert_eq!(cached_tokens(1024, 1000, 512), 512);
        assert_eq!(cached_tokens(0, 1, 16), 0);
    }

    #[test]
    fn generated_identities_are_the_owners_hashes() {
        let p = Prompt::Generated(Generated::new(&[1, 7], 3, &[2, 99], 5));
        let want: Vec<u64> = (0..5u64)
            .map(|i| {
                if i < 3 {
                    hash_words(&[1, 7, i])
                } else {
                    hash_words(&[2, 99, i])
                }
            })
            .collect();
        assert_eq!(p.to_vec(), want);
        assert_eq!(p.prefix(2).to_vec(), want[..2]);
        let q = Prompt::Generated(Generated::new(&[3], 1, &[4, 5], 2));
        assert_eq!(q.to_vec(), [hash_words(&[3, 0]), hash_words(&[4, 5, 1])]);
        let ids = [4, 5, 6];
        assert_eq!(Prompt::Listed(&ids).prefix(2).to_vec(), [4, 5]);
    }
}
