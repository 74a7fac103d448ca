//! The 64-bit SimHash of a text (Charikar, 2002; the lecture notes §2.6), as specified in
//! `docs/design.md` ("Near-duplicates: the fingerprint"):
//!
//! 1. **Normalise**: every alphanumeric character (Unicode's `Alphabetic` or `Numeric`, so
//!    letters and digits of every script) is kept, in Unicode lower case; every run of other
//!    characters (spaces, punctuation, symbols, markup's `<`, `>` and `=`) becomes one space;
//!    no space at the start or the end. So `"<b>Hello,  World!</b> 2024"` reads
//!    `"b hello world b 2024"`: markup is not removed (give the page's text), digits stay.
//! 2. **Features**: every run of [`SHINGLE`] consecutive characters of the normalised text
//!    (spaces included), as UTF-8 bytes; a normalised text shorter than that is one feature,
//!    itself; an empty one has none.
//! 3. **Hash**: each feature to 64 bits, `xxh3_64` with seed 0. Every feature weighs 1 (a
//!    feature that occurs twice counts twice).
//! 4. **Vote**: bit `i` of the fingerprint is set when more than half of the features have
//!    bit `i` set. A text with no feature has the fingerprint 0.
//!
//! The counters are *bit-sliced* (words whose bit `i` belongs to counter `i`) and fed sixteen
//! hashes at a time through a carry-save tree, so that counting a feature costs a few word
//! operations and no branch; windows of five ASCII bytes are hashed from one load by xxh3's
//! own 4-to-8-byte path, inlined; ASCII is normalised eight bytes at a time without a branch
//! per character. Nothing is allocated per feature: the normalised text goes to a buffer that
//! a [`Fingerprinter`] keeps from one text to the next. `docs/design.md` says how, and the
//! tests check every shortcut against the definition.

use xxhash_rust::xxh3::xxh3_64;

#[cfg(target_arch = "x86_64")]
mod wide;

/// Characters per feature (a character shingle). Chosen by measurement on the test corpus
/// (`docs/performance.md`, "Near-duplicates").
pub const SHINGLE: usize = 5;

/// The most bytes of text a fingerprint is computed over: a longer text is refused
/// ([`Fingerprinter::fingerprint`] returns `None`), never truncated silently.
pub const MAX_TEXT: usize = 16 << 20;

/// The longest shingle [`Fingerprinter::fingerprint_with`] takes.
const MAX_SHINGLE: usize = 16;

/// Bit-sliced counters: plane `j` holds bit `j` of each of the 64 counters. 32 planes count
/// up to 2^32 − 1 features, more than a text of [`MAX_TEXT`] bytes has.
const PLANES: usize = 32;

/// Computes fingerprints, reusing its buffer from one text to the next.
#[derive(Debug, Clone)]
pub struct Fingerprinter {
    norm: Vec<u8>,
    /// Whether the processor runs the AVX-512 loops (module `wide`).
    wide: bool,
}

impl Default for Fingerprinter {
    fn default() -> Fingerprinter {
        Fingerprinter::new()
    }
}

impl Fingerprinter {
    /// A fingerprinter with an empty buffer, using AVX-512 where the processor has it.
    pub fn new() -> Fingerprinter {
        #[cfg(target_arch = "x86_64")]
        let wide = wide::available();
        #[cfg(not(target_arch = "x86_64"))]
        let wide = false;
        Fingerprinter {
            norm: Vec::new(),
            wide,
        }
    }

    /// A fingerprinter that never uses AVX-512, for the tests that compare both ways.
    #[doc(hidden)]
    pub fn portable() -> Fingerprinter {
        Fingerprinter {
            norm: Vec::new(),
            wide: false,
        }
    }

    /// The fingerprint of `text`, or `None` when it is longer than [`MAX_TEXT`] bytes.
    pub fn fingerprint(&mut self, text: &str) -> Option<u64> {
        if text.len() > MAX_TEXT {
            return None;
        }
        normalise(text, &mut self.norm, self.wide);
        Some(vote(&self.norm, SHINGLE, self.wide))
    }

