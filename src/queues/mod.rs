//! The frontier: per-host queues over the sieve, with politeness and leases that survive
//! crashes.
//!
//! A URL pushed to the frontier goes through the sieve of its crawl (A, S, Z, F: the sieve's
//! files, in the same directory); a new one comes out of F, and the mover takes it from F into
//! its queue: a Q run (`qrun`) written durably, then a journal entry that says F was read up
//! to there. A queue is a FIFO in first-appearance order: its records in the Q runs, in the
//! order they entered. A hand-out (a *lease*) takes the next records of the queues that are
//! due (earliest due first: a min-heap of queues keyed by the first instant each may be
//! served, the host queue of the lecture notes §2.8), and is a journal entry made durable
//! before the caller sees it. Done, retry and policies are journal entries too; after a
//! crash, the journal is replayed over the Q runs (`core`).
//!
//! Vocabulary is url-frontier's: a *crawl* is a namespace (`DEFAULT`), a *queue* the URLs of
//! one key (by default the URL's host, [`key::default_key`]), a *lease* a URL handed out until
//! a deadline, after which it goes back to its queue, in its place.
//!
//! ```
//! # fn main() -> crivello::Result<()> {
//! use crivello::{Discovered, Frontier, Options, Policy};
//! let dir = tempfile::tempdir().unwrap();
//! let frontier = Frontier::open(dir.path(), Options::new())?;
//! frontier.set_policy("", None, Policy { delay_ms: 1_000, ..Policy::default() })?;
//! frontier.push("", &[
//!     Discovered::url(b"http://a.example/"),
//!     Discovered { url: b"http://b.example/", key: None, metadata: b"depth=0" },
//!     Discovered::url(b"http://a.example/about"),
//! ])?;
//! // One URL of each host at a time, each leased for 30 s, durably.
//! let leased = frontier.lease(100, None, 30_000)?;
//! assert_eq!(leased.len(), 2);
//! for l in leased {
//!     // ... fetch l.url, push its links ...
//!     frontier.done(l.token, 120)?; // the fetch took 120 ms; a.example waits 1 s
//! }
//! frontier.close()?;
//! # Ok(()) }
//! ```
//!
//! What is built: push (with a key and metadata per URL, per crawl), lease with a deadline,
//! done, retry, refetch at an instant, the delay and the ratio rule, the number of URLs of a
//! queue leased at once, limits, blocks, pause, the queues' listing, the status of a URL, and
//! recovery after a crash from a checkpoint and the journal after it, deleting queues and
//! crawls, counts per crawl and per queue, pushes that say which URLs were new, and known
//! updates (a URL done or to fetch again, whatever it was).

mod clock;
mod commits;
pub(crate) mod core;
mod handout;
pub(crate) mod journal;
pub mod key;
pub(crate) mod qrun;
mod turns;

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

pub use clock::{Clock, ManualClock, SystemClock};
pub use handout::{Handout, LeasedBatch, LeasedRef};

use crate::error::{Error, Result};
use crate::options::Options;
use crate::sieve::Sieve;
use crate::storage::{DirStorage, Storage};

/// The default lease: 30 seconds (url-frontier's).
pub const DEFAULT_TTL_MS: u64 = 30_000;

// Every seq, token and run id, the counters that issue them, and the counts of records
// waiting stay below the manifest's limit, 2^62 (counts of records done saturate instead):
// each counter starts low and steps by one per record, lease or run, so none gets near it
// (2^62 steps at 10^9 a second take 146 years), and a value read from a file at or past it
// is damage. The margin keeps each `+ 1` and each batch's numbering from overflowing.
pub(crate) use crate::manifest::COUNTER_LIMIT;
pub(crate) use core::HOT_QUEUES;

/// The longest sender name of a receipt ([`Frontier::update_receipted`]).
const MAX_SENDER: usize = 1024;

/// A URL discovered by a crawler.
#[derive(Debug, Clone, Copy)]
pub struct Discovered<'a> {
    /// The URL.
    pub url: &'a [u8],
    /// Its queue's key, 1 to [`key::MAX_KEY_LEN`] bytes; `None`: [`key::default_key`] of
    /// the URL, which must be no longer ([`crate::InvalidUrl::KeyTooLong`]).
    pub key: Option<&'a [u8]>,
    /// Bytes kept with the URL and handed out with it (depth, referrer, ...), at most
    /// [`MAX_METADATA_LEN`].
    pub metadata: &'a [u8],
}

impl<'a> Discovered<'a> {
    /// A URL with the default key and no metadata.
    pub fn url(url: &'a [u8]) -> Discovered<'a> {
        Discovered {
            url,
            key: None,
            metadata: &[],
        }
    }
}

/// A URL the crawler fetched, or knows otherwise (url-frontier's known URL item): done, or
/// to fetch again from an instant.
#[derive(Debug, Clone, Copy)]
pub struct Known<'a> {
    /// The URL.
    pub url: &'a [u8],
    /// Its queue's key; `None`: [`key::default_key`] of the URL.
    pub key: Option<&'a [u8]>,
    /// Its metadata, which replaces what it had.
    pub metadata: &'a [u8],
    /// When to fetch it again, in milliseconds since the epoch; 0: never.
    pub refetch_ms: u64,
}

/// A URL handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leased {
    /// Identifies the lease for [`Frontier::done`] and [`Frontier::retry`].
    pub token: u64,
    /// Its crawl.
    pub crawl: Vec<u8>,
    /// Its queue's key.
    pub key: Vec<u8>,
    /// The URL.
    pub url: Vec<u8>,
    /// Its metadata.
    pub metadata: Vec<u8>,
    /// The end of the lease, in milliseconds since the Unix epoch.
    pub deadline_ms: u64,
}

/// The politeness of a queue (the lecture notes' §2.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Milliseconds from the end of one fetch to the next hand-out (rule 1).
    pub delay_ms: u64,
    /// The ratio rule (rule 2), in millionths: after fetches that took s′ in all (those of
    /// one burst of leases), wait s′/p, with p = `ratio_ppm` / 10^6; 0 turns it off. When
    /// both are set, the longer wait applies.
    pub ratio_ppm: u32,
    /// The most URLs of the queue leased at once (1: never two fetchers on one host; more:
    /// a keep-alive burst).
    pub per_queue: u32,
    /// The most URLs of the queue done (url-frontier's crawl limit); 0: no limit.
    pub limit: u64,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            delay_ms: 0,
            ratio_ppm: 0,
            per_queue: 1,
            limit: 0,
        }
    }
}

/// Some fields of a policy ([`Frontier::change_policy`]): each one given replaces the one
/// set, the others stay as they are. The fields a queue's own policy was not given follow the
/// default's, as it changes; [`Frontier::set_policy`] gives a queue every field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyFields {
    /// [`Policy::delay_ms`] (at most `u64::MAX - 1`).
    pub delay_ms: Option<u64>,
    /// [`Policy::ratio_ppm`].
    pub ratio_ppm: Option<u32>,
    /// [`Policy::per_queue`] (at least 1).
    pub per_queue: Option<u32>,
    /// [`Policy::limit`] (at most `u64::MAX - 1`).
    pub limit: Option<u64>,
}

impl PolicyFields {
    /// Every field of `p`.
    pub fn all(p: Policy) -> PolicyFields {
        PolicyFields {
            delay_ms: Some(p.delay_ms),
            ratio_ppm: Some(p.ratio_ppm),
            per_queue: Some(p.per_queue),
            limit: Some(p.limit),
        }
    }

    /// The fields as the store keeps a queue's own policy: a field not given, which follows
    /// the default's (`Policy::resolve`), at a value no policy has: its type's largest value
    /// (a ratio above 1), per_queue 0.
    pub(crate) fn stored(self) -> Policy {
        Policy {
            delay_ms: self.delay_ms.unwrap_or(u64::MAX),
            ratio_ppm: self.ratio_ppm.unwrap_or(u32::MAX),
            per_queue: self.per_queue.unwrap_or(0),
            limit: self.limit.unwrap_or(u64::MAX),
        }
    }

