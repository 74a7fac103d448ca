//! The approximate `uniq`: a Bloom filter of fixed size and nothing on disk (seed 002; the
//! lecture notes §2.2), for streams that never end or disks that cannot hold a temporary
//! store. A line is printed when the filter has not seen it; a new line whose bits all happen
//! to be set already is dropped: with probability about `P` once `N` distinct lines went in,
//! more after. Exact `uniq` ([`super::Uniq`]) loses nothing.
//!
//! Each line is hashed once, to 128 bits with xxh3; its `k` bit positions are derived from
//! the two halves (Kirsch and Mitzenmacher, "Less hashing, same performance", 2006). Two
//! layouts, with their own false-positive rates (see `docs/design.md`, "The approximate
//! `uniq`"):
//!
//! - [`Layout::Standard`]: the `k` positions anywhere in the `m` bits: `g_i = h1 + i·h2`
//!   (mod 2^64, `h2` odd), scaled to `m` by a multiply-high. Rate after `n` lines:
//!   `(1 − e^(−kn/m))^k`. Up to `k` cache misses per line.
//! - [`Layout::Blocked`]: the `k` positions inside one 512-bit block (a cache line), chosen by
//!   `h1`; the positions come from `h2` remixed by a multiplication per bit. One cache miss
//!   per line; a higher rate at the same size (blocks are unevenly loaded), which the sizing
//!   accounts for: `Σ_j Poisson(j; n/B) · (1 − (1 − 1/512)^(kj))^k` over `B` blocks.
//!
//! Both keep `m` bits, rounded down to a whole number of 64-bit words (blocks).

use xxhash_rust::xxh3::xxh3_128;

/// Bits of a block of [`Layout::Blocked`]: a 64-byte cache line.
const BLOCK_BITS: u64 = 512;
/// The largest number of hash functions.
pub const MAX_K: u32 = 24;

/// Where a line's bits go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Anywhere in the filter.
    Standard,
    /// Inside one cache line.
    Blocked,
}

/// The size of a filter, its number of hash functions, and the rate they give.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sizing {
    /// The layout.
    pub layout: Layout,
    /// Bits of the filter (a multiple of 512).
    pub bits: u64,
    /// Hash functions (bits set per line).
    pub k: u32,
    /// The number of distinct lines the rate is computed for.
    pub expected: u64,
    /// The probability that a new line is dropped once `expected` distinct lines went in.
    pub fp_rate: f64,
}

impl Sizing {
    /// A filter of `memory` bytes for `expected` distinct lines: the `k` that gives the lowest
    /// rate there.
    pub fn for_memory_and_expected(layout: Layout, memory: usize, expected: u64) -> Sizing {
        let bits = bits_of(memory);
        let expected = expected.max(1);
        let k = best_k(layout, bits, expected);
        Sizing {
            layout,
            bits,
            k,
            expected,
            fp_rate: rate(layout, bits, k, expected as f64),
        }
    }

    /// A filter of `memory` bytes for the rate `p`: the most distinct lines it holds at
    /// that rate (with the best `k` for them).
    pub fn for_memory_and_rate(layout: Layout, memory: usize, p: f64) -> Sizing {
        let bits = bits_of(memory);
        let fits = |n: u64| rate(layout, bits, best_k(layout, bits, n), n as f64) <= p;
        // The largest n that fits: bisection between 1 and 64 times the bits (with k = 1 the
        // rate after n lines is 1 - e^(-n/bits): a rate above 1 - 1/e holds more lines than
        // bits, and 64 times the bits is a rate of 1 - e^-64).
        let (mut lo, mut hi) = (0u64, bits.saturating_mul(64));
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Sizing::for_memory_and_expected(layout, (bits / 8) as usize, lo.max(1))
    }

