//! Fingerprints for the near-duplicate store's tests: random ones with neighbours planted at
//! known distances, and the brute-force answer they are checked against.

use crate::neardup::distance;

/// A fingerprint `d` bits away from `fp`, the bits chosen by `seed`.
pub fn flip(fp: u64, d: u32, mut seed: u64) -> u64 {
    let mut out = fp;
    let mut flipped = 0;
    while flipped < d {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let bit = 1u64 << (seed >> 58);
        if (out ^ fp) & bit == 0 {
            out ^= bit;
            flipped += 1;
        }
    }
    out
}

/// The brute-force answer: every earlier fingerprint within `k`, nearest then earliest.
pub fn brute(stored: &[u64], fp: u64, k: u32) -> Vec<(u64, u32)> {
    let mut v: Vec<(u32, u64)> = stored
        .iter()
        .enumerate()
        .map(|(i, &s)| (distance(s, fp), i as u64))
        .filter(|&(d, _)| d <= k)
        .collect();
    v.sort_unstable();
    v.into_iter().map(|(d, i)| (i, d)).collect()
}

/// Fingerprints: random ones, and neighbours planted at distances 0 ..= k + 1 of earlier ones.
pub fn fingerprints(seed: u64, n: usize, k: u32) -> Vec<u64> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut out: Vec<u64> = Vec::with_capacity(n);
    while out.len() < n {
        let r = next();
        if out.is_empty() || r % 3 == 0 {
            out.push(next());
        } else {
            let base = out[(r as usize >> 8) % out.len()];
            out.push(flip(base, (r >> 40) as u32 % (k + 2), next()));
        }
    }
    out
}
