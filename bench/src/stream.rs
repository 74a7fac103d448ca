//! A seeded synthetic crawl stream: the URLs a crawler discovers, in discovery order.
//!
//! The crawler fetches pages; each page holds 10 to 80 links. A page's host is drawn from a
//! Zipf law (density ∝ 1/rank) over [`HOSTS`] hosts, and 70% of its links stay on that host
//! (locality: navigation, related articles), the rest go to other Zipf-drawn hosts. About 20%
//! of the links are new URLs and 80% repeat an earlier URL of their host: 25% of the repeats
//! go to the host's navigation pages (home page and section pages, repeated on every page),
//! the rest to earlier URLs with a bias to recent ones. A feedback keeps the fraction of new
//! URLs at 20% (a never-seen host forces a new URL).
//!
//! A URL is a pure function of (host, index on the host), so the generator keeps only a
//! counter per host (400 KB) and never stores URLs. Hosts and paths have realistic shapes
//! (`https://www.name.tld/section/2019/05/12/some-words-here-1234.html`, forum, shop, wiki,
//! blog and tag pages): each host has one site style, as real sites do. Every new URL is
//! distinct from all earlier ones by construction, so the generator knows the exact answer
//! a sieve must give: [`Stream::new_urls`] distinct URLs, whose order-sensitive digest is
//! [`Stream::digest`].

use std::path::Path;
use std::time::{Duration, Instant};

use crivello::storage::sim::Rng;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Hosts in the Zipf law.
pub const HOSTS: u32 = 100_000;
/// Indices 0 (home page) to `NAV - 1` (section pages) are a host's navigation pages.
const NAV: u32 = 5;
/// Percent of a page's links that stay on the page's host.
const LOCAL_LINKS: u64 = 70;
/// Percent of the repeats that go to navigation pages.
const NAV_REPEATS: u64 = 25;

