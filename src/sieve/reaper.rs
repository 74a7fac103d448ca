//! Removal of superseded files, off the pushing and flush threads.
//!
//! When a merge has committed, the A generations it emitted from, the runs it merged and the
//! Z segments it replaced are superseded. Removing them is not part of the commit (a crash
//! leaves orphans that the next open removes), but it is not free: the system frees a file's
//! cached pages when its name is gone and its last handle closes, about 65 ms for an A
//! generation of 185 MB. With background flushes a reaper thread does it, so that neither
//! the flush thread nor the pushing thread waits for it (RocksDB deletes obsolete files in
//! the background for the same reason); the last handles of those files are handed to it as
//! well. Inline, everything is done at once, in the caller's order.
//!
//! Only names that are never used again go to the reaper: generation numbers and segment
//! and run ids only grow. The scratch file of a merge, whose name every merge reuses, is
//! removed by the merge itself.
//!
//! Superseded A generations are not all removed: up to [`SPARE_GENERATIONS`] are kept as
//! *spares*, whose files new generations take (see [`super::wal`]). A spare is never
//! replayed: its number is below the manifest's, so an open removes it, and so does the
//! reaper when it is dropped.

use std::ops::Range;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

use crate::storage::Storage;

use crate::names;

/// The most superseded A generations kept for reuse. Three cover the generations created
/// between two merges when each merge follows two spills.
pub const SPARE_GENERATIONS: usize = 3;

enum Work {
    Remove(String),
    Generations(Range<u64>),
    Release(Box<dyn Send>),
}

/// Removes superseded files and drops the last handles of removed files: on a thread of its
/// own, or inline. Keeps a few superseded A generations as spares. Dropping the reaper waits
/// for its work to be done, then removes the spares.
pub(crate) struct Reaper {
    storage: Arc<dyn Storage>,
    spares: Arc<Mutex<Vec<u64>>>,
    to_thread: Option<mpsc::Sender<Work>>,
    thread: Option<JoinHandle<()>>,
}

impl Reaper {
    /// A reaper that works on a thread of its own if `background` (and a thread can be
    /// started), else inline.
    pub(crate) fn new(storage: Arc<dyn Storage>, background: bool) -> Reaper {
        let spares = Arc::new(Mutex::new(Vec::new()));
        let mut reaper = Reaper {
            storage: storage.clone(),
            spares: spares.clone(),
            to_thread: None,
            thread: None,
        };
        if background {
            let (tx, rx) = mpsc::channel::<Work>();
            let spawned = std::thread::Builder::new()
                .name("crivello-reaper".into())
                .spawn(move || {
                    for work in rx {
                        perform(&*storage, &spares, work);
                    }
                });
            if let Ok(thread) = spawned {
                reaper.to_thread = Some(tx);
                reaper.thread = Some(thread);
            }
        }
        reaper
    }

    fn submit(&self, work: Work) {
        let work = match &self.to_thread {
            Some(tx) => match tx.send(work) {
                Ok(()) => return,
                Err(mpsc::SendError(work)) => work,
            },
            None => work,
        };
        perform(&*self.storage, &self.spares, work);
    }

    /// Removes file `name` (best effort).
    pub(crate) fn remove(&self, name: &str) {
        self.submit(Work::Remove(name.to_string()));
    }

    /// Removes the A generations in `gens` that exist (best effort), or keeps them as spares
    /// while there are fewer than [`SPARE_GENERATIONS`]. Found by listing, so that the work
    /// follows the files, not the numbers, which a damaged manifest could set far apart.
    pub(crate) fn remove_generations(&self, gens: Range<u64>) {
        self.submit(Work::Generations(gens));
    }

    /// Takes a spare: a superseded A generation whose file a new generation may take. It is
    /// no longer the reaper's.
    pub(crate) fn take_spare(&self) -> Option<u64> {
        self.spares.lock().ok()?.pop()
    }

    /// Drops `handles` after the work submitted before: when they hold the last handles of
    /// removed files, the system frees those files there.
    pub(crate) fn release<T: Send + 'static>(&self, handles: T) {
        self.submit(Work::Release(Box::new(handles)));
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.to_thread.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Ok(mut spares) = self.spares.lock() {
            for g in spares.drain(..) {
                let _ = self.storage.remove(&names::a(g));
            }
        }
    }
}

fn perform(storage: &dyn Storage, spares: &Mutex<Vec<u64>>, work: Work) {
    match work {
        Work::Remove(name) => {
            let _ = storage.remove(&name);
        }
        Work::Generations(gens) => retire_generations(storage, gens, spares, SPARE_GENERATIONS),
        Work::Release(handles) => drop(handles),
    }
}

/// Removes the A generations in `gens` that exist, now, keeping none (best effort).
pub(crate) fn remove_generations(storage: &dyn Storage, gens: Range<u64>) {
    retire_generations(storage, gens, &Mutex::new(Vec::new()), 0);
}

/// Keeps the A generations in `gens` that exist as `spares` while they are fewer than
/// `keep`, and removes the others.
fn retire_generations(
    storage: &dyn Storage,
    gens: Range<u64>,
    spares: &Mutex<Vec<u64>>,
    keep: usize,
) {
    let Ok(listed) = storage.list() else { return };
    for name in listed {
        let Some(g) = names::parse_a(&name).filter(|g| gens.contains(g)) else {
            continue;
        };
        match spares.lock() {
            Ok(mut s) if s.len() < keep => s.push(g),
            _ => {
                let _ = storage.remove(&name);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::storage::SimDisk;
    use std::sync::Mutex;

    fn names(disk: &SimDisk) -> Vec<String> {
        let mut n = disk.list().unwrap();
        n.sort();
        n
    }

    #[test]
    fn the_work_is_done_by_the_time_the_reaper_is_dropped() {
        for background in [false, true] {
            let disk = Arc::new(SimDisk::new());
            for name in [names::a(1), names::a(2), names::a(5), "x".into()] {
                disk.create(&name).unwrap();
            }
            let handle = disk.open("x").unwrap();
            let reaper = Reaper::new(disk.clone(), background);
            reaper.remove_generations(0..3);
            reaper.remove("x");
            reaper.release(handle);
            drop(reaper);
            assert_eq!(names(&disk), [names::a(5)], "background: {background}");
        }
    }

    #[test]
    fn handles_are_released_after_the_work_submitted_before() {
        // The handle's drop sees the removal already done.
        struct Witness(Arc<SimDisk>, Arc<Mutex<Option<bool>>>);
        impl Drop for Witness {
            fn drop(&mut self) {
                let gone = !self.0.list().unwrap().contains(&"y".to_string());
                *self.1.lock().unwrap() = Some(gone);
            }
        }
        for background in [false, true] {
            let disk = Arc::new(SimDisk::new());
            disk.create("y").unwrap();
            let seen = Arc::new(Mutex::new(None));
            let reaper = Reaper::new(disk.clone(), background);
            reaper.remove("y");
            reaper.release(Witness(disk.clone(), seen.clone()));
            drop(reaper);
            assert_eq!(
                *seen.lock().unwrap(),
                Some(true),
                "background: {background}"
            );
        }
    }
}
