//! The search: every stored fingerprint within distance `k` of a batch of queries, by
//! multi-index hashing over the four tables (Norouzi, Punjani, Fleet, "Fast Search in Hamming
//! Space with Multi-Index Hashing", 2012; Manku, Jain, Das Sarma's permuted tables are the
//! case k = 3). A fingerprint within `k` of a query differs from it in at most `k` bits, so in
//! one of the four 16-bit blocks it differs in at most `k / 4` bits (pigeonhole): probing, in
//! each table, every key within `k / 4` bits of the query's block finds it, and nothing is
//! missed. For k ≤ 3 that is the query's own key; for 4 ≤ k ≤ 7, 17 keys per table.

use super::segment::{key, rest, BlockInfo, REST};
use super::Entry;

/// The largest distance a search takes.
pub const MAX_K: u32 = 7;

/// A query's probe of one key of a table (16 bytes: a batch holds one per query and table
/// for k ≤ 3, 17 above).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Probe {
    /// The key probed.
    pub key: u32,
    /// The query's index in its batch.
    pub slot: u32,
    /// The query's fingerprint.
    pub fp: u64,
}

/// The probes of the queries `fps` in table `t` for distance `k`, sorted by key (stably:
/// in query order within a key), into `out`: counted by key, then each put in its place,
/// with no copy to sort (a comparison sort for fewer than 4,096).
pub(crate) fn probes(t: usize, fps: &[u64], k: u32, out: &mut Vec<Probe>) {
    const KEYS: usize = 1 << 16;
    out.clear();
    let radius = k / 4;
    debug_assert!(radius <= 1);
    // The bits a probe's key differs from the query's own key by: none, or each of 16.
    const FLIPS: [u32; 17] = {
        let mut f = [0u32; 17];
        let mut b = 0;
        while b < 16 {
            f[b + 1] = 1 << b;
            b += 1;
        }
        f
    };
    let flips: &[u32] = if radius >= 1 { &FLIPS } else { &FLIPS[..1] };
    let n = fps.len() * flips.len();
    if n < KEYS / 16 {
        out.reserve(n);
        each_probe(fps, t, flips, |p| out.push(p));
        out.sort_by_key(|p| p.key);
        return;
    }
    // starts[k]: where the probes of key k go.
    let mut starts = vec![0u32; KEYS];
    each_probe(fps, t, flips, |p| starts[p.key as usize] += 1);
    let mut at = 0u32;
    for s in starts.iter_mut() {
        let c = *s;
        *s = at;
        at += c;
    }
    out.resize(
        n,
        Probe {
            key: 0,
            slot: 0,
            fp: 0,
        },
    );
    each_probe(fps, t, flips, |p| {
        let s = &mut starts[p.key as usize];
        out[*s as usize] = p;
        *s += 1;
    });
}

/// Calls `f` with each probe of the queries `fps` in table `t`: the query's own key, flipped
/// by each of `flips`, in query order.
#[inline(always)]
fn each_probe(fps: &[u64], t: usize, flips: &[u32], mut f: impl FnMut(Probe)) {
    for (slot, &fp) in fps.iter().enumerate() {
        let own = key(fp, t);
        for &flip in flips {
            f(Probe {
                key: own ^ flip,
                slot: slot as u32,
                fp,
            });
        }
    }
}

