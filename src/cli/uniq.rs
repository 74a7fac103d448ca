//! `crivello uniq [FILE...]`: print each distinct line once, in first-appearance order, with
//! bounded memory; the output is byte-identical to `LC_ALL=C awk '!seen[$0]++'`.
//!
//! The work is done by [`crivello::uniq::Uniq`]: the sieve without its logs, whose flushes
//! print the new lines of each batch by reading them again from the input (a regular file
//! where it is, standard input too when it is one; a pipe from a spool copy). The output
//! streams: each merge prints its new lines while the input is still being read.
//!
//! The temporary directory is removed at exit: on success, on error, and on Ctrl-C, SIGTERM
//! or SIGHUP (a handler removes it and exits with 130). A process killed otherwise leaves it;
//! the next `uniq` in the same place removes it, known by its lock that nobody holds.

use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use clap::Args;
use crivello::storage::{DirStorage, Unsynced};
use crivello::uniq::approx::{Bloom, Layout, Sizing};
use crivello::uniq::{Input, Uniq};
use crivello::Options;

use super::progress::Progress;
use super::stream::{sources, Line, LineReader, Output, STDIN_NAME};
use super::{explained, parse_max_line_length, usage, Common, StdoutClosed};

/// The exit code after Ctrl-C (128 + SIGINT, as shells report it).
const EXIT_INTERRUPTED: i32 = 130;

/// The temporary directory in use, for the Ctrl-C handler to remove.
static TEMP_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The arguments of `uniq`.
#[derive(Debug, Args)]
pub struct UniqArgs {
    /// Files to read in order; none, or "-", reads standard input.
    pub files: Vec<PathBuf>,
    /// Where to create the temporary store (default: the system's temporary directory);
    /// those left there by a uniq killed with SIGKILL are removed.
    #[arg(long, value_name = "DIR", conflicts_with = "approx")]
    pub tmp_dir: Option<PathBuf>,
    /// The longest line accepted, in bytes (units as for --memory; at most 1G - 1).
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = parse_max_line_length)]
    pub max_line_length: usize,
    /// Approximate: a Bloom filter of fixed size (--memory) and nothing on disk, for streams
    /// that never end. LOSSY: a new line is wrongly dropped with probability about P (see
    /// --fp-rate) once N distinct lines (--expected) went in, and more after that. Exact uniq,
    /// the default, never drops a line.
    #[arg(long)]
    pub approx: bool,
    /// With --approx: the number of distinct lines the false-positive rate is computed for
    /// (with --fp-rate: the filter is sized for both, and --memory may not be given).
    #[arg(long, value_name = "N", requires = "approx", value_parser = parse_count, allow_negative_numbers = true)]
    pub expected: Option<u64>,
    /// With --approx: the false-positive rate wanted, 0 < P < 1 (default 0.01 when --expected
    /// is not given: the filter then holds as many distinct lines as --memory allows at P).
    #[arg(long, value_name = "P", requires = "approx", value_parser = parse_rate, allow_negative_numbers = true)]
    pub fp_rate: Option<f64>,
    /// With --approx: print the filter's size and k on stderr, and at the end the lines read
    /// and printed, the filter's fill and the false-positive rate it now has.
    #[arg(long, requires = "approx", conflicts_with = "quiet")]
    pub verbose: bool,
    /// With --approx: where a line's bits go (for benchmarks): anywhere in the filter (the
    /// default: through the command line as fast as the other, in less memory for a rate),
    /// or in one cache line.
    #[arg(long, hide = true, value_name = "LAYOUT", default_value = "standard", value_parser = ["standard", "blocked"])]
    pub bloom_layout: String,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// Runs `uniq`.
