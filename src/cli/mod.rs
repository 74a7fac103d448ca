//! The `crivello` command line: argument definitions, the mapping of errors to messages and
//! exit codes, and the helpers the subcommands share.
//!
//! Each subcommand lives in its own module (`push`, `flush`, `pop`, `uniq`, `stats`,
//! `check`) and returns an [`anyhow::Result`]; [`run`] turns an error into one line on
//! stderr, `crivello: <what went wrong>: <what to do>`, and an exit code:
//!
//! | code | meaning |
//! | ---: | --- |
//! | 0 | success (also when the reader of stdout went away, as `head` does) |
//! | 1 | runtime error: I/O, corruption met while working, a locked directory, an invalid input line |
//! | 2 | usage error (bad arguments or option values) |
//! | 3 | `check` found damage |

mod block;
mod check;
mod done;
mod duration;
mod flush;
mod lease;
mod neardup;
mod pause;
mod policy;
mod pop;
mod progress;
mod push;
mod queues;
#[cfg(feature = "serve")]
pub(crate) mod serve;
mod size;
mod stats;
mod stream;
mod uniq;

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use crivello::{Frontier, Options, Sieve};

use size::parse_memory;
pub use size::{parse_max_line_length, parse_max_url_len};

/// Exit code of a runtime error.
pub const EXIT_RUNTIME: u8 = 1;
/// Exit code of a usage error (clap's own code for bad arguments).
pub const EXIT_USAGE: u8 = 2;
/// Exit code of `check` when it finds damage.
pub const EXIT_DAMAGE: u8 = 3;

/// The exit codes, shown at the end of `crivello --help`.
const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success (also when the reader of standard output goes away, as `head` does)
  1  runtime error: I/O, corruption met while working, a locked directory,
     an invalid input line
  2  usage error: bad arguments or option values
  3  `check` found damage

Errors are one line on stderr: `crivello: <what went wrong>: <what to do>`.";