/// The entries of the documents `base + j` of fingerprints `fps[j]` in (key, document)
/// order for table `t`, into `out`: counted by key, then each put in its place, with no copy
/// to sort (a comparison sort, stable, for fewer than 4,096).
pub(crate) fn entries_by_key(t: usize, fps: &[u64], base: u64, out: &mut Vec<Entry>) {
    const KEYS: usize = 1 << 16;
    out.clear();
    let entry = |j: usize| Entry {
        fp: fps[j],
        doc: base + j as u64,
    };
    if fps.len() < KEYS / 16 {
        out.extend((0..fps.len()).map(entry));
        out.sort_by_key(|e| key(e.fp, t));
        return;
    }
    // starts[k]: where the entries of key k go.
    let mut starts = vec![0u32; KEYS];
    for &fp in fps {
        starts[key(fp, t) as usize] += 1;
    }
    let mut at = 0u32;
    for s in starts.iter_mut() {
        let c = *s;
        *s = at;
        at += c;
    }
    out.resize(fps.len(), Entry { fp: 0, doc: 0 });
    for (j, &fp) in fps.iter().enumerate() {
        let s = &mut starts[key(fp, t) as usize];
        out[*s as usize] = entry(j);
        *s += 1;
    }
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
/// the same key, the entry's document earlier than `before(slot)`, within distance `k`.
/// `entries` are in (key, document) order, `probes` in key order.
pub(crate) fn join(
    probes: &[Probe],
    entries: &[Entry],
    t: usize,
    k: u32,
    before: impl Fn(u32) -> u64,
    on: &mut impl FnMut(u32, u64, u32),
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the processor has the popcnt instruction (checked just above), the only
        // feature the function is compiled with beyond the target's.
        return unsafe { join_popcnt(probes, entries, t, k, before, on) };
    }
    join_portable(probes, entries, t, k, before, on)
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
    before: impl Fn(u32) -> u64,
    on: &mut impl FnMut(u32, u64, u32),
) {
    join_portable(probes, entries, t, k, before, on)
}

/// [`join`] for any processor.
#[inline(always)]
fn join_portable(
    probes: &[Probe],
    entries: &[Entry],
    t: usize,
    k: u32,
    before: impl Fn(u32) -> u64,
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
            if d <= k && e.doc < before(q.slot) {
                on(q.slot, e.doc, d);
            }
        }
    }
}