/// First words of host names: all five letters long, so that a name decodes uniquely.
const HOST_A: [&str; 64] = [
    "alpha", "amber", "apple", "arrow", "atlas", "azure", "basic", "beach", "berry", "black",
    "blaze", "bloom", "brave", "brick", "cable", "candy", "cedar", "chess", "cider", "civic",
    "cloud", "coral", "craft", "crisp", "delta", "denim", "eagle", "earth", "ember", "fable",
    "field", "flame", "fresh", "frost", "giant", "globe", "grand", "green", "happy", "haven",
    "honey", "ivory", "jolly", "lemon", "lunar", "magic", "maple", "metro", "noble", "north",
    "ocean", "olive", "pixel", "prime", "quick", "radar", "river", "royal", "solar", "spark",
    "stone", "sunny", "tiger", "urban",
];
/// Second words of host names.
const HOST_B: [&str; 64] = [
    "news", "media", "shop", "store", "works", "labs", "hub", "zone", "daily", "times", "post",
    "review", "guide", "world", "net", "web", "online", "tech", "soft", "data", "cloud", "home",
    "life", "style", "food", "travel", "sport", "games", "music", "films", "books", "art",
    "design", "studio", "group", "press", "radio", "tv", "mail", "forum", "club", "city", "market",
    "trade", "bank", "health", "care", "school", "learn", "wiki", "blog", "journal", "report",
    "digest", "center", "point", "line", "base", "space", "link", "box", "land", "house", "garden",
];
/// Top-level domains: one per block of 4096 ranks (the most popular hosts are `.com`).
const TLDS: [&str; 25] = [
    "com", "org", "net", "de", "co.uk", "fr", "it", "io", "info", "ru", "jp", "nl", "es", "com.br",
    "pl", "ca", "com.au", "edu", "ch", "se", "be", "at", "dk", "us", "eu",
];
/// Host prefixes, by host.
const PREFIXES: [&str; 16] = [
    "www.", "www.", "www.", "www.", "www.", "www.", "www.", "www.", "", "", "", "", "blog.",
    "shop.", "news.", "m.",
];
/// Section names: none is `tag`, a year, or a style's fixed path word.
const SECTIONS: [&str; 32] = [
    "politics",
    "business",
    "technology",
    "science",
    "health",
    "sports",
    "culture",
    "entertainment",
    "world",
    "local",
    "opinion",
    "lifestyle",
    "travel",
    "food",
    "education",
    "environment",
    "economy",
    "markets",
    "careers",
    "real-estate",
    "automotive",
    "fashion",
    "music",
    "movies",
    "books",
    "gaming",
    "photography",
    "weather",
    "community",
    "events",
    "about-us",
    "help",
];
/// Words of slugs and titles.
const WORDS: [&str; 128] = [
    "the",
    "new",
    "best",
    "how",
    "why",
    "what",
    "guide",
    "review",
    "top",
    "first",
    "last",
    "world",
    "city",
    "year",
    "day",
    "week",
    "people",
    "government",
    "report",
    "study",
    "data",
    "market",
    "price",
    "energy",
    "climate",
    "water",
    "school",
    "students",
    "health",
    "care",
    "doctor",
    "hospital",
    "police",
    "court",
    "election",
    "vote",
    "party",
    "minister",
    "leader",
    "company",
    "shares",
    "growth",
    "bank",
    "money",
    "tax",
    "budget",
    "plan",
    "project",
    "team",
    "game",
    "season",
    "coach",
    "player",
    "win",
    "final",
    "cup",
    "league",
    "music",
    "album",
    "film",
    "series",
    "book",
    "author",
    "art",
    "museum",
    "festival",
    "food",
    "recipe",
    "chicken",
    "pasta",
    "coffee",
    "travel",
    "hotel",
    "beach",
    "mountain",
    "road",
    "car",
    "electric",
    "battery",
    "phone",
    "apple",
    "google",
    "software",
    "security",
    "app",
    "update",
    "release",
    "version",
    "open",
    "source",
    "linux",
    "windows",
    "cloud",
    "server",
    "network",
    "internet",
    "science",
    "space",
    "moon",
    "planet",
    "research",
    "history",
    "war",
    "peace",
    "family",
    "children",
    "home",
    "garden",
    "house",
    "design",
    "style",
    "fashion",
    "summer",
    "winter",
    "spring",
    "autumn",
    "night",
    "morning",
    "free",
    "cheap",
    "easy",
    "simple",
    "quick",
    "tips",
    "ideas",
    "things",
    "ways",
    "reasons",
];
/// Site styles: the shape of a host's article URLs.
const STYLES: u64 = 6;

/// The splitmix64 finalizer: a fast, well-mixed hash of a 64-bit value.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Appends the decimal digits of `n`.
fn put_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

/// Appends `n` in two digits.
fn put_2(buf: &mut Vec<u8>, n: u64) {
    buf.push(b'0' + (n / 10 % 10) as u8);
    buf.push(b'0' + (n % 10) as u8);
}

/// Appends `count` slug words drawn from `h`, joined by `sep`.
fn put_words(buf: &mut Vec<u8>, mut h: u64, count: u64, sep: u8, capitalize: bool) {
    for i in 0..count {
        if i > 0 {
            buf.push(sep);
        }
        let w = WORDS[(h % WORDS.len() as u64) as usize].as_bytes();
        h = (h / WORDS.len() as u64) ^ mix(h.wrapping_add(i));
        if capitalize {
            buf.push(w[0].to_ascii_uppercase());
            buf.extend_from_slice(&w[1..]);
        } else {
            buf.extend_from_slice(w);
        }
    }
}

/// The hash of a host, which picks its scheme, prefix, sections and site style.
fn host_hash(host: u32) -> u64 {
    mix(u64::from(host).wrapping_add(0x5157_3A11))
}

/// Appends the scheme and host name of host `host` (`https://www.name.tld`).
fn write_origin(buf: &mut Vec<u8>, host: u32) {
    let hh = host_hash(host);
    buf.extend_from_slice(if hh % 100 < 85 {
        b"https://"
    } else {
        b"http://"
    });
    buf.extend_from_slice(PREFIXES[((hh >> 8) % 16) as usize].as_bytes());
    buf.extend_from_slice(HOST_A[(host % 64) as usize].as_bytes());
    buf.extend_from_slice(HOST_B[(host / 64 % 64) as usize].as_bytes());
    buf.push(b'.');
    buf.extend_from_slice(TLDS[(host / 4096) as usize].as_bytes());
}