/// A durable Mercator sieve: each distinct URL exactly once, in first-appearance order.
#[derive(Debug, Parser)]
#[command(
    name = "crivello",
    version,
    about = "A durable Mercator sieve: each distinct URL exactly once, in first-appearance order",
    long_about = "A durable Mercator sieve: every distinct URL pushed is emitted exactly once, \
                  in the order of its first appearance, with bounded memory, across restarts \
                  and crashes.\n\n\
                  `push` feeds URLs into a sieve directory, `flush` makes the new ones \
                  available, `pop` prints them; `uniq` dedups lines of files like \
                  `awk '!seen[$0]++'` without its memory.",
    after_help = EXIT_CODES_HELP
)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Push URLs, one per line, into the sieve in DIR (created if missing).
    ///
    /// Each line without its ending ("\n", and then one "\r" if present) is one URL. An
    /// invalid line (empty, or longer than --max-url-len) stops the command with an error
    /// naming the file and line, after every line before it was made durable; with
    /// --skip-invalid such lines are skipped and counted on stderr. Exit 0 means every line
    /// read is durable. New URLs reach the frontier when a flush merges them: automatically
    /// when the memory buffer fills and a merge is due, or with `crivello flush`.
    Push(push::PushArgs),
    /// Flush now: the new URLs pushed so far become available to `pop` (in a frontier: they
    /// wait in their queues, and `queues` and `stats` count them).
    Flush(flush::FlushArgs),
    /// Print up to N frontier URLs (default: all) in order, then durably advance the cursor.
    ///
    /// URLs are printed and committed in batches: a batch is committed only after it was
    /// written to stdout, so an interrupted pop may print a URL again but never skips one.
    /// pop does not flush: URLs pushed since the last flush are not printed yet.
    Pop(pop::PopArgs),
    /// Print each distinct line of the input once, in first-appearance order.
    ///
    /// The output is byte-identical to `LC_ALL=C awk '!seen[$0]++'`: lines are split at
    /// "\n" only (a "\r" is part of the line), empty lines are lines, any byte is allowed,
    /// and every output line ends with "\n". Memory is bounded by --memory (the sieve's
    /// buffers; the process adds its threads' and the longest line's): the lines seen go to a
    /// temporary sieve in --tmp-dir, removed at exit. A file named is read twice (the second
    /// pass prints): it must not change meanwhile; pipe a changing input in.
    Uniq(uniq::UniqArgs),
    /// Print the counts and sizes of the sieve in DIR.
    #[command(after_help = stats::KEYS_HELP)]
    Stats(stats::StatsArgs),
    /// Hand out URLs that are due, one per line, each leased until a deadline.
    ///
    /// At most K URLs of one queue (the queue's policy's number unless --per-queue is
    /// lower), from the queues due earliest. The leases are durable before anything is
    /// printed. Nothing due prints nothing (exit 0); --wait waits until something is. The
    /// first `lease` (or `done`, `policy`, ...) makes the directory a frontier: `pop` then
    /// refuses it, and a directory `pop` has read is refused here.
    Lease(lease::LeaseArgs),
    /// End the leases of URLs: done, served again after a while, or back in their queue.
    Done(done::DoneArgs),
    /// Set the politeness of one queue (--key) or the default: the delay after a fetch or
    /// the ratio rule, URLs of a queue leased at once, and a limit of URLs done. With none of
    /// them, print the policy in force.
    Policy(policy::PolicyArgs),
    /// Hand out nothing of the queue KEY before an instant (Retry-After).
    Block(block::BlockArgs),
    /// Stop handing out URLs, of every crawl (pushes and dones go on; --crawl changes nothing).
    Pause(pause::PauseArgs),
    /// Hand out URLs again after a pause, of every crawl (--crawl changes nothing).
    Resume(pause::PauseArgs),
    /// List the queues: key, waiting, leased, done, next due, policy, blocked until.
    Queues(queues::QueuesArgs),
    /// Serve the frontier in DIR over gRPC: url-frontier's API (version 2.6), durably.
    ///
    /// Prints "listening on HOST:PORT" on stdout once ready, and logs to stderr. Every
    /// acknowledged item is durable. SIGTERM or SIGINT stops it: calls in flight end,
    /// streams acknowledge what they read, the frontier is synced and closed, exit 0.
    #[cfg(feature = "serve")]
    Serve(serve::ServeArgs),
    /// Find near-duplicate pages: SimHash fingerprints of JSON lines {"id", "text"}, stored
    /// in DIR, each new document with the stored one nearest to it within K bits.
    #[command(after_help = neardup::HELP)]
    Neardup(neardup::NeardupArgs),
    /// Verify every checksum of the sieve in DIR, without changing it; exit 3 on any damage.
    ///
    /// Reads the manifest, the cursor, every block of every Z segment, every pair of every
    /// run waiting for a merge, every frame of F (the file that holds the cursor from its
    /// start, and those after it) and the write-ahead log, and of a frontier (`lease`,
    /// `done`) its journal, checkpoint and Q runs too; prints "ok" and a summary when all is well. A
    /// torn tail of the write-ahead log or of the journal (changes never acknowledged before
    /// a crash) is noted, not counted as damage.
    Check(check::CheckArgs),
}

/// Options every subcommand takes.
#[derive(Debug, Clone, Args)]
pub struct Common {
    /// RAM budget: bytes, or a number with a unit K, M or G (powers of 1024; "B" or "iB"
    /// may follow, any case), at least 1M.
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = parse_memory)]
    pub memory: usize,
    /// No progress display and no notes on stderr (errors are still reported).
    #[arg(long, short)]
    pub quiet: bool,
}

/// How a frontier writes the URLs waiting in its queues.
#[derive(Debug, Clone, Args)]
pub struct QueueCodingArg {
    /// Write the frontier's Q runs (the URLs waiting in its queues) compressed: front coded,
    /// then zstd. About half the bytes on disk, at about half the hand-outs a second. The
    /// choice is kept in the directory: later commands write as it says until
    /// --compress-queues=off. On, it makes the directory a frontier.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_missing_value = "on", hide_possible_values = true,
          value_parser = clap::builder::TypedValueParser::map(
              clap::builder::PossibleValuesParser::new(["on", "off"]), |v| v == "on"))]
    pub compress_queues: Option<bool>,
}