/// Calls `hit(slot, at, distance)` for every pair of a probe (`slot` its query) and an entry of a block of table `t` (`at` its place in the block)
/// with the same key within distance `k`: the block's entries as runs of one key, `runs`
/// (key, entries) in key order, and their fingerprints less their keys, `rests`
/// ([`rest_at`](super::segment::rest_at): an entry is as far from a probe as its rest from
/// the probe's, plus the bits in which the probe's own key differs from the key probed);
/// `probes` in key order. A run no probe asks for is passed over whole.
pub(crate) fn join_runs(
    probes: &[Probe],
    t: usize,
    runs: &[(u32, u32)],
    rests: &[u8],
    k: u32,
    hit: &mut impl FnMut(u32, u32, u32),
) {
    #[cfg(target_arch = "x86_64")]
    if wide::available() {
        // SAFETY: the processor has the instructions (checked just above).
        return unsafe { wide::join_runs(probes, t, runs, rests, k, hit) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the processor has the popcnt instruction (checked just above), the only
        // feature the function is compiled with beyond the target's.
        return unsafe { join_runs_popcnt(probes, t, runs, rests, k, hit) };
    }
    join_runs_portable(probes, t, runs, rests, k, hit)
}

/// [`join_runs`] with AVX-512: a run's entries sixteen to a vector.
#[cfg(target_arch = "x86_64")]
mod wide {
    use std::arch::x86_64::*;

    use super::{each_run_of_probes, key, rest, Probe, REST};

    /// Whether this processor has every instruction [`join_runs`] uses.
    pub(super) fn available() -> bool {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vbmi")
            && is_x86_feature_detected!("avx512vpopcntdq")
    }

    /// The portable `join_runs_portable`, sixteen entries at a time, in two steps: a filter
    /// on the top 32 bits of each entry's 48-bit rest, sixteen to a vector, then the whole
    /// rest of each entry the filter lets through. Two masked loads of up to 96 bytes of a
    /// run's rests (nothing past the run's last entry is read) and one byte permutation of
    /// both put entry `j`'s top four bytes in lane `j`; then for each probe an exclusive or
    /// with its rest's top 32 bits, a population count and a comparison per lane. An entry
    /// within `k` of a probe is within `k` on any of its bits, so the filter lets every
    /// such entry through (and, of random ones, about 1 in 780,000 at `k = 3` that are
    /// not). The probes of a run go four at a time, so that the loads and the permutation
    /// serve four probes; the last `probes mod 4` one at a time. The same pairs as the
    /// portable loop: within each group of sixteen entries, the four probes' hits in the
    /// probes' order, lanes in order.
    ///
    /// # Safety
    ///
    /// The processor must have the instructions [`available`] checks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vpopcntdq")]
    pub(super) unsafe fn join_runs(
        probes: &[Probe],
        t: usize,
        runs: &[(u32, u32)],
        rests: &[u8],
        k: u32,
        hit: &mut impl FnMut(u32, u32, u32),
    ) {
        const _: () = assert!(REST == 6);
        // Byte `b` of lane `j`: byte `b + 2` of entry `j`, of the 128 bytes of both loads.
        let spread: [u8; 64] = std::array::from_fn(|at| {
            let (j, b) = (at / 4, at % 4);
            (j * REST + 2 + b) as u8
        });
        // SAFETY: reads the 64 bytes of the array.
        let spread = unsafe { _mm512_loadu_si512(spread.as_ptr().cast()) };
        // The top 32 bits of entries `i .. i + m` of `run` (m = min(n − i, 16)) in lanes,
        // and the lanes' mask.
        let lanes = |run: &[u8], i: usize, n: usize| {
            let m = (n - i).min(16);
            let bytes = m * REST;
            debug_assert!((i + m) * REST <= run.len());
            let low = if bytes >= 64 {
                u64::MAX
            } else {
                (1u64 << bytes) - 1
            };
            let high = (1u64 << bytes.saturating_sub(64)) - 1;
            let from = run.as_ptr().wrapping_add(i * REST);
            // SAFETY: the masked loads read the `bytes` bytes of entries `i .. i + m`, within
            // `run` (i + m <= n, and `run` holds n entries): the first 64 (or fewer) from
            // `from`, the rest from `from + 64`; the others are not read. `from + 64` is
            // within `run` or one past it when a byte is read from it, and otherwise not
            // dereferenced.
            let (a, b) = unsafe {
                (
                    _mm512_maskz_loadu_epi8(low, from.cast()),
                    _mm512_maskz_loadu_epi8(high, from.wrapping_add(64).cast()),
                )
            };
            (
                _mm512_permutex2var_epi8(a, spread, b),
                ((1u32 << m) - 1) as u16,
            )
        };
        each_run_of_probes(probes, runs, |group, run_key, at, n| {
            let run = &rests[at * REST..(at + n) * REST];
            let mut quads = group.chunks_exact(4);
            for quad in &mut quads {
                // Each probe's rest's top 32 bits, its room (and whether it has any:
                // `live`), and the bits its own key differs from the run's.
                let mut r = [_mm512_setzero_si512(); 4];
                let mut room = [_mm512_setzero_si512(); 4];
                let mut keys = [0u32; 4];
                let mut live = [0u16; 4];
                for (j, q) in quad.iter().enumerate() {
                    keys[j] = (key(q.fp, t) ^ run_key).count_ones();
                    if let Some(left) = k.checked_sub(keys[j]) {
                        live[j] = 0xFFFF;
                        room[j] = _mm512_set1_epi32(left as i32);
                    }
                    r[j] = _mm512_set1_epi32((rest(q.fp, t) >> 16) as u32 as i32);
                }
                let mut i = 0;
                while i < n {
                    let (v, valid) = lanes(run, i, n);
                    let d0 = _mm512_popcnt_epi32(_mm512_xor_si512(v, r[0]));
                    let d1 = _mm512_popcnt_epi32(_mm512_xor_si512(v, r[1]));
                    let d2 = _mm512_popcnt_epi32(_mm512_xor_si512(v, r[2]));
                    let d3 = _mm512_popcnt_epi32(_mm512_xor_si512(v, r[3]));
                    let near = [
                        _mm512_cmple_epu32_mask(d0, room[0]) & valid & live[0],
                        _mm512_cmple_epu32_mask(d1, room[1]) & valid & live[1],
                        _mm512_cmple_epu32_mask(d2, room[2]) & valid & live[2],
                        _mm512_cmple_epu32_mask(d3, room[3]) & valid & live[3],
                    ];
                    if (near[0] | near[1] | near[2] | near[3]) != 0 {
                        for j in 0..4 {
                            emit(near[j], run, &quad[j], t, keys[j], k, at, i, hit);
                        }
                    }
                    i += 16;
                }
            }
            for q in quads.remainder() {
                let keys = (key(q.fp, t) ^ run_key).count_ones();
                let Some(left) = k.checked_sub(keys) else {
                    continue;
                };
                let r = _mm512_set1_epi32((rest(q.fp, t) >> 16) as u32 as i32);
                let room = _mm512_set1_epi32(left as i32);
                let mut i = 0;
                while i < n {
                    let (v, valid) = lanes(run, i, n);
                    let d = _mm512_popcnt_epi32(_mm512_xor_si512(v, r));
                    let near = _mm512_cmple_epu32_mask(d, room) & valid;
                    if near != 0 {
                        emit(near, run, q, t, keys, k, at, i, hit);
                    }
                    i += 16;
                }
            }
        });
    }

    /// The hits of probe `q` among the entries `i ..` of `run` (whose first entry is the
    /// block's `at`) that the filter let through, the lanes of `near`, in order: each
    /// whose whole rest is within the room `k − keys` of the probe's, with its distance
    /// (plus the key's bits, `keys`).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn emit(
        mut near: u16,
        run: &[u8],
        q: &Probe,
        t: usize,
        keys: u32,
        k: u32,
        at: usize,
        i: usize,
        hit: &mut impl FnMut(u32, u32, u32),
    ) {
        let r = rest(q.fp, t);
        while near != 0 {
            let j = near.trailing_zeros() as usize;
            near &= near - 1;
            let e = &run[(i + j) * REST..(i + j + 1) * REST];
            let mut b = [0u8; 8];
            b[..REST].copy_from_slice(e);
            let d = keys + (u64::from_le_bytes(b) ^ r).count_ones();
            if d <= k {
                hit(q.slot, (at + i + j) as u32, d);
            }
        }
    }
}

