//! A real-text corpus for the near-duplicate tests and measurements, built at run time from
//! text already on the machine: the copyright files of the installed Debian packages (many
//! of which share a licence text) and the common licences. Near-duplicates are made by edits
//! of known size; unrelated pairs are pairs of texts that share few features.

use std::collections::HashSet;

use xxhash_rust::xxh3::xxh3_64;

/// The kinds of small edit made to a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Edit {
    /// A year changed (or added, when the text has none).
    Date,
    /// One capitalised word replaced by a name.
    Name,
    /// A sentence of 14 words inserted at a sentence boundary.
    SentenceAdded,
    /// One sentence (20 to 200 bytes) removed.
    SentenceRemoved,
}

impl Edit {
    /// Every kind.
    pub const ALL: [Edit; 4] = [
        Edit::Date,
        Edit::Name,
        Edit::SentenceAdded,
        Edit::SentenceRemoved,
    ];
}

/// The corpus: distinct texts, edited copies, and unrelated pairs.
#[derive(Debug, Default)]
pub struct Corpus {
    /// The texts (path, text), distinct, each at least `min_len` bytes.
    pub texts: Vec<(String, String)>,
    /// Edited copies: the index of the original, the edit, the copy.
    pub edited: Vec<(usize, Edit, String)>,
    /// Pairs of texts whose 5-character shingle sets have a Jaccard similarity below 0.2.
    pub unrelated: Vec<(usize, usize)>,
}

/// A small deterministic generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The texts of the machine: `/usr/share/doc/*/copyright` and `/usr/share/common-licenses/*`,
/// sorted by path, valid UTF-8, at least `min_len` and at most 1 MiB long, each distinct.
pub fn machine_texts(min_len: usize) -> Vec<(String, String)> {
    let mut paths = Vec::new();
    for (dir, leaf) in [
        ("/usr/share/doc", Some("copyright")),
        ("/usr/share/common-licenses", None),
    ] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = match leaf {
                Some(l) => e.path().join(l),
                None => e.path(),
            };
            paths.push(p);
        }
    }
    paths.sort();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for p in paths {
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        if text.len() < min_len || text.len() > 1 << 20 || !seen.insert(xxh3_64(text.as_bytes())) {
            continue;
        }
        out.push((p.display().to_string(), text));
    }
    out
}

/// Builds the corpus from `texts`: one copy of each text per edit kind (where the edit
/// applies), and up to `pairs` unrelated pairs, chosen with `seed`.
pub fn build(texts: Vec<(String, String)>, pairs: usize, seed: u64) -> Corpus {
    let mut rng = Rng(seed | 1);
    let mut edited = Vec::new();
    for (i, (_, t)) in texts.iter().enumerate() {
        for kind in Edit::ALL {
            if let Some(copy) = edit(t, kind, &mut rng) {
                edited.push((i, kind, copy));
            }
        }
    }
    let sets: Vec<HashSet<u64>> = texts.iter().map(|(_, t)| shingles(t)).collect();
    let mut unrelated = Vec::new();
    let mut tries = 0;
    while unrelated.len() < pairs && tries < pairs * 20 && texts.len() > 1 {
        tries += 1;
        let (a, b) = (rng.below(texts.len()), rng.below(texts.len()));
        if a == b {
            continue;
        }
        let inter = sets[a].intersection(&sets[b]).count();
        let union = sets[a].len() + sets[b].len() - inter;
        if union > 0 && (inter as f64) < 0.2 * union as f64 {
            unrelated.push((a.min(b), a.max(b)));
        }
    }
    unrelated.sort_unstable();
    unrelated.dedup();
    Corpus {
        texts,
        edited,
        unrelated,
    }
}

/// The corpus of this machine's texts (see [`machine_texts`]), or `None` when it has fewer
/// than `min_texts` of them.
pub fn machine_corpus(min_texts: usize) -> Option<Corpus> {
    let texts = machine_texts(2000);
    (texts.len() >= min_texts).then(|| build(texts, 4000, 42))
}

