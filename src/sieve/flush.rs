//! The flush of a batch of S: a spill (the batch becomes a sorted run on disk) or a merge
//! (every waiting run and the batch are merged with Z in one sequential pass).
//!
//! A spill:
//! 1. syncs the batch's A generation (pushes in it become acknowledged);
//! 2. sorts the batch by signature, keeping each signature once with its first position;
//! 3. writes the pairs as an R run (fsync) and fsyncs the directory;
//! 4. commits the manifest, which lists the run: **the switch**. A stays.
//!
//! A merge does steps 1 and 2, then:
//! 3. merges Z's segments, the runs and the batch in signature order into one new Z
//!    segment (fsync); a signature no input of Z holds is new, and its first occurrence is the
//!    one of the earliest source: its position is marked in memory (the batch's, and each
//!    run's whose bitmap fits what is left of 1 MiB) or goes to the scratch file `merge.tmp`;
//! 4. appends the new URLs to F, run after run, in A's order (fsync); fsyncs the directory;
//! 5. commits the manifest (no runs, the new segment): **the switch**;
//! 6. removes the merged A generations, the runs, the superseded segments and the scratch.
//!
//! A crash before the switch leaves the old manifest: recovery cuts F back, removes the new
//! files and replays A from the old position. A crash after it leaves only files to remove.

use std::sync::Arc;

use super::gate::{Gate, GateGuard};
use super::reaper::{self, Reaper};
use super::wal;
use crate::buffer::Slot;
use crate::error::Result;
use crate::frontier::Appender;
use crate::manifest::Manifest;
use crate::merge::{merge_signatures, Positions};
use crate::names::{self, SCRATCH};
use crate::run::{Run, RunMeta};
use crate::segment::Segment;
use crate::storage::{File, Storage, StorageExt};

/// A frozen buffer of S: records `skip..skip + sigs.len()` of A generation `gen`.
pub(crate) struct Batch {
    pub gen: u64,
    pub wal: File,
    pub skip: u64,
    pub sigs: Vec<Slot>,
    /// Pushes dropped by the cache of recent signatures before the freeze (counted only).
    pub absorbed: u64,
    /// A's first record not covered by a run nor merged, once this batch is flushed.
    pub next: wal::Start,
}

/// A flush to run.
pub(crate) struct FlushJob {
    pub storage: Arc<dyn Storage>,
    pub manifest: Manifest,
    pub segments: Vec<Arc<Segment>>,
    pub runs: Vec<Arc<Run>>,
    pub batch: Batch,
    /// Merge with Z (true) or spill the batch as a run (false).
    pub merge: bool,
    /// Torn records and bytes found by recovery, added to the manifest's counters.
    pub torn: Torn,
    pub gate: Arc<Gate>,
    /// Removes the files the flush supersedes.
    pub reaper: Arc<Reaper>,
    /// The bytes of the runs' bitmaps of new positions a merge keeps in memory
    /// (`Options::merge_positions_in_memory`).
    pub positions_in_memory: u64,
}

/// Records and bytes of A dropped as torn tails by a recovery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Torn {
    pub records: u64,
    pub bytes: u64,
}

/// What a flush committed.
pub(crate) struct FlushDone {
    pub manifest: Manifest,
    pub segments: Vec<Arc<Segment>>,
    pub runs: Vec<Arc<Run>>,
    /// The batch's buffer, emptied: the next buffer of S, whose pages are already the
    /// process's (a new one would fault them in again at every flush).
    pub spare: Vec<Slot>,
    /// When it ended, where it ran.
    pub ended: std::time::Instant,
    /// When it began, where it ran, if it was a merge.
    pub merge_began: Option<std::time::Instant>,
}