pub fn run(args: UniqArgs) -> Result<()> {
    if args.approx {
        return approx(&args);
    }
    let base = args.tmp_dir.clone().unwrap_or_else(std::env::temp_dir);
    sweep_killed(&base, args.common.quiet);
    let tmp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempdir_in(&base)
        .with_context(|| format!("create a temporary directory in {}", base.display()))
        .map_err(|e| {
            explained(
                format!("{e:#}"),
                "choose a writable directory with --tmp-dir",
            )
        })?;
    // Held until the directory is removed: while it is, no other `uniq` sweeps it. On a
    // file system that takes no locks the run goes on without: nothing sweeps its directory
    // then, which a killed run leaves for removal by hand.
    let _owner = own(tmp.path()).ok();
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

/// How the temporary directories of `uniq` are named, in `--tmp-dir`.
const TEMP_PREFIX: &str = "crivello-uniq";

/// The file in a temporary directory that its `uniq` holds locked while it runs.
const OWNER: &str = "OWNER";

/// What an `OWNER` file says: a directory whose `OWNER` says anything else (one a user made
/// with such a name) is not swept.
const OWNER_MARK: &[u8] = b"crivello uniq: the temporary store of a uniq, removed by the next \
                            uniq once no process holds this file locked\n";

/// Locks `dir` as this process's: its `OWNER` file, locked under another name and then
/// renamed into place, so that a directory with an `OWNER` whose lock nobody holds is one
/// whose `uniq` is gone. The lock lasts as long as the file returned stays open, and ends with
/// the process however it ends.
fn own(dir: &Path) -> std::io::Result<std::fs::File> {
    use fs2::FileExt as _;
    let taking = dir.join("OWNER.new");
    let mut f = std::fs::File::create(&taking)?;
    let owned = f
        .try_lock_exclusive()
        .and_then(|()| std::io::Write::write_all(&mut f, OWNER_MARK))
        .and_then(|()| std::fs::rename(&taking, dir.join(OWNER)));
    if owned.is_err() {
        let _ = std::fs::remove_file(&taking);
    }
    owned.map(|()| f)
}

/// Removes the temporary directories in `base` that a `uniq` killed by a signal that cannot
/// be caught (`kill -9`, the out-of-memory killer, a power cut) left: those of this user
/// whose `OWNER` file is locked by no process. Best effort: a directory that cannot be read,
/// locked or removed is left as it is. Says what it removed unless `quiet`.
fn sweep_killed(base: &Path, quiet: bool) {
    use fs2::FileExt as _;
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    for entry in entries.flatten() {
        if !entry
            .file_name()
            .as_encoded_bytes()
            .starts_with(TEMP_PREFIX.as_bytes())
        {
            continue;
        }
        let dir = entry.path();
        // Not followed through a link: the entry itself must be this user's directory.
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() && m.uid() == me => {}
            _ => continue,
        }
        let Ok(mut owner) = std::fs::File::open(dir.join(OWNER)) else {
            continue;
        };
        let mut said = Vec::new();
        let marked = std::io::Read::read_to_end(
            &mut std::io::Read::take(&mut owner, OWNER_MARK.len() as u64 + 1),
            &mut said,
        )
        // (Empty: the `OWNER` of a build before the line.)
        .is_ok_and(|_| said == OWNER_MARK || said.is_empty());
        if !marked || owner.try_lock_exclusive().is_err() {
            continue; // not a uniq's, or its uniq is running
        }
        // Removed while locked: a uniq sweeping at the same time cannot lock it meanwhile.
        if std::fs::remove_dir_all(&dir).is_ok() && !quiet {
            eprintln!(
                "crivello uniq: removed {}, the temporary directory of a uniq that was killed",
                dir.display()
            );
        }
    }
}

/// The temporary directory slot, usable even if a thread panicked while holding it.
fn lock_temp_dir() -> std::sync::MutexGuard<'static, Option<PathBuf>> {
    TEMP_DIR.lock().unwrap_or_else(|e| e.into_inner())
}

/// The handler of Ctrl-C, SIGTERM and SIGHUP: removes the temporary directory and exits
/// with 130.
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
    let mut uniq =
        Uniq::new(Arc::new(Unsynced(storage)), opts, out).map_err(|e| uniq_error(e, dir))?;
    let progress = Arc::new(Mutex::new(Progress::new("uniq", args.common.quiet)));
    let shown = progress.clone();
    uniq.on_progress(move |s| {
        shown
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set(s.lines, s.bytes, Some(s.flushes))
    });
    for source in sources(&args.files)? {
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
        uniq.read(input).map_err(|e| uniq_error(e, dir))?;
    }
    lock(&progress).waiting("flush");
    uniq.finish().map_err(|e| uniq_error(e, dir))?;
    lock(&progress).finish();
    Ok(())
}

