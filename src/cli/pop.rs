//! `crivello pop DIR [-n N]`: print frontier URLs in order, then durably advance the cursor.
//!
//! URLs are read in batches and written to stdout; every 64 MiB of output or every second,
//! and at the end, stdout is flushed and then the cursor is committed past what it holds. A
//! kill half-way may therefore print again what was printed since the last commit (at most
//! 64 MiB, a second's worth), but never skips a URL. `pop` does not flush the sieve.
//!
//! When opening would have to write and cannot (a recovery after a crash, on a full disk or
//! a read-only file system), `pop` still prints the URLs the frontier holds, from a read-only
//! view, without consuming them, and then fails saying so.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use clap::Args;
use crivello::{Options, Sieve};

use super::progress::Progress;
use super::stream::{stop, Output, BATCH_BYTES};
use super::Explained;
use super::{cannot_write, open_sieve_read_only, opening, require_sieve, Common};

/// URLs read and printed at a time, at most (and [`BATCH_BYTES`] of them): enough that most
/// frames of F, about 15,000 URLs each, are printed whole as they were decoded, not line by
/// line.
const BATCH: u64 = 1 << 20;
/// The cursor is committed once this many bytes were printed since the last commit...
const COMMIT_BYTES: usize = 64 << 20;
/// ... or this long after it, and at the end: each commit is two fsyncs.
const COMMIT_EVERY: Duration = Duration::from_secs(1);