    /// The smallest filter that keeps the rate at most `p` after `expected` distinct lines.
    pub fn for_expected_and_rate(layout: Layout, expected: u64, p: f64) -> Sizing {
        let expected = expected.max(1);
        let fits = |bits: u64| {
            rate(
                layout,
                bits,
                best_k(layout, bits, expected),
                expected as f64,
            ) <= p
        };
        // Doubling from the standard layout's size (the blocked one needs more), then
        // bisection on whole blocks.
        let standard = -(expected as f64) * p.ln() / std::f64::consts::LN_2.powi(2);
        // (At most 2^62 bits, where the doubling stops: a product past 2^64 wrapped, to 0 at
        // worst, and the doubling of 0 never ended.)
        let most = (1u64 << 62) / BLOCK_BITS;
        let mut hi = ((standard / BLOCK_BITS as f64) as u64).clamp(1, most) * BLOCK_BITS;
        while !fits(hi) && hi < (1 << 62) {
            hi *= 2;
        }
        let (mut lo, mut hi) = (hi / 2 / BLOCK_BITS, hi / BLOCK_BITS);
        while lo + 1 < hi {
            let mid = (lo + hi) / 2;
            if fits(mid * BLOCK_BITS) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        let bits = hi * BLOCK_BITS;
        Sizing::for_memory_and_expected(layout, (bits / 8) as usize, expected)
    }

    /// The probability that a new line is dropped after `n` distinct lines went in.
    pub fn rate_after(&self, n: u64) -> f64 {
        rate(self.layout, self.bits, self.k, n as f64)
    }

    /// Bytes of the filter.
    pub fn bytes(&self) -> u64 {
        self.bits / 8
    }
}

/// `memory` bytes as bits, rounded down to whole blocks (at least one). From 2^61 bytes on
/// the bits do not fit 64: they saturate (a filter that large cannot be allocated, and says
/// so), where a wrapped product made a filter of a few bytes.
fn bits_of(memory: usize) -> u64 {
    ((memory as u64).saturating_mul(8) / BLOCK_BITS).max(1) * BLOCK_BITS
}

/// The `k` in `1..=MAX_K` with the lowest rate after `n` lines.
fn best_k(layout: Layout, bits: u64, n: u64) -> u32 {
    (1..=MAX_K)
        .min_by(|&a, &b| {
            rate(layout, bits, a, n as f64).total_cmp(&rate(layout, bits, b, n as f64))
        })
        .unwrap_or(1)
}

/// The false-positive rate of a filter of `bits` bits and `k` functions holding `n` lines.
fn rate(layout: Layout, bits: u64, k: u32, n: f64) -> f64 {
    let (m, k) = (bits as f64, f64::from(k));
    match layout {
        Layout::Standard => (1.0 - (-k * n / m).exp()).powf(k),
        Layout::Blocked => {
            // The lines per block are Poisson(n / blocks); a block of j lines has a share
            // 1 - (1 - 1/512)^(kj) of its bits set. The sum runs over the Poisson's bulk,
            // from its first term computed in logarithms (no underflow at any load).
            let lambda = n / (m / BLOCK_BITS as f64);
            if lambda == 0.0 {
                return 0.0;
            }
            if k * lambda > 8.0 * BLOCK_BITS as f64 {
                // Blocks overfull (a share e^-8 of their bits unset): the rate is within
                // 1e-3 of 1, as the standard formula says, and far from any use.
                return (1.0 - (-k * n / m).exp()).powf(k);
            }
            let q = 1.0 - 1.0 / BLOCK_BITS as f64;
            // Beyond 10 standard deviations the Poisson's tails weigh less than 1e-20.
            let spread = 10.0 * lambda.sqrt() + 20.0;
            let first = (lambda - spread).max(0.0).floor() as u64;
            let last = (lambda + spread).ceil() as u64;
            let mut p_j = (first as f64 * lambda.ln() - lambda - ln_factorial(first)).exp();
            let mut sum = 0.0;
            for j in first..=last {
                if j > first {
                    p_j *= lambda / j as f64;
                }
                sum += p_j * (1.0 - q.powf(k * j as f64)).powf(k);
            }
            sum.min(1.0)
        }
    }
}

/// `ln(j!)`: summed below 64, Stirling's series above (error below 1e-12 there).
fn ln_factorial(j: u64) -> f64 {
    if j < 64 {
        return (2..=j).map(|i| (i as f64).ln()).sum();
    }
    let x = j as f64;
    x * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI * x).ln() + 1.0 / (12.0 * x)
        - 1.0 / (360.0 * x * x * x)
}

/// A Bloom filter of fixed size.
#[derive(Debug)]
pub struct Bloom {
    words: Vec<u64>,
    sizing: Sizing,
    /// Lines inserted (seen as new).
    inserted: u64,
}

impl Bloom {
    /// An empty filter of `sizing` (its memory is allocated, zeroed, at once). Aborts the
    /// process if the memory cannot be had, as any allocation: see [`Bloom::try_new`].
    pub fn new(sizing: Sizing) -> Bloom {
        let words = vec![0; (sizing.bits / 64) as usize];
        Bloom::with_words(words, sizing)
    }

