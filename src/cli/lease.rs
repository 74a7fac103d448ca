//! `crivello lease DIR [-n N] [--per-queue K] [--ttl DURATION] [--wait]`: hand out the URLs
//! of the crawl (`--crawl`, default `DEFAULT`) that are due, one per line. What was pushed is
//! flushed into the queues first; the leases are durable before anything is printed.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use crivello::{LeaseRequest, Options};

use super::duration::parse_positive_duration;
use super::stream::Output;
use super::{close_after_durable_work, open_frontier, opening, require_sieve, Common, CrawlArg};

/// The arguments of `lease`.
#[derive(Debug, Args)]
pub struct LeaseArgs {
    /// The frontier's directory.
    pub dir: PathBuf,
    /// Print at most N URLs.
    #[arg(
        short = 'n',
        long = "max",
        value_name = "N",
        default_value_t = 1000,
        allow_negative_numbers = true
    )]
    pub max: usize,
    /// At most K URLs of one queue (default: what the queue's policy allows, 1 unless set).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub per_queue: Option<u32>,
    /// How long each URL stays leased: a whole number with a unit ms, s, m or h.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub ttl: u64,
    /// When nothing is due, wait until something is (the directory is free meanwhile).
    #[arg(long)]
    pub wait: bool,
    /// The crawl whose URLs are leased.
    #[command(flatten)]
    pub crawl: CrawlArg,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// Runs `lease`.
pub fn run(args: LeaseArgs) -> Result<()> {
    if args.wait && args.max == 0 {
        return Err(super::usage(
            "--wait with -n 0 would wait for ever: nothing is ever leased",
            "give -n 1 or more with --wait (-n 0 alone fixes the store's mode and leases \
             nothing)",
        ));
    }
    require_sieve(&args.dir)?;
    let req = LeaseRequest {
        max_urls: args.max,
        max_queues: args.max,
        per_queue: args.per_queue,
        ttl_ms: args.ttl,
        crawl: Some(args.crawl.name().to_owned()),
        key: None,
    };
    let mut waited = false;
    let mut noted = false;
    let mut told_locked = false;
    loop {
        // Waiting, the loop below waits for the lock itself, and says so.
        let open = if waited || args.wait {
            let opts = Options::new().memory(args.common.memory).existing(true);
            crivello::Frontier::open(&args.dir, opts).map_err(|e| opening(e, "frontier", &args.dir))
        } else {
            open_frontier(&args.dir, args.common.memory)
        };
        let frontier = match open {
            Ok(f) => f,
            // Waiting, the directory is free meanwhile: another process may hold it for a
            // while (a `push` of the links found, a `done`, another `lease --wait`); wait for
            // it too, at the start as well.
            Err(e) if (waited || args.wait) && is_locked(&e) => {
                if !told_locked && !args.common.quiet {
                    eprintln!(
                        "crivello: {} is held by another process (a `push` or `done` for a \
                         moment, a `serve` until it stops): waiting for it",
                        args.dir.display()
                    );
                    told_locked = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
            Err(e) => return Err(e),
        };
        // What `push` pushed is due too: merged and queued first.
        frontier.flush()?;
        let leased = frontier.lease_with(&req)?;
        if leased.is_empty() && !noted && !args.common.quiet {
            // Why nothing came, when it is not the queues' politeness: said once.
            if let Some(why) = why_nothing(&frontier, args.crawl.name())? {
                eprintln!("crivello: {why}");
            }
            noted = true;
        }
        if !leased.is_empty() || !args.wait {
            // Durable already: the directory is let go before the URLs are printed, so that a
            // `done` (or a `push`) reading this output can take it while a large hand-out is
            // still being written to a pipe, rather than waiting on this process while this
            // one waits on the pipe.
            close_after_durable_work(frontier, "the URLs below are leased");
            let mut out = Output::new();
            // A URL holding a newline (pushed before pushes refused them) would be two
            // lines, which `done` could not end: said, not printed.
            let mut held = Vec::new();
            for l in &leased {
                match memchr::memchr(b'\n', &l.url) {
                    Some(_) => held.push(l),
                    None => out.line(&l.url)?,
                }
            }
            out.flush()?;
            if let Some(first) = held.first() {
                let one = held.len() == 1;
                eprintln!(
                    "crivello: {} URL{} leased hold{} a newline, which one line cannot print, \
                     and {} not printed (a build that took such URLs pushed {}): end {} \
                     through the library (Rust: `Frontier::complete_urls`; Python, once {} \
                     ended: `Frontier.lease(key=...)`, then `done`) or `crivello serve` (a \
                     known item); the first: {:?}, of queue {:?}",
                    held.len(),
                    if one { "" } else { "s" },
                    if one { "s" } else { "" },
                    if one { "is" } else { "are" },
                    if one { "it" } else { "them" },
                    if one { "its lease" } else { "their leases" },
                    if one { "the lease" } else { "the leases" },
                    String::from_utf8_lossy(&first.url),
                    String::from_utf8_lossy(&first.key),
                );
            }
            return Ok(());
        }
        // Nothing due: wait for the next instant something may be, the directory released.
        // Paused: waiting for `resume` (said once, above) while the crawl holds URLs.
        let next = match frontier.stats()?.paused {
            true => {
                let c = frontier.counts(args.crawl.name(), None)?;
                (c.waiting + c.leased > 0).then_some(Wake::Changed)
            }
            false => frontier.next_due_ms_of(args.crawl.name())?.map(Wake::At),
        };
        let Some(next) = next else {
            // Nothing of the crawl will be due: URLs that still wait are in queues at their
            // limit.
            let waiting = frontier.counts(args.crawl.name(), None)?.waiting;
            frontier.close()?;
            if waiting > 0 && !args.common.quiet {
                eprintln!(
                    "crivello: {waiting} URL{} wait{} in queues that reached their limit \
                     (`policy --limit`): none of them will be handed out",
                    if waiting == 1 { "" } else { "s" },
                    if waiting == 1 { "s" } else { "" },
                );
            }
            return Ok(());
        };
        // Taken under the lock: what this wait saw, which only another process can change.
        let seen = files_state(&args.dir);
        frontier.close()?;
        wait_for(&args.dir, next, seen.as_deref());
        waited = true;
    }
}

/// What a waiting `lease --wait` looks at again.
#[derive(Clone, Copy, Debug)]
enum Wake {
    /// The instant (ms since the epoch) the crawl's next URL may be due or a lease of it
    /// ends, or when the store changes before.
    At(u64),
    /// When the store changes (a `resume`, while hand-outs are paused).
    Changed,
}

/// How often a wait looks at the store's files for another process's change.
const LOOK_MS: u64 = 100;
/// A wait opens the store again at least this often, whatever its files look like (a change
/// that left every length and time as they were, on a file system of coarse times).
const REOPEN_MS: u64 = 60_000;

/// Sleeps until `next`, or until the store's files are no longer as `seen` (another process
/// pushed, ended leases, set a policy, resumed...): opening the store again (its checkpoint
/// read, its journal replayed) only when something may be due, not every second.
fn wait_for(dir: &std::path::Path, next: Wake, seen: Option<&[FileState]>) {
    let now = || crivello::queues::Clock::now_ms(&crivello::queues::SystemClock);
    let start = now();
    loop {
        let t = now();
        let left = match next {
            Wake::At(at) if t >= at => return,
            Wake::At(at) => at - t,
            Wake::Changed => LOOK_MS,
        };
        std::thread::sleep(std::time::Duration::from_millis(left.clamp(10, LOOK_MS)));
        if matches!(next, Wake::At(at) if now() >= at) || now().saturating_sub(start) >= REOPEN_MS {
            return;
        }
        match (seen, files_state(dir)) {
            (Some(seen), Some(state)) if state == seen => {}
            _ => return,
        }
    }
}

/// A file of the store as a wait compares it: name, length, modification time.
type FileState = (std::ffi::OsString, u64, Option<std::time::SystemTime>);

/// The store's files but its lock, sorted by name (None: the directory could not be read,
/// and the store is opened again). A change of the frontier by another process appends to
/// or replaces one of them at least.
fn files_state(dir: &std::path::Path) -> Option<Vec<FileState>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        let name = entry.file_name();
        if name == "LOCK" {
            continue;
        }
        let meta = entry.metadata().ok()?;
        files.push((name, meta.len(), meta.modified().ok()));
    }
    files.sort();
    Some(files)
}

