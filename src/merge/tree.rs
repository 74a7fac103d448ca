//! A k-way merge of sorted sources of signatures, with a tree of losers.
//!
//! A merge reads Z's segments on one side and the runs with the batch on the other. Each side
//! is a [`Merger`]: it yields every signature of its sources once, in increasing order, with
//! the earliest source holding it (sources are numbered in push order, so that is the first
//! occurrence) and its position there.
//!
//! The tree of losers (Knuth, TAOCP vol. 3, §5.4.1) keeps, at each inner node, the source that
//! lost the match played there; the overall winner sits apart. When the winner's source moves
//! to its next signature, only the matches on its path to the root are replayed: `log2(k)`
//! comparisons, one per level, against a binary heap's pop and push, which compare both
//! children at each level on the way down and again on the way up.

use crate::buffer::Slot;
use crate::error::Result;

/// One sorted source: a Z segment, a run, or the batch.
pub(crate) enum Input<'a> {
    /// A Z segment: its signatures (no positions).
    Z(crate::segment::SegmentIter<'a>),
    /// A run: its (signature, position) pairs.
    Run(crate::run::RunIter<'a>),
    /// The batch, sorted, each signature once.
    Batch(std::slice::Iter<'a, Slot>),
}

impl Input<'_> {
    #[inline]
    fn next(&mut self) -> Result<Option<(u64, u32)>> {
        match self {
            Input::Z(it) => it.next().transpose().map(|o| o.map(|s| (s, 0))),
            Input::Run(it) => it.next().transpose(),
            Input::Batch(it) => Ok(it.next().map(|p| (p.sig, p.idx))),
        }
    }
}

/// The key of an exhausted source: above every `(signature, source)` key.
const DONE: u128 = u128::MAX;

/// The key of a source's head: ordered by signature, then by source.
fn key(sig: u64, src: usize) -> u128 {
    (u128::from(sig) << 32) | src as u128
}

/// What a [`Merger`] yields: a signature, the earliest source holding it, and its position
/// in that source (0 for a Z segment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub sig: u64,
    pub src: usize,
    pub idx: u32,
}

/// The k-way merge of sorted sources (each strictly increasing), yielding every signature
/// once. (Sources are checked when read: a run's and a segment's blocks by their checksums.
/// Of a damaged source that still passes them, a signature out of order is refused as
/// corruption by the segment writer when it breaks the output's order, and a signature
/// repeated within one source is taken once.)
pub(crate) struct Merger<'a> {
    inputs: Vec<Input<'a>>,
    /// Per source: the key of its head, or [`DONE`].
    keys: Vec<u128>,
    /// Per source: the position of its head.
    idx: Vec<u32>,
    /// `tree[n]`, for the inner nodes `n` in `1..k`: the source that lost the match at `n`;
    /// `tree[0]`: the winner. Source `i` is the leaf `k + i`, and node `n`'s parent is `n / 2`.
    tree: Vec<u32>,
    /// One source: it is read straight through, without the tree (Z, when it is one
    /// segment, goes this way, and it holds most of a merge's signatures).
    single: bool,
}

impl<'a> Merger<'a> {
    /// Reads the first signature of every source and plays the tournament.
    pub fn new(mut inputs: Vec<Input<'a>>) -> Result<Self> {
        let k = inputs.len();
        if k == 1 {
            return Ok(Merger {
                inputs,
                keys: Vec::new(),
                idx: Vec::new(),
                tree: Vec::new(),
                single: true,
            });
        }
        let mut keys = Vec::with_capacity(k);
        let mut idx = Vec::with_capacity(k);
        for (i, input) in inputs.iter_mut().enumerate() {
            let (kk, ii) = match input.next()? {
                Some((sig, p)) => (key(sig, i), p),
                None => (DONE, 0),
            };
            keys.push(kk);
            idx.push(ii);
        }
        let mut tree = vec![0u32; k.max(1)];
        // The winner of each inner node's subtree, bottom up.
        let mut winner = vec![0u32; k.max(1)];
        let of = |node: usize, winner: &[u32]| {
            if node >= k {
                (node - k) as u32
            } else {
                winner[node]
            }
        };
        for n in (1..k).rev() {
            let (a, b) = (of(2 * n, &winner), of(2 * n + 1, &winner));
            let (w, l) = if keys[a as usize] <= keys[b as usize] {
                (a, b)
            } else {
                (b, a)
            };
            winner[n] = w;
            tree[n] = l;
        }
        tree[0] = if k > 1 { winner[1] } else { 0 };
        Ok(Merger {
            inputs,
            keys,
            idx,
            tree,
            single: false,
        })
    }

