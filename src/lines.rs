//! Newlines found 64 bytes at a time: one compare per 16 bytes gives a mask, and a line's
//! end is its lowest bit. A search started again for each line cost more than the line's
//! bytes where lines are URLs of about 70 bytes (`docs/performance.md`, "Lines found by
//! block").

/// The newlines of 64 bytes: bit i is set when byte i is "\n".
pub fn newlines(bytes: &[u8; 64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        let mut bits = 0u64;
        for (k, part) in bytes.chunks_exact(16).enumerate() {
            // SAFETY: SSE2 is part of every x86_64 processor (the target's baseline), so
            // these instructions exist; the load reads the 16 bytes of `part`, which
            // `_mm_loadu_si128` allows at any alignment.
            let mask = unsafe {
                let v = _mm_loadu_si128(part.as_ptr().cast::<__m128i>());
                _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'\n' as i8)))
            };
            bits |= u64::from(mask as u16) << (16 * k);
        }
        bits
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        newlines_one_by_one(bytes)
    }
}

/// Finds the newlines of a text one after the other from the masks of its blocks of 64 bytes,
/// keeping the block it looked at last.
#[derive(Debug, Clone, Default)]
pub struct Finder {
    /// The newlines of the `block_len` (64 or 0) bytes at `block`, bit i for byte
    /// `block + i`.
    bits: u64,
    block: usize,
    block_len: usize,
}

impl Finder {
    /// The first newline of `text[from..to]` (`to` at most `text`'s length), by its index in
    /// `text`. `text` must be the text of the calls before, or longer by bytes after it,
    /// until [`Finder::forget`].
    pub fn find(&mut self, text: &[u8], from: usize, to: usize) -> Option<usize> {
        let mut at = from;
        while at < to {
            if !(self.block <= at && at < self.block + self.block_len) {
                let Some(bytes) = text.get(at..at + 64) else {
                    break;
                };
                self.bits = newlines(bytes.try_into().expect("64 bytes"));
                (self.block, self.block_len) = (at, 64);
            }
            let after = self.bits & (u64::MAX << (at - self.block));
            if after != 0 {
                let i = self.block + after.trailing_zeros() as usize;
                return (i < to).then_some(i);
            }
            at = self.block + 64;
        }
        let rest = text.get(at..to)?;
        memchr::memchr(b'\n', rest).map(|i| at + i)
    }

    /// Forgets the block it keeps: the text changed.
    pub fn forget(&mut self) {
        *self = Finder::default();
    }
}

/// [`newlines`], a byte at a time: its definition.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn newlines_one_by_one(bytes: &[u8; 64]) -> u64 {
    (0..64).fold(0, |bits, i| bits | u64::from(bytes[i] == b'\n') << i)
}

/// The newlines of `text` block by block: for each block of 64 bytes (the last one shorter,
/// as if followed by bytes that are not newlines), its offset and mask.
pub(crate) fn blocks(text: &[u8]) -> impl Iterator<Item = (usize, u64)> + '_ {
    let whole = text.chunks_exact(64);
    let rest = whole.remainder();
    let last = (!rest.is_empty()).then(|| {
        let mut block = [0u8; 64];
        block[..rest.len()].copy_from_slice(rest);
        (text.len() - rest.len(), newlines(&block))
    });
    whole
        .enumerate()
        .map(|(k, b)| (64 * k, newlines(b.try_into().expect("64 bytes"))))
        .chain(last)
}

/// How `text` splits into lines: the number of newlines, and whether a line is empty (a
/// newline first, or right after another).
pub(crate) fn count(text: &[u8]) -> (usize, bool) {
    let (mut n, mut empty) = (0usize, false);
    // Bit 0 for the byte before the block: set before the first byte, so that a newline
    // there ends an empty line.
    let mut before = 1u64;
    for (_, bits) in blocks(text) {
        n += bits.count_ones() as usize;
        empty |= bits & (bits << 1 | before) != 0;
        before = bits >> 63;
    }
    (n, empty)
}