    /// The fields of a queue's own policy as the store keeps it (`PolicyFields::stored`).
    pub(crate) fn of_stored(p: Policy) -> PolicyFields {
        PolicyFields {
            delay_ms: (p.delay_ms != u64::MAX).then_some(p.delay_ms),
            ratio_ppm: (p.ratio_ppm != u32::MAX).then_some(p.ratio_ppm),
            per_queue: (p.per_queue != 0).then_some(p.per_queue),
            limit: (p.limit != u64::MAX).then_some(p.limit),
        }
    }

    /// `base` with the fields given here in place of its own.
    pub fn over(self, base: Policy) -> Policy {
        Policy {
            delay_ms: self.delay_ms.unwrap_or(base.delay_ms),
            ratio_ppm: self.ratio_ppm.unwrap_or(base.ratio_ppm),
            per_queue: self.per_queue.unwrap_or(base.per_queue),
            limit: self.limit.unwrap_or(base.limit),
        }
    }

    /// These fields, then those of `later` over them.
    pub fn then(self, later: PolicyFields) -> PolicyFields {
        PolicyFields {
            delay_ms: later.delay_ms.or(self.delay_ms),
            ratio_ppm: later.ratio_ppm.or(self.ratio_ppm),
            per_queue: later.per_queue.or(self.per_queue),
            limit: later.limit.or(self.limit),
        }
    }
}

impl Policy {
    /// The policy in force for a queue whose own policy the store keeps as `own` (fields
    /// at their type's largest value follow `default`'s).
    pub(crate) fn resolve(own: Policy, default: Policy) -> Policy {
        PolicyFields::of_stored(own).over(default)
    }
}

/// The bounds of a hand-out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    /// URLs in all, at most. 0 hands out nothing, and is not refused (unlike a `per_queue`
    /// of 0): the call still moves what the sieve merged into the queues.
    pub max_urls: usize,
    /// Queues, at most; 0 as for `max_urls`.
    pub max_queues: usize,
    /// URLs of one queue, at most (and at most what its policy leaves room for; at least 1);
    /// None: what its policy leaves room for.
    pub per_queue: Option<u32>,
    /// The lease's length, in milliseconds (at least 1).
    pub ttl_ms: u64,
    /// Only this crawl's queues (`""` is `DEFAULT`); None: every crawl's.
    pub crawl: Option<String>,
    /// Only the queue of this key (of `crawl`, or of `DEFAULT` when `crawl` is None).
    pub key: Option<Vec<u8>>,
}

impl Default for LeaseRequest {
    fn default() -> LeaseRequest {
        LeaseRequest {
            max_urls: usize::MAX,
            max_queues: usize::MAX,
            per_queue: None,
            ttl_ms: DEFAULT_TTL_MS,
            crawl: None,
            key: None,
        }
    }
}

/// How a fetch ends a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// Done: never served again.
    Done,
    /// Back in its queue, in its place.
    Retry,
    /// Done, and served again once the instant (milliseconds since the epoch) has passed.
    RefetchAt(u64),
    /// Not ended yet: the fetch ended (its response arrived), and what follows it (parsing
    /// the page, pushing the URLs it links to) is under way. The queue's politeness (its
    /// delay, the ratio rule's wait) runs from this end, and the lease no longer holds one of
    /// the queue's places (`per_queue`), so that the queue's next URL may be handed out once
    /// it is due, while this one's work goes on. The lease stays, with its deadline, and
    /// still counts toward the queue's limit: a later `Done`, `Retry` or `RefetchAt` ends it
    /// (the politeness does not run again), or its deadline returns the URL to its queue
    /// (likewise). Given twice, or after the lease ended, it changes nothing and is answered
    /// false.
    Fetched,
}

/// A queue, as [`Frontier::queues`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    /// Its key.
    pub key: Vec<u8>,
    /// URLs waiting (to fetch again later included).
    pub waiting: u64,
    /// URLs leased.
    pub leased: u64,
    /// URLs done.
    pub done: u64,
    /// The first instant it may be served, in milliseconds since the epoch (a past one:
    /// now); None when nothing of it may be (nothing waits, or its leases or limit leave no
    /// room).
    pub next_due_ms: Option<u64>,
    /// The policy in force for it, if it has a policy of its own (some fields set for it,
    /// the others the default's).
    pub policy: Option<Policy>,
    /// The instant it is blocked until, if it is (a block whose instant passed: None).
    pub blocked_until_ms: Option<u64>,
}

/// What the frontier knows of a URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlStatus {
    /// Never pushed (or lost as an unacknowledged push).
    Unknown,
    /// In its queue.
    Waiting,
    /// Handed out until the instant.
    Leased {
        /// The end of the lease, in milliseconds since the epoch.
        until_ms: u64,
    },
    /// Done: never served again.
    Done,
    /// Done, and served again once the instant has passed.
    Refetch {
        /// The instant, in milliseconds since the epoch.
        at_ms: u64,
    },
}

/// A URL a queue holds ([`Frontier::urls`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldUrl {
    /// Its queue's key.
    pub key: Vec<u8>,
    /// The URL.
    pub url: Vec<u8>,
    /// Its metadata.
    pub metadata: Vec<u8>,
    /// Waiting, leased or to fetch again.
    pub status: UrlStatus,
}

/// Where a walk of held URLs stopped ([`Frontier::urls_from`]): just after one URL of one
/// queue. A walk resumed from it goes on after that URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldPlace {
    key: Vec<u8>,
    at: core::HeldAt,
}

impl HeldPlace {
    /// The key of the queue of the URL.
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}

/// A test of queue keys: [`Frontier::serve_only`] hands out the queues whose key passes.
pub type KeyFilter = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// A URL of a queue as it moves to another frontier: its text and metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MovedUrl {
    /// The URL.
    pub url: Vec<u8>,
    /// Its metadata.
    pub metadata: Vec<u8>,
}

/// Everything one queue holds, as [`Frontier::export`] gives it and [`Frontier::import`]
/// takes it: its URLs by state, its policy, block and counts. Every URL of the queue is in
/// exactly one of the lists: the import makes each known to the crawl's sieve, so that a URL
/// seen before the move is not fetched again after it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueExport {
    /// The crawl's name.
    pub crawl: String,
    /// The queue's key.
    pub key: Vec<u8>,
    /// The fields of the queue's own policy, if it has one (the others follow the default of
    /// the frontier it is in).
    pub policy: Option<PolicyFields>,
    /// Nothing of it is handed out before this instant (0: not blocked).
    pub blocked_until_ms: u64,
    /// URLs of it done (its crawl limit counts them).
    pub completed: u64,
    /// Milliseconds the fetches of its current burst took (the ratio rule).
    pub burst_ms: u64,
    /// The first instant it may be served again (politeness).
    pub due_ms: u64,
    /// Its URLs done: never served again.
    pub done: Vec<MovedUrl>,
    /// Its URLs leased, each with its lease's deadline: not handed out again before it.
    pub leased: Vec<(MovedUrl, u64)>,
    /// Its URLs whose lease ended without a done: served first.
    pub returned: Vec<MovedUrl>,
    /// Its URLs to fetch again, each with its instant.
    pub refetch: Vec<(u64, MovedUrl)>,
    /// Its URLs waiting, in the order they are served.
    pub waiting: Vec<MovedUrl>,
}