/// Writes the URL number `idx` of host `host` into `buf` (cleared first).
#[cfg(test)]
pub fn write_url(buf: &mut Vec<u8>, host: u32, idx: u32) {
    buf.clear();
    write_origin(buf, host);
    write_path(buf, host, idx);
}

/// Appends the path (and query) of the URL number `idx` of host `host`.
fn write_path(buf: &mut Vec<u8>, host: u32, idx: u32) {
    let hh = host_hash(host);
    let first_section = (hh >> 16) % SECTIONS.len() as u64;
    let section = |i: u64| SECTIONS[((first_section + i) % SECTIONS.len() as u64) as usize];
    if idx == 0 {
        buf.push(b'/');
        return;
    }
    if idx < NAV {
        buf.push(b'/');
        buf.extend_from_slice(section(u64::from(idx)).as_bytes());
        buf.push(b'/');
        return;
    }
    let id = u64::from(idx);
    let h = mix((u64::from(host) << 32 | id) ^ 0xC0FF_EE00_D00D);
    let sec = section(1 + h % u64::from(NAV - 1)).as_bytes();
    let kind = (h >> 8) % 100;
    let words = 5 + (h >> 16) % 6;
    let wh = (h >> 24) ^ mix(h);
    if kind < 5 {
        // A tag page.
        buf.extend_from_slice(b"/tag/");
        put_words(buf, wh, 1, b'-', false);
        buf.extend_from_slice(b"/page/");
        put_u64(buf, id);
        buf.push(b'/');
        return;
    }
    if kind < 10 {
        // A section listing, paginated.
        buf.push(b'/');
        buf.extend_from_slice(sec);
        buf.extend_from_slice(b"/?page=");
        put_u64(buf, id);
        buf.extend_from_slice(b"&sort=date");
        return;
    }
    let year = 2005 + (h >> 40) % 20;
    let month = 1 + (h >> 48) % 12;
    let day = 1 + (h >> 52) % 28;
    match (hh >> 24) % STYLES {
        0 => {
            // News: /section/yyyy/mm/dd/slug-id.html
            buf.push(b'/');
            buf.extend_from_slice(sec);
            buf.push(b'/');
            put_u64(buf, year);
            buf.push(b'/');
            put_2(buf, month);
            buf.push(b'/');
            put_2(buf, day);
            buf.push(b'/');
            put_words(buf, wh, words, b'-', false);
            buf.push(b'-');
            put_u64(buf, id);
            buf.extend_from_slice(b".html");
        }
        1 => {
            // Blog: /yyyy/mm/slug-id/
            buf.push(b'/');
            put_u64(buf, year);
            buf.push(b'/');
            put_2(buf, month);
            buf.push(b'/');
            put_words(buf, wh, words, b'-', false);
            buf.push(b'-');
            put_u64(buf, id);
            buf.push(b'/');
        }
        2 => {
            // Shop: /products/slug-pid?variant=n&ref=section
            buf.extend_from_slice(b"/products/");
            put_words(buf, wh, words - 1, b'-', false);
            buf.extend_from_slice(b"-p");
            put_u64(buf, id);
            buf.extend_from_slice(b"?variant=");
            put_u64(buf, (h >> 20) % 1000);
            buf.extend_from_slice(b"&ref=");
            buf.extend_from_slice(sec);
        }
        3 => {
            // Forum: /forum/viewtopic.php?f=n&t=id&start=m
            buf.extend_from_slice(b"/forum/viewtopic.php?f=");
            put_u64(buf, (h >> 20) % 60);
            buf.extend_from_slice(b"&t=");
            put_u64(buf, id);
            if (h >> 30).is_multiple_of(3) {
                buf.extend_from_slice(b"&start=");
                put_u64(buf, (h >> 32) % 20 * 15);
            }
        }
        4 => {
            // Wiki: /wiki/Title_Words_(id)
            buf.extend_from_slice(b"/wiki/");
            put_words(buf, wh, words - 1, b'_', true);
            buf.extend_from_slice(b"_(");
            put_u64(buf, id);
            buf.push(b')');
        }
        _ => {
            // Generic CMS: /section/slug-id
            buf.push(b'/');
            buf.extend_from_slice(sec);
            buf.push(b'/');
            put_words(buf, wh, words, b'-', false);
            buf.push(b'-');
            put_u64(buf, id);
        }
    }
}

