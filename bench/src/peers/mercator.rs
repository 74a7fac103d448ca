//! mercator: the textbook Mercator sieve (Heydon & Najork, 1999), with no crash safety.
//!
//! S is an array of `memory / 8` signatures in RAM; every URL is appended to a plain file A.
//! When S is full it is sorted and deduplicated, then merged with Z, a flat file of all the
//! signatures ever seen, sorted: the merge writes a complete new Z (all of Z is rewritten at
//! every flush) and keeps in S the signatures Z did not have. Then A is read back in order,
//! and each URL whose signature is new (and not yet emitted) is appended to the frontier F.
//! The look-up of a URL's signature among the new ones goes through a 1 MiB bucket index of
//! their top bits (signatures are uniform), much faster than a binary search.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use xxhash_rust::xxh3::xxh3_64;

use super::PeerArgs;
use crate::record::{hex, Record, Result};
use crate::stream::digest_step;

/// Bytes of each file buffer.
const IO_BUF: usize = 1 << 20;
/// Bits of the signature prefix of the bucket index of new signatures (2^18 buckets: 1 MiB).
pub const INDEX_BITS: u32 = 18;

/// The sieve's state.
#[derive(Debug)]
pub struct Mercator {
    s: Vec<u64>,
    slots: usize,
    a: BufWriter<File>,
    a_path: PathBuf,
    z_path: PathBuf,
    z_tmp: PathBuf,
    f: BufWriter<File>,
    /// Signatures in Z.
    pub distinct: u64,
    /// URLs appended to F.
    pub emitted: u64,
    /// Digest of F's URLs in order.
    pub digest: u64,
    /// Flushes made.
    pub flushes: u64,
    /// Time spent in flushes.
    pub flush_time: Duration,
    /// Bytes written to A, Z and F.
    pub written: u64,
}

impl Mercator {
    /// A new sieve of `slots` signatures, its files in `dir`.
    pub fn new(dir: &std::path::Path, slots: usize) -> Result<Mercator> {
        let a_path = dir.join("a.txt");
        Ok(Mercator {
            s: Vec::with_capacity(slots),
            slots,
            a: BufWriter::with_capacity(IO_BUF, File::create(&a_path)?),
            a_path,
            z_path: dir.join("z.bin"),
            z_tmp: dir.join("z.tmp"),
            f: BufWriter::with_capacity(IO_BUF, File::create(dir.join("f.txt"))?),
            distinct: 0,
            emitted: 0,
            digest: 0,
            flushes: 0,
            flush_time: Duration::ZERO,
            written: 0,
        })
    }

    /// Pushes one URL (no newline in it).
    pub fn push(&mut self, url: &[u8]) -> Result<()> {
        self.a.write_all(url)?;
        self.a.write_all(b"\n")?;
        self.written += url.len() as u64 + 1;
        self.s.push(xxh3_64(url));
        if self.s.len() == self.slots {
            self.flush()?;
        }
        Ok(())
    }

    /// Merges S with Z, and emits A's new URLs to F.
    pub fn flush(&mut self) -> Result<()> {
        if self.s.is_empty() {
            return Ok(());
        }
        let t = Instant::now();
        self.s.sort_unstable();
        self.s.dedup();
        let new = self.merge()?;
        self.s.truncate(new);
        self.emit()?;
        self.s.clear();
        self.flushes += 1;
        self.flush_time += t.elapsed();
        Ok(())
    }

