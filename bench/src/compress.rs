//! `crivello-bench compress`: how many bytes per URL each candidate encoding of a frame would
//! take, and how fast, on the frontier's streams (distinct URLs in first-appearance order, as
//! F and the queues hold them) and on the push streams (every URL, as A holds them). Issue 20
//! chooses the frame encoding by these figures.
//!
//! A frame holds the records of up to `--frame` bytes, as crivello writes them today (each a
//! 4-byte length and the URL), and is encoded on its own (frames stay independently
//! decodable). Candidates:
//! - `raw`: today's frame;
//! - `front-prev`: each URL as the length of the prefix it shares with the previous URL of the
//!   frame, then the rest (LEB128 varints);
//! - `front-host`: the same against the last URL of the same host in the frame (the varint
//!   distance back to it, 0 for none, then shared length and rest);
//! - `lz4`, `zstd-1`, `zstd-3`: a block compressor over the raw frame;
//! - `front-prev+lz4`, `front-prev+zstd-1`, `front-host+zstd-1`: front coding, then the block
//!   compressor.
//!
//! Every encoding is decoded back and compared with the frame.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use crate::record::Result;

/// The arguments of `compress`.
#[derive(Debug, clap::Args)]
pub struct CompressArgs {
    /// Files of URLs, one per line (xz-compressed if their name ends in `.xz`).
    #[arg(long, value_delimiter = ',')]
    pub inputs: Vec<PathBuf>,
    /// Synthetic streams of this many pushes (seed 42): the pushes (as A holds them) and
    /// their distinct URLs in first-appearance order (as F does). 0: none.
    #[arg(long, value_parser = crate::parse_count, default_value = "1e6")]
    pub synthetic: u64,
    /// Bytes of records per frame.
    #[arg(long, default_value_t = 64 << 10)]
    pub frame: usize,
}

/// A candidate encoding.
#[derive(Debug, Clone, Copy)]
enum Codec {
    Raw,
    FrontPrev,
    FrontHost,
    Lz4,
    Zstd(i32),
    FrontPrevLz4,
    FrontPrevZstd(i32),
    FrontHostZstd(i32),
}

impl Codec {
    const ALL: [Codec; 10] = [
        Codec::Raw,
        Codec::FrontPrev,
        Codec::FrontHost,
        Codec::Lz4,
        Codec::Zstd(1),
        Codec::Zstd(3),
        Codec::FrontPrevLz4,
        Codec::FrontPrevZstd(1),
        Codec::FrontHostZstd(1),
        Codec::FrontHostZstd(3),
    ];

    fn name(self) -> String {
        match self {
            Codec::Raw => "raw (today)".into(),
            Codec::FrontPrev => "front-prev".into(),
            Codec::FrontHost => "front-host".into(),
            Codec::Lz4 => "lz4".into(),
            Codec::Zstd(l) => format!("zstd-{l}"),
            Codec::FrontPrevLz4 => "front-prev+lz4".into(),
            Codec::FrontPrevZstd(l) => format!("front-prev+zstd-{l}"),
            Codec::FrontHostZstd(l) => format!("front-host+zstd-{l}"),
        }
    }

    fn encode(self, urls: &[&[u8]]) -> Vec<u8> {
        match self {
            Codec::Raw => raw(urls),
            Codec::FrontPrev => front(urls, false),
            Codec::FrontHost => front(urls, true),
            Codec::Lz4 => lz4_flex::block::compress(&raw(urls)),
            Codec::Zstd(l) => zstd::bulk::compress(&raw(urls), l).expect("zstd"),
            Codec::FrontPrevLz4 => lz4_flex::block::compress(&front(urls, false)),
            Codec::FrontPrevZstd(l) => zstd::bulk::compress(&front(urls, false), l).expect("zstd"),
            Codec::FrontHostZstd(l) => zstd::bulk::compress(&front(urls, true), l).expect("zstd"),
        }
    }