/// The stream generator.
#[derive(Debug, Clone)]
pub struct Stream {
    rng: Rng,
    /// URLs made so far, per host.
    made: Vec<u32>,
    /// Every host's scheme and name, one after the other.
    origins: Vec<u8>,
    /// Where each host's origin starts in `origins` (one more entry at the end).
    origin_at: Vec<u32>,
    page_host: u32,
    links_left: u32,
    pushes: u64,
    new_urls: u64,
    bytes: u64,
    digest: u64,
}

impl Stream {
    /// A stream from a seed: equal seeds give equal streams.
    pub fn new(seed: u64) -> Stream {
        let mut origins = Vec::with_capacity(HOSTS as usize * 24);
        let mut origin_at = Vec::with_capacity(HOSTS as usize + 1);
        for host in 0..HOSTS {
            origin_at.push(origins.len() as u32);
            write_origin(&mut origins, host);
        }
        origin_at.push(origins.len() as u32);
        Stream {
            rng: Rng::new(seed),
            made: vec![0; HOSTS as usize],
            origins,
            origin_at,
            page_host: 0,
            links_left: 0,
            pushes: 0,
            new_urls: 0,
            bytes: 0,
            digest: 0,
        }
    }

    /// A host rank drawn from the Zipf law: rank = HOSTS^u = e^(u ln HOSTS), u uniform in
    /// [0, 1); returned minus one.
    fn zipf(&mut self) -> u32 {
        let u = (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        let rank = (u * f64::from(HOSTS).ln()).exp() as u32;
        (rank.max(1) - 1).min(HOSTS - 1)
    }

    /// Writes the next URL into `buf` (cleared first).
    pub fn next_into(&mut self, buf: &mut Vec<u8>) {
        if self.links_left == 0 {
            self.page_host = self.zipf();
            self.links_left = 10 + self.rng.below(71) as u32;
        }
        self.links_left -= 1;
        let host = if self.rng.below(100) < LOCAL_LINKS {
            self.page_host
        } else {
            self.zipf()
        };
        let count = self.made[host as usize];
        // Keeps the fraction of new URLs at 20%.
        let p_new = if self.new_urls * 5 > self.pushes {
            10
        } else {
            30
        };
        let new = count == 0 || self.rng.below(100) < p_new;
        let idx = if new {
            self.made[host as usize] += 1;
            self.new_urls += 1;
            count
        } else if self.rng.below(100) < NAV_REPEATS {
            self.rng.below(u64::from(count.min(NAV))) as u32
        } else {
            // Recent URLs are more likely: back = count * u1 * u2.
            let r = self.rng.next_u64();
            let back = ((((u64::from(count) * (r >> 32)) >> 32) * (r & 0xFFFF_FFFF)) >> 32) as u32;
            count - 1 - back
        };
        self.pushes += 1;
        let h = host as usize;
        buf.clear();
        buf.extend_from_slice(
            &self.origins[self.origin_at[h] as usize..self.origin_at[h + 1] as usize],
        );
        write_path(buf, host, idx);
        self.bytes += buf.len() as u64;
        if new {
            self.digest = digest_step(self.digest, buf);
        }
    }

    /// URLs generated so far.
    pub fn pushes(&self) -> u64 {
        self.pushes
    }

    /// Distinct URLs generated so far: the exact count a sieve must emit.
    pub fn new_urls(&self) -> u64 {
        self.new_urls
    }

    /// The mean URL length in bytes, over all pushes.
    pub fn mean_len(&self) -> f64 {
        self.bytes as f64 / self.pushes.max(1) as f64
    }

    /// The fraction of pushes that repeat an earlier URL.
    pub fn repeat_fraction(&self) -> f64 {
        1.0 - self.new_urls as f64 / self.pushes.max(1) as f64
    }

    /// The order-sensitive digest of the distinct URLs in first-appearance order (see
    /// [`digest_step`]).
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// Hosts that got at least one URL.
    pub fn hosts_seen(&self) -> u64 {
        self.made.iter().filter(|&&c| c > 0).count() as u64
    }
}

/// One step of the order-sensitive digest of an emitted sequence: the xxh3 of the URL seeded
/// with the digest so far. Equal digests mean equal sequences (up to 64-bit collisions).
pub fn digest_step(digest: u64, url: &[u8]) -> u64 {
    xxh3_64_with_seed(url, digest)
}

/// The lines of a text file: split at each `\n`, the last one with or without it.
pub fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let any = !text.is_empty();
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    text.split(|&b| b == b'\n').filter(move |_| any)
}