/// The set of hashed 5-character shingles of the lower-cased words of `text`.
pub fn shingles(text: &str) -> HashSet<u64> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let norm: Vec<char> = words.join(" ").chars().collect();
    let mut set = HashSet::new();
    for w in norm.windows(5) {
        let s: String = w.iter().collect();
        set.insert(xxh3_64(s.as_bytes()));
    }
    set
}

/// A copy of `text` with one small edit of `kind`, or `None` when the text offers no place
/// for it.
pub fn edit(text: &str, kind: Edit, rng: &mut Rng) -> Option<String> {
    match kind {
        Edit::Date => {
            let years: Vec<usize> = year_positions(text);
            if years.is_empty() {
                let at = word_boundary(text, rng.below(text.len()));
                return Some(format!("{} 2024{}", &text[..at], &text[at..]));
            }
            let at = years[rng.below(years.len())];
            let year: u32 = text[at..at + 4].parse().ok()?;
            let new = if year >= 2099 { year - 1 } else { year + 1 };
            Some(format!("{}{new}{}", &text[..at], &text[at + 4..]))
        }
        Edit::Name => {
            let words: Vec<(usize, usize)> = capitalised_words(text);
            if words.is_empty() {
                return None;
            }
            let (a, b) = words[rng.below(words.len())];
            Some(format!("{}Quintavalle{}", &text[..a], &text[b..]))
        }
        Edit::SentenceAdded => {
            let ends = sentence_ends(text);
            let at = if ends.is_empty() {
                word_boundary(text, rng.below(text.len()))
            } else {
                ends[rng.below(ends.len())]
            };
            Some(format!(
                "{} This sentence was added to the copy, so that it differs from the original.{}",
                &text[..at],
                &text[at..]
            ))
        }
        Edit::SentenceRemoved => {
            let ends = sentence_ends(text);
            let spans: Vec<(usize, usize)> = ends
                .windows(2)
                .map(|w| (w[0], w[1]))
                .filter(|(a, b)| (20..=200).contains(&(b - a)))
                .collect();
            if spans.is_empty() {
                return None;
            }
            let (a, b) = spans[rng.below(spans.len())];
            Some(format!("{}{}", &text[..a], &text[b..]))
        }
    }
}

/// Offsets of four-digit years (1900 to 2099) standing alone.
fn year_positions(text: &str) -> Vec<usize> {
    let b = text.as_bytes();
    (0..b.len().saturating_sub(3))
        .filter(|&i| {
            b[i..i + 4].iter().all(u8::is_ascii_digit)
                && (b[i] == b'1' && b[i + 1] == b'9' || b[i] == b'2' && b[i + 1] == b'0')
                && (i == 0 || !b[i - 1].is_ascii_alphanumeric())
                && (i + 4 == b.len() || !b[i + 4].is_ascii_alphanumeric())
        })
        .collect()
}

/// Byte ranges of ASCII words of four letters or more that start with a capital.
fn capitalised_words(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_alphabetic() && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) {
            let mut j = i;
            while j < b.len() && b[j].is_ascii_alphabetic() {
                j += 1;
            }
            let boundary = j == b.len() || !b[j].is_ascii_alphanumeric() && b[j] < 0x80;
            if boundary && j - i >= 4 && b[i].is_ascii_uppercase() {
                out.push((i, j));
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// Offsets just after ". " (sentence boundaries), where an insertion or a cut keeps the text
/// valid UTF-8.
fn sentence_ends(text: &str) -> Vec<usize> {
    text.match_indices(". ").map(|(i, _)| i + 1).collect()
}

/// The first ASCII space at or after `at` (or the end).
fn word_boundary(text: &str, at: usize) -> usize {
    text.as_bytes()[at..]
        .iter()
        .position(|&c| c == b' ')
        .map_or(text.len(), |p| at + p)
}

/// The generator, for callers that make their own edits.
pub fn rng(seed: u64) -> Rng {
    Rng(seed | 1)
}
