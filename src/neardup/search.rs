//! The search: every stored fingerprint within distance `k` of a batch of queries, by
//! multi-index hashing over the four tables (Norouzi, Punjani, Fleet, "Fast Search in Hamming
//! Space with Multi-Index Hashing", 2012; Manku, Jain, Das Sarma's permuted tables are the
//! case k = 3). A fingerprint within `k` of a query differs from it in at most `k` bits, so in
//! one of the four 16-bit blocks it differs in at most `k / 4` bits (pigeonhole): probing, in
//! each table, every key within `k / 4` bits of the query's block finds it, and nothing is
//! missed. For k ≤ 3 that is the query's own key; for 4 ≤ k ≤ 7, 17 keys per table.

use super::segment::{key, rest, rest_at, BlockInfo};
use super::Entry;

/// The largest distance a search takes.
pub const MAX_K: u32 = 7;

/// A query's probe of one key of a table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Probe {
    /// The key probed.
    pub key: u32,
    /// The query's fingerprint.
    pub fp: u64,
    /// The query's document: only entries of earlier documents match it.
    pub doc: u64,
    /// The query's index in its batch.
    pub slot: u32,
}

/// The probes of `queries` (fingerprint, document) in table `t` for distance `k`, sorted by
/// key, into `out`.
pub(crate) fn probes(t: usize, queries: &[(u64, u64)], k: u32, out: &mut Vec<Probe>) {
    out.clear();
    let radius = k / 4;
    debug_assert!(radius <= 1);
    for (slot, &(fp, doc)) in queries.iter().enumerate() {
        let own = key(fp, t);
        let p = Probe {
            key: own,
            fp,
            doc,
            slot: slot as u32,
        };
        out.push(p);
        if radius >= 1 {
            for b in 0..16 {
                out.push(Probe {
                    key: own ^ 1 << b,
                    ..p
                });
            }
        }
    }
    sort_by_key16(out, |p| p.key);
}

/// Sorts `items` by a 16-bit key, stably: a counting sort (two passes over the items and one
/// over the 65,536 counts) for batches large enough that the counts cost less than comparing,
/// a comparison sort for smaller ones. Entries given in document order come out in (key,
/// document) order, as a table holds them.
pub(crate) fn sort_by_key16<T: Copy>(items: &mut Vec<T>, key: impl Fn(&T) -> u32) {
    const KEYS: usize = 1 << 16;
    if items.len() < KEYS / 16 {
        items.sort_by_key(|x| key(x));
        return;
    }
    // starts[k]: where the items of key k go.
    let mut starts = vec![0u32; KEYS];
    for x in items.iter() {
        starts[key(x) as usize] += 1;
    }
    let mut at = 0u32;
    for s in starts.iter_mut() {
        let n = *s;
        *s = at;
        at += n;
    }
    let mut out = items.clone();
    for x in items.iter() {
        let s = &mut starts[key(x) as usize];
        out[*s as usize] = *x;
        *s += 1;
    }
    *items = out;
}

/// The blocks of a table that hold a key some probe asks for.
pub(crate) fn blocks<'a>(
    probes: &'a [Probe],
    blocks: &'a [BlockInfo],
) -> impl Iterator<Item = usize> + 'a {
    blocks.iter().enumerate().filter_map(|(i, b)| {
        let p = probes.partition_point(|p| p.key < b.first);
        (p < probes.len() && probes[p].key <= b.last).then_some(i)
    })
}

/// Calls `on(slot, doc, distance)` for every pair of a probe and an entry of table `t` with
/// the same key, the entry's document earlier than the probe's, within distance `k`.
/// `entries` are in (key, document) order, `probes` in key order.
pub(crate) fn join(
    probes: &[Probe],
    entries: &[Entry],
    t: usize,
    k: u32,
    on: &mut impl FnMut(u32, u64, u32),
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the processor has the popcnt instruction (checked just above), the only
        // feature the function is compiled with beyond the target's.
        return unsafe { join_popcnt(probes, entries, t, k, on) };
    }
    join_portable(probes, entries, t, k, on)
}

/// [`join`] compiled with the popcnt instruction: a distance is one instruction instead of
/// a dozen (the portable `count_ones` of x86_64's baseline).
///
/// # Safety
///
/// The processor must have the popcnt instruction.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn join_popcnt(
    probes: &[Probe],
    entries: &[Entry],
    t: usize,
    k: u32,
    on: &mut impl FnMut(u32, u64, u32),
) {
    join_portable(probes, entries, t, k, on)
}

/// [`join`] for any processor.
#[inline(always)]
fn join_portable(
    probes: &[Probe],
    entries: &[Entry],
    t: usize,
    k: u32,
    on: &mut impl FnMut(u32, u64, u32),
) {
    let mut p = 0;
    for e in entries {
        let ke = key(e.fp, t);
        while p < probes.len() && probes[p].key < ke {
            p += 1;
        }
        if p == probes.len() {
            return;
        }
        for q in &probes[p..] {
            if q.key != ke {
                break;
            }
            let d = (q.fp ^ e.fp).count_ones();
            if d <= k && e.doc < q.doc {
                on(q.slot, e.doc, d);
            }
        }
    }
}

/// Calls `hit(slot, before, at, distance)` for every pair of a probe (`slot` its query,
/// `before` its document) and an entry of a block of table `t` (`at` its place in the block)
/// with the same key within distance `k`: the block's entries as runs of one key, `runs`
/// (key, entries) in key order, and their fingerprints less their keys, `rests` ([`rest_at`]:
/// an entry is as far from a probe as its rest from the probe's, plus the bits in which the
/// probe's own key differs from the key probed); `probes` in key order. A run no probe asks
/// for is passed over whole.
pub(crate) fn join_runs(
    probes: &[Probe],
    t: usize,
    runs: &[(u32, u32)],
    rests: &[u8],
    k: u32,
    hit: &mut impl FnMut(u32, u64, u32, u32),
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the processor has the popcnt instruction (checked just above), the only
        // feature the function is compiled with beyond the target's.
        return unsafe { join_runs_popcnt(probes, t, runs, rests, k, hit) };
    }
    join_runs_portable(probes, t, runs, rests, k, hit)
}

/// [`join_runs`] compiled with the popcnt instruction.
///
/// # Safety
///
/// The processor must have the popcnt instruction.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn join_runs_popcnt(
    probes: &[Probe],
    t: usize,
    runs: &[(u32, u32)],
    rests: &[u8],
    k: u32,
    hit: &mut impl FnMut(u32, u64, u32, u32),
) {
    join_runs_portable(probes, t, runs, rests, k, hit)
}

/// [`join_runs`] for any processor.
#[inline(always)]
fn join_runs_portable(
    probes: &[Probe],
    t: usize,
    runs: &[(u32, u32)],
    rests: &[u8],
    k: u32,
    hit: &mut impl FnMut(u32, u64, u32, u32),
) {
    let mut p = 0;
    let mut at = 0usize;
    for &(run_key, n) in runs {
        while p < probes.len() && probes[p].key < run_key {
            p += 1;
        }
        if p == probes.len() {
            return;
        }
        for q in probes[p..].iter().take_while(|q| q.key == run_key) {
            // A probe of a key next to the query's own (k ≥ 4) differs from its entries in
            // the key's bits too.
            let keys = (key(q.fp, t) ^ run_key).count_ones();
            let r = rest(q.fp, t);
            for i in at..at + n as usize {
                let d = keys + (r ^ rest_at(rests, i)).count_ones();
                if d <= k {
                    hit(q.slot, q.doc, i as u32, d);
                }
            }
        }
        at += n as usize;
    }
}
