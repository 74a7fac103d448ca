//! bloom: a Bloom filter of 10 bits per expected distinct URL (sized for a fifth of the
//! pushes), 7 probes by Kirsch–Mitzenmacher double hashing over one 128-bit xxh3. It never
//! emits a URL twice, but it wrongly drops new URLs that look seen (false positives).

use std::time::Instant;

use xxhash_rust::xxh3::xxh3_128;

use super::PeerArgs;
use crate::record::{hex, Record, Result};
use crate::stream::digest_step;

/// Bits per expected distinct URL.
pub const BITS_PER_URL: u64 = 10;
/// Probes per URL.
pub const PROBES: u64 = 7;

/// A Bloom filter.
#[derive(Debug, Clone)]
pub struct Bloom {
    words: Vec<u64>,
    bits: u64,
}

impl Bloom {
    /// A filter of `bits` bits (rounded up to a multiple of 64).
    pub fn new(bits: u64) -> Bloom {
        let words = bits.div_ceil(64).max(1);
        Bloom {
            words: vec![0; words as usize],
            bits: words * 64,
        }
    }

    /// Adds a URL; returns whether it was new (some probed bit was clear).
    pub fn insert(&mut self, url: &[u8]) -> bool {
        let h = xxh3_128(url);
        let h1 = h as u64;
        let h2 = (h >> 64) as u64 | 1;
        let mut new = false;
        for i in 0..PROBES {
            let x = h1.wrapping_add(i.wrapping_mul(h2));
            // Lemire's multiply-shift maps x to 0..bits without a division.
            let bit = ((u128::from(x) * u128::from(self.bits)) >> 64) as u64;
            let (w, mask) = ((bit / 64) as usize, 1u64 << (bit % 64));
            if self.words[w] & mask == 0 {
                self.words[w] |= mask;
                new = true;
            }
        }
        new
    }

    /// The size in bytes.
    pub fn bytes(&self) -> u64 {
        self.bits / 8
    }
}

/// Runs the filter on the stream.
pub fn run(args: &PeerArgs) -> Result<Record> {
    let expected = (args.pushes / 5).max(1);
    let mut bloom = Bloom::new(expected * BITS_PER_URL);
    let mut feed = args.feed()?;
    let (mut emitted, mut digest) = (0u64, 0u64);
    let start = Instant::now();
    for i in 0..args.pushes {
        let buf = feed.next_url();
        if bloom.insert(buf) {
            emitted += 1;
            digest = digest_step(digest, buf);
        }
        super::progress("bloom", i, args.pushes, start);
    }
    let mut r = args.record("bloom", &feed, start, emitted);
    r.digest = hex(digest);
    r.notes.push(format!(
        "{:.1} MiB filter ({BITS_PER_URL} bits x {expected} expected URLs, k = {PROBES}); in RAM only",
        bloom.bytes() as f64 / (1 << 20) as f64
    ));
    Ok(r)
}