    /// An empty filter of `sizing`, or `None` when its memory cannot be allocated (a sizing
    /// larger than the address space or than the system lets the process have).
    pub fn try_new(sizing: Sizing) -> Option<Bloom> {
        let n = usize::try_from(sizing.bits / 64).ok()?;
        if n == 0 {
            return Some(Bloom::with_words(Vec::new(), sizing));
        }
        let layout = std::alloc::Layout::array::<u64>(n).ok()?;
        // SAFETY: `layout` has a non-zero size (n > 0 words). Zeroed memory is a valid array
        // of `n` u64s, and it was allocated by the global allocator with the layout of
        // exactly `n` u64s, as `Vec<u64>` with capacity `n` requires of a buffer it takes
        // over (and frees with that layout).
        let words = unsafe {
            let p = std::alloc::alloc_zeroed(layout).cast::<u64>();
            if p.is_null() {
                return None;
            }
            Vec::from_raw_parts(p, n, n)
        };
        Some(Bloom::with_words(words, sizing))
    }

    fn with_words(words: Vec<u64>, sizing: Sizing) -> Bloom {
        huge_pages(&words);
        Bloom {
            words,
            sizing,
            inserted: 0,
        }
    }

    /// The filter's sizing.
    pub fn sizing(&self) -> &Sizing {
        &self.sizing
    }

    /// Lines inserted so far (those [`Bloom::insert`] found new).
    pub fn inserted(&self) -> u64 {
        self.inserted
    }