impl QueueCodingArg {
    /// `opts` with the choice, if one was made.
    pub fn apply(&self, opts: Options) -> Options {
        match self.compress_queues {
            Some(on) => opts.compress_queues(on),
            None => opts,
        }
    }
}

/// The crawl a frontier's subcommand acts on.
#[derive(Debug, Clone, Args)]
pub struct CrawlArg {
    /// The crawl (a namespace of the frontier: its own URLs and queues; at most 1,024 bytes).
    #[arg(long = "crawl", value_name = "ID", default_value = "DEFAULT", value_parser = parse_crawl)]
    pub crawl: String,
}

/// A crawl's name: at most [`crivello::queues::MAX_CRAWL_LEN`] bytes, as a frontier takes
/// them (no store holds a longer one, so every subcommand refuses it alike).
fn parse_crawl(name: &str) -> std::result::Result<String, String> {
    if name.len() > crivello::queues::MAX_CRAWL_LEN {
        return Err(format!(
            "a crawl's name is at most {} bytes, not {}",
            crivello::queues::MAX_CRAWL_LEN,
            name.len()
        ));
    }
    Ok(name.to_owned())
}

impl CrawlArg {
    /// The crawl's name.
    pub fn name(&self) -> &str {
        &self.crawl
    }
}

/// Parses the arguments, runs the subcommand, and reports its outcome.
pub fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with code 0, usage errors to stderr with 2, as
            // one line like every other error (but the help `crivello` alone prints).
            let code = e.exit_code();
            let help = e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand;
            if e.use_stderr() && !help {
                let line = format!("crivello: {}\n", usage_line(&e.render().to_string()));
                let _ = std::io::stderr().write_all(line.as_bytes());
            } else if !help && code == 0 {
                // Help and version on stdout: a failed write (a full disk, a closed pipe
                // but for SIGPIPE) fails the command, as every other output does.
                let text = e.render().to_string();
                let mut out = std::io::stdout().lock();
                let written = out.write_all(text.as_bytes()).and_then(|()| out.flush());
                if let Some(w) = written
                    .err()
                    .filter(|w| w.kind() != std::io::ErrorKind::BrokenPipe)
                {
                    let line = format!("crivello: write the help to stdout: {w}\n");
                    let _ = std::io::stderr().write_all(line.as_bytes());
                    return ExitCode::from(1);
                }
            } else {
                let _ = e.print();
            }
            return ExitCode::from(u8::try_from(code).unwrap_or(EXIT_USAGE));
        }
    };
    // A bug must still end with one line on stderr and code 1, never a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let what = info.to_string().replace('\n', " ");
        let line = format!("crivello: internal error: {what}: please report this bug\n");
        let _ = std::io::stderr().write_all(line.as_bytes());
    }));
    let result = std::panic::catch_unwind(|| match cli.command {
        Command::Push(a) => push::run(a),
        Command::Flush(a) => flush::run(a),
        Command::Pop(a) => pop::run(a),
        Command::Uniq(a) => uniq::run(a),
        Command::Stats(a) => stats::run(a),
        Command::Check(a) => check::run(a),
        Command::Neardup(a) => neardup::run(a),
        Command::Lease(a) => lease::run(a),
        Command::Done(a) => done::run(a),
        Command::Policy(a) => policy::run(a),
        Command::Block(a) => block::run(a),
        Command::Pause(a) => pause::run(a, true),
        Command::Resume(a) => pause::run(a, false),
        Command::Queues(a) => queues::run(a),
        #[cfg(feature = "serve")]
        Command::Serve(a) => serve::run(a),
    });
    match result {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => report(&e),
        Err(_) => ExitCode::from(EXIT_RUNTIME),
    }
}

