//! Turns at the frontier's lock for the threads it keeps waiting.
//!
//! The frontier's state sits under one lock, the standard library's, which goes to whichever
//! thread asks first once it is free. A thread that calls again at once takes it back before
//! a waiting thread has woken: two threads leasing and completing back to back on two cores,
//! one call waited 0.4–1.6 s for the lock while the other thread made hundreds of calls of
//! about a millisecond. A lock handed to the longest waiter at every release bounds that
//! wait, but leaves both threads idle while the waiter wakes, at every call: on the same
//! machine, where a thread may take milliseconds to wake, that lost a third to three quarters
//! of the two threads' throughput (`docs/performance.md`, "Turns at the frontier's lock").
//!
//! The turns keep the fast lock and bound the wait. A thread that finds the lock taken takes
//! a ticket, with the instant it began to wait, before it waits for the lock; a thread about
//! to take the lock first lets every thread that has waited longer than the patience take it
//! before it tries. The ticket's owner gives its ticket back once it holds the lock (or if
//! taking it panics). A thread kept waiting therefore waits about the patience, then the call
//! under way and a call of each other thread already waiting for the lock (the lock itself
//! serves its waiters in no set order); while threads contend, the lock changes hands this
//! way about once per patience for each thread kept waiting, so the wake-ups cost little.
//!
//! Model-checked with loom: `RUSTFLAGS="--cfg loom" cargo test --release
//! --no-default-features --lib loom`.

#[cfg(all(loom, test))]
use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(all(loom, test)))]
use std::sync::{Condvar, Mutex, MutexGuard};

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long a thread may wait for the frontier's lock before the threads that would take it
/// first let it go first.
pub(crate) const PATIENCE: Duration = Duration::from_millis(100);

struct State {
    /// The next ticket.
    next: u64,
    /// The tickets of the threads waiting for the lock, oldest first, with the instant each
    /// began to wait.
    waiting: VecDeque<(u64, Instant)>,
}

/// A thread's ticket, given back when dropped.
struct Ticket<'a> {
    turns: &'a Turns,
    ticket: u64,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut s = self.turns.state();
        if let Some(at) = s.waiting.iter().position(|&(t, _)| t == self.ticket) {
            s.waiting.remove(at);
        }
        drop(s);
        self.turns.cv.notify_all();
    }
}

/// Turns at a lock: see the module's documentation.
pub(crate) struct Turns {
    state: Mutex<State>,
    cv: Condvar,
    patience: Duration,
}

