//! Compaction: the Q runs merged into one once they are `max_runs`, keeping the records not
//! yet handed out, the others going to an archive.
//!
//! The merge reads only immutable runs and what the state said of each queue when it began
//! (its next seq and its skips), so that it can run on a thread of its own while hand-outs,
//! ends of leases and moves go on under the frontier's lock; a frontier whose flushes run on
//! the caller's thread (`Options::background_flush(false)`) merges on the caller's thread too,
//! in a fixed order. Its commit (the `compacted` entry) takes the lock again, briefly:
//!
//! - records handed out meanwhile are in the new run, below their queue's next seq, and are
//!   passed over when reached (the next compaction archives them), as are those of runs a
//!   hand-out finished;
//! - runs moved in meanwhile stay, after the new one (their records are newer);
//! - the counts the entry journals are the state's own at the commit, which a compaction does
//!   not change (it leaves out only records already passed or skipped);
//! - each queue whose runs had one merged is pointed at its group in the new run from the
//!   seats the merge listed as it wrote the run, by place, so that the commit looks up no
//!   queue by its id (at 10^6 queues the look-ups held the lock 200 ms);
//! - a record that a known update skipped meanwhile is still in the new run, and the entry
//!   drops every queue's skips: such a merge is told to stop and is not committed, its files
//!   are removed, and the runs are merged again (on a new thread, or on the caller's if it
//!   waits for the merge).
//!
//! Calls that remove or move queues (deletes, exports, imports, releases) and a close first
//! wait for a merge under way and commit it. A queue's runs are the bits of a `u64`: before a
//! run is written with 63 there, the merge under way is waited for, or one runs on the
//! caller's thread.

use super::super::journal::Entry;
use super::super::qrun::{check_record, Coverage, Run, RunCoding, RunWriter};
use super::job::Job;
use super::{Core, CounterSet};
use crate::error::{Error, Result};
use crate::names;
use crate::storage::{Storage, StorageExt};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Runs a frontier may hold at most (a queue's runs are bits of a `u64`).
pub(super) const RUNS_LIMIT: usize = 64;

/// What a merge reads of the state, taken when it begins.
struct Consumed {
    /// Every known queue's (id, next seq, place in the state), by id once
    /// [`Consumed::by_id`] sorted them: its records below the seq were handed out.
    next: Vec<(u64, u64, u32)>,
    /// The skips of the queues that have some.
    /// (By queue id: SipHash, see [`super::QueueIdSet`].)
    skips: HashMap<u64, Vec<u64>>,
    /// The crawls not deleted: the records they pass go to the archive.
    live: CounterSet<u32>,
}

/// What a merge wrote.
pub(super) struct Merged {
    /// The runs merged.
    removed: Vec<u64>,
    /// The new run (none: nothing waits in the runs merged).
    added: Option<u64>,
    /// The archive (none: nothing of a live crawl was passed).
    archived: Option<u64>,
    /// Where each queue's group of the new run begins, by the queue's place: the commit
    /// points the queues there without looking up each group's queue under the lock.
    seats: Vec<Seat>,
}

/// Where a queue's group of a merge's run begins: its first frame's offset, its first
/// record's place there, its records, for the queue at `place` (of crawl `crawl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seat {
    pub(super) offset: u64,
    pub(super) place: u32,
    pub(super) records: u32,
    pub(super) crawl: u32,
    pub(super) start: u16,
}

impl Consumed {
    /// The same, its queues sorted by id, as [`merge`] reads them: done by the merge's
    /// thread, not under the frontier's lock (10^6 queues take tens of ms).
    fn by_id(mut self) -> Consumed {
        self.next.sort_unstable_by_key(|&(id, _, _)| id);
        self
    }
}

/// A merge under way on a thread of its own.
pub(super) struct Compaction {
    job: Job<Merged>,
    stop: Arc<AtomicBool>,
    /// The id of the new run; the archive's is the next.
    id: u64,
    /// A known update skipped a record since the merge began: its result is not committed.
    spoiled: bool,
}

