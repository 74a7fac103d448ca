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
//! The counters are *bit-sliced*: 32 words, word `j` holding bit `j` of all 64 counters, so
//! that adding a feature's hash to the 64 counters is a ripple-carry addition of one word
//! (two word operations per carry, and the carry dies out after two steps on average), and
//! the final vote is one bit-sliced comparison. Nothing is allocated per feature: the
//! normalised text goes to a buffer that a [`Fingerprinter`] keeps from one text to the next.

use xxhash_rust::xxh3::xxh3_64;

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
#[derive(Debug, Default, Clone)]
pub struct Fingerprinter {
    norm: Vec<u8>,
}

impl Fingerprinter {
    /// A fingerprinter with an empty buffer.
    pub fn new() -> Fingerprinter {
        Fingerprinter::default()
    }

    /// The fingerprint of `text`, or `None` when it is longer than [`MAX_TEXT`] bytes.
    pub fn fingerprint(&mut self, text: &str) -> Option<u64> {
        if text.len() > MAX_TEXT {
            return None;
        }
        normalise(text, &mut self.norm);
        Some(vote(&self.norm, SHINGLE))
    }

    /// The fingerprint with features of `shingle` characters (1 to 16) instead of
    /// [`SHINGLE`]: for the measurement that chose [`SHINGLE`], not for stored fingerprints.
    #[doc(hidden)]
    pub fn fingerprint_with(&mut self, text: &str, shingle: usize) -> Option<u64> {
        assert!((1..=MAX_SHINGLE).contains(&shingle));
        if text.len() > MAX_TEXT {
            return None;
        }
        normalise(text, &mut self.norm);
        Some(vote(&self.norm, shingle))
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

/// Step 1: the normalised text of `text` into `out`.
fn normalise(text: &str, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(text.len());
    // Whether a space is owed before the next kept character.
    let mut gap = false;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b < 0x80 {
            i += 1;
            if b.is_ascii_alphanumeric() {
                if gap && !out.is_empty() {
                    out.push(b' ');
                }
                gap = false;
                out.push(b.to_ascii_lowercase());
            } else {
                gap = true;
            }
            continue;
        }
        // A multi-byte character: decode it from the valid UTF-8 of `text`.
        let c = text[i..].chars().next().expect("a character starts here");
        i += c.len_utf8();
        if c.is_alphanumeric() {
            if gap && !out.is_empty() {
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
}

/// Steps 2 to 4 over a normalised text.
fn vote(norm: &[u8], shingle: usize) -> u64 {
    if norm.is_empty() {
        return 0;
    }
    let mut planes = [0u64; PLANES];
    let mut features: u64 = 0;
    let mut add = |h: u64| {
        add_word(&mut planes, h);
        features += 1;
    };
    if norm.is_ascii() {
        if norm.len() <= shingle {
            add(xxh3_64(norm));
        } else {
            for w in norm.windows(shingle) {
                add(xxh3_64(w));
            }
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
                add(xxh3_64(&norm[starts[oldest(w)]..at]));
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
        add(xxh3_64(&norm[first..]));
    }
    above_half(&planes, features)
}

/// Adds one to each of the 64 bit-sliced counters whose bit of `h` is set: a ripple-carry
/// addition of one word.
#[inline(always)]
fn add_word(planes: &mut [u64; PLANES], h: u64) {
    let mut carry = h;
    let mut j = 0;
    while carry != 0 && j < PLANES {
        let t = planes[j] & carry;
        planes[j] ^= carry;
        carry = t;
        j += 1;
    }
}

/// The bits whose counter exceeds `features / 2`: a bit-sliced comparison of the 64 counters
/// with the constant, from the top plane down.
fn above_half(planes: &[u64; PLANES], features: u64) -> u64 {
    let half = features / 2;
    let mut greater = 0u64;
    let mut equal = u64::MAX;
    for j in (0..PLANES).rev() {
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
        let mut f = Fingerprinter::new();
        for t in texts {
            let fp = f.fingerprint(t).unwrap();
            assert_eq!(fp, plain(f.normalised()), "{t:?}");
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
        }
    }

    #[test]
    fn a_text_over_the_maximum_is_refused() {
        let big = "a".repeat(MAX_TEXT + 1);
        assert_eq!(fingerprint(&big), None);
        assert!(fingerprint(&big[..MAX_TEXT]).is_some());
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
