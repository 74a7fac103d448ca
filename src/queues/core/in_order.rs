//! The queues in the order of their ids, for the reads of whole runs at an open.
//!
//! A run's groups come in the order of their queue ids. An open that reads every group of a
//! run (to seat its records in their queues) finds each group's queue here by walking
//! forward, through memory read in order, instead of in the id index: there each look-up
//! lands on a bucket and then on a queue at random, two or three cache misses. At 10^6
//! queues and 39 runs (a crash in the middle of a crawl) the look-ups were 60 % of an open.
//!
//! The order is kept while the open replays J, and dropped after it: 8 bytes per queue, for
//! that time only.

/// Places of queues sorted by the high 32 bits of their ids.
#[derive(Default)]
pub(super) struct IdOrder {
    /// `high 32 bits of the id << 32 | place`, sorted: in the order of the ids' high bits
    /// (ids that share them in the order of their places).
    entries: Vec<u64>,
    /// The queues `entries` holds: every place below this one.
    covers: u32,
    /// Where the walk of the run being read stands: no entry before it has a high part
    /// above the last id looked up.
    at: usize,
    /// The last id looked up in this walk.
    last: u64,
}

impl IdOrder {
    /// Begins a walk of a run's groups. First takes in the queues at places from the last
    /// walk's end to `len` (those the walk before created, or anything else did), whose ids
    /// are `ids(place)`.
    pub(super) fn start(&mut self, len: u32, ids: impl Fn(u32) -> u64) {
        if self.covers < len {
            let mut fresh: Vec<u64> = (self.covers..len)
                .map(|p| (ids(p) >> 32) << 32 | u64::from(p))
                .collect();
            fresh.sort_unstable();
            merge_into(&mut self.entries, &fresh);
            self.covers = len;
        }
        self.at = 0;
        self.last = 0;
    }

    /// How many of the `len` queues it has yet to take in.
    pub(super) fn behind(&self, len: u32) -> u64 {
        u64::from(len.saturating_sub(self.covers))
    }

    /// The place of queue `id`, if the queues taken in hold it. Ids looked up in increasing
    /// order cost a walk forward; one below the last starts again from the beginning.
    pub(super) fn find(&mut self, id: u64, ids: impl Fn(u32) -> u64) -> Option<u32> {
        let at = self.seek(id);
        self.entries[at..]
            .iter()
            .take_while(|&&x| x >> 32 == id >> 32)
            .map(|&x| x as u32)
            .find(|&p| ids(p) == id)
    }

    /// The first place whose id shares the high half of `id`'s: most likely queue `id`'s
    /// (see [`IdOrder::find`]), to be checked against its id.
    pub(super) fn guess(&mut self, id: u64) -> Option<u32> {
        let at = self.seek(id);
        self.entries
            .get(at)
            .filter(|&&x| x >> 32 == id >> 32)
            .map(|&x| x as u32)
    }

    /// Walks to the first entry whose high half is at or past `id`'s, galloping from where
    /// the walk stands.
    fn seek(&mut self, id: u64) -> usize {
        if id < self.last {
            self.at = 0;
        }
        self.last = id;
        let key = (id >> 32) << 32;
        let e = &self.entries;
        let mut lo = self.at;
        if lo < e.len() && e[lo] < key {
            let mut step = 1;
            while lo + step < e.len() && e[lo + step] < key {
                lo += step;
                step *= 2;
            }
            let hi = (lo + step).min(e.len());
            lo += 1 + e[lo + 1..hi].partition_point(|&x| x < key);
        }
        self.at = lo;
        lo
    }
}

/// Merges `fresh` (sorted) into `all` (sorted), in place from the back: no room beside.
fn merge_into(all: &mut Vec<u64>, fresh: &[u64]) {
    let (n, m) = (all.len(), fresh.len());
    all.resize(n + m, 0);
    let (mut i, mut j) = (n, m);
    while j > 0 {
        if i > 0 && all[i - 1] > fresh[j - 1] {
            all[i + j - 1] = all[i - 1];
            i -= 1;
        } else {
            all[i + j - 1] = fresh[j - 1];
            j -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids whose high halves collide often, so that the walk scans runs of equal ones.
    fn ids(n: u32, seed: u64) -> Vec<u64> {
        (0..n)
            .map(|p| {
                let h = xxhash_rust::xxh3::xxh3_64_with_seed(&p.to_le_bytes(), seed);
                (h % 97) << 32 | (h & 0xffff_ffff)
            })
            .collect()
    }

    #[test]
    fn walks_find_what_the_queues_hold_and_nothing_else() {
        let all = ids(5_000, 7);
        let mut order = IdOrder::default();
        // Queues taken in over several walks, as installs create them.
        for len in [0u32, 1, 1_200, 1_201, 3_000, 5_000] {
            order.start(len, |p| all[p as usize]);
            let mut probe: Vec<u64> = all.iter().copied().step_by(3).collect();
            probe.extend(all.iter().map(|&id| id ^ 1 << 40));
            probe.sort_unstable();
            probe.dedup();
            for id in probe {
                let want = all[..len as usize]
                    .iter()
                    .position(|&x| x == id)
                    .map(|p| p as u32);
                assert_eq!(order.find(id, |p| all[p as usize]), want, "id {id:x}");
            }
            // Out of order: starts again, still right.
            for &id in all[..len as usize].iter().rev().take(50) {
                let p = order.find(id, |p| all[p as usize]).expect("held");
                assert_eq!(all[p as usize], id);
            }
        }
    }

    #[test]
    fn the_merge_keeps_the_order() {
        let mut all = vec![1, 4, 4, 9];
        merge_into(&mut all, &[0, 4, 5, 10]);
        assert_eq!(all, [0, 1, 4, 4, 4, 5, 9, 10]);
        let mut empty = Vec::new();
        merge_into(&mut empty, &[2, 3]);
        assert_eq!(empty, [2, 3]);
        merge_into(&mut empty, &[]);
        assert_eq!(empty, [2, 3]);
    }
}