/// Counts of a frontier.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrontierStats {
    /// Queues that hold or held URLs, or have a policy or a block of their own (a deleted
    /// queue is not counted).
    pub queues: u64,
    /// Queues with URLs waiting.
    pub queues_waiting: u64,
    /// URLs waiting in their queues (those due again later included).
    pub waiting: u64,
    /// URLs leased.
    pub leased: u64,
    /// URLs done.
    pub done: u64,
    /// Q runs.
    pub runs: u64,
    /// Bytes of the Q runs' files (runs kept as archives of queues moved away not counted).
    pub run_bytes: u64,
    /// Whether the Q runs are written compressed ([`Options::compress_queues`]).
    pub compressed: bool,
    /// Whether hand-outs are paused.
    pub paused: bool,
}

/// Bytes on disk of a frontier's journal and checkpoint ([`Frontier::log_bytes`]): files
/// whose sizes change with commits and checkpoints, not with what the frontier holds, and so
/// not among its [`FrontierStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogBytes {
    /// Bytes of the journal J's files.
    pub journal: u64,
    /// Bytes of the checkpoint (`CHECKPOINT`).
    pub checkpoint: u64,
}

/// Counts of one crawl, or of one of its queues ([`Frontier::counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Queues (those that hold or held URLs, or have a policy or block of their own).
    pub queues: u64,
    /// Queues with URLs waiting.
    pub queues_waiting: u64,
    /// Queues with URLs waiting or leased (url-frontier's active queues).
    pub queues_active: u64,
    /// Queues that may be served now.
    pub queues_due: u64,
    /// URLs waiting (those due again later included).
    pub waiting: u64,
    /// URLs leased.
    pub leased: u64,
    /// URLs done.
    pub done: u64,
}

/// A durable frontier over a directory: a handle that many threads share (its methods take
/// `&self`). Calls of several threads share the journal's syncs (group commit): each
/// answers once what it changed, and what it saw other threads change, is durable.
pub struct Frontier {
    core: Mutex<Option<core::Core>>,
    /// Turns at `core`'s lock for the threads it keeps waiting (`src/queues/turns.rs`).
    turns: turns::Turns,
    /// The longest URL accepted (the sieve's option), for checks that need no lock.
    max_url_len: usize,
}

/// The store it holds, if its lock is free at once (a thread inside a call holds it: the
/// debug output does not wait); nothing else is read.
impl std::fmt::Debug for Frontier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Frontier");
        match self.core.try_lock() {
            Ok(guard) => match guard.as_ref() {
                Some(core) => d.field("store", &core.describe()),
                None => d.field("state", &"poisoned"),
            },
            Err(TryLockError::Poisoned(_)) => d.field("state", &"poisoned"),
            Err(TryLockError::WouldBlock) => d.field("state", &"in a call"),
        };
        d.finish_non_exhaustive()
    }
}

/// A panic of a caller's callback that runs under the frontier's lock ([`Frontier::urls`],
/// [`Frontier::export`], [`Frontier::purge`]): caught there, so that the visit stops and the
/// lock is let go as after a normal return (the visits change nothing, and a purge's page
/// whose callback panicked completes nothing: the frontier stays usable by every thread),
/// then raised again in the caller's thread.
#[derive(Default)]
struct Unwound(Option<Box<dyn std::any::Any + Send>>);

impl Unwound {
    /// Runs `f` unless a call before panicked; None when one did, or `f` does.
    fn call<T>(&mut self, f: impl FnOnce() -> T) -> Option<T> {
        if self.0.is_some() {
            return None;
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(t) => Some(t),
            Err(payload) => {
                self.0 = Some(payload);
                None
            }
        }
    }

    /// Whether a call panicked.
    fn unwound(&self) -> bool {
        self.0.is_some()
    }

    /// Raises the panic caught, if any.
    fn resume(self) {
        if let Some(payload) = self.0 {
            std::panic::resume_unwind(payload);
        }
    }
}