/// Runs a flush job to its commit (the steps of the module's documentation).
pub(crate) fn run(job: FlushJob) -> Result<FlushDone> {
    let began = std::time::Instant::now();
    // 1. The batch's generation is durable: `sync` may acknowledge its pushes.
    let guard = GateGuard(job.gate.clone());
    let b = job.batch;
    b.wal.sync()?;
    guard.0.open(true);
    let storage = &*job.storage;
    let mut m = job.manifest.clone();
    let records = b.sigs.len() as u64;

    // 2. Sorted in place by signature, each signature once with the position of its first
    // occurrence in the batch.
    let mut pairs = b.sigs;
    crate::buffer::sort_slots(&mut pairs);

    // 3 and 4.
    let mut segments = job.segments.clone();
    let mut runs = job.runs.clone();
    let source = BatchSource {
        gen: b.gen,
        wal: &b.wal,
        skip: b.skip,
    };
    let mut scratch = false;
    if job.merge {
        let seg;
        (seg, scratch) = merge(
            storage,
            &mut m,
            (&segments, &runs),
            source,
            &pairs,
            job.positions_in_memory,
        )?;
        segments = seg.into_iter().collect();
        runs.clear();
    } else if !pairs.is_empty() {
        runs.push(spill(storage, &mut m, source, records, &pairs)?);
    }

    // 5. The switch.
    let first_gen = job.runs.first().map_or(b.gen, |r| r.meta().gen.min(b.gen));
    if job.merge && crate::planted::active(crate::planted::Bug::EarlyADiscard) {
        reaper::remove_generations(storage, first_gen..b.next.gen);
    }
    m.commit += 1;
    m.a_gen = b.next.gen;
    m.a_skip = b.next.skip;
    m.pushed += records + b.absorbed;
    m.flushes += u64::from(records > 0);
    m.merges += u64::from(job.merge);
    m.torn_records += job.torn.records;
    m.torn_bytes += job.torn.bytes;
    m.segments = segments.iter().map(|s| s.meta()).collect();
    m.runs = runs.iter().map(|r| r.meta()).collect();
    m.commit_to(storage)?;

    // 6. After the switch: what is superseded goes (a crash here leaves orphans that the
    // next open removes), with the last handles of the batch's generation and of what was
    // merged.
    if job.merge {
        job.reaper.remove_generations(first_gen..m.a_gen);
        for r in &job.runs {
            job.reaper.remove(r.name());
        }
        for s in &job.segments {
            if !segments.iter().any(|n| n.meta().id == s.meta().id) {
                job.reaper.remove(s.name());
            }
        }
    }
    if scratch {
        // Now: the next merge that needs it creates it again.
        let _ = storage.remove(SCRATCH);
    }
    job.reaper.release((b.wal, job.runs, job.segments));
    pairs.clear();
    Ok(FlushDone {
        manifest: m,
        segments,
        runs,
        spare: pairs,
        ended: std::time::Instant::now(),
        merge_began: job.merge.then_some(began),
    })
}

/// The batch's A generation: where its records are read from when they are emitted.
struct BatchSource<'a> {
    gen: u64,
    wal: &'a File,
    skip: u64,
}

/// Writes the sorted `pairs` of the batch `b` (of `records` pushes) as a new run, durable
/// with its directory entry.
fn spill(
    storage: &dyn Storage,
    m: &mut Manifest,
    b: BatchSource<'_>,
    records: u64,
    pairs: &[Slot],
) -> Result<Arc<Run>> {
    let meta = RunMeta {
        id: m.next_id,
        gen: b.gen,
        skip: b.skip,
        records,
        pairs: pairs.len() as u64,
    };
    m.next_id += 1;
    crate::run::write(storage, meta, pairs)?;
    let run = Arc::new(Run::open(storage, meta)?);
    storage.sync_directory()?;
    Ok(run)
}

/// Merges Z's `segments` with the `runs` (in push order) and the `batch` (after them) into
/// one new segment, and appends the URLs no input of Z holds to F in push order. Returns the
/// new segment (none when Z stays empty), and whether the merge created the scratch file.
fn merge(
    storage: &dyn Storage,
    m: &mut Manifest,
    (segments, runs): (&[Arc<Segment>], &[Arc<Run>]),
    b: BatchSource<'_>,
    batch: &[Slot],
    in_memory: u64,
) -> Result<(Option<Arc<Segment>>, bool)> {
    let mut merged = merge_signatures(storage, &mut m.next_id, segments, runs, batch, in_memory)?;

    // Emit the new URLs in the order of their first appearance: source by source, and in
    // each by position.
    let mut next_id = m.next_id;
    let mut f = Appender::open(storage, m.frontier_end(), &mut next_id, m.flushes as u32)?;
    // Every run's generation is read, one without new URLs too, and the batch's when it has
    // records: the merge removes them, and each is checked whole first
    // (`wal::records_at`). An empty batch's is the generation pushes go on writing (a
    // freeze of an empty S makes no new one): it is neither read nor removed.
    for (i, r) in merged.regions.iter_mut().enumerate() {
        let (file, gen, skip, new) = match runs.get(i) {
            Some(run) => {
                let new = Positions::read(r, run.name())?;
                let meta = run.meta();
                let file = storage.open_file(&names::a(meta.gen))?;
                (file, meta.gen, meta.skip, new)
            }
            None if batch.is_empty() => continue,
            None => {
                let new = Positions::read(r, b.wal.name())?;
                (b.wal.clone(), b.gen, b.skip, new)
            }
        };
        wal::records_at(&file, gen, skip, new.iter(), |url| {
            f.append(storage, &mut next_id, url)
        })?;
    }
    m.set_frontier_end(f.finish()?);
    m.next_id = next_id;
    storage.sync_directory()?;
    Ok((merged.segment, merged.scratch))
}
