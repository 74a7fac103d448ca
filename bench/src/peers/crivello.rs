//! crivello: the durable sieve, in a temporary directory, with background flushes and a
//! crawler-like consumer; also its open time, and its recovery after a crash with a full
//! write-ahead log.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crivello::{Options, Sieve};

use super::PeerArgs;
use crate::record::{hex, Record, Recovery, Result};
use crate::stream::{digest_step, Feed};

/// Pushes between two reads of the frontier by the consumer.
pub const POP_EVERY: u64 = 50_000;
/// URLs read from the frontier each time (one pop per 50 pushes).
pub const POP_BATCH: usize = 1_000;
/// Pushes between two durable commits of the consumer's cursor.
pub const COMMIT_EVERY: u64 = 1 << 20;
/// The sieve's signature seed (fixed, for repeatable runs).
const SIEVE_SEED: u64 = 1;

/// The options of every store of the benchmark. `CRIVELLO_RECENT_CACHE=BYTES` sets the
/// cache of recent signatures (0 turns it off), to measure what it brings.
fn options(memory_mib: u64) -> Options {
    let o = Options::new()
        .memory((memory_mib as usize) << 20)
        .seed(SIEVE_SEED);
    match std::env::var("CRIVELLO_RECENT_CACHE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(bytes) => o.recent_cache(bytes),
        None => o,
    }
}

/// Runs the sieve on the stream.
pub fn run(args: &PeerArgs) -> Result<Record> {
    let dir = args.tempdir("crivello")?;
    let mut sieve = Sieve::open(dir.path(), options(args.memory_mib))?;
    let slots = sieve.stats()?.slots;
    let mut feed = args.feed()?;
    let mut digest = 0u64;
    let mut popped = 0u64;
    let mut stalls = Duration::ZERO;
    let start = Instant::now();
    for i in 0..args.pushes {
        let buf = feed.next_url();
        if i > 0 && i % slots == 0 {
            // S is full: this push hands it to the flush thread, and waits for the previous
            // flush if that one is still running.
            let t = Instant::now();
            sieve.push(buf)?;
            stalls += t.elapsed();
        } else {
            sieve.push(buf)?;
        }
        if i % POP_EVERY == POP_EVERY - 1 {
            popped += sieve.frontier_read(POP_BATCH, usize::MAX, |url| {
                digest = digest_step(digest, url);
                Ok(())
            })? as u64;
        }
        if i % COMMIT_EVERY == COMMIT_EVERY - 1 {
            sieve.frontier_commit()?;
        }
        super::progress("crivello", i, args.pushes, start);
    }
    let t = Instant::now();
    sieve.flush()?;
    let final_flush = t.elapsed();
    let mut r = args.record("crivello", &feed, start, 0);
    let st = sieve.stats()?;
    // Not timed: read the rest of the frontier, to check the emitted sequence.
    loop {
        let n = sieve.frontier_read(1 << 16, usize::MAX, |url| {
            digest = digest_step(digest, url);
            Ok(())
        })?;
        if n == 0 {
            break;
        }
    }
    sieve.close()?;
    let t = Instant::now();
    let mut reopened = Sieve::open(dir.path(), options(args.memory_mib))?;
    let open_s = t.elapsed().as_secs_f64();
    // The disk after close, when the files superseded by the last merges are gone.
    let disk = reopened.stats()?;
    reopened.close()?;
    r.emitted = st.emitted;
    r.digest = hex(digest);
    r.flush_s = Some((stalls + final_flush).as_secs_f64());
    r.flushes = Some(st.flushes);
    r.z_bytes = Some(disk.bytes_z);
    r.disk_bytes =
        Some(disk.bytes_a + disk.bytes_z + disk.bytes_r + disk.bytes_f + disk.bytes_meta);
    r.popped = Some(popped);
    r.open_s = Some(open_s);
    r.notes.push(format!(
        "{} slots per buffer of S, {} merges; flush time = waits of the pushing thread for \
         background flushes ({:.2} s) + the final flush ({:.2} s)",
        st.slots,
        st.merges,
        stalls.as_secs_f64(),
        final_flush.as_secs_f64()
    ));
    Ok(r)
}

/// The `crash-fill` child: creates a store in `dir`, pushes one URL less than S holds,
/// syncs, and exits without closing (a crash with a full write-ahead log A).
pub fn crash_fill(dir: &Path, memory_mib: u64, seed: u64) -> Result<()> {
    let mut sieve = Sieve::open(dir, options(memory_mib))?;
    let slots = sieve.stats()?.slots;
    let mut feed = Feed::new(seed, slots - 1);
    for _ in 0..slots - 1 {
        let buf = feed.next_url();
        sieve.push(buf)?;
    }
    sieve.sync()?;
    println!("{}", slots - 1);
    std::process::exit(0);
}

