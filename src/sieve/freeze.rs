//! Freezing a full buffer of S into a flush job, and applying what the flush committed: the
//! pushing thread's side of the background flush.

use std::sync::Arc;
use std::thread::JoinHandle;

use super::flush::{self, Batch, FlushDone, FlushJob, Torn};
use super::gate::Gate;
use super::{wal, Sieve};
use crate::buffer::Slot;
use crate::error::{Error, Result};
use crate::manifest::{Manifest, Mode};
use crate::run::{Run, RunMeta};
use crate::storage::File;

/// A flush under way, and what the pushing thread knows of it.
pub(super) struct InFlight {
    job: Job,
    gate: Arc<Gate>,
    /// The pushes of its batch (counted in `stats` until it commits).
    pub(super) pushes: u64,
    merge: bool,
    /// The A generation of the job's batch (number, file): synced before any later one.
    wal: File,
}

/// A flush job under way: on the flush thread, or deferred (see `Options::defer_merges`).
enum Job {
    Thread(JoinHandle<Result<FlushDone>>),
    Deferred(Box<FlushJob>),
}

impl InFlight {
    pub(super) fn is_finished(&self) -> bool {
        match &self.job {
            Job::Thread(h) => h.is_finished(),
            Job::Deferred(_) => false,
        }
    }

    /// Whether it is deferred: run only when something waits for it.
    pub(super) fn is_deferred(&self) -> bool {
        matches!(self.job, Job::Deferred(_))
    }

    /// Waits until its batch's A generation is durable, or its flush failed before: true
    /// when durable.
    pub(super) fn wait_durable(&self) -> bool {
        self.gate.wait()
    }

    /// Waits for its thread, if any, to end (its outcome dropped).
    pub(super) fn join(self) {
        if let Job::Thread(handle) = self.job {
            let _ = handle.join();
        }
    }
}

impl Sieve {
    /// Fixes how the store is used, if nothing did yet; fails with [`Error::WrongMode`] if it
    /// is used the other way. Commits the manifest (with no flush under way).
    pub(crate) fn fix_mode(&mut self, mode: Mode) -> Result<()> {
        if self.manifest.mode == mode {
            return Ok(());
        }
        if self.manifest.mode != Mode::Unset {
            return Err(self.wrong_mode());
        }
        self.commit_manifest_with(|m| m.mode = mode)
    }

    /// Records in the manifest whether the frontier writes its Q runs compressed, if it
    /// says otherwise.
    pub(crate) fn fix_queue_coding(&mut self, compressed: bool) -> Result<()> {
        if self.manifest.compress_queues == compressed {
            return Ok(());
        }
        self.commit_manifest_with(|m| m.compress_queues = compressed)
    }

    /// Commits the manifest as it is, in this build's version: before a file that older
    /// versions cannot read is written, so that they refuse the store by its version.
    pub(crate) fn commit_version(&mut self) -> Result<()> {
        self.commit_manifest_with(|_| ())
    }

    /// Commits the manifest changed by `change`, in this build's version, once no flush is
    /// under way; a failure poisons the store.
    fn commit_manifest_with(&mut self, change: impl FnOnce(&mut Manifest)) -> Result<()> {
        // A store stopped by an earlier error writes nothing more.
        self.writable()?;
        let r = self.decide().and_then(|()| self.finish_inflight());
        self.poison(r)?;
        let mut m = self.manifest.clone();
        m.commit += 1;
        change(&mut m);
        let r = m.commit_to(&*self.storage);
        self.poison(r)?;
        self.manifest = m;
        Ok(())
    }

    /// The error of a store used the other way.
    pub(crate) fn wrong_mode(&self) -> Error {
        Error::WrongMode {
            dir: self.storage.describe(),
            mode: self.manifest.mode,
        }
    }

    /// Whether the flush thread is running.
    pub fn is_flushing(&mut self) -> bool {
        let _ = self.poll_inflight();
        self.inflight.is_some()
    }

    /// Applies a finished background flush, without waiting for one still running.
    pub(super) fn poll_inflight(&mut self) -> Result<()> {
        if self.inflight.as_ref().is_some_and(|f| f.is_finished()) {
            let r = self.finish_inflight();
            return self.poison(r);
        }
        Ok(())
    }