    /// The fingerprint with features of `shingle` characters (1 to 16) instead of
    /// [`SHINGLE`]: for the measurement that chose [`SHINGLE`], not for stored fingerprints.
    #[doc(hidden)]
    pub fn fingerprint_with(&mut self, text: &str, shingle: usize) -> Option<u64> {
        assert!((1..=MAX_SHINGLE).contains(&shingle));
        if text.len() > MAX_TEXT {
            return None;
        }
        normalise(text, &mut self.norm, self.wide);
        Some(vote(&self.norm, shingle, self.wide))
    }

    /// The normalised text of the last fingerprint (step 1 above), for tests and tools.
    pub fn normalised(&self) -> &str {
        // The buffer only ever holds whole UTF-8 characters and ASCII spaces.
        std::str::from_utf8(&self.norm).unwrap_or("")
    }
}

/// The fingerprint of `text` (a convenience over [`Fingerprinter`]), or `None` when it is
/// longer than [`MAX_TEXT`] bytes.
pub fn fingerprint(text: &str) -> Option<u64> {
    Fingerprinter::new().fingerprint(text)
}

/// The Hamming distance of two fingerprints: the number of bits in which they differ.
pub fn distance(a: u64, b: u64) -> u32 {
    (a ^ b).count_ones()
}

/// Step 1: the normalised text of `text` into `out`, with the AVX-512 loop when `wide`.
fn normalise(text: &str, out: &mut Vec<u8>, wide: bool) {
    out.clear();
    // Whether a space is owed before the next kept character.
    let mut gap = false;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        // ASCII characters up to the next other one, without a branch per character.
        let run;
        (run, gap) = if bytes[i] >= 0x80 {
            // A multi-byte character (as in most of a text in many scripts): no ASCII run.
            (0, gap)
        } else if wide {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `wide` is only set when the processor has the instructions.
            unsafe {
                wide::normalise_ascii(&bytes[i..], out, gap)
            }
            #[cfg(not(target_arch = "x86_64"))]
            unreachable!("AVX-512 outside x86_64")
        } else {
            normalise_ascii(&bytes[i..], out, gap)
        };
        i += run;
        if i == bytes.len() {
            break;
        }
        // A multi-byte character: decode it from the valid UTF-8 of `text`.
        let c = text[i..].chars().next().expect("a character starts here");
        i += c.len_utf8();
        if c.is_alphanumeric() {
            if gap {
                out.push(b' ');
            }
            gap = false;
            let mut enc = [0u8; 4];
            for l in c.to_lowercase() {
                out.extend_from_slice(l.encode_utf8(&mut enc).as_bytes());
            }
        } else {
            gap = true;
        }
    }
    // A space is owed before the first kept character when separators came first: none at
    // the start.
    if out.first() == Some(&b' ') {
        out.remove(0);
    }
}

/// Each byte: its lower case when it is an ASCII letter or digit, 0 otherwise (other ASCII
/// characters, and the bytes of multi-byte characters).
const ASCII_KEPT: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() {
            t[b] = c.to_ascii_lowercase();
        }
        b += 1;
    }
    t
};

/// Step 1 over the ASCII characters at the start of `bytes`, appended to `out`; `gap` says
/// whether a space is owed before the next kept character. Returns how many bytes were read
/// (up to the first byte of a multi-byte character) and whether a space is owed after them.
/// Eight bytes at a time while they are ASCII; each byte is written unconditionally and kept
/// by advancing the length, so that no branch depends on the text's characters.
fn normalise_ascii(bytes: &[u8], out: &mut Vec<u8>, gap: bool) -> (usize, bool) {
    let start = out.len();
    // At most a space and a character per byte read, and one byte written past them.
    out.reserve(2 * bytes.len() + 1);
    let buf = out.spare_capacity_mut().as_mut_ptr().cast::<u8>();
    let mut n = 0usize;
    let mut gap = usize::from(gap);
    let mut step = |b: u8| {
        let c = ASCII_KEPT[usize::from(b)];
        let keep = usize::from(c != 0);
        // SAFETY: before the `i`-th byte read, n <= 2 i: both writes fall below
        // 2 bytes.len() + 1, within the capacity reserved above.
        unsafe {
            buf.add(n).write(b' ');
            n += keep & gap;
            buf.add(n).write(c);
        }
        n += keep;
        gap = keep ^ 1;
    };
    let mut i = 0;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let chunk: &[u8; 8] = chunk.try_into().expect("eight bytes");
        if u64::from_le_bytes(*chunk) & 0x8080_8080_8080_8080 != 0 {
            break;
        }
        for &b in chunk {
            step(b);
        }
        i += 8;
    }
    while let Some(&b) = bytes.get(i).filter(|&&b| b < 0x80) {
        step(b);
        i += 1;
    }
    // SAFETY: the `n` bytes after `start` were written above (each byte counted was written
    // where `n` stood before it was counted), within the capacity reserved.
    unsafe { out.set_len(start + n) };
    (i, gap != 0)
}