/// The progress display, usable even if a thread panicked while holding it.
fn lock(p: &Mutex<Progress>) -> std::sync::MutexGuard<'_, Progress> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// Turns an error of the engine into the command's: a closed standard output ends the
/// command quietly, an over-long line says which option to raise, and an error of the
/// scratch store names its directory `dir`.
fn uniq_error(e: crivello::uniq::Error, dir: &Path) -> anyhow::Error {
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
        E::Output(source) => anyhow::Error::new(source).context("write to standard output"),
        E::Store(e) => anyhow::Error::new(e).context(format!(
            "the temporary store in {} (--tmp-dir chooses where it goes)",
            dir.display()
        )),
        e => anyhow::Error::new(e),
    }
}

/// Parses a count: digits, or a power of ten written `1e7` or `10^7`.
fn parse_count(text: &str) -> Result<u64, String> {
    let t = text.trim().replace('_', "");
    let bad = || format!("{text:?} is not a count (e.g. 10000000, 1e7 or 10^7)");
    let n = if let Some((m, e)) = t.split_once(['e', 'E']) {
        let (m, e): (u64, u32) = (m.parse().map_err(|_| bad())?, e.parse().map_err(|_| bad())?);
        10u64.checked_pow(e).and_then(|p| p.checked_mul(m))
    } else if let Some(("10", e)) = t.split_once('^') {
        10u64.checked_pow(e.parse().map_err(|_| bad())?)
    } else {
        t.parse().ok()
    };
    match n {
        Some(0) => Err("the count must be at least 1".into()),
        Some(n) => Ok(n),
        None => Err(bad()),
    }
}

/// Parses a probability strictly between 0 and 1.
fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(p) if p > 0.0 && p < 1.0 => Ok(p),
        _ => Err(format!(
            "{text:?} is not a rate strictly between 0 and 1 (e.g. 0.01)"
        )),
    }
}

/// Lines hashed and their bits prefetched before the first of them is looked up.
const APPROX_BATCH: usize = 32;

/// The filter and a batch of lines hashed, their bits prefetched, waiting to be looked up
/// in order: the lookups' cache misses overlap instead of following one another.
struct Batch {
    bloom: Bloom,
    /// The lines' bytes, end to end.
    bytes: Vec<u8>,
    /// Per line: its end in `bytes` and its hash.
    lines: Vec<(usize, u128)>,
    printed: u64,
}

impl Batch {
    /// Adds a line; looks the batch up when it is full.
    fn push(&mut self, line: &[u8], out: &mut Output) -> Result<()> {
        let h = Bloom::hash(line);
        self.bloom.prefetch(h);
        self.bytes.extend_from_slice(line);
        self.lines.push((self.bytes.len(), h));
        if self.lines.len() == APPROX_BATCH {
            self.drain(out)?;
        }
        Ok(())
    }

    /// Looks up the lines in order, inserting each and printing it if it was new.
    fn drain(&mut self, out: &mut Output) -> Result<()> {
        let mut start = 0;
        for &(end, h) in &self.lines {
            if self.bloom.insert_hash(h) {
                out.line(&self.bytes[start..end])?;
                self.printed += 1;
            }
            start = end;
        }
        self.bytes.clear();
        self.lines.clear();
        Ok(())
    }
}

/// The false-positive rate, at the lines a filter is sized for, above which `--approx`
/// warns even without `--verbose` (when `--fp-rate` did not choose it).
const APPROX_WARN_RATE: f64 = 0.1;