impl Frontier {
    /// Opens the frontier in `dir` (created if missing) with the sieve's options and the
    /// system's clock. A store used as a plain sieve is refused ([`Error::WrongMode`]); a new
    /// one, or one only pushed to, becomes a frontier.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Frontier> {
        Frontier::open_with_clock(dir, opts, Arc::new(SystemClock))
    }

    /// [`Frontier::open`] with another clock: a [`ManualClock`] drives delays, deadlines and
    /// blocks in tests.
    pub fn open_with_clock(
        dir: impl AsRef<Path>,
        opts: Options,
        clock: Arc<dyn Clock>,
    ) -> Result<Frontier> {
        let storage = Arc::new(DirStorage::open_store_as(dir.as_ref(), !opts.existing)?);
        storage.opened(Frontier::open_with(storage.clone(), opts, clock))
    }

    /// Opens the existing frontier in `dir` without ever writing to the directory, as
    /// [`Sieve::open_read_only`] does: for commands that only read (`stats`), on a full disk
    /// or a read-only file system. Changes stay in memory and are forgotten at the close.
    pub fn open_read_only(dir: impl AsRef<Path>, opts: Options) -> Result<Frontier> {
        let dir = dir.as_ref();
        if !dir.join(crate::names::MANIFEST).is_file() {
            return Err(crate::sieve::no_manifest(
                dir,
                "no MANIFEST: not a crivello store",
            ));
        }
        let storage = crate::storage::read_only_view(dir)?;
        Frontier::open_with(storage, opts, Arc::new(SystemClock))
    }

    /// Opens the frontier on any storage, with any clock.
    pub fn open_with(
        storage: Arc<dyn Storage>,
        opts: Options,
        clock: Arc<dyn Clock>,
    ) -> Result<Frontier> {
        let (max_runs, journal_bytes) = (opts.queue_runs, opts.journal_bytes);
        let (background, hot) = (opts.background, opts.hot_queues);
        let coding = opts.compress_queues;
        let max_url_len = opts.max_url_len;
        let sieve = Sieve::open_with(storage, opts)?;
        let core = core::Core::open(
            sieve,
            clock,
            max_runs,
            journal_bytes,
            background,
            (hot, coding),
        )?;
        Ok(Frontier {
            core: Mutex::new(Some(core)),
            turns: turns::Turns::new(turns::PATIENCE),
            max_url_len,
        })
    }

    /// Takes the frontier's lock, in turns that bound how long a thread waits.
    fn core(&self) -> Result<MutexGuard<'_, Option<core::Core>>> {
        // A thread that panicked while holding the lock left the state unknown.
        self.turns.enter(
            || match self.core.try_lock() {
                Ok(held) => Some(Ok(held)),
                Err(TryLockError::Poisoned(_)) => Some(Err(Error::Poisoned)),
                Err(TryLockError::WouldBlock) => None,
            },
            || self.core.lock().map_err(|_| Error::Poisoned),
        )
    }

    /// Runs `f` on the state under the lock, then, the lock let go, waits until J is durable
    /// with every change `f` made or saw (`src/queues/commits.rs`): the calls of several
    /// threads share one sync of J.
    fn with<T>(&self, f: impl FnOnce(&mut core::Core) -> Result<T>) -> Result<T> {
        let (out, (commits, target)) = {
            let mut guard = self.core()?;
            let core = guard.as_mut().ok_or(Error::Poisoned)?;
            if core.poison_if_sync_failed() {
                return Err(Error::Poisoned);
            }
            let out = f(core)?;
            (out, core.durable_target())
        };
        if let Err(e) = commits.wait(target) {
            if let Ok(mut guard) = self.core() {
                if let Some(core) = guard.as_mut() {
                    core.poison_if_sync_failed();
                }
            }
            return Err(Error::io("sync", "the frontier's journal", e));
        }
        Ok(out)
    }

    /// Pushes discovered URLs of `crawl` (`""` is `DEFAULT`). Durable when this returns Ok.
    /// A URL already seen in the crawl changes nothing: the merge that finds it drops it. An
    /// invalid URL, key or metadata refuses the whole batch.
    pub fn push(&self, crawl: &str, items: &[Discovered<'_>]) -> Result<()> {
        let crawl = crawl_name(crawl);
        self.with(|c| c.push(crawl, items))
    }

    /// [`Frontier::push`], saying of each URL whether it was new to its crawl (true) or
    /// already known (false: pushed before, by an earlier call or an earlier item of this
    /// one, and not pushed again). Exact, at the cost of a lookup per URL (a block of each Z
    /// segment and R run for a new one), and of a third of S's slots while it is used (the
    /// rest of S's budget holds S's index). Durable when this returns Ok.
    pub fn push_new(&self, crawl: &str, items: &[Discovered<'_>]) -> Result<Vec<bool>> {
        let crawl = crawl_name(crawl);
        self.with(|c| c.push_new(crawl, items, true))
    }

    /// [`Frontier::push_new`] without waiting for the disk: the pushes are acknowledged by
    /// the next call that is durable when it returns ([`Frontier::sync`], a push, a lease, a
    /// done, any change of state, a flush, a close), which makes them durable before its own
    /// change. A crash before that may lose them, as a suffix of the pushes, and nothing
    /// else: a done made after them is never durable without them. For a caller that
    /// completes a fetch only once the URLs it found are safe, this is a group commit.
    pub fn push_new_unsynced(&self, crawl: &str, items: &[Discovered<'_>]) -> Result<Vec<bool>> {
        let crawl = crawl_name(crawl);
        self.with(|c| c.push_new(crawl, items, false))
    }

    /// Makes every push made so far durable.
    pub fn sync(&self) -> Result<()> {
        self.with(core::Core::sync)
    }

    /// Ends several leases in one durable step, each as its [`Completion`] says, after a
    /// fetch of its milliseconds: `(token, took_ms, how)` ([`Completion::Fetched`]: says
    /// its fetch ended, the lease kept). Returns, for each, whether it was leased (one that
    /// is not, or given twice, changes nothing the second time; a `Fetched` of a lease whose
    /// fetch had ended is answered false). Each fetch counts as ended now: its queue's delay
    /// runs from this call (for a lease whose fetch was said to end before, it ran then).
    pub fn complete(&self, items: &[(u64, u64, Completion)]) -> Result<Vec<bool>> {
        let items: Vec<(u64, u64, core::End, u64)> = items
            .iter()
            .map(|&(token, took, how)| (token, took, end_of(how), u64::MAX))
            .collect();
        self.with(|c| c.complete_many(&items))
    }

    /// [`Frontier::complete`] of fetches that ended before this call, each at the instant it
    /// gives (milliseconds since the epoch): `(token, took_ms, how, ended_ms)`. The queue's
    /// delay (and the ratio rule's wait) runs from that instant instead of from the call, for
    /// a caller that completes a URL some time after its response arrived (once what the
    /// page linked to is pushed, say). An instant after the call counts as the call's; one
    /// before the URL was handed out (or before the frontier was opened, for a lease from
    /// before) counts as that: a queue's politeness never runs from before its fetch began.
    /// Durable as the instant it was given (entry 20 of the journal).
    pub fn complete_ended(&self, items: &[(u64, u64, Completion, u64)]) -> Result<Vec<bool>> {
        let items: Vec<(u64, u64, core::End, u64)> = items
            .iter()
            .map(|&(token, took, how, ended)| (token, took, end_of(how), ended))
            .collect();
        self.with(|c| c.complete_many(&items))
    }

    /// Returns every URL leased in `crawl` (every crawl: None) to its queue, in its place, as
    /// a retry would: for a caller that knows no fetcher holds them any more (the one that
    /// leased them died, and the store's lock says nobody else uses it). Returns how many.
    /// Durable when this returns.
    pub fn release_leases(&self, crawl: Option<&str>) -> Result<u64> {
        let crawl = crawl.map(crawl_name);
        self.with(|c| c.release_leases(crawl))
    }

    /// Says of URLs of `crawl` that they are done (`refetch_ms` 0) or to fetch again from
    /// `refetch_ms`, whatever they were (url-frontier's known items): a URL never pushed
    /// becomes known; one waiting in its queue is taken out of it; a leased one's lease ends
    /// (its fetch ended now, and its queue's delay runs from now); one to fetch again gets
    /// the new instant; a done one is served again only if `refetch_ms` is not 0. To fetch
    /// again, it keeps the item's metadata. Of one URL given twice, the last item counts.
    /// A leased URL's lease ends in its own queue whatever key the item gives; a URL that
    /// waits is looked for in the item's key's queue only (give the key it was pushed
    /// with: docs/design.md says why). An invalid URL or key refuses the whole
    /// batch, and so does a URL holding a newline that the crawl does not know (one it
    /// knows, which a store written before pushes refused them may hold, is taken).
    /// Durable when this returns Ok.
    pub fn update(&self, crawl: &str, items: &[Known<'_>]) -> Result<()> {
        let crawl = crawl_name(crawl);
        self.with(|c| c.update(crawl, items, &[]))
    }

    /// [`Frontier::update`], noting in the same durable step that the deliveries named by
    /// `receipts` were received: each `(from, seq)` raises [`Frontier::receipt`] of sender
    /// `from` to `seq` (never lowers it). The updates and the receipts are durable together
    /// or not at all, so that a sender that numbers its deliveries in order, and sends one
    /// again when it does not know whether it arrived, can be answered "received" without
    /// its updates being applied twice. With no items, the receipts alone are noted. A sender
    /// name over 1,024 bytes is refused.
    pub fn update_receipted(
        &self,
        crawl: &str,
        items: &[Known<'_>],
        receipts: &[(&[u8], u64)],
    ) -> Result<()> {
        if let Some((from, _)) = receipts.iter().find(|(from, _)| from.len() > MAX_SENDER) {
            return Err(Error::InvalidOption {
                option: "receipt",
                reason: format!(
                    "a sender's name of {} bytes (at most {MAX_SENDER})",
                    from.len()
                ),
            });
        }
        let crawl = crawl_name(crawl);
        self.with(|c| c.update(crawl, items, receipts))
    }

    /// The highest sequence number noted as received from sender `from` by
    /// [`Frontier::update_receipted`]; None: nothing from it.
    pub fn receipt(&self, from: &[u8]) -> Result<Option<u64>> {
        self.with(|c| Ok(c.receipt(from)))
    }

    /// Flushes: every URL pushed so far is merged and, if new, waits in its queue. While
    /// the sieve's flush thread merges, the lock is let go: other calls go on.
    pub fn flush(&self) -> Result<()> {
        let mut st = core::FlushState::default();
        loop {
            match self.with(|c| c.flush_step(&mut st))? {
                core::FlushStep::Done => return Ok(()),
                step => self.between_steps(step)?,
            }
        }
    }

    /// Flushes as [`Frontier::flush`] does, for a caller that reads counts or lists queues
    /// (a monitor's poll), unless the sieve's Z is large (a million signatures or more: each
    /// merge reads and writes it whole) and its last merge ended recently: less than a second
    /// ago, or ten times as long as it took. Then it returns at once, and what was pushed
    /// since that merge may not be in its queues yet: on a large store the counts lag the
    /// pushes by that long at most, rather than each poll merging Z whole (every call on a
    /// smaller store flushes).
    pub fn flush_for_reading(&self) -> Result<()> {
        if self.with(|c| Ok(c.merged_recently()))? {
            return Ok(());
        }
        self.flush()
    }

    /// How many flushes hand-outs began while other queues still served (the flushes they
    /// ask for) since the open: for tests that must know one ran.
    #[doc(hidden)]
    pub fn demand_flushes(&self) -> Result<u64> {
        self.with(|c| Ok(c.demand_flushes()))
    }

    /// Hands out the next URLs of up to `max_queues` queues that are due now, up to
    /// `per_queue` of each (and at most what the queue's policy leaves room for), leased for
    /// `ttl_ms` milliseconds. The leases are durable when this returns. URLs pushed are
    /// handed out once a flush moved them into their queues: a full buffer, a
    /// [`Frontier::flush`], or a hand-out that finds no queue with URLs waiting (it flushes
    /// first) or fewer than it asked for (it begins a flush, at most once a second).
    pub fn lease(
        &self,
        max_queues: usize,
        per_queue: Option<u32>,
        ttl_ms: u64,
    ) -> Result<Vec<Leased>> {
        self.lease_with(&LeaseRequest {
            max_queues,
            per_queue,
            ttl_ms,
            ..LeaseRequest::default()
        })
    }

    /// [`Frontier::lease`] with every bound: at most `max_urls` URLs in all.
    pub fn lease_with(&self, req: &LeaseRequest) -> Result<Vec<Leased>> {
        Ok(self.lease_batch(req)?.to_leased())
    }

    /// [`Frontier::lease_with`], the URLs in one buffer rather than four allocations each.
    pub fn lease_batch(&self, req: &LeaseRequest) -> Result<LeasedBatch> {
        validate_request(req)?;
        validate_key(req.key.as_deref())?;
        let mut flush = core::FrontFlush::default();
        loop {
            match self.with(|c| c.lease(req, None, true, &mut flush))? {
                Ok(batch) => return Ok(batch),
                Err(step) => self.between_steps(step)?,
            }
        }
    }

    /// Between two steps of a flush ([`core::Core::flush_step`]): lets the other threads
    /// take the lock, and, when the sieve's flush thread merges ([`core::FlushStep::Wait`]),
    /// waits for it without the lock.
    fn between_steps(&self, step: core::FlushStep) -> Result<()> {
        match step {
            core::FlushStep::Wait => self.wait_for_sieve(),
            core::FlushStep::More | core::FlushStep::Done => {
                std::thread::yield_now();
                Ok(())
            }
        }
    }

    /// Waits, without the lock, while the sieve's flush thread runs a job (the flush an
    /// empty front asks for). Meanwhile every other call goes on, pushes, ends of leases and
    /// other hand-outs among them.
    fn wait_for_sieve(&self) -> Result<()> {
        let mut pause = std::time::Duration::from_micros(250);
        loop {
            {
                let guard = self.core()?;
                let core = guard.as_ref().ok_or(Error::Poisoned)?;
                if !core.sieve_busy() {
                    return Ok(());
                }
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(5));
        }
    }

    /// The next part of `handout`: the URLs of up to `max_queues` more queues (at least
    /// one), within the hand-out's bounds, leased durably when this returns. Empty once the
    /// hand-out [`Handout::is_finished`]. No queue is served by two parts, and a hand-out
    /// serves at most as many queues as the frontier had after its first part. The parts
    /// together give what one [`Frontier::lease_with`] at the first part's instant would,
    /// except that each part is its own durable step with its own deadline, that other calls
    /// may come between them, and that what changes meanwhile (a queue becoming due, a lease
    /// expiring back into its queue) is seen by the next part. A server sends a part while it
    /// leases the next, and holds one part at a time.
    pub fn lease_part(&self, handout: &mut Handout, max_queues: usize) -> Result<LeasedBatch> {
        let h = handout;
        if h.finished {
            return Ok(LeasedBatch::default());
        }
        validate_request(&h.req)?;
        validate_key(h.req.key.as_deref())?;
        loop {
            match self.with(|c| self.part_step(c, h, max_queues))? {
                Ok(batch) => return Ok(batch),
                Err(step) => self.between_steps(step)?,
            }
        }
    }

    /// [`Frontier::lease_part`] under the lock; `Err(step)`: a step of the flush its empty
    /// front asks for ([`core::Core::lease`]).
    fn part_step(
        &self,
        c: &mut core::Core,
        h: &mut Handout,
        max_queues: usize,
    ) -> Result<std::result::Result<LeasedBatch, core::FlushStep>> {
        {
            let queues_left = h.req.max_queues.saturating_sub(h.part.served.len());
            let urls_left = h.req.max_urls.saturating_sub(h.urls);
            if queues_left == 0 || urls_left == 0 {
                h.finished = true;
                c.reschedule(&mut h.part.held);
                return Ok(Ok(LeasedBatch::default()));
            }
            let want = max_queues.clamp(1, queues_left);
            let req = LeaseRequest {
                max_queues: want,
                max_urls: urls_left,
                ..h.req.clone()
            };
            let before = h.part.served.len();
            let first = !h.started;
            let batch = match c.lease(&req, Some(&mut h.part), first, &mut h.flush)? {
                Ok(batch) => batch,
                Err(step) => return Ok(Err(step)),
            };
            if first {
                // Each queue is served once at most: a hand-out ends, at the latest, once it
                // served the queues there are after its first part (which may have flushed
                // the sieve into new ones), however many new ones pushes make meanwhile.
                h.req.max_queues = h.req.max_queues.min(c.queue_count());
            }
            h.started = true;
            h.urls += batch.len();
            // Fewer queues than asked: none more is due (or the URLs' bound is reached). One
            // queue asked by its key is served by one part.
            if h.part.served.len() - before < want
                || h.req.key.is_some()
                || h.part.served.len() >= h.req.max_queues
                || h.urls >= h.req.max_urls
            {
                h.finished = true;
                c.reschedule(&mut h.part.held);
                if h.part.served.len() < h.asked && h.urls < h.req.max_urls {
                    // Fewer queues due than the request asked for: the sieve's new URLs
                    // may bring more (`Core::demand_flush`).
                    c.demand_flush();
                }
            }
            Ok(Ok(batch))
        }
    }

    /// Ends the leases of `urls` of `crawl`, each after a fetch of its milliseconds, in one
    /// durable step: done, done and served again at an instant, or back in their queue
    /// (`how`; or, [`Completion::Fetched`], their fetches ended, their leases kept).
    /// Returns, for each, whether it was leased (one that is not changes nothing).
    pub fn complete_urls(
        &self,
        crawl: &str,
        urls: &[(&[u8], u64)],
        how: Completion,
    ) -> Result<Vec<bool>> {
        let crawl = crawl_name(crawl);
        self.with(|c| {
            let end = end_of(how);
            let just: Vec<&[u8]> = urls.iter().map(|(url, _)| *url).collect();
            let items: Vec<(u64, u64, core::End, u64)> = c
                .tokens_of(crawl, &just)
                .into_iter()
                .zip(urls)
                .map(|(token, (_, took))| (token.unwrap_or(0), *took, end, u64::MAX))
                .collect();
            c.complete_many(&items)
        })
    }

    /// The frontier's time, in milliseconds since the epoch: its clock's instant, or the
    /// latest instant the clock gave since the open if the clock was set back since (the
    /// frontier's time never runs back while it is open: `docs/design.md`, "The frontier's
    /// time"). Delays, deadlines, blocks and [`Frontier::next_due_ms`] are instants of this
    /// time; a caller that waits for one, or gives one (a block, a refetch), counts from it.
    /// It takes the frontier's lock and nothing more (no commit is waited for); reading it
    /// counts as the frontier reading its clock (a later step back is held at this instant).
    /// [`Error::Poisoned`] once the frontier stopped after an I/O error.
    pub fn now_ms(&self) -> Result<u64> {
        let guard = self.core()?;
        Ok(guard.as_ref().ok_or(Error::Poisoned)?.now_ms())
    }

    /// The first instant something may be handed out: a queue due (now, if it is due
    /// already), or a lease expiring (None: nothing waits that may be served, and nothing is
    /// leased). A queue emptied or a lease ended since counts no more. A lease's expiry is
    /// counted as its deadline, when its record goes back to its queue; the queue's delay
    /// runs from there, so a call then may find the queue due a delay later (and says so).
    /// While hand-outs are paused ([`Frontier::set_paused`]) no queue is due: only an expiry
    /// counts.
    pub fn next_due_ms(&self) -> Result<Option<u64>> {
        self.with(|c| Ok(c.next_due()))
    }

    /// [`Frontier::next_due_ms`] for the queues and leases of `crawl` alone (a hand-out of
    /// one crawl waits for its own): None when nothing of it waits that may be served and
    /// nothing of it is leased. It looks at every queue: for a caller that waits, not for
    /// each hand-out.
    pub fn next_due_ms_of(&self, crawl: &str) -> Result<Option<u64>> {
        let crawl = crawl_name(crawl);
        self.with(|c| Ok(c.next_due_of(crawl)))
    }

    /// The policy in force for the queue `key` of `crawl` (its own or the default), or the
    /// default (`key` None).
    pub fn policy(&self, crawl: &str, key: Option<&[u8]>) -> Result<Policy> {
        let crawl = crawl_name(crawl);
        self.with(|c| Ok(c.policy_of(crawl, key)))
    }

    /// Ends the lease `token`: the URL is done and never served again. `took_ms` is how long
    /// the fetch took. Returns false (and changes nothing) when it is not leased. Durable when
    /// this returns.
    pub fn done(&self, token: u64, took_ms: u64) -> Result<bool> {
        self.with(|c| c.complete(token, took_ms, core::End::Done))
    }

    /// Ends the lease `token`: the URL is done, and served again once `at_ms` (milliseconds
    /// since the epoch) has passed, in date order. Returns false when it is not leased.
    pub fn refetch(&self, token: u64, took_ms: u64, at_ms: u64) -> Result<bool> {
        self.with(|c| c.complete(token, took_ms, core::End::Refetch(at_ms)))
    }

    /// Ends the lease `token`: the URL goes back to its queue, in its place, and the queue's
    /// delay applies. Returns false when it is not leased.
    pub fn retry(&self, token: u64, took_ms: u64) -> Result<bool> {
        self.with(|c| c.complete(token, took_ms, core::End::Retry))
    }

    /// The token of the lease of `url` in `crawl`, if it is leased.
    pub fn lease_of(&self, crawl: &str, url: &[u8]) -> Result<Option<u64>> {
        let crawl = crawl_name(crawl);
        self.with(|c| Ok(c.token_of(crawl, url)))
    }

    /// Sets the policy of the queue `key` of `crawl`, every field (to set some and let the
    /// others follow the default: [`Frontier::change_policy`]), or (`key` None) the default,
    /// which the queues follow in the fields they have not set. Durable when this returns. A queue waiting after
    /// a fetch waits no longer than the new policy allows from now (its delay; under the
    /// ratio rule the wait left, scaled by the ratios); a longer wait applies from the next
    /// fetch on.
    pub fn set_policy(&self, crawl: &str, key: Option<&[u8]>, policy: Policy) -> Result<()> {
        validate_key(key)?;
        let crawl = crawl_name(crawl);
        self.with(|c| c.set_policy(crawl, key, policy))
    }

    /// Changes the fields given in `fields` of the policy of the queue `key` of `crawl` (its
    /// other fields stay its own, or follow the default's), or (`key` None) of the default.
    /// Durable when this returns; a waiting queue's wait is cut as by [`Frontier::set_policy`].
    pub fn change_policy(
        &self,
        crawl: &str,
        key: Option<&[u8]>,
        fields: PolicyFields,
    ) -> Result<()> {
        validate_key(key)?;
        let crawl = crawl_name(crawl);
        self.with(|c| c.change_policy(crawl, key, fields))
    }

    /// Blocks the queue `key` of `crawl` until `until_ms` (milliseconds since the epoch; 0
    /// unblocks it): nothing of it is handed out before (HTTP 429 or 503, Retry-After).
    pub fn block(&self, crawl: &str, key: &[u8], until_ms: u64) -> Result<()> {
        validate_key(Some(key))?;
        let crawl = crawl_name(crawl);
        self.with(|c| c.block(crawl, key, until_ms))
    }

    /// The queues of `crawl`, in the order of their keys, from the `start`-th: at most `max`.
    ///
    /// URLs pushed are counted once a flush moved them into their queues (a full buffer,
    /// [`Frontier::flush`], or [`Frontier::flush_for_reading`] first).
    pub fn queues(&self, crawl: &str, start: usize, max: usize) -> Result<Vec<QueueInfo>> {
        let crawl = crawl_name(crawl);
        self.with(|c| c.queues(crawl, start, max))
    }

    /// What the frontier knows of `url` of `crawl`, in the queue `key` (None: the URL's
    /// default key), or else in the queue of its default key. Flushes first, so that what
    /// was pushed is known. A URL known to the crawl that neither queue holds is
    /// [`UrlStatus::Done`]: the frontier keeps a signature of each URL, not its queue, so a
    /// URL pushed with a key of its own must be asked with that key.
    pub fn status(&self, crawl: &str, key: Option<&[u8]>, url: &[u8]) -> Result<UrlStatus> {
        let crawl = crawl_name(crawl);
        self.flush()?;
        self.with(|c| c.status(crawl, key, url))
    }

    /// [`Frontier::status`] with what the frontier holds of `url`: the key of its queue and
    /// its metadata, where a lease or one of the two queues asked holds it (a leased URL is
    /// found by the URL, whatever its queue). A done URL comes with the key asked (or its
    /// default key) and no metadata; an unknown one is None. Flushes first. A URL waiting
    /// in the runs is found by a walk of its queue's records, which stops at it (of each of
    /// the two queues, at most, when the first does not hold it).
    pub fn lookup(&self, crawl: &str, key: Option<&[u8]>, url: &[u8]) -> Result<Option<HeldUrl>> {
        let crawl = crawl_name(crawl);
        self.flush()?;
        self.with(|c| c.lookup(crawl, key, url))
    }

    /// Visits the URLs the queues of `crawl` hold (or its queue `key` holds), queue by
    /// queue in key order: those leased, those returned by a retry or an expired lease,
    /// those waiting in queue order, and those to fetch again in date order; `f` returns
    /// false to stop. Done URLs are not held (the sieve keeps a signature of each, not the
    /// URL). Flushes first, so that what was pushed is visited. `f` runs under the
    /// frontier's lock and may see changes of other threads not yet durable: act on what it
    /// saw once this returns Ok (an error after it means they may not be).
    pub fn urls(
        &self,
        crawl: &str,
        key: Option<&[u8]>,
        f: impl FnMut(HeldUrl) -> bool,
    ) -> Result<()> {
        self.flush()?;
        self.urls_from(crawl, key, None, f).map(drop)
    }

    /// [`Frontier::urls`] without a flush, from just after the place `after` on (a place
    /// an earlier call returned; `None`: from the first URL). Returns the place of the last
    /// URL `f` got (`None` if it got none), to resume at. A caller that lists a crawl in
    /// pages, each under the lock for a moment, flushes once, then resumes each page where
    /// the last one stopped: no page walks again the URLs before it, even in one long
    /// queue, and a URL leased or completed in a place already passed shifts nothing.
    pub fn urls_from(
        &self,
        crawl: &str,
        key: Option<&[u8]>,
        after: Option<&HeldPlace>,
        mut f: impl FnMut(HeldUrl) -> bool,
    ) -> Result<Option<HeldPlace>> {
        let crawl = crawl_name(crawl);
        let mut unwound = Unwound::default();
        let after = after.map(|p| (p.key.as_slice(), p.at));
        let r = self.with(|c| {
            c.visit_held(crawl, (key, after), &mut |h| {
                let r = h.record;
                let held = HeldUrl {
                    key: r.key.unwrap_or_else(|| key::default_key(r.url)).to_vec(),
                    url: r.url.to_vec(),
                    metadata: r.meta.to_vec(),
                    status: h.status,
                };
                unwound.call(|| f(held)).unwrap_or(false)
            })
        });
        unwound.resume();
        Ok(r?.map(|(key, at)| HeldPlace { key, at }))
    }

    /// Makes done the URLs that `crawl` (or its queue `key`) holds and `pick` chooses
    /// (url-frontier's PurgeURLs), as [`Frontier::update`] with `refetch_ms` 0 would: those
    /// waiting leave their queues, leased ones' leases end, those to fetch again are not.
    /// Returns how many. What was pushed before the call is in its queue first. The walk goes
    /// in pages of `page` URLs (at least 1), each under the lock for a moment, and the URLs a
    /// page picks are completed in the same step as its walk: a URL that another caller
    /// changes meanwhile (a known update that schedules it again, with new metadata) is
    /// judged as it is when its page takes it, never as it was before. A URL picked is made
    /// done where the walk found it (by its seq), with no look-up of its own. Durable when
    /// this returns Ok.
    pub fn purge(
        &self,
        crawl: &str,
        key: Option<&[u8]>,
        page: usize,
        mut pick: impl FnMut(&HeldUrl) -> bool,
    ) -> Result<u64> {
        self.flush()?;
        let name = crawl_name(crawl);
        let page = page.max(1);
        let (mut purged, mut after) = (0u64, None::<HeldPlace>);
        loop {
            let mut unwound = Unwound::default();
            let r = self.with(|c| {
                let (mut picked, mut walked) = (Vec::new(), 0usize);
                let from = after.as_ref().map(|p| (p.key.as_slice(), p.at));
                let place = c.visit_held(name, (key, from), &mut |h| {
                    let r = h.record;
                    let held = HeldUrl {
                        key: r.key.unwrap_or_else(|| key::default_key(r.url)).to_vec(),
                        url: r.url.to_vec(),
                        metadata: r.meta.to_vec(),
                        status: h.status,
                    };
                    walked += 1;
                    if unwound.call(|| pick(&held)).unwrap_or(false) {
                        // Made done where the visit found it, by its seq and its record
                        // (which holds the key it was pushed with, if any).
                        picked.push((h.seq, h.bytes.to_vec()));
                    }
                    walked < page && !unwound.unwound()
                })?;
                if unwound.unwound() {
                    return Ok((0, None, 0));
                }
                c.complete_held(&picked)?;
                Ok((picked.len() as u64, place, walked))
            });
            unwound.resume();
            let (n, place, walked) = r?;
            purged += n;
            if walked < page {
                return Ok(purged);
            }
            after = place.map(|(key, at)| HeldPlace { key, at });
        }
    }

    /// Refuses (with the error [`Frontier::push`] would return) a URL or key that a push
    /// would refuse, so that a caller can set such items aside before pushing a batch. It
    /// takes no lock: it waits for no other call.
    pub fn validate(&self, url: &[u8], key: Option<&[u8]>) -> Result<()> {
        self.validate_update(url, key)?;
        crate::sieve::refuse_newline(url)?;
        refuse_newline_key(key)?;
        validate_own_key(url, key)
    }

    /// Refuses (with the error [`Frontier::update`] would return) a URL or key that an update
    /// would refuse. Unlike a push, an update takes a URL given no key whose own key is over
    /// [`key::MAX_KEY_LEN`] bytes, and a URL or key holding a newline when its crawl knows
    /// the URL: a frontier may hold such URLs and keys (moved from a plain sieve's output, or
    /// pushed by a build before those checks), and their leases must still end. A newline
    /// passes here; [`Frontier::update`] refuses it when the crawl does not know the URL. It
    /// takes no lock.
    pub fn validate_update(&self, url: &[u8], key: Option<&[u8]>) -> Result<()> {
        crate::sieve::validate_url(url, self.max_url_len)?;
        validate_key(key)
    }

    /// Deletes the queue `key` of `crawl`, with every URL pushed to it before this call:
    /// its URLs waiting and leased (a later done of one changes nothing), its counts, its
    /// policy and its block. Its URLs stay known to the crawl (pushed again, they change
    /// nothing). Returns how many URLs it held. Durable when this returns.
    pub fn delete_queue(&self, crawl: &str, key: &[u8]) -> Result<u64> {
        let crawl = crawl_name(crawl);
        self.with(|c| c.delete_queue(crawl, key))
    }

    /// Calls `visit` with everything each queue that `select` picks (given its crawl's name
    /// and its key) holds ([`QueueExport`]), one queue at a time, to move it to another
    /// frontier; the URLs pushed before this call are in their queues first. Queues done with
    /// are exported too (their URLs stay known where they go). Returns how many queues it
    /// visited. Nothing changes here: the caller deletes the queues once their import is
    /// durable ([`Frontier::delete_queue`]). An error from `visit` stops the export and is
    /// returned. `visit` runs under the frontier's lock and may see changes of other threads
    /// not yet durable: send what it gathered once this returns Ok.
    pub fn export(
        &self,
        mut select: impl FnMut(&str, &[u8]) -> bool,
        mut visit: impl FnMut(QueueExport) -> Result<()>,
    ) -> Result<u64> {
        let unwound = std::cell::RefCell::new(Unwound::default());
        let r = self.with(|c| {
            c.export(
                &mut |crawl, key| {
                    (unwound.borrow_mut())
                        .call(|| select(crawl, key))
                        .unwrap_or(false)
                },
                &mut |q| {
                    (unwound.borrow_mut())
                        .call(|| visit(q))
                        .unwrap_or(Err(Error::Poisoned))
                },
            )
        });
        unwound.into_inner().resume();
        r
    }

    /// [`Frontier::export`] of the queues `queues` (crawl, key), found by their keys: those
    /// that exist and were not released, in the order given.
    pub fn export_queues(
        &self,
        queues: &[(&str, &[u8])],
        mut visit: impl FnMut(QueueExport) -> Result<()>,
    ) -> Result<u64> {
        let mut unwound = Unwound::default();
        let r = self.with(|c| {
            c.export_queues(queues, &mut |q| {
                unwound.call(|| visit(q)).unwrap_or(Err(Error::Poisoned))
            })
        });
        unwound.resume();
        r
    }

    /// Imports queues another frontier exported ([`Frontier::export`]) under the transfer
    /// named `transfer` (a move: its sender's name and the move's, say). Each queue not
    /// received under `transfer` before replaces the queue of its crawl and key here
    /// (whatever that held is dropped, as [`Frontier::delete_queue`] would): every URL of it
    /// becomes known to the crawl, its waiting URLs wait in their order, its leases run to
    /// their deadlines (with tokens of this frontier), and its policy, block and counts are
    /// as given. A queue received before is left as it is (it may have been served since),
    /// so that a sender that did not learn the outcome may send the same queues again. One
    /// durable commit: after a crash either all of it or none of it is here. Returns how many
    /// queues it imported; an empty import records the transfer's name
    /// ([`Frontier::imported`]). A URL twice in one queue, a queue twice, or an invalid URL,
    /// key or policy refuses the whole import.
    pub fn import(&self, transfer: &[u8], queues: &[QueueExport]) -> Result<u64> {
        self.with(|c| c.import(transfer, queues))
    }

    /// Whether anything was imported under the transfer named `transfer` (and its receipts
    /// not forgotten since).
    pub fn imported(&self, transfer: &[u8]) -> Result<bool> {
        self.with(|c| Ok(c.imported(transfer)))
    }

    /// Hand-outs ([`Frontier::lease_with`]) take only the queues whose key passes `filter`
    /// from now on (`None`: every queue), until the frontier is closed: a node of a cluster
    /// serves only the keys it owns, while it still holds others that move away.
    pub fn serve_only(&self, filter: Option<KeyFilter>) -> Result<()> {
        self.with(|c| {
            c.set_serve_only(filter);
            Ok(())
        })
    }

    /// Whether the queue of `key` in `crawl` was received under the transfer named
    /// `transfer` ([`Frontier::import`]).
    pub fn received(&self, transfer: &[u8], crawl: &str, key: &[u8]) -> Result<bool> {
        let crawl = crawl_name(crawl);
        self.with(|c| Ok(c.received(transfer, crawl, key)))
    }

    /// Forgets the receipts of the transfer named `transfer` (once its sender will not send
    /// again); false when there were none. Durable when this returns.
    pub fn end_transfer(&self, transfer: &[u8]) -> Result<bool> {
        self.with(|c| c.end_transfer(transfer))
    }

    /// Releases queues (crawl, key) that moved to another frontier, once their import there
    /// is durable: each is emptied as [`Frontier::delete_queue`] would (its URLs stay known
    /// here), and [`Frontier::export`] leaves it out until it takes URLs again. One durable
    /// commit.
    pub fn release(&self, queues: &[(&str, &[u8])]) -> Result<()> {
        self.with(|c| c.release(queues))
    }

    /// Deletes `crawl` (`""` is `DEFAULT`): each of its queues as [`Frontier::delete_queue`]
    /// does, with every URL pushed to it before this call. Its URLs are forgotten: a later
    /// push to the same name starts a new crawl, in which they are new (`DEFAULT` too; after
    /// that, push to `DEFAULT` through the frontier, not [`Sieve::push`], which pushes to the
    /// store's first crawl). Returns how many URLs its queues held. Durable when this
    /// returns.
    pub fn delete_crawl(&self, crawl: &str) -> Result<u64> {
        let crawl = crawl_name(crawl);
        self.with(|c| c.delete_crawl(crawl))
    }

    /// The names of the crawls, sorted: each one pushed to (or given a policy or a block) and
    /// not deleted since, and `DEFAULT` when it has queues. Flushes first as
    /// [`Frontier::flush_for_reading`] does, so that what was pushed to `DEFAULT` is in its
    /// queues (on a large store, what was pushed since the last merge may wait for the
    /// next).
    pub fn crawls(&self) -> Result<Vec<String>> {
        self.flush_for_reading()?;
        self.with(|c| {
            Ok(c.crawls()
                .into_iter()
                .map(|n| String::from_utf8_lossy(&n).into_owned())
                .collect())
        })
    }

    /// The counts of `crawl`, or (`key` given) of its queue `key`.
    ///
    /// URLs pushed are counted once a flush moved them into their queues (a full buffer,
    /// [`Frontier::flush`], or [`Frontier::flush_for_reading`] first).
    pub fn counts(&self, crawl: &str, key: Option<&[u8]>) -> Result<Counts> {
        let crawl = crawl_name(crawl);
        self.with(|c| Ok(c.counts(crawl, key)))
    }

    /// Pauses (true) or resumes (false) the hand-outs.
    pub fn set_paused(&self, on: bool) -> Result<()> {
        self.with(|c| c.set_paused(on))
    }

    /// Counts.
    ///
    /// URLs pushed are counted once a flush moved them into their queues (a full buffer,
    /// [`Frontier::flush`], or [`Frontier::flush_for_reading`] first).
    pub fn stats(&self) -> Result<FrontierStats> {
        self.with(core::Core::stats)
    }

    /// Pushes that may not be in their queues yet: those pushed since the last merge
    /// (repeats of URLs already known among them, which the merge drops), and new URLs
    /// merged and not yet moved into their queues. [`Frontier::queues`],
    /// [`Frontier::counts`] and [`Frontier::stats`] count the URLs in queues only: a flush
    /// ([`Frontier::flush_for_reading`]) moves these first.
    pub fn unqueued(&self) -> Result<u64> {
        self.with(core::Core::unqueued)
    }

    /// The bytes on disk of the journal's and the checkpoint's files, as they are (spare
    /// journal files and leftovers of a checkpoint included).
    pub fn log_bytes(&self) -> Result<LogBytes> {
        self.with(|c| c.log_bytes())
    }

    /// For `check`: every record waiting in the Q runs has a seq of its own.
    pub(crate) fn verify_seqs(&self) -> Result<()> {
        self.with(|c| c.verify_seqs())
    }

    /// Syncs and closes.
    pub fn close(self) -> Result<()> {
        let core = self.core()?.take();
        match core {
            Some(c) => c.close(),
            None => Err(Error::Poisoned),
        }
    }
}

/// The core's end of a lease for a [`Completion`].
fn end_of(how: Completion) -> core::End {
    match how {
        Completion::Done => core::End::Done,
        Completion::Retry => core::End::Retry,
        Completion::RefetchAt(at) => core::End::Refetch(at),
        Completion::Fetched => core::End::Fetched,
    }
}

/// The crawl `DEFAULT` when the name is empty, as url-frontier says.
fn crawl_name(crawl: &str) -> &[u8] {
    if crawl.is_empty() {
        b"DEFAULT"
    } else {
        crawl.as_bytes()
    }
}

/// The longest name of a crawl, in bytes (a crawl named by a longer one is not made).
pub const MAX_CRAWL_LEN: usize = 1024;

/// Refuses a key that holds a newline, given with a URL pushed: `crivello queues` prints one
/// queue a line, its key as it is. (A key that names a queue, in a lease, a policy, a block
/// or an update, is not refused: a store written before pushes refused them may hold such
/// keys, whose leases must end; an update refuses one only with a URL its crawl does not
/// know, which it would push.)
fn refuse_newline_key(key: Option<&[u8]>) -> Result<()> {
    match key.and_then(|k| memchr::memchr(b'\n', k)) {
        Some(at) => Err(Error::InvalidOption {
            option: "key",
            reason: format!(
                "it holds a newline (byte {at}), which no key holds: `crivello queues` prints \
                 one queue a line"
            ),
        }),
        None => Ok(()),
    }
}

/// Refuses a key longer than [`key::MAX_KEY_LEN`], or empty (None is the URL's own key: a
/// URL whose own key would be empty goes to `_DEFAULT_`, [`key::default_key`]).
fn validate_key(key: Option<&[u8]>) -> Result<()> {
    let reason = match key {
        Some(k) if k.len() > key::MAX_KEY_LEN => {
            format!("longer than {} bytes", key::MAX_KEY_LEN)
        }
        Some([]) => "empty: give None for the URL's own key (its host)".to_owned(),
        _ => return Ok(()),
    };
    Err(Error::InvalidOption {
        option: "key",
        reason,
    })
}

/// Refuses a URL given no key whose own key ([`key::default_key`]) is longer than
/// [`key::MAX_KEY_LEN`]: no call could name its queue.
fn validate_own_key(url: &[u8], key: Option<&[u8]>) -> Result<()> {
    let len = match key {
        None => key::default_key(url).len(),
        Some(_) => return Ok(()),
    };
    if len > key::MAX_KEY_LEN {
        return Err(Error::InvalidUrl(crate::InvalidUrl::KeyTooLong {
            len,
            max: key::MAX_KEY_LEN,
        }));
    }
    Ok(())
}

/// The most bytes of metadata a URL may carry: 64 MiB.
pub const MAX_METADATA_LEN: usize = 64 << 20;

/// Refuses metadata longer than [`MAX_METADATA_LEN`].
fn validate_metadata(metadata: &[u8]) -> Result<()> {
    if metadata.len() > MAX_METADATA_LEN {
        return Err(Error::InvalidOption {
            option: "metadata",
            reason: format!(
                "{} bytes, more than the {MAX_METADATA_LEN} ({} MiB) a URL may carry",
                metadata.len(),
                MAX_METADATA_LEN >> 20
            ),
        });
    }
    Ok(())
}

/// Refuses a hand-out's bounds that would lease nothing or lease for no time.
fn validate_request(req: &LeaseRequest) -> Result<()> {
    let (option, reason) = if req.ttl_ms == 0 {
        (
            "ttl_ms",
            "a lease of no time expires as it is made, and its URL could be handed out again at \
             once: give at least 1 ms",
        )
    } else if req.per_queue == Some(0) {
        (
            "per_queue",
            "0 URLs of each queue hands out nothing: give at least 1, or None for what the \
             queue's policy allows",
        )
    } else {
        return Ok(());
    };
    Err(Error::InvalidOption {
        option,
        reason: reason.to_owned(),
    })
}