    /// Hints the processor to load the bits of the line of hash `h` (for
    /// [`Bloom::insert_hash`] a few lines later): the filter is far larger than the caches,
    /// and each of a line's cache lines is a miss.
    #[inline]
    pub fn prefetch(&self, h: u128) {
        #[cfg(target_arch = "x86_64")]
        {
            let (h1, h2) = halves(h);
            let hint = |word: u64| {
                // SAFETY: `word` is below the number of words (`scale` maps into 0..n, and
                // the callers below pass a bit's or a block's first word), so the pointer
                // lies inside the vector; a prefetch only hints the cache and reads nothing.
                unsafe {
                    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                    _mm_prefetch::<_MM_HINT_T0>(self.words.as_ptr().add(word as usize).cast());
                }
            };
            match self.sizing.layout {
                Layout::Blocked => {
                    hint(scale(h1, self.sizing.bits / BLOCK_BITS) * (BLOCK_BITS / 64))
                }
                Layout::Standard => {
                    let mut g = h1;
                    for _ in 0..self.sizing.k {
                        hint(scale(g, self.sizing.bits) / 64);
                        g = g.wrapping_add(h2);
                    }
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = h;
    }

    /// The hash of a line: one 128-bit xxh3.
    #[inline]
    pub fn hash(line: &[u8]) -> u128 {
        xxh3_128(line)
    }

    /// Inserts the line of hash `h`; returns whether it was new (some bit was unset).
    #[inline]
    pub fn insert_hash(&mut self, h: u128) -> bool {
        let (h1, h2) = halves(h);
        let k = self.sizing.k;
        let mut new = false;
        match self.sizing.layout {
            Layout::Standard => {
                let m = self.sizing.bits;
                let mut g = h1;
                for _ in 0..k {
                    let bit = scale(g, m);
                    let (w, b) = ((bit / 64) as usize, bit % 64);
                    new |= self.words[w] & (1 << b) == 0;
                    self.words[w] |= 1 << b;
                    g = g.wrapping_add(h2);
                }
            }
            Layout::Blocked => {
                let block = scale(h1, self.sizing.bits / BLOCK_BITS);
                let words = &mut self.words[(block * (BLOCK_BITS / 64)) as usize
                    ..((block + 1) * (BLOCK_BITS / 64)) as usize];
                let mut g = h2;
                for _ in 0..k {
                    let bit = g >> (64 - 9);
                    let (w, b) = ((bit / 64) as usize, bit % 64);
                    new |= words[w] & (1 << b) == 0;
                    words[w] |= 1 << b;
                    g = g.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                }
            }
        }
        self.inserted += u64::from(new);
        new
    }

    /// Inserts `line`; returns whether it was new.
    pub fn insert(&mut self, line: &[u8]) -> bool {
        self.insert_hash(Bloom::hash(line))
    }

    /// The share of the filter's bits that are set (reads the whole filter).
    pub fn fill(&self) -> f64 {
        let ones: u64 = self.words.iter().map(|w| u64::from(w.count_ones())).sum();
        ones as f64 / self.sizing.bits as f64
    }

    /// The probability that a new line is dropped now, estimated from the fill: the share
    /// of set bits to the power `k` (exact for the standard layout on average; for the
    /// blocked one the estimate from the lines inserted, [`Sizing::rate_after`], is closer).
    pub fn estimated_fp_rate(&self) -> f64 {
        match self.sizing.layout {
            Layout::Standard => self.fill().powi(self.sizing.k as i32),
            Layout::Blocked => self.sizing.rate_after(self.inserted),
        }
    }
}

/// Asks the system to back the 2 MiB-aligned part of `words` with huge pages (Linux's
/// transparent huge pages, `madvise` mode): a lookup's random access then rarely misses the
/// TLB. A hint: ignored where refused or unsupported.
fn huge_pages(words: &[u64]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = words.as_ptr() as usize;
        let end = start + std::mem::size_of_val(words);
        let (from, to) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
        if from < to {
            // SAFETY: [from, to) lies inside the allocation of `words`, page-aligned; the
            // advice changes how the kernel backs those pages, not their contents (they stay
            // zero or as written), and the result is ignored: this is a hint.
            unsafe {
                libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = words;
}

/// The two 64-bit halves of a 128-bit hash, the second odd (so that `h1 + i·h2` visits
/// distinct values for distinct `i`).
#[inline]
fn halves(h: u128) -> (u64, u64) {
    (h as u64, (h >> 64) as u64 | 1)
}

/// Maps `x` to `0..n` by a multiply-high (Lemire's fast range reduction).
#[inline]
fn scale(x: u64, n: u64) -> u64 {
    ((u128::from(x) * u128::from(n)) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizings_agree_with_each_other_and_with_the_textbook() {
        // 10 bits per line, standard layout: k = 7, rate about 0.82 %.
        let s = Sizing::for_memory_and_expected(Layout::Standard, 1 << 20, (1 << 23) / 10);
        assert_eq!(s.k, 7);
        assert!((s.fp_rate - 0.0082).abs() < 0.0003, "{s:?}");
        for layout in [Layout::Standard, Layout::Blocked] {
            for p in [0.01, 0.001] {
                let by_n = Sizing::for_expected_and_rate(layout, 1_000_000, p);
                assert!(by_n.fp_rate <= p, "{by_n:?}");
                // One block less would not do.
                let smaller = Sizing::for_memory_and_expected(
                    layout,
                    (by_n.bytes() - BLOCK_BITS / 8) as usize,
                    1_000_000,
                );
                assert!(smaller.fp_rate > p, "{smaller:?}");
                let by_m = Sizing::for_memory_and_rate(layout, by_n.bytes() as usize, p);
                assert!(by_m.expected >= 1_000_000 && by_m.fp_rate <= p, "{by_m:?}");
            }
        }
        // The blocked layout needs more bits for the same rate.
        let std = Sizing::for_expected_and_rate(Layout::Standard, 1_000_000, 0.01);
        let blk = Sizing::for_expected_and_rate(Layout::Blocked, 1_000_000, 0.01);
        assert!(blk.bits > std.bits);
        // Above 1 - 1/e, k = 1 holds more lines than bits: bits · ln(1 / (1 - p)) (the
        // search stopped at the bits, and every such rate read as 1 - 1/e).
        let s = Sizing::for_memory_and_rate(Layout::Standard, 1 << 20, 0.9);
        let textbook = (s.bits as f64) * 10f64.ln();
        assert_eq!(s.k, 1);
        assert!((s.expected as f64 / textbook - 1.0).abs() < 0.001, "{s:?}");
        assert!((s.fp_rate - 0.9).abs() < 0.001, "{s:?}");
    }

    #[test]
    fn a_line_inserted_is_never_new_again_and_the_fill_estimates_the_rate() {
        for layout in [Layout::Standard, Layout::Blocked] {
            let s = Sizing::for_memory_and_expected(layout, 64 << 10, 40_000);
            let mut b = Bloom::new(s);
            let lines: Vec<String> = (0..40_000).map(|i| format!("line {i}")).collect();
            let mut dropped = 0;
            for l in &lines {
                dropped += u32::from(!b.insert(l.as_bytes()));
            }
            for l in &lines {
                assert!(!b.insert(l.as_bytes()));
            }
            assert_eq!(b.inserted(), 40_000 - u64::from(dropped));
            let est = b.estimated_fp_rate();
            assert!(
                (est / s.fp_rate - 1.0).abs() < 0.25,
                "{layout:?}: {est} vs {s:?}"
            );
        }
    }
}