/// The arguments of `pop`.
#[derive(Debug, Args)]
pub struct PopArgs {
    /// The sieve's directory.
    pub dir: PathBuf,
    /// Print at most N URLs (default: all that are available).
    #[arg(
        short = 'n',
        long = "max",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub max: Option<u64>,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// Runs `pop`.
pub fn run(args: PopArgs) -> Result<()> {
    require_sieve(&args.dir)?;
    let opts = Options::new().memory(args.common.memory).existing(true);
    let mut sieve = match super::waiting_for_lock(|| Sieve::open(&args.dir, opts.clone())) {
        Ok(sieve) => sieve,
        Err(e) if e.is_write_refused() => return print_without_consuming(&args, opts, e),
        Err(e) => return Err(opening(e, "sieve", &args.dir)),
    };
    let mut progress = Progress::new("pop", args.common.quiet);
    let mut out = Output::new();
    let mut left = args.max.unwrap_or(u64::MAX);
    // URLs and bytes printed since the last commit, and when it was.
    let (mut pending, mut pending_bytes, mut committed_at) = (0u64, 0usize, Instant::now());
    let mut committed = false;
    loop {
        let mut failed = None;
        let mut bytes = 0;
        let n = if left == 0 {
            Ok(0)
        } else {
            sieve.frontier_read_lines(BATCH.min(left) as usize, BATCH_BYTES, |text, n| {
                progress.lines(n as u64, text.len());
                bytes += text.len();
                out.bytes(text).map_err(|e| {
                    failed = Some(e);
                    stop()
                })
            })
        };
        if let Some(e) = failed {
            return Err(e);
        }
        if let Err(crivello::Error::InvalidUrl(crivello::InvalidUrl::Newline { at })) = n {
            // What was printed before it is consumed (the store's mode fixed, as by any
            // `pop`, when nothing was), then the URL is named.
            out.flush()?;
            if pending > 0 || !committed {
                sieve.frontier_commit().with_context(|| context(&args))?;
            }
            sieve.close()?;
            progress.finish();
            return Err(newline_held(&args.dir, at));
        }
        let n = n.map_err(|e| match e {
            crivello::Error::WrongMode { .. } => anyhow::Error::new(e),
            e => anyhow::Error::new(e).context(context(&args)),
        })? as u64;
        left -= n;
        pending += n;
        pending_bytes += bytes;
        let last = n == 0 || left == 0;
        let due = pending_bytes >= COMMIT_BYTES || committed_at.elapsed() >= COMMIT_EVERY;
        if pending > 0 && (last || due) {
            // Only what reached stdout may be committed.
            out.flush()?;
            sieve.frontier_commit().map_err(|e| {
                if e.is_write_refused() {
                    anyhow::Error::new(e).context(Explained {
                        what: format!(
                            "sieve {}: the last {pending} URLs printed could not be consumed",
                            args.dir.display()
                        ),
                        todo: "free some disk space (or remount the file system read-write), \
                               then run `crivello pop` again: it prints those URLs again"
                            .into(),
                    })
                } else {
                    anyhow::Error::new(e).context(context(&args))
                }
            })?;
            (pending, pending_bytes, committed_at) = (0, 0, Instant::now());
            committed = true;
        }
        if last {
            break;
        }
    }
    if !committed {
        // Nothing printed: the store's mode is fixed all the same (the first `pop` makes
        // it a plain sieve's, as the first `lease` makes it a frontier's).
        sieve.frontier_commit().map_err(|e| match e {
            crivello::Error::WrongMode { .. } => anyhow::Error::new(e),
            e => anyhow::Error::new(e).context(context(&args)),
        })?;
    }
    sieve.close()?;
    progress.finish();
    Ok(())
}

/// Prints the URLs of the frontier after the cursor (at most `--max`) from a read-only view,
/// without consuming them, and fails with `why`, the error that kept the store from opening.
fn print_without_consuming(args: &PopArgs, opts: Options, why: crivello::Error) -> Result<()> {
    let mut sieve = open_sieve_read_only(&args.dir, opts)?;
    let mut progress = Progress::new("pop", args.common.quiet);
    let mut out = Output::new();
    let (mut left, mut printed) = (args.max.unwrap_or(u64::MAX), 0u64);
    let mut held = None;
    while left > 0 {
        let mut failed = None;
        let n = sieve.frontier_read_lines(BATCH.min(left) as usize, BATCH_BYTES, |text, n| {
            progress.lines(n as u64, text.len());
            out.bytes(text).map_err(|e| {
                failed = Some(e);
                stop()
            })
        });
        if let Some(e) = failed {
            return Err(e);
        }
        if let Err(crivello::Error::InvalidUrl(crivello::InvalidUrl::Newline { at })) = n {
            // One line cannot print it: the printing stops there, for the reason below.
            held = Some(at);
            break;
        }
        let n = n.with_context(|| context(args))?;
        if n == 0 {
            break;
        }
        printed += n as u64;
        left -= n as u64;
    }
    out.flush()?;
    drop(sieve);
    progress.finish();
    let reason = cannot_write(&why);
    let held = match held {
        Some(at) => format!(
            " (the next holds a newline, byte {at}, which one line cannot print: it was \
             not printed)"
        ),
        None => String::new(),
    };
    Err(anyhow::Error::new(why).context(Explained {
        what: format!(
            "sieve {}: printed the {printed} URLs the frontier holds{held} without consuming \
             them, as the store cannot be written: {}",
            args.dir.display(),
            reason
        ),
        todo: "free some disk space (or remount the file system read-write), then run \
               `crivello pop` again: it prints these URLs again, and consumes them"
            .into(),
    }))
}

/// Names the sieve in errors met while reading the frontier.
fn context(args: &PopArgs) -> String {
    format!("sieve {}", args.dir.display())
}

/// The error for the frontier's next URL holding a newline (byte `at`), which a store written
/// before pushes refused them may hold: one line cannot print it.
fn newline_held(dir: &std::path::Path, at: usize) -> anyhow::Error {
    super::explained(
        format!(
            "sieve {}: the frontier's next URL holds a newline (byte {at}), which one line \
             cannot print; a build that took such URLs pushed it (`pop` prints and consumes \
             the URLs before it, and stops there)",
            dir.display()
        ),
        "take it through the library, which gives it whole (Python: \
         `crivello.Sieve(DIR).pop(1)`; Rust: `Sieve::frontier_read`), then run `crivello pop` \
         again",
    )
}