/// Bytes 8 to 24 of xxh3's default secret, as its 4-to-8-byte path folds them into one word.
const XXH3_FLIP_4TO8: u64 = u64::from_le_bytes([0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c])
    ^ u64::from_le_bytes([0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb]);

/// `xxh3_64` (seed 0) of an input of `len` bytes, 4 to 8, whose first four bytes read `first`
/// and last four read `last` (little-endian): xxh3's path for such lengths, inlined here so
/// that a window of the normalised text is hashed from two loads. A test checks it against
/// `xxh3_64` for every length.
#[inline(always)]
fn xxh3_4to8(first: u32, last: u32, len: u64) -> u64 {
    let mut h = (u64::from(last).wrapping_add(u64::from(first) << 32)) ^ XXH3_FLIP_4TO8;
    h ^= h.rotate_left(49) ^ h.rotate_left(24);
    h = h.wrapping_mul(0x9FB2_1C65_1E98_DF25);
    h ^= (h >> 35).wrapping_add(len);
    h = h.wrapping_mul(0x9FB2_1C65_1E98_DF25);
    h ^ (h >> 28)
}

/// `xxh3_64` of a feature: the inlined path for 4 to 8 bytes, the library's otherwise.
#[inline(always)]
fn feature_hash(f: &[u8]) -> u64 {
    if (4..=8).contains(&f.len()) {
        let first = u32::from_le_bytes(f[..4].try_into().expect("four bytes"));
        let last = u32::from_le_bytes(f[f.len() - 4..].try_into().expect("four bytes"));
        xxh3_4to8(first, last, f.len() as u64)
    } else {
        xxh3_64(f)
    }
}

/// Steps 2 to 4 over a normalised text, with the AVX-512 loop when `wide`.
fn vote(norm: &[u8], shingle: usize, wide: bool) -> u64 {
    if norm.is_empty() {
        return 0;
    }
    let mut counters = Counters::default();
    if norm.len() <= shingle {
        // One feature, the whole text, whatever its characters.
        counters.add(feature_hash(norm));
    } else if shingle == SHINGLE {
        vote5(norm, &mut counters, wide);
    } else if norm.is_ascii() {
        for w in norm.windows(shingle) {
            counters.add(xxh3_64(w));
        }
    } else {
        // The start of each character, in a ring of the last `shingle + 1` of them.
        let ring = shingle + 1;
        let mut starts = [0usize; MAX_SHINGLE + 1];
        // `chars` characters seen; the next one's start goes to slot `w` (= chars % ring),
        // and the first of the last `shingle` is at slot (w − shingle) mod ring.
        let (mut chars, mut w) = (0usize, 0usize);
        let oldest = |w: usize| {
            let s = w + ring - shingle;
            if s >= ring {
                s - ring
            } else {
                s
            }
        };
        for (at, &b) in norm.iter().enumerate() {
            if b & 0xC0 == 0x80 {
                continue;
            }
            if chars >= shingle {
                counters.add(feature_hash(&norm[starts[oldest(w)]..at]));
            }
            starts[w] = at;
            w = if w + 1 == ring { 0 } else { w + 1 };
            chars += 1;
        }
        let first = if chars >= shingle {
            starts[oldest(w)]
        } else {
            0
        };
        counters.add(xxh3_64(&norm[first..]));
    }
    counters.vote()
}

/// The bytes of the UTF-8 character that starts with byte `b`.
#[inline(always)]
fn utf8_len(b: u8) -> usize {
    if b < 0x80 {
        1
    } else if b < 0xE0 {
        2
    } else if b < 0xF0 {
        3
    } else {
        4
    }
}