impl Compaction {
    /// A known update skipped a record, which the merge keeps: it stops, and is not
    /// committed.
    pub(super) fn spoil(&mut self) {
        self.spoiled = true;
        if !crate::planted::active(crate::planted::Bug::SpoiledMerge) {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    fn finished(&self) -> bool {
        self.job.finished()
    }

    /// Waits for the merge's end.
    fn join(&mut self) -> Result<Merged> {
        self.job.join()
    }
}

impl Drop for Compaction {
    /// A frontier dropped without a close: the merge stops at its next queue (its job, dropped
    /// next, waits for that), and its files, which J does not name, are removed by the next
    /// open.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Core {
    /// Merges the Q runs once they are `max_runs` (on a thread of its own when the frontier
    /// runs in the background), and commits a merge that ended.
    pub(super) fn compact_if_due(&mut self) -> Result<()> {
        self.poll_compaction()?;
        if self.compaction.is_some() || self.runs.len() < self.max_runs {
            return Ok(());
        }
        if !self.background || self.runs.len() + 1 >= RUNS_LIMIT {
            return self.compact_now();
        }
        let consumed = self.consumed();
        let runs: Vec<Run> = self.runs.clone();
        let st = self.sieve.storage().clone();
        // The new run's id and the archive's: the moves meanwhile take the ids after them.
        let id = self.next_run;
        self.next_run = id + 2;
        let stop = Arc::new(AtomicBool::new(false));
        let (halt, coding) = (stop.clone(), self.coding);
        let Ok(job) = Job::spawn("crivello-compact", (), move |()| {
            merge(&*st, &runs, (id, coding), &consumed.by_id(), &halt)
        }) else {
            // No thread to be had: the merge runs here (the ids reserved stay unused).
            return self.compact_now();
        };
        self.compaction = Some(Compaction {
            job,
            stop,
            id,
            spoiled: false,
        });
        Ok(())
    }

    /// Makes room for one more run: with 63 runs (a queue's runs are the bits of a `u64`),
    /// waits for the merge under way, or merges on the caller's thread. A reopen may find 63
    /// runs and no merge (a crash came while a move waited for one).
    pub(super) fn make_room(&mut self) -> Result<()> {
        if self.runs.len() + 1 < RUNS_LIMIT {
            return Ok(());
        }
        self.finish_compaction()?;
        if self.runs.len() + 1 >= RUNS_LIMIT {
            self.compact_now()?;
        }
        Ok(())
    }

    /// Commits the merge under way if it ended (a no-op otherwise).
    pub(super) fn poll_compaction(&mut self) -> Result<()> {
        match &self.compaction {
            Some(c) if c.finished() => self.end_compaction(false),
            _ => Ok(()),
        }
    }

    /// Waits for the merge under way, if any, and commits it: no merge is under way when
    /// this returns.
    pub(super) fn finish_compaction(&mut self) -> Result<()> {
        self.end_compaction(true)
    }

    /// Commits the merge under way, which ended or (`wait`) is waited for. A merge a known
    /// update spoiled is dropped (it was told to stop); if `max_runs` runs still wait, they
    /// are merged again: on the caller's thread if it waits, else on a new thread.
    fn end_compaction(&mut self, wait: bool) -> Result<()> {
        let Some(mut c) = self.compaction.take() else {
            return Ok(());
        };
        let merged = c.join();
        let spoiled = c.spoiled && !crate::planted::active(crate::planted::Bug::SpoiledMerge);
        if spoiled {
            // Stopped, or ended: either way not committed, and whatever it met (an error, a
            // panic) does not matter. J names neither of its files; the next open removes
            // what is left of them.
            for id in [c.id, c.id + 1] {
                self.sieve.remove_superseded(&names::q(id));
            }
            if self.runs.len() < self.max_runs {
                return Ok(());
            }
            return if wait {
                self.compact_now()
            } else {
                self.compact_if_due()
            };
        }
        let m = match merged {
            Ok(m) => m,
            Err(e) => {
                self.poisoned = true;
                return Err(e);
            }
        };
        self.commit_merged(m)
    }

    /// Merges every Q run into one on the caller's thread and commits it.
    fn compact_now(&mut self) -> Result<()> {
        let consumed = self.consumed().by_id();
        let id = self.next_run;
        let m = merge(
            &**self.sieve.storage(),
            &self.runs,
            (id, self.coding),
            &consumed,
            &AtomicBool::new(false),
        )?;
        self.commit_merged(m)
    }

    /// What a merge needs of the state, its queues in the order of their places (see
    /// [`Consumed::by_id`]).
    fn consumed(&self) -> Consumed {
        let next: Vec<(u64, u64, u32)> = (self.queues.iter().zip(&self.ids))
            .enumerate()
            .map(|(i, (q, &id))| (id, q.next_seq, i as u32))
            .collect();
        let skips = (self.queues.iter().zip(&self.ids))
            .filter(|(q, _)| !q.skips().is_empty())
            .map(|(q, &id)| (id, q.skips().to_vec()))
            .collect();
        Consumed {
            next,
            skips,
            live: self.crawl_names.keys().copied().collect(),
        }
    }

    /// Journals the merge `m` (its archive first), with each queue's records `waiting` in
    /// the runs left, and removes the runs merged.
    fn commit_merged(&mut self, m: Merged) -> Result<()> {
        // Every record the counts name is in the new run or in a run moved in since: the
        // state's counts are the runs' own. (In the order of the queues' places.)
        let waiting = (self.queues.iter().zip(&self.ids))
            .filter(|(q, _)| q.waiting > 0)
            .map(|(q, &id)| (id, q.waiting))
            .collect();
        let compacted = Entry::Compacted {
            removed: m.removed.clone(),
            added: m.added,
            waiting,
        };
        // Runs of version 12 (and entry 14): the manifest says so before J refers to them.
        self.commit_version()?;
        // The entry's application seats the queues from these (a replay seats none).
        self.seats = m.added.map(|id| (id, m.seats));
        let committed = match m.archived {
            Some(run) => self.commit(&[Entry::Archived { run }, compacted]),
            None => self.commit(&[compacted]),
        };
        self.seats = None;
        committed?;
        self.recent = Vec::new();
        self.ahead.clear();
        self.dir_cache = Vec::new();
        // Removing the files merged frees their blocks and cached pages, tens of ms for 32
        // runs: not under the lock.
        for r in m.removed {
            self.sieve.remove_superseded(&names::q(r));
        }
        Ok(())
    }
}

/// Merges `runs` into run `id` (the records at or after their queue's next seq, not skipped)
/// and run `id + 1`, the archive (the others, of live crawls): a merge of the runs' groups by
/// queue (each run's are in queue order), streamed into the new runs: a queue's records are
/// its groups' in the order of the runs, which is the order of their seqs (a run holds
/// records queued after every earlier run's). Both files are durable, with their directory
/// entries, when this returns.
fn merge(
    st: &dyn Storage,
    runs: &[Run],
    (id, coding): (u64, RunCoding),
    seen: &Consumed,
    stop: &AtomicBool,
) -> Result<Merged> {
    let archive_id = id + 1;
    let scans: Vec<Run> = runs.iter().map(Run::scanning).collect();
    let mut heads: Vec<_> = scans.iter().map(|r| r.groups().peekable()).collect();
    // Each run's frame read last: the groups of a frame are walked one after the other.
    let mut caches: Vec<Option<crate::frames::Frame>> = scans.iter().map(|_| None).collect();
    let mut coverages: Vec<Coverage> = scans.iter().map(|_| Coverage::new()).collect();
    let mut writer: Option<RunWriter> = None;
    // The records taken out (handed out or skipped) of crawls not deleted: an export finds a
    // queue's done URLs there.
    let mut archive: Option<RunWriter> = None;
    // Where the next queue's entry in `seen.next` is: the groups come by increasing queue.
    let mut cursor = 0;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(Error::Poisoned);
        }
        let mut next_queue: Option<u64> = None;
        for h in &mut heads {
            match h.peek() {
                Some(Ok(g)) => next_queue = Some(next_queue.map_or(g.queue, |q| q.min(g.queue))),
                Some(Err(_)) => return Err(h.next().expect("peeked").expect_err("an error")),
                None => {}
            }
        }
        let Some(queue) = next_queue else {
            break;
        };
        while seen.next.get(cursor).is_some_and(|&(q, _, _)| q < queue) {
            cursor += 1;
        }
        // A queue the frontier does not know has nothing waiting.
        let next = match seen.next.get(cursor) {
            Some(&(q, next, _)) if q == queue => Some(next),
            _ => None,
        };
        let skips = seen.skips.get(&queue).map_or(&[][..], Vec::as_slice);
        for (((run, h), cache), coverage) in scans
            .iter()
            .zip(&mut heads)
            .zip(&mut caches)
            .zip(&mut coverages)
        {
            if !matches!(h.peek(), Some(Ok(g)) if g.queue == queue) {
                continue;
            }
            let g = h.next().expect("peeked")?;
            let Some(next) = next else {
                // Walked all the same: the groups after it must start where it ends, and its
                // records must be its queue's (a queue id damaged is not a queue unknown).
                let mut first = true;
                coverage.walk(run, &g, cache, |_, rec, offset| {
                    if std::mem::take(&mut first) {
                        check_record(run.file(), offset, rec, queue, g.crawl)?;
                    }
                    Ok(())
                })?;
                continue;
            };
            let live = seen.live.contains(&g.crawl);
            let mut nth = 0u32;
            // Each group holds the records of its frames the directory gives it, and they are
            // its queue's: a directory is not believed blindly before the runs it describes
            // are removed.
            coverage.walk(run, &g, cache, |seq, rec, offset| {
                nth += 1;
                if nth == 1 || nth == g.records {
                    check_record(run.file(), offset, rec, queue, g.crawl)?;
                }
                if seq < next || skips.binary_search(&seq).is_ok() {
                    if live && !crate::planted::active(crate::planted::Bug::NoArchive) {
                        let a = match &mut archive {
                            Some(a) => a,
                            None => archive.insert(RunWriter::create(st, archive_id, coding)?),
                        };
                        a.push(queue, g.crawl, seq, rec)?;
                    }
                    return Ok(());
                }
                let w = match &mut writer {
                    Some(w) => w,
                    None => writer.insert(RunWriter::create(st, id, coding)?),
                };
                w.push(queue, g.crawl, seq, rec)
            })?;
        }
    }
    for (run, coverage) in scans.iter().zip(&coverages) {
        coverage.finish(run)?;
    }
    // The archive's directory first: its groups are let go before the seats are made.
    let archived = match archive {
        None => None,
        Some(a) => {
            a.finish()?;
            Some(archive_id)
        }
    };
    let (added, seats) = match writer {
        None => (None, Vec::new()),
        Some(w) => {
            let (_, groups) = w.finish_with_groups()?;
            (Some(id), seats(&groups, &seen.next))
        }
    };
    if added.is_some() || archived.is_some() {
        st.sync_directory()?;
    }
    Ok(Merged {
        removed: runs.iter().map(Run::id).collect(),
        added,
        archived,
        seats,
    })
}

