//! `crivello check DIR`: verify a sieve's checksums; exit 3 on any damage.
//!
//! Opening the sieve verifies the manifest, the cursor, the header, footer and sparse index
//! of every Z segment, and replays the write-ahead log A (whose torn tail is dropped, while
//! damage to synced records is an error). Then every frontier URL after the cursor is read,
//! which verifies the checksum of every F frame, and the read position is rewound, so
//! nothing is consumed.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use crivello::{Options, Sieve, Stats};

use super::progress::Progress;
use super::stream::Output;
use super::{require_sieve, Common, Damage};

/// URLs read from the frontier at a time.
const BATCH: usize = 4096;

/// The arguments of `check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The sieve's directory (it must exist).
    pub dir: PathBuf,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// What a successful check saw.
struct Summary {
    /// The sieve's counts after opening it.
    stats: Stats,
    /// Frontier URLs read and verified.
    read: u64,
}

/// Runs `check`.
pub fn run(args: CheckArgs) -> Result<()> {
    require_sieve(&args.dir)?;
    let mut progress = Progress::new("check", args.common.quiet);
    let summary = match verify(
        &args.dir,
        Options::new().memory(args.common.memory),
        &mut progress,
    ) {
        Ok(summary) => summary,
        Err(e) if e.is_corruption() => {
            return Err(anyhow::Error::new(Damage {
                dir: args.dir.clone(),
                source: e.into(),
            }));
        }
        Err(e) => return Err(e.into()),
    };
    progress.finish();
    let s = &summary.stats;
    if summary.read != s.pending {
        // F ends before the committed end the manifest records.
        let source = anyhow::anyhow!(
            "the frontier holds {} URLs after the cursor, the manifest records {}",
            summary.read,
            s.pending
        );
        return Err(anyhow::Error::new(Damage {
            dir: args.dir.clone(),
            source,
        }));
    }
    let text = format!(
        "ok: {}: {} frontier URLs verified ({} consumed before them), {} distinct URLs in {} Z \
         segments, {} flushes\n",
        args.dir.display(),
        summary.read,
        s.consumed,
        s.distinct,
        s.segments,
        s.flushes
    );
    let mut out = Output::new();
    out.text(&text)?;
    out.flush()
}

/// Opens the sieve and reads the whole frontier after the cursor.
fn verify(dir: &Path, opts: Options, progress: &mut Progress) -> crivello::Result<Summary> {
    // The library's verifier: replace the body of this function by `crivello::check(dir)`
    // once the library provides it; it will also verify every block of every Z segment,
    // which opening a sieve does not read (only headers, footers and sparse indexes).
    let mut sieve = Sieve::open(dir, opts)?;
    let stats = sieve.stats()?;
    let mut read = 0u64;
    loop {
        let batch = sieve.frontier_next(BATCH)?;
        if batch.is_empty() {
            break;
        }
        read += batch.len() as u64;
        for url in &batch {
            progress.line(url.len(), None);
        }
    }
    sieve.frontier_rewind();
    sieve.close()?;
    Ok(Summary { stats, read })
}
