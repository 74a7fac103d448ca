//! The scheduler's heap: queues by the first instant each may be served (notes §2.8: a
//! min-priority queue of hosts keyed by the first instant each may be fetched politely).
//!
//! A 4-ary heap of (instant, queue) packed into one 128-bit key: a hand-out pops one entry
//! per queue it serves and the end of each lease pushes one, at 10^5 queues and more. A
//! binary heap of 16-byte entries is 17 levels deep there, each level a cache line of its
//! own; here the four children of an entry share one line and the heap is half as deep,
//! and a key is compared in one comparison instead of a tuple's two.
//!
//! One key stands for a *range* of entries: queues one after the other at one instant,
//! `(at, q), (at, q + 1), …, (at, q + n - 1)`. The queues a move makes, those an open
//! schedules (in the order of their places; every queue never served is due at 0) and those
//! one hand-out served and its dones reschedule come in such ranges: pushed one by one, they
//! gather in a range held beside the heap (`tail`) until a push does not follow it, and then
//! take one key. Popping a range's first entry puts its rest back in its place. Nothing else
//! changes: the heap pops exactly what a heap of the single entries would (a proptest).

/// (instant, first queue, queues after the first) as one key, in the order of the triple.
fn key(at: u64, queue: u32, more: u32) -> u128 {
    (u128::from(at) << 64) | (u128::from(queue) << 32) | u128::from(more)
}

fn unkey(k: u128) -> (u64, u32, u32) {
    ((k >> 64) as u64, (k >> 32) as u32, k as u32)
}

/// A min-heap of (instant, queue index) entries.
#[derive(Default)]
pub(super) struct DueHeap {
    keys: Vec<u128>,
    /// The last entries pushed, while they are one range: (instant, first queue, count).
    tail: Option<(u64, u32, u32)>,
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
        let tail = self.tail.map_or(0, |t| t.2 as usize);
        self.keys
            .iter()
            .map(|&k| unkey(k).2 as usize + 1)
            .sum::<usize>()
            + tail
    }

    /// How many keys it holds: the memory it takes, 16 bytes each.
    #[cfg(test)]
    pub(super) fn keys(&self) -> usize {
        self.keys.len() + usize::from(self.tail.is_some())
    }

    /// Adds queue `queue` at instant `at`.
    pub(super) fn push(&mut self, at: u64, queue: u32) {
        if let Some((t_at, first, n)) = &mut self.tail {
            // (A range of every place there is would count 2^32: it stops one short.)
            if *t_at == at && u64::from(*first) + u64::from(*n) == u64::from(queue) && *n < u32::MAX
            {
                *n += 1;
                return;
            }
        }
        if let Some((t_at, first, n)) = self.tail.replace((at, queue, 1)) {
            grow_by_a_quarter(&mut self.keys);
            self.keys.push(key(t_at, first, n - 1));
            self.sift_up(self.keys.len() - 1);
        }
    }

    /// The earliest entry.
    pub(super) fn peek(&self) -> Option<(u64, u32)> {
        let top = self.keys.first().map(|&k| {
            let (at, q, _) = unkey(k);
            (at, q)
        });
        let tail = self.tail.map(|(at, q, _)| (at, q));
        match (top, tail) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes the earliest entry out.
    pub(super) fn pop(&mut self) -> Option<(u64, u32)> {
        let top = self.keys.first().map(|&k| unkey(k));
        if let Some((at, q, n)) = self.tail {
            if top.is_none_or(|(t_at, t_q, _)| (at, q) < (t_at, t_q)) {
                self.tail = (n > 1).then(|| (at, q + 1, n - 1));
                return Some((at, q));
            }
        }
        let (at, q, more) = top?;
        if more > 0 {
            // The rest of the range: no earlier than the entry it follows, so it goes down.
            self.settle_root(key(at, q + 1, more - 1));
        } else {
            let last = self.keys.pop().expect("the heap has a top");
            if !self.keys.is_empty() {
                self.settle_root(last);
            }
        }
        Some((at, q))
    }

    /// Puts `k` in the root's place, then moves it to its own.
    fn settle_root(&mut self, k: u128) {
        // The root's hole goes down to the bottom along the smallest children, then `k` up
        // to its place: an entry taken from the bottom (a pop's) belongs near it, so this
        // compares less than testing it against each level's smallest child on the way
        // down.
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
        self.keys[at] = k;
        self.sift_up(at);
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
        /// Any sequence of pushes and pops gives what a binary heap of pairs gives: single
        /// pushes, and runs of pushes of queues one after the other at one instant (which
        /// make ranges), duplicates included.
        #[test]
        fn it_pops_what_a_binary_heap_pops(
            ops in proptest::collection::vec((0u8..4, 0u64..50, 0u32..40, 1u32..6), 0..400),
        ) {
            let mut h = DueHeap::default();
            let mut model = BinaryHeap::new();
            for (op, at, q, n) in ops {
                match op {
                    0 => {
                        h.push(at, q);
                        model.push(Reverse((at, q)));
                    }
                    1 => {
                        for q in q..q + n {
                            h.push(at % 3, q);
                            model.push(Reverse((at % 3, q)));
                        }
                    }
                    _ => {
                        proptest::prop_assert_eq!(h.pop(), model.pop().map(|Reverse(e)| e));
                    }
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
    fn queues_one_after_the_other_at_one_instant_take_one_key() {
        let mut h = DueHeap::default();
        for q in 0..100_000 {
            h.push(0, q);
        }
        assert_eq!(h.keys(), 1);
        // A push that does not follow the range starts another; the range takes one key.
        h.push(5, 7);
        h.push(5, 8);
        h.push(0, 100_000);
        assert_eq!((h.keys(), h.len()), (3, 100_003));
        let mut out = Vec::new();
        while let Some(e) = h.pop() {
            out.push(e);
        }
        let want: Vec<_> = (0..=100_000)
            .map(|q| (0, q))
            .chain([(5, 7), (5, 8)])
            .collect();
        assert_eq!(out, want);
        assert_eq!(h.keys(), 0);
    }

    #[test]
    fn a_range_ends_at_the_last_queue() {
        let mut h = DueHeap::default();
        for q in u32::MAX - 3..=u32::MAX {
            h.push(9, q);
        }
        h.push(1, 0);
        h.push(9, 0);
        let out: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
        let mut want = vec![(1, 0), (9, 0)];
        want.extend((u32::MAX - 3..=u32::MAX).map(|q| (9, q)));
        assert_eq!(out, want);
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
