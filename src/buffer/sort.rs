//! Sorting a buffer of S by signature: a radix sort in place.
//!
//! Signatures are uniform (a hash with a random seed), so a radix sort needs no comparisons
//! for most of the work: a pass moves each slot into the bucket of its top byte, in place (an
//! American flag sort: every slot is moved once, and the slot about to be overwritten next in
//! a bucket is prefetched, which halves the pass), and so on by the next byte for any bucket
//! still too large for the scratch buffer; then each bucket goes through that buffer in a
//! counting sort by its next bits (at most 12: about two slots per bucket), and the few slots
//! left in each of those buckets are sorted by insertion (`bench/examples/sort.rs` compares it with
//! the standard library's sort: `docs/performance.md`).
//!
//! Skewed signatures cannot make it slow or big: a counting-sort bucket too large for insertion is
//! handed to the standard library's sort, as is a bucket still too large once the bytes run
//! out, so the worst case stays O(n log n) and the scratch buffer stays small.

use super::Slot;

/// Buffers shorter than this are sorted on one thread.
const PARALLEL_MIN: usize = 1 << 16;
/// Buffers shorter than this are left to the standard library's sort.
const RADIX_MIN: usize = 512;
/// The largest bucket sorted through the scratch buffer (384 KiB of slots); a larger one is
/// partitioned by its next byte first.
const SCRATCH_MAX: usize = 32 << 10;
/// The most bits a counting sort through the scratch buffer sorts by.
const KEY_BITS: u32 = 12;
/// The largest bucket of a counting sort sorted by insertion.
const INSERTION_MAX: usize = 32;
/// How far ahead in its bucket the flag pass prefetches the slot it will overwrite.
const PREFETCH_AHEAD: usize = 24;

/// Sorts `s` by signature (not stable: the order of equal signatures is unspecified).
pub fn sort_by_sig(s: &mut [Slot]) {
    if s.len() < RADIX_MIN {
        s.sort_unstable_by_key(|p| p.sig);
        return;
    }
    // A buffer sorted while the pushing thread waited (`Sieve::sort_while_waiting`).
    if s.is_sorted_by_key(|p| p.sig) {
        return;
    }
    let mut scratch = Vec::new();
    let mut counts = vec![0u32; (1 << KEY_BITS) + 1];
    sort_below(s, 64, &mut scratch, &mut counts);
}

