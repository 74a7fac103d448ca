//! Group commit: one thread makes the pushes and known updates of every stream, as many
//! items per call of the library as are waiting, so that one fsync serves the
//! acknowledgements of many items and many streams. An item's outcome goes back to its
//! stream only after the call that made it durable returned.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::thread::JoinHandle;

use crivello::{Discovered, Frontier, Known};
use tokio::sync::{mpsc, oneshot};

use super::log::{log, Log};

/// Items one library call takes at most.
const MAX_ITEMS_PER_CALL: usize = 64 << 10;

/// Jobs waiting for the thread, at most: a stream that sends more waits (backpressure).
const QUEUED_JOBS: usize = 256;

/// What a stream asks of the frontier for one item.
#[derive(Debug)]
pub enum Op {
    /// A discovered URL: pushed if new to its crawl.
    Discover {
        /// Its crawl.
        crawl: String,
        /// The URL.
        url: String,
        /// Its key; None: the default key.
        key: Option<String>,
        /// Its stored metadata.
        meta: Vec<u8>,
    },
    /// A known URL: done, or to fetch again from an instant.
    Known {
        /// Its crawl.
        crawl: String,
        /// The URL.
        url: String,
        /// Its key; None: the default key.
        key: Option<String>,
        /// Its stored metadata.
        meta: Vec<u8>,
        /// When to fetch it again, in milliseconds since the epoch; 0: never.
        refetch_ms: u64,
        /// Forwarded by another node: the sender (`NODE/LANE`) and the item's number there.
        /// Applied only if the frontier's receipt of that sender is below the number, and the
        /// receipt raised to it in the same durable step.
        receipt: Option<(Arc<str>, u64)>,
    },
}

impl Op {
    fn crawl(&self) -> &str {
        match self {
            Op::Discover { crawl, .. } | Op::Known { crawl, .. } => crawl,
        }
    }

    /// Whether it is a known item.
    pub fn is_known(&self) -> bool {
        matches!(self, Op::Known { .. })
    }

    fn receipt(&self) -> Option<(&str, u64)> {
        match self {
            Op::Known {
                receipt: Some((from, seq)),
                ..
            } => Some((from, *seq)),
            _ => None,
        }
    }
}

/// What became of an op, once durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A discovered URL new to its crawl: pushed.
    New,
    /// A discovered URL its crawl already knew: nothing changed.
    Seen,
    /// A known URL: updated.
    Updated,
    /// The frontier failed (the reason is in the log): nothing is acknowledged; the item
    /// may be sent again.
    Failed,
    /// The item is invalid (the reason is in the log): nothing changed, and sending it again
    /// changes nothing either.
    Refused,
}

/// Ops of one stream, with where their outcomes go.
pub struct Job {
    /// The ops, in the order the stream sent them.
    pub ops: Vec<Op>,
    /// Gets one outcome per op.
    pub reply: oneshot::Sender<Vec<Outcome>>,
}

/// The committing thread and the way to it.
pub struct Committer {
    tx: mpsc::Sender<Job>,
    thread: JoinHandle<()>,
}

impl Committer {
    /// Starts the thread over `frontier`.
    pub fn start(frontier: Arc<Frontier>, log: Arc<Log>) -> std::io::Result<Committer> {
        let (tx, rx) = mpsc::channel(QUEUED_JOBS);
        let thread = std::thread::Builder::new()
            .name("crivello-commit".into())
            .spawn(move || run(&frontier, &log, rx))?;
        Ok(Committer { tx, thread })
    }

    /// Where streams send their jobs.
    pub fn sender(&self) -> mpsc::Sender<Job> {
        self.tx.clone()
    }

    /// Waits until every job sent was done and every sender was dropped, then ends the
    /// thread.
    pub fn join(self) {
        drop(self.tx);
        // A panic of the thread was reported by the panic hook already.
        let _ = self.thread.join();
    }
}

