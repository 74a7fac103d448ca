//! Pushes a seeded synthetic crawl stream through a sieve and prints throughput and sizes.
//!
//! `cargo run --release --example throughput -- [PUSHES] [MEMORY_MIB]` (defaults 10^7, 64).
//! It also prints the bytes read and written per push for each file kind (I/O amplification).
//! The stream: ~100k hosts drawn from a Zipf-like law, ~70-byte URLs, ~80% of pushes repeat
//! an earlier URL with a bias to recent ones (links on a page repeat its neighbourhood).

use std::any::Any;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use crivello::storage::sim::Rng;
use crivello::storage::{DirStorage, Storage, StorageFile};
use crivello::{Options, Sieve};

/// Bytes read and written, by file kind (the first letter of the name).
#[derive(Default, Debug)]
struct Counters {
    read: [AtomicU64; 5],
    written: [AtomicU64; 5],
}

fn kind(name: &str) -> usize {
    match name.as_bytes().first() {
        Some(b'a') => 0,
        Some(b'z') => 1,
        Some(b'f') => 2,
        Some(b'r') => 3,
        _ => 4,
    }
}

/// A storage that counts the bytes going through it.
#[derive(Debug)]
struct Counting {
    inner: DirStorage,
    counters: Arc<Counters>,
}

struct CountingFile {
    inner: Arc<dyn StorageFile>,
    kind: usize,
    counters: Arc<Counters>,
}

impl StorageFile for CountingFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = self.inner.read_at(buf, offset)?;
        self.counters.read[self.kind].fetch_add(n as u64, Relaxed);
        Ok(n)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.counters.written[self.kind].fetch_add(buf.len() as u64, Relaxed);
        self.inner.write_all_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
    fn start_writeback(&self, offset: u64, len: u64) {
        self.inner.start_writeback(offset, len)
    }
}

impl Counting {
    fn wrap(&self, name: &str, f: Arc<dyn StorageFile>) -> Arc<dyn StorageFile> {
        Arc::new(CountingFile {
            inner: f,
            kind: kind(name),
            counters: self.counters.clone(),
        })
    }
}

impl Storage for Counting {
    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        Ok(self.wrap(name, self.inner.create(name)?))
    }
    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        Ok(self.wrap(name, self.inner.open(name)?))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.inner.remove(name)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.inner.sync_dir()
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.inner.list()
    }
    fn lock(&self) -> io::Result<Box<dyn Any + Send + Sync>> {
        self.inner.lock()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

struct Stream {
    rng: Rng,
    recent: Vec<Vec<u8>>,
    next: usize,
    made: u64,
}

impl Stream {
    fn new(seed: u64) -> Stream {
        Stream {
            rng: Rng::new(seed),
            recent: Vec::new(),
            next: 0,
            made: 0,
        }
    }

    fn url(&mut self) -> Vec<u8> {
        if !self.recent.is_empty() && self.rng.below(100) < 80 {
            // A repeat: recent ones are more likely.
            let span = self.recent.len() as u64;
            let back = (self.rng.below(span) * self.rng.below(span)) / span;
            let i = (self.next as u64 + span - 1 - back) % span;
            return self.recent[i as usize].clone();
        }
        // Zipf-like host rank in 1..=100_000: rank = 100_000^u.
        let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let host = (100_000f64.powf(u)) as u64;
        self.made += 1;
        let url = format!(
            "https://www.host{host}.example.com/section{}/article-{}-{:x}.html",
            self.rng.below(50),
            self.made,
            self.rng.next_u64() & 0xffff
        )
        .into_bytes();
        const RECENT: usize = 1 << 16;
        if self.recent.len() < RECENT {
            self.recent.push(url.clone());
        } else {
            self.recent[self.next] = url.clone();
        }
        self.next = (self.next + 1) % RECENT;
        url
    }
}

fn main() -> crivello::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let pushes: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let mib: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(64);
    let dir = tempfile::tempdir().expect("temporary directory");
    let counters = Arc::new(Counters::default());
    let storage = Counting {
        inner: DirStorage::open(dir.path()).expect("temporary directory"),
        counters: counters.clone(),
    };
    let mut sieve = Sieve::open_with(Arc::new(storage), Options::new().memory(mib << 20).seed(1))?;
    let mut stream = Stream::new(7);
    let start = Instant::now();
    let mut popped = 0u64;
    for i in 0..pushes {
        let u = stream.url();
        sieve.push(&u)?;
        // A crawler fetches far fewer pages than it discovers links: one pop per 50 pushes
        // (IRLbot: 6.3 billion pages for 394 billion links).
        if i % 50_000 == 49_999 {
            popped += sieve.frontier_read(1000, usize::MAX, |_| Ok(()))? as u64;
        }
        if i % (1 << 20) == (1 << 20) - 1 {
            sieve.frontier_commit()?;
        }
    }
    sieve.flush()?;
    let secs = start.elapsed().as_secs_f64();
    let st = sieve.stats()?;
    println!(
        "pushes {pushes}  budget {mib} MiB  slots {}  time {secs:.2} s  rate {:.2} M pushes/s",
        st.slots,
        pushes as f64 / secs / 1e6
    );
    println!(
        "distinct {}  flushes {}  merges {}  segments {}  Z {:.2} bits/signature (bound {:.2})  A {} B  F {} B  popped while pushing {popped}",
        st.distinct,
        st.flushes,
        st.merges,
        st.segments,
        st.bytes_z as f64 * 8.0 / st.distinct as f64,
        (2f64.powi(64) / st.distinct as f64).log2() + std::f64::consts::LOG2_E,
        st.bytes_a,
        st.bytes_f
    );
    let per = |c: &[AtomicU64; 5], k: usize| c[k].load(Relaxed) as f64 / pushes as f64;
    println!(
        "bytes per push: A written {:.1} read {:.1} | Z written {:.2} read {:.2} | R written {:.2} read {:.2} | F written {:.1} | other written {:.3}",
        per(&counters.written, 0),
        per(&counters.read, 0),
        per(&counters.written, 1),
        per(&counters.read, 1),
        per(&counters.written, 3),
        per(&counters.read, 3),
        per(&counters.written, 2),
        per(&counters.written, 4)
    );
    sieve.close()
}