/// The walk both loops of [`join_runs`] share: for each run of a key that probes ask for,
/// those probes (`group`, in their order), the run's key, its first entry and its length:
/// `each(group, key, at, n)`.
#[inline(always)]
fn each_run_of_probes(
    probes: &[Probe],
    runs: &[(u32, u32)],
    mut each: impl FnMut(&[Probe], u32, usize, usize),
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
        let mut end = p;
        while end < probes.len() && probes[end].key == run_key {
            end += 1;
        }
        if end > p {
            each(&probes[p..end], run_key, at, n as usize);
        }
        p = end;
        at += n as usize;
    }
}

/// [`each_run_of_probes`], one probe at a time: each probe whose own key differs from the
/// run's in at most `k` bits (a probe of a key next to the query's own, for k ≥ 4, differs
/// from its entries in the key's bits too), with those bits `keys`, the room left for the
/// rest `k − keys`, and the run's first entry and length: `each(probe, keys, room, at, n)`.
#[inline(always)]
fn each_probe_of_run(
    probes: &[Probe],
    t: usize,
    runs: &[(u32, u32)],
    k: u32,
    mut each: impl FnMut(&Probe, u32, u32, usize, usize),
) {
    each_run_of_probes(probes, runs, |group, run_key, at, n| {
        for q in group {
            let keys = (key(q.fp, t) ^ run_key).count_ones();
            if let Some(room) = k.checked_sub(keys) {
                each(q, keys, room, at, n);
            }
        }
    });
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
    hit: &mut impl FnMut(u32, u32, u32),
) {
    join_runs_portable(probes, t, runs, rests, k, hit)
}