impl Turns {
    /// Turns that let a thread that waited longer than `patience` go first.
    pub(crate) fn new(patience: Duration) -> Turns {
        Turns {
            state: Mutex::new(State {
                next: 0,
                waiting: VecDeque::new(),
            }),
            cv: Condvar::new(),
            patience,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is whole between any two statements: a panic leaves nothing half done.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the lock: `try_take` takes it if it is free (None: taken), `take` waits for it.
    /// First lets every thread that has waited longer than the patience take it.
    pub(crate) fn enter<G>(
        &self,
        try_take: impl FnOnce() -> Option<G>,
        take: impl FnOnce() -> G,
    ) -> G {
        let mut s = self.state();
        while let Some(&(_, since)) = s.waiting.front() {
            if since.elapsed() < self.patience {
                break;
            }
            // Its owner waits for the lock, which this thread does not hold: it takes the
            // lock, gives its ticket back and wakes this thread.
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        drop(s);
        if let Some(held) = try_take() {
            return held;
        }
        let ticket = {
            let mut s = self.state();
            let ticket = s.next;
            s.next += 1;
            s.waiting.push_back((ticket, Instant::now()));
            ticket
        };
        // The ticket goes back once the lock is held, or if `take` panics: a ticket left
        // behind would hold every later thread back for ever.
        let _ticket = Ticket {
            turns: self,
            ticket,
        };
        take()
    }

    /// How many threads wait for the lock with a ticket.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.state().waiting.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Turns;
    use std::sync::{Arc, Mutex, TryLockError};
    use std::time::Duration;

    fn enter<'a>(
        turns: &Turns,
        lock: &'a Mutex<Vec<&'static str>>,
    ) -> std::sync::MutexGuard<'a, Vec<&'static str>> {
        turns.enter(
            || match lock.try_lock() {
                Ok(g) => Some(g),
                Err(TryLockError::WouldBlock) => None,
                Err(TryLockError::Poisoned(_)) => panic!("poisoned"),
            },
            || lock.lock().unwrap(),
        )
    }

    /// A thread that waited longer than the patience takes the lock before the thread that
    /// let it go can take it again.
    #[test]
    fn a_thread_kept_waiting_goes_before_the_one_that_held_the_lock() {
        let turns = Arc::new(Turns::new(Duration::ZERO));
        let lock = Arc::new(Mutex::new(Vec::new()));
        let held = enter(&turns, &lock);
        let waiter = {
            let (turns, lock) = (turns.clone(), lock.clone());
            std::thread::spawn(move || enter(&turns, &lock).push("waiter"))
        };
        while turns.waiting() == 0 {
            std::thread::yield_now();
        }
        drop(held);
        enter(&turns, &lock).push("holder again");
        waiter.join().unwrap();
        assert_eq!(*lock.lock().unwrap(), ["waiter", "holder again"]);
        assert_eq!(turns.waiting(), 0);
    }

    /// Within the patience, a thread that finds the lock free takes it at once, whoever
    /// holds a ticket.
    #[test]
    fn within_the_patience_a_free_lock_is_taken_at_once() {
        let turns = Arc::new(Turns::new(Duration::from_secs(3600)));
        let (release, wait) = std::sync::mpsc::channel::<()>();
        // A thread with a ticket: its `take` waits until the test releases it.
        let waiter = {
            let turns = turns.clone();
            std::thread::spawn(move || turns.enter(|| None, || wait.recv().unwrap()))
        };
        while turns.waiting() == 0 {
            std::thread::yield_now();
        }
        let (done, entered) = std::sync::mpsc::channel();
        let other = {
            let turns = turns.clone();
            std::thread::spawn(move || {
                turns.enter(|| Some(()), || unreachable!("the lock was free"));
                done.send(()).unwrap();
            })
        };
        let at_once = entered.recv_timeout(Duration::from_secs(20));
        release.send(()).unwrap();
        waiter.join().unwrap();
        other.join().unwrap();
        assert!(at_once.is_ok(), "a young ticket held another thread back");
        assert_eq!(turns.waiting(), 0);
    }

    /// A thread whose wait for the lock panics gives its ticket back.
    #[test]
    fn a_ticket_goes_back_when_taking_the_lock_panics() {
        let turns = Arc::new(Turns::new(Duration::ZERO));
        let panicked = {
            let turns = turns.clone();
            std::thread::spawn(move || turns.enter(|| None, || -> () { panic!("taking failed") }))
        };
        assert!(panicked.join().is_err());
        assert_eq!(turns.waiting(), 0);
        turns.enter(|| Some(()), || unreachable!("the lock was free"));
    }
}

/// The turns, model-checked with loom: threads that enter at once each hold the lock alone,
/// none waits for ever, and a thread with a ticket goes before one that let the lock go.
#[cfg(all(loom, test))]
mod loom_model {
    use super::Turns;
    use loom::sync::{Arc, Mutex};
    use loom::thread;
    use std::sync::TryLockError;
    use std::time::Duration;

    fn enter<'a>(turns: &Turns, lock: &'a Mutex<Vec<u8>>) -> loom::sync::MutexGuard<'a, Vec<u8>> {
        turns.enter(
            || match lock.try_lock() {
                Ok(g) => Some(g),
                Err(TryLockError::WouldBlock) => None,
                Err(TryLockError::Poisoned(_)) => panic!("poisoned"),
            },
            || lock.lock().unwrap(),
        )
    }

    #[test]
    fn loom_threads_taking_turns_each_hold_the_lock_alone_and_all_enter() {
        loom::model(|| {
            let turns = Arc::new(Turns::new(Duration::ZERO));
            let lock = Arc::new(Mutex::new(Vec::new()));
            let threads: Vec<_> = (1..=2u8)
                .map(|id| {
                    let (turns, lock) = (turns.clone(), lock.clone());
                    thread::spawn(move || {
                        let mut held = enter(&turns, &lock);
                        held.push(id);
                        held.push(id);
                    })
                })
                .collect();
            {
                let mut held = enter(&turns, &lock);
                held.push(0);
                held.push(0);
            }
            for t in threads {
                t.join().unwrap();
            }
            let seen = lock.lock().unwrap().clone();
            assert_eq!(seen.len(), 6);
            for pair in seen.chunks(2) {
                assert_eq!(
                    pair[0], pair[1],
                    "two threads held the lock at once: {seen:?}"
                );
            }
        });
    }

    #[test]
    fn loom_a_waiting_thread_goes_before_the_holder_enters_again() {
        loom::model(|| {
            let turns = Arc::new(Turns::new(Duration::ZERO));
            let lock = Arc::new(Mutex::new(Vec::new()));
            let waiter = {
                let (turns, lock) = (turns.clone(), lock.clone());
                thread::spawn(move || enter(&turns, &lock).push(1))
            };
            let mut held = enter(&turns, &lock);
            held.push(0);
            // Whether the other thread took a ticket while this one held the lock.
            let ticketed = turns.waiting() > 0;
            drop(held);
            enter(&turns, &lock).push(0);
            waiter.join().unwrap();
            let seen = lock.lock().unwrap().clone();
            if ticketed {
                assert_eq!(seen, [0, 1, 0], "the holder took the lock again first");
            }
        });
    }
}
