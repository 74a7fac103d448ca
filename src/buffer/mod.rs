//! S, the in-memory buffer of (signature, position) slots: its slots, its growth, its sort
//! into a run's pairs, and the cache of recent signatures in front of it.
//!
//! A buffer of S holds one 12-byte [`Slot`] per push of its batch (BUbiNG packs its sieve's
//! buffer the same way: Boldi et al., "BUbiNG: Massive crawling for the masses", 2018). When
//! it is full it is frozen and flushed: sorted in place by signature ([`sort`], a radix sort),
//! each signature kept once with the position of its first occurrence ([`sort_slots`]). The
//! [`recent`] cache drops most repeats before they take a slot.

pub(crate) mod recent;
pub(crate) mod sort;

/// The exact index of S's signatures that a sieve keeps while it answers whether pushes are
/// new: a hash set of signatures, which are already uniform, so that they are their own
/// hash.
pub(crate) type SigIndex = std::collections::HashSet<u64, std::hash::BuildHasherDefault<SigHasher>>;

/// The hasher of [`SigIndex`]: a signature is its own hash.
#[derive(Default)]
pub(crate) struct SigHasher(u64);

impl std::hash::Hasher for SigHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; anything else folds its bytes in.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, sig: u64) {
        self.0 = sig;
    }
}

/// The share of S's slots a sieve fills while it keeps the [`SigIndex`] of S: the index takes
/// the rest of S's budget (up to about 21 bytes per signature beside the slot's 12).
pub(crate) const INDEXED_SHARE: usize = 3;

/// A slot of S: a signature and the index of its record in the batch, in 12 bytes (the
/// index is what the pair of a run keeps; BUbiNG packs its sieve's buffer the same way).
/// A full buffer is sorted in place into a run's pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, packed(4))]
pub struct Slot {
    /// The URL's signature.
    pub sig: u64,
    /// The record's index in its batch.
    pub idx: u32,
}

/// Slots a new buffer of S is allocated for: it grows, to at most the buffer's size, only
/// as slots come, so a small batch never holds the whole budget.
pub const FIRST_SLOTS: usize = 1 << 16;

/// Appends `slot` to the buffer `s` of at most `slots` slots. The buffer's capacity grows by
/// doubling up to exactly `slots`, never past it: the budget counts `slots` slots.
#[inline]
pub fn push_slot(s: &mut Vec<Slot>, slot: Slot, slots: usize) {
    if s.len() == s.capacity() {
        grow(s, slots);
    }
    s.push(slot);
}

#[cold]
fn grow(s: &mut Vec<Slot>, slots: usize) {
    let target = (2 * s.capacity())
        .max(FIRST_SLOTS)
        .min(slots)
        .max(s.len() + 1);
    s.reserve_exact(target - s.len());
}

/// Sorts a full buffer in place into the pairs of a run: by signature, each signature once
/// with the index of its first occurrence.
///
/// The sort orders by signature only (a radix sort, `src/sort.rs`), and the pass that
/// removes repeats keeps the smallest index of each signature.
pub fn sort_slots(slots: &mut Vec<Slot>) {
    sort::sort_by_sig(slots);
    let mut kept = 0;
    for i in 0..slots.len() {
        let p = slots[i];
        if kept > 0 && slots[kept - 1].sig == p.sig {
            if p.idx < slots[kept - 1].idx {
                slots[kept - 1].idx = p.idx;
            }
        } else {
            slots[kept] = p;
            kept += 1;
        }
    }
    slots.truncate(kept);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(pairs: &[(u64, u32)]) -> Vec<Slot> {
        pairs.iter().map(|&(sig, idx)| Slot { sig, idx }).collect()
    }

    #[test]
    fn a_buffer_of_s_grows_to_exactly_its_slots() {
        for max in [1, 1000, FIRST_SLOTS, FIRST_SLOTS + 1, 5 * FIRST_SLOTS + 3] {
            let mut s = Vec::new();
            for i in 0..max {
                push_slot(
                    &mut s,
                    Slot {
                        sig: i as u64,
                        idx: i as u32,
                    },
                    max,
                );
                assert!(s.capacity() <= max, "{max}");
            }
            assert_eq!(s.capacity(), max);
            // Past `slots` (a batch that recovery fills), it still grows.
            push_slot(&mut s, Slot { sig: 0, idx: 0 }, max);
            assert_eq!(s.len(), max + 1);
        }
    }

    #[test]
    fn sorting_slots_keeps_the_first_occurrence_of_each_signature() {
        let mut s = slots(&[(9, 0), (3, 1), (9, 2), (1, 3), (3, 4), (9, 5)]);
        sort_slots(&mut s);
        assert_eq!(s, slots(&[(1, 3), (3, 1), (9, 0)]));
        assert_eq!(std::mem::size_of::<Slot>(), 12);
    }

    proptest::proptest! {
        #[test]
        fn sorting_slots_agrees_with_a_sort_of_pairs(
            sigs in proptest::collection::vec(
                proptest::prop_oneof![proptest::num::u64::ANY, 0u64..4],
                0..3000,
            ),
            reversed: bool,
        ) {
            let n = sigs.len() as u32;
            let mut s: Vec<Slot> = (0..n)
                .zip(&sigs)
                .map(|(i, &sig)| Slot { sig, idx: if reversed { n - 1 - i } else { i } })
                .collect();
            let mut expected = s.clone();
            expected.sort_unstable_by_key(|p| (p.sig, p.idx));
            expected.dedup_by_key(|p| p.sig);
            sort_slots(&mut s);
            proptest::prop_assert_eq!(s, expected);
        }
    }

    #[test]
    fn sorting_slots_orders_large_buffers_with_hot_repeats() {
        // Uniform signatures with a few very frequent ones, as a crawl's home pages are.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut s = Vec::new();
        for i in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let sig = if x.is_multiple_of(5) { x % 7 } else { x };
            s.push(Slot { sig, idx: i });
        }
        let mut expected = s.clone();
        expected.sort_unstable_by_key(|p| (p.sig, p.idx));
        expected.dedup_by_key(|p| p.sig);
        sort_slots(&mut s);
        assert_eq!(s, expected);
    }
}
