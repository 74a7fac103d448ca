//! `crivello uniq [FILE...]`: print each distinct line once, in first-appearance order, with
//! bounded memory; the output is byte-identical to `LC_ALL=C awk '!seen[$0]++'`.
//!
//! Every line is pushed into a temporary sieve, and the output is exactly what the sieve
//! emits, so the order is the sieve's order. The sieve refuses empty URLs, so each line is
//! pushed with a one-byte tag in front ([`TAG`]), which is removed on output. The output
//! streams: whenever a background flush has completed, its new lines are printed while the
//! input is still being read.
//!
//! The temporary directory is removed at exit: on success, on error, and on Ctrl-C (a
//! handler removes it and exits with 130).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use clap::Args;
use crivello::storage::{DirStorage, Unsynced};
use crivello::{Options, Sieve};

use super::progress::Progress;
use super::stream::{sources, stop, Line, LineReader, Output, BATCH_BYTES};
use super::{explained, parse_max_line_length, Common};

/// The byte pushed in front of every line, so that an empty line is a non-empty URL.
const TAG: u8 = b'L';
/// URLs read from the frontier at a time.
const BATCH: usize = 4096;
/// The exit code after Ctrl-C (128 + SIGINT, as shells report it).
const EXIT_INTERRUPTED: i32 = 130;

/// The temporary directory in use, for the Ctrl-C handler to remove.
static TEMP_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The arguments of `uniq`.
#[derive(Debug, Args)]
pub struct UniqArgs {
    /// Files to read in order; none, or "-", reads standard input.
    pub files: Vec<PathBuf>,
    /// Where to create the temporary store (default: the system's temporary directory).
    #[arg(long, value_name = "DIR")]
    pub tmp_dir: Option<PathBuf>,
    /// The longest line accepted, in bytes (units as for --memory; at most 1G - 1).
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = parse_max_line_length)]
    pub max_line_length: usize,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// Runs `uniq`.
pub fn run(args: UniqArgs) -> Result<()> {
    let base = args.tmp_dir.clone().unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::Builder::new()
        .prefix("crivello-uniq")
        .tempdir_in(&base)
        .with_context(|| format!("create a temporary directory in {}", base.display()))
        .map_err(|e| {
            explained(
                format!("{e:#}"),
                "choose a writable directory with --tmp-dir",
            )
        })?;
    *lock_temp_dir() = Some(tmp.path().to_owned());
    ctrlc::set_handler(on_interrupt).context("install the Ctrl-C handler")?;
    let result = dedup(&args, tmp.path());
    // Holding the lock, the handler cannot remove the directory at the same time.
    let mut guard = lock_temp_dir();
    *guard = None;
    let removed = tmp.close();
    drop(guard);
    result?;
    removed.context("remove the temporary directory")
}

/// The temporary directory slot, usable even if a thread panicked while holding it.
fn lock_temp_dir() -> std::sync::MutexGuard<'static, Option<PathBuf>> {
    TEMP_DIR.lock().unwrap_or_else(|e| e.into_inner())
}

/// The Ctrl-C handler: removes the temporary directory and exits with 130.
fn on_interrupt() {
    if let Some(dir) = lock_temp_dir().take() {
        // A flush may be creating files while the directory is removed: try again.
        for _ in 0..5 {
            if std::fs::remove_dir_all(&dir).is_ok() || !dir.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    std::process::exit(EXIT_INTERRUPTED);
}

/// Reads every input through a sieve in `dir` and prints what it emits.
fn dedup(args: &UniqArgs, dir: &Path) -> Result<()> {
    // Output order does not depend on when merges run: let them be lazy (flat cost per line).
    let opts = Options::new()
        .frontier_low(0)
        .memory(args.common.memory)
        .max_url_len(args.max_line_length + 1);
    // A throwaway store: no fsync (a crash loses nothing the user keeps).
    let storage =
        DirStorage::open(dir).with_context(|| format!("temporary store {}", dir.display()))?;
    let mut sieve = Sieve::open_with(Arc::new(Unsynced(storage)), opts)
        .with_context(|| format!("temporary store {}", dir.display()))?;
    let mut out = Output::new();
    let mut progress = Progress::new("uniq", args.common.quiet);
    // The tag, a line and its "\n": a longer read without "\n" is a line too long.
    let limit = args.max_line_length + 1;
    let mut buf = Vec::with_capacity(64 << 10);
    for source in sources(&args.files) {
        let mut input = LineReader::open(source)?;
        loop {
            buf.clear();
            buf.push(TAG);
            match input.read_line(&mut buf, limit)? {
                None => break,
                Some(Line::TooLong) => {
                    return Err(explained(
                        format!(
                            "{}: line {}: longer than the maximum of {} bytes",
                            input.name(),
                            input.line_number(),
                            args.max_line_length
                        ),
                        "raise --max-line-length (at most 1G - 1)",
                    ));
                }
                Some(Line::Complete(n)) => progress.line(n, Some(&mut sieve)),
            }
            sieve.push(&buf)?;
            // Cheap: true only once a background flush has committed new lines.
            if sieve.frontier_pending() > 0 {
                drain(&mut sieve, &mut out)?;
            }
        }
    }
    progress.waiting("flush");
    sieve.flush()?;
    drain(&mut sieve, &mut out)?;
    progress.finish();
    Ok(())
}

/// Prints every line the frontier holds, without the tag, and flushes stdout.
fn drain(sieve: &mut Sieve, out: &mut Output) -> Result<()> {
    loop {
        let mut failed = None;
        let n = sieve.frontier_read(BATCH, BATCH_BYTES, |line| {
            out.line(line.get(1..).unwrap_or_default()).map_err(|e| {
                failed = Some(e);
                stop()
            })
        });
        if let Some(e) = failed {
            return Err(e);
        }
        if n? == 0 {
            break;
        }
    }
    out.flush()?;
    // Lets the sieve delete the frontier files already printed.
    sieve.frontier_commit()?;
    Ok(())
}