    /// Waits for the background flush, if any, and applies its outcome.
    pub(super) fn finish_inflight(&mut self) -> Result<()> {
        let Some(f) = self.inflight.take() else {
            return Ok(());
        };
        self.jobs_applied += 1;
        let done = match f.job {
            Job::Thread(handle) => match handle.join() {
                Ok(r) => r,
                Err(_) => Err(Error::io(
                    "flush",
                    "(flush thread)",
                    std::io::Error::other("the flush thread panicked"),
                )),
            },
            Job::Deferred(job) => flush::run(*job),
        };
        // The last handle of the batch's generation, removed if merged: closing it frees
        // its pages, which is the reaper's work.
        self.reaper.release(f.wal);
        match done {
            Ok(done) => {
                self.apply(done);
                self.commit_spilled()
            }
            Err(e) => {
                self.poisoned = true;
                Err(e)
            }
        }
    }

    pub(super) fn apply(&mut self, done: FlushDone) {
        self.last_flush_end = Some(done.ended);
        if let Some(began) = done.merge_began {
            self.last_merge = Some((began, done.ended));
        }
        self.manifest = done.manifest;
        // A flush of an empty S hands back an empty buffer: the spare kept stays.
        if done.spare.capacity() >= self.next_s.capacity() {
            self.next_s = done.spare;
        }
        let segments = std::mem::replace(&mut self.segments, done.segments);
        let runs = std::mem::replace(&mut self.runs, done.runs);
        self.reaper.release((segments, runs));
    }

    /// Commits the runs spilled while a merge was under way: appended to the runs, A's
    /// position after the last one.
    pub(super) fn commit_spilled(&mut self) -> Result<()> {
        let Some(last) = self.spilled_beside_merge.last() else {
            return Ok(());
        };
        let mut m = self.manifest.clone();
        m.commit += 1;
        m.a_gen = last.meta().gen + 1;
        m.a_skip = 0;
        for run in &self.spilled_beside_merge {
            let meta = run.meta();
            m.pushed += meta.records;
            m.flushes += 1;
            m.next_id = m.next_id.max(meta.id + 1);
            m.runs.push(meta);
        }
        if let Err(e) = m.commit_to(&*self.storage) {
            self.poisoned = true;
            return Err(e);
        }
        self.manifest = m;
        self.runs.append(&mut self.spilled_beside_merge);
        Ok(())
    }

    /// Whether a merge is under way (not finished) that a full buffer should not wait for:
    /// the buffer is spilled by the pushing thread instead, while the runs stay under their
    /// limit.
    pub(super) fn spill_beside_merge(&self) -> bool {
        self.inflight
            .as_ref()
            .is_some_and(|f| f.merge && !f.is_finished())
            && self.runs.len() + self.spilled_beside_merge.len() + 2 < self.max_runs
    }

    /// Spills S as a run on this thread, beside a merge under way: the frame is written and
    /// the generation synced, S is sorted in place into the run's pairs and written, and the
    /// next generation opened. The run is committed when the merge ends.
    pub(super) fn spill_now(&mut self) -> Result<()> {
        // The merge's batch generation first (its thread may not have synced it yet): a
        // later generation never becomes durable before an earlier one.
        if let Some(f) = &self.inflight {
            f.wal.sync()?;
        }
        self.wal.finish()?;
        self.wal.sync()?;
        let records = self.s.len() as u64;
        crate::buffer::sort_slots(&mut self.s);
        let last_id = self.spilled_beside_merge.last().map(|r| r.meta().id + 1);
        let meta = RunMeta {
            id: last_id.unwrap_or(0).max(self.manifest.next_id),
            gen: self.gen,
            skip: self.gen_skip,
            records,
            pairs: self.s.len() as u64,
        };
        crate::run::write(&*self.storage, meta, &self.s)?;
        self.spilled_beside_merge
            .push(Arc::new(Run::open(&*self.storage, meta)?));
        self.s.clear();
        self.s_index = None;
        self.next_generation()
    }

    /// Opens the next A generation, after the current one is finished.
    pub(super) fn next_generation(&mut self) -> Result<()> {
        self.gen += 1;
        self.gen_skip = 0;
        let wal = wal::create(&*self.storage, self.gen, self.reaper.take_spare())?;
        self.wal = wal::configure(wal, &self.opts);
        Ok(())
    }

    /// When the flush thread is still busy, the pushing thread is about to wait for it:
    /// meanwhile it sorts S by signature in place, so that the next flush's sort finds it in
    /// order (a linear pass) and the caller waits less. The order of S means nothing else.
    pub(super) fn sort_while_waiting(&mut self) {
        let busy = self
            .inflight
            .as_ref()
            .is_some_and(|f| matches!(f.job, Job::Thread(_)) && !f.is_finished());
        if busy && self.s.len() > 1 {
            crate::buffer::sort::sort_by_sig(&mut self.s);
        }
    }