/// `uniq --approx`: every input through a Bloom filter; nothing on disk.
fn approx(args: &UniqArgs) -> Result<()> {
    let layout = match args.bloom_layout.as_str() {
        "blocked" => Layout::Blocked,
        _ => Layout::Standard,
    };
    let memory_given = std::env::args_os().any(|a| a.to_string_lossy().starts_with("--memory"));
    let sizing =
        match (args.expected, args.fp_rate) {
            (Some(_), Some(_)) if memory_given => return Err(usage(
                "--memory, --expected and --fp-rate were all given: two of them size the filter",
                "give --expected and --fp-rate, or --memory with one of them",
            )),
            (Some(n), Some(p)) => Sizing::for_expected_and_rate(layout, n, p),
            (Some(n), None) => Sizing::for_memory_and_expected(layout, args.common.memory, n),
            (None, p) => Sizing::for_memory_and_rate(layout, args.common.memory, p.unwrap_or(0.01)),
        };
    // A rate no filter of this size reaches (its hash functions are at most MAX_K, so even
    // one line leaves a rate above it): refused rather than run at a rate it never promised.
    if let Some(p) = args.fp_rate.filter(|&p| sizing.fp_rate > p * (1.0 + 1e-9)) {
        let why = if args.expected.is_some() {
            format!("for {} distinct lines", sizing.expected)
        } else {
            format!(
                "in {} (its lowest rate, for one line, is {:.2e})",
                indicatif::HumanBytes(sizing.bytes()),
                sizing.fp_rate
            )
        };
        return Err(usage(
            format!(
                "approximate uniq: no Bloom filter reaches a false-positive rate of {p:.2e} {why}"
            ),
            if memory_given || args.expected.is_none() {
                "give a larger --fp-rate, or a larger --memory"
            } else {
                "give a larger --fp-rate or a smaller --expected"
            },
        ));
    }
    if args.verbose {
        eprintln!(
            "crivello: approximate uniq: a Bloom filter of {} ({} layout), k = {}: a new line \
             is dropped with probability {:.2e} once {} distinct {} went in",
            indicatif::HumanBytes(sizing.bytes()),
            format!("{layout:?}").to_lowercase(),
            sizing.k,
            sizing.fp_rate,
            sizing.expected,
            plural(sizing.expected, "line", "lines")
        );
    }
    if !args.verbose && args.fp_rate.is_none() && sizing.fp_rate > APPROX_WARN_RATE {
        // A filter too small for the lines it is sized for drops most of them: said even
        // without --verbose, since its output would look like a dedup's.
        eprintln!(
            "crivello: approximate uniq: warning: a Bloom filter of {} drops a new line with \
             probability {:.2e} once {} distinct {} went in: give a larger --memory or a \
             smaller --expected",
            indicatif::HumanBytes(sizing.bytes()),
            sizing.fp_rate,
            sizing.expected,
            plural(sizing.expected, "line", "lines")
        );
    }
    let Some(bloom) = Bloom::try_new(sizing) else {
        return Err(usage(
            format!(
                "approximate uniq: the Bloom filter of {} this sizing asks for (k = {}, a \
                 false-positive rate of {:.2e} at {} distinct lines) cannot be allocated",
                indicatif::HumanBytes(sizing.bytes()),
                sizing.k,
                sizing.fp_rate,
                sizing.expected
            ),
            if memory_given {
                "give a smaller --memory"
            } else {
                "give a larger --fp-rate or a smaller --expected"
            },
        ));
    };
    let mut batch = Batch {
        bloom,
        bytes: Vec::with_capacity(APPROX_BATCH * 128),
        lines: Vec::with_capacity(APPROX_BATCH),
        printed: 0,
    };
    let mut progress = Progress::new("uniq", args.common.quiet);
    let mut out = Output::new();
    let mut read = 0u64;
    for source in sources(&args.files)? {
        let mut input = LineReader::open(source)?;
        // A line and its "\n": a longer read without "\n" is a line too long.
        let limit = args.max_line_length + 1;
        loop {
            if !input.holds_next(limit) {
                // Reading on may wait for the input (a pipe, `tail -f`): the lines found so
                // far go out first, so that each is printed once it is read.
                batch.drain(&mut out)?;
                out.flush()?;
            }
            let Some((line, how)) = input.next_line(limit)? else {
                break;
            };
            let Line::Complete(n) = how else {
                // The lines before it are printed first: the output is the filter's for the
                // input up to that line, and a rerun from it goes on from there.
                batch.drain(&mut out)?;
                out.flush()?;
                return Err(explained(
                    format!(
                        "{}: line {}: longer than the maximum of {} bytes",
                        input.name(),
                        input.line_number(),
                        args.max_line_length
                    ),
                    "raise --max-line-length (at most 1G - 1); the lines before it are printed",
                ));
            };
            read += 1;
            progress.line(n, None);
            batch.push(line, &mut out)?;
        }
    }
    batch.drain(&mut out)?;
    out.flush()?;
    progress.finish();
    if args.verbose {
        let b = &batch.bloom;
        eprintln!(
            "crivello: {read} {} read, {} printed; the filter is {:.1}% full: a new line is \
             now dropped with probability about {:.2e}",
            plural(read, "line", "lines"),
            batch.printed,
            100.0 * b.fill(),
            b.estimated_fp_rate()
        );
    }
    Ok(())
}

/// `one` for 1, `many` otherwise.
fn plural(n: u64, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}