/// The byte where line `n` of `text` starts (0 for the first), or `text`'s length when it has
/// fewer newlines than `n`.
pub(crate) fn nth_start(text: &[u8], n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let mut left = n;
    for (at, mut bits) in blocks(text) {
        let here = bits.count_ones() as usize;
        if here < left {
            left -= here;
            continue;
        }
        for _ in 1..left {
            bits &= bits - 1;
        }
        return at + bits.trailing_zeros() as usize + 1;
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Texts of many shapes: no newline, only newlines, lines of 0 to 150 bytes, lengths
    /// around the blocks' edges, and the bytes next to '\n' (9, 11, 138).
    fn texts() -> Vec<Vec<u8>> {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state >> 33
        };
        let mut texts = vec![Vec::new(), vec![b'\n'; 200], vec![b'a'; 200]];
        // One newline, or two in a row (an empty line), at and around the blocks' edges.
        for at in [0, 1, 62, 63, 64, 65, 127, 128] {
            for two in [false, true] {
                let mut text = vec![b'a'; 200];
                text[at] = b'\n';
                if two {
                    text[at + 1] = b'\n';
                }
                texts.push(text);
            }
        }
        for round in 0..600u64 {
            let len = match round % 4 {
                0 => (next() % 200) as usize,
                1 => 64 * (next() % 4) as usize + [0, 1, 63][(next() % 3) as usize],
                _ => (next() % 1000) as usize,
            };
            let spread = 1 + round % 150;
            texts.push(
                (0..len)
                    .map(|_| match next() % spread {
                        0 => b'\n',
                        1 => [9, 11, 138, 0, 255][(next() % 5) as usize],
                        _ => b'a' + (next() % 26) as u8,
                    })
                    .collect(),
            );
        }
        texts
    }

    #[test]
    fn the_newlines_of_a_block_are_those_of_its_bytes() {
        for text in texts() {
            for block in text.chunks_exact(64) {
                let block: &[u8; 64] = block.try_into().unwrap();
                assert_eq!(newlines(block), newlines_one_by_one(block), "{block:?}");
            }
        }
        assert_eq!(newlines(&[b'\n'; 64]), u64::MAX);
        assert_eq!(newlines(&[b'a'; 64]), 0);
    }

    #[test]
    fn a_finder_finds_each_newline_as_a_search_byte_by_byte() {
        for text in texts() {
            let mut f = Finder::default();
            let want = |from: usize, to: usize| (from..to).find(|&i| text[i] == b'\n');
            // From line to line, as a reader of lines asks, with and without a bound.
            for bound in [usize::MAX, 1, 5, 70] {
                let mut at = 0;
                while at < text.len() {
                    let to = text.len().min(at.saturating_add(bound));
                    let got = f.find(&text, at, to);
                    assert_eq!(got, want(at, to), "from {at} to {to} of {text:?}");
                    at = got.map_or(to, |i| i + 1);
                }
            }
            // And here and there, backwards too.
            for k in 0..20 {
                let from = (k * 37) % (text.len() + 1);
                let to = (from + k * 11).min(text.len());
                assert_eq!(f.find(&text, from, to), want(from, to), "{from}..{to}");
            }
        }
    }

    #[test]
    fn counts_and_line_starts_are_those_of_a_search_byte_by_byte() {
        for text in texts() {
            let ends: Vec<usize> = (0..text.len()).filter(|&i| text[i] == b'\n').collect();
            let empty = ends.iter().any(|&e| e == 0 || text[e - 1] == b'\n');
            assert_eq!(count(&text), (ends.len(), empty), "{text:?}");
            for n in 0..ends.len() + 3 {
                let want = match n {
                    0 => 0,
                    n => ends.get(n - 1).map_or(text.len(), |e| e + 1),
                };
                assert_eq!(nth_start(&text, n), want, "line {n} of {text:?}");
            }
        }
    }
}