/// The seats of a merge's run from its groups, each group's queue found in `next` (both by
/// id, so one walk), sorted by place: the commit then reads the queues in the order they lie
/// in memory.
fn seats(groups: &[super::super::qrun::Group], next: &[(u64, u64, u32)]) -> Vec<Seat> {
    let mut cursor = 0;
    let mut seats = Vec::with_capacity(groups.len());
    for g in groups {
        while next.get(cursor).is_some_and(|&(q, _, _)| q < g.queue) {
            cursor += 1;
        }
        // The merge writes the records of known queues only.
        if let Some(&(q, _, place)) = next.get(cursor) {
            if q == g.queue {
                seats.push(Seat {
                    offset: g.offset,
                    place,
                    records: g.records,
                    crawl: g.crawl,
                    start: g.start,
                });
            }
        }
    }
    seats.sort_unstable_by_key(|s| s.place);
    seats
}

#[cfg(test)]
mod tests {
    use crate::queues::{Discovered, Frontier, ManualClock};
    use crate::storage::SimDisk;
    use crate::Options;
    use std::collections::HashSet;
    use std::sync::Arc;

    /// Pushes and flushes `n` URLs of hosts of their own: one move, one Q run.
    fn add_run(f: &Frontier, round: usize, n: usize, all: &mut Vec<String>) {
        let urls: Vec<String> = (0..n)
            .map(|i| format!("http://h{round}x{i}.test/{round}"))
            .collect();
        super::super::tests::push_run(f, &urls);
        all.extend(urls);
    }