/// How many bytes at the start of `bytes` are ASCII: sixteen at a time, then one at a time.
fn ascii_prefix(bytes: &[u8]) -> usize {
    let mut i = 0;
    while let Some(chunk) = bytes.get(i..i + 16) {
        let chunk: &[u8; 16] = chunk.try_into().expect("sixteen bytes");
        if u128::from_le_bytes(*chunk) & 0x8080_8080_8080_8080_8080_8080_8080_8080 != 0 {
            break;
        }
        i += 16;
    }
    i + bytes[i..]
        .iter()
        .position(|&b| b >= 0x80)
        .unwrap_or(bytes.len() - i)
}

/// The features of a normalised text of more than [`SHINGLE`] bytes, characters of any
/// size: the windows within runs of ASCII characters go sixteen at a time
/// ([`vote_ascii5`]), those that hold a character of several bytes one at a time.
fn vote5(norm: &[u8], counters: &mut Counters, wide: bool) {
    if norm.len() <= 4 * SHINGLE {
        let chars = norm.iter().filter(|&&b| b & 0xC0 != 0x80).count();
        if chars <= SHINGLE {
            // One feature, the whole text.
            counters.add(feature_hash(norm));
            return;
        }
    }
    // `p` starts a run of ASCII bytes whose windows have not been counted.
    let mut p = 0;
    loop {
        let q = p + ascii_prefix(&norm[p..]);
        if q - p >= SHINGLE {
            vote_ascii5(&norm[p..q], counters, wide);
        }
        if q == norm.len() {
            return;
        }
        // The windows that hold a character of several bytes: from the first of the last
        // four ASCII characters before it, to the next window of ASCII characters only.
        let mut s = q.saturating_sub(SHINGLE - 1).max(p);
        loop {
            let mut end = s;
            for _ in 0..SHINGLE {
                if end >= norm.len() {
                    // Fewer than five characters left: no more windows.
                    return;
                }
                end += utf8_len(norm[end]);
            }
            if end - s == SHINGLE {
                // Five ASCII characters: a run of them starts here.
                p = s;
                break;
            }
            counters.add(feature_hash(&norm[s..end]));
            s += utf8_len(norm[s]);
        }
    }
}

/// The features of an ASCII text of more than five bytes: each window of five bytes, hashed
/// from two overlapping four-byte loads, sixteen at a time; eight to a vector when `wide`
/// and the text has enough windows (`WIDE_WINDOWS`).
fn vote_ascii5(norm: &[u8], counters: &mut Counters, wide: bool) {
    #[cfg(target_arch = "x86_64")]
    if wide && norm.len() - SHINGLE + 1 >= WIDE_WINDOWS {
        // SAFETY: `wide` is only set when the processor has the instructions.
        return unsafe { wide::vote_ascii5(norm, counters) };
    }
    let _ = wide;
    const _: () = assert!(SHINGLE == 5);
    let windows = norm.len() - SHINGLE + 1;
    // A window's first four bytes are the low half of the word loaded at its start, its last
    // four the bytes after the first.
    let hash = |w: u64| xxh3_4to8(w as u32, (w >> 8) as u32, SHINGLE as u64);
    let mut i = 0;
    // Sixteen windows from the 24 bytes at `i` (three past the last window's end).
    while i + 24 <= norm.len() {
        let b: &[u8; 24] = norm[i..i + 24].try_into().expect("24 bytes");
        let d: [u64; 16] = std::array::from_fn(|j| {
            hash(u64::from_le_bytes(b[j..j + 8].try_into().expect("8 bytes")))
        });
        counters.add16(&d);
        i += 16;
    }
    for at in i..windows {
        let mut w = [0u8; 8];
        w[..SHINGLE].copy_from_slice(&norm[at..at + SHINGLE]);
        counters.add(hash(u64::from_le_bytes(w)));
    }
}

/// The fewest windows of a run of ASCII characters counted with AVX-512: the vectors count
/// 128 windows at a time, wasted on fewer.
#[cfg(target_arch = "x86_64")]
const WIDE_WINDOWS: usize = 32;

/// Full adder of three words, bit by bit: (carries, sums).
#[inline(always)]
fn csa(a: u64, b: u64, c: u64) -> (u64, u64) {
    let u = a ^ b;
    ((a & b) | (u & c), u ^ c)
}

