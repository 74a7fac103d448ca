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

/// Writes bits LSB-first into 64-bit words.
#[derive(Default)]
pub struct BitWriter {
    words: Vec<u64>,
    bits: u64,
}

impl BitWriter {
    /// An empty writer.
    pub fn new() -> BitWriter {
        BitWriter::default()
    }

    fn ensure(&mut self, bits: u64) {
        let words = bits.div_ceil(64) as usize;
        if self.words.len() < words {
            self.words.resize(words, 0);
        }
    }

    /// Writes the low `k` bits of `v` (`k <= 63`).
    fn write_bits(&mut self, v: u64, k: u32) {
        if k == 0 {
            return;
        }
        let v = v & ((1u64 << k) - 1);
        self.ensure(self.bits + k as u64);
        let w = (self.bits / 64) as usize;
        let b = (self.bits % 64) as u32;
        self.words[w] |= v << b;
        if b + k > 64 {
            self.words[w + 1] |= v >> (64 - b);
        }
        self.bits += k as u64;
    }

    /// Writes `gap` with Rice parameter `k`.
    pub fn write_rice(&mut self, gap: u64, k: u32) {
        let q = gap >> k;
        self.bits += q;
        self.ensure(self.bits + 1);
        let w = (self.bits / 64) as usize;
        self.words[w] |= 1u64 << (self.bits % 64);
        self.bits += 1;
        self.write_bits(gap, k);
    }

    /// The words written, as little-endian bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.words.len() * 8);
        for w in &self.words[..self.bits.div_ceil(64) as usize] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
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
    #[inline]
    pub fn read_rice(&mut self, k: u32) -> Option<u64> {
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