    /// Opens the frontier on `disk` (seed `seed`, S of 64 slots), again at each call.
    fn opener(disk: &SimDisk, seed: u64) -> impl Fn() -> Frontier + '_ {
        let clock = Arc::new(ManualClock::new(1_000));
        let opts = Options::new().seed(seed).frontier_low(0).slots(64);
        move || Frontier::open_with(Arc::new(disk.clone()), opts.clone(), clock.clone()).unwrap()
    }

    /// No merge begins while the runs are fewer than 64.
    fn no_merge(f: &Frontier) {
        f.with(|c| {
            c.max_runs = super::RUNS_LIMIT;
            Ok(())
        })
        .unwrap();
    }

    /// Leases and ends every URL waiting: each once.
    fn drain(f: &Frontier) -> HashSet<String> {
        let mut served = HashSet::new();
        loop {
            let got = f.lease(1_000, None, 60_000).unwrap();
            if got.is_empty() {
                return served;
            }
            for l in got {
                assert!(served.insert(String::from_utf8(l.url.clone()).unwrap()));
                assert!(f.done(l.token, 0).unwrap());
            }
        }
    }

    #[test]
    fn a_store_found_with_63_runs_and_no_merge_makes_room_before_its_next_run() {
        // What a reopen finds after a crash that came while a move waited for a merge: 63
        // runs, none being merged. The next moves must not name a 64th run in J.
        let disk = SimDisk::new();
        let open = opener(&disk, 2);
        let f = open();
        no_merge(&f);
        let mut all = Vec::new();
        for round in 0..63 {
            add_run(&f, round, 2, &mut all);
        }
        let runs = f
            .with(|c| Ok((c.runs.len(), c.compaction.is_some())))
            .unwrap();
        assert_eq!(runs, (63, false));
        f.close().unwrap();
        let f = open();
        assert_eq!(f.with(|c| Ok(c.runs.len())).unwrap(), 63);
        for (round, want) in (63..66).zip([2, 3, 4]) {
            add_run(&f, round, 2, &mut all);
            // The first move merged the 63 runs, then wrote its own.
            let n = f.with(|c| Ok(c.runs.len())).unwrap();
            assert_eq!(n, want, "runs after round {round}");
        }
        f.close().unwrap();
        // Every URL comes out once.
        let f = open();
        assert_eq!(drain(&f), all.into_iter().collect::<HashSet<_>>());
        f.close().unwrap();
    }

    #[test]
    fn a_move_at_63_runs_waits_for_the_merge_under_way() {
        let disk = SimDisk::new();
        let open = opener(&disk, 3);
        let f = open();
        no_merge(&f);
        let mut all = Vec::new();
        for round in 0..62 {
            add_run(&f, round, 2, &mut all);
        }
        // A merge of the 62 runs that does not end before it is let go, as a long one.
        let (go, wait) = std::sync::mpsc::channel::<()>();
        f.with(|c| {
            c.max_runs = 32;
            let consumed = c.consumed().by_id();
            let runs = c.runs.clone();
            let st = c.sieve.storage().clone();
            let id = c.next_run;
            c.next_run = id + 2;
            let stop = Arc::new(super::AtomicBool::new(false));
            let halt = stop.clone();
            let thread = std::thread::spawn(move || {
                let _ = wait.recv();
                super::merge(&*st, &runs, (id, super::RunCoding::Front), &consumed, &halt)
            });
            c.compaction = Some(super::Compaction {
                job: super::Job::of(thread),
                stop,
                id,
                spoiled: false,
            });
            Ok(())
        })
        .unwrap();
        // Let go well after the moves below would have made a 64th run without waiting.
        let letter = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(2));
            let _ = go.send(());
        });
        for round in 62..66 {
            add_run(&f, round, 2, &mut all);
            let n = f.with(|c| Ok(c.runs.len())).unwrap();
            assert!(n < super::RUNS_LIMIT, "{n} runs");
        }
        letter.join().unwrap();
        f.close().unwrap();
        let f = open();
        assert_eq!(drain(&f), all.into_iter().collect::<HashSet<_>>());
        f.close().unwrap();
    }

    /// The versions of the Q runs on `disk`, by run.
    fn run_versions(disk: &SimDisk) -> Vec<u32> {
        let mut names: Vec<String> = disk
            .files()
            .into_iter()
            .filter(|n| n.starts_with("q-"))
            .collect();
        names.sort();
        names
            .iter()
            .map(|n| u32::from_le_bytes(disk.content(n).unwrap()[4..8].try_into().unwrap()))
            .collect()
    }

    /// Q runs of version 4 (a frame per queue, as builds before version 12 wrote them) are
    /// read by this build beside its own: every URL is handed out once and each host's in the
    /// order pushed; a merge of both kinds writes version 13, and the manifest says this build's
    /// version.
    #[test]
    fn runs_of_version_4_are_read_and_merged_into_version_13() {
        let disk = SimDisk::new();
        let clock = Arc::new(ManualClock::new(1_000));
        let opts = Options::new()
            .seed(4)
            .frontier_low(0)
            .slots(64)
            .background_flush(false);
        let open =
            || Frontier::open_with(Arc::new(disk.clone()), opts.clone(), clock.clone()).unwrap();
        let mut pushed = Vec::new();
        let mut add = |f: &Frontier, round: usize| {
            let urls: Vec<String> = (0..40)
                .map(|i| format!("http://h{}.test/{round}/{i}", i % 7))
                .collect();
            let items: Vec<Discovered<'_>> =
                urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
            f.push("", &items).unwrap();
            f.flush().unwrap();
            pushed.extend(urls);
        };
        crate::queues::qrun::FIXED_RUNS.with(|x| x.set(true));
        let f = open();
        no_merge(&f);
        for round in 0..3 {
            add(&f, round);
        }
        f.close().unwrap();
        crate::queues::qrun::FIXED_RUNS.with(|x| x.set(false));
        assert_eq!(run_versions(&disk), [4, 4, 4]);
        assert!(crate::check::check_storage(Arc::new(disk.clone()))
            .unwrap()
            .is_sound());
        // The manifest as the build before left it.
        let m = disk.content(crate::names::MANIFEST).unwrap();
        let m = crate::manifest::Manifest::decode(&m, "M").unwrap();
        disk.set_content(crate::names::MANIFEST, m.encode_as(11));

        let f = open();
        no_merge(&f);
        // Half of the URLs handed out from the old runs.
        let mut served: Vec<String> = Vec::new();
        let mut lease_all = |f: &Frontier, limit: usize| {
            while served.len() < limit {
                let got = f.lease(1_000, None, 60_000).unwrap();
                if got.is_empty() {
                    break;
                }
                for l in got {
                    served.push(String::from_utf8(l.url.clone()).unwrap());
                    assert!(f.done(l.token, 0).unwrap());
                }
            }
        };
        lease_all(&f, 60);
        for round in 3..6 {
            add(&f, round);
        }
        assert_eq!(run_versions(&disk), [4, 4, 4, 13, 13, 13]);
        // A merge of all of them.
        f.with(|c| {
            c.max_runs = 2;
            Ok(())
        })
        .unwrap();
        add(&f, 6);
        let versions = run_versions(&disk);
        assert!(versions.iter().all(|&v| v == 13), "{versions:?}");
        f.close().unwrap();
        let manifest = disk.content(crate::names::MANIFEST).unwrap();
        assert_eq!(
            manifest[4..8],
            crate::format::MANIFEST_VERSION.to_le_bytes()
        );

        let f = open();
        lease_all(&f, usize::MAX);
        f.close().unwrap();
        let mut sorted = served.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), served.len(), "a URL handed out twice");
        let mut all = pushed.clone();
        all.sort();
        assert_eq!(sorted, all);
        // Each host's URLs in the order pushed.
        for h in 0..7 {
            let host = format!("http://h{h}.test/");
            let of = |v: &[String]| -> Vec<String> {
                v.iter().filter(|u| u.starts_with(&host)).cloned().collect()
            };
            assert_eq!(of(&served), of(&pushed), "host {h}");
        }
        assert!(crate::check::check_storage(Arc::new(disk.clone()))
            .unwrap()
            .is_sound());
    }

    /// A merge reads every group of the runs it is to remove: any bit of a run's directory
    /// flipped under valid checksums (a group moved, cut, lengthened, or given to another
    /// queue or crawl) fails it, and nothing is written in their place.
    #[test]
    fn a_merge_refuses_runs_whose_directory_was_edited() {
        let disk = SimDisk::new();
        let open = opener(&disk, 6);
        let f = open();
        no_merge(&f);
        // Runs of 30 hosts of 3 URLs each: groups share frames and end inside them.
        for round in 0..2 {
            let urls: Vec<String> = (0..90)
                .map(|i| format!("http://h{round}x{}.test/{i}", i % 30))
                .collect();
            let items: Vec<Discovered<'_>> =
                urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
            f.push("", &items).unwrap();
            f.flush().unwrap();
        }
        let (ids, consumed, next) = f
            .with(|c| {
                Ok((
                    c.runs.iter().map(|r| r.id()).collect::<Vec<_>>(),
                    c.consumed().by_id(),
                    c.next_run,
                ))
            })
            .unwrap();
        f.close().unwrap();
        let name = crate::names::q(ids[0]);
        let good = disk.content(&name).unwrap();
        let merge = |disk: &SimDisk| {
            let runs: Vec<_> = ids
                .iter()
                .map(|&id| crate::queues::qrun::Run::open(disk, id))
                .collect::<crate::Result<_>>()?;
            let stop = super::AtomicBool::new(false);
            super::merge(
                disk,
                &runs,
                (next, super::RunCoding::Front),
                &consumed,
                &stop,
            )
        };
        assert!(merge(&disk).is_ok());
        let edits = crate::queues::qrun::directory_edits(&disk, ids[0], &good);
        let tried = edits.len();
        for (bit, bad) in edits {
            disk.set_content(&name, bad);
            match merge(&disk) {
                Err(e) => assert!(e.is_corruption(), "bit {bit}: {e}"),
                Ok(_) => panic!("bit {bit} of the directory flipped: merged"),
            }
        }
        assert!(tried > 200, "{tried}");
    }
}
