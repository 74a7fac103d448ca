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
//! change is durable (the callbacks of `urls` and `export`, which run under the lock, see
//! changes not yet durable: their callers gather and answer after the call). A failed sync
//! fails every waiter and poisons the frontier, and no sync after it is trusted.
//!
//! Model-checked with loom: `RUSTFLAGS="--cfg loom" cargo test --release
//! --no-default-features --lib loom`.

#[cfg(all(loom, test))]
use loom::sync::{Condvar, Mutex};
#[cfg(not(all(loom, test)))]
use std::sync::{Condvar, Mutex};

use std::io;

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
    /// Threads waiting on the condition variable: a sync that ends wakes them only if there
    /// are any (a wake is a system call, and most commits have no one waiting).
    waiters: u32,
    /// The file of J's newest generation.
    file: Option<F>,
}

/// The journal's group commit: see the module's documentation.
pub(crate) struct Commits<F> {
    state: Mutex<State<F>>,
    cv: Condvar,
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
                waiters: 0,
                file: None,
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> Guard<'_, F> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the end of the sync under way, counted among the waiters.
    fn sleep<'a>(&'a self, mut s: Guard<'a, F>) -> Guard<'a, F> {
        s.waiters += 1;
        let mut s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        s.waiters -= 1;
        s
    }

    /// Under the state's lock, at the end of a sync: wakes the waiters, if any. One that
    /// counted itself did so under this lock before it slept, so none is missed.
    fn wake(&self, s: &Guard<'_, F>) {
        if s.waiters > 0 {
            self.cv.notify_all();
        }
    }

    /// Under the frontier's lock: J's writer has written up to `written` (the count) in
    /// `file`, not synced.
    pub(crate) fn wrote(&self, written: u64, file: &F) {
        let mut s = self.lock();
        s.written = s.written.max(written);
        s.file = Some(file.clone());
    }

    /// Under the frontier's lock: syncs `file`, J's newest generation, holding everything
    /// written up to `written` (the count), for a commit that syncs J itself, a checkpoint or
    /// a close. It waits for a waiter's sync under way to end first, so that a failed sync
    /// is always seen: after a failed fsync, a later one may succeed without the data the
    /// failure dropped, and must not be trusted. Fails if a sync ever failed.
    pub(crate) fn sync_now(&self, file: &F, written: u64) -> io::Result<()> {
        let mut s = self.lock();
        while s.syncing && !s.failed {
            s = self.sleep(s);
        }
        if s.failed {
            return Err(failed());
        }
        s.syncing = true;
        drop(s);
        let synced = file.sync();
        let mut s = self.lock();
        s.syncing = false;
        match synced {
            Ok(()) => {
                s.written = s.written.max(written);
                s.durable = s.durable.max(written);
            }
            Err(_) => s.failed = true,
        }
        self.wake(&s);
        synced
    }

    /// Whether J is durable up to `written` (the count): every byte written so far, when
    /// it is the count of the writer's last write.
    pub(crate) fn covers(&self, written: u64) -> bool {
        let s = self.lock();
        !s.failed && s.durable >= written
    }

    /// Whether a sync failed (a waiter's, or one under the lock).
    pub(crate) fn failed(&self) -> bool {
        self.lock().failed
    }

    /// Waits until J is durable up to `target` (the count), syncing it if no waiter is.
    pub(crate) fn wait(&self, target: u64) -> io::Result<()> {
        let mut s = self.lock();
        loop {
            if s.failed {
                return Err(failed());
            }
            if s.durable >= target {
                return Ok(());
            }
            if s.syncing {
                s = self.sleep(s);
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
                Ok(()) => s.durable = s.durable.max(upto),
                Err(_) => s.failed = true,
            }
            self.wake(&s);
            synced?;
        }
    }
}

/// The error of a sync refused after a failed one.
fn failed() -> io::Error {
    io::Error::other("an earlier sync of the journal failed")
}