/// 64 counters, bit-sliced, fed a word (a feature's hash) at a time. Words are gathered by
/// sixteen and summed with a carry-save tree (Harley and Seal's), which keeps the counters'
/// low four bits in `ones`, `twos`, `fours` and `eights`; the sixteens are added to `planes`
/// (plane `j` holding bit `j` of each counter's count of sixteens) by a ripple-carry addition
/// of one word, once per sixteen features. `units` holds counts added whole (plane `j` worth
/// 2^j), from the AVX-512 loop.
struct Counters {
    planes: [u64; PLANES],
    units: [u64; PLANES + 4],
    ones: u64,
    twos: u64,
    fours: u64,
    eights: u64,
    pending: [u64; 16],
    n: usize,
    features: u64,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            planes: [0; PLANES],
            units: [0; PLANES + 4],
            ones: 0,
            twos: 0,
            fours: 0,
            eights: 0,
            pending: [0; 16],
            n: 0,
            features: 0,
        }
    }
}

impl Counters {
    /// Counts the bits of one feature's hash.
    #[inline(always)]
    fn add(&mut self, h: u64) {
        self.pending[self.n] = h;
        self.n += 1;
        if self.n == 16 {
            self.n = 0;
            self.reduce();
        }
    }

    /// Adds the sixteen pending words.
    #[inline]
    fn reduce(&mut self) {
        let d = self.pending;
        self.add16(&d);
    }

    /// Counts the bits of sixteen features' hashes.
    #[inline]
    fn add16(&mut self, d: &[u64; 16]) {
        let (mut ones, mut twos, mut fours, mut eights) =
            (self.ones, self.twos, self.fours, self.eights);
        let quad = |d: &[u64], ones: &mut u64, twos: &mut u64| {
            let (ta, o) = csa(*ones, d[0], d[1]);
            let (tb, o) = csa(o, d[2], d[3]);
            *ones = o;
            let (f, t) = csa(*twos, ta, tb);
            *twos = t;
            f
        };
        let fa = quad(&d[0..4], &mut ones, &mut twos);
        let fb = quad(&d[4..8], &mut ones, &mut twos);
        let (ea, f) = csa(fours, fa, fb);
        fours = f;
        let fa = quad(&d[8..12], &mut ones, &mut twos);
        let fb = quad(&d[12..16], &mut ones, &mut twos);
        let (eb, f) = csa(fours, fa, fb);
        fours = f;
        let (sixteens, e) = csa(eights, ea, eb);
        eights = e;
        (self.ones, self.twos, self.fours, self.eights) = (ones, twos, fours, eights);
        add_at(&mut self.planes, 0, sixteens);
        self.features += 16;
    }

    /// The vote: the bits set in more than half of the features.
    fn vote(&self) -> u64 {
        // The whole counts: sixteens shifted up four planes, plus the low planes and the
        // words still pending.
        let mut total = [0u64; PLANES + 4];
        total[4..].copy_from_slice(&self.planes);
        add_at(&mut total, 3, self.eights);
        add_at(&mut total, 2, self.fours);
        add_at(&mut total, 1, self.twos);
        add_at(&mut total, 0, self.ones);
        for &h in &self.pending[..self.n] {
            add_at(&mut total, 0, h);
        }
        for (j, &w) in self.units.iter().enumerate() {
            add_at(&mut total, j, w);
        }
        above_half(&total, self.features + self.n as u64)
    }
}

/// Adds `word` at plane `j` of bit-sliced counters (one to each counter whose bit of `word`
/// is set, times 2^j): a ripple-carry addition of one word.
#[inline(always)]
fn add_at(planes: &mut [u64], mut j: usize, word: u64) {
    let mut carry = word;
    while carry != 0 && j < planes.len() {
        let t = planes[j] & carry;
        planes[j] ^= carry;
        carry = t;
        j += 1;
    }
}

