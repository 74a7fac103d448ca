//! The sieves compared: each one takes the same seeded stream and emits its distinct URLs in
//! first-appearance order. Each runs in a process of its own, so that its peak RSS is its
//! own.

pub mod bloom;
pub mod crivello;
pub mod fjall;
pub mod hashset;
pub mod mercator;

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::record::{hex, Record, Result};
use crate::stream::Feed;

/// Every peer, in the order `run` runs them by default.
pub const ALL: [&str; 6] = ["none", "hashset", "crivello", "bloom", "mercator", "fjall"];

/// What a peer's process is told.
#[derive(Debug, Clone)]
pub struct PeerArgs {
    /// URLs to push.
    pub pushes: u64,
    /// The scale asked for (`pushes` may be capped below it).
    pub requested: u64,
    /// The memory budget, MiB.
    pub memory_mib: u64,
    /// The stream's seed.
    pub seed: u64,
    /// Where to make the peer's temporary directory.
    pub dir: PathBuf,
    /// A file of URLs, one per line, pushed instead of the generated stream.
    pub input: Option<PathBuf>,
}

impl PeerArgs {
    /// A record with the stream's figures and the run's timing filled in.
    pub fn record(&self, name: &str, feed: &Feed, start: Instant, emitted: u64) -> Record {
        let seconds = start.elapsed().as_secs_f64();
        let pushes = feed.served();
        // A file's answer is filled in by `run`, which reads its expected output.
        let truth = feed.stream().map(|s| (s.new_urls(), hex(s.digest())));
        let (truth_distinct, truth_digest) = truth.unwrap_or_default();
        Record {
            peer: name.to_owned(),
            requested: self.requested,
            pushes,
            memory_mib: self.memory_mib,
            seed: self.seed,
            seconds,
            pushes_per_s: pushes as f64 / seconds,
            generator_s: Some(feed.generating_s()),
            peak_rss_kib: peak_rss_kib(),
            emitted,
            truth_distinct,
            truth_digest,
            mean_url_len: feed.mean_len(),
            repeat_fraction: 1.0 - truth_distinct as f64 / pushes.max(1) as f64,
            ..Record::default()
        }
    }

    /// The URLs to push: the generated stream, or the `input` file.
    pub fn feed(&self) -> Result<Feed> {
        match &self.input {
            Some(path) => Ok(Feed::from_file(path, self.pushes)?),
            None => Ok(Feed::new(self.seed, self.pushes)),
        }
    }

    /// A temporary directory for the peer's files, removed when dropped.
    pub fn tempdir(&self, name: &str) -> Result<tempfile::TempDir> {
        Ok(tempfile::Builder::new()
            .prefix(&format!("crivello-bench-{name}-"))
            .tempdir_in(&self.dir)
            .map_err(|e| format!("temporary directory in {}: {e}", self.dir.display()))?)
    }
}

/// Runs the peer `name` and returns its record.
pub fn run(name: &str, args: &PeerArgs) -> Result<Record> {
    match name {
        "none" => none(args),
        "crivello" => crivello::run(args),
        "hashset" => hashset::run(args),
        "bloom" => bloom::run(args),
        "fjall" => fjall::run(args),
        "mercator" => mercator::run(args),
        _ => Err(format!("unknown peer {name:?} (peers: {})", ALL.join(", ")).into()),
    }
}

/// The generator alone: the cost of making the stream, which every peer pays too.
fn none(args: &PeerArgs) -> Result<Record> {
    let mut feed = args.feed()?;
    let mut bytes = 0u64;
    let start = Instant::now();
    for _ in 0..args.pushes {
        let buf = feed.next_url();
        bytes += buf.len() as u64;
    }
    std::hint::black_box(bytes);
    let mut r = args.record("none", &feed, start, 0);
    r.emitted = r.truth_distinct;
    r.digest = r.truth_digest.clone();
    r.notes.push(match args.input {
        Some(_) => "the file's URLs served from memory alone (no sieve): the ceiling".into(),
        None => "the stream generator alone (no sieve): the ceiling of every peer".into(),
    });
    Ok(r)
}

/// The peak resident set size of this process (`VmHWM`), in KiB; 0 if unknown.
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The peak RSS of process `pid` (`None`: this one), in KiB; then starts a new peak from the
/// current RSS (`5` into `clear_refs`), so that each phase of a run reports its own.
pub fn take_peak_rss(pid: Option<u32>) -> u64 {
    let proc = pid.map_or_else(|| "self".to_owned(), |p| p.to_string());
    let peak = std::fs::read_to_string(format!("/proc/{proc}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0);
    // Resetting may be refused (another user's process): the peaks then run on.
    let _ = std::fs::write(format!("/proc/{proc}/clear_refs"), "5");
    peak
}

/// The total size of the files under `dir`.
pub fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Prints a progress line on stderr every 2^24 pushes.
pub fn progress(name: &str, i: u64, total: u64, start: Instant) {
    if i & ((1 << 24) - 1) == 0 && i > 0 {
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "  {name}: {:.0}% of {total} pushes, {:.2} M pushes/s so far",
            i as f64 * 100.0 / total as f64,
            i as f64 / secs / 1e6
        );
    }
}