/// The thread: takes a job, then every job waiting (up to [`MAX_ITEMS_PER_CALL`] items), and
/// commits them together.
fn run(frontier: &Frontier, log: &Log, mut rx: mpsc::Receiver<Job>) {
    while let Some(first) = rx.blocking_recv() {
        let mut items = first.ops.len();
        let mut jobs = vec![first];
        while items < MAX_ITEMS_PER_CALL {
            match rx.try_recv() {
                Ok(job) => {
                    items += job.ops.len();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        let outcomes = commit(frontier, log, &jobs);
        let mut at = 0;
        for job in jobs {
            let n = job.ops.len();
            // A stream that went away no longer wants its outcomes.
            let _ = job.reply.send(outcomes[at..at + n].to_vec());
            at += n;
        }
    }
}

/// Commits the ops of `jobs` in order, consecutive ops of one kind and one crawl in one call
/// of the library; returns one outcome per op.
///
/// A known item forwarded with a receipt (sender, number) that the frontier's receipt of the
/// sender already covers was applied before (its sender did not learn it, and sent it again):
/// it is answered as updated and not applied again. The others are applied with their
/// receipts in the same durable step. A sender's items reach this thread in their order, so
/// the ones applied are always the first ones: once one of a sender's items fails, its later
/// items of the same jobs fail too, and a receipt never covers an item that was not applied.
fn commit(frontier: &Frontier, log: &Log, jobs: &[Job]) -> Vec<Outcome> {
    let ops: Vec<&Op> = jobs.iter().flat_map(|j| j.ops.iter()).collect();
    let mut out: Vec<Option<Outcome>> = vec![None; ops.len()];
    let mut received: HashMap<&str, Option<u64>> = HashMap::new();
    let mut failed: HashSet<&str> = HashSet::new();
    // The highest number of each sender's items to apply.
    let mut ahead: HashMap<&str, u64> = HashMap::new();
    for (op, o) in ops.iter().zip(out.iter_mut()) {
        let Some((from, seq)) = op.receipt() else {
            continue;
        };
        let r = match received.get(from) {
            Some(r) => *r,
            None => match frontier.receipt(from.as_bytes()) {
                Ok(r) => {
                    received.insert(from, r);
                    r
                }
                Err(e) => {
                    log!(log, Error, "the receipt of {from} cannot be read: {e}");
                    failed.insert(from);
                    None
                }
            },
        };
        if failed.contains(from) {
            *o = Some(Outcome::Failed);
        } else if r.is_some_and(|r| r >= seq)
            && !crivello::planted::active(crivello::planted::Bug::ReceiptIgnored)
        {
            *o = Some(Outcome::Updated);
        } else if ahead.get(from).is_some_and(|&a| a >= seq) {
            // Sent again while its first sending is in these jobs too (a stream that broke
            // had it on its way): failed, so that the sender asks again and learns it was
            // received.
            *o = Some(Outcome::Failed);
        } else {
            ahead.insert(from, seq);
        }
    }
    let mut start = 0;
    while start < ops.len() {
        let (crawl, known) = (ops[start].crawl(), ops[start].is_known());
        let end = start
            + ops[start..]
                .iter()
                .take_while(|o| o.crawl() == crawl && o.is_known() == known)
                .count();
        if known {
            commit_known(
                frontier,
                log,
                crawl,
                &ops[start..end],
                &mut out[start..end],
                &mut failed,
            );
        } else {
            commit_discovered(frontier, log, crawl, &ops[start..end], &mut out[start..end]);
        }
        log!(
            log,
            Trace,
            "committed {} {} items of crawl {crawl:?}",
            end - start,
            if known { "known" } else { "discovered" }
        );
        start = end;
    }
    out.into_iter()
        .map(|o| o.unwrap_or(Outcome::Failed))
        .collect()
}

/// Applies the known items of `run` (of one crawl) not settled yet, with the receipts of
/// those forwarded, in one call of the library.
fn commit_known<'a>(
    frontier: &Frontier,
    log: &Log,
    crawl: &str,
    run: &[&'a Op],
    out: &mut [Option<Outcome>],
    failed: &mut HashSet<&'a str>,
) {
    let mut items = Vec::with_capacity(run.len());
    let mut receipts: Vec<(&str, u64)> = Vec::new();
    let mut senders = Vec::new();
    for (op, o) in run.iter().zip(out.iter_mut()) {
        if o.is_some() {
            continue;
        }
        if let Some((from, _)) = op.receipt() {
            if failed.contains(from) {
                *o = Some(Outcome::Failed);
                continue;
            }
        }
        if let Some(url) = unknown_with_newline(frontier, crawl, op) {
            // The update would refuse the batch: this item alone is refused. A sender's
            // numbered item fails instead, and the sender's later ones with it: its receipt
            // never covers an item that was not applied.
            log!(
                log,
                Warn,
                "refused a known item of {:?}: it holds a newline in its URL or key, and \
                 crawl {crawl:?} does not know the URL",
                url.chars().take(100).collect::<String>()
            );
            *o = Some(match op.receipt() {
                Some((from, _)) => {
                    failed.insert(from);
                    Outcome::Failed
                }
                None => Outcome::Refused,
            });
            continue;
        }
        if let Some((from, seq)) = op.receipt() {
            senders.push(from);
            match receipts.iter_mut().find(|(f, _)| *f == from) {
                Some((_, s)) => *s = (*s).max(seq),
                None => receipts.push((from, seq)),
            }
        }
        if let Op::Known {
            url,
            key,
            meta,
            refetch_ms,
            ..
        } = op
        {
            items.push(Known {
                url: url.as_bytes(),
                key: key.as_deref().map(str::as_bytes),
                metadata: meta,
                refetch_ms: *refetch_ms,
            });
        }
    }
    if items.is_empty() {
        return;
    }
    let receipts: Vec<(&[u8], u64)> = receipts.iter().map(|(f, s)| (f.as_bytes(), *s)).collect();
    let outcome = match frontier.update_receipted(crawl, &items, &receipts) {
        Ok(()) => Outcome::Updated,
        Err(e) => {
            log!(log, Error, "known updates of crawl {crawl:?} failed: {e}");
            failed.extend(senders);
            Outcome::Failed
        }
    };
    for o in out.iter_mut().filter(|o| o.is_none()) {
        *o = Some(outcome);
    }
}

/// Pushes the discovered URLs of `run` (of one crawl) in one call of the library.
fn commit_discovered(
    frontier: &Frontier,
    log: &Log,
    crawl: &str,
    run: &[&Op],
    out: &mut [Option<Outcome>],
) {
    let items: Vec<Discovered<'_>> = run
        .iter()
        .filter_map(|o| match o {
            Op::Discover { url, key, meta, .. } => Some(Discovered {
                url: url.as_bytes(),
                key: key.as_deref().map(str::as_bytes),
                metadata: meta,
            }),
            Op::Known { .. } => None,
        })
        .collect();
    match frontier.push_new(crawl, &items) {
        Ok(new) => {
            for (o, n) in out.iter_mut().zip(new) {
                *o = Some(if n { Outcome::New } else { Outcome::Seen });
            }
        }
        Err(e) => {
            log!(log, Error, "pushes to crawl {crawl:?} failed: {e}");
            out.fill(Some(Outcome::Failed));
        }
    }
}

/// The URL of `op` if it is a known item holding a newline in its URL or key whose crawl
/// does not know the URL: an update takes such an item only of a URL it knows (a store
/// written before pushes refused newlines may hold some, whose transit must end), and
/// refuses the whole call otherwise.
fn unknown_with_newline<'a>(frontier: &Frontier, crawl: &str, op: &'a Op) -> Option<&'a str> {
    let Op::Known { url, key, .. } = op else {
        return None;
    };
    if !url.contains('\n') && !key.as_deref().is_some_and(|k| k.contains('\n')) {
        return None;
    }
    let key = key.as_deref().map(str::as_bytes);
    matches!(
        frontier.status(crawl, key, url.as_bytes()),
        Ok(crivello::UrlStatus::Unknown)
    )
    .then_some(url.as_str())
}
