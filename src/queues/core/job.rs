//! Work the frontier hands to a thread of its own while its calls go on: a move's run, a
//! merge of the Q runs, a checkpoint's switch. Each is a [`Job`]: the first call that finds
//! it finished (or one that must wait for it) takes its result under the frontier's lock,
//! and a frontier dropped without a close waits for it, so that no file is written after the
//! store's lock is let go.

use std::thread::JoinHandle;

use crate::error::{Error, Result};

/// A piece of work running on a thread of its own.
pub(super) struct Job<T> {
    thread: Option<JoinHandle<Result<T>>>,
}

impl<T: Send + 'static> Job<T> {
    /// Runs `work(input)` on a thread named `name`; gives `input` back when no thread can be
    /// had (the caller then does the work itself, and nothing of it is lost).
    pub(super) fn spawn<I: Send + 'static>(
        name: &str,
        input: I,
        work: impl FnOnce(I) -> Result<T> + Send + 'static,
    ) -> std::result::Result<Job<T>, I> {
        // The input goes to the thread once it runs: a closure that held it would drop it
        // with the thread that could not be made.
        let (give, take) = std::sync::mpsc::channel::<I>();
        let spawned = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || match take.recv() {
                Ok(input) => work(input),
                Err(_) => Err(Error::Poisoned),
            });
        match spawned {
            Ok(thread) => {
                // The thread holds the receiver until it has the input.
                let _ = give.send(input);
                Ok(Job {
                    thread: Some(thread),
                })
            }
            Err(_) => Err(input),
        }
    }

    /// A job of a thread already running (tests).
    #[cfg(test)]
    pub(super) fn of(thread: JoinHandle<Result<T>>) -> Job<T> {
        Job {
            thread: Some(thread),
        }
    }

    /// Whether the work is done (or failed, or its result taken).
    pub(super) fn finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits for the work's end and takes its result; a thread that panicked gives
    /// [`Error::Poisoned`].
    pub(super) fn join(&mut self) -> Result<T> {
        let thread = self.thread.take().expect("joined once");
        thread.join().unwrap_or(Err(Error::Poisoned))
    }
}

impl<T> Drop for Job<T> {
    /// Waits for the work, whose result nobody takes.
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Job;
    use crate::error::Error;

    #[test]
    fn a_job_gives_its_result_once_and_a_panic_poisons() {
        let mut j = Job::spawn("job-test", 20, |n: u32| Ok(n + 1)).ok().unwrap();
        assert_eq!(j.join().unwrap(), 21);
        assert!(j.finished());
        let mut p = Job::<u32>::spawn("job-test", (), |()| panic!("planned"))
            .ok()
            .unwrap();
        assert!(matches!(p.join(), Err(Error::Poisoned)));
    }

    #[test]
    fn a_job_dropped_waits_for_its_work() {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = done.clone();
        let j = Job::spawn("job-test", (), move |()| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        })
        .ok()
        .unwrap();
        drop(j);
        assert!(done.load(std::sync::atomic::Ordering::SeqCst));
    }
}
