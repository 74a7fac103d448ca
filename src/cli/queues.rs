//! `crivello queues DIR [--json]`: one row per queue of the crawl, in the order of their keys:
//! key, waiting, leased, done, next due, policy, blocked until.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use crivello::{Frontier, Options, Policy, QueueInfo};

use super::stream::Output;
use super::{
    close_after_durable_work, open_frontier_read_only, opening, require_sieve, Common, CrawlArg,
};

/// Queues read at a time.
const PAGE: usize = 4096;

/// The arguments of `queues`.
#[derive(Debug, Args)]
pub struct QueuesArgs {
    /// The frontier's directory.
    pub dir: PathBuf,
    /// One JSON object per line instead of tab-separated columns.
    #[arg(long)]
    pub json: bool,
    /// The crawl.
    #[command(flatten)]
    pub crawl: CrawlArg,
    /// The options of every subcommand.
    #[command(flatten)]
    pub common: Common,
}

/// Runs `queues`.
pub fn run(args: QueuesArgs) -> Result<()> {
    require_sieve(&args.dir)?;
    if crivello::Sieve::mode_of(&args.dir).ok() == Some(crivello::Mode::Unset) {
        // Listing would make the store a frontier (its URLs moved into queues), and the
        // first `pop` or `lease` chooses that: nothing is listed, nothing changes.
        if !args.common.quiet {
            eprintln!(
                "crivello: {} is not used as a frontier yet: it has no queues to list (the \
                 first `lease` or `done` makes it a frontier, the first `pop` a plain sieve)",
                args.dir.display()
            );
        }
        return Ok(());
    }
    // On a full disk or a read-only file system, where an open that must recover cannot
    // write, the queues are read through a read-only view (as `stats` reads them).
    let opts = Options::new().memory(args.common.memory).existing(true);
    let frontier = match super::waiting_for_lock(|| Frontier::open(&args.dir, opts.clone())) {
        // What `push` pushed is listed too: merged and queued first (as `lease` does).
        Ok(f) => match f.flush() {
            Ok(()) => f,
            Err(e) if e.is_write_refused() => {
                drop(f);
                if !args.common.quiet {
                    eprintln!(
                        "crivello: warning: the URLs pushed since the last merge are not listed: \
                         merging them needs to write, and {}",
                        match super::cannot_write(&e) {
                            ro if ro.contains("read-only") => ro,
                            _ => "the disk is full",
                        }
                    );
                }
                read_only(&args, None)?
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "merge the URLs pushed into the queues of {}",
                    args.dir.display()
                )))
            }
        },
        // A full disk, a read-only file system, or a store this user may not write (its lock
        // file made or opened for writing): read from a read-only view, as `stats` does.
        Err(e) if e.is_write_refused() || not_permitted(&e) => {
            let why = match not_permitted(&e) {
                true => "this user may not write the store",
                false => super::cannot_write(&e),
            };
            read_only(&args, Some(why))?
        }
        Err(e) => return Err(opening(e, "frontier", &args.dir)),
    };
    let mut out = Output::new();
    let mut start = 0;
    loop {
        let page = frontier.queues(args.crawl.name(), start, PAGE)?;
        if start == 0 && page.is_empty() && !args.common.quiet {
            if let Some(why) = super::lease::unknown_crawl(&frontier, args.crawl.name())? {
                eprintln!("crivello: {why}");
            }
        }
        for q in &page {
            if args.json {
                out.line(json(q).as_bytes())?;
            } else {
                out.line(&row(q))?;
            }
        }
        if page.len() < PAGE {
            break;
        }
        start += PAGE;
    }
    out.flush()?;
    let _ = std::io::stdout().flush();
    close_after_durable_work(frontier, "the queues are listed");
    Ok(())
}

/// The frontier through a read-only view, as `stats` reads it. When the store could not be
/// opened for writing (`why`), a note says how many pushes are left out: they are not in
/// their queues yet, and moving them needs to write. (After a failed merge the caller said
/// so.)
fn read_only(args: &QueuesArgs, why: Option<&str>) -> Result<Frontier> {
    let frontier = open_frontier_read_only(&args.dir, args.common.memory)?;
    match why {
        Some(why) if !args.common.quiet => {
            let left = frontier.unqueued()?;
            if left > 0 {
                eprintln!(
                    "crivello: warning: this listing may lack URLs pushed: {left} push{} \
                     (repeats of known URLs among them) {} not merged into the queues yet, \
                     which needs to write, and {why}",
                    if left == 1 { "" } else { "es" },
                    if left == 1 { "is" } else { "are" },
                );
            }
        }
        _ => {}
    }
    Ok(frontier)
}

/// The policy as `delay=2000ms per-queue=1 limit=0`, or `ratio=0.1 ...`.
pub(super) fn policy_text(p: &Policy) -> String {
    let rule = if p.ratio_ppm > 0 {
        format!("ratio={}", f64::from(p.ratio_ppm) / 1e6)
    } else {
        format!("delay={}ms", p.delay_ms)
    };
    format!("{rule} per-queue={} limit={}", p.per_queue, p.limit)
}

/// A tab-separated row: key (its bytes as they are, so that it can be given back to `block`
/// and `policy --key`), waiting, leased, done, next due (ms since the epoch, "-" if nothing
/// may be served), policy ("default" if none of its own), blocked until (ms since the epoch,
/// "-" if not blocked).
fn row(q: &QueueInfo) -> Vec<u8> {
    let mut line = q.key.clone();
    line.extend_from_slice(
        format!(
            "\t{}\t{}\t{}\t{}\t{}\t{}",
            q.waiting,
            q.leased,
            q.done,
            q.next_due_ms.map_or("-".to_owned(), |d| d.to_string()),
            q.policy.as_ref().map_or("default".to_owned(), policy_text),
            q.blocked_until_ms.map_or("-".to_owned(), |b| b.to_string()),
        )
        .as_bytes(),
    );
    line
}

/// One JSON object.
fn json(q: &QueueInfo) -> String {
    let policy = q.policy.map_or(serde_json::Value::Null, |p| {
        serde_json::json!({
            "delay_ms": p.delay_ms,
            "ratio": f64::from(p.ratio_ppm) / 1e6,
            "per_queue": p.per_queue,
            "limit": p.limit,
        })
    });
    serde_json::json!({
        "key": String::from_utf8_lossy(&q.key),
        "waiting": q.waiting,
        "leased": q.leased,
        "done": q.done,
        "next_due_ms": q.next_due_ms,
        "policy": policy,
        "blocked_until_ms": q.blocked_until_ms,
    })
    .to_string()
}

/// Whether an open failed because this user may not write the store (EACCES, EPERM).
fn not_permitted(e: &crivello::Error) -> bool {
    matches!(e, crivello::Error::Io { source, .. }
        if source.kind() == std::io::ErrorKind::PermissionDenied)
}