/// [`join_runs`] for any processor. The entries of a run are compared four at a time, each
/// read as one 8-byte load whose top two bytes (the next entry's, or the checksum's) are
/// shifted out, with one branch for the four (almost no entry is within `k`); the last
/// `n mod 4` one at a time. The join's share of a search fell from 22 % to 12 % of the
/// samples (`docs/performance.md`).
#[inline(always)]
fn join_runs_portable(
    probes: &[Probe],
    t: usize,
    runs: &[(u32, u32)],
    rests: &[u8],
    k: u32,
    hit: &mut impl FnMut(u32, u32, u32),
) {
    each_probe_of_run(probes, t, runs, k, |q, keys, room, at, n| {
        // The run's fingerprints and the two bytes after its last, which its 8-byte load
        // reads: the next run's first entry, or, past the block's last entry, its checksum.
        let run = &rests[at * REST..(at + n) * REST + 2];
        let load = |i: usize| {
            debug_assert!(i < n);
            // SAFETY: every call below passes `i < n` (the loops' bounds), so bytes `i * REST .. i * REST + 8` lie within `run`, whose
            // length is `n * REST + 2` (checked by the slicing above); the read is unaligned.
            u64::from_le(unsafe { run.as_ptr().add(i * REST).cast::<u64>().read_unaligned() })
        };
        // The query's rest in the top 48 bits, as each load's rest once shifted up.
        let r = rest(q.fp, t) << 16;
        let d = |i: usize| ((load(i) << 16) ^ r).count_ones();
        let mut i = 0;
        while i + 4 <= n {
            let ds = [d(i), d(i + 1), d(i + 2), d(i + 3)];
            if ds[0].min(ds[1]).min(ds[2].min(ds[3])) <= room {
                for (j, &dj) in ds.iter().enumerate() {
                    if dj <= room {
                        hit(q.slot, (at + i + j) as u32, keys + dj);
                    }
                }
            }
            i += 4;
        }
        for i in i..n {
            let di = d(i);
            if di <= room {
                hit(q.slot, (at + i) as u32, keys + di);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::neardup::segment::{rest_at, unrest};

    /// The probes and the entries of a batch come sorted as a stable sort would leave them
    /// (key, then query order), by the comparison sort of small batches and by the counting
    /// of large ones, one probe per query and table at k ≤ 3 and 17 from k = 4.
    #[test]
    fn probes_and_entries_come_in_key_then_query_order() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in [0usize, 1, 100, 239, 240, 5_000] {
            // Few distinct keys, so that keys repeat and the order within a key shows.
            let fps: Vec<u64> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x & 0x0707_0707_0707_0707 | x >> 60 << 40
                })
                .collect();
            for t in 0..4 {
                for k in [3, 4] {
                    let mut want: Vec<(u32, u32, u64)> = Vec::new();
                    for (slot, &fp) in fps.iter().enumerate() {
                        let own = key(fp, t);
                        want.push((own, slot as u32, fp));
                        if k >= 4 {
                            want.extend((0..16).map(|b| (own ^ 1 << b, slot as u32, fp)));
                        }
                    }
                    want.sort_by_key(|p| p.0);
                    let mut got = Vec::new();
                    probes(t, &fps, k, &mut got);
                    let got: Vec<(u32, u32, u64)> =
                        got.iter().map(|p| (p.key, p.slot, p.fp)).collect();
                    assert_eq!(got, want, "n {n}, table {t}, k {k}");
                }
                let mut want: Vec<Entry> = (fps.iter().enumerate())
                    .map(|(j, &fp)| Entry {
                        fp,
                        doc: 7 + j as u64,
                    })
                    .collect();
                want.sort_by_key(|e| key(e.fp, t));
                let mut got = Vec::new();
                entries_by_key(t, &fps, 7, &mut got);
                assert_eq!(got, want, "n {n}, table {t}");
            }
        }
    }

    /// `join_runs` finds exactly the pairs a scan of every (probe, entry) finds, with their
    /// distances (the portable loop in the scan's order): runs of every length from 1 to 9 (the
    /// four-at-a-time loop and its remainder) and of 15, 16, 17, 31 and 33 (the vector
    /// loop's sixteen entries, across its two loads, and their remainder), 1 to 12 probes per run (the vector loop's four
    /// probes at a time and their remainder), neighbours planted at every distance up to 8
    /// in every place of both loops, every `k` and every table.
    #[test]
    fn join_runs_finds_what_a_scan_finds() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut places = [false; 5];
        // The lanes of the vector loop where hits lay (runs of 15 entries or more), and
        // whether an entry was let through by its filter only to be refused whole.
        let mut lanes = [false; 16];
        let mut through = false;
        for t in 0..4 {
            for k in 0..=MAX_K {
                // Entries: runs of keys 10, 20, ..., each of 1 to 33 fingerprints, some of
                // them near the queries.
                let queries: Vec<u64> = (0..6).map(|_| rnd()).collect();
                let mut fps: Vec<(u32, u64)> = Vec::new();
                for (r, len) in (1..=9).chain(1..=9).chain([15, 16, 17, 31, 33]).enumerate() {
                    let run_key = (r as u32 + 1) * 10;
                    for j in 0..len {
                        let base = if rnd() % 3 != 0 {
                            queries[(r + j) % queries.len()]
                        } else {
                            rnd()
                        };
                        // Flip up to 8 bits of the base, the key's bits among them.
                        let mut fp = base;
                        for _ in 0..(rnd() % 9) {
                            fp ^= 1 << (rnd() % 64);
                        }
                        // A probe's key and the key of its run match, or differ by one bit.
                        let key_bits = u64::from(run_key) << (16 * t);
                        fp = (fp & !(0xFFFFu64 << (16 * t))) | key_bits;
                        fps.push((run_key, fp));
                    }
                }
                let mut runs: Vec<(u32, u32)> = Vec::new();
                let mut rests: Vec<u8> = Vec::new();
                for &(rk, fp) in &fps {
                    match runs.last_mut() {
                        Some((last, n)) if *last == rk => *n += 1,
                        _ => runs.push((rk, 1)),
                    }
                    rests.extend_from_slice(&rest(fp, t).to_le_bytes()[..REST]);
                }
                rests.extend_from_slice(&[0xAB; 4]);
                // Probes whose keys are each run's key, or the key with one bit flipped.
                // From 1 to 12 probes per run: groups of four and every remainder.
                let mut ps: Vec<Probe> = Vec::new();
                let n_of = |ri: usize| runs[ri].1;
                for (ri, &(rk, _)) in runs.iter().enumerate() {
                    // Runs of 15 entries or more: six queries, so that the vector loop
                    // takes its four probes at a time there too.
                    let many = if n_of(ri) >= 15 { 6 } else { 1 + ri % 6 };
                    for (slot, &fp) in queries.iter().enumerate().take(many) {
                        let flips = [0u32, 1 << (slot % 16)];
                        for &flip in &flips[..1 + (ri + slot) % 2] {
                            let qfp =
                                (fp & !(0xFFFFu64 << (16 * t))) | u64::from(rk ^ flip) << (16 * t);
                            ps.push(Probe {
                                key: rk,
                                fp: qfp,
                                slot: slot as u32,
                            });
                        }
                    }
                }
                ps.sort_by_key(|p| p.key);
                let mut found = Vec::new();
                join_runs(&ps, t, &runs, &rests, k, &mut |slot, at, d| {
                    found.push((slot, at, d))
                });
                // The portable loop too, where the processor runs a faster one.
                let mut portable = Vec::new();
                join_runs_portable(&ps, t, &runs, &rests, k, &mut |slot, at, d| {
                    portable.push((slot, at, d))
                });
                let mut scan = Vec::new();
                let mut at = 0usize;
                let mut p = 0;
                for &(rk, n) in &runs {
                    while p < ps.len() && ps[p].key < rk {
                        p += 1;
                    }
                    for q in ps[p..].iter().take_while(|q| q.key == rk) {
                        for i in at..at + n as usize {
                            let fp = unrest(rest_at(&rests, i), rk, t);
                            let d = (fp ^ q.fp).count_ones();
                            if d <= k {
                                scan.push((q.slot, i as u32, d));
                                if n >= 15 {
                                    lanes[(i - at) % 16] = true;
                                }
                            } else if n >= 15 {
                                // Within `k` on the 32 bits the vector loop filters on,
                                // not on the whole: the filter lets it through, and the
                                // whole comparison refuses it.
                                let keys = (key(q.fp, t) ^ rk).count_ones();
                                let top = (rest(fp, t) ^ rest(q.fp, t)) >> 16;
                                through |= keys + top.count_ones() <= k;
                            }
                        }
                    }
                    at += n as usize;
                }
                // The vector loop takes four probes per load: the same pairs, in another
                // order.
                let mut sorted = found.clone();
                sorted.sort_unstable();
                let mut want = scan.clone();
                want.sort_unstable();
                assert_eq!(sorted, want, "table {t}, k {k}");
                assert_eq!(portable, scan, "portable, table {t}, k {k}");
                // Where the hits lay: each of the four places of the four-at-a-time loop
                // (0 to 3), or its remainder (4).
                for &(_, i, _) in &scan {
                    let (mut start, i) = (0usize, i as usize);
                    for &(_, n) in &runs {
                        let n = n as usize;
                        if i < start + n {
                            let pos = i - start;
                            places[if pos < n - n % 4 { pos % 4 } else { 4 }] = true;
                            break;
                        }
                        start += n;
                    }
                }
            }
        }
        assert_eq!(places, [true; 5], "hits in every place of the loops");
        assert_eq!(lanes, [true; 16], "hits in every lane of the vector loop");
        assert!(
            through,
            "an entry let through by the filter and refused whole"
        );
    }
}