/// A note for a hand-out that gave nothing for a reason of the store's, not the queues':
/// hand-outs are paused, or the crawl has no queue (a name mistyped?).
fn why_nothing(frontier: &crivello::Frontier, crawl: &str) -> Result<Option<String>> {
    if frontier.stats()?.paused {
        return Ok(Some(
            "hand-outs are paused (crivello pause): `crivello resume DIR` resumes them".to_owned(),
        ));
    }
    unknown_crawl(frontier, crawl)
}

/// A note when the crawl `crawl` has no queue (its name mistyped?), naming the crawls.
pub(super) fn unknown_crawl(frontier: &crivello::Frontier, crawl: &str) -> Result<Option<String>> {
    let crawls = frontier.crawls()?;
    let name = if crawl.is_empty() { "DEFAULT" } else { crawl };
    if !crawls.iter().any(|c| c == name) {
        let known = if crawls.is_empty() {
            "none yet".to_owned()
        } else {
            crawls
                .iter()
                .map(|c| shown(c))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Ok(Some(format!(
            "the crawl {} has no queues (the crawls: {known}): is its name right?",
            shown(name)
        )));
    }
    Ok(None)
}

/// A crawl's name as a note shows it: quoted, with escapes, when it would not read as itself
/// in a list (spaces at an end, a comma, a quote, a control character, an empty name).
fn shown(name: &str) -> String {
    let plain = !name.is_empty()
        && name.trim() == name
        && !name.contains([',', '"'])
        && !name.chars().any(char::is_control);
    if plain {
        name.to_owned()
    } else {
        format!("{name:?}")
    }
}

/// Whether `e` says that another process holds the directory.
fn is_locked(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<crivello::Error>(),
            Some(crivello::Error::Locked { .. })
        )
    })
}