    /// Decodes `bytes` (of a frame whose inner encoding is `inner_len` bytes) into URLs.
    fn decode(self, bytes: &[u8], inner_len: usize) -> Vec<Vec<u8>> {
        match self {
            Codec::Raw => unraw(bytes),
            Codec::FrontPrev => unfront(bytes, false),
            Codec::FrontHost => unfront(bytes, true),
            Codec::Lz4 => unraw(&lz4_flex::block::decompress(bytes, inner_len).expect("lz4")),
            Codec::Zstd(_) => unraw(&zstd::bulk::decompress(bytes, inner_len).expect("zstd")),
            Codec::FrontPrevLz4 => unfront(
                &lz4_flex::block::decompress(bytes, inner_len).expect("lz4"),
                false,
            ),
            Codec::FrontPrevZstd(_) => unfront(
                &zstd::bulk::decompress(bytes, inner_len).expect("zstd"),
                false,
            ),
            Codec::FrontHostZstd(_) => unfront(
                &zstd::bulk::decompress(bytes, inner_len).expect("zstd"),
                true,
            ),
        }
    }

    /// The length of the encoding under the block compressor, if any.
    fn inner_len(self, urls: &[&[u8]]) -> usize {
        match self {
            Codec::Lz4 | Codec::Zstd(_) => raw(urls).len(),
            Codec::FrontPrevLz4 | Codec::FrontPrevZstd(_) => front(urls, false).len(),
            Codec::FrontHostZstd(_) => front(urls, true).len(),
            _ => 0,
        }
    }
}

fn raw(urls: &[&[u8]]) -> Vec<u8> {
    let mut b = Vec::with_capacity(urls.iter().map(|u| u.len() + 4).sum());
    for u in urls {
        b.extend_from_slice(&(u.len() as u32).to_le_bytes());
        b.extend_from_slice(u);
    }
    b
}

fn unraw(b: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let n = u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes")) as usize;
        out.push(b[at + 4..at + 4 + n].to_vec());
        at += 4 + n;
    }
    out
}

fn put_varint(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push(v as u8 | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

fn get_varint(b: &[u8], at: &mut usize) -> u64 {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let byte = b[*at];
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return v;
        }
        shift += 7;
    }
}

/// The host of a URL: after `://`, up to the next `/`, `?` or `:`.
fn host(url: &[u8]) -> &[u8] {
    let start = url
        .windows(3)
        .position(|w| w == b"://")
        .map_or(0, |i| i + 3);
    let end = url[start..]
        .iter()
        .position(|&c| c == b'/' || c == b'?' || c == b':')
        .map_or(url.len(), |i| start + i);
    &url[start..end]
}

