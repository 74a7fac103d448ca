//! The scheduler's heap: queues by the first instant each may be served (notes §2.8: a
//! min-priority queue of hosts keyed by the first instant each may be fetched politely).
//!
//! A 4-ary heap of (instant, queue) packed into one 128-bit key: a hand-out pops one entry
//! per queue it serves and the end of each lease pushes one, at 10^5 queues and more. A
//! binary heap of 16-byte entries is 17 levels deep there, each level a cache line of its
//! own; here the four children of an entry share one line and the heap is half as deep,
//! and a key is compared in one comparison instead of a tuple's two.

/// (instant, queue index) as one key, in the order of the pair.
fn key(at: u64, queue: u32) -> u128 {
    (u128::from(at) << 32) | u128::from(queue)
}

fn unkey(k: u128) -> (u64, u32) {
    ((k >> 32) as u64, k as u32)
}

/// A min-heap of (instant, queue index) entries.
#[derive(Default)]
pub(super) struct DueHeap {
    keys: Vec<u128>,
}

/// Makes room for one more element in `v`, a quarter more at a time once it is large: a
/// table per queue doubled would hold up to twice its queues' room. (A large vector grows
/// in place or by remapping its pages, not by copying them.)
pub(super) fn grow_by_a_quarter<T>(v: &mut Vec<T>) {
    if v.len() == v.capacity() {
        v.reserve_exact((v.len() / 4).max(64));
    }
}

impl DueHeap {
    /// How many entries it holds (stale ones included).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Adds queue `queue` at instant `at`.
    pub(super) fn push(&mut self, at: u64, queue: u32) {
        grow_by_a_quarter(&mut self.keys);
        self.keys.push(key(at, queue));
        self.sift_up(self.keys.len() - 1);
    }

    /// The earliest entry.
    pub(super) fn peek(&self) -> Option<(u64, u32)> {
        self.keys.first().map(|&k| unkey(k))
    }

    /// Takes the earliest entry out.
    pub(super) fn pop(&mut self) -> Option<(u64, u32)> {
        let last = self.keys.pop()?;
        let Some(top) = self.keys.first_mut() else {
            return Some(unkey(last));
        };
        let top = std::mem::replace(top, last);
        // The last entry goes down from the root to the bottom along the smallest
        // children, then up to its place: it belongs near the bottom, so this compares
        // less than testing it against each level's smallest child on the way down.
        let n = self.keys.len();
        let mut at = 0;
        loop {
            let first = 4 * at + 1;
            if first >= n {
                break;
            }
            let end = (first + 4).min(n);
            let mut min = first;
            for c in first + 1..end {
                if self.keys[c] < self.keys[min] {
                    min = c;
                }
            }
            self.keys[at] = self.keys[min];
            at = min;
        }
        self.keys[at] = last;
        self.sift_up(at);
        Some(unkey(top))
    }

    /// Moves the entry at `at` up to its place.
    fn sift_up(&mut self, mut at: usize) {
        let k = self.keys[at];
        while at > 0 {
            let parent = (at - 1) / 4;
            if self.keys[parent] <= k {
                break;
            }
            self.keys[at] = self.keys[parent];
            at = parent;
        }
        self.keys[at] = k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    proptest::proptest! {
        /// Any sequence of pushes and pops gives what a binary heap of pairs gives.
        #[test]
        fn it_pops_what_a_binary_heap_pops(
            ops in proptest::collection::vec((0u8..3, 0u64..50, 0u32..40), 0..400),
        ) {
            let mut h = DueHeap::default();
            let mut model = BinaryHeap::new();
            for (op, at, q) in ops {
                if op < 2 {
                    h.push(at, q);
                    model.push(Reverse((at, q)));
                } else {
                    proptest::prop_assert_eq!(h.pop(), model.pop().map(|Reverse(e)| e));
                }
                proptest::prop_assert_eq!(h.peek(), model.peek().map(|Reverse(e)| *e));
                proptest::prop_assert_eq!(h.len(), model.len());
            }
            while let Some(e) = model.pop() {
                proptest::prop_assert_eq!(h.pop(), Some(e.0));
            }
            proptest::prop_assert_eq!(h.pop(), None);
        }
    }

    #[test]
    fn the_largest_instants_keep_their_order() {
        let mut h = DueHeap::default();
        for (at, q) in [
            (u64::MAX, u32::MAX),
            (u64::MAX, 0),
            (u64::MAX - 1, u32::MAX),
            (0, 7),
        ] {
            h.push(at, q);
        }
        let out: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
        assert_eq!(
            out,
            [
                (0, 7),
                (u64::MAX - 1, u32::MAX),
                (u64::MAX, 0),
                (u64::MAX, u32::MAX)
            ]
        );
    }
}
