//! `crivello pop DIR [-n N]`: print frontier URLs in order, then durably advance the cursor.
//!
//! URLs are read in batches; a batch is written to stdout and stdout is flushed before the
//! cursor is committed past it. A kill half-way may therefore print a batch again, but never
//! skips a URL. `pop` does not flush the sieve.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::Args;
use crivello::Options;

use super::progress::Progress;
use super::stream::{stop, Output, BATCH_BYTES};
use super::{open_sieve, require_sieve, Common};

/// URLs read, printed and committed at a time.
const BATCH: u64 = 4096;

/// The arguments of `pop`.
#[derive(Debug, Args)]
pub struct PopArgs {
    /// The sieve's directory.
    pub dir: PathBuf,
    /// Print at most N URLs (default: all that are available).
    #[arg(short = 'n', long = "max", value_name = "N")]
    pub max: Option<u64>,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// Runs `pop`.
pub fn run(args: PopArgs) -> Result<()> {
    require_sieve(&args.dir)?;
    let mut sieve = open_sieve(&args.dir, Options::new().memory(args.common.memory))?;
    let mut progress = Progress::new("pop", args.common.quiet);
    let mut out = Output::new();
    let mut left = args.max.unwrap_or(u64::MAX);
    while left > 0 {
        let mut failed = None;
        let n = sieve.frontier_read(BATCH.min(left) as usize, BATCH_BYTES, |url| {
            progress.line(url.len() + 1, None);
            out.line(url).map_err(|e| {
                failed = Some(e);
                stop()
            })
        });
        if let Some(e) = failed {
            return Err(e);
        }
        let n = n.map_err(|e| match e {
            crivello::Error::WrongMode { .. } => anyhow::Error::new(e),
            e => anyhow::Error::new(e).context(context(&args)),
        })?;
        if n == 0 {
            break;
        }
        // Only what reached stdout may be committed.
        out.flush()?;
        sieve.frontier_commit().with_context(|| context(&args))?;
        left -= n as u64;
    }
    sieve.close()?;
    progress.finish();
    Ok(())
}

/// Names the sieve in errors met while reading the frontier.
fn context(args: &PopArgs) -> String {
    format!("sieve {}", args.dir.display())
}