/// URLs generated per batch of a [`Feed`].
const FEED_BATCH: usize = 4096;

/// The stream served to a peer in batches, with the time spent generating them measured
/// apart: a run's time minus the generator's is the time of the sieve itself.
pub struct Feed {
    /// The generator; none when the URLs come from a file, read whole into `data` at the
    /// start.
    stream: Option<Stream>,
    /// URLs served so far.
    served: u64,
    /// Bytes of the URLs served so far.
    served_bytes: u64,
    left: u64,
    data: Vec<u8>,
    ends: Vec<usize>,
    at: usize,
    generating: Duration,
}

impl Feed {
    /// The first `pushes` URLs of the stream of `seed`.
    pub fn new(seed: u64, pushes: u64) -> Feed {
        Feed {
            stream: Some(Stream::new(seed)),
            served: 0,
            served_bytes: 0,
            left: pushes,
            data: Vec::with_capacity(FEED_BATCH * 128),
            ends: Vec::with_capacity(FEED_BATCH),
            at: 0,
            generating: Duration::ZERO,
        }
    }

    /// The URLs of a text file, one per line (a line's end is `\n`; the last line may lack
    /// it), which must hold `pushes` lines. The file is read whole here, before a peer starts
    /// its clock; serving its URLs then costs next to nothing, and counts in the peer's own
    /// time (the generator's time stays 0).
    pub fn from_file(path: &Path, pushes: u64) -> Result<Feed, String> {
        let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut data = Vec::with_capacity(text.len());
        let mut ends = Vec::new();
        for line in lines(&text) {
            data.extend_from_slice(line);
            ends.push(data.len());
        }
        if ends.len() as u64 != pushes {
            return Err(format!(
                "{}: {} lines, not the {pushes} asked for",
                path.display(),
                ends.len()
            ));
        }
        Ok(Feed {
            stream: None,
            served: 0,
            served_bytes: 0,
            left: 0,
            data,
            ends,
            at: 0,
            generating: Duration::ZERO,
        })
    }

    /// The next URL (after the last one: an empty slice).
    pub fn next_url(&mut self) -> &[u8] {
        if self.at == self.ends.len() {
            self.refill();
        }
        let start = if self.at == 0 {
            0
        } else {
            self.ends[self.at - 1]
        };
        let Some(&end) = self.ends.get(self.at) else {
            return &[];
        };
        self.at += 1;
        self.served += 1;
        self.served_bytes += (end - start) as u64;
        &self.data[start..end]
    }

    /// Generates the next batch, timed.
    fn refill(&mut self) {
        let t = Instant::now();
        self.data.clear();
        self.ends.clear();
        self.at = 0;
        let Some(stream) = &mut self.stream else {
            return;
        };
        let n = (FEED_BATCH as u64).min(self.left) as usize;
        let mut buf = Vec::with_capacity(256);
        for _ in 0..n {
            stream.next_into(&mut buf);
            self.data.extend_from_slice(&buf);
            self.ends.push(self.data.len());
        }
        self.left -= n as u64;
        self.generating += t.elapsed();
    }

    /// The generator (its counts and digest cover the URLs generated so far); none for a
    /// file, whose answer the caller knows.
    pub fn stream(&self) -> Option<&Stream> {
        self.stream.as_ref()
    }

