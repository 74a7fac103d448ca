//! Group commit of the journal across the threads that share a [`super::Frontier`].
//!
//! A hand-out or an end of leases writes its entries to J and applies them under the
//! frontier's lock, then lets the lock go and waits here until J is durable up to the bytes it
//! wrote (or saw written). The first waiter that finds no sync under way syncs J's file for
//! everyone: what was written before its sync began is durable when it returns, so the calls
//! of many threads that wrote meanwhile share one fsync, and a thread leases or completes
//! while another's fsync runs. Nothing is reported before it is durable: every call of the
//! frontier waits here, after its lock, for what J held when it let the lock go, so a call
//! that saw a change another thread made (a URL leased, a count) answers only once that
//! change is durable. A failed sync fails every waiter and poisons the frontier.
//!
//! Model-checked with loom: `RUSTFLAGS="--cfg loom" cargo test --release
//! --no-default-features --lib loom`.

#[cfg(all(loom, test))]
use loom::sync::{Condvar, Mutex};
#[cfg(not(all(loom, test)))]
use std::sync::{Condvar, Mutex};

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// A file that can be made durable.
pub(crate) trait Durable: Clone + Send {
    /// Makes every byte written to the file before the call durable.
    fn sync(&self) -> io::Result<()>;
}

impl Durable for crate::storage::File {
    fn sync(&self) -> io::Result<()> {
        self.raw().sync()
    }
}

struct State<F> {
    /// Bytes written to J by this process's deferred commits (a count, across generations).
    written: u64,
    /// Bytes of that count known durable.
    durable: u64,
    /// Whether a waiter is syncing.
    syncing: bool,
    /// A sync failed: nothing more is acknowledged.
    failed: bool,
    /// The file of J's newest generation.
    file: Option<F>,
}

/// The journal's group commit: see the module's documentation.
pub(crate) struct Commits<F> {
    state: Mutex<State<F>>,
    cv: Condvar,
    /// Syncs by waiters that returned: J's writer counts them in its frames' epochs (a frame
    /// written after a sync returned is of a later epoch than those written before).
    returned: Arc<AtomicU32>,
}

impl<F: Durable> Commits<F> {
    /// Nothing written yet.
    pub(crate) fn new() -> Commits<F> {
        Commits {
            state: Mutex::new(State {
                written: 0,
                durable: 0,
                syncing: false,
                failed: false,
                file: None,
            }),
            cv: Condvar::new(),
            returned: Arc::new(AtomicU32::new(0)),
        }
    }

    /// The count of syncs by waiters that returned, for J's writer.
    pub(crate) fn returned(&self) -> Arc<AtomicU32> {
        self.returned.clone()
    }

    fn lock(&self) -> Guard<'_, F> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Under the frontier's lock: J's writer has written up to `written` (the count) in
    /// `file`, not synced.
    pub(crate) fn wrote(&self, written: u64, file: &F) {
        let mut s = self.lock();
        s.written = s.written.max(written);
        s.file = Some(file.clone());
    }

    /// Under the frontier's lock: J was synced there with everything written up to
    /// `written` (a commit that syncs J itself, a checkpoint, a close).
    pub(crate) fn synced(&self, written: u64) {
        let mut s = self.lock();
        s.written = s.written.max(written);
        if s.durable < written {
            s.durable = written;
            self.cv.notify_all();
        }
    }

    /// Whether a sync by a waiter failed.
    pub(crate) fn failed(&self) -> bool {
        self.lock().failed
    }

    /// Waits until J is durable up to `target` (the count), syncing it if no waiter is.
    pub(crate) fn wait(&self, target: u64) -> io::Result<()> {
        let mut s = self.lock();
        loop {
            if s.failed {
                return Err(io::Error::other("an earlier sync of the journal failed"));
            }
            if s.durable >= target {
                return Ok(());
            }
            if s.syncing {
                s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            let Some(file) = s.file.clone() else {
                // Written counts come with their file: nothing to sync is durable already.
                s.durable = s.written;
                continue;
            };
            s.syncing = true;
            let upto = s.written;
            drop(s);
            let synced = file.sync();
            s = self.lock();
            s.syncing = false;
            match synced {
                Ok(()) => {
                    s.durable = s.durable.max(upto);
                    self.returned.fetch_add(1, Ordering::Release);
                }
                Err(_) => s.failed = true,
            }
            self.cv.notify_all();
            synced?;
        }
    }
}

#[cfg(all(loom, test))]
type Guard<'a, F> = loom::sync::MutexGuard<'a, State<F>>;
#[cfg(not(all(loom, test)))]
type Guard<'a, F> = std::sync::MutexGuard<'a, State<F>>;

/// The group commit, model-checked with loom: two threads write under a lock (the
/// frontier's) and wait; the file's sync makes durable what was written before it began. An
/// acknowledged write is durable, no waiter hangs, and a failed sync fails every waiter that
/// is not already covered.
#[cfg(all(loom, test))]
mod loom_model {
    use super::{Commits, Durable};
    use loom::sync::atomic::{AtomicU64, Ordering};
    use loom::sync::{Arc, Mutex};
    use loom::thread;

    /// A file: bytes written, and those a sync made durable.
    #[derive(Clone)]
    struct Fake {
        written: Arc<AtomicU64>,
        durable: Arc<AtomicU64>,
        fail: bool,
    }

    impl Durable for Fake {
        fn sync(&self) -> std::io::Result<()> {
            let upto = self.written.load(Ordering::Acquire);
            if self.fail {
                return Err(std::io::Error::other("EIO"));
            }
            self.durable.fetch_max(upto, Ordering::AcqRel);
            Ok(())
        }
    }

    fn model(fail: bool) {
        loom::model(move || {
            let file = Fake {
                written: Arc::new(AtomicU64::new(0)),
                durable: Arc::new(AtomicU64::new(0)),
                fail,
            };
            let commits = std::sync::Arc::new(Commits::<Fake>::new());
            // The frontier's lock, over the count of bytes written.
            let core = Arc::new(Mutex::new(0u64));
            let call = |commits: std::sync::Arc<Commits<Fake>>, core: Arc<Mutex<u64>>, f: Fake| {
                let target = {
                    let mut n = core.lock().unwrap();
                    *n += 1;
                    f.written.store(*n, Ordering::Release);
                    commits.wrote(*n, &f);
                    *n
                };
                let r = commits.wait(target);
                if r.is_ok() {
                    // Acknowledged: durable.
                    assert!(f.durable.load(Ordering::Acquire) >= target);
                }
                r.is_ok()
            };
            let (c2, k2, f2) = (commits.clone(), core.clone(), file.clone());
            let other = thread::spawn(move || call(c2, k2, f2));
            let mine = call(commits.clone(), core.clone(), file.clone());
            let theirs = other.join().unwrap();
            if fail {
                assert!(!mine && !theirs);
                assert!(commits.failed());
            } else {
                assert!(mine && theirs);
                assert_eq!(file.durable.load(Ordering::Acquire), 2);
            }
        });
    }

    #[test]
    fn loom_two_threads_commit_and_each_returns_once_durable() {
        model(false);
    }

    #[test]
    fn loom_a_failed_sync_fails_every_waiter_and_none_hangs() {
        model(true);
    }
}
