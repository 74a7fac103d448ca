//! `crivello uniq [FILE...]`: print each distinct line once, in first-appearance order, with
//! bounded memory; the output is byte-identical to `LC_ALL=C awk '!seen[$0]++'`.
//!
//! The work is done by [`crivello::uniq::Uniq`]: the sieve without its logs, whose flushes
//! print the new lines of each batch by reading them again from the input (a regular file
//! where it is, standard input too when it is one; a pipe from a spool copy). The output
//! streams: each merge prints its new lines while the input is still being read.
//!
//! The temporary directory is removed at exit: on success, on error, and on Ctrl-C (a
//! handler removes it and exits with 130).

use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use clap::Args;
use crivello::storage::{DirStorage, Unsynced};
use crivello::uniq::{Input, Uniq};
use crivello::Options;

use super::progress::Progress;
use super::stream::{sources, STDIN_NAME};
use super::{explained, parse_max_line_length, Common, StdoutClosed};

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

/// Reads every input through the dedup engine, with its scratch space in `dir`.
fn dedup(args: &UniqArgs, dir: &Path) -> Result<()> {
    let opts = Options::new()
        .memory(args.common.memory)
        .max_url_len(args.max_line_length);
    // Scratch space: no fsync (a crash loses nothing the user keeps).
    let storage =
        DirStorage::open(dir).with_context(|| format!("temporary store {}", dir.display()))?;
    let out = Box::new(std::io::stdout());
    let mut uniq = Uniq::new(Arc::new(Unsynced(storage)), opts, out).map_err(uniq_error)?;
    let progress = Arc::new(Mutex::new(Progress::new("uniq", args.common.quiet)));
    let shown = progress.clone();
    uniq.on_progress(move |s| {
        shown
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set(s.lines, s.bytes, Some(s.flushes))
    });
    for source in sources(&args.files) {
        let input = match source {
            Some(path) => Input::path(path),
            None => {
                let fd = std::io::stdin()
                    .as_fd()
                    .try_clone_to_owned()
                    .context("read standard input")?;
                Input::file(STDIN_NAME, std::fs::File::from(fd))
            }
        };
        uniq.read(input).map_err(uniq_error)?;
    }
    lock(&progress).waiting("flush");
    uniq.finish().map_err(uniq_error)?;
    lock(&progress).finish();
    Ok(())
}

/// The progress display, usable even if a thread panicked while holding it.
fn lock(p: &Mutex<Progress>) -> std::sync::MutexGuard<'_, Progress> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// Turns an error of the engine into the command's: a closed standard output ends the
/// command quietly, an over-long line says which option to raise.
fn uniq_error(e: crivello::uniq::Error) -> anyhow::Error {
    use crivello::uniq::Error as E;
    match e {
        E::Output(source) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            anyhow::Error::new(StdoutClosed)
        }
        E::LineTooLong { .. } => {
            explained(e.to_string(), "raise --max-line-length (at most 1G - 1)")
        }
        E::Input {
            op: "open",
            file,
            source,
        } => anyhow::Error::new(source).context(format!("cannot open {file}")),
        E::Input { op, file, source } => anyhow::Error::new(source).context(format!("{op} {file}")),
        E::Output(source) => anyhow::Error::new(source).context("write the output"),
        E::Store(e) => anyhow::Error::new(e),
        e => anyhow::Error::new(e),
    }
}