/// The A files of a store.
fn a_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("a-") && name.ends_with(".log")
        })
        .map(|e| e.path())
        .collect();
    files.sort();
    Ok(files)
}

/// Reads every file in turn with `std::fs::read`; returns the seconds taken.
fn read_all(files: &[PathBuf]) -> Result<f64> {
    let t = Instant::now();
    let mut bytes = 0usize;
    for f in files {
        bytes += std::fs::read(f)?.len();
    }
    std::hint::black_box(bytes);
    Ok(t.elapsed().as_secs_f64())
}

/// Evicts every file of `dir` from the page cache (they are synced first, so their pages
/// are clean). Returns false if the kernel refused.
fn evict(dir: &Path) -> Result<bool> {
    use std::os::fd::AsRawFd;
    let mut ok = true;
    for e in std::fs::read_dir(dir)?.flatten() {
        if !e.metadata()?.is_file() {
            continue;
        }
        let f = File::open(e.path())?;
        f.sync_all()?;
        // SAFETY: a valid open file descriptor; the call only advises the kernel.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        ok &= rc == 0;
    }
    Ok(ok)
}

/// Makes a crashed store with a full A in a new temporary directory, in a child process.
fn crashed_store(base: &Path, memory_mib: u64, seed: u64) -> Result<(tempfile::TempDir, u64)> {
    let dir = tempfile::Builder::new()
        .prefix("crivello-bench-crash-")
        .tempdir_in(base)?;
    let out = Command::new(std::env::current_exe()?)
        .arg("crash-fill")
        .arg("--dir")
        .arg(dir.path())
        .args([
            "--memory",
            &memory_mib.to_string(),
            "--seed",
            &seed.to_string(),
        ])
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "crash-fill failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let records = String::from_utf8_lossy(&out.stdout).trim().parse()?;
    Ok((dir, records))
}

/// One warm measurement: (open seconds, read seconds), the A files in the page cache.
fn warm_once(base: &Path, memory_mib: u64, seed: u64) -> Result<(f64, f64, u64, u64)> {
    let (dir, records) = crashed_store(base, memory_mib, seed)?;
    let files = a_files(dir.path())?;
    let a_bytes = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    read_all(&files)?; // brings them into the page cache
    let read = read_all(&files)?;
    let t = Instant::now();
    let sieve = Sieve::open(dir.path(), options(memory_mib))?;
    let open = t.elapsed().as_secs_f64();
    sieve.close()?;
    Ok((open, read, records, a_bytes))
}

/// One cold measurement: (open seconds, read seconds), the store's files evicted from the
/// page cache before each; `None` if they cannot be evicted.
fn cold_once(base: &Path, memory_mib: u64, seed: u64) -> Result<Option<(f64, f64)>> {
    let (dir, _) = crashed_store(base, memory_mib, seed)?;
    let files = a_files(dir.path())?;
    if !evict(dir.path())? {
        return Ok(None);
    }
    let read = read_all(&files)?;
    evict(dir.path())?;
    let t = Instant::now();
    let sieve = Sieve::open(dir.path(), options(memory_mib))?;
    let open = t.elapsed().as_secs_f64();
    sieve.close()?;
    Ok(Some((open, read)))
}

/// The median of some values.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Measures the recovery after a crash with a full A against reading the A files, `reps`
/// times each (medians): with the files in the page cache, and with them evicted first.
pub fn recovery(base: &Path, memory_mib: u64, seed: u64, reps: usize) -> Result<Recovery> {
    let mut rec = Recovery::default();
    let (mut opens, mut reads) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        let (open, read, records, a_bytes) = warm_once(base, memory_mib, seed)?;
        opens.push(open);
        reads.push(read);
        (rec.records, rec.a_bytes) = (records, a_bytes);
    }
    rec.warm_open_s = median(opens);
    rec.warm_read_s = median(reads);
    let (mut opens, mut reads) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        match cold_once(base, memory_mib, seed)? {
            Some((open, read)) => {
                opens.push(open);
                reads.push(read);
            }
            None => break,
        }
    }
    if !opens.is_empty() {
        rec.cold_open_s = Some(median(opens));
        rec.cold_read_s = Some(median(reads));
    }
    rec.reps = reps.max(1) as u64;
    Ok(rec)
}