/// A usage error of the argument parser as one line: its message (the lines before its
/// usage, joined), then what to do.
fn usage_line(rendered: &str) -> String {
    let mut what = String::new();
    for line in rendered.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("Usage:") || line.starts_with("For more") {
            break;
        }
        if !what.is_empty() {
            what.push(' ');
        }
        what.push_str(line.strip_prefix("error: ").unwrap_or(line));
    }
    let tip = rendered
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("tip: "))
        .map(|t| format!("{t}; "))
        .unwrap_or_default();
    format!("{what}: {tip}see `crivello --help`, or `crivello COMMAND --help`")
}

/// An error the CLI explains itself: what went wrong, and what to do about it.
#[derive(Debug)]
pub struct Explained {
    /// What went wrong.
    pub what: String,
    /// What to do.
    pub todo: String,
}

impl fmt::Display for Explained {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for Explained {}

/// Builds an [`Explained`] error.
pub fn explained(what: impl Into<String>, todo: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Explained {
        what: what.into(),
        todo: todo.into(),
    })
}

/// A usage error found after the arguments were parsed (options that contradict each other,
/// values the machine cannot serve): an [`Explained`] error that exits with code 2.
#[derive(Debug)]
pub struct Usage(pub Explained);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Usage {}

/// Builds a [`Usage`] error.
pub fn usage(what: impl Into<String>, todo: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(Explained {
        what: what.into(),
        todo: todo.into(),
    }))
}

/// Damage found by `check` (exit code 3).
#[derive(Debug)]
pub struct Damage {
    /// The sieve directory.
    pub dir: PathBuf,
    /// What was found.
    pub source: anyhow::Error,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is damaged", self.dir.display())
    }
}

impl std::error::Error for Damage {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.source.as_ref())
    }
}

/// Standard output was closed by its reader: the command ends quietly with code 0.
#[derive(Debug)]
pub struct StdoutClosed;

impl fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("standard output was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// Prints the error as one line on stderr and returns its exit code.
fn report(err: &anyhow::Error) -> ExitCode {
    if err.downcast_ref::<StdoutClosed>().is_some() {
        return ExitCode::SUCCESS;
    }
    let usage = err.chain().any(|c| {
        c.downcast_ref::<Usage>().is_some()
            || matches!(
                c.downcast_ref::<crivello::Error>(),
                Some(crivello::Error::InvalidOption { .. })
            )
    });
    let code = if err.downcast_ref::<Damage>().is_some() {
        EXIT_DAMAGE
    } else if usage {
        EXIT_USAGE
    } else {
        EXIT_RUNTIME
    };
    // Library errors repeat their source in their own message: print each text once.
    let mut what = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if !what.contains(&text) {
            if !what.is_empty() {
                what.push_str(": ");
            }
            what.push_str(&text);
        }
    }
    let line = format!("crivello: {what}: {}\n", hint(err));
    let _ = std::io::stderr().write_all(line.as_bytes());
    ExitCode::from(code)
}

/// What to do about an error: the advice of the outermost cause that has one.
fn hint(err: &anyhow::Error) -> String {
    // An explanation given as the context of a library error.
    if let Some(e) = err.downcast_ref::<Explained>() {
        return e.todo.clone();
    }
    for cause in err.chain() {
        if let Some(e) = cause.downcast_ref::<Explained>() {
            return e.todo.clone();
        }
        if let Some(Usage(e)) = cause.downcast_ref::<Usage>() {
            return e.todo.clone();
        }
        if let Some(d) = cause.downcast_ref::<Damage>() {
            return format!(
                "keep a copy of {} for analysis and restore it from a backup; \
                 the damaged file is named above",
                d.dir.display()
            );
        }
        if let Some(e) = cause.downcast_ref::<crivello::Error>() {
            if let Some(h) = library_hint(e) {
                return h.to_owned();
            }
        }
        if let Some(crivello::uniq::Error::InputChanged { .. }) =
            cause.downcast_ref::<crivello::uniq::Error>()
        {
            return "`uniq` reads a file named twice (its second pass prints): give a file \
                    that does not change while it runs, or pipe it in (`cat FILE | crivello \
                    uniq`)"
                .to_owned();
        }
        if let Some(e) = cause.downcast_ref::<std::io::Error>() {
            return io_hint(e).to_owned();
        }
    }
    "see `crivello --help`".to_owned()
}

