//! Golomb–Rice coding of the gaps between sorted signatures.
//!
//! The gaps between `m` sorted uniform 64-bit hashes are (nearly) geometric with mean
//! `2^64 / m`; a Rice code with parameter `k ≈ log2(mean · ln 2)` codes each gap in about
//! `log2(2^64 / m) + 1.5` bits, close to the information bound (Vigna's lecture notes §4.1 and
//! §4.5; Golomb 1966, Rice 1979). A gap `d` (the difference minus one, since signatures are
//! strictly increasing) is written as `d >> k` zero bits, a one bit, then the low `k` bits of
//! `d`, least significant bit first, in little-endian 64-bit words.

/// Chooses the Rice parameter for `n` gaps summing to `total`.
pub fn parameter(total: u64, n: u64) -> u32 {
    if n == 0 {
        return 0;
    }
    let mean = total as f64 / n as f64;
    let k = (mean * std::f64::consts::LN_2).log2().floor();
    if k.is_nan() || k < 0.0 {
        0
    } else {
        (k as u32).min(63)
    }
}

/// Writes bits LSB-first into 64-bit words, kept in an accumulator until a word is full.
#[derive(Default)]
pub struct BitWriter {
    out: Vec<u8>,
    /// The bits of the word being filled, from bit 0.
    acc: u64,
    /// Bits used in `acc` (always < 64).
    used: u32,
}

impl BitWriter {
    /// An empty writer.
    pub fn new() -> BitWriter {
        BitWriter::default()
    }

    /// Appends the `n` low bits of `v` (`1 <= n <= 64`, `v < 2^n`).
    #[inline]
    fn put(&mut self, v: u64, n: u32) {
        debug_assert!((1..=64).contains(&n) && (n == 64 || v >> n == 0));
        self.acc |= v << self.used;
        let total = self.used + n;
        if total >= 64 {
            self.out.extend_from_slice(&self.acc.to_le_bytes());
            // The bits of `v` that did not fit (none when the word was empty).
            self.acc = v.checked_shr(64 - self.used).unwrap_or(0);
            self.used = total - 64;
        } else {
            self.used = total;
        }
    }

    /// Writes `gap` with Rice parameter `k` (`k <= 63`).
    #[inline]
    pub fn write_rice(&mut self, gap: u64, k: u32) {
        // The quotient in unary: zeros (whole empty words first), then the one bit that
        // `put` writes below the low `k` bits.
        let mut q = gap >> k;
        while u64::from(self.used) + q >= 64 {
            q -= u64::from(64 - self.used);
            self.out.extend_from_slice(&self.acc.to_le_bytes());
            self.acc = 0;
            self.used = 0;
        }
        self.used += q as u32;
        let low = if k == 0 { 0 } else { gap & ((1u64 << k) - 1) };
        self.put(low << 1 | 1, k + 1);
    }

    /// The words written, as little-endian bytes.
    pub fn into_bytes(mut self) -> Vec<u8> {
        if self.used > 0 {
            self.out.extend_from_slice(&self.acc.to_le_bytes());
        }
        self.out
    }
}

/// Reads what a [`BitWriter`] wrote. Every read is bounds-checked: a malformed payload gives
/// `None`, never a panic.
pub struct BitReader<'a> {
    bytes: &'a [u8],
    bits: u64,
    limit: u64,
}

