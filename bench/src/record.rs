//! The result of one peer's run, as one JSON line, and the results file.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The error type of the benchmark.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// The result type of the benchmark.
pub type Result<T> = std::result::Result<T, Error>;

/// The recovery of a store whose write-ahead log A is full: a crash right after a `sync`
/// with one slot of S left.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Recovery {
    /// URLs in A (the slots of S minus one).
    pub records: u64,
    /// Bytes of the A files.
    pub a_bytes: u64,
    /// Seconds to open the store, the A files in the page cache.
    pub warm_open_s: f64,
    /// Seconds to read every A file with `std::fs::read`, in the page cache.
    pub warm_read_s: f64,
    /// Seconds to open the store, its files evicted from the page cache first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_open_s: Option<f64>,
    /// Seconds to read every A file, evicted from the page cache first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_read_s: Option<f64>,
    /// Repetitions of each measurement (the figures are medians).
    #[serde(default)]
    pub reps: u64,
}

/// One peer at one scale.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Record {
    /// The peer's name.
    pub peer: String,
    /// Pushes asked for by `run --pushes`.
    pub requested: u64,
    /// Pushes made (fewer than requested when the peer is capped).
    pub pushes: u64,
    /// The memory budget in MiB (`--memory`).
    pub memory_mib: u64,
    /// The stream's seed.
    pub seed: u64,
    /// The file of URLs pushed instead of the generated stream (`run --input`), by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// Seconds from the first push to the last URL written to the frontier.
    pub seconds: f64,
    /// Pushes per second, end to end.
    pub pushes_per_s: f64,
    /// Seconds of `seconds` spent generating the stream (not the peer's own work).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator_s: Option<f64>,
    /// Peak resident set size (`VmHWM`) of the peer's process, KiB.
    pub peak_rss_kib: u64,
    /// Distinct URLs the peer emitted.
    pub emitted: u64,
    /// Order-sensitive digest of the emitted URLs (hex).
    pub digest: String,
    /// Distinct URLs in the stream (the generator knows them).
    pub truth_distinct: u64,
    /// Order-sensitive digest of the stream's distinct URLs in first-appearance order (hex).
    pub truth_digest: String,
    /// Mean URL length of the stream, bytes.
    pub mean_url_len: f64,
    /// Fraction of the stream's pushes that repeat an earlier URL.
    pub repeat_fraction: f64,
    /// Seconds the pushing thread spent in flushes (waiting for them, for crivello).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush_s: Option<f64>,
    /// Flushes made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flushes: Option<u64>,
    /// Bytes on disk of the signature store (Z; the whole LSM tree for fjall) at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub z_bytes: Option<u64>,
    /// Bytes on disk of every file of the peer at the end (the frontier included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
    /// Bytes written to files during the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_written: Option<u64>,
    /// Frontier URLs read by the consumer while pushing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub popped: Option<u64>,
    /// Seconds to open the finished, cleanly closed store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_s: Option<f64>,
    /// The crash-recovery measurement (crivello).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
    /// Remarks (caps, what a figure means).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Record {
    /// Pushes per second of the peer's own work: the run's time without the generator's.
    pub fn own_pushes_per_s(&self) -> Option<f64> {
        let own = self.seconds - self.generator_s?;
        (own > 0.0 && self.peer != "none").then(|| self.pushes as f64 / own)
    }

    /// Whether the peer emitted exactly the stream's distinct URLs, in order.
    pub fn exact(&self) -> bool {
        self.emitted == self.truth_distinct && self.digest == self.truth_digest
    }
}

/// Formats a digest.
pub fn hex(d: u64) -> String {
    format!("{d:016x}")
}

/// Reads a results file: a JSON array of records (missing: empty).
pub fn load(path: &Path) -> Result<Vec<Record>> {
    match std::fs::read(path) {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(Vec::new()),
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| format!("{}: not a JSON array of results: {e}", path.display()).into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("{}: {e}", path.display()).into()),
    }
}

/// Appends records to a results file.
pub fn append(path: &Path, records: &[Record]) -> Result<()> {
    let mut all = load(path)?;
    all.extend_from_slice(records);
    let mut text = serde_json::to_string_pretty(&all)?;
    text.push('\n');
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()).into())
}