/// The bits whose counter exceeds `features / 2`: a bit-sliced comparison of the 64 counters
/// with the constant, from the top plane down.
fn above_half(planes: &[u64], features: u64) -> u64 {
    let half = features / 2;
    let mut greater = 0u64;
    let mut equal = u64::MAX;
    for j in (0..planes.len()).rev() {
        if half >> j & 1 == 1 {
            equal &= planes[j];
        } else {
            greater |= equal & planes[j];
            equal &= !planes[j];
        }
    }
    greater
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Step 1 as the definition says it, a character at a time.
    fn normalised_plain(text: &str) -> String {
        let mut out = String::new();
        let mut gap = false;
        for c in text.chars() {
            if c.is_alphanumeric() {
                if gap && !out.is_empty() {
                    out.push(' ');
                }
                gap = false;
                out.extend(c.to_lowercase());
            } else {
                gap = true;
            }
        }
        out
    }

    /// The counters, one at a time: the definition the bit-sliced version must equal.
    fn plain(norm: &str) -> u64 {
        let chars: Vec<(usize, char)> = norm.char_indices().collect();
        let mut feats: Vec<&str> = Vec::new();
        if chars.len() <= SHINGLE {
            if !norm.is_empty() {
                feats.push(norm);
            }
        } else {
            for i in 0..=chars.len() - SHINGLE {
                let a = chars[i].0;
                let b = chars.get(i + SHINGLE).map_or(norm.len(), |c| c.0);
                feats.push(&norm[a..b]);
            }
        }
        let mut counts = [0u64; 64];
        for f in &feats {
            let h = xxh3_64(f.as_bytes());
            for (i, c) in counts.iter_mut().enumerate() {
                *c += h >> i & 1;
            }
        }
        let n = feats.len() as u64;
        (0..64).fold(0, |fp, i| fp | u64::from(2 * counts[i] > n) << i)
    }

    #[test]
    fn normalisation_keeps_lower_case_words_and_digits() {
        let mut f = Fingerprinter::new();
        f.fingerprint("<b>Hello,  World!</b> 2024").unwrap();
        assert_eq!(f.normalised(), "b hello world b 2024");
        f.fingerprint("  ÉCOLE d'Été — Straße İ ").unwrap();
        assert_eq!(f.normalised(), "école d été straße i\u{307}");
        f.fingerprint("...!!!").unwrap();
        assert_eq!(f.normalised(), "");
    }

    #[test]
    fn the_inlined_hash_is_xxh3() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut bytes = [0u8; 40];
        for _ in 0..2000 {
            for b in bytes.iter_mut() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                *b = s as u8;
            }
            for len in 0..=bytes.len() {
                assert_eq!(feature_hash(&bytes[..len]), xxh3_64(&bytes[..len]), "{len}");
            }
        }
    }

    #[test]
    fn bit_sliced_counters_equal_the_definition() {
        let texts = [
            "",
            "a",
            "abcde",
            "abcdef",
            "the quick brown fox jumps over the lazy dog",
            "Ünïcödé täxt wïth äccents, and ASCII too: 123 456",
            "日本語のテキストも同じように扱われる",
        ];
        for mut f in [Fingerprinter::new(), Fingerprinter::portable()] {
            for t in texts {
                let fp = f.fingerprint(t).unwrap();
                assert_eq!(f.normalised(), normalised_plain(t));
                assert_eq!(fp, plain(f.normalised()), "{t:?}");
            }
        }
        let (mut f, mut portable) = (Fingerprinter::new(), Fingerprinter::portable());
        // Long texts (thousands of features, so counters past sixteen many times over), of
        // every length around the groups of sixteen, ASCII and not.
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let words = [
            "alpha",
            "beta",
            "gamma",
            "délta",
            "x",
            "42",
            "日本",
            "<p>",
            "--",
            "é",
            "ab",
            "İSTANBUL",
            "😀",
            "Ünï",
        ];
        let mut long = String::new();
        for n in 0..3000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            long.push_str(words[(s % words.len() as u64) as usize]);
            long.push(if s >> 40 & 3 == 0 { ',' } else { ' ' });
            if n % 97 == 0 || n > 2990 {
                for f in [&mut f, &mut portable] {
                    let fp = f.fingerprint(&long).unwrap();
                    assert_eq!(f.normalised(), normalised_plain(&long));
                    assert_eq!(fp, plain(f.normalised()), "{} bytes", long.len());
                    let ascii: String = long.chars().filter(char::is_ascii).collect();
                    let fp = f.fingerprint(&ascii).unwrap();
                    assert_eq!(f.normalised(), normalised_plain(&ascii));
                    assert_eq!(fp, plain(f.normalised()), "{} ASCII bytes", ascii.len());
                    let led = format!("¡ {long}");
                    let fp = f.fingerprint(&led).unwrap();
                    assert_eq!(f.normalised(), normalised_plain(&led));
                    assert_eq!(fp, plain(f.normalised()), "{} bytes after ¡", led.len());
                }
            }
        }
    }

    /// The AVX-512 loops against the portable ones, on texts of every length up to a few
    /// blocks, made of kept characters, separators and multi-byte characters in random runs
    /// (so that runs and separators start and end everywhere around the blocks' ends).
    #[test]
    fn the_wide_loops_equal_the_portable_ones() {
        let mut wide = Fingerprinter::new();
        if !wide.wide {
            eprintln!("skipped: this processor has no AVX-512 (the portable loops are tested)");
            return;
        }
        let mut portable = Fingerprinter::portable();
        let pieces = [
            "a", "Z", "7", " ", ",", "<p>", "\n", "--", "é", "日", "İ", "😀", "ß", "\u{0}", "\t",
        ];
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for round in 0..3000 {
            let len = (next() % 400) as usize;
            // Some texts all ASCII (the first eight pieces), some with a multi-byte character
            // now and then, some dense with them.
            let kinds = [8, 12, pieces.len()][round % 3];
            let mut t = String::new();
            while t.len() < len {
                let run = (next() % 12) as usize + 1;
                let piece = pieces[(next() % kinds as u64) as usize];
                for _ in 0..run {
                    t.push_str(piece);
                }
            }
            let (a, b) = (
                wide.fingerprint(&t).unwrap(),
                portable.fingerprint(&t).unwrap(),
            );
            assert_eq!(wide.normalised(), portable.normalised(), "{t:?}");
            assert_eq!(a, b, "{t:?}");
        }
        // Long ASCII text whose words cross every alignment of the 64-byte blocks.
        let mut t = String::new();
        for n in 0..5000 {
            t.push_str(["alpha", "b", "gamma", "DELTA", "42"][n % 5]);
            t.push_str([" ", ", ", "...", " \n "][next() as usize % 4]);
            if n % 37 == 0 {
                assert_eq!(
                    wide.fingerprint(&t),
                    portable.fingerprint(&t),
                    "{} bytes",
                    t.len()
                );
                assert_eq!(wide.normalised(), portable.normalised());
                assert_eq!(wide.fingerprint(&t[1..]), portable.fingerprint(&t[1..]));
            }
        }
    }

    #[test]
    fn pinned_fingerprints() {
        // Changing any of these changes every stored fingerprint: a new format version.
        let pins = [
            ("", 0u64),
            ("...", 0),
            ("Hello, World!", 0x1507_dc5d_4879_e43e),
            ("hello world", 0x1507_dc5d_4879_e43e),
            (
                "The quick brown fox jumps over the lazy dog.",
                0x0f23_1859_fb18_ce61,
            ),
            ("Ünïcödé, ASCII & 日本語", 0x2873_f325_d7b8_6776),
        ];
        for (t, fp) in pins {
            let got = fingerprint(t).unwrap();
            assert_eq!(got, fp, "{t:?}: {got:#018x}");
            let got = Fingerprinter::portable().fingerprint(t).unwrap();
            assert_eq!(got, fp, "portable, {t:?}: {got:#018x}");
        }
    }

    #[test]
    fn a_text_over_the_maximum_is_refused() {
        let big = "a".repeat(MAX_TEXT + 1);
        assert_eq!(fingerprint(&big), None);
        // The longest text, all of one character, fills the most planes of the counters.
        let wide = fingerprint(&big[..MAX_TEXT]);
        assert!(wide.is_some());
        assert_eq!(
            wide,
            Fingerprinter::portable().fingerprint(&big[..MAX_TEXT])
        );
        let mixed: String = "ab1 ".repeat(MAX_TEXT / 4);
        assert_eq!(
            fingerprint(&mixed),
            Fingerprinter::portable().fingerprint(&mixed)
        );
    }

    #[test]
    fn near_texts_are_near() {
        let a =
            "It is a truth universally acknowledged, that a single man in possession of a good \
                 fortune, must be in want of a wife. However little known the feelings or views \
                 of such a man may be on his first entering a neighbourhood, this truth is so well \
                 fixed in the minds of the surrounding families, that he is considered the \
                 rightful property of some one or other of their daughters.";
        let b = a.replace("good fortune", "large fortune");
        let fa = fingerprint(a).unwrap();
        let fb = fingerprint(&b).unwrap();
        assert!(distance(fa, fb) <= 6, "{}", distance(fa, fb));
        let c =
            fingerprint("An entirely different sentence about crawling the web politely.").unwrap();
        assert!(distance(fa, c) > 10, "{}", distance(fa, c));
    }
}