/// Sorts `s` by signature as [`sort_by_sig`] does, with a second thread sorting half of the
/// top byte's buckets when `s` is large: for recovery, which has the machine to itself.
pub fn sort_by_sig_on_two_threads(s: &mut [Slot]) {
    if s.len() < PARALLEL_MIN || s.is_sorted_by_key(|p| p.sig) {
        return sort_by_sig(s);
    }
    let ends = partition_by_byte(s, 56);
    // Split at the bucket end nearest the middle.
    let half = ends
        .iter()
        .copied()
        .min_by_key(|&e| e.abs_diff(s.len() / 2))
        .unwrap_or(0);
    let (low, high) = s.split_at_mut(half);
    let (low_ends, high_ends) = ends.split_at(ends.partition_point(|&e| e <= half));
    // The high half, for the second thread; left here if it cannot be started.
    let high = std::sync::Mutex::new(Some(high));
    let take = || high.lock().unwrap_or_else(|e| e.into_inner()).take();
    std::thread::scope(|scope| {
        let other = std::thread::Builder::new()
            .name("crivello-sort".into())
            .spawn_scoped(scope, || {
                if let Some(high) = take() {
                    sort_buckets(high, high_ends, half);
                }
            });
        sort_buckets(low, low_ends, 0);
        if let Ok(thread) = other {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    if let Some(high) = take() {
        sort_buckets(high, high_ends, half);
    }
}

/// Sorts each bucket of `s` by the rest of its bits; `ends` are the buckets' ends in the
/// slice that `s` starts at `base` of.
fn sort_buckets(s: &mut [Slot], ends: &[usize], base: usize) {
    let mut scratch = Vec::new();
    let mut counts = vec![0u32; (1 << KEY_BITS) + 1];
    let mut start = 0;
    for &end in ends {
        let end = end - base;
        sort_below(&mut s[start..end], 56, &mut scratch, &mut counts);
        start = end;
    }
}

/// Sorts `s`, whose signatures agree above their lowest `bits` bits.
fn sort_below(s: &mut [Slot], bits: u32, scratch: &mut Vec<Slot>, counts: &mut [u32]) {
    if s.len() <= INSERTION_MAX {
        insertion_sort(s);
    } else if s.len() <= SCRATCH_MAX && bits >= KEY_BITS {
        // About two slots per bucket of the counting sort.
        let key = (s.len() / 2).ilog2().min(KEY_BITS);
        sort_by_bits(s, (bits - key, key), scratch, counts);
    } else if bits >= 8 {
        let shift = bits - 8;
        let mut start = 0;
        for end in partition_by_byte(s, shift) {
            sort_below(&mut s[start..end], shift, scratch, counts);
            start = end;
        }
    } else {
        s.sort_unstable_by_key(|p| p.sig);
    }
}

/// Moves every slot into the bucket of its byte at `shift`, in place; returns each bucket's
/// end.
fn partition_by_byte(s: &mut [Slot], shift: u32) -> [usize; 256] {
    let byte = |p: &Slot| ((p.sig >> shift) & 0xff) as usize;
    let mut ends = [0usize; 256];
    for p in s.iter() {
        ends[byte(p)] += 1;
    }
    let mut heads = [0usize; 256];
    let mut total = 0;
    for (head, end) in heads.iter_mut().zip(ends.iter_mut()) {
        *head = total;
        total += *end;
        *end = total;
    }
    for b in 0..256 {
        while heads[b] < ends[b] {
            // Carry the slot at bucket b's head to its bucket, and the slot found there to
            // its own, until one belongs to bucket b.
            let mut carried = s[heads[b]];
            loop {
                let d = byte(&carried);
                if d == b {
                    break;
                }
                let h = heads[d];
                std::mem::swap(&mut carried, &mut s[h]);
                heads[d] = h + 1;
                if let Some(ahead) = s.get(h + PREFETCH_AHEAD) {
                    crate::hint::prefetch(ahead);
                }
            }
            s[heads[b]] = carried;
            heads[b] += 1;
        }
    }
    ends
}

/// A counting sort of `s` by its `bits` bits at `shift` through `scratch`, then each of
/// those buckets on its own.
fn sort_by_bits(
    s: &mut [Slot],
    (shift, bits): (u32, u32),
    scratch: &mut Vec<Slot>,
    counts: &mut [u32],
) {
    let buckets = 1usize << bits;
    let mask = buckets as u64 - 1;
    let key = |p: &Slot| ((p.sig >> shift) & mask) as usize;
    let counts = &mut counts[..=buckets];
    counts.fill(0);
    for p in s.iter() {
        counts[key(p) + 1] += 1;
    }
    for b in 0..buckets {
        counts[b + 1] += counts[b];
    }
    scratch.clear();
    scratch.resize(s.len(), Slot { sig: 0, idx: 0 });
    for p in s.iter() {
        let b = key(p);
        scratch[counts[b] as usize] = *p;
        counts[b] += 1;
    }
    s.copy_from_slice(scratch);
    // Each count is now its bucket's end.
    let mut start = 0;
    for &end in &counts[..buckets] {
        let bucket = &mut s[start..end as usize];
        if bucket.len() > INSERTION_MAX {
            bucket.sort_unstable_by_key(|p| p.sig);
        } else {
            insertion_sort(bucket);
        }
        start = end as usize;
    }
}

fn insertion_sort(s: &mut [Slot]) {
    for i in 1..s.len() {
        let v = s[i];
        let mut j = i;
        while j > 0 && s[j - 1].sig > v.sig {
            s[j] = s[j - 1];
            j -= 1;
        }
        s[j] = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(mut s: Vec<Slot>) -> Vec<u64> {
        sort_by_sig(&mut s);
        s.iter().map(|p| p.sig).collect()
    }

    fn slots(sigs: impl Iterator<Item = u64>) -> Vec<Slot> {
        sigs.enumerate()
            .map(|(i, sig)| Slot { sig, idx: i as u32 })
            .collect()
    }

    fn xorshift(mut x: u64) -> impl Iterator<Item = u64> {
        std::iter::from_fn(move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Some(x)
        })
    }

    #[test]
    fn every_shape_of_signatures_comes_out_sorted_with_its_slots() {
        const TOP: u64 = 0xff << 56;
        let uniform: Vec<u64> = xorshift(7).take(300_000).collect();
        let shapes: Vec<(&str, Vec<u64>)> = vec![
            ("uniform", uniform.clone()),
            // One top byte: a bucket larger than the scratch buffer.
            ("one top byte", uniform.iter().map(|x| x >> 8).collect()),
            // Top 20 bits equal: one bucket, partitioned byte by byte.
            (
                "top 20 bits equal",
                uniform.iter().map(|x| x >> 20).collect(),
            ),
            // Top bytes spread, next bits equal: counting-sort buckets too large for insertion.
            (
                "next 12 bits equal",
                uniform.iter().map(|x| (x & TOP) | (x >> 20)).collect(),
            ),
            // Top bytes spread, few values each: many repeats in each counting-sort bucket.
            (
                "repeats",
                uniform.iter().map(|x| (x & TOP) | (x % 5)).collect(),
            ),
            ("few values", uniform.iter().map(|x| x % 5).collect()),
            ("sorted", (0..100_000u64).map(|i| i << 40).collect()),
            ("reversed", (0..100_000u64).rev().map(|i| i << 40).collect()),
            ("small", uniform[..RADIX_MIN + 1].to_vec()),
        ];
        type Sort = fn(&mut [Slot]);
        let sorts: [(&str, Sort); 2] = [
            ("one thread", sort_by_sig),
            ("two threads", sort_by_sig_on_two_threads),
        ];
        for (name, sigs) in shapes {
            let s = slots(sigs.iter().copied());
            let mut want: Vec<(u64, u32)> = s.iter().map(|p| (p.sig, p.idx)).collect();
            want.sort_unstable();
            for (threads, sort) in sorts {
                let mut got = s.clone();
                sort(&mut got);
                let mut pairs: Vec<(u64, u32)> = got.iter().map(|p| (p.sig, p.idx)).collect();
                assert!(
                    pairs.windows(2).all(|w| w[0].0 <= w[1].0),
                    "{name}, {threads}: not sorted"
                );
                // The same slots: no slot lost or doubled.
                pairs.sort_unstable();
                assert!(pairs == want, "{name}, {threads}: other slots");
            }
        }
        assert_eq!(sorted(slots([3, 1, 2].into_iter())), [1, 2, 3]);
    }
}