impl<'a> BitReader<'a> {
    /// A reader over `bytes` (a multiple of 8 bytes).
    pub fn new(bytes: &'a [u8]) -> BitReader<'a> {
        BitReader {
            bytes,
            bits: 0,
            limit: bytes.len() as u64 / 8 * 64,
        }
    }

    #[inline]
    fn word(&self, i: usize) -> u64 {
        match self.bytes.get(i * 8..i * 8 + 8) {
            Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
            None => 0,
        }
    }

    /// Reads a Rice-coded gap with parameter `k`.
    ///
    /// Most codes are read from one unaligned 8-byte load at the byte of the current bit:
    /// shifted to that bit it holds 57 bits or more, and a code of `k ≤ 56` with a quotient
    /// `q ≤ 56 − k` (nearly every gap, whose mean is about `2^k`) lies within them, so the
    /// quotient is one count of trailing zeros and the low bits one shift. Other codes, and
    /// the last bytes of the payload, take the word-by-word path, which gives the same result.
    #[inline]
    pub fn read_rice(&mut self, k: u32) -> Option<u64> {
        let byte = (self.bits / 8) as usize;
        if let Some(b) = self.bytes.get(byte..byte + 8) {
            let w = u64::from_le_bytes(b.try_into().expect("8 bytes")) >> (self.bits % 8);
            let z = w.trailing_zeros();
            let len = u64::from(z + 1 + k);
            if z + 1 + k <= 57 && self.bits + len <= self.limit {
                // z + 1 + k <= 57: both shifts below 64, and q << k below 2^56.
                let low = (w >> (z + 1)) & ((1u64 << k) - 1);
                self.bits += len;
                return Some(u64::from(z) << k | low);
            }
        }
        self.read_rice_by_words(k)
    }

    /// [`BitReader::read_rice`] a 64-bit word at a time, for every code.
    fn read_rice_by_words(&mut self, k: u32) -> Option<u64> {
        let mut q: u64 = 0;
        loop {
            if self.bits >= self.limit {
                return None;
            }
            let w = self.word((self.bits / 64) as usize) >> (self.bits % 64);
            if w != 0 {
                let z = w.trailing_zeros() as u64;
                q += z;
                self.bits += z + 1;
                break;
            }
            let skip = 64 - self.bits % 64;
            q += skip;
            self.bits += skip;
        }
        let low = if k == 0 {
            0
        } else {
            if self.bits + k as u64 > self.limit {
                return None;
            }
            let i = (self.bits / 64) as usize;
            let b = (self.bits % 64) as u32;
            let mut v = self.word(i) >> b;
            if b + k > 64 {
                v |= self.word(i + 1) << (64 - b);
            }
            self.bits += k as u64;
            v & ((1u64 << k) - 1)
        };
        q.checked_shl(k)
            .filter(|hi| hi >> k == q)
            .map(|hi| hi | low)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rice_round_trips_every_parameter() {
        for k in 0..64u32 {
            let gaps: Vec<u64> = (0..200u64)
                .map(|i| {
                    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                        & if k >= 61 {
                            u64::MAX >> 1
                        } else {
                            (1u64 << (k + 2)) - 1
                        }
                })
                .collect();
            let mut w = BitWriter::new();
            for &g in &gaps {
                w.write_rice(g, k);
            }
            let bytes = w.into_bytes();
            let mut r = BitReader::new(&bytes);
            for &g in &gaps {
                assert_eq!(r.read_rice(k), Some(g), "k = {k}");
            }
        }
    }

    /// The layout, one bit at a time: `gap >> k` zeros, a one, the low `k` bits LSB first,
    /// packed LSB-first into little-endian words.
    fn reference(gaps: &[u64], k: u32) -> Vec<u8> {
        let mut bits = Vec::new();
        for &g in gaps {
            bits.extend(std::iter::repeat_n(false, (g >> k) as usize));
            bits.push(true);
            bits.extend((0..k).map(|i| g >> i & 1 == 1));
        }
        let mut words = vec![0u64; bits.len().div_ceil(64)];
        for (i, &b) in bits.iter().enumerate() {
            words[i / 64] |= u64::from(b) << (i % 64);
        }
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn the_writer_lays_out_bits_as_documented() {
        for k in [0u32, 1, 5, 31, 62, 63] {
            for len in [0usize, 1, 2, 3, 64, 65, 300] {
                // Quotients up to a few hundred (whole words of zeros), as far as they fit.
                let q_max = if k >= 56 { (1u64 << (64 - k)) - 1 } else { 299 };
                let gaps: Vec<u64> = (0..len as u64)
                    .map(|i| {
                        let low = match k {
                            0 => 0,
                            _ => i.wrapping_mul(0x9E37_79B9_7F4A_7C15) & ((1u64 << k) - 1),
                        };
                        (i * 37 % (q_max + 1)) << k | low
                    })
                    .collect();
                let mut w = BitWriter::new();
                for &g in &gaps {
                    w.write_rice(g, k);
                }
                assert_eq!(w.into_bytes(), reference(&gaps, k), "k = {k}, {len} gaps");
            }
        }
    }

    /// The one-load path against the word-by-word one on random payloads (codes of every
    /// parameter, quotients short and long, payloads cut anywhere): the same values, the same
    /// position after each, and `None` at the same place.
    #[test]
    fn the_one_load_path_reads_what_the_word_path_reads() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for round in 0..3000 {
            let k = (round % 64) as u32;
            // Random words, some sparse in ones (long quotients), cut to a whole number of
            // words, and now and then valid codes of small quotients.
            let words = (next() % 9) as usize;
            let mut bytes: Vec<u8> = (0..words)
                .flat_map(|_| {
                    let w = next();
                    let w = if round % 3 == 0 {
                        w & next() & next()
                    } else {
                        w
                    };
                    w.to_le_bytes()
                })
                .collect();
            if round % 4 == 0 {
                let mut w = BitWriter::new();
                for _ in 0..20 {
                    let q = next() % 4;
                    let low = if k == 0 {
                        0
                    } else {
                        next() & ((1u64 << k) - 1)
                    };
                    if let Some(g) = q.checked_shl(k) {
                        w.write_rice(g | low, k);
                    }
                }
                bytes = w.into_bytes();
            }
            let (mut fast, mut slow) = (BitReader::new(&bytes), BitReader::new(&bytes));
            loop {
                let (a, b) = (fast.read_rice(k), slow.read_rice_by_words(k));
                assert_eq!(a, b, "k = {k}, round {round}");
                assert_eq!(fast.bits, slow.bits, "k = {k}, round {round}");
                if a.is_none() {
                    break;
                }
            }
        }
    }

    #[test]
    fn reading_past_the_end_is_none_not_a_panic() {
        let mut r = BitReader::new(&[0u8; 16]);
        assert_eq!(r.read_rice(5), None);
        let mut r = BitReader::new(&[1u8, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(r.read_rice(63), Some(0));
        assert_eq!(r.read_rice(0), None);
        let mut r = BitReader::new(&[2u8, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(r.read_rice(63), None);
    }
}