    /// Whether the next flush should merge with Z rather than spill a run: when the pushes
    /// waiting in runs and in S reach the number of signatures in Z (so that reading and
    /// rewriting Z costs a bounded amount per push), when the runs reach their limit, or when
    /// the frontier runs low.
    pub(super) fn merge_due(&self) -> bool {
        let m = &self.manifest;
        let unmerged = m.runs.iter().map(|r| r.records).sum::<u64>() + self.s.len() as u64;
        let distinct: u64 = m.segments.iter().map(|s| s.sigs).sum();
        let low = self.opts.frontier_low.unwrap_or(self.slots as u64);
        crate::merge::merge_due(unmerged, distinct, self.runs.len(), self.max_runs)
            || m.f_count.saturating_sub(self.reader.position().consumed) < low
    }

    /// Gives back the room of the buffer kept for the next S (the last flush's, emptied, up
    /// to S's share of the budget), for a caller that needs the room more than the next
    /// pushes need the buffer ready: the frontier's move of F into the queues, which runs
    /// after a flush. The next S grows again as it fills.
    pub(crate) fn release_spare_s(&mut self) {
        self.next_s = Vec::new();
    }

    /// The capacity of the buffer kept for the next S, in slots.
    #[cfg(test)]
    pub(crate) fn spare_s_slots(&self) -> usize {
        self.next_s.capacity()
    }

    /// The buffer for the next S: the one the last flush handed back, or a new one (which
    /// grows as it fills: see [`crate::buffer::push_slot`]).
    pub(super) fn take_next_s(&mut self) -> Vec<Slot> {
        std::mem::take(&mut self.next_s)
    }

    /// Freezes S and the current A generation into a flush job (a merge if `merge` or if one
    /// is due, else a spill), opens the next generation, and runs the job (in the background
    /// if so configured). With S empty, only a merge of the runs is run.
    pub(super) fn freeze(&mut self, merge: bool) -> Result<()> {
        debug_assert!(self.undecided.is_none(), "a push not yet decided");
        if !merge && !self.s.is_empty() && self.spill_beside_merge() {
            return self.spill_now();
        }
        self.sort_while_waiting();
        self.finish_inflight()?;
        let merge = merge || self.merge_due();
        let gate = Arc::new(Gate::default());
        let absorbed = std::mem::take(&mut self.absorbed);
        let pushes = self.s.len() as u64 + absorbed;
        let batch = if self.s.is_empty() {
            Batch {
                gen: self.gen,
                wal: self.wal.file().clone(),
                skip: self.gen_skip,
                sigs: Vec::new(),
                absorbed,
                next: wal::Start {
                    gen: self.manifest.a_gen,
                    skip: self.manifest.a_skip,
                },
            }
        } else {
            self.wal.finish()?;
            let next_s = self.take_next_s();
            let batch = Batch {
                gen: self.gen,
                wal: self.wal.file().clone(),
                skip: self.gen_skip,
                sigs: {
                    self.s_index = None;
                    std::mem::replace(&mut self.s, next_s)
                },
                absorbed,
                next: wal::Start {
                    gen: self.gen + 1,
                    skip: 0,
                },
            };
            self.next_generation()?;
            batch
        };
        let batch_wal = batch.wal.clone();
        self.jobs_started += 1;
        let job = FlushJob {
            storage: self.storage.clone(),
            manifest: self.manifest.clone(),
            segments: self.segments.clone(),
            runs: self.runs.clone(),
            batch,
            merge,
            torn: Torn::default(),
            gate: gate.clone(),
            reaper: self.reaper.clone(),
            positions_in_memory: self.opts.merge_positions,
        };
        if self.opts.background {
            let handle = std::thread::Builder::new()
                .name("crivello-flush".into())
                .spawn(move || flush::run(job))
                .map_err(|e| Error::io("spawn", "(flush thread)", e))?;
            self.inflight = Some(InFlight {
                job: Job::Thread(handle),
                gate,
                pushes,
                merge,
                wal: batch_wal,
            });
            Ok(())
        } else if self.opts.defer_merges && merge {
            self.inflight = Some(InFlight {
                job: Job::Deferred(Box::new(job)),
                gate,
                pushes,
                merge,
                wal: batch_wal,
            });
            Ok(())
        } else {
            let done = flush::run(job)?;
            self.jobs_applied += 1;
            self.apply(done);
            Ok(())
        }
    }
}