    /// Moves source `i`, the winner, to its next signature and replays its path.
    fn advance(&mut self, i: usize) -> Result<()> {
        let mut kw = match self.inputs[i].next()? {
            Some((sig, p)) => {
                self.idx[i] = p;
                key(sig, i)
            }
            None => DONE,
        };
        self.keys[i] = kw;
        let mut w = i as u32;
        let mut n = (i + self.inputs.len()) / 2;
        while n >= 1 {
            // Without a branch: which of the two wins is as good as random, and a mispredicted
            // branch per level cost more than the rest of the replay.
            let l = self.tree[n];
            let kl = self.keys[l as usize];
            let swap = kl < kw;
            let mask = u32::from(swap).wrapping_neg();
            self.tree[n] = (w & mask) | (l & !mask);
            w = (l & mask) | (w & !mask);
            kw = if swap { kl } else { kw };
            n /= 2;
        }
        self.tree[0] = w;
        Ok(())
    }

    /// The smallest signature not yet yielded, with the earliest source holding it; every
    /// source moves past it.
    #[inline]
    pub fn next(&mut self) -> Result<Option<Head>> {
        if self.single {
            let head = self.inputs[0].next()?;
            return Ok(head.map(|(sig, idx)| Head { sig, src: 0, idx }));
        }
        let Some(&w) = self.tree.first() else {
            return Ok(None);
        };
        let w = w as usize;
        let top = match self.keys.get(w) {
            Some(&k) if k != DONE => k,
            _ => return Ok(None),
        };
        let sig = (top >> 32) as u64;
        let head = Head {
            sig,
            src: w,
            idx: self.idx[w],
        };
        self.advance(w)?;
        loop {
            let w = self.tree[0] as usize;
            let k = self.keys[w];
            if k == DONE || (k >> 32) as u64 != sig {
                break;
            }
            self.advance(w)?;
        }
        Ok(Some(head))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn batch(sigs: &[(u64, u32)]) -> Vec<Slot> {
        sigs.iter().map(|&(sig, idx)| Slot { sig, idx }).collect()
    }

    /// What the merge must yield: each signature once, from its earliest source.
    fn expected(sources: &[Vec<Slot>]) -> Vec<Head> {
        let mut all: Vec<Head> = sources
            .iter()
            .enumerate()
            .flat_map(|(src, s)| {
                s.iter().map(move |p| Head {
                    sig: p.sig,
                    src,
                    idx: p.idx,
                })
            })
            .collect();
        all.sort_by_key(|h| (h.sig, h.src));
        all.dedup_by_key(|h| h.sig);
        all
    }

    fn merged(sources: &[Vec<Slot>]) -> Vec<Head> {
        let inputs = sources.iter().map(|s| Input::Batch(s.iter())).collect();
        let mut m = Merger::new(inputs).unwrap();
        let mut out = Vec::new();
        while let Some(h) = m.next().unwrap() {
            out.push(h);
        }
        // Exhausted, it stays exhausted.
        assert_eq!(m.next().unwrap(), None);
        out
    }

    #[test]
    fn no_sources_and_empty_sources_yield_nothing() {
        assert!(merged(&[]).is_empty());
        assert!(merged(&[vec![]]).is_empty());
        assert!(merged(&[vec![], vec![], vec![]]).is_empty());
    }

    #[test]
    fn equal_signatures_come_from_the_earliest_source() {
        let s = vec![
            batch(&[(5, 50), (9, 90)]),
            batch(&[(1, 11), (5, 51), (u64::MAX, 7)]),
            batch(&[(0, 2), (5, 52), (9, 92), (u64::MAX, 8)]),
        ];
        let got: Vec<(u64, usize, u32)> =
            merged(&s).iter().map(|h| (h.sig, h.src, h.idx)).collect();
        assert_eq!(
            got,
            [
                (0, 2, 2),
                (1, 1, 11),
                (5, 0, 50),
                (9, 0, 90),
                (u64::MAX, 1, 7)
            ]
        );
    }

    proptest! {
        #[test]
        fn yields_each_signature_once_from_its_earliest_source(
            raw in prop::collection::vec(prop::collection::btree_map(0u64..64, any::<u32>(), 0..40), 0..20),
        ) {
            // Small signatures make equal ones across sources common; every source count up
            // to 20 gives trees of every shape (odd and even, powers of two or not).
            let sources: Vec<Vec<Slot>> = raw
                .iter()
                .map(|m| m.iter().map(|(&sig, &idx)| Slot { sig: sig.wrapping_mul(0x0123_4567_89ab_cdef), idx }).collect::<Vec<_>>())
                .map(|mut v| { v.sort_by_key(|p| p.sig); v })
                .collect();
            prop_assert_eq!(merged(&sources), expected(&sources));
        }
    }
}