/// Advice for a library error, or `None` to look further down the chain.
fn library_hint(e: &crivello::Error) -> Option<&'static str> {
    use crivello::Error as E;
    Some(match e {
        E::Corrupt { .. } => {
            "the store is damaged: run `crivello check` on it, and restore it from a backup"
        }
        E::Locked { .. } => "wait for the other process to finish, or use another directory",
        E::InvalidUrl(_) => "fix the input line",
        E::InvalidOption { .. } => "change the option's value (see `crivello --help`)",
        E::Poisoned => "run the command again: reopening recovers what was durable",
        E::NotASieve { reason, .. }
            if reason.starts_with("no such directory") || reason.contains("no store is there") =>
        {
            "give the directory of an existing store (`crivello push DIR` creates one); one \
             removed while the command waited for it is gone"
        }
        E::NotASieve { .. } => "give a directory this kind of command made, or a new or empty one",
        E::WrongMode {
            mode: crivello::Mode::Frontier,
            ..
        } => "use `lease` and `done` on this directory, or `pop` on another one",
        E::WrongMode { .. } => "use `pop` on this directory, or `lease` and `done` on another one",
        E::Io { .. } => return None,
        _ => "see `crivello --help`",
    })
}

/// Advice for an operating-system error.
fn io_hint(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind as K;
    const ENOSPC: i32 = 28;
    const EROFS: i32 = 30;
    match e.kind() {
        K::NotFound => "check that the path exists",
        K::PermissionDenied => "check the permissions of the path",
        K::AlreadyExists => "remove the path or choose another",
        K::AddrInUse => "another program listens there: stop it, or give another --addr",
        K::AddrNotAvailable => "give an address of this machine with --addr",
        _ if e.raw_os_error() == Some(ENOSPC) => "free some disk space and run the command again",
        _ if e.raw_os_error() == Some(EROFS) => {
            "the file system is read-only: remount it read-write and run the command again"
        }
        _ => "check the disk and the path, then run the command again",
    }
}

/// Opens the frontier in `dir`.
pub fn open_frontier(dir: &Path, memory: usize) -> anyhow::Result<Frontier> {
    open_frontier_with(dir, Options::new().memory(memory).existing(true))
}

/// Opens the frontier in `dir` with options.
pub fn open_frontier_with(dir: &Path, opts: Options) -> anyhow::Result<Frontier> {
    waiting_for_lock(|| Frontier::open(dir, opts.clone())).map_err(|e| opening(e, "frontier", dir))
}

