//! Group commit: one thread makes the pushes and known updates of every stream, as many
//! items per call of the library as are waiting, so that one fsync serves the
//! acknowledgements of many items and many streams. An item's outcome goes back to its
//! stream only after the call that made it durable returned.

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
    },
}

impl Op {
    fn crawl(&self) -> &str {
        match self {
            Op::Discover { crawl, .. } | Op::Known { crawl, .. } => crawl,
        }
    }

    fn is_known(&self) -> bool {
        matches!(self, Op::Known { .. })
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
    /// The frontier failed (the reason is in the log): nothing is acknowledged.
    Failed,
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
fn commit(frontier: &Frontier, log: &Log, jobs: &[Job]) -> Vec<Outcome> {
    let ops: Vec<&Op> = jobs.iter().flat_map(|j| j.ops.iter()).collect();
    let mut out = Vec::with_capacity(ops.len());
    let mut start = 0;
    while start < ops.len() {
        let (crawl, known) = (ops[start].crawl(), ops[start].is_known());
        let end = start
            + ops[start..]
                .iter()
                .take_while(|o| o.crawl() == crawl && o.is_known() == known)
                .count();
        let run = &ops[start..end];
        if known {
            let items: Vec<Known<'_>> = run
                .iter()
                .filter_map(|o| match o {
                    Op::Known {
                        url,
                        key,
                        meta,
                        refetch_ms,
                        ..
                    } => Some(Known {
                        url: url.as_bytes(),
                        key: key.as_deref().map(str::as_bytes),
                        metadata: meta,
                        refetch_ms: *refetch_ms,
                    }),
                    Op::Discover { .. } => None,
                })
                .collect();
            match frontier.update(crawl, &items) {
                Ok(()) => out.extend(std::iter::repeat_n(Outcome::Updated, run.len())),
                Err(e) => {
                    log!(log, Error, "known updates of crawl {crawl:?} failed: {e}");
                    out.extend(std::iter::repeat_n(Outcome::Failed, run.len()));
                }
            }
        } else {
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
                    out.extend(new.into_iter().map(
                        |n| {
                            if n {
                                Outcome::New
                            } else {
                                Outcome::Seen
                            }
                        },
                    ))
                }
                Err(e) => {
                    log!(log, Error, "pushes to crawl {crawl:?} failed: {e}");
                    out.extend(std::iter::repeat_n(Outcome::Failed, run.len()));
                }
            }
        }
        log!(
            log,
            Trace,
            "committed {} {} items of crawl {crawl:?}",
            run.len(),
            if known { "known" } else { "discovered" }
        );
        start = end;
    }
    out
}