fn shared(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Front coding: against the previous URL (`by_host` false: `shared | rest_len | rest`), or
/// against the last URL of the same host (`back | shared | rest_len | rest`, `back` 0: none).
fn front(urls: &[&[u8]], by_host: bool) -> Vec<u8> {
    let mut b = Vec::new();
    let mut last_of: HashMap<&[u8], usize> = HashMap::new();
    for (i, u) in urls.iter().enumerate() {
        let reference = if by_host {
            let h = host(u);
            let r = last_of.insert(h, i);
            let back = r.map_or(0, |r| i - r);
            put_varint(&mut b, back as u64);
            r.map(|r| urls[r])
        } else {
            i.checked_sub(1).map(|p| urls[p])
        };
        let s = reference.map_or(0, |r| shared(r, u));
        put_varint(&mut b, s as u64);
        put_varint(&mut b, (u.len() - s) as u64);
        b.extend_from_slice(&u[s..]);
    }
    b
}

fn unfront(b: &[u8], by_host: bool) -> Vec<Vec<u8>> {
    let end = b.len();
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut at = 0;
    while at < end {
        let reference = if by_host {
            let back = get_varint(b, &mut at) as usize;
            (back > 0).then(|| out.len() - back)
        } else {
            out.len().checked_sub(1)
        };
        let s = get_varint(b, &mut at) as usize;
        let n = get_varint(b, &mut at) as usize;
        let mut u = reference.map_or(Vec::new(), |r| out[r][..s].to_vec());
        u.extend_from_slice(&b[at..at + n]);
        at += n;
        out.push(u);
    }
    out
}

/// A stream to measure.
struct Stream {
    name: String,
    urls: Vec<Vec<u8>>,
}

fn read_lines(path: &PathBuf) -> Result<Vec<Vec<u8>>> {
    let bytes = if path.extension().is_some_and(|e| e == "xz") {
        let out = std::process::Command::new("xz")
            .arg("-dc")
            .arg(path)
            .output()
            .map_err(|e| format!("xz -dc {}: {e}", path.display()))?;
        out.stdout
    } else {
        std::fs::read(path)?
    };
    Ok(bytes
        .split(|&c| c == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// Runs `compress`.
pub fn run(a: &CompressArgs) -> Result<()> {
    let mut streams = Vec::new();
    for path in &a.inputs {
        let name = path
            .file_name()
            .map(|f| f.to_string_lossy().replace(".txt.xz", ""))
            .unwrap_or_default();
        streams.push(Stream {
            name,
            urls: read_lines(path)?,
        });
    }
    if a.synthetic > 0 {
        let mut s = crate::stream::Stream::new(42);
        let mut pushes = Vec::with_capacity(a.synthetic as usize);
        let mut buf = Vec::new();
        for _ in 0..a.synthetic {
            s.next_into(&mut buf);
            pushes.push(buf.clone());
        }
        let mut seen = std::collections::HashSet::new();
        let distinct: Vec<Vec<u8>> = pushes.iter().filter(|u| seen.insert(*u)).cloned().collect();
        streams.push(Stream {
            name: format!("synthetic seed 42, distinct ({})", distinct.len()),
            urls: distinct,
        });
        streams.push(Stream {
            name: format!("synthetic seed 42, pushes ({})", pushes.len()),
            urls: pushes,
        });
    }
    println!(
        "| stream | URLs | URL bytes | encoding | bytes / URL bytes | bytes per URL | encode MB/s | decode MB/s |"
    );
    let mut avl = Vec::new();
    println!("|---|---|---|---|---|---|---|---|");
    for s in &streams {
        if !s.name.contains("pushes") {
            avl.push((s.name.clone(), avl_peer(&s.urls)?));
        }
        // Frames of up to `frame` bytes of records.
        let mut frames: Vec<Vec<&[u8]>> = vec![Vec::new()];
        let mut size = 0;
        for u in &s.urls {
            if size + u.len() + 4 > a.frame && !frames.last().expect("a frame").is_empty() {
                frames.push(Vec::new());
                size = 0;
            }
            frames.last_mut().expect("a frame").push(u);
            size += u.len() + 4;
        }
        let url_bytes: usize = s.urls.iter().map(Vec::len).sum();
        for codec in Codec::ALL {
            let inner: Vec<usize> = frames.iter().map(|f| codec.inner_len(f)).collect();
            let t = Instant::now();
            let encoded: Vec<Vec<u8>> = frames.iter().map(|f| codec.encode(f)).collect();
            let enc_s = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let decoded: Vec<Vec<Vec<u8>>> = encoded
                .iter()
                .zip(&inner)
                .map(|(e, &n)| codec.decode(e, n))
                .collect();
            let dec_s = t.elapsed().as_secs_f64();
            for (f, d) in frames.iter().zip(&decoded) {
                if f.len() != d.len() || f.iter().zip(d).any(|(x, y)| *x != y.as_slice()) {
                    return Err(format!("{}: {} does not round-trip", s.name, codec.name()).into());
                }
            }
            let bytes: usize = encoded.iter().map(Vec::len).sum();
            println!(
                "| {} | {} | {} | {} | {:.1} % | {:.1} | {:.0} | {:.0} |",
                s.name,
                s.urls.len(),
                url_bytes,
                codec.name(),
                100.0 * bytes as f64 / url_bytes as f64,
                bytes as f64 / s.urls.len() as f64,
                url_bytes as f64 / enc_s / 1e6,
                url_bytes as f64 / dec_s / 1e6
            );
        }
    }
    println!();
    println!("Seed 004's AVL tree of front-coded URLs (distinct URLs; retrieval by id checked):");
    println!();
    println!("| stream | bytes / URL bytes (data + pointers) | with the tree nodes | inserts/s | retrievals/s |");
    println!("|---|---|---|---|---|");
    for (name, (search, spider, ins, get)) in avl {
        println!(
            "| {name} | {:.1} % | {:.1} % | {:.0} | {:.0} |",
            100.0 * search,
            100.0 * spider,
            ins,
            get
        );
    }
    Ok(())
}

/// Seed 004's structure (Koht-arsa and Sanguanpong, "In-memory URL compression"): an AVL tree
/// of URLs in lexicographic order, each stored as a reference to an earlier URL (the node of
/// the insertion path sharing the longest prefix with it), the length of that prefix (one
/// byte) and the rest, NUL-terminated; nodes, data and pointers in three arrays. A URL is
/// found by a tree search and retrieved by its id, rebuilding it along its references.
pub struct AvlUrls {
    /// Per node: left and right children (`u32::MAX`: none) and height.
    nodes: Vec<(u32, u32, u8)>,
    /// The compressed URLs: per URL `ref_id u32 | common u8 | rest | 0`.
    data: Vec<u8>,
    /// Per URL id: the offset of its record in `data`.
    ptrs: Vec<u64>,
    root: u32,
}

const NIL: u32 = u32::MAX;

impl AvlUrls {
    /// An empty tree.
    pub fn new() -> AvlUrls {
        AvlUrls {
            nodes: Vec::new(),
            data: Vec::new(),
            ptrs: Vec::new(),
            root: NIL,
        }
    }

    /// The URL of id `id`, rebuilt along its references into `out`.
    pub fn get(&self, id: u32, out: &mut Vec<u8>) {
        // The chain of references back to a URL stored whole (common prefix 0, or id 0).
        let record = |id: u32| {
            let at = self.ptrs[id as usize] as usize;
            let reference = u32::from_le_bytes(self.data[at..at + 4].try_into().expect("4"));
            let common = self.data[at + 4] as usize;
            let rest = &self.data[at + 5..];
            let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
            (reference, common, &rest[..end])
        };
        let mut chain = Vec::new();
        let mut n = id;
        loop {
            chain.push(n);
            let (reference, common, _) = record(n);
            if n == 0 || common == 0 {
                break;
            }
            n = reference;
        }
        out.clear();
        for &n in chain.iter().rev() {
            let (_, common, rest) = record(n);
            out.truncate(common);
            out.extend_from_slice(rest);
        }
    }

    fn height(&self, n: u32) -> u8 {
        if n == NIL {
            0
        } else {
            self.nodes[n as usize].2
        }
    }

    fn fix(&mut self, n: u32) {
        let (l, r, _) = self.nodes[n as usize];
        self.nodes[n as usize].2 = 1 + self.height(l).max(self.height(r));
    }

    fn rotate_right(&mut self, n: u32) -> u32 {
        let l = self.nodes[n as usize].0;
        self.nodes[n as usize].0 = self.nodes[l as usize].1;
        self.nodes[l as usize].1 = n;
        self.fix(n);
        self.fix(l);
        l
    }

    fn rotate_left(&mut self, n: u32) -> u32 {
        let r = self.nodes[n as usize].1;
        self.nodes[n as usize].1 = self.nodes[r as usize].0;
        self.nodes[r as usize].0 = n;
        self.fix(n);
        self.fix(r);
        r
    }

    fn balance(&mut self, n: u32) -> u32 {
        self.fix(n);
        let (l, r, _) = self.nodes[n as usize];
        let (hl, hr) = (i32::from(self.height(l)), i32::from(self.height(r)));
        if hl > hr + 1 {
            let (ll, lr, _) = self.nodes[l as usize];
            if self.height(lr) > self.height(ll) {
                self.nodes[n as usize].0 = self.rotate_left(l);
            }
            return self.rotate_right(n);
        }
        if hr > hl + 1 {
            let (rl, rr, _) = self.nodes[r as usize];
            if self.height(rl) > self.height(rr) {
                self.nodes[n as usize].1 = self.rotate_right(r);
            }
            return self.rotate_left(n);
        }
        n
    }

    /// Inserts `url` unless present; returns whether it was new. `scratch` holds URLs
    /// rebuilt on the way.
    pub fn insert(&mut self, url: &[u8], scratch: &mut Vec<u8>) -> bool {
        // The path from the root, and the node on it sharing the longest prefix.
        let mut path = Vec::with_capacity(40);
        let (mut best, mut best_common) = (0u32, 0usize);
        let mut n = self.root;
        while n != NIL {
            self.get(n, scratch);
            let common = shared(scratch, url);
            if common > best_common {
                (best, best_common) = (n, common);
            }
            match url.cmp(scratch.as_slice()) {
                std::cmp::Ordering::Equal => return false,
                std::cmp::Ordering::Less => {
                    path.push((n, true));
                    n = self.nodes[n as usize].0;
                }
                std::cmp::Ordering::Greater => {
                    path.push((n, false));
                    n = self.nodes[n as usize].1;
                }
            }
        }
        let id = self.ptrs.len() as u32;
        let common = best_common.min(255);
        self.ptrs.push(self.data.len() as u64);
        self.data.extend_from_slice(&best.to_le_bytes());
        self.data.push(common as u8);
        self.data.extend_from_slice(&url[common..]);
        self.data.push(0);
        self.nodes.push((NIL, NIL, 1));
        // Link the leaf, then rebalance up the path.
        let mut child = id;
        for &(p, left) in path.iter().rev() {
            if left {
                self.nodes[p as usize].0 = child;
            } else {
                self.nodes[p as usize].1 = child;
            }
            child = self.balance(p);
        }
        self.root = child;
        true
    }

    /// Bytes held: the data and pointers (a search engine's use), and with the tree nodes (a
    /// spider's, which inserts), as the paper counts them (8-byte nodes, 4-byte pointers).
    pub fn bytes(&self) -> (usize, usize) {
        let without_tree = self.data.len() + 4 * self.ptrs.len();
        (without_tree, without_tree + 8 * self.nodes.len())
    }
}

/// Seed 004's tree on the distinct URLs of a stream: bytes per URL against the URL bytes, and
/// URLs inserted and retrieved per second. Every URL is retrieved by id and compared.
pub fn avl_peer(urls: &[Vec<u8>]) -> Result<(f64, f64, f64, f64)> {
    let mut tree = AvlUrls::new();
    let mut scratch = Vec::new();
    let t = Instant::now();
    let mut ids = Vec::new();
    for u in urls {
        if tree.insert(u, &mut scratch) {
            ids.push(u);
        }
    }
    let insert_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut out = Vec::new();
    for (id, u) in ids.iter().enumerate() {
        tree.get(id as u32, &mut out);
        if out != **u {
            return Err(format!("seed 004's tree: URL {id} does not come back").into());
        }
    }
    let get_s = t.elapsed().as_secs_f64();
    let url_bytes: usize = ids.iter().map(|u| u.len()).sum();
    let (search, spider) = tree.bytes();
    Ok((
        search as f64 / url_bytes as f64,
        spider as f64 / url_bytes as f64,
        urls.len() as f64 / insert_s,
        ids.len() as f64 / get_s,
    ))
}