#[cfg(all(loom, test))]
type Guard<'a, F> = loom::sync::MutexGuard<'a, State<F>>;
#[cfg(not(all(loom, test)))]
type Guard<'a, F> = std::sync::MutexGuard<'a, State<F>>;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Commits, Durable};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    /// A file whose first sync fails and later ones succeed (as Linux reports a writeback
    /// error once, then drops the pages that failed).
    #[derive(Clone)]
    struct Flaky(Arc<AtomicU32>);

    impl Durable for Flaky {
        fn sync(&self) -> std::io::Result<()> {
            if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
                Err(std::io::Error::other("EIO"))
            } else {
                Ok(())
            }
        }
    }

    /// After a waiter's sync failed, nothing is durable any more: not a later waiter, not a
    /// sync under the lock, whose success would hide the dropped bytes.
    #[test]
    fn a_failed_sync_is_never_followed_by_a_trusted_one() {
        let file = Flaky(Arc::new(AtomicU32::new(0)));
        let c = Commits::new();
        c.wrote(10, &file);
        assert!(c.wait(10).is_err());
        assert!(c.failed());
        assert!(c.sync_now(&file, 20).is_err());
        assert!(c.wait(10).is_err());
        assert!(!c.covers(10) && !c.covers(0));
        // Only the first sync ran.
        assert_eq!(file.0.load(Ordering::SeqCst), 1);
    }

    /// A sync counts for what was written before it began: bytes written while it is under
    /// way are not covered when it returns (J's epochs rely on it).
    #[test]
    fn a_sync_under_way_does_not_cover_what_is_written_meanwhile() {
        use std::sync::mpsc;
        use std::sync::Mutex;
        /// A file whose sync tells that it began, then waits for leave to return.
        #[derive(Clone)]
        struct Slow(Arc<Mutex<(mpsc::Sender<()>, mpsc::Receiver<()>)>>);
        impl Durable for Slow {
            fn sync(&self) -> std::io::Result<()> {
                let g = self.0.lock().unwrap();
                g.0.send(()).unwrap();
                g.1.recv().unwrap();
                Ok(())
            }
        }
        let (began_tx, began_rx) = mpsc::channel();
        let (leave_tx, leave_rx) = mpsc::channel();
        let file = Slow(Arc::new(Mutex::new((began_tx, leave_rx))));
        let c = Arc::new(Commits::new());
        c.wrote(10, &file);
        let (c2, f2) = (c.clone(), file.clone());
        let waiter = std::thread::spawn(move || {
            let _ = &f2;
            c2.wait(10)
        });
        began_rx.recv().unwrap();
        // A frame written while the sync runs.
        c.wrote(20, &file);
        leave_tx.send(()).unwrap();
        waiter.join().unwrap().unwrap();
        assert!(c.covers(10));
        assert!(!c.covers(20), "a sync under way covered a later write");
        // The next sync covers it.
        let waiter = {
            let c = c.clone();
            std::thread::spawn(move || c.wait(20))
        };
        began_rx.recv().unwrap();
        leave_tx.send(()).unwrap();
        waiter.join().unwrap().unwrap();
        assert!(c.covers(20));
    }

    /// Syncs under the lock make the waiters' bytes durable: none of them syncs again.
    #[test]
    fn a_sync_under_the_lock_serves_the_waiters() {
        let file = Flaky(Arc::new(AtomicU32::new(1)));
        let c = Commits::new();
        c.wrote(10, &file);
        c.sync_now(&file, 10).unwrap();
        assert!(c.covers(10));
        c.wait(10).unwrap();
        assert_eq!(file.0.load(Ordering::SeqCst), 2);
        c.wrote(15, &file);
        assert!(!c.covers(15));
        c.wait(12).unwrap();
        assert!(c.covers(15));
        assert_eq!(file.0.load(Ordering::SeqCst), 3);
    }
}

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

    /// One thread commits deferred and waits; the other writes and syncs under the lock
    /// (`sync_now`). If the first sync to run fails, the other fails too: a sync after a
    /// failed one is never trusted.
    fn model_with_a_sync_under_the_lock(fail_first: bool) {
        loom::model(move || {
            let count = Arc::new(AtomicU64::new(0));
            let file = Fake {
                written: Arc::new(AtomicU64::new(0)),
                durable: Arc::new(AtomicU64::new(0)),
                fail: false,
            };
            #[derive(Clone)]
            struct Flaky(Fake, Arc<AtomicU64>, bool);
            impl Durable for Flaky {
                fn sync(&self) -> std::io::Result<()> {
                    if self.2 && self.1.fetch_add(1, Ordering::AcqRel) == 0 {
                        return Err(std::io::Error::other("EIO"));
                    }
                    self.0.sync()
                }
            }
            let flaky = Flaky(file.clone(), count, fail_first);
            let commits = std::sync::Arc::new(Commits::<Flaky>::new());
            let core = Arc::new(Mutex::new(0u64));
            let (c2, k2, f2) = (commits.clone(), core.clone(), flaky.clone());
            let waiter = thread::spawn(move || {
                let target = {
                    let mut n = k2.lock().unwrap();
                    *n += 1;
                    f2.0.written.store(*n, Ordering::Release);
                    c2.wrote(*n, &f2);
                    *n
                };
                let ok = c2.wait(target).is_ok();
                if ok {
                    assert!(f2.0.durable.load(Ordering::Acquire) >= target);
                }
                ok
            });
            let mine = {
                let mut n = core.lock().unwrap();
                *n += 1;
                flaky.0.written.store(*n, Ordering::Release);
                let ok = commits.sync_now(&flaky, *n).is_ok();
                if ok {
                    assert!(file.durable.load(Ordering::Acquire) >= *n);
                }
                ok
            };
            let theirs = waiter.join().unwrap();
            if fail_first {
                assert!(!mine && !theirs);
            } else {
                assert!(mine && theirs);
            }
        });
    }

    #[test]
    fn loom_a_sync_under_the_lock_and_a_waiter_are_both_durable() {
        model_with_a_sync_under_the_lock(false);
    }

    #[test]
    fn loom_after_a_failed_sync_a_sync_under_the_lock_is_not_trusted() {
        model_with_a_sync_under_the_lock(true);
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