    /// Writes the merge of Z and S as the new Z; moves S's new signatures to its front and
    /// returns how many there are.
    fn merge(&mut self) -> Result<usize> {
        let mut old = match File::open(&self.z_path) {
            Ok(f) => Some(BufReader::with_capacity(IO_BUF, f)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        let mut next = || -> Result<Option<u64>> {
            let Some(r) = old.as_mut() else {
                return Ok(None);
            };
            let mut b = [0u8; 8];
            match r.read_exact(&mut b) {
                Ok(()) => Ok(Some(u64::from_le_bytes(b))),
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
                Err(e) => Err(e.into()),
            }
        };
        let mut out = BufWriter::with_capacity(IO_BUF, File::create(&self.z_tmp)?);
        let mut written = 0u64;
        let mut cur = next()?;
        let mut new = 0usize;
        for i in 0..self.s.len() {
            let x = self.s[i];
            while let Some(z) = cur {
                if z >= x {
                    break;
                }
                out.write_all(&z.to_le_bytes())?;
                written += 1;
                cur = next()?;
            }
            if cur == Some(x) {
                continue; // seen before: written when passed
            }
            out.write_all(&x.to_le_bytes())?;
            written += 1;
            self.s[new] = x;
            new += 1;
        }
        while let Some(z) = cur {
            out.write_all(&z.to_le_bytes())?;
            written += 1;
            cur = next()?;
        }
        out.flush()?;
        drop(out);
        std::fs::rename(&self.z_tmp, &self.z_path)?;
        self.distinct = written;
        self.written += written * 8;
        Ok(new)
    }

    /// Reads A back in order and appends to F each URL whose signature is new and not yet
    /// emitted; then empties A.
    fn emit(&mut self) -> Result<()> {
        self.a.flush()?;
        let mut done = vec![0u64; self.s.len().div_ceil(64)];
        let index = Index::new(&self.s);
        let mut a = BufReader::with_capacity(IO_BUF, File::open(&self.a_path)?);
        let mut line = Vec::with_capacity(256);
        loop {
            line.clear();
            if a.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            let url = line.strip_suffix(b"\n").unwrap_or(&line);
            let x = xxh3_64(url);
            if let Some(pos) = index.find(&self.s, x) {
                let (w, mask) = (pos / 64, 1u64 << (pos % 64));
                if done[w] & mask == 0 {
                    done[w] |= mask;
                    self.f.write_all(&line)?;
                    self.written += line.len() as u64;
                    self.emitted += 1;
                    self.digest = digest_step(self.digest, url);
                }
            }
        }
        self.f.flush()?;
        self.a = BufWriter::with_capacity(IO_BUF, File::create(&self.a_path)?);
        Ok(())
    }
}

/// A bucket index over sorted signatures: the first position of each value of the top
/// [`INDEX_BITS`] bits, so that a look-up scans one bucket of a few entries (one or two
/// cache lines) instead of searching the whole array.
#[derive(Debug)]
pub struct Index {
    starts: Vec<u32>,
}

impl Index {
    /// The index of the sorted `s`.
    pub fn new(s: &[u64]) -> Index {
        let mut starts = vec![0u32; (1 << INDEX_BITS) + 1];
        for &x in s {
            starts[(x >> (64 - INDEX_BITS)) as usize + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        Index { starts }
    }

    /// The position of `x` in `s` (the array the index was made of).
    pub fn find(&self, s: &[u64], x: u64) -> Option<usize> {
        let b = (x >> (64 - INDEX_BITS)) as usize;
        let (lo, hi) = (self.starts[b] as usize, self.starts[b + 1] as usize);
        s[lo..hi].iter().position(|&y| y == x).map(|i| lo + i)
    }
}

/// Runs the sieve on the stream.
pub fn run(args: &PeerArgs) -> Result<Record> {
    let dir = args.tempdir("mercator")?;
    let slots = ((args.memory_mib << 20) / 8) as usize;
    let mut m = Mercator::new(dir.path(), slots)?;
    let mut feed = args.feed()?;
    let start = Instant::now();
    for i in 0..args.pushes {
        let buf = feed.next_url();
        m.push(buf)?;
        super::progress("mercator", i, args.pushes, start);
    }
    m.flush()?;
    let mut r = args.record("mercator", &feed, start, m.emitted);
    r.digest = hex(m.digest);
    r.flush_s = Some(m.flush_time.as_secs_f64());
    r.flushes = Some(m.flushes);
    r.z_bytes = Some(m.distinct * 8);
    r.disk_bytes = Some(super::dir_size(dir.path()));
    r.bytes_written = Some(m.written);
    r.notes.push(format!(
        "{slots} slots of S; Z rewritten at every flush; no fsync, no crash safety; {:.0}% of \
         the time in flushes",
        m.flush_time.as_secs_f64() * 100.0 / r.seconds
    ));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_finds_exactly_the_members() {
        let mut s: Vec<u64> = (0..100_000u64).map(|i| xxh3_64(&i.to_le_bytes())).collect();
        s.extend([0, 1, u64::MAX]);
        s.sort_unstable();
        let index = Index::new(&s);
        for (i, &x) in s.iter().enumerate() {
            assert_eq!(index.find(&s, x), Some(i));
        }
        for i in 100_000..200_000u64 {
            assert_eq!(index.find(&s, xxh3_64(&i.to_le_bytes())), None);
        }
        assert_eq!(Index::new(&[]).find(&[], 5), None);
    }

    #[test]
    fn emits_each_new_url_once_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = Mercator::new(dir.path(), 4).unwrap();
        for u in ["a", "b", "a", "c", "b", "d", "a", "e", "c", "f"] {
            m.push(u.as_bytes()).unwrap();
        }
        m.flush().unwrap();
        let f = std::fs::read_to_string(dir.path().join("f.txt")).unwrap();
        assert_eq!(f, "a\nb\nc\nd\ne\nf\n");
        assert_eq!((m.distinct, m.emitted, m.flushes), (6, 6, 3));
    }
}