    /// URLs served so far.
    pub fn served(&self) -> u64 {
        self.served
    }

    /// The mean length in bytes of the URLs served so far.
    pub fn mean_len(&self) -> f64 {
        self.served_bytes as f64 / self.served.max(1) as f64
    }

    /// Seconds spent generating URLs.
    pub fn generating_s(&self) -> f64 {
        self.generating.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn lines_split_at_each_newline_the_last_one_with_or_without_it() {
        let split = |t: &[u8]| lines(t).map(<[u8]>::to_vec).collect::<Vec<_>>();
        assert!(split(b"").is_empty());
        assert_eq!(split(b"\n"), [b"".to_vec()]);
        assert_eq!(split(b"a\nbb\n"), [b"a".to_vec(), b"bb".to_vec()]);
        assert_eq!(split(b"a\nbb"), [b"a".to_vec(), b"bb".to_vec()]);
        assert_eq!(
            split(b"a\n\nc"),
            [b"a".to_vec(), b"".to_vec(), b"c".to_vec()]
        );
    }

    #[test]
    fn a_file_feed_serves_the_file_s_lines_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("urls.txt");
        std::fs::write(&path, "http://a/\nhttp://b/x\nhttp://a/").unwrap();
        let mut feed = Feed::from_file(&path, 3).unwrap();
        assert!(feed.stream().is_none());
        for want in ["http://a/", "http://b/x", "http://a/"] {
            assert_eq!(feed.next_url(), want.as_bytes());
        }
        assert!(feed.next_url().is_empty());
        assert_eq!(feed.served(), 3);
        assert!((feed.mean_len() - 28.0 / 3.0).abs() < 1e-9);
        let err = Feed::from_file(&path, 4).err().unwrap();
        assert!(err.contains("3 lines, not the 4"), "{err}");
    }

    #[test]
    fn the_feed_serves_the_stream_in_order_and_stops_at_its_count() {
        let n = 3 * FEED_BATCH as u64 + 17;
        let mut feed = Feed::new(5, n);
        let mut stream = Stream::new(5);
        let mut buf = Vec::new();
        for _ in 0..n {
            stream.next_into(&mut buf);
            assert_eq!(feed.next_url(), &buf[..]);
        }
        assert!(feed.next_url().is_empty());
        assert_eq!(feed.stream().unwrap().pushes(), n);
        assert_eq!(feed.stream().unwrap().digest(), stream.digest());
        assert_eq!(feed.served(), n);
        assert!(feed.generating_s() > 0.0);
    }

    #[test]
    fn new_urls_are_distinct_and_repeats_are_not() {
        let mut s = Stream::new(3);
        let mut seen = HashSet::new();
        let mut buf = Vec::new();
        let mut digest = 0;
        for _ in 0..300_000 {
            s.next_into(&mut buf);
            if seen.insert(buf.clone()) {
                digest = digest_step(digest, &buf);
            }
        }
        assert_eq!(seen.len() as u64, s.new_urls());
        assert_eq!(digest, s.digest());
        let r = s.repeat_fraction();
        assert!((0.78..0.82).contains(&r), "repeat fraction {r}");
        let len = s.mean_len();
        assert!((45.0..90.0).contains(&len), "mean length {len}");
    }

    #[test]
    fn every_host_index_pair_is_a_distinct_url() {
        let mut owner = std::collections::HashMap::new();
        let mut buf = Vec::new();
        for host in (0..HOSTS)
            .step_by(97)
            .chain([1, 63, 64, 4095, 4096, HOSTS - 1])
        {
            for idx in 0..400 {
                write_url(&mut buf, host, idx);
                assert!(buf.is_ascii() && !buf.contains(&b'\n'));
                let first = owner.entry(buf.clone()).or_insert((host, idx));
                assert_eq!(*first, (host, idx), "{}", String::from_utf8_lossy(&buf));
            }
        }
    }

    #[test]
    fn equal_seeds_give_equal_streams() {
        let (mut a, mut b) = (Stream::new(9), Stream::new(9));
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for _ in 0..10_000 {
            a.next_into(&mut x);
            b.next_into(&mut y);
            assert_eq!(x, y);
        }
    }
}