/// How long an open waits for another process that holds the directory: the commands of a
/// crawl loop hold it for a moment each (a `lease --wait` looks at the queues every second),
/// so two of them meeting wait rather than fail; a `push` of minutes, or a `serve`, still
/// makes the open fail as locked, after this wait.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Calls `open` until it does not fail as locked, for [`LOCK_WAIT`] at most.
pub fn waiting_for_lock<T>(mut open: impl FnMut() -> crivello::Result<T>) -> crivello::Result<T> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match open() {
            Err(crivello::Error::Locked { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// Closes a frontier whose command's work is durable already (leases printed, dones ended,
/// a listing printed): a close that fails (a full disk, say, where the manifest's record of
/// a clean end cannot be written) only warns, since nothing of the work is lost; the next
/// command that writes recovers the store as after a crash.
pub fn close_after_durable_work(frontier: Frontier, done: &str) {
    if let Err(e) = frontier.close() {
        eprintln!(
            "crivello: warning: {done}, but closing the store failed: {e}; the next command \
             that writes recovers it (free some disk space first if it is full)"
        );
    }
}

/// Opens the frontier in `dir` as a read-only view ([`Frontier::open_read_only`]).
pub fn open_frontier_read_only(dir: &Path, memory: usize) -> anyhow::Result<Frontier> {
    Frontier::open_read_only(dir, Options::new().memory(memory))
        .map_err(|e| opening(e, "frontier", dir))
}

/// Reads the store in `dir` with `read` (through read-only views, without its lock) while
/// other processes may write it: a read that fails while the store's files change under it
/// (a writer's checkpoint removed the journal generation the read was about to replay, say)
/// is read again, a few times, and never reported as damage. A failure is the store's own
/// when no file changed during the read (a writer that holds the lock and changes nothing,
/// a server idle, does not make a damage, a refusal or a wrong argument read again).
pub fn read_beside_writers<T>(
    dir: &Path,
    command: &str,
    mut read: impl FnMut() -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut before = files_state(dir);
    let mut tries = 0;
    loop {
        let e = match read() {
            Ok(t) => return Ok(t),
            Err(e) => e,
        };
        let now = files_state(dir);
        if now == before {
            return Err(e);
        }
        tries += 1;
        if tries == READS_UNDER_WRITER {
            return Err(e.context(Explained {
                what: format!(
                    "{command} {}: another process writes the store, and its files changed \
                     while they were read",
                    dir.display()
                ),
                todo: format!("run `crivello {command}` again"),
            }));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        before = files_state(dir);
    }
}

/// How many times a store that another process writes is read before the reader gives up.
const READS_UNDER_WRITER: u32 = 20;

/// A file's name, inode, length, and time of last change (seconds, nanoseconds).
type FileState = (std::ffi::OsString, u64, u64, i64, i64);

/// The store's files as a writer changes them: each one's name, inode, length and time of
/// last change (a file appended to, rewritten, replaced by a rename, made or removed).
/// None when the directory cannot be listed.
fn files_state(dir: &Path) -> Option<Vec<FileState>> {
    use std::os::unix::fs::MetadataExt;
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        // A file removed between the listing and this look is a change too.
        let m = match entry.metadata() {
            Ok(m) => (m.ino(), m.len(), m.mtime(), m.mtime_nsec()),
            Err(_) => (0, u64::MAX, 0, 0),
        };
        all.push((entry.file_name(), m.0, m.1, m.2, m.3));
    }
    all.sort_unstable();
    Some(all)
}

/// Opens (or creates) the sieve in `dir`.
pub fn open_sieve(dir: &Path, opts: Options) -> anyhow::Result<Sieve> {
    waiting_for_lock(|| Sieve::open(dir, opts.clone())).map_err(|e| opening(e, "sieve", dir))
}

/// Opens the sieve in `dir` as a read-only view ([`Sieve::open_read_only`]).
pub fn open_sieve_read_only(dir: &Path, opts: Options) -> anyhow::Result<Sieve> {
    Sieve::open_read_only(dir, opts).map_err(|e| opening(e, "sieve", dir))
}

/// Why a store could not be opened for writing, for an error that
/// [`crivello::Error::is_write_refused`].
pub fn cannot_write(e: &crivello::Error) -> &'static str {
    const EROFS: i32 = 30;
    match e {
        crivello::Error::Io { source, .. } if source.raw_os_error() == Some(EROFS) => {
            "its file system is read-only"
        }
        // An open after a clean close writes nothing: this one has to recover.
        _ => {
            "opening must write to recover from a close that did not finish (a crash, or a \
             full disk), and the disk is full"
        }
    }
}

/// An error met opening the `what` in `dir`, named unless its message names it already.
pub fn opening(e: crivello::Error, what: &str, dir: &Path) -> anyhow::Error {
    if e.is_write_refused() && dir.join(crivello::MANIFEST_FILE).is_file() {
        let why = cannot_write(&e);
        let fix = if why.contains("read-only") {
            "remount the file system read-write"
        } else {
            "free some disk space"
        };
        let meanwhile = if what == "frontier" {
            "`crivello stats`, `crivello check` and `crivello queues` work"
        } else {
            "`crivello stats` and `crivello check` work, `crivello pop` prints what a plain \
             sieve holds without consuming it, and `crivello queues` lists a frontier's queues"
        };
        return anyhow::Error::new(e).context(Explained {
            what: format!("{what} {}: {why}", dir.display()),
            todo: format!("{fix} and run the command again; meanwhile {meanwhile}"),
        });
    }
    match e {
        crivello::Error::Locked { .. }
        | crivello::Error::NotASieve { .. }
        | crivello::Error::WrongMode { .. } => anyhow::Error::new(e),
        e => anyhow::Error::new(e).context(format!("{what} {}", dir.display())),
    }
}

/// Refuses a directory that does not exist or holds no sieve, so that a mistyped name is
/// not silently created; only `push` creates sieves.
pub fn require_sieve(dir: &Path) -> anyhow::Result<()> {
    if !dir.is_dir() {
        let what = if dir.exists() {
            "not a directory"
        } else {
            "no such directory"
        };
        return Err(explained(
            format!("{}: {what}", dir.display()),
            "give the directory of an existing sieve (`crivello push DIR` creates one)",
        ));
    }
    let manifest = dir.join(crivello::MANIFEST_FILE);
    let exists = manifest
        .try_exists()
        .with_context(|| format!("look for {}", manifest.display()))?;
    if !exists {
        if dir.join(NEARDUP_FILE).exists() {
            return Err(explained(
                format!("{}: a near-duplicate store, not a sieve", dir.display()),
                "`crivello neardup DIR` adds to it and `stats` and `check` read it; give a \
                 sieve's directory here",
            ));
        }
        // The marker of a store whose other files are there was lost: damage, not a
        // directory to create a store in.
        let lost = if crivello::neardup::marker_lost(dir) {
            Some(crivello::neardup::MANIFEST_FILE)
        } else if crivello::manifest_lost(dir) {
            Some(crivello::MANIFEST_FILE)
        } else {
            None
        };
        if let Some(file) = lost {
            let e = crivello::Error::Corrupt {
                file: file.to_owned(),
                offset: 0,
                what: crivello::Corruption::Missing,
            };
            return Err(anyhow::Error::new(e).context(format!("store {}", dir.display())));
        }
        return Err(explained(
            format!(
                "{}: no sieve in this directory (no {})",
                dir.display(),
                crivello::MANIFEST_FILE
            ),
            "give the directory of an existing sieve (`crivello push DIR` creates one)",
        ));
    }
    Ok(())
}

/// The file that marks a near-duplicate store (`crivello neardup`).
const NEARDUP_FILE: &str = "NEARDUP";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_definitions_are_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    /// A read beside writers is taken again while the store's files change under it, and
    /// its failure is given as it is when nothing changed and nobody holds the lock.
    #[test]
    fn a_read_is_taken_again_only_when_the_files_changed() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        std::fs::write(dir.join("j-1.log"), b"x").unwrap();
        // Damage: read once, reported as it is.
        let mut calls = 0;
        let r: anyhow::Result<()> = read_beside_writers(dir, "stats", || {
            calls += 1;
            Err(anyhow::anyhow!("j-1.log: corrupt"))
        });
        assert_eq!(calls, 1);
        assert_eq!(r.unwrap_err().to_string(), "j-1.log: corrupt");
        // A writer removed a file, then appended to another, under the first two reads.
        let mut calls = 0;
        let r = read_beside_writers(dir, "stats", || {
            calls += 1;
            match calls {
                1 => {
                    std::fs::rename(dir.join("j-1.log"), dir.join("j-2.log")).unwrap();
                    Err(anyhow::anyhow!("j-1.log: missing"))
                }
                2 => {
                    std::fs::write(dir.join("j-2.log"), b"xy").unwrap();
                    Err(anyhow::anyhow!("j-2.log: torn"))
                }
                _ => Ok(7),
            }
        });
        assert_eq!((r.unwrap(), calls), (7, 3));
        // A writer that never stops changing the files: given up after a few reads, saying
        // why.
        let mut calls = 0u32;
        let r: anyhow::Result<()> = read_beside_writers(dir, "stats", || {
            calls += 1;
            std::fs::write(dir.join("j-2.log"), vec![b'x'; calls as usize + 2]).unwrap();
            Err(anyhow::anyhow!("j-2.log: torn"))
        });
        assert_eq!(calls, READS_UNDER_WRITER);
        let e = format!("{:#}", r.unwrap_err());
        assert!(e.contains("another process writes the store"), "{e}");
    }
}
